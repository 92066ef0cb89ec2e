import HTTP1Codec
import ProxyCore
import Testing

/// An HTTP/2 header block becomes the HTTP/1-shaped head every rule reads, or is refused: one row
/// per rule of RFC 9113 §8.3 (pseudo-header fields) and §8.2 (field names, values,
/// connection-specific fields, cookies), with the error it gets.
@Suite("HTTP/2: request header blocks mapped to request heads")
struct H2RequestMappingTests {
    static let tunnel = origin("https://a.example")

    static func map(
        _ fields: [H2HeaderField], endStream: Bool = true, on connection: H2Connection = .cleartext,
        webSocketKey: () -> String = { "KEY" }
    ) -> Result<H2Request, ProxyError> {
        H2RequestMapping.requestHead(fields, endStream: endStream, on: connection, webSocketKey: webSocketKey)
    }

    static func pseudo(_ pairs: [(String, String)], _ regular: String...) -> [H2HeaderField] {
        pairs.map { H2HeaderField(name: $0.0, value: $0.1) } + regular.map(field)
    }

    static let get = [(":method", "GET"), (":scheme", "https"), (":authority", "a.example"), (":path", "/x")]
    /// RFC 8441 §5's extended CONNECT for a WebSocket.
    static let websocket = [
        (":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "https"), (":authority", "a.example"), (":path", "/chat"),
    ]

    /// A malformed block, and what it is refused with. Values that must never be echoed carry a canary.
    struct Malformed: CustomTestStringConvertible, Sendable {
        let rule: String
        let fields: [H2HeaderField]
        let endStream: Bool
        let connection: H2Connection
        let error: ProxyError

        init(_ rule: String, _ fields: [H2HeaderField], endStream: Bool = true, on connection: H2Connection = .cleartext, _ error: ProxyError) {
            self.rule = rule
            self.fields = fields
            self.endStream = endStream
            self.connection = connection
            self.error = error
        }

        var testDescription: String { rule }
    }

    static let malformed: [Malformed] = {
        let without = { (name: String) in get.filter { $0.0 != name } }
        let with = { (name: String, value: String) in get.map { $0.0 == name ? ($0.0, value) : $0 } }
        let canary = "CANARY-VALUE"
        var rows: [Malformed] = [
            // §8.3.1: the request pseudo-header fields.
            .init("no :method", pseudo(without(":method")), .malformedRequest("missing :method")),
            .init("no :scheme", pseudo(without(":scheme")), .malformedRequest("missing :scheme")),
            .init("no :path", pseudo(without(":path")), .malformedRequest("missing :path")),
            .init("empty :path", pseudo(with(":path", "")), .malformedRequest("empty :path")),
            .init(":path * for GET", pseudo(with(":path", "*")), .malformedRequest(":path * with a method other than OPTIONS")),
            .init(":path not absolute", pseudo(with(":path", canary)), .malformedRequest(":path is not an absolute path")),
            .init(":path absolute-form", pseudo(with(":path", "https://b.example/" + canary)), .malformedRequest(":path is not an absolute path")),
            .init(":method not a token", pseudo(with(":method", "GE T")), .malformedRequest("invalid :method")),
            .init(":method empty", pseudo(with(":method", "")), .malformedRequest("invalid :method")),
            .init(":scheme not http(s)", pseudo(with(":scheme", "ftp")), .unsupportedTarget("unsupported :scheme")),
            .init(":status in a request", pseudo(get + [(":status", "200")]), .malformedRequest("response pseudo-header :status in a request")),
            .init("unknown pseudo-header", pseudo(get + [(":" + canary.lowercased(), "1")]), .malformedRequest("unknown pseudo-header field")),
            .init(":protocol without CONNECT", pseudo(get + [(":protocol", "websocket")]), .malformedRequest(":protocol without CONNECT")),
            .init(
                "pseudo-header after a regular field", pseudo([get[0], get[1]] + [("accept", "*/*")] + [get[2], get[3]]),
                .malformedRequest("a pseudo-header field after a regular field")),
            .init(":authority with userinfo", pseudo(with(":authority", "user:\(canary)@a.example")), .malformedRequest("userinfo in :authority")),
            .init(":authority not an authority", pseudo(with(":authority", "a.example:99999")), .malformedRequest("invalid :authority")),
            .init(
                "cleartext without :authority", pseudo(without(":authority")),
                .malformedRequest("missing :authority (a request through the proxy names its origin)")),
            // §8.2.1: names in lower case, tokens; values without NUL, CR, LF or surrounding space.
            .init("upper-case name", pseudo(get, "Accept: */*"), .malformedRequest("a header field name that is not a lower-case token")),
            .init("name not a token", pseudo(get, "x y: 1"), .malformedRequest("a header field name that is not a lower-case token")),
            .init(
                "empty name", pseudo(get) + [H2HeaderField(name: "", value: "1")],
                .malformedRequest("a header field name that is not a lower-case token")),
            .init(
                "value with LF", pseudo(get) + [H2HeaderField(name: "x-a", value: "1\nhost: b.example")],
                .malformedRequest("control character in header value")),
            .init("value with CR", pseudo(get) + [H2HeaderField(name: "x-a", value: "1\r")], .malformedRequest("control character in header value")),
            .init(
                "value with NUL", pseudo(get) + [H2HeaderField(name: "x-a", value: "1\u{0}")], .malformedRequest("control character in header value")),
            .init(
                "value with a leading space", pseudo(get) + [H2HeaderField(name: "x-a", value: " 1")],
                .malformedRequest("control character in header value")),
            .init(
                "value with a trailing tab", pseudo(get) + [H2HeaderField(name: "x-a", value: "1\t")],
                .malformedRequest("control character in header value")),
            .init("pseudo-header value with CR", pseudo(with(":path", "/x\r\n")), .malformedRequest("invalid pseudo-header value")),
            // §8.2.2: te only as trailers.
            .init("te other than trailers", pseudo(get, "te: gzip"), .malformedRequest("te other than trailers in an HTTP/2 request")),
            // One value or refuse: :authority and Host.
            .init(":authority and host differ", pseudo(get, "host: b.example"), .malformedRequest(":authority and Host differ")),
            .init(":authority and host on another port", pseudo(get, "host: a.example:8443"), .malformedRequest(":authority and Host differ")),
            .init("host that is no authority", pseudo(get, "host: a.example:x"), .malformedRequest("invalid Host header")),
            .init(
                "host alone with userinfo", pseudo(without(":authority"), "host: u:\(canary)@a.example"), .malformedRequest("userinfo in Host header")
            ),
            .init("two host fields", pseudo(get, "host: a.example", "host: a.example"), .malformedRequest("more than one Host header")),
            // Content-length read with bounds; it must match the DATA (none when HEADERS end the stream, §8.1.1).
            .init("content-length not a number", pseudo(get, "content-length: 1x"), .malformedRequest("invalid Content-Length")),
            .init(
                "content-length past 18 digits", pseudo(get, "content-length: 99999999999999999999999"), .malformedRequest("invalid Content-Length")),
            .init("content-length negative", pseudo(get, "content-length: -1"), .malformedRequest("invalid Content-Length")),
            .init(
                "two different content-lengths", pseudo(get, "content-length: 1", "content-length: 2"), endStream: false,
                .malformedRequest("differing Content-Length values")),
            .init("content-length without DATA", pseudo(get, "content-length: 5"), .malformedRequest("content-length on a request without DATA")),
            // Bounds as for an HTTP/1.1 head.
            .init("more than 100 fields", pseudo(get) + (0..<100).map { H2HeaderField(name: "x-\($0)", value: "1") }, .tooManyFields),
            .init(":path over 8 KiB", pseudo(with(":path", "/" + String(repeating: "a", count: 8 * 1024))), .targetTooLong),
            // A plain CONNECT (a TCP tunnel) and extended CONNECT for another protocol are not served: said so, not a bare 400.
            .init("CONNECT", pseudo([(":method", "CONNECT"), (":authority", "a.example:443")]), .connectOverHTTP2(extended: false)),
            .init(
                "extended CONNECT for another protocol", pseudo(with(":method", "CONNECT") + [(":protocol", canary)]),
                .connectOverHTTP2(extended: true)),
            // RFC 8441 §4-5: a WebSocket's extended CONNECT names its target and leaves the stream open for frames.
            .init(
                "extended CONNECT ending the stream", pseudo(websocket), endStream: true, .malformedRequest("extended CONNECT that ends the stream")),
            .init(
                "extended CONNECT without :authority", pseudo(websocket.filter { $0.0 != ":authority" }), endStream: false,
                .malformedRequest("missing :authority in an extended CONNECT")),
            .init(
                "extended CONNECT without :path", pseudo(websocket.filter { $0.0 != ":path" }), endStream: false, .malformedRequest("missing :path")),
            .init(
                "extended CONNECT with content-length", pseudo(websocket, "content-length: 5"), endStream: false,
                .malformedRequest("content-length on an extended CONNECT")),
            .init(
                "sec-websocket-key sent on HTTP/2", pseudo(websocket, "sec-websocket-key: " + canary), endStream: false,
                .malformedRequest("'sec-websocket-key' in an HTTP/2 request (RFC 8441: HTTP/2 carries no WebSocket key)")),
            // RFC 9113 §9.1.2: inside a tunnel, another origin is misdirected.
            .init("another host in a tunnel", pseudo(with(":authority", "b.example")), on: .intercepted(tunnel), .misdirectedRequest(tunnel: tunnel)),
            .init(
                "another port in a tunnel", pseudo(with(":authority", "a.example:8443")), on: .intercepted(tunnel),
                .misdirectedRequest(tunnel: tunnel)),
            .init("another scheme in a tunnel", pseudo(with(":scheme", "http")), on: .intercepted(tunnel), .misdirectedRequest(tunnel: tunnel)),
            .init(
                "host naming another origin in a tunnel", pseudo(without(":authority"), "host: b.example"), on: .intercepted(tunnel),
                .misdirectedRequest(tunnel: tunnel)),
        ]
        // §8.2.2: every connection-specific field.
        for name in ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"] {
            rows.append(
                .init(
                    name, pseudo(get) + [H2HeaderField(name: name, value: canary)], endStream: false,
                    .malformedRequest("connection-specific header field '\(name)' in an HTTP/2 request")))
        }
        // Repeated pseudo-header fields.
        for name in [":method", ":scheme", ":path", ":authority"] {
            rows.append(.init("\(name) twice", pseudo(get + get.filter { $0.0 == name }), .malformedRequest("\(name) repeated")))
        }
        return rows
    }()

