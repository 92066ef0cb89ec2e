import HTTP1Codec
import ScopePolicy

// Redirect following, in one place: what becomes of a final response head (relay, follow, refuse),
// the chain a followed redirect extends, and what the next hop may carry. The exchange machine
// asks `ResponseDirector.direct` and, on a follow, `ResponseDirector.chain(after:)` and
// `RedirectChain.context(forHopTo:of:)`; the hop planner applies that context. Pure Location
// resolution and the pass/follow/block verdict are policy-free URL reading and stay in
// ScopePolicy (Redirects.swift: `RedirectPolicy.decide`, `RedirectPolicy.resolve`).

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

    /// What a hop of this chain to `target` may carry: the one place the rule is set that a
    /// client's own credentials (sensitive headers, userinfo) go only to the origin the client
    /// addressed (docs/security-model.md, "Redirects"). Planning, the token wait and the next
    /// link of the chain all read it from here.
    public func context(forHopTo target: HopTarget, of request: ClientRequest) -> ChainContext {
        var context = context
        if target.origin != request.origin { context.clientCredentialsAllowed = false }
        return context
    }
}

/// What becomes of a final (non-1xx) response head.
public enum ResponseDirection: Sendable, Equatable {
    /// Send it to the client, as rewritten (a route's Location), with the redirect decision to log.
    case relay(ResponseHead, redirect: RedirectRecord?)
    /// The proxy follows the redirect itself: a new hop, re-scoped for its origin.
    case follow(HopTarget, body: HopBody, redirect: RedirectRecord)
    /// Refused: the client gets this error instead (block mode, too many hops).
    case refuse(ProxyError, redirect: RedirectRecord?)
}

/// Response direction for a final head: route Location rewriting, and the redirect policy with the
/// rules that keep follow mode from being turned against the client.
public enum ResponseDirector {
    /// What the director needs to know about the exchange so far.
    public struct Context: Sendable {
        public var request: ClientRequest
        public var hop: Hop
        public var chain: RedirectChain
        public var mode: ConnectionMode
        public var scope: ScopeContext
        /// The whole request body was read from the client.
        public var requestComplete: Bool
        /// The request body as it can be replayed: empty when there was none, nil when it was not
        /// kept (too large, or not in follow mode).
        public var replayableBody: [UInt8]?

        public init(
            request: ClientRequest, hop: Hop, chain: RedirectChain, mode: ConnectionMode, scope: ScopeContext,
            requestComplete: Bool, replayableBody: [UInt8]?
        ) {
            self.request = request
            self.hop = hop
            self.chain = chain
            self.mode = mode
            self.scope = scope
            self.requestComplete = requestComplete
            self.replayableBody = replayableBody
        }
    }

    public static func direct(_ head: ResponseHead, _ context: Context) -> ResponseDirection {
        let hop = context.hop
        // One Location or none (docs/security-model.md, "Strict parsing"): clients disagree on
        // which of two they follow (curl and Node the first, OkHttp and HttpURLConnection the
        // last), so a check of either one proves nothing about the other. Refused in every mode
        // and for every status, before anything of the response is relayed or followed.
        var head = head
        let location: String?
        switch head.fields.singleValue(of: "location") {
        case .absent: location = nil
        case .one(let value): location = value
        case .repeated(let value):
            // The same value twice is one value; the client gets it once.
            location = value
            head.fields.set(name: "Location", value: value)
        case .conflicting:
            return .refuse(.ambiguousLocation(hop.origin), redirect: nil)
        }
        if case .route(let upstream, let publicOrigin) = context.mode, let location,
            case .target(let target) = RedirectPolicy.resolve(location, origin: hop.origin, pathAndQuery: hop.target.pathAndQuery),
            target.origin == upstream
        {
            // A route's client knows only the route: a Location pointing upstream is rewritten back
            // to the address the client used (its Host, when it named one), or the listener's.
            var rewritten = head
            let authority =
                context.request.head.fields.singleValue(of: "host").only.flatMap { host in
                    (try? RequestTarget.parseAuthority(Substring(host))) != nil ? host : nil
                } ?? publicOrigin.authority
            rewritten.fields.set(name: "Location", value: "http://\(authority)\(target.pathAndQuery)")
            return .relay(rewritten, redirect: nil)
        }

        let verdict = context.scope.redirects.decide(
            status: head.status, location: location, requestMethod: hop.target.method, from: hop.origin,
            pathAndQuery: hop.target.pathAndQuery, hops: context.chain.hops)
        switch verdict {
        case .notRedirect:
            return .relay(head, redirect: nil)
        case .pass(let target):
            return .relay(head, redirect: RedirectRecord(location: location, origin: target?.origin, decision: .pass))
        case .block(let origin):
            return .refuse(.redirectBlocked(origin), redirect: RedirectRecord(location: location, origin: origin, decision: .block))
        case .tooManyHops:
            return .refuse(.redirectLoop, redirect: nil)
        case .follow(let target, let method, let replay):
            let passed = RedirectRecord(location: location, origin: target.origin, decision: .pass)
            // Follow only with the whole request in hand (its body, if replayed, kept in memory);
            // otherwise the client gets the 3xx and follows it itself, scoped on its own.
            guard context.requestComplete else { return .relay(head, redirect: passed) }
            let body: [UInt8]
            if replay {
                guard let replayable = context.replayableBody else { return .relay(head, redirect: passed) }
                body = replayable
            } else {
                body = []
            }
            // A confused deputy (docs/security-model.md, "Redirects"): an origin no scope covers must not be able to
            // make the proxy send an authenticated request on its behalf. Its redirect into an origin
            // that gets credentials goes back to the client, whose follow-up is scoped on its own.
            let issuerCovered = !context.scope.policy.covering(hop.origin, client: context.request.client.name).isEmpty
            let targetCovered = !context.scope.policy.covering(target.origin, client: context.request.client.name).isEmpty
            if targetCovered && !issuerCovered { return .relay(head, redirect: passed) }
            return .follow(
                HopTarget(origin: target.origin, method: method, pathAndQuery: target.pathAndQuery),
                body: .replayed(body),
                redirect: RedirectRecord(location: location, origin: target.origin, decision: .follow))
        }
    }

