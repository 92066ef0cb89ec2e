import HTTP1Codec

/// One validated scope: which origins it covers, what it injects and lets through there.
public struct Scope: Sendable, Equatable {
    public struct Injection: Sendable, Equatable {
        /// As configured (its case is what goes on the wire).
        public let header: String
        public let template: HeaderTemplate

        public init(header: String, template: HeaderTemplate) {
            self.header = header
            self.template = template
        }
    }

    public let name: String
    public let origins: Set<Origin>
    public let requireHTTPS: Bool
    public let inject: [Injection]
    /// Header names the client may send to these origins, as `SensitiveHeaders.canonicalName`
    /// spells them.
    public let pass: Set<String>
    /// The injected header names, canonical: the client's value never passes under them.
    public let injectedNames: Set<String>
    /// Uppercase methods injection is limited to; nil means every method.
    public let methods: Set<String>?
    /// Path prefixes injection is limited to; nil means every path.
    public let paths: [String]?
    /// The clients (`clients:` names) this scope serves; nil means every client. For any other
    /// client the scope does not cover its origins.
    public let clients: Set<String>?
    /// Every way this scope puts a credential on a request it covers, in config order: inject,
    /// then sign, then substitute (sorted).
    public let credentialActions: [CredentialAction]
    /// `substitute:` secrets (each declared with `placeholder: true`) whose placeholders are swapped
    /// for their values in requests to these origins.
    public let substitute: Set<String>
    /// `sign:`: the scope signs the requests it covers (AWS SigV4) instead of or besides injecting.
    public let signing: SigningSpec?

    /// The AWS chain the signature's credentials come from (`credentials: default | {profile: NAME}`).
    public var signingChain: AWSCredentialSelection? {
        if case .awsSigV4(let spec)? = signing { return spec.chain }
        return nil
    }

    public init(
        name: String, origins: Set<Origin>, requireHTTPS: Bool = true, inject: [Injection] = [],
        pass: Set<String> = [], methods: Set<String>? = nil, paths: [String]? = nil, clients: Set<String>? = nil,
        substitute: Set<String> = [], signing: SigningSpec? = nil
    ) {
        self.clients = clients
        self.substitute = substitute
        self.signing = signing
        let actions =
            inject.map(CredentialAction.inject) + (signing.map { [CredentialAction.sign($0)] } ?? [])
            + substitute.sorted().map(CredentialAction.substitute)
        credentialActions = actions
        // The secrets are derived from the actions: a credential kind the egress guard lets through
        // is an action, which every description of a scope (banner, explain) switches over.
        injectedSecretNames = Set(actions.filter(\.isInjection).flatMap(\.sentSecretNames))
        secretNames = Set(actions.flatMap(\.sentSecretNames))
        self.name = name
        self.origins = origins
        self.requireHTTPS = requireHTTPS
        self.inject = inject
        self.pass = Set(pass.map(SensitiveHeaders.canonicalName))
        injectedNames = Set(inject.map { SensitiveHeaders.canonicalName($0.header) })
        self.methods = methods
        self.paths = paths
    }

    /// Whether a request from `client` (a configured client's name; nil when the proxy does not
    /// tell clients apart) may get what this scope injects or passes. A scope limited to named
    /// clients never serves an unnamed one (fail closed).
    /// Every secret this scope sends to its origins: referenced by an `inject` template or listed in
    /// `substitute`. The egress guard lets these (and only these) values reach the scope's origins.
    public let secretNames: Set<String>
    /// The secrets its `inject` templates render (what the response scrub masks after an injection).
    public let injectedSecretNames: Set<String>

    public func serves(_ client: String?) -> Bool {
        guard let clients else { return true }
        guard let client else { return false }
        return clients.contains(client)
    }
}

/// What the policy did to one request, by name only: it feeds the access log and never holds a value.
public struct ScopeDecision: Sendable, Equatable {
    public enum Reason: String, Sendable {
        /// No scope covers the origin: every sensitive header was removed.
        case originNotInScope = "origin_not_in_scope"
        /// A scope covers the origin; its rules applied.
        case originInScope = "origin_in_scope"
        /// A followed redirect went from https to http: nothing sensitive may travel.
        case httpsDowngrade = "https_downgrade"
        /// A TRACE request: the origin echoes it back (RFC 9110 §9.3.8), so nothing sensitive
        /// is sent, not even what a scope passes, and nothing is injected.
        case traceMethod = "trace_method"
    }

