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

/// One upstream request of an exchange, complete: where it goes, what the scope rules did, and the
/// exact head that goes on the wire. Immutable, and a class so that the exchange machine's reads of
/// the current hop share one object (as a struct, each read copied its twenty-odd fields).
public final class Hop: Sendable {
    public let target: HopTarget
    public let decision: ScopeDecision
    /// The serialized head sent upstream (kept whole so a stale pooled connection can be retried).
    public let head: [UInt8]
    /// The same head before serialization (the record's `upstreamRequest`); nil for a tunnel.
    public let upstreamHead: RequestHead?
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
    /// A WebSocket upgrade whose frames the proxy reads after the 101 (nil: spliced unread, or no upgrade).
    public let webSocket: WebSocketFramePlan?
    /// The egress policy let this hop's destination through by name; the connect checks each
    /// address it resolves to against the same rules (docs/egress.md).
    public let egress: EgressClearance

    public init(
        target: HopTarget, egress: EgressClearance, decision: ScopeDecision, head: [UInt8], upstreamHead: RequestHead? = nil, body: HopBody,
        outgoingBody: [UInt8]? = nil, isUpgrade: Bool, substituted: [String] = [], scrub: SecretWatch? = nil, bodyGuard: SecretWatch? = nil,
        signed: String? = nil, scrubScopes: UInt64 = 0, scrubNames: Set<String> = [],
        placeholderRequest: PlaceholderRequest? = nil, webSocket: WebSocketFramePlan? = nil
    ) {
        self.placeholderRequest = placeholderRequest
        self.webSocket = webSocket
        self.egress = egress
        self.signed = signed
        self.scrubScopes = scrubScopes
        self.scrubNames = scrubNames
        self.target = target
        self.decision = decision
        self.head = head
        self.upstreamHead = upstreamHead
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
        // Every hop (the client's request, a followed redirect, a request inside an intercepted
        // tunnel) is planned here, so none reaches a destination the egress policy denies.
        let egress: EgressClearance
        if request.viaRoute, target.origin == request.origin {
            // A route's upstream is configured, not chosen by the client: not subject to egress.
            egress = .configuredUpstream
        } else {
            switch EgressClearance.clear(target.origin, client: request.client, scope: scope) {
            case .success(let clearance): egress = clearance
            case .failure(let error): return .failure(error)
            }
        }
        var planning = Planning(request, to: target, body: body, chain: chain, scope: scope, tokens: tokens)
        do throws(ProxyError) {
            try planning.substitutePlaceholders()
            try planning.applyScopes(requestID: requestID)
            try planning.sign(wallClock: wallClock)
            planning.keepWebSocketFramesReadable()
            let upstreamHead = planning.upstreamHead()
            let head = upstreamHead.serialized()
            let watch = try planning.guardEgress(head)
            return .success(
                planning.hop(head: head, upstreamHead: upstreamHead, scrub: planning.responseScrub(chain: chain), egressWatch: watch, egress: egress))
        } catch {
            return .failure(error)
        }
    }

    /// One hop being planned: the request's facts, and what each step has made of it so far.
    struct Planning {
        let request: ClientRequest
        let target: HopTarget
        let body: HopBody
        let scope: ScopeContext
        /// The store's secrets, with the exchange's access tokens (`oauth2:` secrets) on top.
        let secrets: any SecretLookup
        /// What this hop may carry (`RedirectChain.context(forHopTo:of:)`).
        let chainContext: ChainContext
        let override: MethodOverride
        var client: String? { request.client.name }
        /// The client's body when it is in memory (a replay, or read before planning).
        let replayed: [UInt8]?

        // What the steps make.
        var fields: HTTPFields
        var pathAndQuery: String
        var outgoingBody: [UInt8]?
        /// Fields whose values a substitution wrote (the scope rules trust them as the proxy's own).
        var vouched: Set<Int> = []
        var substituted: [String] = []
        /// The secrets whose placeholders this hop replaces (also in WebSocket frames).
        var substitutable: Set<String> = []
        var outgoing: RequestHead
        var decision = ScopeDecision()
        var signed: String?

