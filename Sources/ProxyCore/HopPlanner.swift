import AWSSigV4
import HTTP1Codec
import ScopePolicy
import SecretScan

/// How a hop's request body gets upstream.
public enum HopBody: Sendable, Equatable {
    case none
    /// Read from the client as it arrives, decoded and re-framed.
    case streamed(BodyFraming)
    /// A followed 307/308 (or 301/302 of a non-POST), or a body read before planning: the body the
    /// client sent, kept in memory (as the client sent it: placeholders are replaced per hop).
    case replayed([UInt8])
}

/// Where a hop goes: the client's own target, or a redirect's.
public struct HopTarget: Sendable, Equatable {
    public var origin: Origin
    public var method: String
    public var pathAndQuery: String

    public init(origin: Origin, method: String, pathAndQuery: String) {
        self.origin = origin
        self.method = method
        self.pathAndQuery = pathAndQuery
    }
}

/// The redirects the proxy followed for one client request so far.
public struct RedirectChain: Sendable, Equatable {
    public var hops = 0
    /// The scopes (bit set, `ScopePolicy.coveringMask`) whose secrets earlier hops of the chain
    /// may have sent: the scrub of every later hop masks them too (an origin's redirect can carry a
    /// value into the next hop's target, which echoes it).
    public var scrubScopes: UInt64 = 0
    /// The same, by name, when the config has more than 64 scopes.
    public var scrubNames: Set<String> = []
    /// What the scope rules must remember across hops (stripped names, downgrade, whose credentials).
    public var context = ChainContext()

    public init() {}
}

/// One upstream request of an exchange, complete: where it goes, what the scope rules did, and the
/// exact head that goes on the wire.
public struct Hop: Sendable, Equatable {
    public let target: HopTarget
    public let decision: ScopeDecision
    /// The serialized head sent upstream (kept whole so a stale pooled connection can be retried).
    public let head: [UInt8]
    public let body: HopBody
    /// A body held in memory as it goes upstream (placeholders replaced); `body` keeps the
    /// client's bytes for a replay to the next hop.
    public let outgoingBody: [UInt8]?
    /// `Connection: upgrade` request: a 101 turns the exchange into a tunnel.
    public let isUpgrade: Bool
    /// Secrets whose placeholders were replaced by their values in this hop.
    public let substituted: [String]
    /// What the response scrub masks (values this hop sent), if anything.
    public let scrub: SecretWatch?
    /// What the egress guard looks for in a streamed body (values and placeholders this origin may
    /// not receive), if anything.
    public let bodyGuard: SecretWatch?
    /// The signature this hop carries (`aws_sigv4`), if a scope signed it.
    public let signed: String?
    /// What this hop's scrub covers (for the next hop of a followed chain).
    public let scrubScopes: UInt64
    public let scrubNames: Set<String>
    /// The facts a placeholder found later in the streamed body is refused on.
    public let placeholderRequest: PlaceholderRequest?

    public init(target: HopTarget, decision: ScopeDecision, head: [UInt8], body: HopBody, outgoingBody: [UInt8]? = nil,
                isUpgrade: Bool, substituted: [String] = [], scrub: SecretWatch? = nil, bodyGuard: SecretWatch? = nil,
                signed: String? = nil, scrubScopes: UInt64 = 0, scrubNames: Set<String> = [],
                placeholderRequest: PlaceholderRequest? = nil) {
        self.placeholderRequest = placeholderRequest
        self.signed = signed
        self.scrubScopes = scrubScopes
        self.scrubNames = scrubNames
        self.target = target
        self.decision = decision
        self.head = head
        self.body = body
        self.outgoingBody = outgoingBody
        self.isUpgrade = isUpgrade
        self.substituted = substituted
        self.scrub = scrub
        self.bodyGuard = bodyGuard
    }

    public var origin: Origin { target.origin }
}

