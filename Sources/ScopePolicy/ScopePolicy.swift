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
    /// Lowercased header names the client may send to these origins.
    public let pass: Set<String>
    /// Uppercase methods injection is limited to; nil means every method.
    public let methods: Set<String>?
    /// Path prefixes injection is limited to; nil means every path.
    public let paths: [String]?

    public init(
        name: String, origins: Set<Origin>, requireHTTPS: Bool = true, inject: [Injection] = [],
        pass: Set<String> = [], methods: Set<String>? = nil, paths: [String]? = nil
    ) {
        self.name = name
        self.origins = origins
        self.requireHTTPS = requireHTTPS
        self.inject = inject
        self.pass = Set(pass.map { $0.lowercased() })
        self.methods = methods
        self.paths = paths
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
    }

    public var scopes: [String] = []
    public var injected: [String] = []
    public var stripped: [String] = []
    public var userinfoRemoved = false
    public var reason: Reason = .originNotInScope

    public init() {}
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

/// The credential scope rules of the contract, as a pure function of the request and the config.
public struct ScopePolicy: Sendable {
    public let scopes: [Scope]
    /// Lowercased: built-in plus configured.
    public let sensitiveHeaders: Set<String>

    public init(scopes: [Scope], extraSensitiveHeaders: [String] = []) {
        self.scopes = scopes
        sensitiveHeaders = SensitiveHeaders.builtIn.union(extraSensitiveHeaders.map { $0.lowercased() })
    }

    /// The embedded safe default: no scope, so every sensitive header is stripped everywhere.
    public static let stripEverything = ScopePolicy(scopes: [])

    public func covering(_ origin: Origin) -> [Scope] {
        scopes.filter { $0.origins.contains(origin) }
    }

    public func isSensitive(_ name: String) -> Bool {
        sensitiveHeaders.contains(name.lowercased())
    }

    /// Applies the scope rules to one request (or one hop of a followed redirect chain).
    public func apply(
        method: String, origin: Origin, pathAndQuery: String, fields: HTTPFields, hasUserinfo: Bool,
        secrets: any SecretLookup, chain: ChainContext = ChainContext()
    ) -> Result<ScopedRequest, ScopeError> {
        var decision = ScopeDecision()
        let covering = chain.downgraded ? [] : covering(origin)
        decision.scopes = covering.map(\.name)
        decision.reason = chain.downgraded ? .httpsDowngrade : (covering.isEmpty ? .originNotInScope : .originInScope)

        // Injected header names belong to the proxy: the client's value never passes under them.
        var injectedNames = Set<String>()
        for scope in covering { for injection in scope.inject { injectedNames.insert(injection.header.lowercased()) } }
        var passed = Set<String>()
        for scope in covering { passed.formUnion(scope.pass) }

        var output = HTTPFields()
        var stripped: [String] = []
        for field in fields {
            let name = field.name.lowercased()
            let sensitive = sensitiveHeaders.contains(name) || injectedNames.contains(name)
            let allowed = chain.clientCredentialsAllowed && passed.contains(name) && !chain.strippedByClientHeader.contains(name)
            if sensitive && !allowed {
                if !stripped.contains(where: { $0.lowercased() == name }) { stripped.append(field.name) }
                continue
            }
            output.append(name: field.name, value: field.value)
        }

        for scope in covering where injectionApplies(scope, method: method, origin: origin, pathAndQuery: pathAndQuery) {
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
        // An injected header replaced the client's: that is not a strip worth reporting.
        decision.stripped = stripped.filter { name in !decision.injected.contains { $0.lowercased() == name.lowercased() } }

        let keepUserinfo = hasUserinfo && chain.clientCredentialsAllowed && passed.contains("authorization")
            && !chain.strippedByClientHeader.contains("authorization")
        decision.userinfoRemoved = hasUserinfo && !keepUserinfo
        return .success(ScopedRequest(fields: output, keepUserinfo: keepUserinfo, decision: decision))
    }

    func injectionApplies(_ scope: Scope, method: String, origin: Origin, pathAndQuery: String) -> Bool {
        if scope.requireHTTPS && origin.scheme != .https { return false }
        if let methods = scope.methods, !methods.contains(method.uppercased()) { return false }
        if let prefixes = scope.paths {
            let path = Self.path(of: pathAndQuery)
            // Dot segments and encoded dots/slashes could walk out of an allowed prefix on the
            // origin's side (`/v1/../admin`): such paths never get credentials.
            guard !Self.hasAmbiguousSegments(path), prefixes.contains(where: { path.hasPrefix($0) }) else { return false }
        }
        return true
    }

    static func path(of pathAndQuery: String) -> String {
        if let question = pathAndQuery.firstIndex(of: "?") { return String(pathAndQuery[..<question]) }
        return pathAndQuery
    }

    static func hasAmbiguousSegments(_ path: String) -> Bool {
        let lower = path.lowercased()
        if lower.contains("%2e") || lower.contains("%2f") || lower.contains("%5c") || lower.contains("\\") { return true }
        return path.split(separator: "/", omittingEmptySubsequences: false).contains { $0 == "." || $0 == ".." }
    }
}
