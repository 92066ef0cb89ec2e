import HTTP1Codec
import ProxyCore
import ScopeConfig
import ScopePolicy

/// What `run` prints on stderr before `listening on HOST:PORT`: where the config came from, what
/// each scope does (header and secret names only, never a value), where logs and the CA are, and
/// how to point a client at the proxy. A first-time user reads this to see the proxy does what they
/// meant.
struct Banner {
    let config: ProxyConfiguration
    let source: ConfigPath?
    let listen: ListenAddress
    let routes: [ListenAddress]
    let adminPort: UInt16?
    let tunnel: TunnelPolicy
    /// nil: `--no-access-log`.
    let log: LogPresentation?
    /// The CA certificate clients must trust, when something is intercepted.
    let caCertificate: String?
    /// The TLS client listener's bound address, when `tls.client_listen` is set.
    var clientListen: ListenAddress? = nil
    /// The transparent listener's bound address, when `transparent.listen` is set.
    var transparentListen: ListenAddress? = nil

    var text: String {
        var lines: [String] = []
        lines.append("scopeproxy \(Version.current): config \(source?.described ?? "embedded default (no --config, no SCOPEPROXY_CONFIG)")")
        if config.policy.scopes.isEmpty {
            lines.append("  scopes: none; every sensitive header (Authorization, Cookie, X-API-Key, ...) is stripped everywhere")
        }
        for scope in config.policy.scopes {
            lines.append("  scope \(scope.name): \(scope.origins.map(Self.origin).sorted().joined(separator: ", "))")
            lines.append("    " + Self.effect(scope, computed: config.computed))
            if let clients = scope.clients { lines.append("    only for clients: \(clients.sorted().joined(separator: ", "))") }
        }
        for rule in config.clients { lines.append("  client \(rule.name): " + Self.recognition(rule)) }
        if !config.clients.isEmpty && !config.clients.contains(where: { $0.name == ClientRule.anonymousName }) {
            lines.append("  unrecognised clients: 407 (define a client named 'anonymous' to serve them)")
        }
        for (route, address) in zip(config.routes, routes) {
            lines.append("  route \(address) -> \(Self.origin(route.upstream))")
        }
        if let transparentListen {
            lines.append("  transparent: \(transparentListen) (connections redirected here go to their original destination; docs/transparent.md)")
        }
        if let auth = config.proxyAuthSecret { lines.append("  proxy auth: required (password from secret '\(auth)')") }
        lines.append(
            "  redirects: \(config.redirects.mode.rawValue) cross-origin"
                + (config.redirects.mode == .follow ? " (up to \(config.redirects.maxHops) hops)" : ""))
        if let admin = config.admin {
            let bound = ListenAddress(host: admin.host, port: adminPort ?? admin.port)
            lines.append("  admin: http://\(bound)/healthz and /metrics")
            // The live view (docs/view.md): where to open it, and how when a token guards it.
            lines.append(
                "  live view: http://\(bound)/view"
                    + (config.adminToken.map { " (admin_token '\($0)': open /view?token=TOKEN once, or send Authorization: Bearer TOKEN)" }
                        ?? " (no admin_token: open to local processes; scopeproxy tail shows it in a terminal)"))
        } else {
            lines.append("  admin: off (set 'admin: 127.0.0.1:9090' for health checks, metrics and the live view)")
        }
        lines.append("  access log: " + Self.describe(log, config.log.output))
        if let caCertificate {
            let hosts = Runtime.interceptHosts(config).sorted()
            let shown = hosts.prefix(4).joined(separator: ", ") + (hosts.count > 4 ? " and \(hosts.count - 4) more" : "")
            lines.append("  TLS interception: \(shown); clients must trust \(caCertificate) (scopeproxy ca prints it)")
        } else if tunnel == .allow {
            lines.append("  TLS interception: off (HTTPS goes through CONNECT, unseen)")
        } else {
            // Tunnels denied and nothing intercepted: an https:// request through the proxy is a 403.
            lines.append("  TLS interception: off (HTTPS through the proxy is refused: CONNECT is denied and no host is in tls.intercept)")
        }
        if let clientListen, let caCertificate {
            let url = Self.proxyURL(clientListen).replacingOccurrences("http://", "https://")
            let authorities = config.clientCAFiles.count
            lines.append(
                "  TLS client listener: \(url) (proxy certificate from \(caCertificate); client certificates from "
                    + "\(authorities == 0 ? "no CA: clients connect without one" : "\(authorities) CA file(s)"))")
        }
        lines.append("  egress: " + Self.egress(config.egress))
        lines.append(
            "  CONNECT tunnels: "
                + (tunnel == .allow
                    ? "allowed (bytes spliced, nothing scoped inside)"
                    : caCertificate == nil ? "denied (403)" : "denied (403) unless intercepted"))
        // curl reads lowercase http_proxy only (uppercase HTTP_PROXY is ignored for CGI safety);
        // most other clients read either spelling.
        if config.proxyAuthSecret == nil && config.clients.isEmpty && !Self.isLoopback(listen.host) {
            lines.append(
                "  warning: \(listen) is reachable beyond this machine and proxy_auth is off: whoever reaches it uses the injected credentials")
        }
        lines += Self.useIt(Self.proxyURL(listen), proxyAuthSecret: config.proxyAuthSecret, clients: config.clients)
        return lines.joined(separator: "\n") + "\n"
    }