        init(
            _ request: ClientRequest, to target: HopTarget, body: HopBody, chain: RedirectChain, scope: ScopeContext,
            tokens: [String: SecretValue]
        ) {
            self.request = request
            self.target = target
            self.body = body
            self.scope = scope
            secrets = tokens.isEmpty ? scope.secrets : TokenOverlay(base: scope.secrets, tokens: tokens)
            chainContext = chain.context(forHopTo: target, of: request)
            var replayed: [UInt8]?
            if case .replayed(let bytes) = body { replayed = bytes }
            self.replayed = replayed
            let hasBody: Bool =
                switch body {
                case .none: false
                case .streamed: true
                case .replayed(let bytes): !bytes.isEmpty
                }
            override = MethodOverride.detect(
                pathAndQuery: target.pathAndQuery, body: replayed,
                contentType: request.head.fields.singleValue(of: "content-type").agreed,
                contentEncoding: request.head.fields.listMembers("content-encoding").joined(separator: ","),
                hasBody: hasBody)
            fields = request.head.fields
            pathAndQuery = target.pathAndQuery
            outgoingBody = replayed
            outgoing = request.head
        }

        /// The request facts a placeholder refusal explains itself with: built only when one is
        /// refused, or when a streamed body may still refuse one (a request that is not refused
        /// pays no allocation for them).
        func placeholderFacts() -> PlaceholderRequest {
            PlaceholderRequest(
                method: target.method, pathAndQuery: target.pathAndQuery, chain: chainContext, methodOverride: override,
                contentType: request.head.fields.singleValue(of: "content-type").agreed,
                contentEncoding: request.head.fields.listMembers("content-encoding").filter { $0 != "identity" }.first)
        }

        func refusal(_ secret: String, inBody: Bool) -> PlaceholderRefusal {
            scope.policy.placeholderRefusal(secret: secret, origin: target.origin, client: client, request: placeholderFacts(), inBody: inBody)
        }

        // MARK: Step 1: substitute

        /// Placeholders first: replaced where this origin's scopes substitute them, refused anywhere else.
        mutating func substitutePlaceholders() throws(ProxyError) {
            guard !scope.values.placeholders.isEmpty else { return }
            let names = scope.policy.substitutable(
                method: target.method, origin: target.origin, pathAndQuery: target.pathAndQuery,
                client: client, chain: chainContext, methodOverride: override)
            substitutable = names
            guard let substitution = PlaceholderSubstitution(index: scope.values, substitutable: names, secrets: secrets) else { return }
            // A client may not make the proxy build a head over the size it accepts from clients,
            // nor a body far over the one it reads (a long value times many placeholders).
            var headBudget = HopPlanner.maxSubstitutedHead
            if let rewritten = try substitute(Array(pathAndQuery.utf8), at: .target, substitution, headBudget: &headBudget) {
                pathAndQuery = String(decoding: rewritten, as: UTF8.self)
            }
            var rewrittenFields = HTTPFields()
            rewrittenFields.reserveCapacity(fields.count)
            for field in fields {
                if let rewritten = try substitute(
                    HTTPField.wireBytes(of: field.value), at: .header(field.name), substitution,
                    headBudget: &headBudget)
                {
                    vouched.insert(rewrittenFields.count)
                    rewrittenFields.append(name: field.name, value: HTTPField.value(wireBytes: rewritten))
                } else {
                    rewrittenFields.append(name: field.name, value: field.value)
                }
            }
            fields = rewrittenFields
            if let bytes = replayed, !bytes.isEmpty {
                // Only JSON and forms are rewritten (escaped for their syntax); a placeholder in
                // any other body is refused by `rewrite` finding it at a site it cannot serve.
                let site = PlaceholderSite.body(of: fields)
                if let rewritten = try substitute(bytes, at: site ?? .jsonBody, substitution, headBudget: &headBudget) {
                    guard site != nil else {
                        let secret = substituted.last ?? ""
                        throw .placeholderOutOfScope(secret: secret, where: "body", target.origin, refusal(secret, inBody: true))
                    }
                    outgoingBody = rewritten
                }
            }
        }

