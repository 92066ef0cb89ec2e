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
            (config.secrets, config.placeholders, config.computed) = try secrets(node)
        }
    }

    /// The sources by name, the secrets that have a placeholder (in name order), and the secrets
    /// the proxy computes (`oauth2:`, `command:`, `github_app:`).
    mutating func secrets(_ node: YAMLNode) throws(ConfigError) -> ([String: SecretSource], [PlaceholderSecret], [String: ComputedSecret]) {
        guard case .mapping(let pairs) = node.value else { throw error(node, "'secrets' must be a mapping of name -> source") }
        var result: [String: SecretSource] = [:]
        var computed: [String: ComputedSecret] = [:]
        // Secrets computed from other secrets (a token request's client secret, a private key):
        // read once every name is known.
        var dependentNodes: [(name: String, kind: String, node: YAMLNode)] = []
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
                        + "(at the level of its env, file, store, command, oauth2 or github_app)")
            }
            if Self.topLevelKeys.contains(name), !valueNode.isMapping {
                throw error(keyNode, "'\(name)' is a top-level key, not a secret: unindent it to the start of the line, like 'secrets:'")
            }
            if case .scalar(let text, _) = valueNode.value, !valueNode.isNull {
                throw error(
                    valueNode,
                    "secret '\(name)' must be a mapping: a secret names its source: "
                        + "\(name): { env: \(text.isEmpty ? "VARIABLE" : text) } (or file:, store:, command:, oauth2:, github_app:)")
            }
            let fields = try mapping(valueNode, allowed: Self.secretKeys, context: "secret '\(name)'")
            // Under `command:`, `env:` lists the variables the command gets: it is not a source there.
            let sources = Self.secretSources.filter { fields[$0] != nil && !($0 == "env" && fields["command"] != nil) }
            guard sources.count == 1 else {
                throw error(valueNode, "secret '\(name)' needs exactly one source: env, file, store, command, oauth2 or github_app")
            }
            let source = sources[0]
            if source != "command", let option = ["ttl", "timeout"].first(where: { fields[$0] != nil }) {
                throw error(fields[option]!, "\(option) applies to a command secret only")
            }
            if ["oauth2", "command", "github_app"].contains(source) {
                if let extra = ["allow_group_read", "placeholder", "env_var"].first(where: { fields[$0] != nil }) {
                    throw error(
                        fields[extra]!,
                        "\(extra) does not apply to \(source == "oauth2" ? "an" : "a") \(source) secret (its value is one the proxy obtains)")
                }
                if source == "command" {
                    computed[name] = .command(try command(fields, secret: name))
                } else {
                    dependentNodes.append((name, source, fields[source]!))
                }
                continue
            }
            if let groupNode = fields["allow_group_read"], fields["file"] == nil {
                throw error(groupNode, "allow_group_read applies to file secrets only")
            }
            switch source {
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
        // The inputs of a computed secret (client secret, refresh token, private key) are ordinary secrets.
        let inputs = InputSecrets(sources: result)
        for (name, kind, node) in dependentNodes {
            computed[name] =
                kind == "oauth2"
                ? .oauth2(try oauth2(node, secret: name, inputs: inputs))
                : .githubApp(try githubApp(node, secret: name, inputs: inputs))
        }
        secretNames = Set(result.keys).union(computed.keys)
        placeholderNames = Set(placeholders.map(\.secret))
        privateKeyNames = Set(computed.values.flatMap(\.privateKeys))
        return (result, placeholders.sorted { $0.secret < $1.secret }, computed)
    }

    func secretReference(_ node: YAMLNode) throws(ConfigError) -> String {
        let name = try string(node)
        guard secretNames.contains(name) else { throw error(node, "'\(name)' names no secret in 'secrets'\(suggestion(name, secretNames))") }
        return name
    }
}

/// The ordinary secrets (env, file, store) a computed secret may be made from.
struct InputSecrets {
    let sources: [String: SecretSource]
    var names: Set<String> { Set(sources.keys) }
}

