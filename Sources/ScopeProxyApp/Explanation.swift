import HTTP1Codec
import ProxyCore
import RecordRendering
import ScopeConfig
import ScopePolicy
import SecretStore

#if canImport(Glibc)
    import Glibc
#endif

/// `scopeproxy explain`: what the proxy would do with one request, without sending it. It runs the
/// same admission, hop planning and redirect direction the engine runs, with the secrets' names in
/// place of their values, and says which rule decided each header.
public enum Explanation {
    public struct Request: Sendable {
        public var method: String
        public var headers: [(name: String, value: String)]
        public var url: String
        /// A Location a 3xx from this origin might carry: what would the redirect get?
        public var location: String?
        /// `--client NAME`: explain as this configured client.
        public var client: String?

        public init(method: String, headers: [(name: String, value: String)], url: String, location: String? = nil, client: String? = nil) {
            self.method = method
            self.headers = headers
            self.url = url
            self.location = location
            self.client = client
        }
    }

    /// The report, and the exit status (0: explained; 2: the request itself is not one the proxy
    /// would take, said why).
    public static func render(_ config: ProxyConfiguration, _ request: Request) -> (text: String, status: Int32) {
        // A URL explain cannot read is said before anything is loaded.
        if case .failure(let refusal) = target(of: request) { return (refusal.text, refusal.status) }
        return render(config, request, scope: previewScope(config), checksSecrets: true)
    }

    /// The request's origin and path, or what explain answers when its URL is not absolute.
    private static func target(of request: Request) -> Result<(Origin, String), Refusal> {
        let method = request.method.uppercased()
        do {
            guard case .absolute(let origin, let pathAndQuery, _) = try RequestTarget.parse(request.url, method: method) else {
                return .failure(Refusal(text: "cannot explain \(request.url): give an absolute http:// or https:// URL\n", status: 2))
            }
            return .success((origin, pathAndQuery))
        } catch {
            guard case .invalid(let reason) = error else { return .failure(Refusal(text: "cannot explain: invalid URL\n", status: 2)) }
            return .failure(
                Refusal(text: "cannot explain \(request.url): \(reason) (give an absolute http:// or https:// URL)\n", status: 2))
        }
    }

    private struct Refusal: Error {
        let text: String
        let status: Int32
    }

    /// The scope context explain plans with: every secret's value is its own `${name}` reference,
    /// placeholders as `run` would know them. Built once per configuration (`Explainer`).
    static func previewScope(_ config: ProxyConfiguration) -> ScopeContext {
        let placeholders = previewPlaceholders(config)
        let accessKeyIDs = Set(
            config.policy.scopes.compactMap { scope -> String? in
                if case .awsSigV4(let spec)? = scope.signing { spec.accessKeyIDSecret } else { nil }
            })
        let chains = Set(config.policy.scopes.compactMap { $0.signingChain?.secretName })
        return Runtime.scopeContext(
            config, secrets: PreviewSecrets(accessKeyIDs: accessKeyIDs, chains: chains), placeholders: placeholders)
    }

