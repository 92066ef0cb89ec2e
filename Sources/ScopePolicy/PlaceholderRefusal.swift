import HTTP1Codec

/// Why a placeholder was refused at an origin (the 403 `placeholder_out_of_scope` message). One
/// case per rule that can decide, so the message names the rule that failed, never a guess.
public enum PlaceholderRefusal: Sendable, Equatable {
    /// No scope lists the secret in `substitute` for this origin.
    case notListed
    /// Scopes list it for this origin, but none of them serves this client (`clients:`); `client`
    /// is the configured client's name as the log's `client_id` shows it, nil when none was recognised.
    case clientNotServed(scopes: [String], client: String?)
    /// The scopes serving this client list it, but each skips this request: its `methods`, `paths`
    /// or https rule, a TRACE, or an https -> http redirect (one entry per scope).
    case requestNotCovered([SkippedInjection])
    /// A scope substitutes it in this request, but it lies in a body whose media type the proxy
    /// does not rewrite (only JSON and form bodies are); `contentType` nil when none was sent.
    case bodyNotRewritten(scopes: [String], contentType: String?)
    /// A scope substitutes it in this request, but the body is encoded (`Content-Encoding`), so
    /// its placeholders cannot be replaced.
    case bodyEncoded(scopes: [String], contentEncoding: String)
    /// A scope substitutes it in this request, but the placeholder itself was sent encoded (base64
    /// outside `Authorization: Basic`, percent-encoded): only its plain form is replaced.
    case placeholderEncoded(scopes: [String], encoding: String)
}

/// The request facts a placeholder refusal is decided on (kept with the hop, so a placeholder
/// found in a streamed body later is explained by the same rules).
public struct PlaceholderRequest: Sendable, Equatable {
    public var method: String
    public var pathAndQuery: String
    public var chain: ChainContext
    public var methodOverride: MethodOverride
    /// The body's Content-Type and Content-Encoding (nil when absent).
    public var contentType: String?
    public var contentEncoding: String?

    public init(
        method: String, pathAndQuery: String, chain: ChainContext = ChainContext(), methodOverride: MethodOverride = .none,
        contentType: String? = nil, contentEncoding: String? = nil
    ) {
        self.method = method
        self.pathAndQuery = pathAndQuery
        self.chain = chain
        self.methodOverride = methodOverride
        self.contentType = contentType
        self.contentEncoding = contentEncoding
    }
}

extension ScopePolicy {
    /// Why the placeholder of `secret` is not substituted in `request` to `origin` from `client`
    /// (the configured client's name, nil when none was recognised), found `inBody` or in the
    /// head. Each rule `substitutable` applies is asked in turn, so the answer is the rule that
    /// decided: a scope that lists the secret is never reported as absent, nor a body the proxy
    /// does not rewrite as a methods/paths limit.
    public func placeholderRefusal(
        secret: String, origin: Origin, client: String?,
        request: PlaceholderRequest, inBody: Bool, encodedAs: String? = nil
    ) -> PlaceholderRefusal {
        let listing = scopes.filter { $0.substitute.contains(secret) && $0.origins.contains(origin) }
        if listing.isEmpty { return .notListed }
        let serving = listing.filter { $0.serves(client) }
        if serving.isEmpty { return .clientNotServed(scopes: listing.map(\.name), client: client) }
        if request.chain.downgraded { return .requestNotCovered(serving.map { SkippedInjection(scope: $0.name, why: .httpsDowngrade) }) }
        if request.method.utf8.count == 5 && request.method.uppercased() == "TRACE" {
            return .requestNotCovered(serving.map { SkippedInjection(scope: $0.name, why: .trace) })
        }
        var skipped: [SkippedInjection] = []
        var substituting: [String] = []
        for scope in serving {
            if let why = injectionSkip(
                scope, method: request.method, origin: origin, pathAndQuery: request.pathAndQuery,
                override: request.methodOverride)
            {
                skipped.append(SkippedInjection(scope: scope.name, why: why))
            } else {
                substituting.append(scope.name)
            }
        }
        // A scope substitutes it in this request: what failed is the place it was found in.
        if !substituting.isEmpty, let encodedAs { return .placeholderEncoded(scopes: substituting, encoding: encodedAs) }
        if !substituting.isEmpty && inBody {
            if let coding = request.contentEncoding, !coding.isEmpty, coding.lowercased() != "identity" {
                return .bodyEncoded(scopes: substituting, contentEncoding: coding)
            }
            return .bodyNotRewritten(scopes: substituting, contentType: request.contentType)
        }
        return .requestNotCovered(skipped)
    }
}
