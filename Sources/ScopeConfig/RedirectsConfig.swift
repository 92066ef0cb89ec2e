import HTTP1Codec
import ScopePolicy

/// `redirects:` (docs/configuration.md, `redirects`).
extension Decoder {
    func readRedirects(_ keys: [String: YAMLNode], into config: inout ProxyConfiguration) throws(ConfigError) {
        if let node = keys["redirects"] { config.redirects = try redirects(node) }
    }

    func redirects(_ node: YAMLNode) throws(ConfigError) -> RedirectPolicy {
        let keys = try mapping(node, allowed: ["cross_origin", "allow", "max_hops"], context: "redirects")
        var policy = RedirectPolicy()
        if let modeNode = keys["cross_origin"] {
            let text = try string(modeNode)
            guard let mode = RedirectMode(rawValue: text) else { throw error(modeNode, "cross_origin must be pass, follow or block") }
            policy.mode = mode
        }
        if let allowNode = keys["allow"] {
            for item in try list(allowNode) {
                let text = try string(item)
                guard let origin = try? Origin.parse(text) else { throw error(item, "invalid origin '\(text)'") }
                policy.allow.insert(origin)
            }
        }
        if let hopsNode = keys["max_hops"] {
            let hops = try int(hopsNode)
            guard (1...20).contains(hops) else { throw error(hopsNode, "max_hops must be between 1 and 20") }
            policy.maxHops = hops
        }
        return policy
    }
}