    public var scopes: [String] = []
    public var injected: [String] = []
    public var stripped: [String] = []
    public var userinfoRemoved = false
    public var reason: Reason = .originNotInScope
    /// Scopes that cover the origin and would inject, but did not here, and why: a user who sees
    /// no credential arrive finds the rule in the log instead of guessing.
    public var skipped: [SkippedInjection] = []

    public init() {}
}

/// Why a covering scope injected nothing into a request.
public enum InjectionSkip: String, Sendable, Equatable, CaseIterable {
    /// A non-loopback http origin of a scope without `require_https: false`.
    case httpOrigin = "http_origin_needs_require_https_false"
    /// The method is not in the scope's `methods`.
    case method = "method_not_in_methods"
    /// A `_method` parameter names a method the scope's `methods` does not allow.
    case methodOverride = "method_override_not_in_methods"
    /// The path is not under the scope's `paths` (or has dot segments, which never count).
    case path = "path_not_in_paths"
    /// TRACE never carries credentials (RFC 9110 §9.3.8).
    case trace = "trace_never_carries_credentials"
    /// A followed redirect went from https to http.
    case httpsDowngrade = "https_downgrade"
    /// The scope's `clients:` does not list the request's client: the scope acts as if it did
    /// not cover the origin (nothing injected or passed).
    case clientNotServed = "client_not_served"
}

public struct SkippedInjection: Sendable, Equatable, CustomStringConvertible {
    public let scope: String
    public let why: InjectionSkip

    public init(scope: String, why: InjectionSkip) {
        self.scope = scope
        self.why = why
    }

    /// `library: path_not_in_paths`
    public var description: String { "\(scope): \(why.rawValue)" }
}

/// Why a request cannot be scoped. Fail closed: the request is not sent.
public enum ScopeError: Error, Equatable, Sendable {
    /// A secret an applicable injection needs has no value (unset env var, unreadable file).
    case secretUnavailable(scope: String, secret: String)
}

/// The request as it will leave the proxy.
public struct ScopedRequest: Sendable {
    public var fields: HTTPFields
    public var keepUserinfo: Bool
    public var decision: ScopeDecision
}

/// Context carried along a redirect chain the proxy follows itself.
public struct ChainContext: Sendable, Equatable {
    /// Client-sent sensitive headers stripped on an earlier hop stay stripped (lowercased names).
    public var strippedByClientHeader: Set<String> = []
    /// An https -> http hop happened on this chain.
    public var downgraded = false
    /// False on a hop to another origin than the one the client addressed: the client's own
    /// sensitive headers and userinfo were meant for that origin only, whatever a scope passes
    /// elsewhere. Only what the proxy injects may travel there.
    public var clientCredentialsAllowed = true

    public init() {}
}

/// The credential scope rules (docs/security-model.md), as a pure function of the request and the config.
public struct ScopePolicy: Sendable {
    public let scopes: [Scope]
    /// Built-in plus configured, as `SensitiveHeaders.canonicalName` spells them.
    public let sensitiveHeaders: Set<String>

    /// Every header name the proxy strips or injects under this configuration, canonical: the
    /// values a metric's `header` label may take (see `metricLabel(forHeader:)`).
    public let metricHeaderNames: Set<String>
    /// The label of each known name in its usual spellings (canonical, `Title-Case`, as configured),
    /// so that counting them makes no new string; other spellings are canonicalised.
    private let metricLabelBySpelling: [String: String]

    public init(scopes: [Scope], extraSensitiveHeaders: [String] = []) {
        self.scopes = scopes
        sensitiveHeaders = SensitiveHeaders.builtIn.union(extraSensitiveHeaders.map(SensitiveHeaders.canonicalName))
        metricHeaderNames = sensitiveHeaders.union(SensitiveHeaders.methodOverride).union(scopes.flatMap(\.injectedNames))
        var spellings: [String: String] = [:]
        for name in metricHeaderNames {
            spellings[name] = name
            spellings[name.split(separator: "-").map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined(separator: "-")] = name
        }
        for name in extraSensitiveHeaders + scopes.flatMap({ $0.inject.map(\.header) }) {
            spellings[name] = SensitiveHeaders.canonicalName(name)
        }
        metricLabelBySpelling = spellings
    }

