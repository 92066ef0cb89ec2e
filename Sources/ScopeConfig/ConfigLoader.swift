import HTTP1Codec
import PosixSupport
import ProxySettings
import ScopePolicy
#if canImport(Glibc)
import Glibc
#endif

/// Reads a YAML config and validates it into a `ProxyConfiguration`. The first error wins and
/// names its position: `FILE:LINE:COLUMN: message`.
public enum ConfigLoader {
    public static func load(path: String, home: String) throws(ConfigError) -> ProxyConfiguration {
        let bytes: [UInt8]
        switch SmallFile.read(path, limit: 4 << 20) {
        case .success(let read): bytes = read
        case .failure(let failure):
            throw ConfigError(file: path, mark: Mark(line: 1, column: 1), message: "the config file " + failure.describe(path)
                              + (failure == .tooLarge ? " (the limit is 4 MiB)" : ""))
        }
        return try parse(String(decoding: bytes, as: UTF8.self), file: path, home: home)
    }

    /// Every key whose value is a path the loader resolves relative to the config file (dotted;
    /// `[]` is each item of a list, `*` each entry of a mapping). `config print` writes each of them
    /// resolved, and ConfigRoundTripTests walks this list.
    public static let pathKeys = [
        "store_dir", "secrets.*.file", "clients[].tls_client.ca", "tls.ca_dir", "tls.upstream_ca", "log.output",
    ]

    public static func parse(_ text: String, file: String, home: String) throws(ConfigError) -> ProxyConfiguration {
        let root = try YAMLDocument.parse(text, file: file)
        var decoder = Decoder(file: file, home: home)
        return try decoder.configuration(root)
    }
}

/// Walks the node tree; each method checks one part of the schema.
struct Decoder {
    let file: String
    let home: String
    private var secretNames: Set<String> = []
    /// Secrets declared with `placeholder: true`: the only ones a scope may `substitute`.
    private var placeholderNames: Set<String> = []
    /// Names of the configured clients (`clients:`), which scopes refer to.
    private var clientNames: Set<String> = []
    /// Every scope origin with where it is written: warnings about them are known only once `tls`
    /// and `routes` are read.
    private var scopeOrigins: [(scope: String, origin: Origin, mark: Mark)] = []

    /// The keys of the file's top level; under `inject:` or `secrets:` one is a key indented too deep.
    static let topLevelKeys = [
        "listen", "proxy_auth", "clients", "admin", "store_dir", "secrets", "sensitive_headers", "scopes", "routes",
        "redirects", "tls", "timeouts", "limits", "log", "scrub", "guard",
    ]
    /// The keys a scope accepts. A header under `inject:` with one of these names is a key indented
    /// one level too deep (docs/configuration.md, "Scopes").
    static let scopeKeys = ["name", "origins", "require_https", "inject", "pass", "methods", "paths", "clients", "substitute", "sign"]
    /// The keys a secret's source mapping accepts; a secret with one of these names and a value that
    /// is not a mapping is such a key indented one level too shallow.
    static let secretKeys = ["env", "file", "store", "oauth2", "allow_group_read", "placeholder", "env_var"]

    init(file: String, home: String) {
        self.file = file
        self.home = home
    }

    func error(_ node: YAMLNode, _ message: String) -> ConfigError {
        ConfigError(file: file, mark: node.mark, message: message)
    }

    // MARK: Top level

