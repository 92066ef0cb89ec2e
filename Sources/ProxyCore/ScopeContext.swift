import HTTP1Codec
import PosixSupport
import ScopePolicy

/// Everything the data path needs from the scope layer, as one immutable value. A reload builds a
/// new one and swaps it in whole: an exchange keeps the context it started with.
public final class ScopeContext: Sendable {
    public let policy: ScopePolicy
    public let redirects: RedirectPolicy
    public let secrets: any SecretLookup
    /// The configured clients (`clients:`, or the `proxy_auth` shorthand as one client); empty:
    /// every request is the one unnamed client.
    public let clients: ClientDirectory
    /// CONNECT hosts (normalized) whose TLS the proxy terminates with its local CA.
    public let interceptHosts: Set<String>
    /// `scrub:` and `guard:`.
    public let protection: SecretProtection
    /// Secret values and placeholders as the scrub and the guard look for them (updated when the
    /// store re-reads a rotated value).
    public let values: SecretValueIndex
    /// Where access tokens the proxy obtains (`oauth2:` secrets) come from; nil without any.
    public let tokens: (any AccessTokenSource)?
    /// The `oauth2:` secrets' names (a request that injects one waits for its token first).
    public let tokenSecrets: Set<String>
    /// Where clients may connect at all (`egress:`, docs/egress.md), each client's rules made once.
    public let egressRules: EgressRuleBook
    public var egress: EgressPolicy { egressRules.policy }

    /// `proxyAuthSecret`: the `proxy_auth: { secret: NAME }` shorthand, one client named
    /// `proxy_auth` recognised by `Basic any-user:secret` or `Bearer secret` (ignored when
    /// `clients` is given: the config refuses both at once).
    public init(
        policy: ScopePolicy, redirects: RedirectPolicy = RedirectPolicy(), secrets: any SecretLookup = StaticSecrets([:]),
        proxyAuthSecret: String? = nil, clients: [ClientRule] = [], interceptHosts: Set<String> = [],
        protection: SecretProtection = SecretProtection(), values: SecretValueIndex = SecretValueIndex(),
        tokens: (any AccessTokenSource)? = nil, tlsClientListen: String? = nil, egress: EgressPolicy = .standard
    ) {
        self.protection = protection
        self.values = values
        self.tokens = tokens
        tokenSecrets = tokens?.secretNames ?? []
        self.policy = policy
        self.redirects = redirects
        self.secrets = secrets
        var rules = clients
        if rules.isEmpty, let proxyAuthSecret {
            rules = [ClientRule(name: Self.proxyAuthClientName, auth: .anyUserOrBearer(secret: proxyAuthSecret))]
        }
        self.clients = ClientDirectory(rules, tlsClientListen: tlsClientListen)
        egressRules = EgressRuleBook(egress, clients: self.clients.names)
        self.interceptHosts = interceptHosts
    }

    /// The one client the `proxy_auth` shorthand defines.
    public static let proxyAuthClientName = "proxy_auth"

    /// The embedded default: no scope, every sensitive header stripped everywhere.
    public static let stripEverything = ScopeContext(policy: .stripEverything)

    /// Who sent a request: from the connection's facts and its Proxy-Authorization.
    public func recognize(_ facts: ConnectionFacts, proxyAuthorization: String?) -> Recognition {
        clients.recognize(facts, proxyAuthorization: proxyAuthorization, secrets: secrets)
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

extension ScopeContext: Equatable {
    /// Contexts are compared by identity: a reload makes a new one.
    public static func == (lhs: ScopeContext, rhs: ScopeContext) -> Bool { lhs === rhs }
}