    /// The `use it:` lines: how a client sends what recognises it, one line per way (never a
    /// value). Basic credentials go in the proxy URL; a Bearer key goes in a Proxy-Authorization
    /// header of its own (a password in the URL is sent as Basic, which names no Bearer client).
    static func useIt(_ url: String, proxyAuthSecret: String?, clients: [ClientRule]) -> [String] {
        if let auth = proxyAuthSecret {
            // Where the password goes, never the password.
            let withPassword = url.replacingOccurrences("http://", "http://user:PASSWORD@")
            return ["  use it (PASSWORD: the value of secret '\(auth)'): export http_proxy=\(withPassword) https_proxy=\(withPassword)"]
        }
        var lines: [String] = []
        if clients.contains(where: { if case .basic? = $0.auth { true } else { false } }) {
            // Where a Basic client's password goes, never the password.
            let withUser = url.replacingOccurrences("http://", "http://USER:PASSWORD@")
            lines.append(
                "  use it (a Basic client: its user and the value of its password secret): export http_proxy=\(withUser) https_proxy=\(withUser)")
        }
        if clients.contains(where: { if case .bearer? = $0.auth { true } else { false } }) {
            lines.append(
                "  use it (a Bearer client: KEY the value of its token secret, in a header, not the URL): "
                    + "curl --proxy-header 'Proxy-Authorization: Bearer KEY' -x \(url) URL; other clients: docs/clients.md")
        }
        if lines.isEmpty { lines.append("  use it: export http_proxy=\(url) https_proxy=\(url)") }
        return lines
    }

    /// How a client is recognised, by secret names (never values).
    static func recognition(_ rule: ClientRule) -> String {
        var ways: [String] = []
        if let tls = rule.tlsClient { ways.append("client certificate \(tls.subject) from \(tls.caFile)") }
        switch rule.auth {
        case .basic(let user, let password)?: ways.append("Basic user \(user), password from secret '\(password)'")
        case .bearer(let token)?: ways.append("Bearer token from secret '\(token)'")
        case .anyUserOrBearer(let secret)?: ways.append("proxy_auth secret '\(secret)'")
        case nil: break
        }
        if let uid = rule.uid { ways.append("loopback socket owned by uid \(uid)") }
        if !rule.sources.isEmpty { ways.append("address in \(rule.sources.map(\.text).joined(separator: ", "))") }
        if ways.isEmpty { ways.append("every client nothing else recognises") }
        return ways.joined(separator: "; or ") + (rule.rate.map { " (rate \($0))" } ?? "")
    }

