import HTTP1Codec

/// An HTTP/2 request header block (RFC 9113 §8.3) as the HTTP/1-shaped `RequestHead` every rule
/// of the proxy reads: the same admission (`RequestAdmission.admit`), the same scope decisions,
/// the same upstream head. What HTTP/2 makes malformed is refused here, before any rule runs, with
/// a fixed reason that never repeats a name or value the client sent (a header may hold a secret):
///
/// - pseudo-header fields (§8.3.1): exactly one `:method`, `:scheme` and `:path` (not empty; `*`
///   only for OPTIONS), at most one `:authority`; none unknown, none of a response (`:status`),
///   none repeated, all before the regular fields; `:protocol` only with CONNECT (RFC 8441 §4);
/// - CONNECT only as an RFC 8441 WebSocket (`:protocol websocket`, with `:scheme`, `:path` and
///   `:authority`, not ending the stream, no content-length): mapped to the HTTP/1.1 upgrade
///   request (`ExtendedConnect`); a plain CONNECT or another protocol is 501;
/// - field names in lower case and tokens, values without NUL, CR, LF or surrounding spaces
///   (§8.2.1); no connection-specific field (§8.2.2: Connection, Keep-Alive, Proxy-Connection,
///   Transfer-Encoding, Upgrade), and `te` only as `trailers`;
/// - `:authority` without userinfo (§8.3.1), and equal to `host` when both are sent (one value or
///   refuse, docs/security-model.md "Strict parsing");
/// - content-length read with bounds, and 0 when the HEADERS end the stream (§8.1.1).
///
/// Cookie crumbs become one `Cookie` field joined with "; " (§8.2.3). The head says HTTP/2 and
/// carries `Host` from `:authority`; a body of unknown length is announced as chunked (see
/// `H2Request.reframedAsChunked`).
public enum H2RequestMapping {
    /// At most this many fields, and a `:path` of at most this many bytes, as for an HTTP/1.1
    /// request head (the header list itself is bounded at 64 KiB while it is decoded).
    static let limits = HeadLimits.request

    /// RFC 9113 §8.2.2: fields that only mean something for one HTTP/1.1 connection.
    static let connectionSpecific: Set<String> = ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"]

    /// `webSocketKey`: asked for only when the stream is an RFC 8441 WebSocket (a fresh random key
    /// in the engine, a fixed one in tests).
    public static func requestHead(
        _ fields: [H2HeaderField], endStream: Bool, on connection: H2Connection,
        webSocketKey: () -> String = ExtendedConnect.freshKey
    ) -> Result<H2Request, ProxyError> {
        Result { () throws(ProxyError) in try map(fields, endStream: endStream, on: connection, webSocketKey: webSocketKey) }
    }

    /// RFC 8441 §5 / RFC 6455 §4.1: the fields of the HTTP/1.1 handshake that HTTP/2 does not
    /// carry; the proxy makes its own, so one the client sent is refused rather than dropped.
    static let handshakeOnlyFields: Set<String> = ["sec-websocket-key", "sec-websocket-accept"]

    private struct Pseudo {
        var method: String?
        var scheme: String?
        var path: String?
        var authority: String?
        var `protocol`: String?
    }

