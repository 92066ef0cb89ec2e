import HTTP1Codec

/// An HTTP/2 request header block (RFC 9113 §8.3) as the HTTP/1-shaped `RequestHead` every rule
/// of the proxy reads: the same admission (`RequestAdmission.admit`), the same scope decisions,
/// the same upstream head. What HTTP/2 makes malformed is refused here, before any rule runs, with
/// a fixed reason that never repeats a name or value the client sent (a header may hold a secret):
///
/// - pseudo-header fields (§8.3.1): exactly one `:method`, `:scheme` and `:path` (not empty; `*`
///   only for OPTIONS), at most one `:authority`; none unknown, none of a response (`:status`),
///   none repeated, all before the regular fields; `:protocol` only with CONNECT (RFC 8441 §4);
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

    public static func requestHead(
        _ fields: [H2HeaderField], endStream: Bool, on connection: H2Connection
    ) -> Result<H2Request, ProxyError> {
        Result { () throws(ProxyError) in try map(fields, endStream: endStream, on: connection) }
    }

    private struct Pseudo {
        var method: String?
        var scheme: String?
        var path: String?
        var authority: String?
        var `protocol`: String?
    }

    private static func map(_ fields: [H2HeaderField], endStream: Bool, on connection: H2Connection) throws(ProxyError) -> H2Request {
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
        if method == "CONNECT" { throw .connectOverHTTP2(extended: pseudo.protocol != nil) }
        guard pseudo.protocol == nil else { throw .malformedRequest(":protocol without CONNECT") }
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