        /// One site's bytes with their placeholders replaced; nil when unchanged.
        private mutating func substitute(
            _ bytes: [UInt8], at site: PlaceholderSite, _ substitution: PlaceholderSubstitution,
            headBudget: inout Int
        ) throws(ProxyError) -> [UInt8]? {
            let isBody = site == .jsonBody || site == .formBody
            let limit = isBody ? HopPlanner.maxSubstitutedBodyOutput : headBudget
            let outcome = substitution.rewrite(bytes, at: site, limit: limit)
            if !isBody {
                if case .rewritten(let rewritten, _) = outcome { headBudget -= rewritten.count } else { headBudget -= bytes.count }
            }
            switch outcome {
            case .tooLarge:
                throw isBody ? .bodyTooLargeToInspect(limit: HopPlanner.maxSubstitutedBodyOutput) : .headTooLarge
            case .unchanged:
                return nil
            case .rewritten(let rewritten, let secrets):
                for secret in secrets where !substituted.contains(secret) { substituted.append(secret) }
                return rewritten
            case .refused(let secret):
                throw .placeholderOutOfScope(secret: secret, where: site.label, target.origin, refusal(secret, inBody: isBody))
            case .unavailable(let secret):
                let owner = scope.policy.covering(target.origin, client: client).first { $0.substitute.contains(secret) }
                throw .credentialUnavailable(scope: owner?.name ?? "substitute", secret: secret)
            }
        }

        // MARK: Step 2: scope

        /// The scope rules: client credentials stripped or passed, the scopes' headers injected.
        mutating func applyScopes(requestID: String) throws(ProxyError) {
            let scoped: ScopedRequest
            switch scope.policy.apply(
                method: target.method, origin: target.origin, pathAndQuery: target.pathAndQuery,
                fields: fields, hasUserinfo: request.userinfo != nil,
                secrets: secrets, chain: chainContext, methodOverride: override,
                client: client, vouched: vouched)
            {
            case .failure(.secretUnavailable(let scopeName, let secret)):
                throw .credentialUnavailable(scope: scopeName, secret: secret)
            case .success(let result):
                scoped = result
            }
            decision = scoped.decision
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
                outgoing.fields.append(
                    name: "Authorization",
                    value: "Basic " + Base64.encode(PercentEncoding.decode(Substring(userinfo))))
            }
            if scope.protection.scrub == .strict, !scoped.decision.scopes.isEmpty {
                // A compressed body cannot be scanned in flight: ask scoped origins for identity.
                outgoing.fields.set(name: "Accept-Encoding", value: "identity")
            }
        }

        // MARK: Step 3: sign

        /// A scope that signs this request (`sign:`) computes its credential over the scoped head.
        mutating func sign(wallClock: Int64) throws(ProxyError) {
            guard
                let signer = scope.policy.signingScope(
                    method: target.method, origin: target.origin, pathAndQuery: target.pathAndQuery,
                    client: client, chain: chainContext, methodOverride: override),
                let signing = signer.signing
            else { return }
            try HopPlanner.sign(
                &outgoing, pathAndQuery: &pathAndQuery, origin: target.origin, body: body, outgoingBody: outgoingBody,
                scope: signer, spec: signing, secrets: secrets, wallClock: wallClock
            ).get()
            signed = signing.kind
            if !decision.injected.contains(where: { $0.lowercased() == "authorization" }) { decision.injected.append("Authorization") }
        }

        // MARK: Step 3b: WebSocket frames

        /// A WebSocket upgrade's frames are read (guarded, substituted, scrubbed) for an origin a
        /// scope covers, and for every origin while the guard is on (docs/security-model.md).
        var readsWebSocketFrames: Bool {
            guard request.isUpgrade else { return false }
            return scope.protection.guardMode == .on || !scope.policy.covering(target.origin, client: client).isEmpty
        }

        /// Frames the proxy reads must be readable: a compressed or otherwise extended payload
        /// (`permessage-deflate`, RFC 7692) could carry a value the guard cannot see, so no
        /// extension is offered to the origin (RFC 6455 §9.1: the client then speaks plain frames).
        mutating func keepWebSocketFramesReadable() {
            guard readsWebSocketFrames else { return }
            outgoing.fields.removeAll("sec-websocket-extensions")
        }