    /// The report with `scope` from `previewScope`. `checksSecrets`: say what `run` would make of
    /// secrets it cannot load (reads them: the command line only; a running proxy has its own).
    static func render(
        _ config: ProxyConfiguration, _ request: Request, scope: ScopeContext, checksSecrets: Bool
    ) -> (text: String, status: Int32) {
        var out = Report()
        let method = request.method.uppercased()
        let origin: Origin
        let pathAndQuery: String
        switch target(of: request) {
        case .failure(let refusal): return (refusal.text, refusal.status)
        case .success(let target): (origin, pathAndQuery) = target
        }
        let names = scope.clients.names
        if let name = request.client, !names.contains(name) {
            var nearest: (name: String, distance: Int)?
            for candidate in names.sorted() {
                let distance = CommandLineParser.editDistance(name, candidate)
                if distance <= 2, distance < (nearest?.distance ?? Int.max) { nearest = (candidate, distance) }
            }
            let hint = nearest.map { ", did you mean '\($0.name)'?" } ?? ""
            let known = names.isEmpty ? "the config defines no clients" : "clients: \(names.joined(separator: ", "))"
            return ("cannot explain: no client named '\(name)'\(hint) (\(known))\n", 2)
        }
        // The client is taken as named: explain shows what the scopes do for it, not how it is recognised.
        let identity = request.client.map { ClientIdentity(name: $0) } ?? .unnamed
        out.line("request", "\(method) \(request.url)")
        out.line("origin", origin.description)
        if !names.isEmpty {
            out.line(
                "client",
                request.client.map { "\($0) (--client)" }
                    ?? "none given (--client NAME): scopes limited to named clients do not serve this request")
        }
        let covering = scope.policy.covering(origin, client: identity.name)
        let egress = egressVerdict(origin, client: identity, covering: covering, scope: scope)
        out.line("egress", egress.text)
        if let refusal = egress.refusal {
            // Refused before any scope rule runs: nothing else about the request matters.
            out.line("answer", "\(refusal.status) \(refusal.code): \(refusal.message)")
            return (out.text, 0)
        }
        if covering.isEmpty {
            out.line("scopes", notCovering(origin, client: request.client, config: config))
        } else {
            out.line(
                "scopes",
                covering.map { scope in "\(scope.name) (origins \(scope.origins.map(Banner.origin).sorted().joined(separator: ", ")))" }
                    .joined(separator: "; "))
            // What each covering scope does, in the banner's words (one description of a scope's credentials).
            for scope in covering { out.line("", "\(scope.name): " + Banner.credentials(scope, computed: config.computed).joined(separator: "; ")) }
            // Scopes of this origin that serve other clients (the log's client_not_served): named, with the --client to see them.
            for other in config.policy.scopes where other.origins.contains(origin) && !other.serves(request.client) {
                let clients = (other.clients ?? []).sorted()
                out.line(
                    "",
                    "\(other.name) covers it too, for clients \(clients.joined(separator: ", ")) only"
                        + (request.client == nil ? " (explain with --client \(clients.first ?? "NAME"))" : ", not '\(request.client ?? "")'"))
            }
        }

        var mode = ConnectionMode.forwardProxy
        if origin.scheme == .https {
            // Clients send https:// requests as CONNECT plus TLS: the rules apply only inside a
            // tunnel the proxy terminates.
            if scope.interceptHosts.contains(origin.host) {
                out.line(
                    "https",
                    "CONNECT \(origin.host):\(origin.port) is intercepted (tls.intercept): the rules below apply inside the tunnel, "
                        + "to each HTTP/1.1 request and each HTTP/2 stream alike")
                mode = .intercepted(origin, client: identity)
            } else if config.tls.tunnel == .allow {
                out.line(
                    "https",
                    "CONNECT \(origin.host):\(origin.port) would be tunnelled, not intercepted: the proxy sees nothing inside, "
                        + "so nothing is injected or stripped. Add \(origin.host) to tls.intercept for the rules below to apply.")
            } else if config.policy.scopes.contains(where: { $0.origins.contains(origin) }) {
                out.line(
                    "https",
                    "CONNECT \(origin.host):\(origin.port) would be refused (tls.tunnel: deny, and the host is not in tls.intercept). "
                        + "Add \(origin.host) to tls.intercept for the rules below to apply.")
            } else {
                // No scope wants anything here: the way through is a tunnel or no proxy at all, not interception.
                out.line(
                    "https",
                    "CONNECT \(origin.host):\(origin.port) would be refused (tls.tunnel: deny, and the host is not in tls.intercept). "
                        + "No scope covers it: to let it through unseen, set tunnel: allow under tls: or list \(origin.host) in the "
                        + "client's NO_PROXY; add it to tls.intercept only to have the proxy strip credentials inside.")
            }
        }

        var fields = HTTPFields([HTTPField(name: "Host", value: origin.authority)])
        for (name, value) in request.headers { fields.append(name: name, value: value) }
        let head = RequestHead(method: method, target: mode == .forwardProxy ? request.url : pathAndQuery, version: .http1_1, fields: fields)
        let policy = RequestAdmission.Policy(tunnel: config.tls.tunnel, canIntercept: true)
        // Admission without client recognition (the client is the one named above).
        let admitting = ScopeContext(policy: scope.policy, redirects: scope.redirects, secrets: scope.secrets, interceptHosts: scope.interceptHosts)
        guard case .forward(let admitted) = RequestAdmission.admit(head, mode: mode, scope: admitting, policy: policy) else {
            if case .reject(let error) = RequestAdmission.admit(head, mode: mode, scope: admitting, policy: policy) {
                out.line("answer", "\(error.status) \(error.code): \(error.message)")
            }
            return (out.text, 0)
        }
        let client = ClientRequest(
            head: admitted.head, origin: admitted.origin, pathAndQuery: admitted.pathAndQuery,
            userinfo: admitted.userinfo, framing: admitted.framing, client: identity)
        let hopTarget = HopTarget(origin: origin, method: method, pathAndQuery: client.pathAndQuery)
        let hop: Hop
        switch HopPlanner.plan(
            client, to: hopTarget, body: .none, chain: RedirectChain(), scope: scope, requestID: "<request id>", wallClock: Int64(time(nil)))
        {
        case .failure(let error):
            out.line("answer", "\(error.status) \(error.code): \(error.message)")
            return (out.text, 0)
        case .success(let planned):
            hop = planned
        }
        let substituted = config.policy.substitutable(method: method, origin: origin, pathAndQuery: client.pathAndQuery, client: identity.name)
        var checkedSecrets = describe(hop, client: client, covering: covering, config: config, checksSecrets: checksSecrets, into: &out)
        checkedSecrets.formUnion(
            describePlaceholders(config, substituted: substituted, covering: covering, checksSecrets: checksSecrets, into: &out))
        if let location = request.location {
            explainRedirect(to: location, from: hop, client: client, mode: mode, scope: scope, config: config, into: &out)
        } else {
            out.line("redirects", redirectSummary(config.redirects))
        }
        // run loads every secret at start-up, not only this request's: one it cannot load stops it.
        let otherProblems = (checksSecrets ? Runtime.secretStore(config).problems() : [])
            .filter { !checkedSecrets.contains($0.name) }
        if !otherProblems.isEmpty {
            out.line(
                "run",
                "would refuse to start (exit 1) over secrets this request does not use: "
                    + otherProblems.map(\.description).joined(separator: "; ") + " (scopeproxy check lists every one)")
        }
        return (out.text, 0)
    }

