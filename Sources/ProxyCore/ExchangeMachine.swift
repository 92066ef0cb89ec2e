import HTTP1Codec
import ScopePolicy

/// One client request, from its admission to its last byte, as a sans-I/O state machine: events of
/// the upstream side in, actions (to the engine) and one `ExchangeOutcome` (to the connection) out.
///
///   collecting ─ body whole ─┐
///   (a body the scope        ▼
///    decision reads)   plan hop ── needs a token ─▶ awaitingToken ─ token ─▶ plan hop
///                            │
///                            ▼
///   hop(HopState): connect → send → request body → response head → relay ─▶ finished
///          ▲   │                                         │
///          │   └─ pooled connection closed: retry once ──┤ (a new HopState, same hop)
///          └────── 3xx followed: a new HopState ◀────────┘ (the old hop released)
///
/// It does not know how its client speaks: the connection machine renders what it decides
/// (an error answer, an interim head, the final head, a tunnel) in the client's protocol, and
/// tells it what that rendering decided (`respond`). A reference owned by the connection alone,
/// updated in place on every event (a value this size would be copied out and back each time).
public final class ExchangeMachine {
    public let request: ClientRequest
    /// The scope context the exchange started with (a reload does not change it mid-flight).
    public let scope: ScopeContext
    /// When the request arrived (seconds since 1970): every hop's signature is made at it.
    let wallClock: Int64
    let mode: ConnectionMode
    let limits: Limits
    let logBodies: Bool

    /// The log line being written (one per hop).
    public internal(set) var record: ExchangeRecord
    public internal(set) var phase: Phase
    /// The current hop; replaced whole on a follow or a retry, nil before the first is planned.
    public internal(set) var hopState: HopState?
    var chain = RedirectChain()
    /// The request body, as taken from the client (once for the whole exchange).
    public internal(set) var requestBody: BodyState
    /// The request body for a replay (follow mode), once complete.
    var captured: [UInt8]?
    var requestObserved: ExchangeRecord.ObservedBody?

    public enum Phase: Sendable, Equatable {
        /// Reading a request body the scope decision depends on, before anything goes upstream.
        case collecting(limit: Int, signingScope: String?)
        /// A hop's injection needs an access token the proxy is obtaining (`acquireToken`): the hop
        /// is planned when it arrives. Nothing was sent; no loop waits.
        case awaitingToken(secret: String, Resume)
        /// `hopState` is the hop under way.
        case hop
        /// Answered, finished, cut or abandoned: the connection lets go of the exchange.
        case done
    }

    /// What a token wait resumes: the client's own hop, or the next hop of a followed chain.
    public enum Resume: Sendable, Equatable {
        case first(HopBody, tokens: [String: AccessToken])
        /// `answerScrub`: the previous hop's scrub, for an answer instead (its origin may have put a
        /// value into this hop's target).
        case follow(HopTarget, HopBody, RedirectChain, tokens: [String: AccessToken], answerScrub: SecretWatch?)
    }

    public enum BodyState: Sendable, Equatable {
        case streaming
        case complete
    }

    public init(
        request: ClientRequest, scope: ScopeContext, wallClock: Int64, record: ExchangeRecord, mode: ConnectionMode,
        limits: Limits, logBodies: Bool
    ) {
        self.request = request
        self.scope = scope
        self.wallClock = wallClock
        self.record = record
        self.mode = mode
        self.limits = limits
        self.logBodies = logBodies
        phase = .done
        requestBody = request.framing == .none ? .complete : .streaming
    }

    var isConnect: Bool { request.head.method == "CONNECT" }

    /// The secret whose access token the exchange waits for, if it waits.
    public var awaitedToken: String? {
        if case .awaitingToken(let secret, _) = phase { return secret }
        return nil
    }

    public var isCollecting: Bool {
        if case .collecting = phase { return true }
        return false
    }

    /// The hop whose bytes may currently move, if any (none while a follow-up waits for a token).
    public var currentHop: HopID? {
        guard case .hop = phase else { return nil }
        return hopState?.id
    }