/// Hop planning: the scope decision and the upstream head, for the client's request or for one hop
/// of a redirect chain the proxy follows. The step where credentials are stripped, injected or
/// substituted, and where the egress guard reads the head before anything is sent.
public enum HopPlanner {
    /// `wallClock`: seconds since 1970 (UTC), the time a signature is made at.
    public static func plan(
        _ request: ClientRequest, to target: HopTarget, body: HopBody, chain: RedirectChain, scope: ScopeContext,
        requestID: String, wallClock: Int64, tokens: [String: SecretValue] = [:]
    ) -> Result<Hop, ProxyError> {
        // Access tokens the exchange obtained (`oauth2:` secrets) render like any secret.
        let secrets: any SecretLookup = tokens.isEmpty ? scope.secrets : TokenOverlay(base: scope.secrets, tokens: tokens)
        var chainContext = chain.context
        // A client's credentials were meant for the origin it addressed (docs/security-model.md, "Redirects").
        if target.origin != request.origin { chainContext.clientCredentialsAllowed = false }
        var replayed: [UInt8]?
        if case .replayed(let bytes) = body { replayed = bytes }
        let hasBody: Bool = switch body {
        case .none: false
        case .streamed: true
        case .replayed(let bytes): !bytes.isEmpty
        }
        let override = MethodOverride.detect(pathAndQuery: target.pathAndQuery, body: replayed,
                                             contentType: request.head.fields.singleValue(of: "content-type").agreed,
                                             contentEncoding: request.head.fields.listMembers("content-encoding").joined(separator: ","),
                                             hasBody: hasBody)
        let client = request.client.name
        // The request facts a placeholder refusal explains itself with: built only when one is
        // refused, or when a streamed body may still refuse one (a request that is not refused
        // pays no allocation for them).
        func placeholderFacts() -> PlaceholderRequest {
            PlaceholderRequest(
                method: target.method, pathAndQuery: target.pathAndQuery, chain: chainContext, methodOverride: override,
                contentType: request.head.fields.singleValue(of: "content-type").agreed,
                contentEncoding: request.head.fields.listMembers("content-encoding").filter { $0 != "identity" }.first)
        }
        func refusal(_ secret: String, inBody: Bool) -> PlaceholderRefusal {
            scope.policy.placeholderRefusal(secret: secret, origin: target.origin, client: client, request: placeholderFacts(), inBody: inBody)
        }

        // Placeholders first: replaced where this origin's scopes substitute them, refused anywhere else.
        var fields = request.head.fields
        var pathAndQuery = target.pathAndQuery
        var outgoingBody = replayed
        var vouched: Set<Int> = []
        var substituted: [String] = []
        if !scope.values.placeholders.isEmpty {
            let names = scope.policy.substitutable(method: target.method, origin: target.origin, pathAndQuery: target.pathAndQuery,
                                                   client: client, chain: chainContext, methodOverride: override)
            if let substitution = PlaceholderSubstitution(index: scope.values, substitutable: names, secrets: secrets) {
                // A client may not make the proxy build a head over the size it accepts from clients,
                // nor a body far over the one it reads (a long value times many placeholders).
                var headBudget = Self.maxSubstitutedHead
                func apply(_ bytes: [UInt8], _ site: PlaceholderSite) -> Result<[UInt8]?, ProxyError> {
                    let isBody = site == .jsonBody || site == .formBody
                    let limit = isBody ? Self.maxSubstitutedBodyOutput : headBudget
                    let outcome = substitution.rewrite(bytes, at: site, limit: limit)
                    if !isBody {
                        if case .rewritten(let rewritten, _) = outcome { headBudget -= rewritten.count } else { headBudget -= bytes.count }
                    }
                    switch outcome {
                    case .tooLarge:
                        return .failure(isBody ? .bodyTooLargeToInspect(limit: Self.maxSubstitutedBodyOutput) : .headTooLarge)
                    case .unchanged:
                        return .success(nil)
                    case .rewritten(let rewritten, let secrets):
                        for secret in secrets where !substituted.contains(secret) { substituted.append(secret) }
                        return .success(rewritten)
                    case .refused(let secret):
                        return .failure(.placeholderOutOfScope(secret: secret, where: site.label, target.origin,
                                                               refusal(secret, inBody: isBody)))
                    case .unavailable(let secret):
                        let owner = scope.policy.covering(target.origin, client: client).first { $0.substitute.contains(secret) }
                        return .failure(.credentialUnavailable(scope: owner?.name ?? "substitute", secret: secret))
                    }
                }
                switch apply(Array(pathAndQuery.utf8), .target) {
                case .failure(let error): return .failure(error)
                case .success(let rewritten?): pathAndQuery = String(decoding: rewritten, as: UTF8.self)
                case .success(nil): break
                }
                var rewrittenFields = HTTPFields()
                rewrittenFields.reserveCapacity(fields.count)
                for field in fields {
                    switch apply(HTTPField.wireBytes(of: field.value), .header(field.name)) {
                    case .failure(let error): return .failure(error)
                    case .success(let rewritten?):
                        vouched.insert(rewrittenFields.count)
                        rewrittenFields.append(name: field.name, value: HTTPField.value(wireBytes: rewritten))
                    case .success(nil):
                        rewrittenFields.append(name: field.name, value: field.value)
                    }
                }
                fields = rewrittenFields
                if let bytes = replayed, !bytes.isEmpty {
                    // Only JSON and forms are rewritten (escaped for their syntax); a placeholder in
                    // any other body is refused by `rewrite` finding it at a site it cannot serve.
                    let site = PlaceholderSite.body(of: fields)
                    switch apply(bytes, site ?? .jsonBody) {
                    case .failure(let error): return .failure(error)
                    case .success(let rewritten?):
                        guard site != nil else {
                            let secret = substituted.last ?? ""
                            return .failure(.placeholderOutOfScope(secret: secret, where: "body", target.origin,
                                                                   refusal(secret, inBody: true)))
                        }
                        outgoingBody = rewritten
                    case .success(nil): break
                    }
                }
            }
        }

        let scoped: ScopedRequest
        switch scope.policy.apply(method: target.method, origin: target.origin, pathAndQuery: target.pathAndQuery,
                                  fields: fields, hasUserinfo: request.userinfo != nil,
                                  secrets: secrets, chain: chainContext, methodOverride: override,
                                  client: client, vouched: vouched) {
        case .failure(.secretUnavailable(let scopeName, let secret)):
            return .failure(.credentialUnavailable(scope: scopeName, secret: secret))
        case .success(let result):
            scoped = result
        }
        var outgoing = request.head
        outgoing.method = target.method
        outgoing.fields = scoped.fields
        if case .replayed(let bytes) = body, bytes.isEmpty, target.method != request.head.method {
            // A 303 (or a POST's 301/302) turned the request into a bodiless GET: its body's type goes too.
            outgoing.fields.removeAll("content-type")
            outgoing.fields.removeAll("content-length")
        }
        outgoing.fields.set(name: "X-Request-ID", value: requestID)
        if scoped.keepUserinfo, let userinfo = request.userinfo, !outgoing.fields.contains("authorization") {
            // Userinfo cannot travel in an origin-form target; a scope that passes Authorization gets
            // it the way clients send it.
            outgoing.fields.append(name: "Authorization",
                                   value: "Basic " + Base64.encode(PercentEncoding.decode(Substring(userinfo))))
        }
        if scope.protection.scrub == .strict, !scoped.decision.scopes.isEmpty {
            // A compressed body cannot be scanned in flight: ask scoped origins for identity.
            outgoing.fields.set(name: "Accept-Encoding", value: "identity")
        }
        var signed: String?
        if let signer = scope.policy.signingScope(method: target.method, origin: target.origin, pathAndQuery: target.pathAndQuery,
                                                  client: client, chain: chainContext, methodOverride: override),
           let signing = signer.signing {
            switch sign(&outgoing, pathAndQuery: &pathAndQuery, origin: target.origin, body: body, outgoingBody: outgoingBody,
                        scope: signer, spec: signing, secrets: secrets, wallClock: wallClock) {
            case .failure(let error): return .failure(error)
            case .success: signed = signing.kind
            }
        }
        let framing: BodyFraming = switch body {
        case .none: .none
        case .streamed(let framing): framing
        case .replayed: (outgoingBody ?? []).isEmpty ? .none : .contentLength(UInt64(outgoingBody!.count))
        }
        let head = Forwarding.upstreamRequest(from: outgoing, origin: target.origin, pathAndQuery: pathAndQuery,
                                              framing: framing, upgrade: request.isUpgrade).serialized()

        // The egress guard: the head (and a body in memory) must carry no value of a secret this
        // origin's scopes do not send, and no placeholder left unreplaced. Nothing was sent yet.
        let guarding = scope.protection.guardMode == .on
        let policy = scope.policy
        let watch = scope.values.guardWatch(
            allowedKey: policy.coveringMask(target.origin, client: client).map { .scopes($0) }
                ?? .names(policy.secretsSent(to: target.origin, client: client).sorted()),
            allowed: { policy.secretsSent(to: target.origin, client: client) }, values: guarding, placeholders: true)
        if let watch {
            if let match = watch.firstMatch(in: head) {
                return .failure(blocked(watch.finding(match), where: Self.site(of: match, in: head), target.origin, scope.policy, client: client,
                                        request: placeholderFacts()))
            }
            if let outgoingBody, let match = watch.firstMatch(in: outgoingBody) {
                return .failure(blocked(watch.finding(match), where: "body", target.origin, scope.policy, client: client,
                                        request: placeholderFacts()))
            }
        }
        var decision = scoped.decision
        if signed != nil, !decision.injected.contains(where: { $0.lowercased() == "authorization" }) {
            decision.injected.append("Authorization")
        }
        // The scrub masks every secret this origin's scopes send, for any client (a value written
        // through an API for one client comes back in another's read, whether or not this request
        // got it), and those of the chain's earlier hops. One watch per scope set: a client cannot
        // make the proxy build more.
        var scrub: SecretWatch?
        var scrubScopes: UInt64 = 0
        var scrubNames: Set<String> = []
        if scope.protection.scrub != .off {
            // What the proxy sends this origin by itself (a token endpoint), or sent it under the
            // configuration before a reload: masked too, for any client.
            let extra = scope.values.extraScrubNames(for: target.origin)
            if let mask = policy.coveringMaskForAnyClient(target.origin), chain.scrubNames.isEmpty, extra.isEmpty {
                scrubScopes = mask | chain.scrubScopes
                if scrubScopes != 0 {
                    let scopes = scrubScopes
                    scrub = scope.values.scrubWatch(key: .scopes(scopes), secrets: { policy.secretNames(inMask: scopes, \.secretNames) })
                }
            } else {
                scrubNames = policy.secretsSentToAnyClient(target.origin).union(extra)
                    .union(chain.scrubNames).union(policy.secretNames(inMask: chain.scrubScopes, \.secretNames))
                scrub = scope.values.scrubWatch(scrubNames)
            }
        }
        var streamedGuard: SecretWatch?
        if case .streamed = body { streamedGuard = watch }
        return .success(Hop(target: target, decision: decision, head: head, body: body, outgoingBody: outgoingBody,
                            isUpgrade: request.isUpgrade, substituted: substituted, scrub: scrub, bodyGuard: streamedGuard,
                            signed: signed, scrubScopes: scrubScopes, scrubNames: scrubNames,
                            placeholderRequest: streamedGuard == nil ? nil : placeholderFacts()))
    }