    @Test("a malformed header block is refused with its error, and the error never repeats a value the client sent", arguments: malformed)
    func refused(_ row: Malformed) {
        let mapped = Self.map(row.fields, endStream: row.endStream, on: row.connection)
        #expect(mapped == .failure(row.error))
        #expect(!row.error.message.contains("CANARY"), "the message echoes what the client sent")
    }

    @Test("cleartext (h2c): the target is absolute-form from :scheme, :authority and :path; Host is :authority; version HTTP/2")
    func cleartext() throws {
        let head = try Self.map(Self.pseudo(Self.get, "accept: */*", "x-request-id: abc")).get().head
        #expect(head.method == "GET")
        #expect(head.target == "https://a.example/x")
        #expect(head.version == .http2)
        #expect(Array(head.fields).map { "\($0.name): \($0.value)" } == ["host: a.example", "accept: */*", "x-request-id: abc"])
    }

    @Test("intercepted: the target is :path; Host is :authority, or the tunnel's origin when the block names none")
    func intercepted() throws {
        let named = try Self.map(Self.pseudo(Self.get), on: .intercepted(Self.tunnel)).get().head
        #expect(named.target == "/x")
        #expect(named.fields.values("host").first == "a.example")
        let spelledOtherwise = try Self.map(
            Self.pseudo(Self.get.map { $0.0 == ":authority" ? ($0.0, "A.Example:443") : $0 }), on: .intercepted(Self.tunnel)
        ).get().head
        #expect(spelledOtherwise.fields.values("host").first == "A.Example:443", "the same origin however it is spelled")
        let unnamed = try Self.map(Self.pseudo(Self.get.filter { $0.0 != ":authority" }), on: .intercepted(Self.tunnel)).get().head
        #expect(unnamed.fields.values("host").first == "a.example")
        let hostOnly = try Self.map(Self.pseudo(Self.get.filter { $0.0 != ":authority" }, "host: a.example"), on: .intercepted(Self.tunnel)).get()
        #expect(hostOnly.head.fields.values("host") == ["a.example"])
    }

