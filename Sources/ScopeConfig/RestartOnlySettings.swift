/// The keys a reload (SIGHUP) cannot apply: the engine reads them once, at start (listeners bound,
/// the access log opened, the local CA and upstream trust loaded, the timeouts and limits copied
/// into each worker). A reload swaps only the scope context (scopes, clients, secrets, redirects,
/// scrub, guard, proxy_auth, sensitive_headers, the intercepted host list). One table: the reload
/// warning and the tests both read it, and docs/configuration.md marks the same keys.
public struct RestartOnlySetting: Sendable {
    /// The key as the file spells it (`tls.ca_dir`).
    public let key: String
    /// Whether the configuration a reload read differs, for this key, from the one the proxy started with.
    public let changed: @Sendable (_ started: ProxyConfiguration, _ reloaded: ProxyConfiguration) -> Bool

    public static let all: [RestartOnlySetting] = [
        .init(key: "listen") { $0.listen != $1.listen },
        .init(key: "admin") { $0.admin != $1.admin },
        .init(key: "routes") { $0.routes != $1.routes },
        .init(key: "transparent.listen") { $0.transparentListen != $1.transparentListen },
        // The local CA is loaded at start only when something is intercepted: a reload can change
        // which hosts are intercepted, but not turn interception on.
        .init(key: "tls.intercept") { $0.interceptedHosts.isEmpty && !$1.interceptedHosts.isEmpty },
        .init(key: "tls.tunnel") { $0.tls.tunnel != $1.tls.tunnel },
        // The CA is read from it at start when something is intercepted, and the placeholder key
        // beside it stays the one of the start directory: a reload that read another key would
        // silently change what every placeholder a client holds stands for.
        .init(key: "tls.ca_dir") { started, reloaded in
            let used = !started.interceptedHosts.isEmpty || !started.placeholders.isEmpty || !reloaded.placeholders.isEmpty
            return used && started.tls.caDirectory != reloaded.tls.caDirectory
        },
        .init(key: "tls.upstream_ca") { $0.tls.upstreamCA != $1.tls.upstreamCA },
        .init(key: "tls.client_listen") { $0.tls.clientListen != $1.tls.clientListen },
        // The TLS client listener trusts the CA files it loaded at start (without one, none is read).
        .init(key: "clients[].tls_client.ca") { $0.clientListen != nil && $0.clientCAFiles.sorted() != $1.clientCAFiles.sorted() },
        .init(key: "timeouts") { $0.timeouts != $1.timeouts },
        .init(key: "limits.max_connections") { $0.limits.maxClientConnections != $1.limits.maxClientConnections },
        .init(key: "limits.h2_max_concurrent_streams") { $0.limits.h2MaxConcurrentStreams != $1.limits.h2MaxConcurrentStreams },
        .init(key: "log.format") { $0.log.format != $1.log.format || $0.log.formatIsExplicit != $1.log.formatIsExplicit },
        .init(key: "log.output") { $0.log.output != $1.log.output },
        .init(key: "log.bodies") { $0.log.bodies != $1.log.bodies },
        .init(key: "log.safe_headers") { $0.log.safeHeaders != $1.log.safeHeaders },
        .init(key: "log.safe_query") { $0.log.safeQuery != $1.log.safeQuery },
        .init(key: "log.safe_json_keys") { $0.log.safeJSONKeys != $1.log.safeJSONKeys },
    ]

    /// The restart-only keys whose value in `reloaded` is not what the proxy runs with, in table order.
    public static func ignoredByReload(started: ProxyConfiguration, reloaded: ProxyConfiguration) -> [String] {
        all.filter { $0.changed(started, reloaded) }.map(\.key)
    }
}
