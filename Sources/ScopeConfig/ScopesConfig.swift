import HTTP1Codec
import ScopePolicy

/// `sensitive_headers:` and `scopes:` (docs/configuration.md, "Scopes"): each scope checked against the
/// secrets, placeholders and clients read before it.
extension Decoder {
    /// `sensitive_headers:` and `scopes:` make the one policy (an absent `scopes:` is no scope).
    mutating func readScopes(_ keys: [String: YAMLNode], into config: inout ProxyConfiguration) throws(ConfigError) {
        var extraSensitive: [String] = []
        if let node = keys["sensitive_headers"] {
            extraSensitive = try list(node).map { item throws(ConfigError) in try headerName(item) }
        }
        var scopes: [Scope] = []
        if let node = keys["scopes"] { scopes = try self.scopes(node) }
        config.policy = ScopePolicy(scopes: scopes, extraSensitiveHeaders: extraSensitive)
        // Each AWS chain a scope signs with is one computed secret, shared by the scopes that use it.
        for scope in scopes {
            if case .awsSigV4(let spec)? = scope.signing, let chain = spec.chain { config.computed[chain.secretName] = .awsChain(chain) }
        }
    }

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
                        throw error(
                            headerNode,
                            "inject header '\(header)' is a scope key: indent it to the scope's level, "
                                + "like 'inject:' (two spaces less), or it becomes a header and the scope loses its \(header)")
                    }
                    if Self.topLevelKeys.contains(header) {
                        throw error(
                            headerNode,
                            "inject header '\(header)' is a top-level key: unindent it to the start of the line, "
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
                    if let key = template.secretNames.first(where: privateKeyNames.contains) {
                        throw self.error(
                            templateNode,
                            "'${\(key)}' is a private key the proxy signs with: it never goes into a header (inject the token it obtains instead)")
                    }
                    if let mistaken = template.mistakenReference(among: secretNames) {
                        throw self.error(
                            templateNode, "'\(mistaken)' is a secret, but this template would send its name literally: did you mean '${\(mistaken)}'?"
                        )
                    }
                    injections.append(.init(header: header, template: template))
                }
            }
            let pass =
                try keys["pass"].map { node throws(ConfigError) in
                    try list(node).map { item throws(ConfigError) in try headerName(item).lowercased() }
                } ?? []
            let methods = try keys["methods"].map { node throws(ConfigError) -> Set<String> in
                Set(
                    try list(node).map { item throws(ConfigError) -> String in
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
                        throw error(
                            item,
                            "'\(client)' names no client in 'clients'\(suggestion(client, clientNames))"
                                + (clientNames.isEmpty ? " (the config defines no clients)" : ""))
                    }
                    served.insert(client)
                }
                return served
            }
            let substitute = try keys["substitute"].map { node throws(ConfigError) in try substituted(node) } ?? []
            let signing = try keys["sign"].map { node throws(ConfigError) in try self.signing(node, scope: name) }
            if let signNode = keys["sign"], let injected = injections.first(where: { $0.header.lowercased() == "authorization" }) {
                throw error(
                    signNode,
                    "scope '\(name)' both signs and injects \(injected.header): the signature is the Authorization header; remove the inject")
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
                        throw self.error(
                            originNode,
                            "http origin \(origin) in scope '\(name)' with require_https: true"
                                + (loopback ? " (a loopback origin needs no require_https setting: remove it)" : ""))
                    }
                    if givesCredentials && !loopback && explicitHTTPS != false {
                        throw self.error(
                            originNode,
                            "http origin \(origin) would get credentials in clear text: set require_https: false on scope '\(name)' if that is really meant"
                        )
                    }
                }
                // A signature sets Authorization: it counts as injecting it.
                for header in injections.map({ $0.header.lowercased() }) + (signing != nil ? ["authorization"] : []) {
                    let shown = injections.first { $0.header.lowercased() == header }?.header ?? "Authorization (sign)"
                    // Two scopes may inject the same header at one origin only for disjoint clients:
                    // then each request gets exactly one of them.
                    for other in injectors[origin]?[header] ?? [] {
                        guard let mine = servedClients, let theirs = other.clients, mine.isDisjoint(with: theirs) else {
                            throw self.error(
                                originNode,
                                "scopes '\(other.scope)' and '\(name)' both inject \(shown) at \(origin)"
                                    + (servedClients != nil || other.clients != nil ? " for the same client" : ""))
                        }
                    }
                    injectors[origin, default: [:]][header, default: []].append((name, servedClients))
                }
            }
            scopes.append(
                Scope(
                    name: name, origins: origins, requireHTTPS: requireHTTPS, inject: injections,
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
}
