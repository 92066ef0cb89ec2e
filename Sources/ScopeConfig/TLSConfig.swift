import HTTP1Codec
import ProxySettings

/// `tls:` (docs/configuration.md, `tls`): interception, tunnels, the local CA and the TLS client listener.
extension Decoder {
    func readTLS(_ keys: [String: YAMLNode], into config: inout ProxyConfiguration) throws(ConfigError) {
        if let node = keys["tls"] { config.tls = try tls(node, defaults: config.tls) }
    }

    func tls(_ node: YAMLNode, defaults: TLSSettings) throws(ConfigError) -> TLSSettings {
        let keys = try mapping(node, allowed: ["intercept", "tunnel", "ca_dir", "upstream_ca", "client_listen"], context: "tls")
        var settings = defaults
        if let interceptNode = keys["intercept"] {
            if case .scalar(let text, _) = interceptNode.value, text == "scoped" {
                settings.intercept = .scoped
            } else {
                settings.intercept = .hosts(
                    try list(interceptNode).map { item throws(ConfigError) -> String in
                        let host = try string(item)
                        guard let parsed = try? Host.parse(Substring(host)) else { throw error(item, "invalid host '\(host)'") }
                        return parsed.normalized
                    })
            }
        }
        if let tunnelNode = keys["tunnel"] {
            guard let tunnel = TunnelPolicy(rawValue: try string(tunnelNode)) else { throw error(tunnelNode, "tunnel must be allow or deny") }
            settings.tunnel = tunnel
        }
        if let caNode = keys["ca_dir"] { settings.caDirectory = expand(try nonEmptyString(caNode), relativeTo: file) }
        if let upstreamNode = keys["upstream_ca"], !upstreamNode.isNull {
            settings.upstreamCA = expand(try nonEmptyString(upstreamNode), relativeTo: file)
        }
        if let listenNode = keys["client_listen"], !listenNode.isNull {
            settings.clientListen = try hostPort(listenNode)
            // Its certificate comes from the local CA clients already trust for interception, and
            // that CA is in use only when something is intercepted.
            if settings.intercept == .hosts([]) {
                throw error(
                    listenNode,
                    "client_listen needs TLS interception on: its certificate is signed by the local CA, "
                        + "which is used only when tls.intercept lists hosts (or is 'scoped')")
            }
        }
        return settings
    }
}
