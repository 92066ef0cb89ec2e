import PosixSupport
import HTTP1Codec
import ScopePolicy

/// Everything the data path needs from the scope layer, as one immutable value. A reload builds a
/// new one and swaps it in whole: an exchange keeps the context it started with.
public final class ScopeContext: Sendable {
    public let policy: ScopePolicy
    public let redirects: RedirectPolicy
    public let secrets: any SecretLookup
    /// Name of the secret holding the proxy password; nil: no proxy authentication.
    public let proxyAuthSecret: String?
    /// CONNECT hosts (normalized) whose TLS the proxy terminates with its local CA.
    public let interceptHosts: Set<String>

    public init(policy: ScopePolicy, redirects: RedirectPolicy = RedirectPolicy(), secrets: any SecretLookup = StaticSecrets([:]),
                proxyAuthSecret: String? = nil, interceptHosts: Set<String> = []) {
        self.policy = policy
        self.redirects = redirects
        self.secrets = secrets
        self.proxyAuthSecret = proxyAuthSecret
        self.interceptHosts = interceptHosts
    }

    /// The embedded default: no scope, every sensitive header stripped everywhere.
    public static let stripEverything = ScopeContext(policy: .stripEverything)

    /// Who sent a request, from its Proxy-Authorization; nil: not recognised (407).
    public func identify(proxyAuthorization: String?) -> ClientIdentity? {
        acceptsProxyAuthorization(proxyAuthorization) ? .unnamed : nil
    }

    /// Proxy-Authorization check: `Basic base64(any-user:secret)` or `Bearer secret`, compared in
    /// constant time. True when no proxy password is configured. Bytes are compared with bytes:
    /// the secret's as read, Bearer's as they came off the wire (the header value holds one
    /// scalar per byte), Basic's as base64-decoded; neither side is decoded as text, which
    /// mangled any non-ASCII password.
    public func acceptsProxyAuthorization(_ value: String?) -> Bool {
        guard let proxyAuthSecret else { return true }
        guard let expected = secrets.value(of: proxyAuthSecret)?.exposedBytes, let value else { return false }
        let presented: [UInt8]
        if value.count > 7, value.prefix(7).lowercased() == "bearer " {
            presented = HTTPField.wireBytes(of: String(value.dropFirst(7)).trimmingSpaces())
        } else if value.count > 6, value.prefix(6).lowercased() == "basic ",
                  let decoded = Base64.decode(String(value.dropFirst(6)).trimmingSpaces()),
                  let colon = decoded.firstIndex(of: UInt8(ascii: ":")) {
            presented = Array(decoded[(colon + 1)...])
        } else {
            return false
        }
        return Self.constantTimeEqual(presented, expected)
    }

    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var difference = UInt8(a.count == b.count ? 0 : 1)
        for index in 0..<max(a.count, b.count) {
            difference |= (index < a.count ? a[index] : 0) ^ (index < b.count ? b[index] : 0)
        }
        return difference == 0
    }
}

/// The current context, read by every worker at the start of each exchange.
public final class ScopeContextHolder: Sendable {
    private let current: Locked<ScopeContext>

    public init(_ context: ScopeContext = .stripEverything) {
        current = Locked(context)
    }

    public var context: ScopeContext { current.withLock { $0 } }

    public func replace(with context: ScopeContext) {
        current.withLock { $0 = context }
    }
}

extension String {
    func trimmingSpaces() -> String {
        var slice = Substring(self)
        while slice.first == " " { slice.removeFirst() }
        while slice.last == " " { slice.removeLast() }
        return String(slice)
    }
}