    /// The `egress` line: whether this client may reach the destination at all, and by which rule;
    /// the address check that happens at connect (explain resolves nothing and sends nothing).
    static func egressVerdict(
        _ origin: Origin, client: ClientIdentity, covering: [Scope], scope: ScopeContext
    ) -> (text: String, refusal: ProxyError?) {
        let rules = scope.egressRules.rules(for: client.name)
        let destination = origin
        let whose = rules.ownRules ? " of client '\(client.name ?? "")'" : ""
        var verdict: String
        switch rules.decide(destination, scopeOrigin: !covering.isEmpty) {
        case .allowed:
            if rules.defaultAction == .allow {
                verdict = "allowed (egress.default\(whose): allow)"
            } else if let entry = rules.allowEntry(for: destination) {
                verdict = "allowed by egress.allow\(whose) entry \"\(entry.text)\""
            } else {
                verdict = "allowed: an origin of scope \(covering.map(\.name).joined(separator: ", ")) (default deny still reaches scopes)"
            }
        case .denied(let rule):
            let refused = EgressClearance.clear(origin, client: client, scope: scope)
            guard case .failure(let error) = refused, case .egressDenied(let refusal) = error else { return ("denied (\(rule))", nil) }
            return ("denied (\(rule)): \(refusal.hint)", error)
        case .reported(let rule):
            verdict = "would be denied (\(rule)) but egress.mode is report: it goes through, logged as report_deny"
        }
        if let literal = IPAddress.parse(origin.hostForLookup) {
            switch rules.decide(address: literal) {
            case .allowed: return (verdict, nil)
            case .denied(let rule):
                let error = EgressClearance(rules: rules).refusal(for: origin, rule: rule, address: literal)
                guard case .egressDenied(let refusal) = error else { return ("denied (\(rule))", error) }
                return ("denied (\(rule)): \(refusal.hint)", error)
            case .reported(let rule): return (verdict + "; the address would be denied (\(rule)), logged as report_deny", nil)
            }
        }
        guard rules.checksAddresses else { return (verdict + "; no address is refused (deny_ips is empty)", nil) }
        return (verdict + "; addresses checked at connect against deny_ips: \(rules.denyIPs.description)", nil)
    }

