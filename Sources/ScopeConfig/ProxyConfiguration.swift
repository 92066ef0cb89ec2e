import HTTP1Codec
import ProxySettings
import ScopePolicy

/// A validated configuration: every value checked, every reference resolved. The executable maps it
/// onto the engine; nothing here touches sockets.
public struct ProxyConfiguration: Sendable {
    public var sourcePath: String?
    public var listen: HostPort
    /// Name of the secret that is the proxy password; nil means no proxy authentication. The
    /// shorthand for one client (`ScopeContext` turns it into one); never set with `clients`.
    public var proxyAuthSecret: String?
    /// `clients:`; empty: the proxy does not tell clients apart (or `proxy_auth` defines the one).
    public var clients: [ClientRule] = []
    public var admin: HostPort?
    /// `admin_token`: the secret (an ordinary one) whose value opens the live view (`/view*`); nil:
    /// none, allowed only with a loopback admin address.
    public var adminToken: String?
    public var storeDirectory: String
    public var secrets: [String: SecretSource]
    /// Secrets whose value the proxy obtains (`oauth2:`, `command:`, `github_app:`, and each AWS
    /// chain a scope signs with, named `aws:...`), by name; not in `secrets`, which the store reads.
    public var computed: [String: ComputedSecret] = [:]
    /// The `oauth2:` secrets among them.
    public var oauth2: [String: OAuth2Spec] {
        computed.compactMapValues { if case .oauth2(let spec) = $0 { spec } else { nil } }
    }
    /// The secrets holding a PEM private key a computed secret signs with.
    public var privateKeySecrets: Set<String> { Set(computed.values.flatMap(\.privateKeys)) }
    /// Secrets declared with `placeholder: true` (and their `env_var`), in name order.
    public var placeholders: [PlaceholderSecret] = []
    /// `scrub:` and `guard:`.
    public var protection = SecretProtection()
    /// `egress:` with each client's own (docs/egress.md); the standard policy without the key.
    public var egress = EgressPolicy.standard
    public var policy: ScopePolicy
    public var routes: [Route]
    /// `transparent.listen`: the transparent-capture listener (docs/transparent.md); nil: none.
    public var transparentListen: HostPort?
    public var redirects: RedirectPolicy
    public var tls: TLSSettings
    public var timeouts: Timeouts
    /// `limits:` (docs/configuration.md, `limits`): `max_connections` sets
    /// `maxClientConnections`; the other bounds are the engine's defaults.
    public var limits = Limits()
    public var log: LogSettings
    /// What the file says that is valid but will not do what it seems to (`ConfigWarning`).
    public var warnings: [ConfigWarning] = []
    /// `tls.client_listen`: the TLS client listener's address (kept with the other `tls` keys).
    public var clientListen: HostPort? {
        get { tls.clientListen }
        set { tls.clientListen = newValue }
    }

    /// The embedded safe default (docs/configuration.md): 127.0.0.1:8080, no scopes (every sensitive header
    /// stripped everywhere), redacted JSON log to stdout.
    public static func embeddedDefault(home: String) -> ProxyConfiguration {
        ProxyConfiguration(
            sourcePath: nil, listen: HostPort(host: "127.0.0.1", port: 8080), proxyAuthSecret: nil, admin: nil,
            storeDirectory: home + "/.local/share/scopeproxy/secrets", secrets: [:], policy: .stripEverything,
            routes: [], redirects: RedirectPolicy(), tls: TLSSettings(caDirectory: home + "/.local/share/scopeproxy/ca"),
            timeouts: Timeouts(), log: LogSettings())
    }

    /// The CA files of every `tls_client` entry, resolved relative to the config file (the TLS
    /// client listener trusts these; `ClientCertificate.verifiedBy` names them the same way).
    public var clientCAFiles: [String] {
        var seen: Set<String> = []
        return clients.compactMap { $0.tlsClient?.caFile }.filter { seen.insert($0).inserted }
    }

    /// The per-install key placeholders are derived from: beside the local CA, mode 0600, created
    /// on first use.
    public var placeholderKeyPath: String { tls.caDirectory + "/placeholder.key" }

    /// `check`'s one-line summary.
    public var summary: String {
        let injected = policy.scopes.reduce(0) { $0 + $1.inject.count }
        return "valid: listen \(listen), \(policy.scopes.count) scope(s), \(injected) injected header(s), "
            + (clients.isEmpty ? "" : "\(clients.count) client(s), ")
            + "\(secrets.count) secret(s), " + (computed.isEmpty ? "" : "\(computed.count) computed secret(s), ")
            + (placeholders.isEmpty ? "" : "\(placeholders.count) placeholder(s), ")
            + "redirects \(redirects.mode.rawValue), tunnel \(tls.tunnel.rawValue), egress \(egress.defaultAction.rawValue)"
            + (egress.mode == .report ? " (report)" : "")
    }
}

/// The config's `HOST:PORT` values are the engine's listen addresses.
public typealias HostPort = ListenAddress

public struct TLSSettings: Sendable, Equatable {
    public enum Intercept: Sendable, Equatable {
        case hosts([String])
        /// Every host of every scope.
        case scoped
    }

    public var intercept: Intercept = .hosts([])
    public var tunnel: TunnelPolicy = .deny
    public var caDirectory: String
    public var upstreamCA: String?
    /// `client_listen`: a second listener speaking TLS (certificate from the local CA), which asks
    /// clients for a certificate; the forward proxy inside. Needs interception on (the local CA).
    public var clientListen: HostPort?

    public init(intercept: Intercept = .hosts([]), tunnel: TunnelPolicy = .deny, caDirectory: String, upstreamCA: String? = nil) {
        self.intercept = intercept
        self.tunnel = tunnel
        self.caDirectory = caDirectory
        self.upstreamCA = upstreamCA
    }
}

public struct LogSettings: Sendable, Equatable {
    public var format: LogFormat = .json
    /// `log.format` was written in the file. When it was not, a terminal on stdout gets the
    /// readable text format instead of JSON (the command line decides; the file's word wins).
    public var formatIsExplicit = false
    public var output: LogOutput = .standardOutput
    public var bodies = false
    public var safeHeaders: [String] = []
    public var safeQuery: [String] = []
    public var safeJSONKeys: [String] = []

    public init() {}

    /// Body summaries are fields of the JSON line; a text line carries no headers and no bodies,
    /// so `bodies: true` there would silently log nothing (docs/logging.md, "Text format").
    public func bodiesWithoutEffect(format: LogFormat) -> Bool { bodies && format == .text }

    public static let bodiesWithoutEffectMessage =
        "log.bodies: true has no effect on the text log (a text line carries no headers or bodies): set log.format: json to log body summaries"
}