    mutating func configuration(_ root: YAMLNode) throws(ConfigError) -> ProxyConfiguration {
        var config = ProxyConfiguration.embeddedDefault(home: home)
        config.sourcePath = file
        let keys = try mapping(root, allowed: Self.topLevelKeys, context: "the config")
        // Secrets first: scopes and proxy_auth refer to them.
        if let node = keys["store_dir"] { config.storeDirectory = expand(try string(node), relativeTo: file) }
        if let node = keys["secrets"] {
            (config.secrets, config.placeholders, config.oauth2) = try secrets(node)
        }
        if let node = keys["listen"] { config.listen = try hostPort(node) }
        if let node = keys["admin"], !node.isNull { config.admin = try hostPort(node) }
        if let node = keys["clients"], !node.isNull {
            if let auth = keys["proxy_auth"], !auth.isNull {
                throw error(auth, "proxy_auth and clients cannot both be given: proxy_auth is the shorthand for one client; "
                            + "with clients, write it as a client: { name: me, auth: { bearer: SECRET } } (or basic: { user: U, password: SECRET })")
            }
            config.clients = try clients(node)
            clientNames = Set(config.clients.map(\.name))
        }
        if let node = keys["proxy_auth"], !node.isNull {
            let auth = try mapping(node, allowed: ["secret"], context: "proxy_auth")
            guard let secretNode = auth["secret"] else { throw error(node, "proxy_auth needs 'secret'") }
            config.proxyAuthSecret = try secretReference(secretNode)
        }
        var extraSensitive: [String] = []
        if let node = keys["sensitive_headers"] {
            extraSensitive = try list(node).map { item throws(ConfigError) in try headerName(item) }
        }
        var scopes: [Scope] = []
        if let node = keys["scopes"] { scopes = try self.scopes(node) }
        config.policy = ScopePolicy(scopes: scopes, extraSensitiveHeaders: extraSensitive)
        if let node = keys["routes"] { config.routes = try routes(node) }
        if let node = keys["redirects"] { config.redirects = try redirects(node) }
        if let node = keys["tls"] { config.tls = try tls(node, defaults: config.tls) }
        if let node = keys["timeouts"] { config.timeouts = try timeouts(node) }
        if let node = keys["limits"] { config.limits = try limits(node) }
        if let node = keys["log"] { config.log = try log(node) }
        if let node = keys["scrub"] { config.protection.scrub = try word(node, key: "scrub", as: ScrubMode.self) }
        if let node = keys["guard"] { config.protection.guardMode = try word(node, key: "guard", as: GuardMode.self) }
        config.warnings = uninterceptedOriginWarnings(config, origins: scopeOrigins)
        if let logNode = keys["log"], case .mapping(let pairs) = logNode.value, config.log.bodiesWithoutEffect(format: config.log.format),
           config.log.formatIsExplicit, let bodiesKey = pairs.first(where: { pair in
               if case .scalar("bodies", _) = pair.key.value { true } else { false } })?.key {
            config.warnings.append(ConfigWarning(file: file, mark: bodiesKey.mark, message: LogSettings.bodiesWithoutEffectMessage))
        }
        return config
    }

