import HTTP1Codec
import ScopePolicy

/// A validated configuration: every value checked, every reference resolved. The executable maps it
/// onto the engine; nothing here touches sockets.
public struct ProxyConfiguration: Sendable {
    public var sourcePath: String?
    public var listen: HostPort
    /// Name of the secret that is the proxy password; nil means no proxy authentication.
    public var proxyAuthSecret: String?
    public var admin: HostPort?
    public var storeDirectory: String
    public var secrets: [String: SecretSource]
    public var policy: ScopePolicy
    public var routes: [Route]
    public var redirects: RedirectPolicy
    public var tls: TLSSettings
    public var timeouts: TimeoutSettings
    public var limits = LimitSettings()
    public var log: LogSettings

    /// The embedded safe default of the contract: 127.0.0.1:8080, no scopes (every sensitive header
    /// stripped everywhere), redacted JSON log to stdout.
    public static func embeddedDefault(home: String) -> ProxyConfiguration {
        ProxyConfiguration(
            sourcePath: nil, listen: HostPort(host: "127.0.0.1", port: 8080), proxyAuthSecret: nil, admin: nil,
            storeDirectory: home + "/.local/share/scopeproxy/secrets", secrets: [:], policy: .stripEverything,
            routes: [], redirects: RedirectPolicy(), tls: TLSSettings(caDirectory: home + "/.local/share/scopeproxy/ca"),
            timeouts: TimeoutSettings(), log: LogSettings())
    }

    /// `check`'s one-line summary.
    public var summary: String {
        let injected = policy.scopes.reduce(0) { $0 + $1.inject.count }
        return "valid: listen \(listen), \(policy.scopes.count) scope(s), \(injected) injected header(s), "
            + "\(secrets.count) secret(s), redirects \(redirects.mode.rawValue), tunnel \(tls.tunnel.rawValue)"
    }
}

/// The config's `HOST:PORT` values are the engine's listen addresses.
public typealias HostPort = ListenAddress

public enum SecretSource: Sendable, Equatable {
    case env(String)
    /// Absolute path (relative paths were resolved against the config file's directory).
    case file(path: String, allowGroupRead: Bool)
    case store(String)

    /// A name in the local store is a file name there: letters, digits, `_`, `.`, `-`, not
    /// starting with a dot (no hidden files, no `..`). The config and `scopeproxy secret` agree.
    public static func isValidStoreName(_ name: String) -> Bool {
        !name.isEmpty && !name.hasPrefix(".") && name.utf8.allSatisfy(HeaderTemplate.isNameByte)
    }
}

public struct Route: Sendable, Equatable {
    public var listen: HostPort
    public var upstream: Origin
}

public struct TLSSettings: Sendable, Equatable {
    public enum Intercept: Sendable, Equatable {
        case hosts([String])
        /// Every host of every scope.
        case scoped
    }

    public enum Tunnel: String, Sendable { case allow, deny }

    public var intercept: Intercept = .hosts([])
    public var tunnel: Tunnel = .deny
    public var caDirectory: String
    public var upstreamCA: String?

    public init(intercept: Intercept = .hosts([]), tunnel: Tunnel = .deny, caDirectory: String, upstreamCA: String? = nil) {
        self.intercept = intercept
        self.tunnel = tunnel
        self.caDirectory = caDirectory
        self.upstreamCA = upstreamCA
    }
}

/// `limits:` (an extension of the contract's schema).
public struct LimitSettings: Sendable, Equatable {
    /// Open client connections; past it new ones wait in the listen backlog.
    public var maxConnections = 10_000

    public init() {}
}

/// Milliseconds; defaults are the contract's.
public struct TimeoutSettings: Sendable, Equatable {
    public var connect = 5_000
    public var upstream = 30_000
    public var idle = 60_000
    public var clientHeader = 10_000

    public init() {}
}

public struct LogSettings: Sendable, Equatable {
    public enum Format: String, Sendable { case json, text }
    public enum Output: Sendable, Equatable { case stdout, stderr, file(String) }

    public var format: Format = .json
    public var output: Output = .stdout
    public var bodies = false
    public var safeHeaders: [String] = []
    public var safeQuery: [String] = []
    public var safeJSONKeys: [String] = []

    public init() {}
}