    @Test("a body without content-length is announced as chunked (the engine re-frames DATA); with one, or none at all, it is not")
    func bodyFraming() throws {
        let post = [(":method", "POST"), (":scheme", "http"), (":authority", "plain.example"), (":path", "/up")]
        let unknownLength = try Self.map(Self.pseudo(post), endStream: false).get()
        #expect(unknownLength.reframedAsChunked)
        #expect(unknownLength.head.fields.values("transfer-encoding").first == "chunked")
        #expect(try BodyFraming.forRequest(unknownLength.head) == .chunked)
        let declared = try Self.map(Self.pseudo(post, "content-length: 5"), endStream: false).get()
        #expect(!declared.reframedAsChunked)
        #expect(try BodyFraming.forRequest(declared.head) == .contentLength(5))
        let bodiless = try Self.map(Self.pseudo(post), endStream: true).get()
        #expect(!bodiless.reframedAsChunked)
        #expect(try BodyFraming.forRequest(bodiless.head) == .none)
        let zero = try Self.map(Self.pseudo(post, "content-length: 0"), endStream: true).get()
        #expect(try BodyFraming.forRequest(zero.head) == .none)
    }

    @Test("cookie crumbs become one Cookie joined with \"; \" where the first was (RFC 9113 §8.2.3)")
    func cookies() throws {
        let head = try Self.map(Self.pseudo(Self.get, "cookie: a=1", "accept: */*", "cookie: b=2", "cookie: c=3")).get().head
        #expect(Array(head.fields).map(\.name) == ["host", "cookie", "accept"])
        #expect(head.fields.values("cookie") == ["a=1; b=2; c=3"])
    }