extension Decoder {
    /// `command: [argv...]` with `ttl`, `timeout` and `env` (docs/credentials.md, "A command").
    func command(_ fields: [String: YAMLNode], secret name: String) throws(ConfigError) -> CommandSecretSpec {
        let argvNode = fields["command"]!
        guard case .sequence = argvNode.value else {
            throw error(
                argvNode,
                "command of secret '\(name)' is a list (argv, never run by a shell): command: [\"gh\", \"auth\", \"token\"]")
        }
        var argv: [String] = []
        for item in try list(argvNode) {
            let text = try string(item)
            guard !text.utf8.contains(0) else { throw error(item, "a command argument cannot contain NUL") }
            argv.append(text)
        }
        guard let program = argv.first, !program.isEmpty else {
            throw error(argvNode, "command of secret '\(name)' needs a program: command: [\"gh\", \"auth\", \"token\"]")
        }
        if program.contains(" "), argv.count == 1 {
            throw error(
                argvNode,
                "command is argv, not a shell line: split it, command: [\(program.split(separator: " ").map { "\"\($0)\"" }.joined(separator: ", "))]"
            )
        }
        var ttl = CommandSecretSpec.defaultTTLSeconds
        if let ttlNode = fields["ttl"] {
            let milliseconds = try duration(ttlNode)
            guard milliseconds >= 1000 else { throw error(ttlNode, "ttl is at least 1s") }
            ttl = milliseconds / 1000
        }
        var timeout = CommandSecretSpec.defaultTimeoutMilliseconds
        if let timeoutNode = fields["timeout"] {
            timeout = try duration(timeoutNode)
            guard timeout <= 300_000 else { throw error(timeoutNode, "timeout is at most 5m: requests wait for the command") }
        }
        var environment: [String] = []
        if let envNode = fields["env"] {
            guard case .sequence = envNode.value else {
                throw error(envNode, "env of a command secret lists the variables it gets beyond the minimal set: env: [GH_HOST]")
            }
            for item in try list(envNode) {
                let variable = try nonEmptyString(item)
                if let problem = Self.environmentNameProblem(variable, key: "env") { throw error(item, problem) }
                environment.append(variable)
            }
        }
        return CommandSecretSpec(argv: argv, ttlSeconds: ttl, timeoutMilliseconds: timeout, environment: environment)
    }

    /// `github_app:` (docs/credentials.md, "A GitHub App").
    func githubApp(_ node: YAMLNode, secret name: String, inputs: InputSecrets) throws(ConfigError) -> GitHubAppSpec {
        let context = "the github_app of secret '\(name)'"
        guard case .mapping = node.value else { throw error(node, "\(context) must be a mapping") }
        let keys = try mapping(
            node, allowed: ["app_id", "installation_id", "private_key", "api_url", "permissions", "repositories"], context: context)
        func required(_ key: String) throws(ConfigError) -> YAMLNode {
            guard let value = keys[key] else { throw error(node, "\(context) needs '\(key)'") }
            return value
        }
        let appNode = try required("app_id")
        let appID = try nonEmptyString(appNode)
        // The app id (digits) or its client id (`Iv1.…`): both are what GitHub reads from `iss`.
        guard appID.utf8.count <= 64, appID.utf8.allSatisfy({ HeaderTemplate.isNameByte($0) }) else {
            throw error(appNode, "app_id is the app's numeric id (or its client id), as its settings page shows it")
        }
        let installationNode = try required("installation_id")
        let installationID = try nonEmptyString(installationNode)
        guard installationID.utf8.count <= 20, installationID.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else {
            throw error(installationNode, "installation_id is a number (the last part of the installation's settings URL)")
        }
        let privateKey = try privateKeyReference(try required("private_key"), computedSecret: name, inputs: inputs)
        var api = GitHubAppSpec.publicAPI
        var prefix = ""
        if let urlNode = keys["api_url"] {
            (api, prefix) = try credentialEndpointURL(urlNode, key: "api_url", example: "https://github.example.com/api/v3")
            if prefix == "/" { prefix = "" }
            if prefix.hasSuffix("/") { prefix.removeLast() }
            guard !prefix.contains("?") else { throw error(urlNode, "api_url has no query: https://HOST/api/v3") }
        }
        var permissions: [GitHubAppSpec.Permission] = []
        if let permissionsNode = keys["permissions"] {
            guard case .mapping(let pairs) = permissionsNode.value else {
                throw error(permissionsNode, "permissions is a mapping of permission -> read | write | admin: { contents: read }")
            }
            for (permissionNode, accessNode) in pairs {
                let permission = try nonEmptyString(permissionNode)
                guard permission.utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7A) || $0 == 0x5F }) else {
                    throw error(permissionNode, "a permission name is lowercase with '_', as GitHub spells it: contents, pull_requests, issues")
                }
                let access = try string(accessNode)
                guard ["read", "write", "admin"].contains(access) else {
                    throw error(accessNode, "permission '\(permission)' is read, write or admin\(suggestion(access, ["read", "write", "admin"]))")
                }
                permissions.append(GitHubAppSpec.Permission(name: permission, access: access))
            }
            permissions.sort { $0.name < $1.name }
        }
        var repositories: [String] = []
        if let repositoriesNode = keys["repositories"] {
            for item in try list(repositoriesNode) {
                let repository = try nonEmptyString(item)
                guard repository.utf8.count <= 100, repository.utf8.allSatisfy({ HeaderTemplate.isNameByte($0) }) else {
                    throw error(item, "a repository is its name without the owner: scopeproxy, not owner/scopeproxy")
                }
                repositories.append(repository)
            }
        }
        return GitHubAppSpec(
            appID: appID, installationID: installationID, privateKey: privateKey, api: api, pathPrefix: prefix,
            permissions: permissions, repositories: repositories)
    }

    /// `https://host[:port]/path`; http only to loopback (credentials travel in the request). No
    /// userinfo, no fragment. The token endpoints and the GitHub API read it.
    func credentialEndpointURL(_ node: YAMLNode, key: String, example: String) throws(ConfigError) -> (Origin, String) {
        let text = try nonEmptyString(node)
        guard case .absolute(let origin, let path, let userinfo)? = try? RequestTarget.parse(text, method: "POST") else {
            throw error(node, "\(key) must be an absolute https:// URL, like \(example)")
        }
        guard userinfo == nil else { throw error(node, "\(key) must not carry user:password@ (credentials are secrets)") }
        guard origin.scheme == .https || origin.isLoopback else {
            throw error(node, "\(key) must be https (http only to a loopback address): credentials travel in the request")
        }
        return (origin, path)
    }

    /// A private key: a file or store secret holding a PEM (never an environment variable, which
    /// cannot hold its lines and leaks into child processes).
    func privateKeyReference(_ node: YAMLNode, computedSecret: String, inputs: InputSecrets) throws(ConfigError) -> String {
        let referenced = try string(node)
        if referenced == computedSecret { throw error(node, "secret '\(computedSecret)' cannot be computed from itself") }
        guard let source = inputs.sources[referenced] else {
            throw error(node, "'\(referenced)' names no file or store secret in 'secrets'\(suggestion(referenced, inputs.names))")
        }
        if case .env = source {
            throw error(
                node,
                "private key '\(referenced)' is an env secret: a private key is a file or store secret holding the PEM "
                    + "(scopeproxy secret set \(referenced) < key.pem)")
        }
        return referenced
    }
}
