/// What a proxy must not pass along as it is (RFC 9110 §7.6.1): hop-by-hop fields, plus the framing
/// fields it rebuilds itself from the decided `BodyFraming`. The rest keeps its order and case.
public enum Forwarding {
    /// Always hop-by-hop, whatever `Connection` says. Framing (Content-Length, Transfer-Encoding) and
    /// Host are rebuilt by the proxy, so the client's copies never pass.
    static let alwaysRemovedFromRequests: [String] = [
        "connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer",
        "transfer-encoding", "content-length", "host", "upgrade",
    ]
    static let alwaysRemovedFromResponses: [String] = [
        "connection", "keep-alive", "proxy-connection", "proxy-authenticate", "te", "trailer",
        "transfer-encoding", "content-length", "upgrade",
    ]

    /// Field names listed in `Connection` (lowercased), which are hop-by-hop for this message.
    /// Usually empty: most clients send no Connection header or only keep-alive/close.
    public static func connectionOptions(_ fields: HTTPFields) -> [String] {
        fields.contains("connection") ? fields.listMembers("connection") : []
    }

    /// Whether `name` is one of `lowercaseNames`, case-insensitively, without allocating.
    @inline(__always)
    static func isListed(_ name: String, in lowercaseNames: [String]) -> Bool {
        for candidate in lowercaseNames where ASCII.equalsIgnoringCase(name, lowercase: candidate) { return true }
        return false
    }

    /// Copies the fields that are not hop-by-hop (the fixed list, plus whatever `Connection` names).
    static func appendEndToEnd(_ source: HTTPFields, removing fixed: [String], to fields: inout HTTPFields) {
        let options = connectionOptions(source)
        for field in source where !isListed(field.name, in: fixed) && !isListed(field.name, in: options) {
            fields.append(name: field.name, value: field.value)
        }
    }

    /// A WebSocket handshake (RFC 6455 §4.1): `Connection: upgrade` and `Upgrade: websocket`, on
    /// HTTP/1.1. The only upgrade the proxy relays: after the origin's 101 the client's connection
    /// becomes a pipe to that origin, which a WebSocket client expects. Any other protocol is not
    /// relayed (its Upgrade is dropped as the hop-by-hop field it is): with `Upgrade: h2c`, curl
    /// would take an origin's 101 as the *proxy* switching to HTTP/2 and send its next requests,
    /// for other origins and with their credentials, down that pipe.
    public static func isUpgradeRequest(_ head: RequestHead) -> Bool {
        // An HTTP/2 head carries Upgrade only when the proxy mapped it from an RFC 8441 extended
        // CONNECT (a client's own Upgrade field is malformed on HTTP/2, RFC 9113 §8.2.2).
        guard head.version == .http1_1 || head.version == .http2, head.fields.containsListToken("connection", "upgrade") else {
            return false
        }
        let protocols = head.fields.listMembers("upgrade")
        return protocols.count == 1 && protocols[0] == "websocket"
    }

    /// The head sent upstream: origin-form target, Host from the target (never the client's),
    /// HTTP/1.1, hop-by-hop fields removed, framing rebuilt.
    public static func upstreamRequest(
        from head: RequestHead, origin: Origin, pathAndQuery: String, framing: BodyFraming, upgrade: Bool = false
    ) -> RequestHead {
        var fields = HTTPFields()
        fields.reserveCapacity(head.fields.count + 3)
        fields.append(name: "Host", value: origin.authority)
        appendEndToEnd(head.fields, removing: alwaysRemovedFromRequests, to: &fields)
        switch framing {
        case .contentLength(let length):
            fields.append(name: "Content-Length", value: String(length))
        case .chunked:
            fields.append(name: "Transfer-Encoding", value: "chunked")
        case .none:
            // Keep an explicit zero length: some origins answer 411 to a bodiless POST without it.
            if head.fields.contains("content-length") { fields.append(name: "Content-Length", value: "0") }
        case .untilClose:
            preconditionFailure("a request body is never delimited by close")
        }
        if upgrade, let protocols = head.fields.first("upgrade") {
            fields.append(name: "Connection", value: "upgrade")
            fields.append(name: "Upgrade", value: protocols)
        }
        return RequestHead(method: head.method, target: pathAndQuery, version: .http1_1, fields: fields)
    }

    /// How the proxy frames a response body towards its client. A chunked body cannot go to an
    /// HTTP/1.0 client, so it is sent until-close instead.
    public static func clientFraming(upstream: BodyFraming, clientVersion: HTTPVersion) -> BodyFraming {
        if upstream == .chunked, clientVersion == .http1_0 { return .untilClose }
        return upstream
    }

    /// The head sent to the client. `keepAlive` is the proxy's decision for the client connection.
    public static func clientResponse(
        from head: ResponseHead, framing: BodyFraming, clientVersion: HTTPVersion, keepAlive: Bool,
        switchingProtocols: Bool = false
    ) -> ResponseHead {
        var fields = HTTPFields()
        fields.reserveCapacity(head.fields.count + 2)
        appendEndToEnd(head.fields, removing: alwaysRemovedFromResponses, to: &fields)
        switch framing {
        case .contentLength(let length):
            fields.append(name: "Content-Length", value: String(length))
        case .chunked:
            fields.append(name: "Transfer-Encoding", value: "chunked")
        case .none:
            // A HEAD or 304 response's Content-Length describes the representation, not this
            // message: pass it on when it is well-formed.
            if head.status != 204, !head.isInformational,
                let length = try? BodyFraming.parseContentLength(head.fields)
            {
                fields.append(name: "Content-Length", value: String(length))
            }
        case .untilClose:
            break
        }
        if switchingProtocols {
            fields.append(name: "Connection", value: "upgrade")
            if let protocols = head.fields.first("upgrade") { fields.append(name: "Upgrade", value: protocols) }
        } else if !head.isInformational {
            if !keepAlive {
                fields.append(name: "Connection", value: "close")
            } else if clientVersion == .http1_0 {
                fields.append(name: "Connection", value: "keep-alive")
            }
        }
        return ResponseHead(version: .http1_1, status: head.status, reason: head.reason, fields: fields)
    }
}
