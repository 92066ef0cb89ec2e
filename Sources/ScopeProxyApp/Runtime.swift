import HTTP1Codec
import PosixSupport
import ProxyCore
import ProxyEngine
import Redaction
import ScopeConfig
import ScopePolicy
import SecretStore

#if canImport(Glibc)
    import Glibc
#endif

/// Turns a validated configuration and its loaded secrets into what the engine runs on.
public enum Runtime {
    /// `placeholders`: derived with the per-install key (`placeholderTable`).
    public static func scopeContext(
        _ config: ProxyConfiguration, secrets: any SecretLookup,
        placeholders: PlaceholderTable = .empty, tokens: CredentialSources? = nil,
        minted: MintedTokens? = nil, previous: SecretValueIndex? = nil
    ) -> ScopeContext {
        let values = SecretValueIndex(placeholders: placeholders)
        // After a reload the values the old configuration sent stay watched while they may be valid.
        if let previous { values.inherit(from: previous) }
        values.scrubAlways(credentialEndpoints(config))
        let now = monotonicMilliseconds()
        // Private keys are never sent: not looked for in traffic (`SecretStore.scannedValues`).
        let scanned = secrets.currentValues.filter { !config.privateKeySecrets.contains($0.key) }
        values.update(
            values: (minted?.merged(into: scanned) ?? scanned).mapValues(\.exposedBytes),
            earlier: minted?.earlier(now: now) ?? [:], now: now)
        return ScopeContext(
            policy: config.policy, redirects: config.redirects, secrets: secrets, proxyAuthSecret: config.proxyAuthSecret,
            clients: config.clients, interceptHosts: interceptHosts(config), protection: config.protection, values: values,
            tokens: tokens,
            // Port 0 asks for any free port: the announced one is not known here.
            tlsClientListen: config.clientListen.flatMap { $0.port == 0 ? nil : $0.description }, egress: config.egress)
    }

    /// The origins the proxy itself sends secrets to, with their names: each token endpoint gets the
    /// client secret (and refresh token) and answers with the token.
    static func credentialEndpoints(_ config: ProxyConfiguration) -> [Origin: Set<String>] {
        var endpoints: [Origin: Set<String>] = [:]
        for (name, recipe) in config.computed {
            switch recipe {
            case .oauth2(let spec): endpoints[spec.endpoint, default: []].formUnion(spec.inputSecrets + [name])
            // The installation token comes back from the API (the key itself never travels: a JWT does).
            case .githubApp(let spec): endpoints[spec.api, default: []].insert(name)
            case .command, .awsChain: break
            }
        }
        return endpoints
    }

    /// What each origin was sent under `old` (for any client, by scopes or as a token endpoint) and is
    /// not sent under `new`: after a reload it stays in that origin's scrub while the values may be valid.
    static func formerlySent(
        old: ScopePolicy, oldEndpoints: [Origin: Set<String>], new: ScopePolicy,
        newEndpoints: [Origin: Set<String>]
    ) -> [Origin: Set<String>] {
        var result: [Origin: Set<String>] = [:]
        let origins = Set(old.scopes.flatMap(\.origins)).union(oldEndpoints.keys)
        for origin in origins {
            let before = old.secretsSentToAnyClient(origin).union(oldEndpoints[origin] ?? [])
            let after = new.secretsSentToAnyClient(origin).union(newEndpoints[origin] ?? [])
            let dropped = before.subtracting(after)
            if !dropped.isEmpty { result[origin] = dropped }
        }
        return result
    }

    /// The source of a config's computed secrets (nil without any). Every value it obtains (and
    /// every rotated refresh token, every AWS key) is told to the log tripwire and to the
    /// scrub/guard index before any request gets it.
    static func tokenSource(
        _ config: ProxyConfiguration, secrets: SecretStore, engine: EngineConfiguration,
        holder: ScopeContextHolder, minted: MintedTokens
    ) throws(EngineError) -> CredentialSources? {
        guard !config.computed.isEmpty else { return nil }
        return try CredentialSources(
            recipes: config.computed, secrets: secrets, sink: secrets, configuration: engine,
            observer: { name, value, validFor in
                let now = monotonicMilliseconds()
                minted.add(name, value, validFor: validFor, now: now)
                engine.accessLog?.updateSecrets(Runtime.tripwireValues(secrets.allValues + minted.all))
                let values = holder.context.values
                values.update(
                    values: minted.merged(into: secrets.scannedValues).mapValues(\.exposedBytes),
                    earlier: minted.earlier(now: now), now: now)
                // A token the endpoint made too short or too long to look for is said, as a stored one is.
                Runtime.reportExclusions(values)
            })
    }

