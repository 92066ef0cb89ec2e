import Foundation
import TestSupport
import Testing

private func get(_ origin: FixtureOrigin, _ path: String = "/") -> String {
    "GET \(origin.url)\(path) HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n"
}

@Suite("Engine: failures answer clearly and the proxy keeps serving", .serialized)
struct FailureEngineTests {
    @Test("a refused upstream is 502 JSON naming the origin; the same client connection serves the next request")
    func refused() throws {
        let closed = try TestListener()
        let closedPort = closed.port
        closed.close()  // bound, then closed: nothing listens there
        let healthy = try FixtureOrigin()
        let proxy = try ProxyHarness()
        defer { proxy.stop(); healthy.stop() }
        let socket = try proxy.connect()
        let reader = HTTPReader(socket)
        try socket.send("GET http://127.0.0.1:\(closedPort)/secret/path?token=abc HTTP/1.1\r\nHost: 127.0.0.1:\(closedPort)\r\n\r\n")
        let response = try #require(try reader.readResponse())
        #expect(response.status == 502)
        #expect(response.header("content-type") == "application/json")
        #expect(response.bodyText.contains("\"error\":\"upstream_refused\""))
        #expect(response.bodyText.contains("http://127.0.0.1:\(closedPort)"))
        #expect(!response.bodyText.contains("token") && !response.bodyText.contains("secret"), "never the path or query")
        try socket.send(get(healthy, "/after"))
        #expect(try reader.readResponse()?.bodyText == "target=/after id= body=0")
    }

    @Test("an upstream reset mid-body cuts the response: the client sees a closed connection, never a whole body")
    func resetMidBody() throws {
        let origin = try FixtureOrigin { connection in
            guard connection.readRequest() != nil else { return }
            connection.send("HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + String(repeating: "a", count: 1000))
            connection.socket.reset()
        }
        let chunkedOrigin = try FixtureOrigin { connection in
            guard connection.readRequest() != nil else { return }
            connection.send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
            connection.socket.close()
        }
        let healthy = try FixtureOrigin()
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop(); chunkedOrigin.stop(); healthy.stop() }

        let socket = try proxy.connect()
        try socket.send(get(origin))
        let response = try #require(try HTTPReader(socket).readResponse())
        #expect(response.status == 200)
        #expect(!response.complete)
        #expect(response.body.count < 100000)

        let chunkedSocket = try proxy.connect()
        try chunkedSocket.send(get(chunkedOrigin))
        let reader = HTTPReader(chunkedSocket)
        let head = try #require(try reader.readHeadBytes())
        #expect(String(decoding: head, as: UTF8.self).contains("Transfer-Encoding: chunked"))
        let rest = String(decoding: reader.readUntilClose(), as: UTF8.self)
        #expect(rest == "5\r\nhello\r\n", "left unterminated: no last chunk")

        #expect(try proxy.exchange(get(healthy))?.status == 200)
    }

    @Test("an origin that closes right after a whole body: bytes held back by backpressure still all arrive")
    func closeAfterCompleteBody() throws {
        let body = pseudoRandomBlock(count: 4 << 20, seed: 3)
        let origin = try FixtureOrigin { connection in
            guard connection.readRequest() != nil else { return }
            connection.send(Array("HTTP/1.1 200 OK\r\nContent-Length: \(body.count)\r\n\r\n".utf8) + body)
            connection.socket.close()
        }
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let socket = try proxy.connect()
        try socket.send(get(origin))
        usleep(300_000)  // let the origin finish and close while the client is not reading
        let response = try #require(try HTTPReader(socket).readResponse())
        #expect(response.complete)
        #expect(response.body == body)
    }

    @Test("an upstream that closes before any response byte is 502 upstream_closed")
    func closeBeforeHead() throws {
        let origin = try FixtureOrigin { connection in _ = connection.readRequest() }
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let response = try proxy.exchange(get(origin))
        #expect(response?.status == 502)
        #expect(response?.bodyText.contains("upstream_closed") == true)
    }