    /// The `scopes` line when no scope covers the origin for this client: a scope that covers it
    /// for other clients is named (the log says `client_not_served` there), with the `--client`
    /// that would show it.
    private static func notCovering(_ origin: Origin, client: String?, config: ProxyConfiguration) -> String {
        let forOthers = config.policy.scopes.filter { $0.origins.contains(origin) && !$0.serves(client) }
        guard !forOthers.isEmpty else { return "none covers this origin: every sensitive header is stripped, nothing is injected" }
        let described = forOthers.map { scope in
            "scope \(scope.name) covers this origin but serves only clients \((scope.clients ?? []).sorted().joined(separator: ", "))"
        }.joined(separator: "; ")
        let example = forOthers.first?.clients?.sorted().first ?? "NAME"
        if let client {
            return
                "\(described), not '\(client)': for this client every sensitive header is stripped, nothing is injected (client_not_served in the log)"
        }
        return "\(described): explain that client's request with --client \(example) (without --client: client_not_served, "
            + "every sensitive header stripped, nothing injected)"
    }

    // MARK: One hop

    /// Returns the secrets whose loading it reported on (the injected ones).
    private static func describe(
        _ hop: Hop, client: ClientRequest, covering: [Scope], config: ProxyConfiguration, checksSecrets: Bool,
        into out: inout Report
    ) -> Set<String> {
        var checkedSecrets: Set<String> = []
        let decision = hop.decision
        if decision.injected.isEmpty {
            out.line("injected", "nothing")
        }
        if hop.signed != nil, let signer = covering.first(where: { $0.signing != nil }), case .awsSigV4(let spec)? = signer.signing {
            let keys =
                spec.chain.map { "credentials from \($0)" }
                ?? "access key id from secret '\(spec.accessKeyIDSecret)', secret key from '\(spec.secretAccessKeySecret)'"
                + (spec.sessionTokenSecret.map { ", session token from '\($0)'" } ?? "")
            out.line(
                "signed",
                "AWS SigV4 by scope \(signer.name): service \(spec.service), region \(spec.region), \(keys)"
                    + (spec.service == "s3" ? "; payload UNSIGNED-PAYLOAD" : "; the body's SHA-256 (bodies up to 1 MiB)")
                    + ". The signature below is made from stand-ins, not the values.")
            if let chain = spec.chain { out.line("source", CredentialSourceText.source(chain.secretName, .awsChain(chain))) }
        }
        for scope in covering {
            for injection in scope.inject where decision.injected.contains(injection.header) {
                out.line("injected", "\(injection.header): \(templateText(injection.template))   (scope \(scope.name))")
                for secret in injection.template.secretNames where checkedSecrets.insert(secret).inserted {
                    if checksSecrets, let problem = secretProblem(secret, config: config) { out.line("", consequence(of: problem)) }
                    if let recipe = config.computed[secret] {
                        // Computed, not stored: say where it would come from (never the value; nothing is fetched or run).
                        out.line("source", CredentialSourceText.source(secret, recipe))
                    }
                }
            }
        }
        for skip in decision.skipped {
            out.line("not injected", "scope \(skip.scope): \(skipReason(skip.why))")
        }
        let injectedNames = Set(decision.injected.map { $0.lowercased() })
        let stripped = Set(decision.stripped.map { $0.lowercased() })
        for (index, field) in client.head.fields.enumerated() where index > 0 {  // the first is the Host the report added
            let name = field.name.lowercased()
            let verdict: String
            if injectedNames.contains(SensitiveHeaders.canonicalName(name)) {
                verdict = "replaced: the proxy injects \(field.name) here"
            } else if stripped.contains(name) {
                verdict = "stripped: " + stripReason(field.name, decision: decision, covering: covering, client: client, hop: hop)
            } else if config.policy.isSensitive(field.name), !covering.contains(where: { $0.pass.contains(name) }) {
                // Not stripped, not passed: kept only because it carries a placeholder (raw or in Basic credentials).
                verdict = "kept: its value carries a placeholder substituted here (the value is the proxy's credential)"
            } else if config.policy.isSensitive(field.name) {
                verdict = "passed: a covering scope lists it in pass"
            } else {
                verdict = "sent as it is"
            }
            out.line("header", "\(field.name): \(verdict)")
        }
        if let userinfo = client.userinfo, !userinfo.isEmpty {
            out.line(
                "userinfo",
                decision.userinfoRemoved
                    ? "removed (no covering scope passes authorization)"
                    : "sent as Authorization: Basic (a covering scope passes authorization)")
        }
        out.line("upstream", "the head the origin would receive (secrets shown by name):")
        for line in String(decoding: hop.head, as: UTF8.self).split(separator: "\r\n") { out.line("", "  " + line) }
        return checkedSecrets
    }