    /// The `header` label of a metric for a header name taken from a request: the name as the
    /// rules read it (`SensitiveHeaders.canonicalName`) when the configuration knows it, otherwise
    /// `other`. A client chooses the spelling of every name it sends (`X-API-KEY`, `x_Api_key`,
    /// 2^n case patterns of one name); a label taken from the wire as spelt would make one new
    /// series per spelling, kept until the process exits. Through here a label can only be one of
    /// `metricHeaderNames` or `other`, a set the configuration fixes.
    public func metricLabel(forHeader name: String) -> String {
        if let label = metricLabelBySpelling[name] { return label }
        let canonical = SensitiveHeaders.canonicalName(name)
        return metricHeaderNames.contains(canonical) ? canonical : Self.otherHeaderLabel
    }

    /// The one label of every header name the configuration does not know.
    public static let otherHeaderLabel = "other"

    /// The embedded safe default: no scope, so every sensitive header is stripped everywhere.
    public static let stripEverything = ScopePolicy(scopes: [])

    /// Every scope listing the origin, whichever clients it serves.
    public func covering(_ origin: Origin) -> [Scope] {
        scopes.filter { $0.origins.contains(origin) }
    }

    /// The scopes that cover the origin for this client: a scope that does not serve the client
    /// does not cover anything for it.
    public func covering(_ origin: Origin, client: String?) -> [Scope] {
        scopes.filter { $0.origins.contains(origin) && $0.serves(client) }
    }

    /// Case-insensitive, and `X_Api_Key` is `X-Api-Key` (see `SensitiveHeaders.canonicalName`).
    public func isSensitive(_ name: String) -> Bool {
        sensitiveHeaders.contains(SensitiveHeaders.canonicalName(name))
    }

    /// Applies the scope rules to one request (or one hop of a followed redirect chain).
    /// `methodOverride`: what the request's `_method` parameter asks the origin to run instead
    /// (see `MethodOverride.detect`); a scope that limits `methods:` must allow that method too.
    public func apply(
        method: String, origin: Origin, pathAndQuery: String, fields: HTTPFields, hasUserinfo: Bool,
        secrets: any SecretLookup, chain: ChainContext = ChainContext(), methodOverride: MethodOverride = .none,
        client: String? = nil, vouched: Set<Int> = []
    ) -> Result<ScopedRequest, ScopeError> {
        var decision = ScopeDecision()
        let listing = covering(origin)
        // Said in the log, never silent: a scope skipped because it does not serve this client.
        let served =
            listing.allSatisfy({ $0.clients == nil })
            ? listing
            : listing.filter { scope in
                if scope.serves(client) { return true }
                decision.skipped.append(SkippedInjection(scope: scope.name, why: .clientNotServed))
                return false
            }
        if chain.downgraded {
            decision.skipped += served.filter { !$0.inject.isEmpty }.map { SkippedInjection(scope: $0.name, why: .httpsDowngrade) }
        }
        let covering = chain.downgraded ? [] : served
        decision.scopes = covering.map(\.name)
        // RFC 9110 §9.3.8: the origin reflects a TRACE request back in its response body, so any
        // credential sent with it is handed to whatever reads the response (cross-site tracing).
        // Methods are case-sensitive (§9.1), but servers that fold case would run `trace` too.
        let isTrace = method.utf8.count == 5 && method.uppercased() == "TRACE"
        decision.reason =
            chain.downgraded
            ? .httpsDowngrade
            : isTrace
                ? .traceMethod
                : covering.isEmpty ? .originNotInScope : .originInScope

        // Injected header names belong to the proxy: the client's value never passes under them.
        // Usually one scope covers an origin: its sets are used as they are (no per-request copy).
        var injectedNames = covering.first?.injectedNames ?? []
        var passed = isTrace ? [] : covering.first?.pass ?? []
        var limitsMethods = covering.first?.methods != nil
        for scope in covering.dropFirst() {
            injectedNames.formUnion(scope.injectedNames)
            if !isTrace { passed.formUnion(scope.pass) }
            if scope.methods != nil { limitsMethods = true }
        }
        let strippedEarlier =
            chain.strippedByClientHeader.isEmpty
            ? []
            : Set(chain.strippedByClientHeader.map(SensitiveHeaders.canonicalName))

        var output = HTTPFields()
        output.reserveCapacity(fields.count + covering.reduce(0) { $0 + $1.inject.count })
        var stripped: [String] = []
        for (index, field) in fields.enumerated() {
            let name = SensitiveHeaders.canonicalName(field.name)
            let sensitive = sensitiveHeaders.contains(name) || injectedNames.contains(name)
            // An underscore spelling of a sensitive or injected name is never forwarded, even
            // where the dashed name passes: CGI/WSGI read `X_Api_Key` as `X-Api-Key`, so it would
            // arrive as a second value beside the proxy's (or reach a name the scope never passed).
            let isAlias = field.name.utf8.contains(UInt8(ascii: "_"))
            // `vouched` (field positions): the client's value had a placeholder the proxy replaced by
            // a secret this origin's scopes substitute: that field is the proxy's credential, not the
            // client's (another field of the same name is not).
            let allowed =
                !isAlias && chain.clientCredentialsAllowed
                && (passed.contains(name) || vouched.contains(index)) && !strippedEarlier.contains(name)
            // `methods:` limits what a credential may do; a method-override header would undo it.
            let overridesMethod = limitsMethods && SensitiveHeaders.methodOverride.contains(name)
            if (sensitive && !allowed) || overridesMethod {
                if !stripped.contains(where: { $0.lowercased() == field.name.lowercased() }) { stripped.append(field.name) }
                continue
            }
            output.append(name: field.name, value: field.value)
        }

        for scope in covering where !scope.inject.isEmpty {
            let skip =
                isTrace
                ? .trace
                : injectionSkip(
                    scope, method: method, origin: origin, pathAndQuery: pathAndQuery,
                    override: methodOverride)
            if let skip {
                decision.skipped.append(SkippedInjection(scope: scope.name, why: skip))
                continue
            }
            for injection in scope.inject {
                switch injection.template.render(secrets) {
                case .failure(let missing):
                    return .failure(.secretUnavailable(scope: scope.name, secret: missing.name))
                case .success(let value):
                    output.set(name: injection.header, value: value.exposedFieldValue)
                    decision.injected.append(injection.header)
                }
            }
        }
        // An injected header replaced the client's: that is not a strip worth reporting. (An
        // underscore alias of it is: it is spelled differently, and was removed, not replaced.)
        decision.stripped = stripped.filter { name in !decision.injected.contains { $0.lowercased() == name.lowercased() } }

        // Userinfo becomes an Authorization header: it follows the same rule, TRACE included.
        let keepUserinfo =
            hasUserinfo && chain.clientCredentialsAllowed && passed.contains("authorization") && !strippedEarlier.contains("authorization")
        decision.userinfoRemoved = hasUserinfo && !keepUserinfo
        return .success(ScopedRequest(fields: output, keepUserinfo: keepUserinfo, decision: decision))
    }

