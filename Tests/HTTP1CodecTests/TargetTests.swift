import Testing

@testable import HTTP1Codec

@Suite("Request targets and origins")
struct TargetTests {
    @Test("origins are normalized: scheme, lowercase host, trailing dot, default port")
    func normalization() throws {
        #expect(try Origin.parse("https://API.Example.:443") == Origin.parse("https://api.example"))
        #expect(try Origin.parse("http://a.example:80/") == Origin.parse("http://a.example"))
        #expect(try Origin.parse("HTTP://a.example").description == "http://a.example", "RFC 6454: the default port left out")
        #expect(try Origin.parse("HTTP://a.example").withPort == "http://a.example:80")
        #expect(try Origin.parse("https://a.example:8443").description == "https://a.example:8443")
        #expect(try Origin.parse("https://a.example:8443").authority == "a.example:8443")
        #expect(try Origin.parse("https://a.example:443").authority == "a.example")
        #expect(try Origin.parse("http://[0:0::1]:8080") == Origin.parse("http://[::1]:8080"))
        #expect(try Origin.parse("http://[::1]:8080").hostForLookup == "::1")
        #expect(try Origin.parse("https://a.example") != Origin.parse("http://a.example:443"))
    }

    @Test("internationalized hosts in config become punycode (RFC 3492 test vectors)")
    func idna() throws {
        #expect(Punycode.toASCII(label: "bücher") == "xn--bcher-kva")
        #expect(Punycode.toASCII(label: "München") == "xn--mnchen-3ya")
        #expect(Punycode.toASCII(label: "例え") == "xn--r8jz45g")
        #expect(Punycode.toASCII(label: "ascii") == "ascii")
        #expect(try Origin.parse("https://Bücher.example:8443") == Origin.parse("https://xn--bcher-kva.example:8443"))
        #expect(try Origin.parse("https://例え.テスト").host == "xn--r8jz45g.xn--zckzah")
    }

    @Test("absolute-form targets split into origin, path+query and userinfo")
    func absoluteForm() throws {
        let target = try RequestTarget.parse("http://user:pw@Host.Example:8080/p/a?q=1", method: "GET")
        guard case .absolute(let origin, let path, let userinfo) = target else {
            Issue.record("expected absolute-form")
            return
        }
        #expect(origin.description == "http://host.example:8080")
        #expect(path == "/p/a?q=1")
        #expect(userinfo == "user:pw")
        #expect(
            try RequestTarget.parse("http://a.example", method: "GET")
                == .absolute(origin: Origin.parse("http://a.example"), pathAndQuery: "/", userinfo: nil))
        #expect(
            try RequestTarget.parse("http://a.example?x=1", method: "GET")
                == .absolute(origin: Origin.parse("http://a.example"), pathAndQuery: "/?x=1", userinfo: nil))
    }

    @Test("CONNECT takes authority-form with a port")
    func authorityForm() throws {
        guard case .authority(let host, let port) = try RequestTarget.parse("API.example:443", method: "CONNECT") else {
            Issue.record("expected authority-form")
            return
        }
        #expect(host.normalized == "api.example")
        #expect(port == 443)
        #expect(throws: TargetParseError.self) { try RequestTarget.parse("api.example", method: "CONNECT") }
    }

    @Test("origin-form and asterisk-form are recognized (and refused by the proxy)")
    func otherForms() throws {
        #expect(try RequestTarget.parse("/v1/items", method: "GET") == .origin(pathAndQuery: "/v1/items"))
        #expect(try RequestTarget.parse("*", method: "OPTIONS") == .asterisk)
    }

    @Test(
        "targets two parsers could read differently are refused",
        arguments: [
            "http://a.example:0/", "http://a.example:65536/", "http://a.example:+80/", "http://a.example:8a/",
            "http://a.example:/", "http://%61.example/", "http://a..example/", "http:///path", "http://a.example/#frag",
            "http://2130706433/", "http://127.1/", "http://[::1/", "http://[fe80::1%25eth0]/", "http://a!b.example/",
            "ftp://a.example/", "http:/a.example/", "javascript://a/", "http://a.example\\@b.example/",
        ])
    func refused(_ target: String) {
        #expect(throws: TargetParseError.self, "\(target)") { try RequestTarget.parse(target, method: "GET") }
    }

    // WHATWG "ends in a number": a browser reads these as IPv4 (inet_aton style), a DNS-name
    // reading would not, so only the canonical dotted quad is accepted.
    @Test(
        "a host whose last label is a number must be a canonical dotted quad",
        arguments: [
            ("0x7f.0.0.1", nil), ("0x7f.1", nil), ("127.1", nil), ("2130706433", nil), ("1.2.3.0x4", nil),
            ("1.2.3.0X4", nil), ("a.0x", nil), ("example.123", nil), ("010.0.0.1", nil), ("1.2.3.04", nil),
            ("1.2.3.256", nil), ("1.2.3.4.5", nil), ("1.2.3.4..", nil), ("a..", nil), ("0x7f", nil),
            ("1.2.3.4", "1.2.3.4"), ("1.2.3.4.", "1.2.3.4"), ("127.0.0.1", "127.0.0.1"), ("0.0.0.0", "0.0.0.0"),
            ("0x7f.example", "0x7f.example"), ("a.0xg", "a.0xg"), ("123.example", "123.example"), ("a.1e5", "a.1e5"),
        ] as [(String, String?)])
    func endsInNumber(_ host: String, _ expected: String?) {
        let parsed = try? Host.parse(Substring(host))
        #expect(parsed?.normalized == expected, "\(host)")
    }

    @Test(
        "loopback is judged on the parsed host, never a text prefix",
        arguments: [
            ("http://127.0.0.1:8765", true), ("http://127.255.0.9", true), ("http://localhost:80", true),
            ("http://LOCALHOST.", true), ("http://[::1]:8080", true), ("http://[0:0::1]", true),
            ("http://127.evil.example", false), ("http://127.0.0.1.evil.example", false), ("http://localhost.evil.example", false),
            ("http://128.0.0.1", false), ("http://[::2]", false), ("http://[::ffff:127.0.0.1]", false), ("http://a.localhost", false),
        ])
    func loopback(_ origin: String, _ expected: Bool) throws {
        #expect(try Origin.parse(origin).isLoopback == expected, "\(origin)")
    }
}

