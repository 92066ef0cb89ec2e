import PosixSupport
import ScopePolicy

/// Why a request was refused with 407: the access log's `reason`, and the schemes the 407's
/// Proxy-Authenticate offers. Never holds anything the client sent.
public struct ClientRefusal: Sendable, Equatable {
    public enum Reason: String, Sendable, Equatable {
        /// Proxy-Authorization was sent and is not one this proxy can read (bad base64, no colon,
        /// unknown scheme, too long).
        case proxyAuthorizationInvalid = "proxy_authorization_invalid"
        /// Proxy-Authorization was sent and names no configured client (wrong user, password or
        /// token). Never a fallback to uid, source or anonymous.
        case proxyAuthorizationNotRecognised = "proxy_authorization_not_recognised"
        /// Proxy-Authorization was sent in a scheme no configured client uses (Basic where every
        /// `auth` client is Bearer, or the reverse). Says only what Proxy-Authenticate already
        /// offers: which schemes are configured, never which names or keys exist.
        case proxyAuthorizationSchemeNotConfigured = "proxy_authorization_scheme_not_configured"
        /// Nothing recognised the client and no `anonymous` client is defined.
        case clientNotRecognised = "client_not_recognised"
    }

    public var reason: Reason
    /// A fixed-text detail: the malformation, or why the socket owner is unknown.
    public var detail: String?
    /// What Proxy-Authenticate offers (the schemes configured clients use; Basic when none does,
    /// as RFC 9110 §11.7.1 requires at least one challenge).
    public var schemes: [ProxyAuthScheme]
    /// The kinds of rule the configured clients are recognised by: the message suggests only
    /// these (never Proxy-Authorization when no client uses `auth`, which could not succeed).
    public var recognizers: ClientRecognizers

    public init(
        reason: Reason, detail: String? = nil, schemes: [ProxyAuthScheme] = [.basic],
        recognizers: ClientRecognizers = ClientRecognizers(proxyAuthorization: true)
    ) {
        self.reason = reason
        self.detail = detail
        self.schemes = schemes
        self.recognizers = recognizers
    }

    /// The log's `reason`: `client_not_recognised (socket owner unknown: ...)`.
    public var logText: String { detail.map { "\(reason.rawValue) (\($0))" } ?? reason.rawValue }
}

/// Which kinds of client rule are configured (never their values: no name, uid or network), and
/// the TLS client listener's address (a port the proxy already announces), for the 407 message.
public struct ClientRecognizers: Sendable, Equatable {
    public var proxyAuthorization = false
    public var clientCertificate = false
    /// `tls.client_listen` as configured; nil when unknown or when it asks for any free port.
    public var clientCertificateListen: String?
    public var uid = false
    public var source = false

    public init(
        proxyAuthorization: Bool = false, clientCertificate: Bool = false, clientCertificateListen: String? = nil,
        uid: Bool = false, source: Bool = false
    ) {
        self.proxyAuthorization = proxyAuthorization
        self.clientCertificate = clientCertificate
        self.clientCertificateListen = clientCertificateListen
        self.uid = uid
        self.source = source
    }

    public init(_ rules: [ClientRule], tlsClientListen: String?) {
        self.init(
            proxyAuthorization: rules.contains { $0.auth != nil }, clientCertificate: rules.contains { $0.tlsClient != nil },
            clientCertificateListen: tlsClientListen, uid: rules.contains { $0.uid != nil },
            source: rules.contains { !$0.sources.isEmpty })
    }
}

/// How a request was recognised, or why it was not.
public enum Recognition: Sendable, Equatable {
    case client(ClientIdentity)
    case refused(ClientRefusal)
}

/// The configured clients (`clients:`, or the `proxy_auth` shorthand) and their rate buckets.
/// Recognition is a pure function of the rules, the facts the engine gathered about the connection,
/// the request's Proxy-Authorization and the secret values; only the buckets hold state.
public final class ClientDirectory: Sendable {
    public let rules: [ClientRule]
    /// Whether any rule uses `uid`: only then does the engine look up socket owners.
    public let needsSocketOwner: Bool
    public let schemes: [ProxyAuthScheme]
    /// The kinds of rule configured, for a 407's message.
    public let recognizers: ClientRecognizers
    private let anonymous: ClientRule?
    private let buckets = Locked<[String: TokenBucket]>([:])

    /// `tlsClientListen`: `tls.client_listen` as configured, named by a 407 when a client
    /// certificate is a way to be recognised.
    public init(_ rules: [ClientRule], tlsClientListen: String? = nil) {
        self.rules = rules
        recognizers = ClientRecognizers(rules, tlsClientListen: tlsClientListen)
        needsSocketOwner = rules.contains { $0.uid != nil }
        let offered = Set(rules.compactMap(\.auth).flatMap(\.schemes)).sorted()
        schemes = offered.isEmpty ? [.basic] : offered
        anonymous = rules.first { $0.name == ClientRule.anonymousName }
    }