    /// The current hop asks its origin to switch protocols (an HTTP/1.1 upgrade, which HTTP/2 cannot carry).
    public var currentHopIsUpgrade: Bool { hopState?.hop.isUpgrade ?? false }

    /// Whether the engine should parse a response head from this hop now.
    public func expectsResponseHead(from hop: HopID) -> Bool {
        guard currentHop == hop, let current = hopState, current.connected, current.isAwaitingHead else { return false }
        return true
    }

    /// The request was read whole: the client's byte stream is at a known place.
    var requestRead: Bool { requestBody == .complete }

    // MARK: Starting

    /// How much of the request body is read whole before its hop is planned; nil: it streams.
    /// A form to a scope limiting `methods:` may carry `_method`; a JSON or form body to an origin
    /// whose scopes substitute placeholders has them replaced (up to `maxSubstitutedBody`; a
    /// larger one announced by Content-Length streams, and the guard refuses any placeholder in it).
    public enum BodyRead: Sendable, Equatable {
        case stream
        case read(limit: Int, signingScope: String?)
        case refuse(ProxyError)
    }

    public static func bodyRead(_ request: ClientRequest, scope: ScopeContext, limits: Limits) -> BodyRead {
        guard request.framing != .none else { return .stream }
        let head = request.head
        var limit: Int?
        if scope.policy.needsBodyInspection(
            method: head.method, origin: request.origin, pathAndQuery: request.pathAndQuery,
            contentType: head.fields.singleValue(of: "content-type").agreed,
            contentEncoding: head.fields.listMembers("content-encoding").joined(separator: ","),
            client: request.client.name)
        {
            limit = limits.maxInspectedBody
        }
        if !scope.values.placeholders.isEmpty, scope.policy.substitutes(for: request.origin, client: request.client.name),
            PlaceholderSite.body(of: head.fields) != nil
        {
            let fits = if case .contentLength(let length) = request.framing { length <= UInt64(limits.maxSubstitutedBody) } else { true }
            if fits { limit = max(limit ?? 0, limits.maxSubstitutedBody) }
        }
        guard
            let signer = scope.policy.signingScope(
                method: head.method, origin: request.origin, pathAndQuery: request.pathAndQuery,
                client: request.client.name),
            let signing = signer.signing
        else {
            return limit.map { .read(limit: $0, signingScope: nil) } ?? .stream
        }
        // A signature over the body (SigV4 of anything but s3) needs it whole, up to its limit.
        switch signing {
        case .awsSigV4(let spec):
            switch spec.payloadHashing {
            case .unsignedPayload:
                return limit.map { .read(limit: $0, signingScope: nil) } ?? .stream
            case .hashBody(let hashLimit):
                if case .contentLength(let length) = request.framing, length > UInt64(hashLimit) {
                    return .refuse(.bodyTooLargeToSign(scope: signer.name, limit: hashLimit))
                }
                return .read(limit: max(limit ?? 0, hashLimit), signingScope: signer.name)
            }
        }
    }

    /// Reads the body whole first (`bodyRead` said so).
    public func collect(limit: Int, signingScope: String?, _ effects: inout MachineEffects) {
        phase = .collecting(limit: limit, signingScope: signingScope)
        effects.append(.collectRequestBody(request.framing, limit: limit))
        effects.arm(.stall)
    }

    /// The client's own hop: scoped (once any access token it needs is here), then started.
    public func start(body: HopBody, _ effects: inout MachineEffects) -> ExchangeOutcome {
        if case .replayed = body { requestBody = .complete }
        return planFirst(body: body, tokens: [:], &effects)
    }

    /// A CONNECT tunnel: one raw hop to the origin; bytes are spliced once it connects.
    public func startTunnel(to origin: Origin, egress: EgressClearance, _ effects: inout MachineEffects) {
        let hop = Hop(
            target: HopTarget(origin: origin, method: "CONNECT", pathAndQuery: ""), egress: egress, decision: ScopeDecision(),
            head: [], body: .none, isUpgrade: false)
        begin(HopState(hop: hop, id: effects.nextHopID(), tokens: [:]), &effects)
    }