    @Test("a slow upstream is 504 after timeouts.upstream, and the proxy serves the next request")
    func slowUpstream() throws {
        let release = DispatchSemaphore(value: 0)
        let origin = try FixtureOrigin { connection in
            guard connection.readRequest() != nil else { return }
            _ = release.wait(timeout: .now() + 10)
        }
        let healthy = try FixtureOrigin()
        let proxy = try ProxyHarness { $0.timeouts.upstream = 300 }
        defer { release.signal(); proxy.stop(); origin.stop(); healthy.stop() }
        let socket = try proxy.connect()
        let reader = HTTPReader(socket)
        try socket.send(get(origin))
        let response = try #require(try reader.readResponse())
        #expect(response.status == 504)
        #expect(response.bodyText.contains("upstream_timeout"))
        try socket.send(get(healthy, "/next"))
        #expect(try reader.readResponse()?.bodyText == "target=/next id= body=0")
    }

    @Test("a connect that never completes is 502 connect_timeout")
    func connectTimeout() throws {
        // A listener with a full accept queue that never accepts: further SYNs are dropped, so
        // connect() hangs, all on loopback.
        // (The first connect fills the queue of one; it completes at once.)
        let stuck = try TestListener(backlog: 0)
        let filler = try TestSocket.connect(port: stuck.port)
        let proxy = try ProxyHarness { $0.timeouts.connect = 300 }
        defer { proxy.stop(); stuck.close(); filler.close() }
        let response = try proxy.exchange("GET http://127.0.0.1:\(stuck.port)/ HTTP/1.1\r\nHost: 127.0.0.1:\(stuck.port)\r\n\r\n")
        #expect(response?.status == 502)
        #expect(response?.bodyText.contains("connect_timeout") == true)
    }

    @Test("a request head that does not arrive within timeouts.client_header gets 408 and a closed connection (slowloris)")
    func slowloris() throws {
        let proxy = try ProxyHarness { $0.timeouts.clientHeader = 300 }
        defer { proxy.stop() }
        let socket = try proxy.connect()
        try socket.send("GET http://127.0.0.1:1/ HTTP/1.1\r\nX-Slow: ")
        let reader = HTTPReader(socket)
        let response = try #require(try reader.readResponse())
        #expect(response.status == 408)
        #expect(reader.readUntilClose().isEmpty)
        // A connection that never sends anything is closed without a response.
        let silent = try proxy.connect()
        #expect(silent.peerClosed())
    }

    @Test(
        "invalid upstream responses are 502 bad_upstream_response",
        arguments: [
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc",
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
            "HTTP/1.1 200 OK\nContent-Length: 3\n\nabc",
            "garbage\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX: a\r\n folded\r\n\r\n",
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
        ])
    func badUpstream(_ reply: String) throws {
        let origin = try FixtureOrigin { connection in
            guard connection.readRequest() != nil else { return }
            connection.send(reply)
            _ = try? connection.socket.receive()
        }
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let response = try proxy.exchange(get(origin))
        #expect(response?.status == 502)
        #expect(response?.bodyText.contains("bad_upstream_response") == true)
    }

    @Test("a flood of 1xx interim responses is cut off with 502")
    func informationalFlood() throws {
        let origin = try FixtureOrigin { connection in
            guard connection.readRequest() != nil else { return }
            connection.send(String(repeating: "HTTP/1.1 102 Processing\r\n\r\n", count: 50))
            _ = try? connection.socket.receive()
        }
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let socket = try proxy.connect()
        try socket.send(get(origin))
        let reader = HTTPReader(socket)
        var statuses: [Int] = []
        while let response = try? reader.readResponse() {
            statuses.append(response.status)
            if response.status >= 200 { break }
        }
        #expect(statuses.last == 502)
        #expect(statuses.filter { $0 == 102 }.count <= 16)
    }

    @Test("a body longer than its Content-Length is not forwarded past the length, and the connection is not reused")
    func bodyLongerThanLength() throws {
        let origin = try FixtureOrigin { connection in
            while connection.readRequest() != nil {
                connection.send("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcEXTRA-BYTES")
            }
        }
        let proxy = try ProxyHarness(threads: 1)
        defer { proxy.stop(); origin.stop() }
        let socket = try proxy.connect()
        let reader = HTTPReader(socket)
        try socket.send(get(origin))
        #expect(try reader.readResponse()?.bodyText == "abc")
        try socket.send(get(origin))
        #expect(try reader.readResponse()?.bodyText == "abc", "a fresh upstream connection, not the dirty one")
        #expect(origin.acceptedConnections == 2)
    }
}