    /// The secrets whose placeholders are replaced by their values in this request: listed in
    /// `substitute` by a scope covering the origin for this client, under the same conditions as
    /// its injection (https, `methods:`, `paths:`; never TRACE, never after a downgrade).
    public func substitutable(
        method: String, origin: Origin, pathAndQuery: String, client: String?,
        chain: ChainContext = ChainContext(), methodOverride: MethodOverride = .none
    ) -> Set<String> {
        guard !chain.downgraded, !(method.utf8.count == 5 && method.uppercased() == "TRACE") else { return [] }
        var names: Set<String> = []
        for scope in scopes where !scope.substitute.isEmpty && scope.origins.contains(origin) && scope.serves(client) {
            if injectionSkip(scope, method: method, origin: origin, pathAndQuery: pathAndQuery, override: methodOverride) == nil {
                names.formUnion(scope.substitute)
            }
        }
        return names
    }

    /// The secrets this request's injections render: those of the covering scopes that inject into
    /// it (same conditions as `apply`). A request that needs an access token waits for it first.
    public func injectedSecrets(
        method: String, origin: Origin, pathAndQuery: String, client: String?,
        chain: ChainContext = ChainContext()
    ) -> Set<String> {
        guard !chain.downgraded, !(method.utf8.count == 5 && method.uppercased() == "TRACE") else { return [] }
        var names: Set<String> = []
        for scope in scopes
        where !scope.inject.isEmpty && scope.origins.contains(origin) && scope.serves(client)
            && injectionSkip(scope, method: method, origin: origin, pathAndQuery: pathAndQuery) == nil
        {
            names.formUnion(scope.inject.flatMap(\.template.secretNames))
        }
        return names
    }