    /// AWS SigV4 for a hop: the client's own signing fields go, the signature's come, and the query
    /// goes out in its canonical form (what was signed is exactly what the origin reads, `+` included).
    static func sign(_ outgoing: inout RequestHead, pathAndQuery: inout String, origin: Origin, body: HopBody,
                     outgoingBody: [UInt8]?, scope: Scope, spec: SigningSpec, secrets: any SecretLookup,
                     wallClock: Int64) -> Result<Void, ProxyError> {
        guard case .awsSigV4(let aws) = spec else { return .success(()) }
        let payloadHash: String
        switch (aws.payloadHashing, body) {
        case (.unsignedPayload, _):
            payloadHash = AWSSigV4.unsignedPayload
        case (.hashBody, .streamed):
            // The machine reads a body it must hash before planning; one that streams was too large.
            return .failure(.bodyTooLargeToSign(scope: scope.name, limit: AWSSigV4Spec.maxHashedBodyBytes))
        case (.hashBody, .none), (.hashBody, .replayed):
            payloadHash = AWSSigV4.payloadHash(body: outgoingBody ?? [])
        }
        guard let keyID = secrets.value(of: aws.accessKeyIDSecret) else {
            return .failure(.credentialUnavailable(scope: scope.name, secret: aws.accessKeyIDSecret))
        }
        guard let secretKey = secrets.value(of: aws.secretAccessKeySecret) else {
            return .failure(.credentialUnavailable(scope: scope.name, secret: aws.secretAccessKeySecret))
        }
        var token: SecretValue?
        if let name = aws.sessionTokenSecret {
            guard let value = secrets.value(of: name) else { return .failure(.credentialUnavailable(scope: scope.name, secret: name)) }
            token = value
        }
        AWSSigV4.removeClientSigningFields(from: &outgoing.fields)
        let path = String(pathAndQuery.prefix { $0 != "?" })
        let query = pathAndQuery.firstIndex(of: "?").map { String(pathAndQuery[pathAndQuery.index(after: $0)...]) } ?? ""
        do {
            let credentials = try AWSCredentials(accessKeyID: keyID.exposedBytes, secretAccessKey: secretKey.exposedBytes,
                                                 sessionToken: token?.exposedBytes)
            let signer = try AWSSigV4Signer(service: aws.service, region: aws.region, credentials: credentials)
            let signature = try signer.sign(AWSSigV4Request(method: outgoing.method, authority: origin.authority, path: path,
                                                            query: query, fields: outgoing.fields, payloadHash: payloadHash),
                                            at: AWSSigV4Timestamp(secondsSinceEpoch: wallClock))
            for field in signature.fields { outgoing.fields.append(name: field.name, value: field.value) }
            pathAndQuery = signature.canonicalQuery.isEmpty ? path : path + "?" + signature.canonicalQuery
            return .success(())
        } catch {
            return .failure(.signingFailed(scope: scope.name, reason: error.description))
        }
    }