    /// The egress policy in one line: the default, the mode, the denied address sets, and which
    /// clients have rules of their own (docs/egress.md).
    static func egress(_ policy: EgressPolicy) -> String {
        var text =
            policy.defaultAction == .allow
            ? "every destination by name" : "scope origins and \(policy.allow.count) allow entr\(policy.allow.count == 1 ? "y" : "ies") only"
        if policy.mode == .report { text += " (report mode: denials are logged as report_deny, not enforced)" }
        text += policy.denyIPs.isEmpty ? "; no address denied" : "; never \(policy.denyIPs.description) addresses"
        let own = policy.clients.keys.sorted()
        if !own.isEmpty { text += "; own rules for client\(own.count == 1 ? "" : "s") \(own.joined(separator: ", "))" }
        return text
    }

    static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }

    /// The address clients use: a wildcard bind is reached on loopback from this machine.
    static func proxyURL(_ listen: ListenAddress) -> String {
        switch listen.host {
        case "0.0.0.0": "http://127.0.0.1:\(listen.port)"
        case "::": "http://[::1]:\(listen.port)"
        default: "http://\(listen)"
        }
    }

    /// `https://api.example` (the default port left out, as people write it): `Origin.description`,
    /// the one serialization banner, explain, config print and the log share.
    static func origin(_ origin: Origin) -> String { origin.description }

    /// `injects Authorization (secret library_token); passes Cookie; GET, POST only; paths /v1/`
    /// `computed`: the secrets the proxy obtains (an injection of one is named by its kind).
    static func effect(_ scope: Scope, computed: [String: ComputedSecret] = [:]) -> String {
        var parts = credentials(scope, computed: computed)
        parts.append(scope.pass.isEmpty ? "passes no client credential" : "passes " + scope.pass.sorted().map(headerCase).joined(separator: ", "))
        if let methods = scope.methods { parts.append(methods.sorted().joined(separator: ", ") + " only") }
        if let paths = scope.paths { parts.append("paths " + paths.joined(separator: ", ")) }
        if !scope.requireHTTPS { parts.append("http allowed") }
        return parts.joined(separator: "; ")
    }

    /// What a scope puts on the requests it covers, one part per kind of credential action (by
    /// secret name, never a value); `["injects nothing"]` only when it has none. The banner and
    /// explain both use it: the switch over `CredentialAction` is exhaustive, so a new kind of
    /// credential cannot be left out of either.
    static func credentials(_ scope: Scope, computed: [String: ComputedSecret] = [:]) -> [String] {
        var injected: [String] = [], signed: [String] = [], substituted: [String] = []
        for action in scope.credentialActions {
            switch action {
            case .inject(let injection):
                let secrets = injection.template.secretNames.map { name in
                    "\(computed[name].map(CredentialSourceText.kind) ?? "secret") \(name)"
                }
                injected.append(secrets.isEmpty ? injection.header : "\(injection.header) (\(secrets.joined(separator: ", ")))")
            case .sign(.awsSigV4(let spec)):
                let keys = spec.chain.map { "credentials from \($0)" } ?? "secrets \(spec.secretNames.joined(separator: ", "))"
                signed.append("signs AWS SigV4 (service \(spec.service), region \(spec.region); \(keys))")
            case .substitute(let secret):
                substituted.append(secret)
            }
        }
        var parts: [String] = []
        if !injected.isEmpty { parts.append("injects " + injected.joined(separator: ", ")) }
        parts += signed
        if !substituted.isEmpty { parts.append("substitutes the placeholders of secret " + substituted.joined(separator: ", ")) }
        return parts.isEmpty ? ["injects nothing"] : parts
    }

    /// `x-api-key` -> `X-Api-Key`: the rules keep names lowercase; people read them capitalized.
    static func headerCase(_ name: String) -> String {
        name.split(separator: "-", omittingEmptySubsequences: false).map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined(separator: "-")
    }

    static func describe(_ log: LogPresentation?, _ output: LogOutput) -> String {
        guard let log else { return "off (--no-access-log)" }
        let destination: String
        switch output {
        case .standardOutput: destination = "stdout"
        case .standardError: destination = "stderr"
        case .file(let path): destination = path
        case .discard: destination = "nowhere"
        }
        return "\(log.format.rawValue)\(log.colour ? " (colour)" : "") to \(destination)"
    }
}