    private func planFirst(body: HopBody, tokens: [String: AccessToken], _ effects: inout MachineEffects) -> ExchangeOutcome {
        let target = HopTarget(origin: request.origin, method: request.head.method, pathAndQuery: request.pathAndQuery)
        if let missing = missingToken(target, chain: chain, have: tokens) {
            return awaitToken(missing, .first(body, tokens: tokens), &effects)
        }
        switch HopPlanner.plan(
            request, to: target, body: body, chain: chain, scope: scope, requestID: record.id,
            wallClock: wallClock, tokens: tokens.mapValues(\.value))
        {
        case .failure(let error):
            phase = .done
            return .answer(error, record, requestRead: { if case .streamed = body { false } else { true } }(), scrub: nil)
        case .success(let hop):
            record.note(hop.decision)
            record.substituted = hop.substituted
            record.signed = hop.signed
            if case .replayed(let bytes) = body { captured = bytes }
            let payload: UInt64 = if case .replayed(let bytes) = body { UInt64(bytes.count) } else { 0 }
            begin(HopState(hop: hop, id: effects.nextHopID(), tokens: tokens, requestPayload: payload), &effects)
            return .proceeding
        }
    }

    /// A hop starts: the engine connects (from the pool unless this is a retry or a tunnel).
    func begin(_ state: HopState, _ effects: inout MachineEffects) {
        hopState = state
        phase = .hop
        effects.arm(.connect)
        if let rule = state.hop.egress.reported {
            record.egressReported = EgressNote(decision: .reportDeny, rule: rule, destination: state.hop.origin.hostAndPort, address: nil)
        }
        let transport: UpstreamTransport = isConnect ? .raw : state.hop.origin.scheme == .https ? .tls : .plain
        effects.append(
            .connect(state.id, state.hop.origin, transport, reusePooled: transport != .raw && !state.retried, egress: state.hop.egress))
    }

    // MARK: Access tokens

    /// The first computed secret (an access token, a command's value, AWS chain credentials) this
    /// hop's injections or signature need that the exchange does not hold yet; nil when it holds
    /// them all (or needs none).
    func missingToken(_ target: HopTarget, chain: RedirectChain, have: [String: AccessToken]) -> String? {
        guard !scope.tokenSecrets.isEmpty else { return nil }
        let context = chain.context(forHopTo: target, of: request)
        var needed = scope.policy.injectedSecrets(
            method: target.method, origin: target.origin, pathAndQuery: target.pathAndQuery,
            client: request.client.name, chain: context)
        // A scope signing with the AWS chain: the credentials are one computed value. (The method
        // override is not known before planning; without it a skip applies less often, so at worst
        // credentials are obtained for a hop that then goes unsigned.)
        if let signer = scope.policy.signingScope(
            method: target.method, origin: target.origin, pathAndQuery: target.pathAndQuery, client: request.client.name, chain: context),
            let chainSecret = signer.signingChain?.secretName
        {
            needed.insert(chainSecret)
        }
        return needed.filter { scope.tokenSecrets.contains($0) && have[$0] == nil }.sorted().first
    }

    /// Nothing goes upstream until the token is here; no timer runs (the token source has its own
    /// timeouts and always answers), and the client's bytes wait in their buffer.
    func awaitToken(_ secret: String, _ resume: Resume, _ effects: inout MachineEffects) -> ExchangeOutcome {
        phase = .awaitingToken(secret: secret, resume)
        effects.append(.acquireToken(secret: secret, from: scope))
        return .proceeding
    }

    private func tokenReady(_ secret: String, _ token: AccessToken, _ effects: inout MachineEffects) -> ExchangeOutcome {
        guard case .awaitingToken(let awaited, let resume) = phase, awaited == secret else { return .impossible(.unrequestedToken) }
        switch resume {
        case .first(let body, var tokens):
            tokens[secret] = token
            return planFirst(body: body, tokens: tokens, &effects)
        case .follow(let target, let body, let chain, var tokens, let answerScrub):
            tokens[secret] = token
            return planFollowed(to: target, body: body, chain: chain, tokens: tokens, answerScrub: answerScrub, &effects)
        }
    }