    @Test("te: trailers is allowed; :authority and an equal host are one value; OPTIONS * names the origin")
    func allowed() throws {
        #expect(throws: Never.self) { try Self.map(Self.pseudo(Self.get, "te: trailers")).get() }
        let both = try Self.map(Self.pseudo(Self.get, "host: A.EXAMPLE")).get().head
        #expect(both.fields.values("host") == ["a.example"])
        // The same entity (RFC 9113 §8.3.1), spelled with the scheme's default port.
        let defaultPort = try Self.map(Self.pseudo(Self.get, "host: a.example:443")).get().head
        #expect(defaultPort.fields.values("host") == ["a.example"])
        let options = try Self.map(Self.pseudo([(":method", "OPTIONS"), (":scheme", "https"), (":authority", "a.example"), (":path", "*")])).get()
        #expect(options.head.target == "https://a.example")
    }

    @Test("an extended CONNECT for a WebSocket is the HTTP/1.1 upgrade request: GET, Upgrade, Connection, version 13, the proxy's key")
    func webSocket() throws {
        let mapped = try Self.map(
            Self.pseudo(Self.websocket, "sec-websocket-protocol: chat", "sec-websocket-extensions: permessage-deflate", "origin: https://a.example"),
            endStream: false, webSocketKey: { "KEY" }
        ).get()
        #expect(mapped.webSocketKey == "KEY" && mapped.isWebSocket && !mapped.reframedAsChunked)
        #expect(mapped.head.method == "GET" && mapped.head.target == "https://a.example/chat" && mapped.head.version == .http2)
        #expect(
            Array(mapped.head.fields).map { "\($0.name): \($0.value)" } == [
                "host: a.example", "sec-websocket-protocol: chat", "sec-websocket-extensions: permessage-deflate", "origin: https://a.example",
                "sec-websocket-version: 13", "sec-websocket-key: KEY", "upgrade: websocket", "connection: upgrade",
            ])
        #expect(Forwarding.isUpgradeRequest(mapped.head))
        #expect(try BodyFraming.forRequest(mapped.head) == .none)
        // The version the client sent is the one the origin sees (it answers 426 to one it does not speak).
        let versioned = try Self.map(Self.pseudo(Self.websocket, "sec-websocket-version: 8"), endStream: false, webSocketKey: { "KEY" }).get()
        #expect(versioned.head.fields.values("sec-websocket-version") == ["8"])
        let intercepted = try Self.map(Self.pseudo(Self.websocket), endStream: false, on: .intercepted(Self.tunnel), webSocketKey: { "KEY" }).get()
        #expect(intercepted.head.target == "/chat" && intercepted.isWebSocket)
        #expect(
            try Self.map(Self.pseudo([(":method", "CONNECT"), (":protocol", "WebSocket")] + Self.websocket.dropFirst(2)), endStream: false).get()
                .isWebSocket)
    }

    @Test("only an extended CONNECT makes an HTTP/2 head an upgrade request, and only its mapping asks for a key")
    func upgradeOnlyFromExtendedConnect() throws {
        let bodies = [(":method", "POST"), (":scheme", "http"), (":authority", "plain.example"), (":path", "/up")]
        for (fields, endStream) in [(Self.pseudo(Self.get), true), (Self.pseudo(bodies), false), (Self.pseudo(bodies, "content-length: 3"), false)] {
            var asked = false
            let mapped = try Self.map(
                fields, endStream: endStream,
                webSocketKey: {
                    asked = true; return "KEY"
                }
            ).get()
            #expect(!Forwarding.isUpgradeRequest(mapped.head) && !mapped.isWebSocket && !asked)
        }
    }
}