    private static func stripReason(_ name: String, decision: ScopeDecision, covering: [Scope], client: ClientRequest, hop: Hop) -> String {
        if name.contains("_") { return "an underscore spelling of a sensitive name (CGI/WSGI read _ as -), never forwarded" }
        if SensitiveHeaders.methodOverride.contains(name.lowercased()) { return "a method override, where a scope limits methods" }
        if decision.reason == .traceMethod { return "TRACE never carries credentials" }
        if decision.reason == .httpsDowngrade { return "an https -> http hop carries no credential" }
        if decision.skipped.contains(where: { $0.why == .clientNotServed }) && covering.isEmpty {
            return "sensitive, and no scope serving this client covers this origin"
        }
        if covering.isEmpty { return "sensitive, and no scope covers this origin" }
        return "sensitive, and no covering scope lists it in pass"
    }

    private static func skipReason(_ why: InjectionSkip) -> String { why.explanation }

    // MARK: Placeholders

    /// Which secrets' placeholders this request may carry (by name: explain never prints a
    /// placeholder, it may be on a shared screen), and that any other is refused. Silent when the
    /// config declares no placeholder.
    /// Returns the secrets whose loading it reported on (the substituted ones).
    private static func describePlaceholders(
        _ config: ProxyConfiguration, substituted: Set<String>, covering: [Scope], checksSecrets: Bool,
        into out: inout Report
    ) -> Set<String> {
        guard !config.placeholders.isEmpty else { return [] }
        let declared = config.placeholders.map(\.secret)
        if substituted.isEmpty {
            out.line("substituted", "nothing: no scope substitutes a placeholder for this request")
        }
        for secret in declared where substituted.contains(secret) {
            let scopes = covering.filter { $0.substitute.contains(secret) }.map(\.name)
            out.line("substituted", "\(secret): its placeholder is replaced by the value (scope \(scopes.joined(separator: ", ")))")
            if checksSecrets, let problem = secretProblem(secret, config: config) { out.line("", consequence(of: problem)) }
        }
        let refused = declared.filter { !substituted.contains($0) }
        if !refused.isEmpty {
            out.line("placeholders", "of \(refused.joined(separator: ", ")): refused here (403 placeholder_out_of_scope, nothing sent)")
        }
        return substituted
    }

    /// The placeholders as `run` would know them when the key already exists, so a placeholder
    /// given with -H is shown substituted (as its secret's name) or refused. explain creates no
    /// key: without one, no client can hold a placeholder yet.
    private static func previewPlaceholders(_ config: ProxyConfiguration) -> PlaceholderTable {
        guard !config.placeholders.isEmpty, let key = try? PlaceholderKey.load(path: config.placeholderKeyPath) else { return .empty }
        return PlaceholderTable(config.placeholders, key: key)
    }

    // MARK: Redirects

    private static func redirectSummary(_ redirects: RedirectPolicy) -> String {
        switch redirects.mode {
        case .pass: "pass: a 3xx goes back to the client, whose follow-up is scoped on its own origin (try --location URL)"
        case .follow: "follow: the proxy follows up to \(redirects.maxHops) hops, re-scoping each (try --location URL)"
        case .block: "block: a redirect to another origin than this one or redirects.allow is a 502 (try --location URL)"
        }
    }