    /// Fail closed: 502 naming the scope and where the value comes from, never what it said.
    private func tokenFailed(_ secret: String, provider: TokenProvider?, reason: TokenFailure.Reason) -> ExchangeOutcome {
        guard case .awaitingToken(let awaited, let resume) = phase, awaited == secret else { return .impossible(.unrequestedToken) }
        let owner = (record.origin.map { scope.policy.covering($0, client: request.client.name) } ?? [])
            .first { $0.inject.contains { $0.template.secretNames.contains(secret) } || $0.signingChain?.secretName == secret }
        let read =
            switch resume {
            case .first(let body, _): { if case .streamed = body { false } else { true } }()
            case .follow: true
            }
        phase = .done
        return .answer(
            .tokenUnavailable(scope: owner?.name ?? "?", secret: secret, provider: provider, reason: reason),
            record, requestRead: read, scrub: nil)
    }

    // MARK: Events

    public func handle(_ event: ExchangeEvent, _ effects: inout MachineEffects) -> ExchangeOutcome {
        switch event {
        case .collectedBody(let progress): collected(progress, &effects)
        case .tokenReady(let secret, let token): tokenReady(secret, token, &effects)
        case .tokenFailed(let secret, let provider, let reason): tokenFailed(secret, provider: provider, reason: reason)
        case .timerFired(let purpose): timerFired(purpose, &effects)
        case .upstreamConnected(let hop, let reused, let peer): upstreamConnected(hop, reused: reused, peer: peer, &effects)
        case .upstreamConnectFailed(let hop, let error):
            onCurrentHop(hop) { $0.connected ? .ignored(.notAwaited) : fail(error, &effects) }
        case .requestBody(let hop, let progress):
            onCurrentHop(hop) { _ in requestBodyProgress(progress, &effects) }
        case .responseHead(let hop, let head):
            onCurrentHop(hop) { expectsResponseHead(from: $0.id) ? responseHead(head, &effects) : .ignored(.notAwaited) }
        case .responseHeadInvalid(let hop, let reason):
            onCurrentHop(hop) {
                expectsResponseHead(from: $0.id) ? fail(.badUpstreamResponse($0.hop.origin, reason), &effects) : .ignored(.notAwaited)
            }
        case .responseBody(let hop, let progress):
            onCurrentHop(hop) { _ in responseBodyProgress(progress, &effects) }
        case .upstreamClosed(let hop, let sawResponseBytes):
            onCurrentHop(hop) { $0.connected ? upstreamClosed(sawResponseBytes: sawResponseBytes, &effects) : .ignored(.notAwaited) }
        }
    }

    /// Runs `body` for an event of the current hop; an event of any other hop is stale (released,
    /// or never started): nothing of it may reach the client.
    private func onCurrentHop(_ hop: HopID, _ body: (HopState) -> ExchangeOutcome) -> ExchangeOutcome {
        guard currentHop == hop, let current = hopState else { return .ignored(.staleHop) }
        return body(current)
    }

    /// Progress of a body read before its hop is planned.
    private func collected(_ progress: CollectedBody, _ effects: inout MachineEffects) -> ExchangeOutcome {
        guard case .collecting(let limit, let signingScope) = phase else { return .impossible(.uncollectedBody) }
        switch progress {
        case .progressed:
            effects.arm(.stall)
            return .proceeding
        case .complete(let bytes):
            effects.cancelTimer()
            return start(body: .replayed(bytes), &effects)
        case .tooLarge:
            // Fail closed: a body the proxy cannot inspect cannot be shown to stay within the scope.
            phase = .done
            let error: ProxyError = signingScope.map { .bodyTooLargeToSign(scope: $0, limit: limit) } ?? .bodyTooLargeToInspect(limit: limit)
            return .answer(error, record, requestRead: false, scrub: nil)
        case .invalid:
            phase = .done
            return .answer(.malformedRequest("invalid chunked request body"), record, requestRead: false, scrub: nil)
        }
    }

