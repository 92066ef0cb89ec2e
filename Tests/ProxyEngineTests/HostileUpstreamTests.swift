import Foundation
import Synchronization
import TestSupport
import Testing

private func get(_ origin: FixtureOrigin, _ path: String = "/") -> String {
    "GET \(origin.url)\(path) HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n"
}

/// An origin that answers every request with `reply`, then waits for the proxy to hang up.
private func replying(_ reply: [UInt8]) throws -> FixtureOrigin {
    try FixtureOrigin { connection in
        guard connection.readRequest() != nil else { return }
        connection.send(reply)
        _ = try? connection.socket.receive()
    }
}

@Suite("Hostile upstreams: garbage, endless, lying, slow", .serialized)
struct HostileUpstreamTests {
    @Test(
        "a status line without a reason phrase is accepted and relayed (RFC 9112 §4 makes the reason optional)",
        arguments: [
            "HTTP/1.1 200 \r\nContent-Length: 2\r\n\r\nok",
            "HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok",
        ])
    func missingReason(_ reply: String) throws {
        let origin = try replying(Array(reply.utf8))
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let response = try proxy.exchange(get(origin))
        #expect(response?.status == 200)
        #expect(response?.bodyText == "ok")
    }

    @Test(
        "garbage status lines are 502 bad_upstream_response, and the proxy serves the next request",
        arguments: [
            "HTTP/1.1 2000 OK\r\n\r\n", "HTTP/1.1 20 OK\r\n\r\n", "HTTP/1.1 099 Low\r\n\r\n", "HTTP/1.1 -20 OK\r\n\r\n",
            "HTTP/2 200 OK\r\n\r\n", "ICY 200 OK\r\n\r\n", "HTTP/1.1 200 O\u{01}K\r\n\r\n", "http/1.1 200 OK\r\n\r\n",
            "HTTP/1.1  200 OK\r\n\r\n", "\u{00}\u{00}\u{00}\u{00}\r\n\r\n", "HTTP/1.1 200 OK\r\nBad Name: v\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        ])
    func garbageStatus(_ reply: String) throws {
        let origin = try replying(reply.unicodeScalars.map { UInt8(truncatingIfNeeded: $0.value) })
        let healthy = try FixtureOrigin()
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop(); healthy.stop() }
        let socket = try proxy.connect()
        let reader = HTTPReader(socket)
        try socket.send(get(origin))
        let response = try #require(try reader.readResponse())
        #expect(response.status == 502)
        #expect(response.bodyText.contains("bad_upstream_response"))
        try socket.send(get(healthy, "/next"))
        #expect(try reader.readResponse()?.status == 200)
    }

    @Test("an upstream head that never ends is cut at 64 KiB with 502; the upstream connection is closed")
    func endlessHeaders() throws {
        let hungUp = Atomic<Bool>(false)
        let origin = try FixtureOrigin { connection in
            guard connection.readRequest() != nil else { return }
            connection.send("HTTP/1.1 200 OK\r\n")
            let line = Array("X-Endless: \(String(repeating: "e", count: 100))\r\n".utf8)
            for _ in 0..<100_000 {
                if (try? connection.socket.send(line)) == nil {
                    hungUp.store(true, ordering: .relaxed)
                    return
                }
            }
        }
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let response = try proxy.exchange(get(origin))
        #expect(response?.status == 502)
        #expect(response?.bodyText.contains("bad_upstream_response") == true)
        for _ in 0..<100 where !hungUp.load(ordering: .relaxed) { usleep(20_000) }
        let closed = hungUp.load(ordering: .relaxed)
        #expect(closed, "the proxy stops reading and closes instead of buffering forever")
    }

    @Test(
        "bad chunk sizes mid-response cut the response (never a clean end), and a fresh connection works",
        arguments: [
            "zz\r\nhello\r\n0\r\n\r\n", "-5\r\nhello\r\n0\r\n\r\n", "ffffffffffffffffffff\r\nx\r\n0\r\n\r\n",
            "5\r\nhello world\r\n0\r\n\r\n", "5\nhello\r\n0\r\n\r\n", "0x5\r\nhello\r\n0\r\n\r\n",
        ])
    func badChunks(_ body: String) throws {
        let origin = try replying(Array(("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body).utf8))
        let healthy = try FixtureOrigin()
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop(); healthy.stop() }
        let socket = try proxy.connect()
        try socket.send(get(origin))
        let reader = HTTPReader(socket)
        let head = String(decoding: try #require(try reader.readHeadBytes()), as: UTF8.self)
        #expect(head.hasPrefix("HTTP/1.1 200 "))
        let rest = String(decoding: reader.readUntilClose(), as: UTF8.self)
        #expect(!rest.hasSuffix("0\r\n\r\n"), "the client never sees a last chunk the origin did not send validly: \(rest.debugDescription)")
        #expect(try proxy.exchange(get(healthy))?.status == 200)
    }

    @Test("a body shorter than its Content-Length followed by a clean close is cut, not padded or completed")
    func bodyShorterThanLength() throws {
        let origin = try FixtureOrigin { connection in
            guard connection.readRequest() != nil else { return }
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        }
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let socket = try proxy.connect()
        try socket.send(get(origin))
        let response = try #require(try HTTPReader(socket).readResponse())
        #expect(response.status == 200)
        #expect(!response.complete)
        #expect(response.bodyText == "abc")
    }

    @Test("a response head dripped a byte at a time past timeouts.upstream is 504: the deadline is for the whole head")
    func slowDripHead() throws {
        let origin = try FixtureOrigin { connection in
            guard connection.readRequest() != nil else { return }
            for byte in Array("HTTP/1.1 200 OK\r\nX-Drip: ".utf8) + Array(repeating: UInt8(ascii: "d"), count: 200) {
                if (try? connection.socket.send([byte])) == nil { return }
                usleep(50_000)
            }
        }
        let proxy = try ProxyHarness { $0.timeouts.upstream = 500 }
        defer { proxy.stop(); origin.stop() }
        let response = try proxy.exchange(get(origin))
        #expect(response?.status == 504)
        #expect(response?.bodyText.contains("upstream_timeout") == true)
    }

    @Test("a body dripped slowly but steadily (each gap under timeouts.idle) arrives whole")
    func slowDripBody() throws {
        let origin = try FixtureOrigin { connection in
            guard connection.readRequest() != nil else { return }
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n")
            for _ in 0..<20 {
                connection.send("s")
                usleep(30_000)
            }
        }
        let proxy = try ProxyHarness { $0.timeouts.idle = 2_000 }
        defer { proxy.stop(); origin.stop() }
        let response = try proxy.exchange(get(origin))
        #expect(response?.complete == true)
        #expect(response?.bodyText == String(repeating: "s", count: 20))
    }

    @Test("an upstream that accepts TCP but never answers the TLS handshake is 502 connect_timeout; others are served meanwhile")
    func stalledTLSHandshake() throws {
        let stalled = try TestListener()
        let holder = Thread { while let socket = stalled.accept() { _ = try? socket.receive(); Thread.sleep(forTimeInterval: 5) } }
        holder.start()
        let healthy = try FixtureOrigin()
        let proxy = try ProxyHarness { $0.timeouts.connect = 500 }
        defer { proxy.stop(); stalled.close(); healthy.stop() }
        let stuck = try proxy.connect()
        try stuck.send("GET https://127.0.0.1:\(stalled.port)/ HTTP/1.1\r\nHost: 127.0.0.1:\(stalled.port)\r\n\r\n")
        // While that handshake hangs, the same worker keeps serving.
        #expect(try proxy.exchange(get(healthy))?.status == 200)
        let response = try #require(try HTTPReader(stuck).readResponse())
        #expect(response.status == 502)
        #expect(response.bodyText.contains("connect_timeout"))
    }
}

@Suite("Hostile upstreams: hanging up or answering while the request body is still coming", .serialized)
struct EarlyUpstreamTests {
    static let bodySize = 4 << 20

    static func upload(_ origin: FixtureOrigin) -> [UInt8] {
        Array("POST \(origin.url)/upload HTTP/1.1\r\nHost: \(origin.authority)\r\nContent-Length: \(bodySize)\r\n\r\n".utf8)
    }

    @Test("an upstream that hangs up after the head, mid-upload: the client gets 502 or a closed connection, and the proxy serves the next")
    func hangUpMidUpload() throws {
        let origin = try FixtureOrigin { connection in
            _ = try? connection.reader.readHeadBytes()
            connection.socket.reset()
        }
        let healthy = try FixtureOrigin()
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop(); healthy.stop() }
        let socket = try proxy.connect()
        let sent = DispatchSemaphore(value: 0)
        let request = Self.upload(origin) + [UInt8](repeating: 0x62, count: Self.bodySize)
        Thread.detachNewThread {
            try? socket.send(request)  // fails once the proxy gives up on this connection
            sent.signal()
        }
        let answer = String(decoding: socket.receiveUntilClose(), as: UTF8.self)
        #expect(answer.isEmpty || answer.hasPrefix("HTTP/1.1 502 "), "\(answer.prefix(60))")
        #expect(sent.wait(timeout: .now() + 10) == .success, "the sender is not left blocked")
        #expect(try proxy.exchange("GET \(healthy.url)/next HTTP/1.1\r\nHost: \(healthy.authority)\r\n\r\n")?.status == 200)
    }

    @Test("an upstream that answers 413 before reading the upload: the client gets the 413, then the connection closes (its body is unread)")
    func earlyResponse() throws {
        let origin = try FixtureOrigin { connection in
            _ = try? connection.reader.readHeadBytes()
            connection.respond(status: 413, headers: [("Connection", "close")], body: "too large")
            usleep(200_000)
            connection.socket.close()
        }
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let socket = try proxy.connect()
        let request = Self.upload(origin) + [UInt8](repeating: 0x62, count: Self.bodySize)
        Thread.detachNewThread { try? socket.send(request) }
        let reader = HTTPReader(socket)
        let response = try #require(try reader.readResponse(), "the early answer is relayed")
        #expect(response.status == 413)
        #expect(response.bodyText == "too large")
        #expect(reader.readUntilClose().isEmpty, "no second response: the unread body cannot be taken for a request")
    }
}
