import Foundation
import Synchronization
import TestSupport
import Testing

private func get(_ origin: FixtureOrigin, _ path: String = "/", id: String = "") -> String {
    "GET \(origin.url)\(path) HTTP/1.1\r\nHost: \(origin.authority)\r\nX-Test-Id: \(id)\r\n\r\n"
}

/// Polls (bounded) until the proxy has closed every client connection: a connection that a
/// hostile client abandoned must not stay open, or a few thousand of them would exhaust the proxy.
private func waitForNoClientConnections(_ proxy: ProxyHarness) -> Int {
    var open = proxy.server.configuration.metrics.clientConnections.load(ordering: .relaxed)
    for _ in 0..<100 where open != 0 {
        usleep(20_000)
        open = proxy.server.configuration.metrics.clientConnections.load(ordering: .relaxed)
    }
    return open
}

@Suite("Hostile clients: slow, vanishing, flooding, malformed", .serialized)
struct HostileClientTests {
    @Test("a request body that stalls (slowloris body) is cut after timeouts.idle; the origin never gets a complete request")
    func slowBody() throws {
        let origin = try FixtureOrigin()
        let proxy = try ProxyHarness { $0.timeouts.idle = 300 }
        defer { proxy.stop(); origin.stop() }
        let socket = try proxy.connect()
        try socket.send("POST \(origin.url)/upload HTTP/1.1\r\nHost: \(origin.authority)\r\nContent-Length: 100\r\n\r\n0123456789")
        let answer = String(decoding: socket.receiveUntilClose(), as: UTF8.self)
        #expect(answer.isEmpty || answer.hasPrefix("HTTP/1.1 408 "), "closed, at most with a 408: \(answer.prefix(80))")
        #expect(origin.requests.isEmpty, "a request with 10 of its 100 body bytes is never complete upstream")
        #expect(waitForNoClientConnections(proxy) == 0)
        #expect(try proxy.exchange(get(origin, "/after"))?.bodyText == "target=/after id= body=0")
    }

    /// Phases: inside the head, after the head before the body, inside the body, waiting for the
    /// response, inside the response body (the client reads a little and leaves).
    @Test(
        "a client that disconnects at every phase leaves nothing behind, and the proxy serves the next client",
        arguments: ["mid-head", "before-body", "mid-body", "awaiting-response", "mid-response"])
    func disconnectAtEveryPhase(_ phase: String) throws {
        let upstreamClosed = Atomic<Int>(0)
        let origin = try FixtureOrigin { connection in
            while let request = connection.readRequest() {
                if request.target.hasPrefix("/slow") { usleep(300_000) }
                if request.target.hasPrefix("/big") {
                    // 8 MiB: far more than socket buffers and watermarks hold, so the proxy is
                    // still streaming when the client goes away.
                    connection.respond(body: [UInt8](repeating: 0x61, count: 8 << 20))
                } else {
                    connection.respond(body: "target=\(request.target)")
                }
            }
            upstreamClosed.add(1, ordering: .relaxed)
        }
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let socket = try proxy.connect()
        let post = "POST \(origin.url)/upload HTTP/1.1\r\nHost: \(origin.authority)\r\nContent-Length: 1000\r\n\r\n"
        switch phase {
        case "mid-head": try socket.send(String(post.prefix(30)))
        case "before-body": try socket.send(post)
        case "mid-body": try socket.send(post + String(repeating: "x", count: 500))
        case "awaiting-response": try socket.send(get(origin, "/slow"))
        default:
            try socket.send(get(origin, "/big"))
            let reader = HTTPReader(socket)
            _ = try reader.readHeadBytes()
            _ = try reader.readExactly(64 * 1024)
        }
        usleep(50_000)
        socket.reset()
        #expect(waitForNoClientConnections(proxy) == 0, "the abandoned client connection is closed")
        if phase == "mid-response" {
            // The upstream connection was mid-body: it cannot go back to the pool and is closed.
            for _ in 0..<100 where upstreamClosed.load(ordering: .relaxed) == 0 { usleep(20_000) }
            #expect(upstreamClosed.load(ordering: .relaxed) == 1)
        }
        #expect(origin.requests.allSatisfy { $0.target != "/upload" }, "an incomplete upload is never a complete request upstream")
        #expect(try proxy.exchange(get(origin, "/after"))?.bodyText == "target=/after")
    }