        /// What the frames are read with: the head's guard watch for client frames (values this
        /// origin may not receive, every placeholder), the placeholders this hop replaces, the scrub.
        func webSocketPlan(egress: SecretWatch?, scrub: SecretWatch?) -> WebSocketFramePlan? {
            guard readsWebSocketFrames else { return nil }
            var substitutions: [String: WebSocketFramePlan.Substitution] = [:]
            for name in substitutable {
                // A secret without a value now is not replaced: its placeholder is refused like any other.
                guard let text = scope.values.placeholders.texts[name], let value = secrets.value(of: name) else { continue }
                substitutions[name] = .init(placeholder: Array(text.utf8), value: value.exposedBytes)
            }
            var refusals: [String: PlaceholderRefusal] = [:]
            for name in scope.values.placeholders.texts.keys where substitutions[name] == nil {
                refusals[name] = refusal(name, inBody: true)
            }
            return WebSocketFramePlan(
                egress: egress, substitutions: substitutions, scrub: scrub, origin: target.origin, refusals: refusals)
        }

        /// The head exactly as it goes on the wire (serialized by the caller).
        func upstreamHead() -> RequestHead {
            let framing: BodyFraming =
                switch body {
                case .none: .none
                case .streamed(let framing): framing
                case .replayed: (outgoingBody ?? []).isEmpty ? .none : .contentLength(UInt64(outgoingBody!.count))
                }
            return Forwarding.upstreamRequest(
                from: outgoing, origin: target.origin, pathAndQuery: pathAndQuery,
                framing: framing, upgrade: request.isUpgrade)
        }

        // MARK: Step 4: guard

        /// The egress guard: the head (and a body in memory) must carry no value of a secret this
        /// origin's scopes do not send, and no placeholder left unreplaced. Nothing was sent yet.
        /// Returns the watch, for a body that streams.
        func guardEgress(_ head: [UInt8]) throws(ProxyError) -> SecretWatch? {
            let policy = scope.policy
            let client = client
            let origin = target.origin
            let watch = scope.values.guardWatch(
                allowedKey: policy.coveringMask(origin, client: client).map { .scopes($0) }
                    ?? .names(policy.secretsSent(to: origin, client: client).sorted()),
                allowed: { policy.secretsSent(to: origin, client: client) }, values: scope.protection.guardMode == .on,
                placeholders: true)
            guard let watch else { return nil }
            if let match = watch.firstMatch(in: head) {
                throw HopPlanner.blocked(
                    watch.finding(match), where: HopPlanner.site(of: match, in: head), origin, policy,
                    client: client, request: placeholderFacts())
            }
            if let outgoingBody, let match = watch.firstMatch(in: outgoingBody) {
                throw HopPlanner.blocked(watch.finding(match), where: "body", origin, policy, client: client, request: placeholderFacts())
            }
            return watch
        }

        // MARK: Step 5: scrub

        /// What the response scrub masks. Every secret this origin's scopes send, for any client (a
        /// value written through an API for one client comes back in another's read, whether or not
        /// this request got it), and those of the chain's earlier hops. One watch per scope set: a
        /// client cannot make the proxy build more.
        func responseScrub(chain: RedirectChain) -> (watch: SecretWatch?, scopes: UInt64, names: Set<String>) {
            guard scope.protection.scrub != .off else { return (nil, 0, []) }
            let policy = scope.policy
            // What the proxy sends this origin by itself (a token endpoint), or sent it under the
            // configuration before a reload: masked too, for any client.
            let extra = scope.values.extraScrubNames(for: target.origin)
            if let mask = policy.coveringMaskForAnyClient(target.origin), chain.scrubNames.isEmpty, extra.isEmpty {
                let scopes = mask | chain.scrubScopes
                guard scopes != 0 else { return (nil, 0, []) }
                return (
                    scope.values.scrubWatch(key: .scopes(scopes), secrets: { policy.secretNames(inMask: scopes, \.secretNames) }),
                    scopes, []
                )
            }
            let names = policy.secretsSentToAnyClient(target.origin).union(extra)
                .union(chain.scrubNames).union(policy.secretNames(inMask: chain.scrubScopes, \.secretNames))
            return (scope.values.scrubWatch(names), 0, names)
        }