    /// What the log tripwire looks for: every value also lowercased and JSON-escaped (the forms a
    /// value takes in a host name or in a body the proxy wrote), as the scrub and the guard do.
    static func tripwireValues(_ values: [SecretValue]) -> [SecretValue] {
        values.flatMap { SecretValueIndex.variants(of: $0.exposedBytes).map(SecretValue.init(bytes:)) }
    }

    /// Secrets too long to scan for (said at start, at each rotation and reload: never silently unguarded).
    static func reportExclusions(_ values: SecretValueIndex) {
        for exclusion in values.exclusions {
            Diagnostics.error("secret_not_scanned", [("secret", exclusion.secret), ("reason", exclusion.description)])
        }
    }

    /// `tls.intercept`: the listed hosts, or with `scoped` every host of every https scope origin.
    public static func interceptHosts(_ config: ProxyConfiguration) -> Set<String> { config.interceptedHosts }

    /// The config's warnings as log lines (at start and at each reload), level warning.
    static func logWarnings(_ config: ProxyConfiguration) {
        for warning in config.warnings { Diagnostics.warning("config_warning", [("warning", warning.description)]) }
    }

    /// Upstream TLS (system store + `upstream_ca`) always; the local CA only when something is
    /// intercepted (it is created on first use).
    public static func tlsContexts(_ config: ProxyConfiguration) throws(TLSError) -> TLSContexts {
        let authority = interceptHosts(config).isEmpty ? nil : try CertificateAuthority.loadOrCreate(directory: config.tls.caDirectory)
        return try TLSContexts(authority: authority, upstreamCA: config.tls.upstreamCA)
    }

    /// `presentation`: the log's format and colour as chosen for this process (see
    /// `LogPresentation.forProcess`); nil takes the config's format as written, without colour.
    public static func engineConfiguration(
        _ config: ProxyConfiguration, scope: ScopeContextHolder, secrets: SecretStore,
        accessLog enabled: Bool = true, presentation: LogPresentation? = nil
    ) throws(EngineError) -> EngineConfiguration {
        var engine = EngineConfiguration()
        engine.admin = config.admin
        // The live view (docs/view.md): one feed for the process's life (reloads keep it and its
        // viewers); the token is read from the store at each request, so a rotation applies at once.
        if config.admin != nil { engine.viewFeed = ViewFeed(metrics: engine.metrics) }
        engine.viewAccess = ViewAccess(tokenSecret: config.adminToken, secrets: secrets)
        engine.routes = config.routes
        engine.transparentListen = config.transparentListen
        if enabled {
            engine.accessLog = try accessLog(config.log, secrets: secrets, metrics: engine.metrics, presentation: presentation)
        } else if config.admin != nil {
            // The live view's records are redacted by the log's rules and tripwire: a log that
            // writes nothing keeps them for it.
            var discarded = config.log
            discarded.output = .discard
            engine.accessLog = try accessLog(discarded, secrets: secrets, metrics: engine.metrics, presentation: presentation)
        }
        if config.admin != nil { engine.viewRecorder = viewRecorder(config) }
        engine.listen = config.listen
        if let clientListen = config.clientListen {
            engine.clientListener = ClientListener(
                listen: clientListen,
                caFiles: config.clientCAFiles.map { ClientCAFile(name: $0, path: $0) })
        }
        engine.timeouts = config.timeouts
        engine.tunnel = config.tls.tunnel
        engine.limits = config.limits
        engine.scope = scope
        return engine
    }

    /// What the live view's records are written with: explain for `config` (built now, once).
    static func viewRecorder(_ config: ProxyConfiguration) -> ViewRecorder {
        let explainer = Explainer(config)
        return ViewRecorder(configPath: config.sourcePath) { explainer.explain($0) }
    }