    /// No client is configured: every request is the one unnamed client.
    public var isEmpty: Bool { rules.isEmpty }

    public var names: [String] { rules.map(\.name) }

    /// Recognition order: tls_client, auth (a Proxy-Authorization that is sent decides: a wrong one
    /// is refused, never a fallback), uid, source, anonymous; otherwise 407.
    public func recognize(_ facts: ConnectionFacts, proxyAuthorization: String?, secrets: any SecretLookup) -> Recognition {
        guard !rules.isEmpty else { return .client(.unnamed) }
        if let certificate = facts.certificate {
            for rule in rules {
                guard let match = rule.tlsClient, certificate.verifiedBy.contains(match.caFile),
                    match.subject.matches(commonNames: certificate.commonNames, subjectAltNames: certificate.subjectAltNames)
                else { continue }
                return .client(ClientIdentity(name: rule.name))
            }
        }
        let usesAuth = rules.contains { $0.auth != nil }
        // A Proxy-Authorization where no client uses `auth` is not a credential for this proxy (it
        // is stripped like any sensitive header) and decides nothing.
        if usesAuth, let value = proxyAuthorization {
            switch ProxyAuthorization.parse(value) {
            case .malformed(let why):
                return .refused(ClientRefusal(reason: .proxyAuthorizationInvalid, detail: why.rawValue, schemes: schemes))
            case let credentials:
                if let sent = credentials.scheme, !schemes.contains(sent) {
                    return .refused(ClientRefusal(reason: .proxyAuthorizationSchemeNotConfigured, schemes: schemes))
                }
                if let name = authenticate(credentials, secrets: secrets) { return .client(ClientIdentity(name: name)) }
                return .refused(ClientRefusal(reason: .proxyAuthorizationNotRecognised, schemes: schemes))
            }
        }
        var ownerProblem: String?
        switch facts.owner {
        case .uid(let uid):
            if let rule = rules.first(where: { $0.uid == uid }) { return .client(ClientIdentity(name: rule.name)) }
        case .unknown(let reason):
            ownerProblem = needsSocketOwner ? "socket owner unknown: \(reason)" : nil
        case .notLookedUp:
            break
        }
        if let ip = facts.peerIP.flatMap(IPAddress.parse) {
            for rule in rules where rule.sources.contains(where: { $0.contains(ip) }) {
                return .client(ClientIdentity(name: rule.name))
            }
        }
        if let anonymous { return .client(ClientIdentity(name: anonymous.name)) }
        return .refused(ClientRefusal(reason: .clientNotRecognised, detail: ownerProblem, schemes: schemes, recognizers: recognizers))
    }

    /// The client whose `auth` these credentials are; nil when none. Every candidate secret is
    /// compared in constant time; a Basic user name selects its client (the name is not secret).
    func authenticate(_ credentials: ProxyAuthorization, secrets: any SecretLookup) -> String? {
        var found: String?
        switch credentials {
        case .basic(let user, let password):
            for rule in rules {
                switch rule.auth {
                case .basic(let name, let secret)? where Array(name.utf8) == user:
                    if matches(password, secret, secrets), found == nil { found = rule.name }
                case .anyUserOrBearer(let secret)?:
                    if matches(password, secret, secrets), found == nil { found = rule.name }
                default:
                    continue
                }
            }
        case .bearer(let token):
            for rule in rules {
                switch rule.auth {
                case .bearer(let secret)?, .anyUserOrBearer(let secret)?:
                    if matches(token, secret, secrets), found == nil { found = rule.name }
                default:
                    continue
                }
            }
        case .malformed:
            return nil
        }
        return found
    }

    /// A secret without a value matches nothing (fail closed), and an empty one neither.
    private func matches(_ presented: [UInt8], _ secret: String, _ secrets: any SecretLookup) -> Bool {
        guard let expected = secrets.value(of: secret)?.exposedBytes, !expected.isEmpty else { return false }
        return ProxyAuthorization.constantTimeEqual(presented, expected)
    }

    /// The client's rate limit, applied: one token per request. `now`: monotonic microseconds.
    public func admit(_ client: ClientIdentity, now: UInt64) -> TokenBucket.Decision {
        guard let name = client.name, let limit = rules.first(where: { $0.name == name })?.rate else { return .allowed }
        return buckets.withLock { buckets in
            var bucket = buckets[name] ?? TokenBucket(limit: limit, now: now)
            defer { buckets[name] = bucket }
            return bucket.take(now: now)
        }
    }
}