    /// The scope that signs this request (the first covering one with `sign:`, under the same
    /// conditions as its injection); nil when none does.
    public func signingScope(
        method: String, origin: Origin, pathAndQuery: String, client: String?,
        chain: ChainContext = ChainContext(), methodOverride: MethodOverride = .none
    ) -> Scope? {
        guard !chain.downgraded, !(method.utf8.count == 5 && method.uppercased() == "TRACE") else { return nil }
        return scopes.first { scope in
            scope.signing != nil && scope.origins.contains(origin) && scope.serves(client)
                && injectionSkip(scope, method: method, origin: origin, pathAndQuery: pathAndQuery, override: methodOverride) == nil
        }
    }

    /// Whether some scope could substitute a placeholder for this origin and client (the body of a
    /// request there is read first when it is JSON or a form).
    public func substitutes(for origin: Origin, client: String?) -> Bool {
        scopes.contains { !$0.substitute.isEmpty && $0.origins.contains(origin) && $0.serves(client) }
    }

    /// The secrets the egress guard lets go to this origin: those its scopes (for this client)
    /// inject or substitute. Every other secret's value is refused there.
    public func secretsSent(to origin: Origin, client: String?) -> Set<String> {
        var names: Set<String> = []
        for scope in scopes where scope.origins.contains(origin) && scope.serves(client) { names.formUnion(scope.secretNames) }
        return names
    }

    /// The scopes covering the origin for this client as a bit set of their positions (nil beyond
    /// 64 scopes): a key for what is cached per scope set, made without allocating.
    public func coveringMask(_ origin: Origin, client: String?) -> UInt64? {
        coveringMask(origin) { $0.serves(client) }
    }

    /// The scopes covering the origin for any client, as a bit set (nil beyond 64 scopes): the
    /// response scrub masks what the origin is sent for anyone, since a value stored there for one
    /// client can be read back by another (docs/security-model.md, "Response scrub").
    public func coveringMaskForAnyClient(_ origin: Origin) -> UInt64? {
        coveringMask(origin) { _ in true }
    }

    private func coveringMask(_ origin: Origin, where included: (Scope) -> Bool) -> UInt64? {
        guard scopes.count <= 64 else { return nil }
        var mask: UInt64 = 0
        for (index, scope) in scopes.enumerated() where scope.origins.contains(origin) && included(scope) {
            mask |= 1 << UInt64(index)
        }
        return mask
    }

    /// The secrets the origin's scopes send to anyone (the response scrub's set, by name).
    public func secretsSentToAnyClient(_ origin: Origin) -> Set<String> {
        var names: Set<String> = []
        for scope in scopes where scope.origins.contains(origin) { names.formUnion(scope.secretNames) }
        return names
    }

    /// The union of `names` over the scopes of a mask.
    public func secretNames(inMask mask: UInt64, _ names: (Scope) -> Set<String>) -> Set<String> {
        var union: Set<String> = []
        for (index, scope) in scopes.enumerated() where mask & (1 << UInt64(index)) != 0 { union.formUnion(names(scope)) }
        return union
    }

    func injectionApplies(
        _ scope: Scope, method: String, origin: Origin, pathAndQuery: String,
        override: MethodOverride = .none
    ) -> Bool {
        injectionSkip(scope, method: method, origin: origin, pathAndQuery: pathAndQuery, override: override) == nil
    }

    /// Why `scope` injects nothing into this request; nil when it injects.
    public func injectionSkip(
        _ scope: Scope, method: String, origin: Origin, pathAndQuery: String,
        override: MethodOverride = .none
    ) -> InjectionSkip? {
        // Loopback http (127/8, ::1, localhost) never leaves the host: it gets credentials without
        // `require_https: false` (a `require_https: true` scope listing an http origin is a config error).
        if scope.requireHTTPS && origin.scheme != .https && !origin.isLoopback { return .httpOrigin }
        if let methods = scope.methods {
            guard methods.contains(method.uppercased()) else { return .method }
            // Laravel, Symfony and Rails run the `_method` a form or query names: POST with
            // `_method=DELETE` is a DELETE to them, and must not ride a POST-only credential.
            switch override {
            case .none: break
            case .method(let overridden): if !methods.contains(overridden.uppercased()) { return .methodOverride }
            case .unreadable: return .methodOverride
            }
        }
        if let prefixes = scope.paths, !Self.isCovered(Self.path(of: pathAndQuery), byAnyOf: prefixes) { return .path }
        return nil
    }