@Suite("Hop-by-hop removal and re-serialization")
struct ForwardingTests {
    private func head(_ fields: [(String, String)], version: HTTPVersion = .http1_1) -> RequestHead {
        RequestHead(
            method: "GET", target: "http://a.example:8080/x", version: version,
            fields: HTTPFields(fields.map { HTTPField(name: $0.0, value: $0.1) }))
    }

    @Test("the upstream head has Host from the target, no hop-by-hop fields, rebuilt framing, the rest in order")
    func upstreamHead() throws {
        let origin = try Origin.parse("http://a.example:8080")
        let request = head([
            ("Host", "A.example:8080"), ("X-First", "1"), ("Connection", "keep-alive, X-Private"),
            ("X-Private", "secret-hop"), ("Keep-Alive", "timeout=5"), ("Proxy-Connection", "keep-alive"),
            ("Proxy-Authorization", "Basic cHJveHk="), ("TE", "trailers"), ("Trailer", "X-T"),
            ("Upgrade", "websocket"), ("Content-Length", "5"), ("x-last", "Two Words"),
        ])
        let forwarded = Forwarding.upstreamRequest(from: request, origin: origin, pathAndQuery: "/x", framing: .contentLength(5))
        #expect(forwarded.target == "/x")
        #expect(forwarded.version == .http1_1)
        #expect(
            forwarded.fields.storage == [
                HTTPField(name: "Host", value: "a.example:8080"), HTTPField(name: "X-First", value: "1"),
                HTTPField(name: "x-last", value: "Two Words"), HTTPField(name: "Content-Length", value: "5"),
            ])
        #expect(
            String(decoding: forwarded.serialized(), as: UTF8.self)
                == "GET /x HTTP/1.1\r\nHost: a.example:8080\r\nX-First: 1\r\nx-last: Two Words\r\nContent-Length: 5\r\n\r\n")
    }

    @Test("an upgrade request keeps Upgrade and says Connection: upgrade")
    func upgrade() throws {
        let origin = try Origin.parse("http://a.example:8080")
        let request = head([("Host", "a.example:8080"), ("Connection", "Upgrade"), ("Upgrade", "websocket"), ("Sec-WebSocket-Key", "k")])
        #expect(Forwarding.isUpgradeRequest(request))
        let forwarded = Forwarding.upstreamRequest(from: request, origin: origin, pathAndQuery: "/x", framing: .none, upgrade: true)
        #expect(forwarded.fields.first("upgrade") == "websocket")
        #expect(forwarded.fields.first("connection") == "upgrade")
        #expect(forwarded.fields.first("sec-websocket-key") == "k")
    }

    @Test(
        "only a WebSocket handshake is an upgrade the proxy relays; h2c and other protocols go as plain requests",
        arguments: [("websocket", true), ("WebSocket", true), ("h2c", false), ("websocket, h2c", false), ("TLS/1.2", false)])
    func upgradeProtocols(_ protocols: String, _ relayed: Bool) throws {
        let origin = try Origin.parse("http://a.example")
        let request = head([
            ("Host", "a.example"), ("Connection", "Upgrade, HTTP2-Settings"), ("Upgrade", protocols), ("HTTP2-Settings", "AAMAAABkAAQAoAAAAAIAAAAA"),
        ])
        #expect(Forwarding.isUpgradeRequest(request) == relayed)
        let forwarded = Forwarding.upstreamRequest(
            from: request, origin: origin, pathAndQuery: "/", framing: .none,
            upgrade: Forwarding.isUpgradeRequest(request))
        #expect(forwarded.fields.contains("upgrade") == relayed)
        #expect(!forwarded.fields.contains("http2-settings"), "hop-by-hop: listed in Connection")
    }

    @Test("chunked requests are re-framed as chunked")
    func chunkedRequest() throws {
        let origin = try Origin.parse("http://a.example")
        let forwarded = Forwarding.upstreamRequest(
            from: head([("Transfer-Encoding", "chunked")]), origin: origin, pathAndQuery: "/", framing: .chunked)
        #expect(forwarded.fields.values("transfer-encoding") == ["chunked"])
        #expect(!forwarded.fields.contains("content-length"))
    }

    @Test("the client response drops hop-by-hop fields and states the proxy's own connection decision")
    func clientResponse() {
        let upstream = ResponseHead(
            version: .http1_0, status: 200, reason: "OK",
            fields: HTTPFields([
                HTTPField(name: "Content-Type", value: "text/plain"), HTTPField(name: "Connection", value: "close, X-Hop"),
                HTTPField(name: "X-Hop", value: "1"), HTTPField(name: "Transfer-Encoding", value: "chunked"),
                HTTPField(name: "Proxy-Authenticate", value: "Basic"), HTTPField(name: "Set-Cookie", value: "a=b"),
            ]))
        let toOld = Forwarding.clientResponse(
            from: upstream, framing: Forwarding.clientFraming(upstream: .chunked, clientVersion: .http1_0),
            clientVersion: .http1_0, keepAlive: false)
        #expect(
            toOld.fields.storage == [
                HTTPField(name: "Content-Type", value: "text/plain"), HTTPField(name: "Set-Cookie", value: "a=b"),
                HTTPField(name: "Connection", value: "close"),
            ])
        let toNew = Forwarding.clientResponse(from: upstream, framing: .chunked, clientVersion: .http1_1, keepAlive: true)
        #expect(toNew.fields.values("transfer-encoding") == ["chunked"])
        #expect(!toNew.fields.contains("connection"))
        let keepAlive10 = Forwarding.clientResponse(from: upstream, framing: .contentLength(3), clientVersion: .http1_0, keepAlive: true)
        #expect(keepAlive10.fields.first("connection") == "keep-alive")
        #expect(keepAlive10.fields.singleValue(of: "content-length").only == "3")
    }

    @Test("a HEAD response keeps its Content-Length; a 204 gets none")
    func bodylessResponses() {
        let head = ResponseHead(version: .http1_1, status: 200, reason: "OK", fields: HTTPFields([HTTPField(name: "Content-Length", value: "1234")]))
        #expect(
            Forwarding.clientResponse(from: head, framing: .none, clientVersion: .http1_1, keepAlive: true).fields.singleValue(of: "content-length")
                .only == "1234")
        let noContent = ResponseHead(version: .http1_1, status: 204, reason: "", fields: HTTPFields([HTTPField(name: "Content-Length", value: "0")]))
        #expect(
            !Forwarding.clientResponse(from: noContent, framing: .none, clientVersion: .http1_1, keepAlive: true).fields.contains("content-length"))
    }
}