    private func timerFired(_ purpose: TimerPurpose, _ effects: inout MachineEffects) -> ExchangeOutcome {
        switch (purpose, phase) {
        case (.stall, .collecting):
            phase = .done
            return .answer(.requestBodyTimeout, record, requestRead: false, scrub: nil)
        case (.connect, .hop) where !hopState!.connected:
            return fail(.connectTimeout(hopState!.hop.origin), &effects)
        case (.responseHead, .hop):
            return fail(.responseTimeout(hopState!.hop.origin), &effects)
        case (.stall, .hop):
            // No progress for `idle`. Before a response, that is the request body (once it is
            // complete, the response-head timer runs instead): the client stalled; say so and close,
            // as the request can never complete upstream. During a response: cut it.
            if hopState!.isAwaitingHead { return fail(.requestBodyTimeout, closeClient: true, &effects) }
            return cut(&effects)
        default:
            return .ignored(.timerOfEarlierPhase)
        }
    }

    /// The client sent EOF with `buffered` bytes not taken yet: whether the request can never
    /// complete now (the connection then closes at once).
    public func requestCannotComplete(buffered: Int) -> Bool {
        switch phase {
        case .collecting: buffered == 0
        // A body that has not arrived whole cannot arrive any more: nothing was sent.
        case .awaitingToken: request.framing != .none && buffered == 0
        // A client may half-close once its request is sent; the response still goes out. Gone
        // mid-body with nothing left buffered, the request can never complete.
        case .hop: requestBody == .streaming && buffered == 0
        case .done: false
        }
    }

    // MARK: Hop: connect → send → request body

    private func upstreamConnected(_ hop: HopID, reused: Bool, peer: UpstreamPeer?, _ effects: inout MachineEffects) -> ExchangeOutcome {
        guard currentHop == hop, var current = hopState else { return .ignored(.staleHop) }
        guard !current.connected else { return .ignored(.notAwaited) }
        if let peer {
            record.upstreamAddress = peer.address
            if let rule = peer.reported, record.egressReported == nil {
                record.egressReported = EgressNote(
                    decision: .reportDeny, rule: rule, destination: current.hop.origin.hostAndPort, address: peer.address)
            }
        }
        current.connected = true
        current.reused = reused
        hopState = current
        if isConnect {
            // A tunnel's line counts the bytes spliced each way, not the CONNECT exchange itself.
            record.status = 200
            record.tunnel = .tunnel
            record.bytesIn = 0
            phase = .done
            return .tunnelEstablished(hop, record)
        }
        var bytes = current.hop.head
        if let body = current.hop.outgoingBody { bytes += body }
        effects.append(.sendToUpstream(hop, bytes))
        if requestBody == .complete {
            effects.arm(.responseHead)
        } else {
            let capture = scope.redirects.mode == .follow ? limits.maxReplayBody : nil
            let observe = logBodies ? limits.maxObservedBody : nil
            effects.append(.pumpRequestBody(hop, request.framing, capture: capture, observe: observe, guard: current.hop.bodyGuard))
            effects.arm(.stall)
        }
        return .proceeding
    }

    private func requestBodyProgress(_ progress: BodyProgress, _ effects: inout MachineEffects) -> ExchangeOutcome {
        guard requestBody == .streaming else { return .ignored(.notAwaited) }
        switch progress {
        case .moved(let payload, let consumed):
            hopState!.requestPayload += payload
            hopState!.requestConsumed += consumed
            // Progress restarts the stall timer; no progress leaves a running one alone.
            if payload > 0, hopState!.isAwaitingHead { effects.arm(.stall) }
        case .complete(let payload, let consumed, let captured, let observed):
            hopState!.requestPayload += payload
            hopState!.requestConsumed += consumed
            requestBody = .complete
            self.captured = captured
            requestObserved = observed.map { [request] body in
                var labelled = body
                labelled.contentType = request.head.fields.singleValue(of: "content-type").agreed
                return labelled
            }
            if hopState!.isAwaitingHead { effects.arm(.responseHead) }
        case .invalid, .cut:
            // Part of the body may already be upstream: that request is cut, never completed.
            return fail(.malformedRequest("invalid chunked request body"), closeClient: true, &effects)
        case .blocked(let finding, let bytesSent):
            // The engine forwarded only the bytes before the value and stopped: cut the hop (the
            // origin never sees a complete request) and answer 403 if no response has started.
            record.guardFinding = finding
            // The log's `injected` and the metric list only headers that reached an origin: a head
            // still in the proxy's buffer when the body was refused was never sent.
            if !bytesSent { record.injected = [] }
            let hop = hopState!.hop
            let facts = hop.placeholderRequest ?? PlaceholderRequest(method: hop.target.method, pathAndQuery: hop.target.pathAndQuery)
            return fail(
                HopPlanner.blocked(finding, where: "body", hop.origin, scope.policy, client: request.client.name, request: facts),
                closeClient: true, &effects)
        case .scrubbed:
            return .impossible(.impossibleBodyReport)  // request bodies are guarded, never scrubbed
        }
        return .proceeding
    }