    /// The chain after following a redirect from `hop` to `target`.
    public static func chain(after chain: RedirectChain, hop: Hop, to target: HopTarget, request: ClientRequest) -> RedirectChain {
        var next = chain
        next.hops += 1
        // A client credential stripped once stays stripped for the rest of the chain.
        next.context.strippedByClientHeader.formUnion(hop.decision.stripped.map { $0.lowercased() })
        if hop.origin.scheme == .https && target.origin.scheme == .http { next.context.downgraded = true }
        // Once the chain has left the origin the client addressed, coming back does not restore
        // the client's credentials either: the next hop's context is kept for the rest of the chain.
        next.context = next.context(forHopTo: target, of: request)
        // What this hop's response scrub covered, the next hop's covers too.
        next.scrubScopes |= hop.scrubScopes
        next.scrubNames.formUnion(hop.scrubNames)
        return next
    }
}

extension ResponseDirector {
    /// The log line of a followed hop: the same request id and client, the redirect's target.
    static func record(following previous: ExchangeRecord, to target: HopTarget, request: ClientRequest) -> ExchangeRecord {
        var next = ExchangeRecord(id: previous.id, client: previous.client, method: target.method, startedAt: previous.startedAt)
        next.clientID = previous.clientID
        // The client spoke the same protocol for every hop of its chain (the log's `proto`).
        next.proto = previous.proto
        next.mode = previous.mode
        next.hop = previous.hop + 1
        next.origin = target.origin
        next.pathAndQuery = target.pathAndQuery
        next.requestFields = request.head.fields
        return next
    }
}

// MARK: Following

extension ExchangeMachine {
    /// The next hop of a chain the proxy follows: the 3xx's connection is let go (never reused: its
    /// body was not read), the hop gets its own log line, and the request is scoped afresh.
    func follow(
        response: ResponseHead, to target: HopTarget, body: HopBody, redirect: RedirectRecord,
        _ effects: inout MachineEffects
    ) -> ExchangeOutcome {
        guard let current = hopState else { return .ignored(.staleHop) }
        effects.release(current.id)
        var line = current.accounted(record)
        line.status = response.status
        line.responseFields = response.fields
        line.redirect = redirect
        effects.emit(line)
        record = ResponseDirector.record(following: line, to: target, request: request)
        let next = ResponseDirector.chain(after: chain, hop: current.hop, to: target, request: request)
        return planFollowed(to: target, body: body, chain: next, tokens: [:], answerScrub: current.hop.scrub, &effects)
    }

    /// A followed hop, planned (once any access token it needs is here) and started as a new
    /// `HopState`: nothing of the hop before it carries over.
    func planFollowed(
        to target: HopTarget, body: HopBody, chain next: RedirectChain, tokens: [String: AccessToken],
        answerScrub: SecretWatch?, _ effects: inout MachineEffects
    ) -> ExchangeOutcome {
        if let missing = missingToken(target, chain: next, have: tokens) {
            return awaitToken(missing, .follow(target, body, next, tokens: tokens, answerScrub: answerScrub), &effects)
        }
        switch HopPlanner.plan(
            request, to: target, body: body, chain: next, scope: scope, requestID: record.id,
            wallClock: wallClock, tokens: tokens.mapValues(\.value))
        {
        case .failure(let error):
            phase = .done
            // The previous hop's scrub: its origin may have put a value into this hop's target.
            return .answer(error, record, requestRead: true, scrub: answerScrub)
        case .success(let hop):
            record.note(hop.decision)
            record.substituted = hop.substituted
            record.signed = hop.signed
            chain = next
            begin(HopState(hop: hop, id: effects.nextHopID(), tokens: tokens), &effects)
            return .proceeding
        }
    }
}