    private static func map(
        _ fields: [H2HeaderField], endStream: Bool, on connection: H2Connection, webSocketKey: () -> String
    ) throws(ProxyError) -> H2Request {
        var pseudo = Pseudo()
        var regular: [HTTPField] = []
        regular.reserveCapacity(fields.count)
        var cookies: [String] = []
        var cookiePosition: Int?
        var hosts: [String] = []
        var sawRegular = false
        for field in fields {
            if field.name.utf8.first == UInt8(ascii: ":") {
                guard !sawRegular else { throw .malformedRequest("a pseudo-header field after a regular field") }
                guard HTTPField.isValidValue(field.value) else { throw .malformedRequest("invalid pseudo-header value") }
                try note(field, in: &pseudo)
                continue
            }
            sawRegular = true
            guard HTTPField.isValidLowercaseName(field.name) else {
                throw .malformedRequest("a header field name that is not a lower-case token")
            }
            guard HTTPField.isValidValue(field.value) else { throw .malformedRequest("control character in header value") }
            if connectionSpecific.contains(field.name) {
                throw .malformedRequest("connection-specific header field '\(field.name)' in an HTTP/2 request")
            }
            if handshakeOnlyFields.contains(field.name) {
                throw .malformedRequest("'\(field.name)' in an HTTP/2 request (RFC 8441: HTTP/2 carries no WebSocket key)")
            }
            switch field.name {
            case "te":
                guard field.value.lowercased() == "trailers" else { throw .malformedRequest("te other than trailers in an HTTP/2 request") }
                regular.append(HTTPField(name: field.name, value: field.value))
            case "cookie":
                if cookiePosition == nil {
                    cookiePosition = regular.count
                    regular.append(HTTPField(name: "cookie", value: ""))
                }
                cookies.append(field.value)
            case "host":
                hosts.append(field.value)
            default:
                regular.append(HTTPField(name: field.name, value: field.value))
            }
        }
        guard fields.count <= limits.maxFields else { throw .tooManyFields }
        guard let method = pseudo.method else { throw .malformedRequest("missing :method") }
        guard HTTPField.isValidName(method) else { throw .malformedRequest("invalid :method") }
        // CONNECT: only the extended form for a WebSocket (RFC 8441 §4) is served; it becomes the
        // HTTP/1.1 upgrade request below. A plain CONNECT (a TCP tunnel, RFC 9113 §8.5) or another
        // `:protocol` is refused with 501 and a hint, never half-served.
        let isWebSocket: Bool
        if method == "CONNECT" {
            guard let requested = pseudo.protocol else { throw .connectOverHTTP2(extended: false) }
            guard requested.lowercased() == ExtendedConnect.webSocketProtocol else { throw .connectOverHTTP2(extended: true) }
            guard !endStream else { throw .malformedRequest("extended CONNECT that ends the stream") }
            guard pseudo.authority != nil else { throw .malformedRequest("missing :authority in an extended CONNECT") }
            isWebSocket = true
        } else {
            guard pseudo.protocol == nil else { throw .malformedRequest(":protocol without CONNECT") }
            isWebSocket = false
        }
        guard let schemeText = pseudo.scheme else { throw .malformedRequest("missing :scheme") }
        guard let path = pseudo.path else { throw .malformedRequest("missing :path") }
        guard !path.isEmpty else { throw .malformedRequest("empty :path") }
        guard path.utf8.count <= limits.maxTargetBytes else { throw .targetTooLong }
        if path == "*" {
            guard method == "OPTIONS" else { throw .malformedRequest(":path * with a method other than OPTIONS") }
        } else if path.utf8.first != UInt8(ascii: "/") {
            throw .malformedRequest(":path is not an absolute path")
        }
        let scheme: Scheme
        switch schemeText {
        case "http": scheme = .http
        case "https": scheme = .https
        default: throw .unsupportedTarget("unsupported :scheme")
        }

        // The authority the request names: `:authority`, or Host when a client sends only that
        // (§8.3.1 lets it). Both: they must name the same host and port (§8.3.1: a Host that
        // identifies another entity is malformed), or which one decides would depend on who reads.
        if hosts.count > 1 { throw .malformedRequest("more than one Host header") }
        var authority = pseudo.authority ?? hosts.first
        if let named = authority {
            let field = pseudo.authority != nil ? ":authority" : "Host header"
            guard !named.utf8.contains(UInt8(ascii: "@")) else { throw .malformedRequest("userinfo in \(field)") }
            guard let (host, port) = try? RequestTarget.parseAuthority(Substring(named)) else { throw .malformedRequest("invalid \(field)") }
            let origin = Origin(scheme: scheme, host: host, port: port ?? scheme.defaultPort)
            if pseudo.authority != nil, let sent = hosts.first {
                guard let (otherHost, otherPort) = try? RequestTarget.parseAuthority(Substring(sent)) else {
                    throw .malformedRequest("invalid Host header")
                }
                guard Origin(scheme: scheme, host: otherHost, port: otherPort ?? scheme.defaultPort) == origin else {
                    throw .malformedRequest(":authority and Host differ")
                }
            }
            if case .intercepted(let tunnel) = connection, origin != tunnel { throw .misdirectedRequest(tunnel: tunnel) }
        }

        let target: String
        switch connection {
        case .cleartext:
            guard let named = authority else { throw .malformedRequest("missing :authority (a request through the proxy names its origin)") }
            target = "\(scheme.rawValue)://\(named)" + (path == "*" ? "" : path)
        case .intercepted(let tunnel):
            if authority == nil { authority = tunnel.authority }
            target = path
        case .routed:
            target = path
        }

        if let position = cookiePosition {
            regular[position].value = cookies.joined(separator: "; ")
        }
        var head = HTTPFields()
        head.reserveCapacity(regular.count + 2)
        if let authority { head.append(name: "host", value: authority) }
        for field in regular { head.append(name: field.name, value: field.value) }

        let contentLength: UInt64?
        do {
            contentLength = try BodyFraming.contentLength(of: head)
        } catch {
            throw ProxyError(error)
        }
        if isWebSocket {
            // After the 200 the stream's DATA are WebSocket frames (RFC 8441 §5), never a body.
            guard contentLength == nil else { throw .malformedRequest("content-length on an extended CONNECT") }
            let key = webSocketKey()
            if !head.contains("sec-websocket-version") { head.append(name: "sec-websocket-version", value: "13") }
            // `ExtendedConnect.addedToRequest`, in this order.
            head.append(name: "sec-websocket-key", value: key)
            head.append(name: "upgrade", value: ExtendedConnect.webSocketProtocol)
            head.append(name: "connection", value: "upgrade")
            return H2Request(
                head: RequestHead(method: "GET", target: target, version: .http2, fields: head), reframedAsChunked: false, webSocketKey: key)
        }
        if endStream, let contentLength, contentLength != 0 {
            throw .malformedRequest("content-length on a request without DATA")
        }
        let reframed = contentLength == nil && !endStream
        if reframed { head.append(name: "transfer-encoding", value: "chunked") }
        return H2Request(head: RequestHead(method: method, target: target, version: .http2, fields: head), reframedAsChunked: reframed)
    }

    private static func note(_ field: H2HeaderField, in pseudo: inout Pseudo) throws(ProxyError) {
        func set(_ slot: inout String?, _ name: String) throws(ProxyError) {
            guard slot == nil else { throw .malformedRequest("\(name) repeated") }
            slot = field.value
        }
        switch field.name {
        case ":method": try set(&pseudo.method, ":method")
        case ":scheme": try set(&pseudo.scheme, ":scheme")
        case ":path": try set(&pseudo.path, ":path")
        case ":authority": try set(&pseudo.authority, ":authority")
        case ":protocol": try set(&pseudo.protocol, ":protocol")
        case ":status": throw .malformedRequest("response pseudo-header :status in a request")
        default: throw .malformedRequest("unknown pseudo-header field")
        }
    }
}
