import ProxySettings

/// `scrub:` and `guard:` (docs/configuration.md): the protections that work on secret values in traffic.
extension Decoder {
    func readProtection(_ keys: [String: YAMLNode], into config: inout ProxyConfiguration) throws(ConfigError) {
        if let node = keys["scrub"] { config.protection.scrub = try word(node, key: "scrub", as: ScrubMode.self) }
        if let node = keys["guard"] { config.protection.guardMode = try word(node, key: "guard", as: GuardMode.self) }
    }
}
