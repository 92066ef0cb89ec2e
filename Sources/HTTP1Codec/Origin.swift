#if canImport(Glibc)
import Glibc
#endif

public enum Scheme: String, Sendable, Hashable {
    case http
    case https

    public var defaultPort: UInt16 { self == .http ? 80 : 443 }
}

/// An origin as the scope rules compare it: scheme, normalized host, port with the scheme's default
/// filled in. `https://API.x:443` and `https://api.x` are the same value.
public struct Origin: Hashable, Sendable, CustomStringConvertible {
    public let scheme: Scheme
    /// Lowercased, trailing dot removed; IPv6 literals keep their brackets (`[::1]`).
    public let host: String
    public let port: UInt16

    public init(scheme: Scheme, host: Host, port: UInt16?) {
        self.scheme = scheme
        self.host = host.normalized
        self.port = port ?? scheme.defaultPort
    }

    /// Always with the port: `https://api.x:443`. This is how origins appear in logs and errors.
    public var description: String { "\(scheme.rawValue)://\(host):\(port)" }

    /// The Host header value for this origin: the port only when it is not the default.
    public var authority: String { port == scheme.defaultPort ? host : "\(host):\(port)" }

    /// The host as a resolver wants it (no brackets around IPv6).
    public var hostForLookup: String {
        host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
    }

    /// Parses `scheme://host[:port]` with nothing after it but an optional "/" (config values).
    public static func parse(_ text: String) throws(TargetParseError) -> Origin {
        let target = try RequestTarget.parse(text.hasSuffix("/") ? text : text + "/", method: "GET")
        guard case .absolute(let origin, let path, let userinfo) = target, path == "/", userinfo == nil else {
            throw .invalid("origin must be scheme://host[:port]")
        }
        return origin
    }
}

/// A host as it appears in an authority, validated and normalized.
public struct Host: Hashable, Sendable {
    public enum Kind: Sendable { case name, ipv4, ipv6 }

    public let normalized: String
    public let kind: Kind

    /// Accepts a DNS name (letters, digits, `-`, `_`, `.`), an IPv4 literal, or a bracketed IPv6
    /// literal. Percent-encoding, other sub-delims, zone ids and IPvFuture are refused: nothing a
    /// resolver and the scope rules could read differently.
    public static func parse(_ text: Substring) throws(TargetParseError) -> Host {
        guard !text.isEmpty else { throw .invalid("empty host") }
        if text.first == "[" {
            guard text.last == "]", text.count > 2 else { throw .invalid("invalid IPv6 literal") }
            let inner = String(text.dropFirst().dropLast())
            var address = in6_addr()
            guard inet_pton(AF_INET6, inner, &address) == 1 else { throw .invalid("invalid IPv6 literal") }
            // Canonical text form, so [0:0::1] and [::1] are one origin.
            var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            guard inet_ntop(AF_INET6, &address, &buffer, socklen_t(buffer.count)) != nil else {
                throw .invalid("invalid IPv6 literal")
            }
            let canonical = buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
            return Host(normalized: "[\(canonical)]", kind: .ipv6)
        }
        var name = text.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        guard !name.isEmpty, name.utf8.count <= 253 else { throw .invalid("invalid host name") }
        let allowed = name.utf8.allSatisfy { byte in
            (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39)
                || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_")
        }
        guard allowed, !name.contains("..") else { throw .invalid("invalid host name") }
        if name.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || $0 == UInt8(ascii: ".") }) {
            // All digits and dots: must be a dotted-quad IPv4 literal, not something a resolver
            // would read as an integer address (`2130706433`, `127.1`).
            var address = in_addr()
            guard name.split(separator: ".", omittingEmptySubsequences: false).count == 4,
                  inet_pton(AF_INET, name, &address) == 1
            else { throw .invalid("invalid IPv4 literal") }
            return Host(normalized: name, kind: .ipv4)
        }
        return Host(normalized: name, kind: .name)
    }

    private init(normalized: String, kind: Kind) {
        self.normalized = normalized
        self.kind = kind
    }
}

public enum TargetParseError: Error, Equatable, Sendable {
    /// Fixed descriptions only: the input may hold credentials (userinfo, query tokens).
    case invalid(String)
}