    @Test("a pipelining flood from a client that does not read stalls at the watermark, then every response arrives in order")
    func pipeliningFlood() throws {
        let body = String(repeating: "r", count: 16 * 1024)
        let origin = try FixtureOrigin { connection in
            while let request = connection.readRequest() {
                connection.respond(headers: [("X-Echo-Id", request.header("x-test-id") ?? "")], body: body)
            }
        }
        let proxy = try ProxyHarness(threads: 1)
        defer { proxy.stop(); origin.stop() }
        let socket = try proxy.connect()
        let count = 2_000
        var flood = ""
        for index in 0..<count { flood += get(origin, "/p", id: "\(index)") }
        // 2 000 requests in as few segments as the kernel takes; the sender blocks once the proxy
        // stops reading, so it runs on its own thread.
        let sent = DispatchSemaphore(value: 0)
        Thread.detachNewThread { [flood] in
            try? socket.send(flood)
            sent.signal()
        }
        usleep(1_000_000)
        let forwardedWhileStalled = origin.requests.count
        print("pipelining flood: \(forwardedWhileStalled) of \(count) requests forwarded while the client read nothing")
        // 32 MiB of responses are owed; with the client not reading, the proxy holds at most its
        // watermarks plus socket buffers (about 4.4 MiB, 274 requests, measured here; loopback buffers
        // autotune, hence the margin), so only a small share of the requests may have gone upstream.
        #expect(forwardedWhileStalled < 800, "backpressure: \(forwardedWhileStalled) of \(count) forwarded while the client read nothing")
        let reader = HTTPReader(socket)
        var inOrder = 0
        for index in 0..<count {
            guard let response = try reader.readResponse() else { break }
            if response.header("x-echo-id") == "\(index)" && response.body.count == body.utf8.count { inOrder += 1 }
        }
        #expect(inOrder == count)
        #expect(sent.wait(timeout: .now() + 10) == .success)
    }

    @Test("request heads at each limit pass; one byte or field past it is refused (431/414) and nothing goes upstream")
    func headLimits() throws {
        let origin = try FixtureOrigin { connection in
            while let request = connection.readRequest() {
                connection.respond(body: "fields=\(request.headers.count)")
            }
        }
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }

        // Head size: 64 KiB including the request line and the blank line.
        let requestLine = "GET \(origin.url)/ HTTP/1.1\r\nHost: \(origin.authority)\r\n"
        func headOfSize(_ size: Int) -> String {
            let padding = size - requestLine.utf8.count - "X-Pad: \r\n\r\n".utf8.count
            return requestLine + "X-Pad: " + String(repeating: "p", count: padding) + "\r\n\r\n"
        }
        #expect(headOfSize(65_536).utf8.count == 65_536)
        #expect(try proxy.exchange(headOfSize(65_536))?.status == 200)
        let tooLarge = try proxy.exchange(headOfSize(65_537))
        #expect(tooLarge?.status == 431)
        #expect(tooLarge?.bodyText.contains("head_too_large") == true)

        // Field count: 100 including Host.
        func withFields(_ count: Int) -> String {
            var head = requestLine
            for index in 1..<count { head += "X-F\(index): v\r\n" }
            return head + "\r\n"
        }
        #expect(try proxy.exchange(withFields(100))?.status == 200)
        let tooMany = try proxy.exchange(withFields(101))
        #expect(tooMany?.status == 431)
        #expect(tooMany?.bodyText.contains("too_many_headers") == true)

        // Target: 8 KiB.
        func target(_ length: Int) -> String {
            let prefix = "\(origin.url)/"
            return prefix + String(repeating: "t", count: length - prefix.utf8.count)
        }
        #expect(try proxy.exchange("GET \(target(8192)) HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")?.status == 200)
        let tooLong = try proxy.exchange("GET \(target(8193)) HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        #expect(tooLong?.status == 414)
        #expect(tooLong?.bodyText.contains("target_too_long") == true)
        #expect(origin.requests.count == 3, "only the three requests within the limits arrived")
    }

