import HTTP1Codec
import ProxyCore
import ScopeConfig
import ScopePolicy

/// `scopeproxy config print`: the effective configuration as YAML, every key of the schema with
/// its default filled in, secrets as their sources (a value is never read here). The output is a
/// config the loader reads back to the same configuration, so it can be saved and edited.
enum ConfigPrinter {
    /// `clients:` with secrets as their names (never values).
    static func clients(_ rules: [ClientRule], egress: EgressPolicy = .standard) -> String {
        guard !rules.isEmpty else { return "# clients: none (every request is the one unnamed client)\n" }
        var out = "clients:\n"
        for rule in rules {
            out += "  - name: \(scalar(rule.name))\n"
            switch rule.auth {
            case .basic(let user, let password)?: out += "    auth: { basic: { user: \(scalar(user)), password: \(scalar(password)) } }\n"
            case .bearer(let token)?: out += "    auth: { bearer: \(scalar(token)) }\n"
            case .anyUserOrBearer(let secret)?: out += "    # auth: proxy_auth shorthand, secret \(scalar(secret))\n"
            case nil: break
            }
            if let uid = rule.uid { out += "    uid: \(uid)\n" }
            if !rule.sources.isEmpty { out += "    source: \(flowList(rule.sources.map(\.text)))\n" }
            if let tls = rule.tlsClient {
                out += "    tls_client: { ca: \(scalar(tls.caFile)), subject: \(scalar(tls.subject.description)) }\n"
            }
            if let rate = rule.rate { out += "    rate: \(scalar(rate.description))\n" }
            if let own = egress.clients[rule.name] {
                out +=
                    "    egress: { default: \(own.defaultAction.rawValue), allow: \(flowList(own.allow.map(\.text)))"
                    + (own.mode.map { ", mode: \($0.rawValue)" } ?? "")
                    + (own.denyIPs.map { ", deny_ips: \(flowList(Self.denyIPs($0)))" } ?? "") + " }\n"
            }
        }
        return out
    }

    /// `deny_ips` as written: the named sets, then the CIDRs.
    static func denyIPs(_ denied: DeniedAddresses) -> [String] { denied.named.map(\.rawValue) + denied.cidrs.map(\.text) }