    /// Whether the body must be read before the request can be scoped: a covering scope limits
    /// `methods:` and would inject into this request, and the body is a form, which may carry a
    /// `_method` override (`MethodOverride.detect`).
    public func needsBodyInspection(
        method: String, origin: Origin, pathAndQuery: String, contentType: String?,
        contentEncoding: String? = nil, client: String? = nil
    ) -> Bool {
        // An encoded body is not read: `MethodOverride.detect` calls it unreadable as it is.
        guard MethodOverride.isForm(contentType) || MethodOverride.isJSON(contentType),
            !MethodOverride.isEncoded(contentEncoding)
        else { return false }
        return covering(origin, client: client).contains { scope in
            scope.methods != nil && !scope.inject.isEmpty
                && injectionApplies(scope, method: method, origin: origin, pathAndQuery: pathAndQuery)
        }
    }

    /// Whether `path` lies under one of `prefixes`, in whole segments: `/v1` and `/v1/` both
    /// cover `/v1`, `/v1/` and `/v1/x`, never `/v1-admin` or `/v10`; `/` covers every path.
    /// Segments are compared as the origin's router would see them (see `routedSegments`).
    static func isCovered(_ path: String, byAnyOf prefixes: [String]) -> Bool {
        guard let segments = routedSegments(path) else { return false }
        return prefixes.contains { prefix in
            guard var wanted = routedSegments(prefix) else { return false }
            if wanted.last?.isEmpty == true { wanted.removeLast() }
            return segments.starts(with: wanted)
        }
    }

    /// A path's segments after what servers do before routing: `;parameters` removed (Tomcat,
    /// Jetty and Spring drop them, so `/v1/..;/admin` is served as `/admin`) and percent-decoded
    /// once (`/%76%31/x` is `/v1/x`). nil, meaning no credential, when a segment could still
    /// move the path on the origin's side: `.` or `..` (also as `%2e`, or before a `;` that
    /// decoding revealed), or one containing `/` or `\` (`..%2f`, `%5c`: separators to some
    /// servers), NUL (C servers end the path there), `%` (encoded twice, decoded again by some),
    /// or an invalid escape (servers disagree on it).
    static func routedSegments(_ path: String) -> [[UInt8]]? {
        let bytes = Array(path.utf8)
        guard bytes.first == UInt8(ascii: "/") else { return nil }
        var segments: [[UInt8]] = []
        for raw in bytes.dropFirst().split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false) {
            guard let decoded = percentDecoded(raw.prefix { $0 != UInt8(ascii: ";") }) else { return nil }
            let beforeParameters = decoded.prefix { $0 != UInt8(ascii: ";") }
            if beforeParameters.elementsEqual(".".utf8) || beforeParameters.elementsEqual("..".utf8) { return nil }
            if decoded.contains(where: { [UInt8(ascii: "/"), UInt8(ascii: "\\"), 0, UInt8(ascii: "%")].contains($0) }) { return nil }
            segments.append(decoded)
        }
        return segments
    }

    static func percentDecoded(_ bytes: ArraySlice<UInt8>) -> [UInt8]? {
        func hexValue(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var output: [UInt8] = []
        var index = bytes.startIndex
        while index < bytes.endIndex {
            if bytes[index] == UInt8(ascii: "%") {
                guard index + 2 < bytes.endIndex, let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2]) else { return nil }
                output.append(high << 4 | low)
                index += 3
            } else {
                output.append(bytes[index])
                index += 1
            }
        }
        return output
    }

    static func path(of pathAndQuery: String) -> String {
        if let question = pathAndQuery.firstIndex(of: "?") { return String(pathAndQuery[..<question]) }
        return pathAndQuery
    }
}

/// One way a scope puts a credential on a request. An OAuth2 access token is an `inject` whose
/// template names an `oauth2:` secret.
public enum CredentialAction: Sendable, Equatable {
    /// A header rendered from a template (`inject:`).
    case inject(Scope.Injection)
    /// A request signature (`sign:`).
    case sign(SigningSpec)
    /// The placeholders of a secret replaced by its value (`substitute:`).
    case substitute(String)

    /// The secrets whose values this action puts on the wire. A signature carries the access key
    /// id and the session token, never the secret key (it only keys the HMAC).
    public var sentSecretNames: [String] {
        switch self {
        case .inject(let injection): injection.template.secretNames
        case .sign(let spec): spec.sentSecretNames
        case .substitute(let secret): [secret]
        }
    }

    /// The proxy adds the credential itself (inject, sign), rather than swapping one the client sent.
    public var isInjection: Bool {
        switch self {
        case .inject, .sign: true
        case .substitute: false
        }
    }
}