    /// The most a head may grow to by substitution (the codec's own head limit).
    static let maxSubstitutedHead = 64 * 1024
    /// The most a body may grow to by substitution.
    static let maxSubstitutedBodyOutput = 4 * 1024 * 1024

    static func blocked(_ finding: SecretFinding, where site: String, _ origin: Origin, _ policy: ScopePolicy, client: String?,
                        request: PlaceholderRequest) -> ProxyError {
        finding.isPlaceholder ? .placeholderOutOfScope(secret: finding.secret, where: site, origin,
                                                       policy.placeholderRefusal(secret: finding.secret, origin: origin, client: client,
                                                                                 request: request, inBody: site == "body",
                                                                                 encodedAs: finding.encoding == .raw ? nil : "\(finding.encoding)"))
            : .secretEgressBlocked(finding, where: site, origin)
    }

    /// "target" or "header NAME": the line of a serialized head a match lies in.
    static func site(of match: SecretMatch, in head: [UInt8]) -> String {
        let lineStart = head[..<match.range.lowerBound].lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? 0
        guard lineStart > 0 else { return "target" }
        let line = head[lineStart...].prefix { $0 != UInt8(ascii: ":") && $0 != UInt8(ascii: "\r") }
        return "header " + String(decoding: line, as: UTF8.self)
    }
}

/// The store's secrets with an exchange's access tokens on top.
struct TokenOverlay: SecretLookup {
    let base: any SecretLookup
    let tokens: [String: SecretValue]

    func value(of name: String) -> SecretValue? { tokens[name] ?? base.value(of: name) }
    var currentValues: [String: SecretValue] { base.currentValues.merging(tokens) { _, token in token } }
}
