import HTTP1Codec
import ProxySettings

/// Where the proxy listens and how long and how much it waits: `listen:`, `admin:`, `routes:`,
/// `timeouts:`, `limits:` (docs/configuration.md).
extension Decoder {
    func readListen(_ keys: [String: YAMLNode], into config: inout ProxyConfiguration) throws(ConfigError) {
        if let node = keys["listen"] { config.listen = try hostPort(node) }
        if let node = keys["admin"], !node.isNull { config.admin = try hostPort(node) }
        if let node = keys["admin_token"], !node.isNull {
            let name = try secretReference(node)
            // The admin listener reads the value at each request: one the store holds (env, file,
            // store), not one a command or a token endpoint gives.
            guard config.secrets[name] != nil else {
                throw error(node, "admin_token '\(name)' is a computed secret: name a secret with env, file or store")
            }
            config.adminToken = name
        }
        // The live view shows every exchange: off this machine it needs a token (docs/view.md).
        if let node = keys["admin"], let admin = config.admin, config.adminToken == nil, !Self.isLoopback(admin.host) {
            throw error(
                node,
                "admin \(admin) is reachable from other machines, and its live view (/view) shows every exchange: "
                    + "set admin_token to a secret (admin_token: view_token, with view_token under secrets), "
                    + "or listen on 127.0.0.1")
        }
    }

    /// `127.x.x.x`, `::1` or `localhost` (a listen host is an IP literal or localhost).
    static func isLoopback(_ host: String) -> Bool {
        guard let parsed = try? Host.parse(Substring(host.contains(":") ? "[\(host)]" : host)) else { return false }
        return parsed.isLoopback
    }

    func readRoutes(_ keys: [String: YAMLNode], into config: inout ProxyConfiguration) throws(ConfigError) {
        if let node = keys["routes"] { config.routes = try routes(node) }
    }

    func readTimeouts(_ keys: [String: YAMLNode], into config: inout ProxyConfiguration) throws(ConfigError) {
        if let node = keys["timeouts"] { config.timeouts = try timeouts(node) }
    }

    func readLimits(_ keys: [String: YAMLNode], into config: inout ProxyConfiguration) throws(ConfigError) {
        if let node = keys["limits"] { config.limits = try limits(node) }
    }

    func routes(_ node: YAMLNode) throws(ConfigError) -> [Route] {
        try list(node).map { item throws(ConfigError) -> Route in
            let keys = try mapping(item, allowed: ["listen", "upstream"], context: "a route")
            guard let listenNode = keys["listen"], let upstreamNode = keys["upstream"] else {
                throw error(item, "a route needs 'listen' and 'upstream'")
            }
            let text = try string(upstreamNode)
            guard let origin = try? Origin.parse(text) else { throw error(upstreamNode, "invalid upstream origin '\(text)'") }
            return Route(listen: try hostPort(listenNode), upstream: origin)
        }
    }

    func timeouts(_ node: YAMLNode) throws(ConfigError) -> Timeouts {
        let keys = try mapping(node, allowed: ["connect", "upstream", "idle", "client_header"], context: "timeouts")
        var settings = Timeouts()
        if let value = keys["connect"] { settings.connect = try duration(value) }
        if let value = keys["upstream"] { settings.upstream = try duration(value) }
        if let value = keys["idle"] { settings.idle = try duration(value) }
        if let value = keys["client_header"] { settings.clientHeader = try duration(value) }
        return settings
    }

    func limits(_ node: YAMLNode) throws(ConfigError) -> Limits {
        let keys = try mapping(node, allowed: ["max_connections", "h2_max_concurrent_streams"], context: "limits")
        var settings = Limits()
        if let value = keys["max_connections"] {
            let count = try int(value)
            guard (1...1_000_000).contains(count) else { throw error(value, "max_connections must be between 1 and 1000000") }
            settings.maxClientConnections = count
        }
        if let value = keys["h2_max_concurrent_streams"] {
            let count = try int(value)
            let range = Limits.h2MaxConcurrentStreamsRange
            guard range.contains(count) else {
                throw error(value, "h2_max_concurrent_streams must be between \(range.lowerBound) and \(range.upperBound)")
            }
            settings.h2MaxConcurrentStreams = count
        }
        return settings
    }
}
