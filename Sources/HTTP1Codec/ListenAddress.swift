#if canImport(Glibc)
    import Glibc
#endif

/// A socket address to listen on (or to reach the admin endpoint at): `HOST:PORT`. One type for the
/// config (`listen`, `admin`, `routes`) and the engine.
public struct ListenAddress: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: UInt16

    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    /// `HOST:PORT` or `[V6]:PORT`; port 0 asks for any free port. The port is 1-5 decimal digits
    /// (no sign: `UInt16("+80")` would take one).
    public static func parse(_ text: String) -> ListenAddress? {
        guard let colon = text.lastIndex(of: ":") else { return nil }
        let digits = text.utf8[text.utf8.index(after: colon)...]
        guard digits.count <= 5, let port = BoundedDecimal.parse(digits, maximum: 65535) else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { return nil }
        return ListenAddress(host: host, port: UInt16(port))
    }

    /// Why `text` is not a `HOST:PORT` (for a text `parse` refused): a port out of 1-65535 is
    /// named as such, so `127.0.0.1:99999` does not read as a syntax error.
    public static func problem(_ text: String) -> String {
        let freePort = "use 1-65535 (or 0 for a free port)"
        guard let colon = text.lastIndex(of: ":"), colon != text.startIndex else { return "expected HOST:PORT, got '\(text)'" }
        let digits = text[text.index(after: colon)...]
        if digits.isEmpty { return "expected HOST:PORT, got '\(text)': the port is missing (\(freePort))" }
        guard digits.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            return "port '\(digits)' is not a number: \(freePort)"
        }
        if digits.count > 5 || BoundedDecimal.parse(digits.utf8, maximum: 65535) == nil {
            return "port \(digits) is out of range: \(freePort)"
        }
        return "expected HOST:PORT, got '\(text)'"
    }

    /// Why this host cannot be listened on, or nil. Listening needs an address, not a name: a name
    /// would be resolved once at start and could bind somewhere unexpected (a public interface), so
    /// only IP literals are taken, plus `localhost`, which is always 127.0.0.1.
    public var hostProblem: String? {
        if host == "localhost" { return nil }
        var v4 = in_addr(), v6 = in6_addr()
        if inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1 { return nil }
        return "'\(host)' is not an IP address: listen on an address such as 127.0.0.1, 0.0.0.0 or [::1] (or localhost)"
    }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}