    private static func explainRedirect(
        to location: String, from hop: Hop, client: ClientRequest, mode: ConnectionMode,
        scope: ScopeContext, config: ProxyConfiguration, into out: inout Report
    ) {
        let response = ResponseHead(
            version: .http1_1, status: 302, reason: "Found",
            fields: HTTPFields([HTTPField(name: "Location", value: location)]))
        let context = ResponseDirector.Context(
            request: client, hop: hop, chain: RedirectChain(), mode: mode, scope: scope,
            requestComplete: true, replayableBody: [])
        switch ResponseDirector.direct(response, context) {
        case .relay(_, let redirect):
            let target = redirect?.origin.map(\.description) ?? "an origin the proxy cannot read"
            out.line(
                "redirect",
                "a 302 to \(location): returned to the client (\(config.redirects.mode.rawValue) mode; target \(target)); "
                    + "the client's follow-up is scoped on its own")
        case .refuse(let error, _):
            out.line("redirect", "a 302 to \(location): \(error.status) \(error.code): \(error.message)")
        case .follow(let target, let body, _):
            out.line("redirect", "a 302 to \(location): followed by the proxy to \(target.origin)")
            let chain = ResponseDirector.chain(after: RedirectChain(), hop: hop, to: target, request: client)
            if case .success(let next) = HopPlanner.plan(
                client, to: target, body: body, chain: chain, scope: scope, requestID: "<request id>", wallClock: Int64(time(nil)))
            {
                out.line(
                    "",
                    "the next hop gets injected: \(next.decision.injected.isEmpty ? "nothing" : next.decision.injected.joined(separator: ", ")); "
                        + "stripped: \(next.decision.stripped.isEmpty ? "nothing" : next.decision.stripped.joined(separator: ", "))"
                        + (target.origin != client.origin ? " (the client's own credentials never go to another origin)" : ""))
            }
        }
    }

    // MARK: Helpers

    private static func templateText(_ template: HeaderTemplate) -> String {
        template.parts.map { part in
            switch part {
            case .literal(let text): text
            case .secret(let name): "${\(name)}"
            }
        }.joined()
    }

    /// Why `run` would find no value for the secret, or nil (never the value itself). The loader
    /// refuses a reference to an undefined secret, so every name here has a source.
    private static func secretProblem(_ name: String, config: ProxyConfiguration) -> SecretError? {
        guard let source = config.secrets[name] else { return nil }
        let store = SecretStore(
            sources: [name: source], storeDirectory: config.storeDirectory, configPath: config.sourcePath,
            privateKeys: config.privateKeySecrets)
        do {
            try store.load()
            return nil
        } catch {
            return error
        }
    }

    /// What `run` does about a secret it cannot load: at start-up `load` fails for every kind and
    /// run exits 1 (as `check` warns); a proxy already running reacts by kind (`SecretStore.refresh`).
    static func consequence(of problem: SecretError) -> String {
        let refuses = "\(problem.description); run would refuse to start (exit 1)"
        switch problem.kind {
        case .environmentUnset:
            return refuses + ". explain looked in its own environment: set the variable where run starts"
        case .fileUnreachable:
            return refuses + "; a proxy already running keeps the last value it read until the file is back"
        case .refused:
            return refuses + "; a proxy already running drops the value and answers 502 credential_unavailable"
        }
    }

    /// Secret values for the report: each secret's own reference, so the head shows where it goes.
    private struct PreviewSecrets: SecretLookup {
        /// Secrets used as AWS access key ids, whose syntax (letters, digits, `_`) a `${name}`
        /// reference would break: they preview as `EXPLAIN_name`.
        var accessKeyIDs: Set<String> = []

        /// AWS chains a scope signs with: their stand-in is credentials named after the chain.
        var chains: Set<String> = []

        func value(of name: String) -> SecretValue? {
            if chains.contains(name) {
                let standIn = Array("EXPLAIN_" + String(name.map { $0.isLetter || $0.isNumber ? $0 : "_" }))
                return AWSTemporaryCredentials(
                    accessKeyID: Array(String(standIn).utf8), secretAccessKey: Array("stand-in".utf8), sessionToken: nil, expiration: nil)?
                    .packed
            }
            guard accessKeyIDs.contains(name) else { return SecretValue("${\(name)}") }
            return SecretValue("EXPLAIN_" + String(name.map { $0.isLetter || $0.isNumber ? $0 : "_" }))
        }
        /// The report shows where values go; it has none to scan for.
        var currentValues: [String: SecretValue] { [:] }
    }

    private struct Report {
        var text = ""

        mutating func line(_ label: String, _ value: String) {
            let padded = label.isEmpty ? String(repeating: " ", count: 14) : label.padding(14)
            text += padded + value + "\n"
        }
    }
}

extension String {
    fileprivate func padding(_ width: Int) -> String {
        count >= width ? self + " " : self + String(repeating: " ", count: width - count)
    }
}
