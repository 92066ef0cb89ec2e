import Foundation
import TestSupport
import Testing

@Suite("Engine: forwarding", .serialized)
struct ForwardingEngineTests {
    @Test("exact bytes: origin-form upstream, Host from the target, hop-by-hop removed, order and case kept")
    func exactRequestBytes() throws {
        let origin = try FixtureOrigin()
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let response = try proxy.exchange(
            "GET \(origin.url)/v1/items?limit=20 HTTP/1.1\r\nHost: \(origin.authority)\r\nUser-Agent: test/1\r\n"
                + "Connection: keep-alive, X-Hop\r\nX-Hop: must-not-arrive\r\nKeep-Alive: timeout=5\r\n"
                + "Proxy-Connection: keep-alive\r\nTE: trailers\r\nx-lower: Case Kept\r\nX-Test-Id: exact\r\n\r\n")
        #expect(response?.status == 200)
        #expect(response?.bodyText == "target=/v1/items?limit=20 id=exact body=0")
        let arrived = try #require(origin.requests.first)
        let id = try #require(response?.header("x-request-id"), "the proxy adds a request id, the same both ways")
        #expect(
            arrived.rawHeadText == "GET /v1/items?limit=20 HTTP/1.1\r\nHost: \(origin.authority)\r\nUser-Agent: test/1\r\n"
                + "x-lower: Case Kept\r\nX-Test-Id: exact\r\nX-Request-ID: \(id)\r\n\r\n")
    }

    @Test("exact bytes back to the client: the origin's head minus hop-by-hop fields")
    func exactResponseBytes() throws {
        let origin = try FixtureOrigin { connection in
            guard connection.readRequest() != nil else { return }
            connection.send(
                "HTTP/1.1 201 Created\r\nX-B: 2\r\nConnection: X-Secret-Hop\r\nX-Secret-Hop: 1\r\nx-a: One\r\nContent-Length: 2\r\n\r\nok")
        }
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let socket = try proxy.connect()
        try socket.send("GET \(origin.url)/ HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        let response = try #require(try HTTPReader(socket).readResponse())
        let id = try #require(response.header("x-request-id"))
        #expect(
            String(decoding: response.rawHead, as: UTF8.self)
                == "HTTP/1.1 201 Created\r\nX-B: 2\r\nx-a: One\r\nContent-Length: 2\r\nX-Request-ID: \(id)\r\n\r\n")
        #expect(response.bodyText == "ok")
    }

    @Test("with an absolute-form target the client's Host is replaced by the target's authority; two Host fields are 400")
    func hostReplaced() throws {
        let origin = try FixtureOrigin()
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        // RFC 9112 §3.2.2: the target's authority wins. Node's http.request through a proxy sends the
        // proxy's own address as Host; that must not be a 400, and must not reach the origin either.
        let response = try proxy.exchange("GET \(origin.url)/node HTTP/1.1\r\nHost: 127.0.0.1:\(proxy.port)\r\n\r\n")
        #expect(response?.status == 200)
        #expect(origin.requests.first?.headers("host") == [origin.authority])
        let second = try proxy.exchange("GET \(origin.url)/ HTTP/1.1\r\nHost: \(origin.authority)\r\nHost: \(origin.authority)\r\n\r\n")
        #expect(second?.status == 400)
        #expect(origin.requests.count == 1, "the request with two Host fields never left the proxy")
    }

    @Test("an origin-form request to the proxy gets a 400 that says how to use a proxy")
    func originForm() throws {
        let proxy = try ProxyHarness()
        defer { proxy.stop() }
        let response = try #require(try proxy.exchange("GET /index.html HTTP/1.1\r\nHost: localhost\r\n\r\n"))
        #expect(response.status == 400)
        #expect(response.header("content-type") == "application/json")
        #expect(response.bodyText.contains("curl -x http://HOST:PORT") && response.bodyText.contains("http_proxy=http://HOST:PORT"))
    }

    static let smuggling: [(String, String)] = [
        ("CL.TE", "Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG"),
        ("TE.CL", "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n8\r\nSMUGGLED\r\n0\r\n\r\n"),
        ("TE obfuscated", "Transfer-Encoding: xchunked\r\n\r\n"),
        ("TE space before colon", "Transfer-Encoding : chunked\r\n\r\n"),
        ("differing CL", "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"),
        ("obs-fold", "X-A: b\r\n  folded\r\n\r\n"),
        ("bare LF", "X-A: b\n\r\n"),
        ("bad chunk size", "Transfer-Encoding: chunked\r\n\r\nzz\r\n"),
    ]

    @Test("smuggling vectors get 400, the connection closes, and the origin never sees a byte", arguments: smuggling)
    func smugglingVectors(_ name: String, _ tail: String) throws {
        let origin = try FixtureOrigin()
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let socket = try proxy.connect()
        try socket.send(
            "POST \(origin.url)/ HTTP/1.1\r\nHost: \(origin.authority)\r\n" + tail
                + "GET \(origin.url)/smuggled HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        let reader = HTTPReader(socket)
        let response = try #require(try reader.readResponse(), "\(name)")
        #expect(response.status == 400, "\(name)")
        #expect(response.header("connection") == "close", "\(name)")
        #expect(reader.readUntilClose().isEmpty, "\(name): nothing after the 400")
        // A bad chunk size is only seen after the head went upstream; then the origin must not
        // have received a complete request (it reads a cut body).
        #expect(!origin.requests.contains { $0.target == "/smuggled" }, "\(name)")
        if name != "bad chunk size" { #expect(origin.requests.isEmpty, "\(name)") }
    }

    @Test("a chunked upload is decoded and re-framed; the origin gets the same bytes")
    func chunkedUpload() throws {
        let origin = try FixtureOrigin()
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let response = try proxy.exchange(
            "POST \(origin.url)/up HTTP/1.1\r\nHost: \(origin.authority)\r\n"
                + "Transfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: dropped\r\n\r\n")
        #expect(response?.bodyText == "target=/up id= body=11")
        let arrived = try #require(origin.requests.first)
        #expect(arrived.header("transfer-encoding") == "chunked")
        #expect(arrived.header("content-length") == nil)
        #expect(String(decoding: arrived.body, as: UTF8.self) == "hello world")
    }

    @Test("a chunked response reaches an HTTP/1.1 client chunked and an HTTP/1.0 client close-delimited")
    func chunkedResponse() throws {
        let origin = try FixtureOrigin { connection in
            while connection.readRequest() != nil {
                connection.send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n4\r\ndefg\r\n0\r\nX-T: 1\r\n\r\n")
            }
        }
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let modern = try #require(try proxy.exchange("GET \(origin.url)/ HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n"))
        #expect(modern.header("transfer-encoding") == "chunked")
        #expect(modern.bodyText == "abcdefg")

        let socket = try proxy.connect()
        try socket.send("GET \(origin.url)/ HTTP/1.0\r\nHost: \(origin.authority)\r\n\r\n")
        let reader = HTTPReader(socket)
        let old = try #require(try reader.readResponse())
        #expect(old.header("transfer-encoding") == nil)
        #expect(old.header("connection") == "close")
        #expect(old.bodyText == "abcdefg")
    }

    @Test("HEAD, 204 and 304 carry no body and the connection stays usable")
    func bodylessResponses() throws {
        let origin = try FixtureOrigin { connection in
            while let request = connection.readRequest() {
                switch request.target {
                case "/head": connection.send("HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n")
                case "/204": connection.send("HTTP/1.1 204 No Content\r\n\r\n")
                case "/304": connection.send("HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n")
                default: connection.respond(body: "last")
                }
            }
        }
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let socket = try proxy.connect()
        let reader = HTTPReader(socket)
        try socket.send("HEAD \(origin.url)/head HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        let head = try #require(try reader.readResponse(requestMethod: "HEAD"))
        #expect(head.header("content-length") == "1234")
        for path in ["/204", "/304"] {
            try socket.send("GET \(origin.url)\(path) HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
            let response = try #require(try reader.readResponse())
            #expect(response.status == Int(path.dropFirst()))
        }
        try socket.send("GET \(origin.url)/last HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        #expect(try reader.readResponse()?.bodyText == "last")
        #expect(origin.acceptedConnections == 1, "one pooled upstream connection served all four")
    }

    @Test("Expect: 100-continue: the interim 100 is relayed, then the body flows")
    func expectContinue() throws {
        let origin = try FixtureOrigin { connection in
            guard let head = try? connection.reader.readHeadBytes() else { return }
            let text = String(decoding: head, as: UTF8.self)
            guard text.contains("Expect: 100-continue") else { return connection.respond(status: 417, body: "no expect") }
            connection.send("HTTP/1.1 100 Continue\r\n\r\n")
            let body = (try? connection.reader.readExactly(5)) ?? []
            connection.respond(body: "got " + String(decoding: body, as: UTF8.self))
        }
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let socket = try proxy.connect()
        let reader = HTTPReader(socket)
        try socket.send("PUT \(origin.url)/ HTTP/1.1\r\nHost: \(origin.authority)\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        let interim = try #require(try reader.readResponse())
        #expect(interim.status == 100)
        try socket.send("hello")
        #expect(try reader.readResponse()?.bodyText == "got hello")
    }

    @Test("keep-alive on both sides: sequential requests share one upstream connection")
    func pooling() throws {
        let origin = try FixtureOrigin()
        let proxy = try ProxyHarness(threads: 1)
        defer { proxy.stop(); origin.stop() }
        for round in 0..<3 {
            let socket = try proxy.connect()
            let reader = HTTPReader(socket)
            for index in 0..<3 {
                try socket.send("GET \(origin.url)/\(round)/\(index) HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
                #expect(try reader.readResponse()?.bodyText == "target=/\(round)/\(index) id= body=0")
            }
        }
        #expect(origin.requests.count == 9)
        #expect(origin.acceptedConnections == 1)
    }

    @Test("pipelined requests are answered in order, each with its own response")
    func pipelining() throws {
        let origin = try FixtureOrigin()
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let socket = try proxy.connect()
        var batch = ""
        for index in 0..<5 {
            batch +=
                "POST \(origin.url)/p\(index) HTTP/1.1\r\nHost: \(origin.authority)\r\nContent-Length: \(index)\r\n\r\n"
                + String(repeating: "x", count: index)
        }
        try socket.send(batch)
        let reader = HTTPReader(socket)
        for index in 0..<5 {
            #expect(try reader.readResponse()?.bodyText == "target=/p\(index) id= body=\(index)")
        }
    }

    @Test("an HTTP/1.0 client without keep-alive gets Connection: close and a closed connection")
    func http10() throws {
        let origin = try FixtureOrigin()
        let proxy = try ProxyHarness()
        defer { proxy.stop(); origin.stop() }
        let socket = try proxy.connect()
        try socket.send("GET \(origin.url)/old HTTP/1.0\r\n\r\n")
        let reader = HTTPReader(socket)
        let response = try #require(try reader.readResponse())
        #expect(response.header("connection") == "close")
        #expect(response.bodyText == "target=/old id= body=0")
        #expect(reader.readUntilClose().isEmpty)
        #expect(origin.requests.first?.header("host") == origin.authority)
    }
}
