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
    /// Kept from the parse so `isLoopback` reads the parsed form, never the text.
    private let hostKind: Host.Kind

    public init(scheme: Scheme, host: Host, port: UInt16?) {
        self.scheme = scheme
        self.host = host.normalized
        self.port = port ?? scheme.defaultPort
        hostKind = host.kind
    }

    /// Whether the host is this machine: see `Host.isLoopback`.
    public var isLoopback: Bool { Host.isLoopback(normalized: host, kind: hostKind) }

    /// The one way an origin is printed (banner, explain, config print, logs, errors): RFC 6454
    /// §6.2's serialization, the port only when it is not the scheme's default (`https://api.x`,
    /// `https://api.x:8443`), as people write it in `origins:`.
    public var description: String { "\(scheme.rawValue)://\(authority)" }

    /// `https://api.x:443`: with the port always, for a CONNECT, which names host:port.
    public var withPort: String { "\(scheme.rawValue)://\(host):\(port)" }

    /// The Host header value for this origin: the port only when it is not the default.
    public var authority: String { port == scheme.defaultPort ? host : "\(host):\(port)" }

    /// Whether `text` is exactly this origin's `authority`, ASCII case aside (the Host a client
    /// usually sends): true means it needs no parse of its own.
    public func isSpelled(byAuthority text: String) -> Bool {
        ASCII.equalsIgnoringCase(text, lowercase: authority)
    }

    /// The host as a resolver wants it (no brackets around IPv6).
    public var hostForLookup: String {
        host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
    }

    /// Parses `scheme://host[:port]` with nothing after it but an optional "/" (config values).
    public static func parse(_ text: String) throws(TargetParseError) -> Origin {
        var text = text
        if text.utf8.contains(where: { $0 >= 0x80 }), let schemeEnd = text.firstIndex(of: ":"),
            text[schemeEnd...].hasPrefix("://")
        {
            // IDN host: convert it before the strict (ASCII-only) target parser sees it.
            let afterScheme = text.index(schemeEnd, offsetBy: 3)
            let authorityEnd = text[afterScheme...].firstIndex(where: { $0 == "/" || $0 == ":" }) ?? text.endIndex
            let host = try Host.parse(text[afterScheme..<authorityEnd])
            text = String(text[..<afterScheme]) + host.normalized + String(text[authorityEnd...])
        }
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

    /// Accepts a DNS name (letters, digits, `-`, `_`, `.`), a canonical dotted-quad IPv4 literal,
    /// or a bracketed IPv6 literal. Percent-encoding, other sub-delims, zone ids, IPvFuture and
    /// names ending in a number are refused: nothing a resolver, a browser and the scope rules
    /// could read differently.
    public static func parse(_ text: Substring) throws(TargetParseError) -> Host {
        if text.utf8.contains(where: { $0 >= 0x80 }) {
            // An internationalized name (from config; never on the wire): each label to punycode.
            var labels: [String] = []
            for label in text.split(separator: ".", omittingEmptySubsequences: false) {
                guard let ascii = Punycode.toASCII(label: String(label)) else { throw .invalid("invalid host name") }
                labels.append(ascii)
            }
            return try parse(Array(labels.joined(separator: ".").utf8)[...])
        }
        return try parse(Array(text.utf8)[...])
    }

    static func parse(_ bytes: ArraySlice<UInt8>) throws(TargetParseError) -> Host {
        guard let first = bytes.first else { throw .invalid("empty host") }
        if first == UInt8(ascii: "[") {
            guard bytes.last == UInt8(ascii: "]"), bytes.count > 2 else { throw .invalid("invalid IPv6 literal") }
            let inner = String(decoding: bytes.dropFirst().dropLast(), as: UTF8.self)
            var address = in6_addr()
            guard inet_pton(AF_INET6, inner, &address) == 1 else { throw .invalid("invalid IPv6 literal") }
            // Canonical text form, so [0:0::1] and [::1] are one origin.
            var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            guard inet_ntop(AF_INET6, &address, &buffer, socklen_t(buffer.count)) != nil else {
                throw .invalid("invalid IPv6 literal")
            }
            let canonical = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            return Host(normalized: "[\(canonical)]", kind: .ipv6)
        }
        var name = bytes.contains(where: { $0 >= 0x41 && $0 <= 0x5A }) ? bytes.map(ASCII.lowercased) : Array(bytes)
        if name.last == UInt8(ascii: ".") { name.removeLast() }
        // One trailing dot is the root (`a.example.` is `a.example`); a second is an empty label.
        guard !name.isEmpty, name.last != UInt8(ascii: "."), name.count <= 253 else { throw .invalid("invalid host name") }
        var dots = 0
        var previous: UInt8 = 0
        for byte in name {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "-"), UInt8(ascii: "_"),
                UInt8(ascii: "0")...UInt8(ascii: "9"):
                break
            case UInt8(ascii: "."):
                guard previous != UInt8(ascii: "."), previous != 0 else { throw .invalid("invalid host name") }
                dots += 1
            default:
                throw .invalid("invalid host name")
            }
            previous = byte
        }
        let text = String(decoding: name, as: UTF8.self)
        // WHATWG URL "ends in a number" (host parser step 7): when the last label is all digits or
        // `0x` + hex, a browser parses the whole host as IPv4 the way inet_aton does, so `0x7f.1`,
        // `127.1`, `2130706433` and `1.2.3.0x4` are addresses there (127.0.0.1, 1.2.3.4) while a
        // DNS-name reading would scope them as names. Only the canonical dotted quad reads the same
        // to every parser; any other host ending in a number is refused.
        let lastLabel = name[(name.lastIndex(of: UInt8(ascii: ".")).map { $0 + 1 } ?? 0)...]
        if Self.endsInNumber(lastLabel) {
            guard dots == 3, Self.isCanonicalDottedQuad(name) else { throw .invalid("invalid IPv4 literal") }
            return Host(normalized: text, kind: .ipv4)
        }
        return Host(normalized: text, kind: .name)
    }

    private init(normalized: String, kind: Kind) {
        self.normalized = normalized
        self.kind = kind
    }

    /// All digits, or `0x`/`0X` followed by hex digits (none at all included: WHATWG's IPv4 number
    /// parser reads a bare `0x` as zero).
    static func endsInNumber(_ label: ArraySlice<UInt8>) -> Bool {
        guard !label.isEmpty else { return false }
        if label.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) { return true }
        guard label.count >= 2, label[label.startIndex] == UInt8(ascii: "0"),
            ASCII.lowercased(label[label.startIndex + 1]) == UInt8(ascii: "x")
        else { return false }
        return label.dropFirst(2).allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (ASCII.lowercased(byte) >= 0x61 && ASCII.lowercased(byte) <= 0x66)
        }
    }

    /// Four decimal octets 0-255 without leading zeros (`010` is octal 8 to inet_aton and WHATWG).
    static func isCanonicalDottedQuad(_ name: [UInt8]) -> Bool {
        // One pass, no split (this runs for every request's host). An octet has at most three
        // digits, checked before the arithmetic: a long run of digits is refused, never an overflow.
        var octets = 0, digits = 0, value = 0, leadingZero = false
        for index in 0...name.count {
            if index == name.count || name[index] == UInt8(ascii: ".") {
                guard (1...3).contains(digits), !(leadingZero && digits > 1), value <= 255 else { return false }
                octets += 1
                digits = 0; value = 0; leadingZero = false
                continue
            }
            let byte = name[index]
            guard byte >= 0x30 && byte <= 0x39, digits < 3 else { return false }
            if digits == 0 { leadingZero = byte == 0x30 }
            digits += 1
            value = value * 10 + Int(byte - 0x30)
        }
        return octets == 4
    }

    /// This machine, judged on the parsed form: an IPv4 literal in 127.0.0.0/8 (RFC 1122
    /// §3.2.1.3), the IPv6 loopback `[::1]` (RFC 4291 §2.5.3), or the name `localhost` (RFC 6761
    /// §6.3). Never a text prefix: `127.evil.example` is a DNS name anyone can point anywhere.
    /// IPv4-mapped forms (`[::ffff:127.0.0.1]`) and `*.localhost` names are not counted: for
    /// the one thing this decides (clear-text credentials), not counting fails closed.
    public var isLoopback: Bool { Self.isLoopback(normalized: normalized, kind: kind) }

    static func isLoopback(normalized: String, kind: Kind) -> Bool {
        switch kind {
        case .ipv4: normalized.utf8.starts(with: "127.".utf8)
        case .ipv6: normalized == "[::1]"
        case .name: normalized == "localhost"
        }
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
        // Byte-level on purpose: Character-based String APIs are both slower and Unicode-aware,
        // and a request target is ASCII by the time it gets here.
        let bytes = Array(target.utf8)
        if method == "CONNECT" {
            let (host, port) = try parseAuthority(bytes[...])
            guard let port else { throw .invalid("CONNECT target needs a port") }
            return .authority(host: host, port: port)
        }
        if bytes.count == 1, bytes[0] == UInt8(ascii: "*") { return .asterisk }
        if bytes.first == UInt8(ascii: "/") {
            try validatePathAndQuery(bytes[...])
            return .origin(pathAndQuery: target)
        }
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon + 2 < bytes.count,
            bytes[colon + 1] == UInt8(ascii: "/"), bytes[colon + 2] == UInt8(ascii: "/")
        else { throw .invalid("unsupported request target") }
        let scheme: Scheme
        if ASCII.equalsIgnoringCase(bytes[..<colon], lowercase: "http") {
            scheme = .http
        } else if ASCII.equalsIgnoringCase(bytes[..<colon], lowercase: "https") {
            scheme = .https
        } else {
            throw .invalid("unsupported scheme")
        }
        let authorityStart = colon + 3
        var authorityEnd = authorityStart
        while authorityEnd < bytes.count, !Self.endsAuthority(bytes[authorityEnd]) { authorityEnd += 1 }
        var authority = bytes[authorityStart..<authorityEnd]
        var userinfo: String?
        if let at = authority.lastIndex(of: UInt8(ascii: "@")) {
            let info = authority[..<at]
            // RFC 3986 userinfo only. A `\` or a second `@` is where URL parsers disagree on the
            // host (WHATWG reads `a\@b` as host `a`), so the whole target is refused.
            guard info.allSatisfy(Self.isUserinfoByte) else { throw .invalid("invalid userinfo") }
            userinfo = String(decoding: info, as: UTF8.self)
            authority = authority[(at + 1)...]
        }
        let (host, port) = try parseAuthority(authority)
        let rest = bytes[authorityEnd...]
        try validatePathAndQuery(rest)
        var pathAndQuery = String(decoding: rest, as: UTF8.self)
        if rest.isEmpty || rest.first == UInt8(ascii: "?") { pathAndQuery = "/" + pathAndQuery }
        return .absolute(origin: Origin(scheme: scheme, host: host, port: port), pathAndQuery: pathAndQuery, userinfo: userinfo)
    }

    /// unreserved / pct-encoded / sub-delims / ":"
    private static func isUserinfoByte(_ byte: UInt8) -> Bool {
        ASCII.isUnreserved(byte) || "%!$&'()*+,;=:".utf8.contains(byte)
    }

    @inline(__always)
    private static func endsAuthority(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: "/") || byte == UInt8(ascii: "?") || byte == UInt8(ascii: "#")
    }

    /// `host[:port]`; the port, when present, must be 1-65535 in decimal digits.
    public static func parseAuthority(_ text: Substring) throws(TargetParseError) -> (Host, UInt16?) {
        try parseAuthority(Array(text.utf8)[...])
    }

    static func parseAuthority(_ bytes: ArraySlice<UInt8>) throws(TargetParseError) -> (Host, UInt16?) {
        let portSeparator: Int?
        if bytes.first == UInt8(ascii: "[") {
            guard let close = bytes.firstIndex(of: UInt8(ascii: "]")) else { throw .invalid("invalid IPv6 literal") }
            if close + 1 == bytes.endIndex {
                portSeparator = nil
            } else if bytes[close + 1] == UInt8(ascii: ":") {
                portSeparator = close + 1
            } else {
                throw .invalid("invalid authority")
            }
        } else {
            portSeparator = bytes.lastIndex(of: UInt8(ascii: ":"))
        }
        guard let portSeparator else { return (try Host.parse(bytes), nil) }
        let digits = bytes[(portSeparator + 1)...]
        guard digits.count <= 5, let value = BoundedDecimal.parse(digits, maximum: 65535), value > 0 else {
            throw .invalid("invalid port")
        }
        return (try Host.parse(bytes[..<portSeparator]), UInt16(value))
    }

    /// A fragment never belongs in a request target; everything else must be visible ASCII.
    private static func validatePathAndQuery(_ bytes: ArraySlice<UInt8>) throws(TargetParseError) {
        for byte in bytes {
            if byte == UInt8(ascii: "#") { throw .invalid("fragment in request target") }
            if byte <= 0x20 || byte >= 0x7F { throw .invalid("invalid character in request target") }
        }
    }
}
