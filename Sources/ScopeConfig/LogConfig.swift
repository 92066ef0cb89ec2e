import ProxySettings

/// `log:` (docs/configuration.md, `log`; docs/logging.md).
extension Decoder {
    func readLog(_ keys: [String: YAMLNode], into config: inout ProxyConfiguration) throws(ConfigError) {
        if let node = keys["log"] { config.log = try log(node) }
    }

    func log(_ node: YAMLNode) throws(ConfigError) -> LogSettings {
        let keys = try mapping(node, allowed: ["format", "output", "bodies", "safe_headers", "safe_query", "safe_json_keys"], context: "log")
        var settings = LogSettings()
        if let formatNode = keys["format"] {
            guard let format = LogFormat(rawValue: try string(formatNode)) else { throw error(formatNode, "format must be json or text") }
            settings.format = format
            settings.formatIsExplicit = true
        }
        if let outputNode = keys["output"] {
            switch try nonEmptyString(outputNode) {
            case "stdout": settings.output = .standardOutput
            case "stderr": settings.output = .standardError
            case let path: settings.output = .file(expand(path, relativeTo: file))
            }
        }
        if let bodiesNode = keys["bodies"] { settings.bodies = try bool(bodiesNode) }
        if let node = keys["safe_headers"] {
            settings.safeHeaders = try list(node).map { item throws(ConfigError) in try headerName(item).lowercased() }
        }
        if let node = keys["safe_query"] { settings.safeQuery = try list(node).map { item throws(ConfigError) in try nonEmptyString(item) } }
        if let node = keys["safe_json_keys"] { settings.safeJSONKeys = try list(node).map { item throws(ConfigError) in try nonEmptyString(item) } }
        return settings
    }

    /// `bodies: true` written next to an explicit `format: text` does nothing: said at the `bodies` key.
    func logBodiesWarning(_ keys: [String: YAMLNode], _ config: ProxyConfiguration) -> ConfigWarning? {
        guard let logNode = keys["log"], case .mapping(let pairs) = logNode.value, config.log.bodiesWithoutEffect(format: config.log.format),
            config.log.formatIsExplicit,
            let bodiesKey = pairs.first(where: { pair in
                if case .scalar("bodies", _) = pair.key.value { true } else { false }
            })?.key
        else { return nil }
        return ConfigWarning(file: file, mark: bodiesKey.mark, message: LogSettings.bodiesWithoutEffectMessage)
    }
}
