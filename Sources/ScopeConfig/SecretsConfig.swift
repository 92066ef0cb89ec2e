import HTTP1Codec
import ScopePolicy

/// `store_dir:` and `secrets:` (docs/configuration.md, `secrets`): read first, since scopes, clients and
/// `proxy_auth` name secrets.
extension Decoder {
    func readStoreDirectory(_ keys: [String: YAMLNode], into config: inout ProxyConfiguration) throws(ConfigError) {
        if let node = keys["store_dir"] { config.storeDirectory = expand(try string(node), relativeTo: file) }
    }

    mutating func readSecrets(_ keys: [String: YAMLNode], into config: inout ProxyConfiguration) throws(ConfigError) {
        if let node = keys["secrets"] {
            (config.secrets, config.placeholders, config.oauth2) = try secrets(node)
        }
    }

    /// The sources by name, and the secrets that have a placeholder (in name order).
    mutating func secrets(_ node: YAMLNode) throws(ConfigError) -> ([String: SecretSource], [PlaceholderSecret], [String: OAuth2Spec]) {
        guard case .mapping(let pairs) = node.value else { throw error(node, "'secrets' must be a mapping of name -> source") }
        var result: [String: SecretSource] = [:]
        // `oauth2:` secrets: their value is a token the proxy obtains; read once every name is known.
        var oauth2Nodes: [(name: String, node: YAMLNode)] = []
        var placeholders: [PlaceholderSecret] = []
        // env_var -> the secret that exports it: two secrets in one variable would shadow each other.
        var variables: [String: String] = [:]
        for (keyNode, valueNode) in pairs {
            let name = try string(keyNode)
            guard !name.isEmpty, name.utf8.allSatisfy(HeaderTemplate.isNameByte) else {
                throw error(keyNode, "secret names use letters, digits, '_', '.' and '-'")
            }
            if Self.secretKeys.contains(name), case .scalar = valueNode.value {
                throw error(
                    keyNode,
                    "'\(name)' is an option of a secret, not a secret: indent it under the secret it belongs to "
                        + "(at the level of its env, file, store or oauth2)")
            }
            if Self.topLevelKeys.contains(name), !valueNode.isMapping {
                throw error(keyNode, "'\(name)' is a top-level key, not a secret: unindent it to the start of the line, like 'secrets:'")
            }
            if case .scalar(let text, _) = valueNode.value, !valueNode.isNull {
                throw error(
                    valueNode,
                    "secret '\(name)' must be a mapping: a secret names its source: "
                        + "\(name): { env: \(text.isEmpty ? "VARIABLE" : text) } (or file:, store:, oauth2:)")
            }
            let fields = try mapping(valueNode, allowed: Self.secretKeys, context: "secret '\(name)'")
            let sources = ["env", "file", "store", "oauth2"].filter { fields[$0] != nil }
            guard sources.count == 1 else {
                throw error(valueNode, "secret '\(name)' needs exactly one source: env, file, store or oauth2")
            }
            if let oauth2Node = fields["oauth2"] {
                if let extra = ["allow_group_read", "placeholder", "env_var"].first(where: { fields[$0] != nil }) {
                    throw error(fields[extra]!, "\(extra) does not apply to an oauth2 secret (its value is a token the proxy obtains)")
                }
                oauth2Nodes.append((name, oauth2Node))
                continue
            }
            if let groupNode = fields["allow_group_read"], fields["file"] == nil {
                throw error(groupNode, "allow_group_read applies to file secrets only")
            }
            switch sources[0] {
            case "env":
                let variable = try nonEmptyString(fields["env"]!)
                if let problem = Self.environmentNameProblem(variable, key: "env") { throw error(fields["env"]!, problem) }
                result[name] = .env(variable)
            case "store":
                let storeName = try nonEmptyString(fields["store"]!)
                guard SecretSource.isValidStoreName(storeName) else {
                    throw error(fields["store"]!, "store names use letters, digits, '_', '.' and '-'")
                }
                result[name] = .store(storeName)
            default:
                let path = expand(try nonEmptyString(fields["file"]!), relativeTo: file)
                let allowGroup = try fields["allow_group_read"].map { node throws(ConfigError) in try bool(node) } ?? false
                result[name] = .file(path: path, allowGroupRead: allowGroup)
            }
            let hasPlaceholder = try fields["placeholder"].map { node throws(ConfigError) in try bool(node) } ?? false
            var variable: String?
            if let variableNode = fields["env_var"] {
                // The variable carries the placeholder; without one there is nothing to export.
                guard hasPlaceholder else {
                    throw error(variableNode, "env_var exports the secret's placeholder: add `placeholder: true` to secret '\(name)'")
                }
                let text = try nonEmptyString(variableNode)
                if let problem = Self.environmentNameProblem(text, key: "env_var") { throw error(variableNode, problem) }
                if let other = variables[text] {
                    throw error(variableNode, "secrets '\(other)' and '\(name)' both use env_var \(text): each variable can hold one placeholder")
                }
                variables[text] = name
                variable = text
            }
            if hasPlaceholder { placeholders.append(PlaceholderSecret(secret: name, environmentVariable: variable)) }
        }
        // The inputs of a token request (client secret, refresh token) are ordinary secrets.
        let inputs = Set(result.keys)
        var oauth2: [String: OAuth2Spec] = [:]
        for (name, node) in oauth2Nodes { oauth2[name] = try self.oauth2(node, secret: name, inputSecrets: inputs) }
        secretNames = inputs.union(oauth2.keys)
        placeholderNames = Set(placeholders.map(\.secret))
        return (result, placeholders.sorted { $0.secret < $1.secret }, oauth2)
    }

    func secretReference(_ node: YAMLNode) throws(ConfigError) -> String {
        let name = try string(node)
        guard secretNames.contains(name) else { throw error(node, "'\(name)' names no secret in 'secrets'\(suggestion(name, secretNames))") }
        return name
    }
}