    // MARK: Upstream hang-ups

    private func upstreamClosed(sawResponseBytes: Bool, _ effects: inout MachineEffects) -> ExchangeOutcome {
        guard let current = hopState else { return .ignored(.staleHop) }
        hopState!.upstreamClosed = true
        // A body being relayed: the engine finishes or cuts it once it has drained.
        guard current.isAwaitingHead else { return .proceeding }
        // A pooled connection the origin closed just as it was reused: retry once on a fresh one,
        // but only when nothing of the response arrived, nothing of the body was taken, and the
        // method is idempotent: the origin may have run the request before closing, and a proxy
        // must not repeat a POST or PATCH on its own (RFC 9110 §9.2.2).
        if current.reused, !current.retried, !sawResponseBytes, current.requestConsumed == 0,
            Self.idempotentMethods.contains(current.hop.target.method)
        {
            effects.release(current.id)
            begin(current.retry(as: effects.nextHopID()), &effects)
            return .proceeding
        }
        if sawResponseBytes {
            return fail(.badUpstreamResponse(current.hop.origin, "connection closed inside the response head"), &effects)
        }
        return fail(.upstreamClosed(current.hop.origin), &effects)
    }

    /// RFC 9110 §9.2.2.
    static let idempotentMethods: Set<String> = ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"]

    // MARK: Failures and endings

    /// The exchange failed: its hop is released; before the response started the client gets an
    /// error (`answer`), after it the response is cut. `closeClient`: the client's byte stream is
    /// not at a known place, whatever was read.
    public func fail(_ error: ProxyError, closeClient: Bool = false, _ effects: inout MachineEffects) -> ExchangeOutcome {
        guard let current = hopState else { return .ignored(.staleHop) }
        effects.release(current.id)
        if !current.isAwaitingHead { return cut(releasing: false, &effects) }
        var line = current.accounted(record)
        // The request never left (the connection failed): nothing was injected anywhere.
        if !current.connected { line.injected = [] }
        phase = .done
        return .answer(error, line, requestRead: !closeClient && requestRead, scrub: current.hop.scrub)
    }

    /// The response was already under way: close without completing it (a chunked body is left
    /// unterminated), so the client can never mistake a truncated body for a whole one.
    func cut(releasing: Bool = true, _ effects: inout MachineEffects) -> ExchangeOutcome {
        guard let current = hopState else { return .ignored(.staleHop) }
        if releasing { effects.release(current.id) }
        var line = current.accounted(record)
        line.failure = .responseCut
        effects.emit(line)
        phase = .done
        return .cut
    }

    /// The client connection is gone: release the current hop and write the line of an exchange
    /// that did not get to write its own.
    public func connectionClosed(_ effects: inout MachineEffects) {
        var line = record
        switch phase {
        case .hop:
            guard let current = hopState else { return }
            effects.release(current.id)
            line = current.accounted(record)
        case .collecting, .awaitingToken:
            break
        case .done:
            return
        }
        line.failure = .clientClosed
        effects.emit(line)
        phase = .done
    }