    public static func accessLog(
        _ settings: LogSettings, secrets: SecretStore, metrics: Metrics, presentation: LogPresentation? = nil,
        observer: (@Sendable (String) -> Void)? = nil
    ) throws(EngineError) -> AccessLog {
        let presentation = presentation ?? LogPresentation(format: settings.format, colour: false)
        return try AccessLog(
            format: presentation.format, colour: presentation.colour, output: settings.output,
            rules: RedactionRules(extraHeaders: settings.safeHeaders, extraQuery: settings.safeQuery, extraJSONKeys: settings.safeJSONKeys),
            logBodies: settings.bodies, secretValues: tripwireValues(secrets.allValues), metrics: metrics, observer: observer)
    }

    /// The config's secrets; a missing store entry's hint names this config file (its store_dir).
    public static func secretStore(_ config: ProxyConfiguration) -> SecretStore {
        SecretStore(
            sources: config.secrets, storeDirectory: config.storeDirectory, configPath: config.sourcePath, privateKeys: config.privateKeySecrets)
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

/// Values the proxy obtained at run time (access tokens, rotated refresh tokens), by the secret
/// they belong to: every one that may still be valid (docs/security-model.md, "No oracle"), so a
/// replaced token is still redacted in the log and still masked and guarded until it expires.
public final class MintedTokens: Sendable {
    private struct Minted: Sendable {
        let value: SecretValue
        /// Monotonic milliseconds after which it no longer works.
        let until: UInt64
    }

    private let values = Locked<[String: [Minted]]>([:])

    public init() {}

    /// How long a value whose source gave no lifetime (a rotated refresh token, a token without
    /// `expires_in`) is kept after it was obtained.
    static let unknownLifetimeMilliseconds = TokenCachePolicy().unknownExpiryMilliseconds

    func add(_ secret: String, _ value: SecretValue, validFor: UInt64?, now: UInt64) {
        let until = now &+ (validFor ?? Self.unknownLifetimeMilliseconds)
        values.withLock { values in
            var list = (values[secret] ?? []).filter { $0.until > now && $0.value != value }
            list.append(Minted(value: value, until: until))
            // The token cache refuses to replace a token more often than this within its lifetime.
            values[secret] = Array(list.suffix(SecretValueIndex.maxEarlierValues + 1))
        }
    }

    var all: [SecretValue] { values.withLock { $0.values.flatMap { $0.map(\.value) } } }

    /// When the last value obtained for `secret` stops working (nil: none obtained).
    func expiry(of secret: String) -> UInt64? { values.withLock { $0[secret]?.map(\.until).max() } }

    /// The values each secret had before its newest that may still be valid.
    func earlier(now: UInt64) -> [String: [[UInt8]]] {
        values.withLock { values in
            values.compactMapValues { list in
                let live = list.dropLast().filter { $0.until > now }.map(\.value.exposedBytes)
                return live.isEmpty ? nil : Array(live)
            }
        }
    }

    /// `store` with the newest token of each secret (the value a request is given now).
    func merged(into store: [String: SecretValue]) -> [String: SecretValue] {
        let newest = values.withLock { $0.compactMapValues(\.last?.value) }
        return store.merging(newest) { _, token in token }
    }
}

/// A running proxy with its config: rotates file secrets every second and reloads on SIGHUP. A bad
/// reload logs its error and keeps the old config serving; what a reload cannot apply
/// (`RestartOnlySetting`) is logged as a warning naming the key, each time it differs.
final class RunningProxy: Sendable {
    private let configPath: String?
    /// The configuration the engine was started with: the restart-only keys keep its values.
    private let started: ProxyConfiguration
    private let holder: ScopeContextHolder
    /// The store the current config's secrets come from; a reload replaces it.
    private let secrets: Locked<SecretStore>
    private let engine: EngineConfiguration
    /// The token source of the current config (a reload replaces and stops it), and what it minted.
    private let tokens: Locked<CredentialSources?>
    private let minted: MintedTokens

    init(
        configPath: String?, started: ProxyConfiguration, secrets: SecretStore, holder: ScopeContextHolder, engine: EngineConfiguration,
        tokens: CredentialSources?, minted: MintedTokens
    ) {
        self.configPath = configPath
        self.started = started
        self.holder = holder
        self.engine = engine
        self.secrets = Locked(secrets)
        self.tokens = Locked(tokens)
        self.minted = minted
    }

    func stop() { tokens.withLock { $0?.stop() } }

    func rotateSecrets() {
        let secrets = self.secrets.withLock { $0 }
        let result = secrets.refresh()
        let now = monotonicMilliseconds()
        let values = holder.context.values
        if !result.changed.isEmpty || !result.errors.isEmpty {
            engine.accessLog?.updateSecrets(Runtime.tripwireValues(secrets.allValues + minted.all))
            values.update(
                values: minted.merged(into: secrets.scannedValues).mapValues(\.exposedBytes),
                earlier: minted.earlier(now: now), now: now)
            Runtime.reportExclusions(values)
        } else {
            // Values replaced long enough ago stop being looked for (tokens when they expire).
            values.update(expiring: minted.earlier(now: now), now: now)
        }
        for name in result.changed { Diagnostics.info("secret_rotated", [("secret", name)]) }
        for error in result.errors { Diagnostics.error("secret_unavailable", [("secret", error.name), ("reason", error.reason)]) }
    }

    func reload() {
        do {
            let config = try Runtime.loadConfiguration(path: configPath)
            let secrets = Runtime.secretStore(config)
            try secrets.load()
            let placeholders = try Runtime.placeholderTable(config, keyPath: started.placeholderKeyPath)
            // A new token source for the new config: its tokens are fetched again when first needed.
            let tokens = try Runtime.tokenSource(config, secrets: secrets, engine: engine, holder: holder, minted: minted)
            let previous = holder.context
            let context = Runtime.scopeContext(
                config, secrets: secrets, placeholders: placeholders, tokens: tokens, minted: minted,
                previous: previous.values)
            // An origin the old configuration sent a value to keeps being scrubbed of it while the
            // value may still be valid (a file or store value 10 minutes, a token until it expires).
            let now = monotonicMilliseconds()
            let dropped = Runtime.formerlySent(
                old: previous.policy, oldEndpoints: previous.values.alwaysScrubbed,
                new: config.policy, newEndpoints: Runtime.credentialEndpoints(config))
            context.values.scrubFormerlySent(dropped) { name in
                max(now &+ SecretValueIndex.retiredRetentionMilliseconds, self.minted.expiry(of: name) ?? 0)
            }
            holder.replace(with: context)
            // The old source is not stopped: requests waiting on its fetch keep it (their exchange
            // holds the old context) and get their token; it stops when the last of them lets go.
            self.tokens.withLock { $0 = tokens }
            Runtime.reportExclusions(context.values)
            self.secrets.withLock { $0 = secrets }
            engine.viewAccess.replace(tokenSecret: config.adminToken, secrets: secrets)
            engine.accessLog?.updateSecrets(Runtime.tripwireValues(secrets.allValues + minted.all))
            engine.metrics.increment(.reload(ok: true))
            if let recorder = engine.viewRecorder {
                let explainer = Explainer(config)
                recorder.replaceExplainer { explainer.explain($0) }
            }
            Runtime.logWarnings(config)
            // Said before `reloaded`, so nobody reads that line as "everything in the file is in force".
            for key in RestartOnlySetting.ignoredByReload(started: started, reloaded: config) {
                Diagnostics.warning(
                    "reload_ignored_key",
                    [
                        ("key", key),
                        (
                            "message",
                            "\(key) changed in the config file, but a reload "
                                + "cannot apply it: the proxy keeps its value from the start; restart to apply"
                        ),
                    ])
            }
            Diagnostics.info("reloaded", [("scopes", String(config.policy.scopes.count)), ("clients", String(config.clients.count))])
        } catch let error as ConfigError {
            reloadFailed(error.description)
        } catch let error as SecretError {
            reloadFailed(error.description)
        } catch let error as PlaceholderKeyError {
            reloadFailed(error.description)
        } catch let error as EngineError {
            reloadFailed(error.description)
        } catch {
            reloadFailed("unexpected error")
        }
        // Log rotation: a file output is reopened on every SIGHUP, whatever the config did.
        engine.accessLog?.reopen()
    }

    private func reloadFailed(_ message: String) {
        engine.metrics.increment(.reload(ok: false))
        Diagnostics.error("reload_failed", [("error", message)])
    }
}