    // MARK: Secrets

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
                throw error(keyNode, "'\(name)' is an option of a secret, not a secret: indent it under the secret it belongs to "
                            + "(at the level of its env, file, store or oauth2)")
            }
            if Self.topLevelKeys.contains(name), !valueNode.isMapping {
                throw error(keyNode, "'\(name)' is a top-level key, not a secret: unindent it to the start of the line, like 'secrets:'")
            }
            if case .scalar(let text, _) = valueNode.value, !valueNode.isNull {
                throw error(valueNode, "secret '\(name)' must be a mapping: a secret names its source: "
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

    // MARK: Scopes

    mutating func scopes(_ node: YAMLNode) throws(ConfigError) -> [Scope] {
        var scopes: [Scope] = []
        var names: Set<String> = []
        // header (lowercased) injected at an origin -> the scopes that inject it there, and whom they serve
        var injectors: [Origin: [String: [(scope: String, clients: Set<String>?)]]] = [:]
        for item in try list(node) {
            let keys = try mapping(item, allowed: Self.scopeKeys, context: "a scope")
            guard let nameNode = keys["name"] else { throw error(item, "a scope needs a 'name'") }
            let name = try nonEmptyString(nameNode)
            guard names.insert(name).inserted else { throw error(nameNode, "duplicate scope name '\(name)'") }
            guard let originsNode = keys["origins"] else { throw error(item, "scope '\(name)' needs 'origins'") }
            let explicitHTTPS = try keys["require_https"].map { node throws(ConfigError) in try bool(node) }
            let requireHTTPS = explicitHTTPS ?? true

            var injections: [Scope.Injection] = []
            if let injectNode = keys["inject"] {
                guard case .mapping(let pairs) = injectNode.value else { throw error(injectNode, "'inject' must map header -> template") }
                for (headerNode, templateNode) in pairs {
                    let header = try headerName(headerNode)
                    // `paths: "/v1/"` one level too deep would inject a header named paths, and the
                    // scope would then apply to every path: never a header, always this error.
                    if Self.scopeKeys.contains(header) {
                        throw error(headerNode, "inject header '\(header)' is a scope key: indent it to the scope's level, "
                                    + "like 'inject:' (two spaces less), or it becomes a header and the scope loses its \(header)")
                    }
                    if Self.topLevelKeys.contains(header) {
                        throw error(headerNode, "inject header '\(header)' is a top-level key: unindent it to the start of the line, "
                                    + "like 'scopes:', or it becomes a header and the config loses its \(header)")
                    }
                    let template: HeaderTemplate
                    do {
                        template = try HeaderTemplate.parse(try string(templateNode))
                    } catch let parseError as HeaderTemplate.ParseError {
                        throw error(templateNode, "invalid template: \(describe(parseError))")
                    } catch let configError as ConfigError {
                        throw configError
                    } catch {
                        throw self.error(templateNode, "invalid template")
                    }
                    for secret in template.secretNames where !secretNames.contains(secret) {
                        throw self.error(templateNode, "'${\(secret)}' names no secret in 'secrets'\(suggestion(secret, secretNames))")
                    }
                    if let mistaken = template.mistakenReference(among: secretNames) {
                        throw self.error(templateNode, "'\(mistaken)' is a secret, but this template would send its name literally: did you mean '${\(mistaken)}'?")
                    }
                    injections.append(.init(header: header, template: template))
                }
            }
            let pass = try keys["pass"].map { node throws(ConfigError) in try list(node).map { item throws(ConfigError) in try headerName(item).lowercased() } } ?? []
            let methods = try keys["methods"].map { node throws(ConfigError) -> Set<String> in
                Set(try list(node).map { item throws(ConfigError) -> String in
                    let method = try nonEmptyString(item)
                    guard method.utf8.allSatisfy({ $0 >= 0x41 && $0 <= 0x5A }) else { throw error(item, "methods are uppercase tokens like GET") }
                    return method
                })
            }
            let paths = try keys["paths"].map { node throws(ConfigError) -> [String] in
                try list(node).map { item throws(ConfigError) -> String in
                    let path = try nonEmptyString(item)
                    guard path.hasPrefix("/") else { throw error(item, "paths are prefixes starting with '/'") }
                    return path
                }
            }
            let servedClients = try keys["clients"].map { node throws(ConfigError) -> Set<String> in
                var served: Set<String> = []
                for item in try list(node) {
                    let client = try nonEmptyString(item)
                    guard clientNames.contains(client) else {
                        throw error(item, "'\(client)' names no client in 'clients'\(suggestion(client, clientNames))"
                                    + (clientNames.isEmpty ? " (the config defines no clients)" : ""))
                    }
                    served.insert(client)
                }
                return served
            }
            let substitute = try keys["substitute"].map { node throws(ConfigError) in try substituted(node) } ?? []
            let signing = try keys["sign"].map { node throws(ConfigError) in try self.signing(node, scope: name) }
            if let signNode = keys["sign"], let injected = injections.first(where: { $0.header.lowercased() == "authorization" }) {
                throw error(signNode, "scope '\(name)' both signs and injects \(injected.header): the signature is the Authorization header; remove the inject")
            }
            // A substituted placeholder or a signature puts a credential on the wire, as an injection does.
            let givesCredentials = !injections.isEmpty || !pass.isEmpty || !substitute.isEmpty || signing != nil
            var origins: Set<Origin> = []
            for originNode in try list(originsNode) {
                let text = try string(originNode)
                let origin: Origin
                do { origin = try Origin.parse(text) } catch { throw self.error(originNode, Self.originProblem(text)) }
                guard origins.insert(origin).inserted else { throw self.error(originNode, "duplicate origin \(origin) in scope '\(name)'") }
                scopeOrigins.append((name, origin, originNode.mark))
                if origin.scheme == .http {
                    // Judged on the parsed host: `http://127.evil.example` is a name, not loopback.
                    let loopback = origin.isLoopback
                    if explicitHTTPS == true {
                        throw self.error(originNode, "http origin \(origin) in scope '\(name)' with require_https: true"
                                         + (loopback ? " (a loopback origin needs no require_https setting: remove it)" : ""))
                    }
                    if givesCredentials && !loopback && explicitHTTPS != false {
                        throw self.error(originNode, "http origin \(origin) would get credentials in clear text: set require_https: false on scope '\(name)' if that is really meant")
                    }
                }
                // A signature sets Authorization: it counts as injecting it.
                for header in injections.map({ $0.header.lowercased() }) + (signing != nil ? ["authorization"] : []) {
                    let shown = injections.first { $0.header.lowercased() == header }?.header ?? "Authorization (sign)"
                    // Two scopes may inject the same header at one origin only for disjoint clients:
                    // then each request gets exactly one of them.
                    for other in injectors[origin]?[header] ?? [] {
                        guard let mine = servedClients, let theirs = other.clients, mine.isDisjoint(with: theirs) else {
                            throw self.error(originNode, "scopes '\(other.scope)' and '\(name)' both inject \(shown) at \(origin)"
                                             + (servedClients != nil || other.clients != nil ? " for the same client" : ""))
                        }
                    }
                    injectors[origin, default: [:]][header, default: []].append((name, servedClients))
                }
            }
            scopes.append(Scope(name: name, origins: origins, requireHTTPS: requireHTTPS, inject: injections,
                                pass: Set(pass), methods: methods, paths: paths, clients: servedClients, substitute: substitute,
                                signing: signing))
        }
        return scopes
    }

    /// `substitute: [secret, ...]`: declared secrets that have a placeholder, each once.
    func substituted(_ node: YAMLNode) throws(ConfigError) -> Set<String> {
        var names: Set<String> = []
        for item in try list(node) {
            let name = try secretReference(item)
            guard placeholderNames.contains(name) else {
                throw error(item, "secret '\(name)' has no placeholder to substitute: add `placeholder: true` to secret '\(name)'")
            }
            guard names.insert(name).inserted else { throw error(item, "'\(name)' is listed twice in substitute") }
        }
        return names
    }

    func describe(_ error: HeaderTemplate.ParseError) -> String {
        switch error {
        case .unterminatedReference: "'${' without a closing '}'"
        case .emptyReference: "empty '${}'"
        case .invalidSecretName(let name): "invalid secret name '\(name)'"
        case .invalidCharacter: "control or non-ASCII character (not a valid header value)"
        }
    }

    // MARK: Other sections

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

    func tls(_ node: YAMLNode, defaults: TLSSettings) throws(ConfigError) -> TLSSettings {
        let keys = try mapping(node, allowed: ["intercept", "tunnel", "ca_dir", "upstream_ca", "client_listen"], context: "tls")
        var settings = defaults
        if let interceptNode = keys["intercept"] {
            if case .scalar(let text, _) = interceptNode.value, text == "scoped" {
                settings.intercept = .scoped
            } else {
                settings.intercept = .hosts(try list(interceptNode).map { item throws(ConfigError) -> String in
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
                throw error(listenNode, "client_listen needs TLS interception on: its certificate is signed by the local CA, "
                            + "which is used only when tls.intercept lists hosts (or is 'scoped')")
            }
        }
        return settings
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
        let keys = try mapping(node, allowed: ["max_connections"], context: "limits")
        var settings = Limits()
        if let value = keys["max_connections"] {
            let count = try int(value)
            guard (1...1_000_000).contains(count) else { throw error(value, "max_connections must be between 1 and 1000000") }
            settings.maxClientConnections = count
        }
        return settings
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
        if let node = keys["safe_headers"] { settings.safeHeaders = try list(node).map { item throws(ConfigError) in try headerName(item).lowercased() } }
        if let node = keys["safe_query"] { settings.safeQuery = try list(node).map { item throws(ConfigError) in try nonEmptyString(item) } }
        if let node = keys["safe_json_keys"] { settings.safeJSONKeys = try list(node).map { item throws(ConfigError) in try nonEmptyString(item) } }
        return settings
    }

    // MARK: Value types

    func mapping(_ node: YAMLNode, allowed: [String], context: String) throws(ConfigError) -> [String: YAMLNode] {
        if node.isNull { return [:] }
        guard case .mapping(let pairs) = node.value else { throw error(node, "\(context) must be a mapping") }
        var result: [String: YAMLNode] = [:]
        for (keyNode, value) in pairs {
            guard case .scalar(let key, _) = keyNode.value else { throw error(keyNode, "keys must be strings") }
            guard allowed.contains(key) else {
                // A key one edit from an allowed one is a misspelling (`secrets` for proxy_auth's
                // `secret`); otherwise a key that belongs elsewhere says where.
                let closeMisspelling = allowed.contains { Self.editDistance(key, $0) <= 1 }
                let hint = closeMisspelling ? "" : placementHint(key, context: context)
                throw error(keyNode, "unknown key '\(key)' in \(context)" + (hint.isEmpty ? suggestion(key, Set(allowed)) : hint))
            }
            result[key] = value
        }
        return result
    }

    func list(_ node: YAMLNode) throws(ConfigError) -> [YAMLNode] {
        if node.isNull { return [] }
        guard case .sequence(let items) = node.value else { throw error(node, "expected a list") }
        return items
    }

    func string(_ node: YAMLNode) throws(ConfigError) -> String {
        guard case .scalar(let text, _) = node.value else { throw error(node, "expected a string") }
        return text
    }

    func nonEmptyString(_ node: YAMLNode) throws(ConfigError) -> String {
        let text = try string(node)
        guard !text.isEmpty else { throw error(node, "expected a non-empty string") }
        return text
    }

    func bool(_ node: YAMLNode) throws(ConfigError) -> Bool {
        guard case .scalar(let text, plain: true) = node.value else { throw error(node, "expected true or false") }
        switch text {
        case "true", "True", "TRUE": return true
        case "false", "False", "FALSE": return false
        default: throw error(node, "expected true or false")
        }
    }

    /// One word of a closed set (`scrub: strict`). Plain `on`/`off` stay words: YAMLDocument keeps
    /// scalars as written, so YAML 1.1's boolean reading of them never happens here.
    func word<Word: RawRepresentable & CaseIterable>(_ node: YAMLNode, key: String, as: Word.Type) throws(ConfigError) -> Word
    where Word.RawValue == String {
        let allowed = Word.allCases.map(\.rawValue)
        let wordList = allowed.dropLast().joined(separator: ", ") + " or " + allowed.last!
        guard case .scalar(let text, _) = node.value else { throw error(node, "\(key) must be \(wordList)") }
        guard let value = Word(rawValue: text) else {
            let hint = ["true", "yes"].contains(text.lowercased()) ? " (for \(text) write on)"
                : ["false", "no"].contains(text.lowercased()) ? " (for \(text) write off)" : ""
            throw error(node, "\(key) must be \(wordList), not '\(text)'\(hint)")
        }
        return value
    }

    func int(_ node: YAMLNode) throws(ConfigError) -> Int {
        guard case .scalar(let text, plain: true) = node.value, let value = Int(text) else { throw error(node, "expected a whole number") }
        return value
    }

    /// "250ms", "2s", "1m" -> milliseconds (at least 1 ms, at most a day). The number is bounded
    /// by the unit's share of a day before it is multiplied: `9223372036854776s` is refused, not
    /// an overflow (docs/security-model.md, "Strict parsing").
    func duration(_ node: YAMLNode) throws(ConfigError) -> Int {
        let text = try string(node)
        let units: [(String, Int)] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000)]
        for (suffix, factor) in units where text.hasSuffix(suffix) {
            if let number = BoundedDecimal.parse(text.utf8.dropLast(suffix.utf8.count), maximum: 86_400_000 / factor), number > 0 {
                return number * factor
            }
            break
        }
        throw error(node, "invalid duration '\(text)': use a whole number with ms, s, m or h, like 250ms or 2s")
    }

    func headerName(_ node: YAMLNode) throws(ConfigError) -> String {
        let name = try nonEmptyString(node)
        guard HTTPField.isValidName(name) else { throw error(node, "'\(name)' is not a valid header name") }
        return name
    }

    func hostPort(_ node: YAMLNode) throws(ConfigError) -> HostPort {
        let text = try string(node)
        guard let address = ListenAddress.parse(text) else { throw error(node, ListenAddress.problem(text)) }
        if let problem = address.hostProblem { throw error(node, problem) }
        return address
    }

    /// `~/x` -> home; relative paths -> next to the config file (when `relativeTo` is given), made
    /// absolute against the working directory when the config file was named relatively: every
    /// path in a `ProxyConfiguration` is absolute, so `config print` writes a config that means the
    /// same saved anywhere (the keys: `ConfigLoader.pathKeys`).
    func expand(_ path: String, relativeTo configFile: String?) -> String {
        if path == "~" { return home }
        if path.hasPrefix("~/") { return home + path.dropFirst() }
        if path.hasPrefix("/") { return path }
        guard let configFile else { return path }
        let directory = configFile.lastIndex(of: "/").map { String(configFile[...$0]) } ?? ""
        return directory.hasPrefix("/") ? directory + path : Self.workingDirectory() + "/" + directory + path
    }

    static func workingDirectory() -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buffer, buffer.count) != nil else { return "." }
        return String(cString: buffer)
    }

    /// ", did you mean 'x'?" for the closest candidate within edit distance 2.
    func suggestion(_ word: String, _ candidates: Set<String>) -> String {
        let best = candidates.map { ($0, Self.editDistance(word, $0)) }.min { $0.1 < $1.1 || ($0.1 == $1.1 && $0.0 < $1.0) }
        guard let best, best.1 <= 2 else { return "" }
        return ", did you mean '\(best.0)'?"
    }

    /// See `EditDistance`: `pahts` is 1 from `paths` and 2 from `pass`.
    static func editDistance(_ a: String, _ b: String) -> Int { EditDistance.between(a, b) }
}