        func hop(
            head: [UInt8], upstreamHead: RequestHead, scrub: (watch: SecretWatch?, scopes: UInt64, names: Set<String>), egressWatch: SecretWatch?,
            egress: EgressClearance
        ) -> Hop {
            var streamedGuard: SecretWatch?
            if case .streamed = body { streamedGuard = egressWatch }
            return Hop(
                target: target, egress: egress, decision: decision, head: head, upstreamHead: upstreamHead, body: body,
                outgoingBody: outgoingBody,
                isUpgrade: request.isUpgrade, substituted: substituted, scrub: scrub.watch, bodyGuard: streamedGuard,
                signed: signed, scrubScopes: scrub.scopes, scrubNames: scrub.names,
                placeholderRequest: streamedGuard == nil && !readsWebSocketFrames ? nil : placeholderFacts(),
                webSocket: webSocketPlan(egress: egressWatch, scrub: scrub.watch))
        }
    }

    /// A signature for a hop, by kind: every kind is a case here, so a new one does not compile
    /// until it says how it signs (it can never sign nothing silently).
    static func sign(
        _ outgoing: inout RequestHead, pathAndQuery: inout String, origin: Origin, body: HopBody,
        outgoingBody: [UInt8]?, scope: Scope, spec: SigningSpec, secrets: any SecretLookup,
        wallClock: Int64
    ) -> Result<Void, ProxyError> {
        switch spec {
        case .awsSigV4(let aws):
            signAWSSigV4(
                &outgoing, pathAndQuery: &pathAndQuery, origin: origin, body: body, outgoingBody: outgoingBody,
                scope: scope, spec: aws, secrets: secrets, wallClock: wallClock)
        }
    }

    /// AWS SigV4 for a hop: the client's own signing fields go, the signature's come, and the query
    /// goes out in its canonical form (what was signed is exactly what the origin reads, `+` included).
    static func signAWSSigV4(
        _ outgoing: inout RequestHead, pathAndQuery: inout String, origin: Origin, body: HopBody,
        outgoingBody: [UInt8]?, scope: Scope, spec aws: AWSSigV4Spec, secrets: any SecretLookup,
        wallClock: Int64
    ) -> Result<Void, ProxyError> {
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
        if let chain = aws.chain {
            // The AWS chain's credentials are one computed value the exchange obtained before planning.
            guard let packed = secrets.value(of: chain.secretName), let credentials = AWSTemporaryCredentials(packed: packed) else {
                return .failure(.credentialUnavailable(scope: scope.name, secret: chain.secretName))
            }
            AWSSigV4.removeClientSigningFields(from: &outgoing.fields)
            return signAWSSigV4(
                &outgoing, pathAndQuery: &pathAndQuery, origin: origin, scope: scope, spec: aws, payloadHash: payloadHash, wallClock: wallClock
            ) {
                () throws(AWSSigV4Error) in try credentials.signingCredentials()
            }
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
        return signAWSSigV4(
            &outgoing, pathAndQuery: &pathAndQuery, origin: origin, scope: scope, spec: aws, payloadHash: payloadHash, wallClock: wallClock
        ) {
            () throws(AWSSigV4Error) in
            try AWSCredentials(accessKeyID: keyID.exposedBytes, secretAccessKey: secretKey.exposedBytes, sessionToken: token?.exposedBytes)
        }
    }

    /// Signs with `credentials` (made inside, so a malformed value is a typed signing failure).
    private static func signAWSSigV4(
        _ outgoing: inout RequestHead, pathAndQuery: inout String, origin: Origin, scope: Scope, spec aws: AWSSigV4Spec,
        payloadHash: String, wallClock: Int64, credentials: () throws(AWSSigV4Error) -> AWSCredentials
    ) -> Result<Void, ProxyError> {
        let path = String(pathAndQuery.prefix { $0 != "?" })
        let query = pathAndQuery.firstIndex(of: "?").map { String(pathAndQuery[pathAndQuery.index(after: $0)...]) } ?? ""
        do {
            let signer = try AWSSigV4Signer(service: aws.service, region: aws.region, credentials: try credentials())
            let signature = try signer.sign(
                AWSSigV4Request(
                    method: outgoing.method, authority: origin.authority, path: path,
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

    static func blocked(
        _ finding: SecretFinding, where site: String, _ origin: Origin, _ policy: ScopePolicy, client: String?,
        request: PlaceholderRequest
    ) -> ProxyError {
        finding.isPlaceholder
            ? .placeholderOutOfScope(
                secret: finding.secret, where: site, origin,
                policy.placeholderRefusal(
                    secret: finding.secret, origin: origin, client: client,
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
