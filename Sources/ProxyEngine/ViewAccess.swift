import Digests
import HTTP1Codec
import PosixSupport
import ScopePolicy

#if canImport(Glibc)
    import Glibc
#endif

/// Who may open the live view (`/view*` on the admin listener, docs/view.md): the config's
/// `admin_token` names a secret; its current value is read from the secret lookup at each request,
/// so a rotated file secret takes effect at once and a reload swaps name and lookup together.
/// Health and metrics never need it.
public final class ViewAccess: Sendable {
    private struct Token: Sendable {
        var secret: String?
        var lookup: (any SecretLookup)?
    }

    private let token: Locked<Token>

    /// `tokenSecret`: the `admin_token` secret's name (nil: none configured), looked up in `secrets`.
    public init(tokenSecret: String? = nil, secrets: (any SecretLookup)? = nil) {
        token = Locked(Token(secret: tokenSecret, lookup: secrets))
    }

    /// A reload: the new config's `admin_token` and the store its value now comes from.
    public func replace(tokenSecret: String?, secrets: (any SecretLookup)?) {
        token.withLock { $0 = Token(secret: tokenSecret, lookup: secrets) }
    }

    /// What a request must show.
    enum Requirement {
        /// No `admin_token`: the view is open (only to a loopback admin address, see `AdminRoutes`).
        case none
        case token(SecretValue)
        /// A token is configured but has no value now (its secret failed to load): nobody gets in.
        case unavailable
    }

    var requirement: Requirement {
        let current = token.withLock { $0 }
        guard let name = current.secret else { return .none }
        guard let value = current.lookup?.value(of: name), !value.exposedBytes.isEmpty else { return .unavailable }
        return .token(value)
    }

    /// The cookie's name; its path is `/view`.
    static let cookieName = "scopeproxy_view"

    /// How long a cookie `?token=` set is accepted: a working day. The browser is told the same
    /// (`Max-Age`), and the proxy checks the time the cookie carries, so a cookie copied out of a
    /// browser stops working on its own.
    static let cookieLifetimeSeconds: UInt64 = 12 * 60 * 60

    /// This process's own key for cookies: a cookie from an earlier run, or made by anyone who
    /// knows only the token's derivation, is refused. Browsers send a host's cookies to all of its
    /// ports (RFC 6265 §8.5), so a cookie may reach another local server; what it can do there is
    /// bounded by this process's life and `cookieLifetimeSeconds` (docs/view.md).
    private static let processKey: [UInt8] = RandomBytes.generate(32)

    /// The cookie's value, `EXPIRES.MAC`: the expiry (seconds since 1970) and a hex HMAC-SHA256
    /// keyed with the token over this process's key and the expiry. Never the token itself.
    static func cookieValue(for token: SecretValue, expires: UInt64) -> [UInt8] {
        Array("\(expires).".utf8) + mac(token, expires)
    }

    private static func mac(_ token: SecretValue, _ expires: UInt64) -> [UInt8] {
        let message = processKey + Array(" scopeproxy view cookie \(expires)".utf8)
        return Array(Hex.lowercase(HMAC.sha256(key: token.exposedBytes, message: message)).utf8)
    }

    /// Whether `presented` is a cookie this process set for `token` that has not expired at `now`.
    /// The expiry is read with a bound before any arithmetic; the MAC is compared in constant time.
    static func cookieIsValid(_ presented: [UInt8], for token: SecretValue, now: UInt64) -> Bool {
        guard let dot = presented.firstIndex(of: UInt8(ascii: ".")), dot > 0, dot <= 12,
            let parsed = BoundedDecimal.parse(presented[..<dot], maximum: 999_999_999_999)
        else { return false }
        let expires = UInt64(parsed)
        guard expires >= now, expires <= now + cookieLifetimeSeconds else { return false }
        return ProxyAuthorization.constantTimeEqual(Array(presented[(dot + 1)...]), mac(token, expires))
    }

    /// Seconds since 1970, for cookie expiry.
    static func wallClockSeconds() -> UInt64 { UInt64(max(0, time(nil))) }

    /// Whether `presented` is the token: in time that depends only on the lengths.
    static func matches(_ presented: [UInt8], _ token: SecretValue) -> Bool {
        ProxyAuthorization.constantTimeEqual(presented, token.exposedBytes)
    }

    /// The `Authorization: Bearer X` credential's bytes, if the request has exactly one such field.
    static func bearer(_ fields: HTTPFields) -> [UInt8]? {
        guard let value = fields.singleValue(of: "authorization").only else { return nil }
        let bytes = HTTPField.wireBytes(of: value)
        let scheme = Array("bearer ".utf8)
        guard bytes.count > scheme.count,
            zip(bytes.prefix(scheme.count), scheme).allSatisfy({ ($0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0) == $1 })
        else { return nil }
        return Array(bytes.dropFirst(scheme.count).drop { $0 == 0x20 })
    }

    /// Every `scopeproxy_view` cookie value the request carries (RFC 6265 §5.4: `a=b; c=d`).
    static func cookies(_ fields: HTTPFields) -> [[UInt8]] {
        var found: [[UInt8]] = []
        for value in fields.values("cookie") {
            for pair in HTTPField.wireBytes(of: value).split(separator: UInt8(ascii: ";")) {
                let trimmed = pair.drop { $0 == 0x20 }
                guard let equals = trimmed.firstIndex(of: UInt8(ascii: "=")) else { continue }
                if trimmed[..<equals].elementsEqual(cookieName.utf8) { found.append(Array(trimmed[(equals + 1)...])) }
            }
        }
        return found
    }
}