    static func yaml(_ config: ProxyConfiguration, formatIsExplicit: Bool) -> String {
        var out =
            "# scopeproxy effective configuration (\(config.sourcePath.map { "from \(scalar($0))" } ?? "the embedded default")), defaults filled in.\n"
        out += "listen: \(scalar(config.listen.description))\n"
        out += "admin: \(config.admin.map { scalar($0.description) } ?? "null")\n"
        out += "admin_token: \(config.adminToken.map { scalar($0) } ?? "null")\n"
        out += "proxy_auth: \(config.proxyAuthSecret.map { "{ secret: \(scalar($0)) }" } ?? "null")\n"
        out += clients(config.clients, egress: config.egress)
        out += "store_dir: \(scalar(config.storeDirectory))\n"

        out += "secrets:" + (config.secrets.isEmpty && config.computed.isEmpty ? " {}\n" : "\n")
        let placeholders = Dictionary(uniqueKeysWithValues: config.placeholders.map { ($0.secret, $0) })
        for name in config.secrets.keys.sorted() {
            var source: String
            switch config.secrets[name]! {
            case .env(let variable): source = "{ env: \(scalar(variable)) }"
            case .store(let store): source = "{ store: \(scalar(store)) }"
            case .file(let path, let allowGroupRead):
                source = "{ file: \(scalar(path))" + (allowGroupRead ? ", allow_group_read: true }" : " }")
            }
            if let placeholder = placeholders[name] {
                source =
                    String(source.dropLast(2)) + ", placeholder: true"
                    + (placeholder.environmentVariable.map { ", env_var: \(scalar($0))" } ?? "") + " }"
            }
            out += "  \(scalar(name)): \(source)\n"
        }
        for (name, recipe) in config.computed.sorted(by: { $0.key < $1.key }) {
            switch recipe {
            case .oauth2(let spec): out += "  \(scalar(name)): { oauth2: \(oauth2(spec)) }\n"
            case .command(let spec): out += "  \(scalar(name)): \(command(spec))\n"
            case .githubApp(let spec): out += "  \(scalar(name)): { github_app: \(githubApp(spec)) }\n"
            case .awsChain: break  // written where it is configured: the scope's `credentials:`
            }
        }

        // Only what the config added: the built-in list always applies and cannot be removed.
        let extra = config.policy.sensitiveHeaders.subtracting(SensitiveHeaders.builtIn).sorted()
        out += "# sensitive_headers adds to the built-in list:\n"
        out += Usage.wrap(SensitiveHeaders.builtIn.sorted().joined(separator: ", "), width: 100, indent: "#   ")
        out += "sensitive_headers: " + flowList(extra) + "\n"

        out += "scopes:" + (config.policy.scopes.isEmpty ? " []\n" : "\n")
        for scope in config.policy.scopes {
            out += "  - name: \(scalar(scope.name))\n"
            out += "    origins: \(flowList(scope.origins.map(origin).sorted()))\n"
            out += requireHTTPS(scope)
            out += "    inject:" + (scope.inject.isEmpty ? " {}\n" : "\n")
            for injection in scope.inject {
                out += "      \(scalar(injection.header)): \(scalar(template(injection.template)))\n"
            }
            out += "    pass: \(flowList(scope.pass.sorted()))\n"
            // Absent means every method and every path; an empty list would mean none.
            if let methods = scope.methods { out += "    methods: \(flowList(methods.sorted()))\n" } else { out += "    # methods: every method\n" }
            if let paths = scope.paths { out += "    paths: \(flowList(paths))\n" } else { out += "    # paths: every path\n" }
            if let clients = scope.clients { out += "    clients: \(flowList(clients.sorted()))\n" } else { out += "    # clients: every client\n" }
            out += "    substitute: \(flowList(scope.substitute.sorted()))\n"
            if case .awsSigV4(let spec)? = scope.signing {
                let credentials: String =
                    switch spec.chain {
                    case .defaultChain?: "credentials: default"
                    case .profile(let profile)?: "credentials: { profile: \(scalar(profile)) }"
                    case nil:
                        "access_key_id: \(scalar(spec.accessKeyIDSecret)), secret_access_key: \(scalar(spec.secretAccessKeySecret))"
                            + (spec.sessionTokenSecret.map { ", session_token: \(scalar($0))" } ?? "")
                    }
                out += "    sign: { aws_sigv4: { service: \(scalar(spec.service)), region: \(scalar(spec.region)), \(credentials) } }\n"
            }
        }

        // Words, never booleans: `on`/`off` are quoted by `scalar` for YAML 1.1 readers.
        out += "# scrub: on | strict (also asks scoped origins for identity bodies) | off; guard: on | off\n"
        out += "scrub: \(scalar(config.protection.scrub.rawValue))\n"
        out += "guard: \(scalar(config.protection.guardMode.rawValue))\n"

        out += "egress:\n"
        out += "  default: \(config.egress.defaultAction.rawValue)\n"
        out += "  mode: \(config.egress.mode.rawValue)\n"
        out += "  allow: \(flowList(config.egress.allow.map(\.text)))\n"
        out += "  deny_ips: \(flowList(Self.denyIPs(config.egress.denyIPs)))\n"

        out += "routes:" + (config.routes.isEmpty ? " []\n" : "\n")
        for route in config.routes {
            out += "  - { listen: \(scalar(route.listen.description)), upstream: \(scalar(origin(route.upstream))) }\n"
        }

        if let transparent = config.transparentListen { out += "transparent:\n  listen: \(scalar(transparent.description))\n" }

        out += "redirects:\n"
        out += "  cross_origin: \(config.redirects.mode.rawValue)\n"
        out += "  allow: \(flowList(config.redirects.allow.map(origin).sorted()))\n"
        out += "  max_hops: \(config.redirects.maxHops)\n"

        out += "tls:\n"
        switch config.tls.intercept {
        case .scoped: out += "  intercept: scoped\n"
        case .hosts(let hosts): out += "  intercept: \(flowList(hosts))\n"
        }
        out += "  tunnel: \(config.tls.tunnel.rawValue)\n"
        out += "  ca_dir: \(scalar(config.tls.caDirectory))\n"
        out += "  upstream_ca: \(config.tls.upstreamCA.map(scalar) ?? "null")\n"
        if let clientListen = config.clientListen { out += "  client_listen: \(scalar(clientListen.description))\n" }

        out += "timeouts:\n"
        out += "  connect: \(duration(config.timeouts.connect))\n"
        out += "  upstream: \(duration(config.timeouts.upstream))\n"
        out += "  idle: \(duration(config.timeouts.idle))\n"
        out += "  client_header: \(duration(config.timeouts.clientHeader))\n"

        out += "limits:\n"
        out += "  max_connections: \(config.limits.maxClientConnections)\n"

        out += "log:\n"
        if formatIsExplicit {
            out += "  format: \(config.log.format.rawValue)\n"
        } else {
            // Writing the default down would change it: unset means text on a terminal, JSON otherwise.
            out += "  # format: not set (text with colour on a terminal, json to a file or pipe)\n"
        }
        switch config.log.output {
        case .standardOutput: out += "  output: stdout\n"
        case .standardError: out += "  output: stderr\n"
        case .file(let path): out += "  output: \(scalar(path))\n"
        case .discard: out += "  # output: discarded\n"
        }
        out += "  bodies: \(config.log.bodies)\n"
        out += "  safe_headers: \(flowList(config.log.safeHeaders))\n"
        out += "  safe_query: \(flowList(config.log.safeQuery))\n"
        out += "  safe_json_keys: \(flowList(config.log.safeJSONKeys))\n"
        return out
    }

    /// `require_https` only as the loader takes it back: an explicit `true` next to an http origin
    /// is refused (such an origin is loopback, or the scope says `false`), so there the default
    /// stays unwritten.
    static func requireHTTPS(_ scope: Scope) -> String {
        if scope.requireHTTPS && scope.origins.contains(where: { $0.scheme == .http }) {
            return "    # require_https: true (the default; not written: its http origins are loopback, which need no setting)\n"
        }
        return "    require_https: \(scope.requireHTTPS)\n"
    }