    /// Moves the relay on: response body progress, the whole response, a cut.
    private func responseBodyProgress(_ progress: BodyProgress, _ effects: inout MachineEffects) -> ExchangeOutcome {
        guard case .relaying(let reuse, let byClose, let keepClient, let payload) = hopState!.response else {
            return .ignored(.notAwaited)
        }
        switch progress {
        case .moved(let moved, _):
            hopState!.response = .relaying(allowsReuse: reuse, delimitedByClose: byClose, keepClient: keepClient, payload: payload + moved)
            if moved > 0 { effects.arm(.stall) }
            return .proceeding
        case .complete(let moved, _, _, let observed):
            hopState!.response = .relaying(allowsReuse: reuse, delimitedByClose: byClose, keepClient: keepClient, payload: payload + moved)
            record.responseBody = observed.map { [contentType = record.responseFields?.singleValue(of: "content-type").agreed] body in
                var labelled = body
                labelled.contentType = contentType
                return labelled
            }
            return finish(&effects)
        case .invalid, .cut:
            return cut(&effects)
        case .scrubbed(let findings):
            record.scrubbed += findings
            return .proceeding
        case .blocked:
            return .impossible(.impossibleBodyReport)  // response bodies are scrubbed, never guarded
        }
    }

    /// The response went out whole: the upstream goes back to the pool when it is known clean.
    private func finish(_ effects: inout MachineEffects) -> ExchangeOutcome {
        let current = hopState!
        guard case .relaying(let allowsReuse, let byClose, let keepClient, _) = current.response else { return .ignored(.notAwaited) }
        effects.cancelTimer()
        // Reuse only a connection known clean: whole request sent, whole response read, and the
        // origin did not ask to close (the engine also checks that nothing arrived after it).
        let reuse = allowsReuse && requestRead && !byClose && !current.upstreamClosed
        effects.release(current.id, reuse: reuse)
        var line = current.accounted(record)
        line.requestBody = requestObserved
        effects.emit(line)
        phase = .done
        return .finished(keepClient: keepClient && requestRead)
    }
}

/// The events of an exchange: the upstream side's, the token source's, the collection's and the
/// timers (the connection passes on those of its current exchange).
public enum ExchangeEvent: Sendable {
    case upstreamConnected(HopID, reused: Bool, peer: UpstreamPeer? = nil)
    case upstreamConnectFailed(HopID, ProxyError)
    case requestBody(HopID, BodyProgress)
    case collectedBody(CollectedBody)
    case responseHead(HopID, ResponseHead)
    case responseHeadInvalid(HopID, reason: String)
    case responseBody(HopID, BodyProgress)
    case upstreamClosed(HopID, sawResponseBytes: Bool)
    case timerFired(TimerPurpose)
    case tokenReady(secret: String, AccessToken)
    case tokenFailed(secret: String, provider: TokenProvider?, reason: TokenFailure.Reason)
}

/// What the connection does after an exchange event, in words that do not depend on how the
/// client speaks. The exchange has already appended its upstream actions (connect, send, release,
/// emit...); the connection renders these for its client.
public enum ExchangeOutcome: Sendable, Equatable {
    /// Nothing for the client: the exchange goes on.
    case proceeding
    /// Dropped on purpose, and why.
    case ignored(StaleEvent)
    /// An event a correct engine cannot deliver now: the connection counts it.
    case impossible(ImpossibleEvent)
    /// Answer the client with this error (the exchange is over). `requestRead`: the request was
    /// read whole; `scrub`: what the answer is masked of (its message names origins, and a
    /// redirect can put a value into one).
    case answer(ProxyError, ExchangeRecord, requestRead: Bool, scrub: SecretWatch?)
    /// An interim (1xx) response: shown to a client that can take one (`interimShown`).
    case interim(ResponseHead)
    /// The final response head: the connection renders it and calls `respond`.
    case response(ResponseHead, framing: BodyFraming)
    /// 101 to an upgrade request: the connection checks its client can switch, then `upgraded` or `fail`.
    case switchingProtocols(ResponseHead)
    /// CONNECT: the hop is connected, with the tunnel's record; the exchange is over.
    case tunnelEstablished(HopID, ExchangeRecord)
    /// The response went out whole (its line is emitted). `keepClient`: the client connection may
    /// serve another request, as the connection decided at `respond` and the request was read whole.
    case finished(keepClient: Bool)
    /// The response was cut (its line is emitted): the client connection closes after what is written.
    case cut
}