/// The request target of RFC 9112 §3.2, interpreted for a forward proxy.
public enum RequestTarget: Equatable, Sendable {
    /// `http://user@host:port/path?query`: `pathAndQuery` starts with "/" (an empty path becomes "/").
    case absolute(origin: Origin, pathAndQuery: String, userinfo: String?)
    /// `host:port`, for CONNECT.
    case authority(host: Host, port: UInt16)
    /// `/path?query`: a request meant for an origin server, not a proxy.
    case origin(pathAndQuery: String)
    /// `*`, for a server-wide OPTIONS.
    case asterisk

    public static func parse(_ target: String, method: String) throws(TargetParseError) -> RequestTarget {
        if method == "CONNECT" {
            let (host, port) = try parseAuthority(Substring(target))
            guard let port else { throw .invalid("CONNECT target needs a port") }
            return .authority(host: host, port: port)
        }
        if target == "*" { return .asterisk }
        if target.hasPrefix("/") {
            try validatePathAndQuery(Substring(target))
            return .origin(pathAndQuery: target)
        }
        guard let colon = target.firstIndex(of: ":"), target[colon...].hasPrefix("://") else {
            throw .invalid("unsupported request target")
        }
        guard let scheme = Scheme(rawValue: target[..<colon].lowercased()) else {
            throw .invalid("unsupported scheme")
        }
        let rest = target[target.index(colon, offsetBy: 3)...]
        let authorityEnd = rest.firstIndex(where: Self.endsAuthority) ?? rest.endIndex
        var authority = rest[..<authorityEnd]
        var userinfo: String?
        if let at = authority.lastIndex(of: "@") {
            let info = authority[..<at]
            // RFC 3986 userinfo only. A `\` or a second `@` is where URL parsers disagree on the
            // host (WHATWG reads `a\@b` as host `a`), so the whole target is refused.
            guard info.utf8.allSatisfy(Self.isUserinfoByte) else { throw .invalid("invalid userinfo") }
            userinfo = String(info)
            authority = authority[authority.index(after: at)...]
        }
        let (host, port) = try parseAuthority(authority)
        var pathAndQuery = String(rest[authorityEnd...])
        if pathAndQuery.hasPrefix("?") || pathAndQuery.isEmpty { pathAndQuery = "/" + pathAndQuery }
        try validatePathAndQuery(Substring(pathAndQuery))
        return .absolute(origin: Origin(scheme: scheme, host: host, port: port), pathAndQuery: pathAndQuery, userinfo: userinfo)
    }

    /// unreserved / pct-encoded / sub-delims / ":"
    private static func isUserinfoByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        default:
            "-._~%!$&'()*+,;=:".utf8.contains(byte)
        }
    }

    private static func endsAuthority(_ character: Character) -> Bool {
        character == "/" || character == "?" || character == "#"
    }

    /// `host[:port]`; the port, when present, must be 1-65535 in decimal digits.
    public static func parseAuthority(_ text: Substring) throws(TargetParseError) -> (Host, UInt16?) {
        var hostPart = text
        var port: UInt16?
        let portSeparator: Substring.Index?
        if text.first == "[" {
            guard let close = text.firstIndex(of: "]") else { throw .invalid("invalid IPv6 literal") }
            let after = text.index(after: close)
            if after == text.endIndex {
                portSeparator = nil
            } else if text[after] == ":" {
                portSeparator = after
            } else {
                throw .invalid("invalid authority")
            }
        } else {
            portSeparator = text.lastIndex(of: ":")
        }
        if let portSeparator {
            hostPart = text[..<portSeparator]
            let digits = text[text.index(after: portSeparator)...]
            guard !digits.isEmpty, digits.count <= 5, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                  let value = Int(digits), value > 0, value <= 65535
            else { throw .invalid("invalid port") }
            port = UInt16(value)
        }
        return (try Host.parse(hostPart), port)
    }

    /// A fragment never belongs in a request target; everything else was already checked to be
    /// visible ASCII by the head parser.
    private static func validatePathAndQuery(_ text: Substring) throws(TargetParseError) {
        if text.contains("#") { throw .invalid("fragment in request target") }
        for byte in text.utf8 where byte <= 0x20 || byte >= 0x7F {
            throw .invalid("invalid character in request target")
        }
    }
}
