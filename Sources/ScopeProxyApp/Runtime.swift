import ProxyEngine
import ScopeConfig
import ScopePolicy
import SecretStore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Turns a validated configuration and its loaded secrets into what the engine runs on.
public enum Runtime {
    public static func scopeContext(_ config: ProxyConfiguration, secrets: SecretStore) -> ScopeContext {
        ScopeContext(policy: config.policy, redirects: config.redirects, secrets: secrets, proxyAuthSecret: config.proxyAuthSecret)
    }

    public static func engineConfiguration(_ config: ProxyConfiguration, scope: ScopeContextHolder) -> EngineConfiguration {
        var engine = EngineConfiguration()
        engine.listen = ListenAddress(host: config.listen.host, port: config.listen.port)
        engine.timeouts = Timeouts(connect: config.timeouts.connect, upstream: config.timeouts.upstream,
                                   idle: config.timeouts.idle, clientHeader: config.timeouts.clientHeader)
        engine.tunnel = config.tls.tunnel == .allow ? .allow : .deny
        engine.scope = scope
        return engine
    }

    /// Loads a config file, or the embedded default when `path` is nil.
    public static func loadConfiguration(path: String?) throws(ConfigError) -> ProxyConfiguration {
        guard let path else { return .embeddedDefault(home: home) }
        return try ConfigLoader.load(path: path, home: home)
    }

    public static var home: String {
        if let value = getenv("HOME") { return String(cString: value) }
        return "/root"
    }
}

/// A running proxy with its config: rotates file secrets every second and reloads on SIGHUP. A bad
/// reload logs its error and keeps the old config serving; listen address and threads need a restart.
final class RunningProxy: Sendable {
    private struct State {
        var config: ProxyConfiguration
        var secrets: SecretStore
    }

    private let configPath: String?
    private let holder: ScopeContextHolder
    private let state: Mutex<State>

    init(configPath: String?, config: ProxyConfiguration, secrets: SecretStore, holder: ScopeContextHolder) {
        self.configPath = configPath
        self.holder = holder
        state = Mutex(State(config: config, secrets: secrets))
    }

    func rotateSecrets() {
        let secrets = state.withLock { $0.secrets }
        let result = secrets.refresh()
        for name in result.changed { Log.info("secret_rotated", ["secret": name]) }
        for error in result.errors { Log.error("secret_unavailable", ["secret": error.name, "reason": error.reason]) }
    }

    func reload() {
        do {
            let config = try Runtime.loadConfiguration(path: configPath)
            let secrets = SecretStore(sources: config.secrets, storeDirectory: config.storeDirectory)
            try secrets.load()
            holder.replace(with: Runtime.scopeContext(config, secrets: secrets))
            state.withLock { $0 = State(config: config, secrets: secrets) }
            Log.info("reloaded", ["scopes": String(config.policy.scopes.count)])
        } catch let error as ConfigError {
            Log.error("reload_failed", ["error": error.description])
        } catch let error as SecretError {
            Log.error("reload_failed", ["error": error.description])
        } catch {
            Log.error("reload_failed", ["error": "unexpected error"])
        }
    }
}

/// Operational messages (not the access log) as JSON lines on stderr; values are names and fixed
/// text, never secrets.
enum Log {
    static func info(_ event: String, _ fields: [String: String] = [:]) { write("info", event, fields) }
    static func error(_ event: String, _ fields: [String: String] = [:]) { write("error", event, fields) }

    private static func write(_ level: String, _ event: String, _ fields: [String: String]) {
        var line = "{\"level\":\"\(level)\",\"event\":\"\(JSONText.escape(event))\""
        for key in fields.keys.sorted() { line += ",\"\(JSONText.escape(key))\":\"\(JSONText.escape(fields[key]!))\"" }
        writeStandardError(line + "}\n")
    }
}