    /// An `oauth2:` secret's mapping, its inputs as secret names.
    static func oauth2(_ spec: OAuth2Spec) -> String {
        var fields = ["token_url: \(scalar(origin(spec.endpoint) + spec.path))", "grant: \(spec.grant.name)"]
        if let clientID = spec.clientID { fields.append("client_id: \(scalar(clientID))") }
        if let secret = spec.clientSecret { fields.append("client_secret: \(scalar(secret))") }
        var key: JWTKeySpec?
        switch spec.grant {
        case .clientCredentials: break
        case .refreshToken(let secret): fields.append("refresh_token: \(scalar(secret))")
        case .jwtBearer(let bearer):
            key = bearer.key
            fields.append("issuer: \(scalar(bearer.issuer))")
            if let subject = bearer.subject { fields.append("subject: \(scalar(subject))") }
            if let audience = bearer.audience { fields.append("audience: \(scalar(audience))") }
        }
        if case .privateKeyJWT(let clientKey) = spec.clientAuthentication { key = clientKey }
        if let key {
            fields.append("private_key: \(scalar(key.privateKey))")
            if let keyID = key.keyID { fields.append("key_id: \(scalar(keyID))") }
            if let algorithm = key.algorithm { fields.append("alg: \(algorithm)") }
        }
        if let scope = spec.scope { fields.append("scope: \(scalar(scope))") }
        if let audience = spec.audience { fields.append("audience: \(scalar(audience))") }
        fields.append("client_auth: \(spec.clientAuthentication.name)")
        return "{ " + fields.joined(separator: ", ") + " }"
    }

    /// A `command:` secret: argv as a flow list, then its options.
    static func command(_ spec: CommandSecretSpec) -> String {
        "{ command: \(flowList(spec.argv)), ttl: \(spec.ttlSeconds)s, timeout: \(spec.timeoutMilliseconds)ms"
            + (spec.environment.isEmpty ? "" : ", env: \(flowList(spec.environment))") + " }"
    }

    /// A `github_app:` secret's mapping.
    static func githubApp(_ spec: GitHubAppSpec) -> String {
        var fields = [
            "app_id: \(scalar(spec.appID))", "installation_id: \(scalar(spec.installationID))", "private_key: \(scalar(spec.privateKey))",
            "api_url: \(scalar(origin(spec.api) + (spec.pathPrefix.isEmpty ? "" : spec.pathPrefix)))",
        ]
        if !spec.permissions.isEmpty {
            fields.append("permissions: { " + spec.permissions.map { "\(scalar($0.name)): \($0.access)" }.joined(separator: ", ") + " }")
        }
        if !spec.repositories.isEmpty { fields.append("repositories: \(flowList(spec.repositories))") }
        return "{ " + fields.joined(separator: ", ") + " }"
    }

    /// `scheme://host[:port]`, the port only when it is not the scheme's default.
    static func origin(_ origin: Origin) -> String { "\(origin.scheme.rawValue)://\(origin.authority)" }

    /// The template as written: `${name}` for a secret, `$$` for a literal dollar.
    static func template(_ template: HeaderTemplate) -> String {
        template.parts.map { part in
            switch part {
            case .literal(let text): text.replacingOccurrences("$", "$$")
            case .secret(let name): "${\(name)}"
            }
        }.joined()
    }

    /// Milliseconds in the largest unit that keeps them whole: 5000 -> 5s, 90000 -> 90s, 60000 -> 1m.
    static func duration(_ milliseconds: Int) -> String {
        for (unit, factor) in [("h", 3_600_000), ("m", 60_000), ("s", 1000)] where milliseconds % factor == 0 {
            return "\(milliseconds / factor)\(unit)"
        }
        return "\(milliseconds)ms"
    }

    static func flowList(_ items: [String]) -> String { "[" + items.map(scalar).joined(separator: ", ") + "]" }

    /// A plain scalar when that cannot be misread (by this loader or another YAML reader: no
    /// booleans, nulls or numbers, no indicators), else double-quoted with escapes.
    static func scalar(_ text: String) -> String {
        let reserved: Set<String> = ["true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"]
        let plainBytes = text.utf8.allSatisfy { byte in
            (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x30 && byte <= 0x39)
                || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "/")
        }
        if let first = text.utf8.first, plainBytes, first != UInt8(ascii: "-"), first != UInt8(ascii: "."),
            !(first >= 0x30 && first <= 0x39), !reserved.contains(text.lowercased())
        {
            return text
        }
        var quoted = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": quoted += "\\\""
            case "\\": quoted += "\\\\"
            case "\t": quoted += "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F:
                let hex = String(scalar.value, radix: 16)
                quoted += "\\x" + (hex.count < 2 ? "0" + hex : hex)
            default: quoted.unicodeScalars.append(scalar)
            }
        }
        return quoted + "\""
    }
}
