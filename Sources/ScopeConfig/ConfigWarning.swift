import HTTP1Codec

/// Something valid that will not do what the file seems to say (docs/configuration.md, "Warnings").
/// `check` prints each as `warning: FILE:LINE:COLUMN: message` on stderr and exits 0; `run` and a
/// reload log each as a structured line with level `warning`.
public struct ConfigWarning: Sendable, Equatable, CustomStringConvertible {
    public let file: String
    public let mark: Mark
    public let message: String

    public init(file: String, mark: Mark, message: String) {
        self.file = file
        self.mark = mark
        self.message = message
    }

    /// `FILE:LINE:COLUMN: message`, as errors are written (one spelling: `Mark.located`).
    public var description: String { mark.located(in: file, message) }
}

extension ProxyConfiguration {
    /// `tls.intercept`: the listed hosts, or with `scoped` every host of every https scope origin.
    public var interceptedHosts: Set<String> {
        switch tls.intercept {
        case .hosts(let hosts): Set(hosts)
        case .scoped: Set(policy.scopes.flatMap(\.origins).filter { $0.scheme == .https }.map(\.host))
        }
    }
}

extension Decoder {
    /// An https scope origin the proxy never sees in clear: a client using HTTPS_PROXY sends CONNECT,
    /// which is refused (tunnel: deny) or spliced unseen (tunnel: allow), so the scope's credentials
    /// never reach it. Only a route (the proxy makes the TLS connection itself) or interception does.
    func uninterceptedOriginWarnings(_ config: ProxyConfiguration, origins: [(scope: String, origin: Origin, mark: Mark)]) -> [ConfigWarning] {
        let intercepted = config.interceptedHosts
        let routed = Set(config.routes.map(\.upstream))
        let connect = config.tls.tunnel == .deny ? "which is denied (403, tls.tunnel: deny)" : "which is tunnelled unseen (tls.tunnel: allow)"
        return origins.filter { $0.origin.scheme == .https && !intercepted.contains($0.origin.host) && !routed.contains($0.origin) }.map { entry in
            ConfigWarning(
                file: file, mark: entry.mark,
                message: "https origin https://\(entry.origin.authority) of scope '\(entry.scope)' is not intercepted: a client using HTTPS_PROXY "
                    + "reaches it through CONNECT, \(connect), so the scope never applies there; "
                    + "add `tls: { intercept: scoped }` (and trust the proxy's CA: scopeproxy ca) or reach it through a route")
        }
    }
}