    @Test(
        "control bytes, NUL and non-ASCII where the grammar forbids them are 400 and nothing goes upstream",
        arguments: [
            "GET {url}/a\u{01}b HTTP/1.1\r\nHost: {host}\r\n\r\n",
            "GET {url}/caf\u{e9} HTTP/1.1\r\nHost: {host}\r\n\r\n",
            "GET {url}/ HTTP/1.1\r\nHost: {host}\r\nX-Ctl: a\u{07}b\r\n\r\n",
            "GET {url}/ HTTP/1.1\r\nHost: {host}\r\nX-Nul: a\u{00}b\r\n\r\n",
            "GET {url}/ HTTP/1.1\r\nHost: {host}\r\nX-Del: a\u{7f}b\r\n\r\n",
            "GET {url}/ HTTP/1.1\r\nHost: {host}\r\nX\u{e9}: v\r\n\r\n",
            "GET {url}/ HTTP/1.1\r\nHost: {host}\r\nX-Bare-CR: a\rb\r\n\r\n",
            "GET {url}/ HTTP/1.1\r\nHost: {host}\r\n X-Leading-Space: v\r\n\r\n",
            "GET {url}/ HTTP/1.1\r\nHost: {host}\r\nX-Space-Before-Colon : v\r\n\r\n",
            "GET  {url}/ HTTP/1.1\r\nHost: {host}\r\n\r\n",
            "GET {url}/ HTTP/1.1 \r\nHost: {host}\r\n\r\n",
            "GET {url}/ HTTP/1.10\r\nHost: {host}\r\n\r\n",
            "G\u{e9}T {url}/ HTTP/1.1\r\nHost: {host}\r\n\r\n",
            "GET http://bücher.example/ HTTP/1.1\r\nHost: bücher.example\r\n\r\n",
            "GET http://[::1/ HTTP/1.1\r\nHost: [::1\r\n\r\n",
            "GET http://::1:80/ HTTP/1.1\r\nHost: ::1:80\r\n\r\n",
            "GET http://[fe80::1%25eth0]/ HTTP/1.1\r\nHost: [fe80::1%25eth0]\r\n\r\n",
            "GET http://127.0.0.1%00.example/ HTTP/1.1\r\nHost: 127.0.0.1%00.example\r\n\r\n",
            "GET http://127.0.0.1:99999/ HTTP/1.1\r\nHost: 127.0.0.1:99999\r\n\r\n",
            "GET {url}/ HTTP/1.1\r\n\r\n",
            "GET {url}/ HTTP/1.1\r\nHost: {host}\r\nHost: {host}\r\n\r\n",
            "GET {url}/ HTTP/1.1\r\nHost: {host}\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ])
    func malformedBytes(_ template: String) throws {
        let origin = try FixtureOrigin()
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let request = template.replacingOccurrences(of: "{url}", with: origin.url).replacingOccurrences(of: "{host}", with: origin.authority)
        let socket = try proxy.connect()
        // Latin-1 bytes as written (é = 0xE9 alone: invalid UTF-8), except the IDN case in UTF-8.
        let bytes: [UInt8] = request.contains("bücher") ? Array(request.utf8) : request.unicodeScalars.map { UInt8(truncatingIfNeeded: $0.value) }
        try socket.send(bytes)
        let reader = HTTPReader(socket)
        let response = try #require(try reader.readResponse())
        #expect(response.status == 400)
        #expect(response.header("content-type") == "application/json")
        #expect(reader.readUntilClose().isEmpty, "the connection closes after a malformed head")
        #expect(origin.requests.isEmpty && origin.acceptedConnections == 0)
        #expect(try proxy.exchange(get(origin, "/after"))?.status == 200)
    }

    @Test("obs-text (bytes 0x80-0xFF) in a field value is allowed by RFC 9112 and forwarded byte for byte")
    func obsTextForwarded() throws {
        let origin = try FixtureOrigin { connection in
            while let request = connection.readRequest() {
                let expected = Array("X-Latin: caf".utf8) + [0xE9, 0x20, 0xFF, 13, 10]
                let found = request.rawHead.indices.contains { start in request.rawHead[start...].starts(with: expected) }
                connection.respond(body: found ? "exact" : "changed")
            }
        }
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let socket = try proxy.connect()
        try socket.send(
            Array("GET \(origin.url)/ HTTP/1.1\r\nHost: \(origin.authority)\r\nX-Latin: caf".utf8) + [0xE9, 0x20, 0xFF] + Array("\r\n\r\n".utf8))
        #expect(try HTTPReader(socket).readResponse()?.bodyText == "exact")
    }

    @Test("targets: %00 stays encoded, userinfo tricks resolve to the authority's host, IPv6 literals are origins of their own")
    func hostileTargets() throws {
        let origin = try FixtureOrigin()
        let decoy = try FixtureOrigin(host: "127.0.0.2")
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop(); decoy.stop() }

        // %00 is valid URI syntax: forwarded as the same three bytes, never decoded into a NUL.
        let nul = try proxy.exchange("GET \(origin.url)/a%00b?q=%00 HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        #expect(nul?.bodyText == "target=/a%00b?q=%00 id= body=0")

        // userinfo: `http://127.0.0.2:P@127.0.0.1:Q/` goes to 127.0.0.1:Q (the host after the last @),
        // and the userinfo itself is not forwarded.
        let trick = "http://\(decoy.authority)@\(origin.authority)/trick"
        let response = try proxy.exchange("GET \(trick) HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        #expect(response?.bodyText == "target=/trick id= body=0")
        #expect(decoy.acceptedConnections == 0)
        #expect(origin.requests.last?.header("authorization") == nil)

        // A Host naming the decoy while the target names the origin: the target wins (RFC 9112
        // §3.2.2), the origin gets its own authority as Host, and the decoy gets nothing.
        let confused = try proxy.exchange("GET \(origin.url)/confused HTTP/1.1\r\nHost: \(decoy.authority)\r\n\r\n")
        #expect(confused?.status == 200)
        #expect(origin.requests.last?.target == "/confused")
        #expect(origin.requests.last?.headers("host") == [origin.authority])
        #expect(decoy.acceptedConnections == 0)

        // An IPv6 literal with nothing listening: a clean 502 naming the bracketed origin.
        let closed = try TestListener()
        let port = closed.port
        closed.close()
        let v6 = try proxy.exchange("GET http://[::1]:\(port)/ HTTP/1.1\r\nHost: [::1]:\(port)\r\n\r\n")
        #expect(v6?.status == 502)
        #expect(v6?.bodyText.contains("http://[::1]:\(port)") == true)
        // A punycode (IDN) name that does not resolve here: 502, never a crash or a hang.
        let idn = try proxy.exchange("GET http://xn--bcher-kva.invalid/ HTTP/1.1\r\nHost: xn--bcher-kva.invalid\r\n\r\n")
        #expect(idn?.status == 502)
    }
}
