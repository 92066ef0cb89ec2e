import HTTP1Codec
import ScopePolicy

/// The life of one client connection as a sans-I/O state machine: events in, actions out. The
/// engine reads bytes, parses heads with the codec and moves body bytes; every decision about what
/// happens next is made here, so it can be tested with tables of events and no sockets.
///
///   awaitingHead ─ head ─▶ exchange (one hop at a time: connect → send → response head → relay)
///        ▲                    │  │  └─ 3xx followed: the hop is released, a new hop starts
///        └──── keep-alive ────┘  └─ CONNECT / 101 ─▶ tunnel
///   any state ─ error, timeout, hang-up ─▶ closing ─ transport closed ─▶ closed
///
/// Invariants (checked by the state-machine fuzzer):
/// - one request gets at most one final response;
/// - nothing of a hop the machine released reaches the client: events of any hop but the current
///   one are ignored, and the engine stops a hop's callbacks when it is released;
/// - a client-sent credential goes only to the origin the client addressed;
/// - every hop that was connected is released exactly once.
public struct ConnectionMachine {
    public struct Settings: Sendable {
        public var timeouts: Timeouts
        public var limits: Limits
        public var admission: RequestAdmission.Policy
        /// `log.bodies`: keep the first bytes of bodies for the log's summaries.
        public var logBodies: Bool

        public init(timeouts: Timeouts = Timeouts(), limits: Limits = Limits(),
                    admission: RequestAdmission.Policy = .init(tunnel: .deny, canIntercept: false), logBodies: Bool = false) {
            self.timeouts = timeouts
            self.limits = limits
            self.admission = admission
            self.logBodies = logBodies
        }
    }

    /// Waiting for a request head.
    public enum HeadWait: Sendable, Equatable {
        /// A new connection (or a new TLS session inside a tunnel): `client_header` runs.
        case fresh
        /// Between keep-alive requests: `idle` runs.
        case idle
        /// Bytes of a head arrived: `client_header` runs.
        case started
    }

    public enum State {
        case awaitingHead(HeadWait)
        /// After `200 Connection Established` to an intercepted CONNECT: the client's TLS handshake
        /// is under way. The CONNECT's line waits for its outcome, so a client that refuses the
        /// local CA's certificate shows in the log as such, not as a tunnel that went quiet.
        case handshaking(ExchangeRecord)
        /// Reading a request body the scope decision depends on, before anything goes upstream.
        case collecting(Collection)
        /// A hop's injection needs an access token the proxy is obtaining (`acquireToken`): the hop
        /// is planned when it arrives. Nothing was sent; no loop waits.
        case awaitingToken(PendingHop)
        case exchange(Exchange)
        case tunnel(Tunnel)
        /// The answer is written; the transport flushes it and closes. Nothing more is read.
        case closing
        case closed
    }

    /// One request and the hop currently serving it. A reference, owned by the machine alone (the
    /// state holds the only one): it is updated in place on every event of the exchange, where a
    /// value this size would be copied out of the state and back each time.
    public final class Exchange {
        let request: ClientRequest
        /// The scope context the exchange started with (a reload does not change it mid-flight).
        let scope: ScopeContext
        /// When the request arrived (seconds since 1970): every hop's signature is made at it.
        let wallClock: Int64
        var record: ExchangeRecord
        var chain = RedirectChain()
        var hop: Hop
        var hopID: HopID
        var connected = false
        var reused = false
        /// A stale pooled connection was retried once already.
        var retried = false
        var requestBody: BodyState
        /// Body bytes taken from the client so far (payload only; framing in `requestConsumed`).
        var requestPayload: UInt64 = 0
        var requestConsumed: UInt64 = 0
        /// The request body for a replay (follow mode), once complete.
        var captured: [UInt8]?
        var requestObserved: ExchangeRecord.ObservedBody?
        var response: ResponseState = .awaiting(interims: 0)
        var upstreamClosed = false
        /// The access tokens the current hop carries (a 401 marks them stale).
        var tokens: [String: OAuth2AccessToken] = [:]

        init(request: ClientRequest, scope: ScopeContext, wallClock: Int64, record: ExchangeRecord, hop: Hop, hopID: HopID,
             requestBody: BodyState) {
            self.request = request
            self.scope = scope
            self.wallClock = wallClock
            self.record = record
            self.hop = hop
            self.hopID = hopID
            self.requestBody = requestBody
        }

        var isConnect: Bool { request.head.method == "CONNECT" }
    }

    /// A request whose body is read before its hop is planned.
    public final class Collection {
        let request: ClientRequest
        let scope: ScopeContext
        let wallClock: Int64
        let record: ExchangeRecord
        /// The most that is read; beyond it the request is refused (413).
        let limit: Int
        /// Set when a SigV4 scope needs the body whole to hash it (the 413 names that scope).
        let signingScope: String?

        init(request: ClientRequest, scope: ScopeContext, wallClock: Int64, record: ExchangeRecord, limit: Int, signingScope: String?) {
            self.request = request
            self.scope = scope
            self.wallClock = wallClock
            self.record = record
            self.limit = limit
            self.signingScope = signingScope
        }
    }

    /// A hop waiting for access tokens: what planning it needs, and the tokens it has so far.
    public final class PendingHop {
        enum Resume {
            /// The client's own request.
            case first(ClientRequest, HopBody, ScopeContext, wallClock: Int64)
            /// The next hop of a chain the proxy follows.
            case follow(Exchange, HopTarget, HopBody, RedirectChain)
        }

        let resume: Resume
        let record: ExchangeRecord
        var tokens: [String: OAuth2AccessToken]
        let waitingFor: String

        init(resume: Resume, record: ExchangeRecord, tokens: [String: OAuth2AccessToken], waitingFor: String) {
            self.resume = resume
            self.record = record
            self.tokens = tokens
            self.waitingFor = waitingFor
        }

        var request: ClientRequest {
            switch resume {
            case .first(let request, _, _, _): request
            case .follow(let exchange, _, _, _): exchange.request
            }
        }

        var scopeContext: ScopeContext {
            switch resume {
            case .first(_, _, let scope, _): scope
            case .follow(let exchange, _, _, _): exchange.scope
            }
        }
    }

    public enum BodyState: Sendable, Equatable {
        case streaming
        case complete
    }

    public enum ResponseState: Sendable, Equatable {
        case awaiting(interims: Int)
        /// The final head went to the client; its body is being relayed.
        case relaying(allowsReuse: Bool, delimitedByClose: Bool, keepAlive: Bool, payload: UInt64)
    }

    /// A spliced tunnel (CONNECT, or an upgrade after 101).
    public struct Tunnel {
        let hopID: HopID
        var record: ExchangeRecord
        /// One side hung up and the engine is finishing it.
        var finishing = false
    }

    public let settings: Settings
    public private(set) var mode: ConnectionMode
    public private(set) var state: State = .awaitingHead(.fresh)
    /// Where the client connected from and what vouches for it (decides `clients:` identities).
    public let facts: ConnectionFacts
    private var peer: String { facts.peer }
    private var clientInputClosed = false
    private var draining = false
    private var lastHopID: UInt32 = 0
    /// The timer as last armed (a firing of any other purpose is stale and ignored).
    private var timer: TimerPurpose?
    private var actions: [ConnectionAction] = []
    /// Ids for requests that bring no well-formed X-Request-ID of their own.
    private var ids: RequestIDGenerator
    /// The policy and client the admitted request is scoped under: a refusal before its scope
    /// decision is noted still names the scopes covering its origin (`reject`), computed only then
    /// so that a request that is not refused pays nothing for it.
    private var covering: (policy: ScopePolicy, client: String?)?

    public init(settings: Settings, mode: ConnectionMode, facts: ConnectionFacts, ids: RequestIDGenerator) {
        self.settings = settings
        self.mode = mode
        self.facts = facts
        self.ids = ids
    }

    public init(settings: Settings, mode: ConnectionMode, peer: String, ids: RequestIDGenerator) {
        self.init(settings: settings, mode: mode, facts: ConnectionFacts(peer: peer), ids: ids)
    }

    /// The first actions of a new connection.
    public mutating func start() -> [ConnectionAction] {
        arm(.clientHead)
        return take()
    }

    /// Whether the engine should parse a response head from this hop now. False once the hop's
    /// final head was handled: its remaining bytes are never parsed for this client.
    public func expectsResponseHead(from hop: HopID) -> Bool {
        guard case .exchange(let exchange) = state, exchange.hopID == hop, exchange.connected,
              case .awaiting = exchange.response else { return false }
        return true
    }

    /// The hop whose bytes may currently move (body relay or splice), if any.
    public var currentHop: HopID? {
        switch state {
        case .exchange(let exchange): exchange.hopID
        case .tunnel(let tunnel): tunnel.hopID
        default: nil
        }
    }

    /// A request body is being read before its hop is planned (`collectRequestBody`).
    public var isCollectingBody: Bool {
        if case .collecting = state { return true }
        return false
    }

    /// The client's TLS handshake inside an intercepted CONNECT is under way.
    public var isHandshaking: Bool {
        if case .handshaking = state { return true }
        return false
    }

    /// The secret whose access token the current request waits for, if it waits.
    public var awaitedToken: String? {
        if case .awaitingToken(let pending) = state { return pending.waitingFor }
        return nil
    }

    public var isAwaitingHead: Bool {
        if case .awaitingHead = state { return true }
        return false
    }

    // MARK: Events

    public mutating func handle(_ event: ConnectionEvent) -> [ConnectionAction] {
        var taken: [ConnectionAction] = []
        handle(event, into: &taken)
        return taken
    }

    /// `handle`, appending the actions to `sink` (the engine reuses one buffer: no allocation per event).
    public mutating func handle(_ event: ConnectionEvent, into sink: inout [ConnectionAction]) {
        swap(&actions, &sink)
        defer { swap(&actions, &sink) }
        dispatch(event)
    }

    private mutating func dispatch(_ event: ConnectionEvent) {
        switch event {
        case .headStarted:
            if case .awaitingHead(let wait) = state, wait != .started {
                if wait == .idle { arm(.clientHead) }
                state = .awaitingHead(.started)
            }
        case .requestHead(let head, let headBytes, let arrival):
            if isAwaitingHead { admit(head, headBytes: headBytes, arrival) }
        case .requestHeadInvalid(let error, let arrival):
            if isAwaitingHead {
                let record = ExchangeRecord(id: ids.next(), client: peer, method: nil, startedAt: arrival.now)
                reject(ProxyError(error), record: record, consumedBody: false)
            }
        case .clientInputClosed(let buffered):
            clientInputClosed = true
            clientClosedInput(buffered: buffered)
        case .clientFailed:
            if case .handshaking(let record) = state { interceptionFailed(record, .tlsError); break }
            if case .closed = state { break }
            closeNow()
        case .clientTLSEstablished:
            if case .handshaking(let record) = state {
                emit(record)
                if draining {
                    closeAfterFlush()
                } else {
                    state = .awaitingHead(.fresh)
                    arm(.clientHead)
                }
            }
        case .clientTLSFailed(let why):
            if case .handshaking(let record) = state { interceptionFailed(record, why) }
        case .upstreamConnected(let hop, let reused):
            upstreamConnected(hop, reused: reused)
        case .upstreamConnectFailed(let hop, let error):
            if case .exchange(let exchange) = state, exchange.hopID == hop, !exchange.connected { fail(exchange, error) }
        case .requestBody(let hop, let progress):
            requestBody(hop, progress)
        case .collectedBody(let progress):
            collected(progress)
        case .responseHead(let hop, let head, let clientPipelined):
            if expectsResponseHead(from: hop), case .exchange(let exchange) = state {
                responseHead(head, exchange, clientPipelined: clientPipelined)
            }
        case .responseHeadInvalid(let hop, let reason):
            if expectsResponseHead(from: hop), case .exchange(let exchange) = state {
                fail(exchange, .badUpstreamResponse(exchange.hop.origin, reason))
            }
        case .responseBody(let hop, let progress):
            responseBody(hop, progress)
        case .upstreamClosed(let hop, let sawResponseBytes):
            upstreamClosed(hop, sawResponseBytes: sawResponseBytes)
        case .tunnelBytes(let hop, let fromClient, let fromUpstream):
            if case .tunnel(var tunnel) = state, tunnel.hopID == hop {
                tunnel.record.bytesIn += fromClient
                tunnel.record.bytesOut += fromUpstream
                state = .tunnel(tunnel)
                if fromClient + fromUpstream > 0 { arm(.stall) }
            }
        case .timerFired(let purpose):
            if timer == purpose {
                timer = nil
                timerFired(purpose)
            }
        case .drain:
            draining = true
            if case .awaitingHead(let wait) = state, wait != .started { closeNow() }
        case .connectionClosed:
            connectionClosed()
        case .tokenReady(let secret, let token):
            guard case .awaitingToken(let pending) = state, pending.waitingFor == secret else { break }
            var tokens = pending.tokens
            tokens[secret] = token
            resume(pending, tokens: tokens)
        case .tokenFailed(let secret, let endpoint, let reason):
            guard case .awaitingToken(let pending) = state, pending.waitingFor == secret else { break }
            tokenFailed(pending, secret: secret, endpoint: endpoint, reason: reason)
        }
    }

    // MARK: Request head → admission → first hop

    private mutating func admit(_ head: RequestHead, headBytes: Int, _ arrival: Arrival) {
        cancelTimer()
        let clientID = head.fields.first("x-request-id").flatMap { RequestID.isWellFormed($0) ? $0 : nil }
        var record = ExchangeRecord(id: clientID ?? ids.next(), client: peer, method: head.method, startedAt: arrival.now)
        record.bytesIn = UInt64(headBytes)
        record.requestFields = head.fields
        if case .intercepted(_, let client) = mode { record.clientID = client.name }
        let admission = RequestAdmission.admit(head, mode: mode, scope: arrival.scope, policy: settings.admission,
                                               facts: facts, now: arrival.now)
        covering = nil
        switch admission {
        case .reject(.rateLimited(let client, _)): record.clientID = client
        case .intercept(_, let client), .tunnel(_, let client): record.clientID = client.name
        case .forward(let request): record.clientID = request.client.name
        case .reject: break
        }
        switch admission {
        case .reject(let error):
            // Nothing was forwarded and the body (if any) was not read: answer and close. The line
            // still names where the request was going whenever its target can be read.
            record.noteTarget(of: head, fixedOrigin: mode.fixedOrigin)
            reject(error, record: record, consumedBody: false)
        case .intercept(let origin, let client):
            record.origin = origin
            record.status = 200
            record.tunnel = .intercept
            // Counted under the scopes whose origin the tunnel is for (the requests inside are too).
            record.scopes = arrival.scope.policy.covering(origin, client: client.name).map(\.name)
            record.bytesOut = UInt64(Self.connectionEstablished.count)
            actions.append(.writeToClient(Self.connectionEstablished))
            actions.append(.startClientTLS(origin))
            mode = .intercepted(origin, client: client)
            // The handshake runs under `client_header`, as the head it precedes would.
            state = .handshaking(record)
            arm(.clientHead)
        case .tunnel(let origin, let client):
            record.origin = origin
            let request = ClientRequest(head: head, origin: origin, pathAndQuery: "", userinfo: nil, framing: .none, client: client)
            let hop = Hop(target: HopTarget(origin: origin, method: "CONNECT", pathAndQuery: ""), decision: ScopeDecision(),
                          head: [], body: .none, isUpgrade: false)
            start(Exchange(request: request, scope: arrival.scope, wallClock: arrival.wallClock, record: record, hop: hop, hopID: nextHopID(),
                           requestBody: .complete), transport: .raw)
        case .forward(let request):
            record.origin = request.origin
            record.pathAndQuery = request.pathAndQuery
            covering = (arrival.scope.policy, request.client.name)
            switch bodyReadFirst(request, scope: arrival.scope) {
            case .refuse(let error):
                // Known from the head alone (a Content-Length over the limit): nothing is read.
                reject(error, record: record, consumedBody: false)
            case .read(let limit, let signingScope):
                // The scope decision depends on the body (a form's `_method`), placeholders in it
                // are replaced, or a signature hashes it: read it first.
                if head.version == .http1_1, head.fields.containsListToken("expect", "100-continue") {
                    // The body is read here, not by the origin: the client waiting for the origin's
                    // 100 would otherwise wait for nothing (RFC 9110 §10.1.1 lets a proxy answer it).
                    actions.append(.writeToClient(Self.continueResponse))
                    record.bytesOut += UInt64(Self.continueResponse.count)
                }
                state = .collecting(Collection(request: request, scope: arrival.scope, wallClock: arrival.wallClock, record: record,
                                               limit: limit, signingScope: signingScope))
                actions.append(.collectRequestBody(request.framing, limit: limit))
                arm(.stall)
            case .stream:
                plan(request, body: request.framing == .none ? .none : .streamed(request.framing), scope: arrival.scope,
                     wallClock: arrival.wallClock, record: record)
            }
        }
    }

    /// How much of the request body is read whole before its hop is planned; nil: it streams.
    /// A form to a scope limiting `methods:` may carry `_method`; a JSON or form body to an origin
    /// whose scopes substitute placeholders has them replaced (up to `maxSubstitutedBody`; a
    /// larger one announced by Content-Length streams, and the guard refuses any placeholder in it).
    private enum BodyRead {
        case stream
        case read(limit: Int, signingScope: String?)
        case refuse(ProxyError)
    }

    private func bodyReadFirst(_ request: ClientRequest, scope: ScopeContext) -> BodyRead {
        guard request.framing != .none else { return .stream }
        let head = request.head
        var limit: Int?
        if scope.policy.needsBodyInspection(method: head.method, origin: request.origin, pathAndQuery: request.pathAndQuery,
                                            contentType: head.fields.singleValue(of: "content-type").agreed,
                                            contentEncoding: head.fields.listMembers("content-encoding").joined(separator: ","),
                                            client: request.client.name) {
            limit = settings.limits.maxInspectedBody
        }
        if !scope.values.placeholders.isEmpty, scope.policy.substitutes(for: request.origin, client: request.client.name),
           PlaceholderSite.body(of: head.fields) != nil {
            let fits = if case .contentLength(let length) = request.framing { length <= UInt64(settings.limits.maxSubstitutedBody) } else { true }
            if fits { limit = max(limit ?? 0, settings.limits.maxSubstitutedBody) }
        }
        // A SigV4 scope that hashes bodies (not s3) needs this one whole, up to its limit.
        if let signer = scope.policy.signingScope(method: head.method, origin: request.origin, pathAndQuery: request.pathAndQuery,
                                                  client: request.client.name),
           case .awsSigV4(let spec) = signer.signing, case .hashBody(let hashLimit) = spec.payloadHashing {
            if case .contentLength(let length) = request.framing, length > UInt64(hashLimit) {
                return .refuse(.bodyTooLargeToSign(scope: signer.name, limit: hashLimit))
            }
            return .read(limit: max(limit ?? 0, hashLimit), signingScope: signer.name)
        }
        return limit.map { .read(limit: $0, signingScope: nil) } ?? .stream
    }

    /// The client's own hop: scoped, then started.
    private mutating func plan(_ request: ClientRequest, body: HopBody, scope: ScopeContext, wallClock: Int64, record: ExchangeRecord,
                               tokens: [String: OAuth2AccessToken] = [:]) {
        var record = record
        let target = HopTarget(origin: request.origin, method: request.head.method, pathAndQuery: request.pathAndQuery)
        if let missing = missingToken(request, target, chain: RedirectChain(), scope: scope, have: tokens) {
            awaitToken(missing, PendingHop(resume: .first(request, body, scope, wallClock: wallClock), record: record, tokens: tokens,
                                           waitingFor: missing), scope: scope)
            return
        }
        switch HopPlanner.plan(request, to: target, body: body, chain: RedirectChain(), scope: scope, requestID: record.id,
                               wallClock: wallClock, tokens: tokens.mapValues(\.value)) {
        case .failure(let error):
            let consumed = { if case .streamed = body { false } else { true } }()
            reject(error, record: record, consumedBody: consumed && request.head.wantsKeepAlive, clientVersion: request.head.version)
        case .success(let hop):
            record.note(hop.decision)
            record.substituted = hop.substituted
            record.signed = hop.signed
            let exchange = Exchange(request: request, scope: scope, wallClock: wallClock, record: record, hop: hop, hopID: nextHopID(),
                                    requestBody: { if case .streamed = body { .streaming } else { .complete } }())
            exchange.tokens = tokens
            if case .replayed(let bytes) = body {
                exchange.captured = bytes
                exchange.requestPayload = UInt64(bytes.count)
            }
            start(exchange, transport: hop.origin.scheme == .https ? .tls : .plain)
        }
    }

    /// Progress of a body read before its hop is planned.
    private mutating func collected(_ progress: CollectedBody) {
        guard case .collecting(let collection) = state else { return }
        switch progress {
        case .progressed:
            arm(.stall)
        case .complete(let bytes):
            cancelTimer()
            plan(collection.request, body: .replayed(bytes), scope: collection.scope, wallClock: collection.wallClock,
                 record: collection.record)
        case .tooLarge:
            // Fail closed: a body the proxy cannot inspect cannot be shown to stay within the scope.
            let error: ProxyError = collection.signingScope.map { .bodyTooLargeToSign(scope: $0, limit: collection.limit) }
                ?? .bodyTooLargeToInspect(limit: collection.limit)
            reject(error, record: collection.record, consumedBody: false)
        case .invalid:
            reject(.malformedRequest("invalid chunked request body"), record: collection.record, consumedBody: false)
        }
    }

    private mutating func start(_ exchange: Exchange, transport: UpstreamTransport) {
        state = .exchange(exchange)
        arm(.connect)
        actions.append(.connect(exchange.hopID, exchange.hop.origin, transport, reusePooled: transport != .raw && !exchange.retried))
    }

    private mutating func upstreamConnected(_ hop: HopID, reused: Bool) {
        guard case .exchange(let exchange) = state, exchange.hopID == hop, !exchange.connected else { return }
        exchange.connected = true
        exchange.reused = reused
        if exchange.isConnect {
            var record = exchange.record
            // A tunnel's line counts the bytes spliced each way, not the CONNECT exchange itself.
            record.status = 200
            record.tunnel = .tunnel
            record.bytesIn = 0
            state = .tunnel(Tunnel(hopID: hop, record: record))
            actions.append(.writeToClient(Self.connectionEstablished))
            actions.append(.splice(hop))
            arm(.stall)
            return
        }
        var bytes = exchange.hop.head
        if let body = exchange.hop.outgoingBody { bytes += body }
        actions.append(.sendToUpstream(hop, bytes))
        if exchange.requestBody == .complete {
            arm(.responseHead)
        } else {
            let capture = exchange.scope.redirects.mode == .follow ? settings.limits.maxReplayBody : nil
            let observe = settings.logBodies ? settings.limits.maxObservedBody : nil
            actions.append(.pumpRequestBody(hop, exchange.request.framing, capture: capture, observe: observe,
                                            guard: exchange.hop.bodyGuard))
            arm(.stall)
        }
    }

    // MARK: Request body → upstream

    private mutating func requestBody(_ hop: HopID, _ progress: BodyProgress) {
        guard case .exchange(let exchange) = state, exchange.hopID == hop, exchange.requestBody == .streaming else { return }
        switch progress {
        case .moved(let payload, let consumed):
            exchange.requestPayload += payload
            exchange.requestConsumed += consumed
            // Progress restarts the stall timer; no progress leaves a running one alone.
            if payload > 0, case .awaiting = exchange.response { arm(.stall) }
        case .complete(let payload, let consumed, let captured, let observed):
            exchange.requestPayload += payload
            exchange.requestConsumed += consumed
            exchange.requestBody = .complete
            exchange.captured = captured
            exchange.requestObserved = observed.map { body in
                var labelled = body
                labelled.contentType = exchange.request.head.fields.singleValue(of: "content-type").agreed
                return labelled
            }
            if case .awaiting = exchange.response { arm(.responseHead) }
        case .invalid, .cut:
            // Part of the body may already be upstream: that request is cut, never completed.
            fail(exchange, .malformedRequest("invalid chunked request body"), closeClient: true)
        case .blocked(let finding, let bytesSent):
            // The engine forwarded only the bytes before the value and stopped: cut the hop (the
            // origin never sees a complete request) and answer 403 if no response has started.
            exchange.record.guardFinding = finding
            // The log's `injected` and the metric list only headers that reached an origin: a head
            // still in the proxy's buffer when the body was refused was never sent.
            if !bytesSent { exchange.record.injected = [] }
            let origin = exchange.hop.origin
            let facts = exchange.hop.placeholderRequest
                ?? PlaceholderRequest(method: exchange.hop.target.method, pathAndQuery: exchange.hop.target.pathAndQuery)
            fail(exchange, HopPlanner.blocked(finding, where: "body", origin, exchange.scope.policy, client: exchange.request.client.name,
                                              request: facts),
                 closeClient: true)
        case .scrubbed:
            break  // request bodies are guarded, never scrubbed
        }
    }

    // MARK: Response head ← upstream

    private mutating func responseHead(_ head: ResponseHead, _ exchange: Exchange, clientPipelined: Bool) {
                guard case .awaiting(let interims) = exchange.response else { return }
        if head.isInformational {
            if head.status == 101 {
                guard exchange.hop.isUpgrade else {
                    fail(exchange, .badUpstreamResponse(exchange.hop.origin, "101 without an upgrade request"))
                    return
                }
                // After a 101 every byte the client sends goes to this origin. Bytes it sent before
                // seeing the 101 belong to requests it pipelined, meant for whatever origins they
                // name: refuse rather than hand them (and their credentials) to this one.
                guard !clientPipelined else {
                    fail(exchange, .badUpstreamResponse(exchange.hop.origin, "101 on a connection with pipelined requests"),
                         closeClient: true)
                    return
                }
                var switching = Forwarding.clientResponse(from: head, framing: .none, clientVersion: exchange.request.head.version,
                                                          keepAlive: true, switchingProtocols: true)
                var record = exchange.record
                // The 101's head is scrubbed; the tunnel after it is not (bytes are spliced).
                if let scrub = exchange.hop.scrub { record.scrubbed += ResponseScrub.scrubHead(&switching, with: scrub) }
                record.status = 101
                record.responseFields = switching.fields
                record.bytesIn += exchange.requestPayload
                state = .tunnel(Tunnel(hopID: exchange.hopID, record: record))
                actions.append(.writeToClient(switching.serialized()))
                actions.append(.splice(exchange.hopID))
                arm(.stall)
                return
            }
            guard interims < settings.limits.maxInformationalResponses else {
                fail(exchange, .badUpstreamResponse(exchange.hop.origin, "too many interim responses"))
                return
            }
            exchange.response = .awaiting(interims: interims + 1)
            // 1xx must not go to an HTTP/1.0 client (RFC 9110 §15.2).
            if exchange.request.head.version == .http1_1 {
                var interim = Forwarding.clientResponse(from: head, framing: .none, clientVersion: .http1_1, keepAlive: true)
                if let scrub = exchange.hop.scrub { exchange.record.scrubbed += ResponseScrub.scrubHead(&interim, with: scrub) }
                actions.append(.writeToClient(interim.serialized()))
            }
            return
        }

        if head.status == 401 {
            // The origin refused the token this hop carried: the next request gets a new one (the
            // source ignores this if a newer token has replaced it meanwhile).
            for (secret, token) in exchange.tokens.sorted(by: { $0.key < $1.key }) {
                actions.append(.markTokenStale(secret: secret, token, from: exchange.scope))
            }
        }
        let context = ResponseDirector.Context(
            request: exchange.request, hop: exchange.hop, chain: exchange.chain, mode: mode, scope: exchange.scope,
            requestComplete: exchange.requestBody == .complete,
            // A followed hop replays what it sent (a 303 made it a bodiless GET); the client's first
            // hop, what the client sent.
            replayableBody: replayedBody(exchange.hop) ?? (exchange.request.framing == .none ? [] : exchange.captured))
        switch ResponseDirector.direct(head, context) {
        case .relay(let head, let redirect):
            exchange.record.redirect = redirect
            relay(head, exchange)
        case .refuse(let error, let redirect):
            exchange.record.redirect = redirect
            fail(exchange, error)  // the redirect's target receives nothing
        case .follow(let target, let body, let redirect):
            follow(exchange, response: head, to: target, body: body, redirect: redirect)
        }
    }

    private func replayedBody(_ hop: Hop) -> [UInt8]? {
        if case .replayed(let bytes) = hop.body { return bytes }
        return nil
    }

    private mutating func relay(_ head: ResponseHead, _ exchange: Exchange) {
                let framing: BodyFraming
        do {
            framing = try BodyFraming.forResponse(head, requestMethod: exchange.hop.target.method)
        } catch {
            fail(exchange, .badUpstreamResponse(exchange.hop.origin, error.responseProblem))
            return
        }
        let version = exchange.request.head.version
        let clientFraming = Forwarding.clientFraming(upstream: framing, clientVersion: version)
        let keepAlive = exchange.request.head.wantsKeepAlive && !draining && !clientInputClosed
            && clientFraming != .untilClose && exchange.requestBody == .complete
        var clientHead = Forwarding.clientResponse(from: head, framing: clientFraming, clientVersion: version, keepAlive: keepAlive)
        clientHead.fields.set(name: "X-Request-ID", value: exchange.record.id)
        var bodyScrub = exchange.hop.scrub
        if let scrub = exchange.hop.scrub {
            exchange.record.scrubbed += ResponseScrub.scrubHead(&clientHead, with: scrub)
            if let encoding = ResponseScrub.unscannableEncoding(clientHead.fields) {
                guard exchange.scope.protection.scrub != .strict else {
                    // Strict asked for identity; an origin that compresses anyway is not relayed
                    // unscanned: fail closed, the body never reaches the client.
                    fail(exchange, .badUpstreamResponse(exchange.hop.origin,
                                                        "\(encoding) body despite Accept-Encoding: identity (scrub: strict cannot scan it)"))
                    return
                }
                // Said in the log, never silent: a compressed body passes unscanned (`scrub: strict`
                // asks scoped origins for identity bodies).
                exchange.record.scrubSkipped = encoding
                bodyScrub = nil
            }
        }
        let bytes = clientHead.serialized()
        exchange.record.status = head.status
        exchange.record.responseFields = clientHead.fields
        exchange.record.bytesOut += UInt64(bytes.count)
        exchange.response = .relaying(allowsReuse: head.allowsReuse, delimitedByClose: framing == .untilClose,
                                      keepAlive: keepAlive, payload: 0)
        actions.append(.writeToClient(bytes))
        actions.append(.relayResponseBody(exchange.hopID, inbound: framing, outbound: clientFraming,
                                          observe: settings.logBodies ? settings.limits.maxObservedBody : nil, scrub: bodyScrub))
        arm(.stall)
    }

    /// The next hop of a chain the proxy follows: the 3xx's connection is let go (never reused: its
    /// body was not read), the hop gets its own log line, and the request is scoped afresh.
    private mutating func follow(_ exchange: Exchange, response: ResponseHead, to target: HopTarget, body: HopBody,
                                 redirect: RedirectRecord) {
                actions.append(.releaseUpstream(exchange.hopID, reuse: false))
        var record = exchange.record
        record.status = response.status
        record.responseFields = response.fields
        record.redirect = redirect
        record.bytesIn += exchange.requestPayload
        emit(record)

        let chain = ResponseDirector.chain(after: exchange.chain, hop: exchange.hop, to: target, request: exchange.request)
        var next = ExchangeRecord(id: record.id, client: peer, method: target.method, startedAt: record.startedAt)
        next.clientID = record.clientID
        next.origin = target.origin
        next.pathAndQuery = target.pathAndQuery
        next.requestFields = exchange.request.head.fields
        planFollowed(exchange, to: target, body: body, chain: chain, record: next)
    }

    /// A followed hop, planned (once any access token it needs is here) and started.
    private mutating func planFollowed(_ exchange: Exchange, to target: HopTarget, body: HopBody, chain: RedirectChain,
                                       record next: ExchangeRecord, tokens: [String: OAuth2AccessToken] = [:]) {
        var next = next
        if let missing = missingToken(exchange.request, target, chain: chain, scope: exchange.scope, have: tokens) {
            awaitToken(missing, PendingHop(resume: .follow(exchange, target, body, chain), record: next, tokens: tokens, waitingFor: missing),
                       scope: exchange.scope)
            return
        }
        switch HopPlanner.plan(exchange.request, to: target, body: body, chain: chain, scope: exchange.scope, requestID: next.id,
                               wallClock: exchange.wallClock, tokens: tokens.mapValues(\.value)) {
        case .failure(let error):
            // The previous hop's scrub: its origin may have put a value into this hop's target.
            reject(error, record: next, consumedBody: exchange.request.head.wantsKeepAlive,
                   clientVersion: exchange.request.head.version, scrub: exchange.hop.scrub)
        case .success(let hop):
            next.note(hop.decision)
            next.substituted = hop.substituted
            next.signed = hop.signed
            exchange.record = next
            exchange.chain = chain
            exchange.hop = hop
            exchange.hopID = nextHopID()
            exchange.connected = false
            exchange.reused = false
            exchange.retried = false
            exchange.requestPayload = 0
            exchange.requestConsumed = 0
            exchange.response = .awaiting(interims: 0)
            exchange.upstreamClosed = false
            exchange.tokens = tokens
            start(exchange, transport: hop.origin.scheme == .https ? .tls : .plain)
        }
    }

    // MARK: Access tokens

    /// The first access token (`oauth2:` secret) this hop's injections need that the exchange does
    /// not hold yet; nil when it holds them all (or needs none).
    private func missingToken(_ request: ClientRequest, _ target: HopTarget, chain: RedirectChain, scope: ScopeContext,
                              have: [String: OAuth2AccessToken]) -> String? {
        guard !scope.tokenSecrets.isEmpty else { return nil }
        let needed = scope.policy.injectedSecrets(method: target.method, origin: target.origin, pathAndQuery: target.pathAndQuery,
                                                  client: request.client.name, chain: chain.context(forHopTo: target, of: request))
        return needed.filter { scope.tokenSecrets.contains($0) && have[$0] == nil }.sorted().first
    }

    /// Nothing goes upstream until the token is here; no timer runs (the token source has its own
    /// timeouts and always answers), and the client's bytes wait in their buffer.
    private mutating func awaitToken(_ secret: String, _ pending: PendingHop, scope: ScopeContext) {
        state = .awaitingToken(pending)
        actions.append(.acquireToken(secret: secret, from: scope))
    }

    private mutating func resume(_ pending: PendingHop, tokens: [String: OAuth2AccessToken]) {
        switch pending.resume {
        case .first(let request, let body, let scope, let wallClock):
            plan(request, body: body, scope: scope, wallClock: wallClock, record: pending.record, tokens: tokens)
        case .follow(let exchange, let target, let body, let chain):
            state = .exchange(exchange)
            planFollowed(exchange, to: target, body: body, chain: chain, record: pending.record, tokens: tokens)
        }
    }

    /// Fail closed: 502 naming the scope and the token endpoint's origin, never what it said.
    private mutating func tokenFailed(_ pending: PendingHop, secret: String, endpoint: Origin?, reason: String) {
        let request = pending.request
        let owner = (pending.record.origin.map { pending.scopeContext.policy.covering($0, client: request.client.name) } ?? [])
            .first { $0.inject.contains { $0.template.secretNames.contains(secret) } }
        let consumed = { () -> Bool in
            switch pending.resume {
            case .first(_, let body, _, _): if case .streamed = body { false } else { true }
            case .follow: true
            }
        }()
        reject(.tokenUnavailable(scope: owner?.name ?? "?", secret: secret, endpoint: endpoint, reason: reason),
               record: pending.record, consumedBody: consumed && request.head.wantsKeepAlive, clientVersion: request.head.version)
    }

    // MARK: Response body → client

    private mutating func responseBody(_ hop: HopID, _ progress: BodyProgress) {
        guard case .exchange(let exchange) = state, exchange.hopID == hop,
              case .relaying(let reuse, let byClose, let keepAlive, let payload) = exchange.response else { return }
        switch progress {
        case .moved(let moved, _):
            exchange.response = .relaying(allowsReuse: reuse, delimitedByClose: byClose, keepAlive: keepAlive, payload: payload + moved)
            if moved > 0 { arm(.stall) }
        case .complete(let moved, _, _, let observed):
            exchange.response = .relaying(allowsReuse: reuse, delimitedByClose: byClose, keepAlive: keepAlive, payload: payload + moved)
            exchange.record.responseBody = observed.map { [contentType = exchange.record.responseFields?.singleValue(of: "content-type").agreed] body in
                var labelled = body
                labelled.contentType = contentType
                return labelled
            }
            finish(exchange)
        case .invalid, .cut:
            exchange.response = .relaying(allowsReuse: reuse, delimitedByClose: byClose, keepAlive: keepAlive, payload: payload)
            cut(exchange)
        case .scrubbed(let findings):
            exchange.record.scrubbed += findings
        case .blocked:
            break  // response bodies are scrubbed, never guarded
        }
    }

    /// The response went out whole: the upstream goes back to the pool when it is known clean, and
    /// the connection waits for the next request (or closes).
    private mutating func finish(_ exchange: Exchange) {
        guard case .relaying(let allowsReuse, let byClose, let keepAlive, let payload) = exchange.response else { return }
        cancelTimer()
        // Reuse only a connection known clean: whole request sent, whole response read, and the
        // origin did not ask to close (the engine also checks that nothing arrived after it).
        let reuse = allowsReuse && exchange.requestBody == .complete && !byClose && !exchange.upstreamClosed
        actions.append(.releaseUpstream(exchange.hopID, reuse: reuse))
        var record = exchange.record
        record.bytesIn += exchange.requestPayload
        record.bytesOut += payload
        record.requestBody = exchange.requestObserved
        emit(record)
        guard keepAlive, exchange.requestBody == .complete, !draining else {
            closeAfterFlush()
            return
        }
        awaitNextRequest()
    }

    private mutating func awaitNextRequest() {
        state = .awaitingHead(.idle)
        arm(.idle)
        actions.append(.readNextRequest)  // a pipelined request, answered in order
    }

    // MARK: Upstream hang-ups

    private mutating func upstreamClosed(_ hop: HopID, sawResponseBytes: Bool) {
        switch state {
        case .tunnel(var tunnel) where tunnel.hopID == hop && !tunnel.finishing:
            tunnel.finishing = true
            state = .tunnel(tunnel)
            actions.append(.finishTunnel(hop, closedSide: .upstream))
        case .exchange(let exchange) where exchange.hopID == hop && exchange.connected:
            exchange.upstreamClosed = true
            // A body being relayed: the engine finishes or cuts it once it has drained.
            guard case .awaiting = exchange.response else { return }
            // A pooled connection the origin closed just as it was reused: retry once on a fresh one,
            // but only when nothing of the response arrived, nothing of the body was taken, and the
            // method is idempotent: the origin may have run the request before closing, and a proxy
            // must not repeat a POST or PATCH on its own (RFC 9110 §9.2.2).
            if exchange.reused, !exchange.retried, !sawResponseBytes, exchange.requestConsumed == 0,
               Self.idempotentMethods.contains(exchange.hop.target.method) {
                actions.append(.releaseUpstream(exchange.hopID, reuse: false))
                exchange.hopID = nextHopID()
                exchange.connected = false
                exchange.reused = false
                exchange.retried = true
                exchange.upstreamClosed = false
                start(exchange, transport: exchange.hop.origin.scheme == .https ? .tls : .plain)
            } else if sawResponseBytes {
                fail(exchange, .badUpstreamResponse(exchange.hop.origin, "connection closed inside the response head"))
            } else {
                fail(exchange, .upstreamClosed(exchange.hop.origin))
            }
        default:
            break
        }
    }

    // MARK: Client hang-ups

    private mutating func clientClosedInput(buffered: Int) {
        switch state {
        case .handshaking(let record):
            interceptionFailed(record, .closedDuringHandshake)
        case .awaitingHead:
            // Whatever is buffered is an incomplete head that will never complete.
            closeAfterFlush()
        case .collecting:
            if buffered == 0 { closeNow() }
        case .awaitingToken(let pending):
            // A body that has not arrived whole cannot arrive any more: nothing was sent, close.
            if pending.request.framing != .none, buffered == 0 { closeNow() }
        case .exchange(let exchange):
            // A client may half-close once its request is sent; the response still goes out. Gone
            // mid-body with nothing left buffered, the request can never complete.
            if exchange.requestBody == .streaming, buffered == 0 { closeNow() }
        case .tunnel(var tunnel) where !tunnel.finishing:
            tunnel.finishing = true
            state = .tunnel(tunnel)
            actions.append(.finishTunnel(tunnel.hopID, closedSide: .client))
        case .tunnel, .closing, .closed:
            break
        }
    }

    // MARK: Timers

    private mutating func timerFired(_ purpose: TimerPurpose) {
        switch (purpose, state) {
        case (.clientHead, .awaitingHead(.started)):
            let record = ExchangeRecord(id: ids.next(), client: peer, method: nil, startedAt: 0)
            reject(.requestHeadTimeout, record: record, consumedBody: false)
        case (.clientHead, .awaitingHead), (.idle, .awaitingHead):
            closeNow()
        case (.clientHead, .handshaking(let record)):
            interceptionFailed(record, .handshakeTimeout)
        case (.connect, .exchange(let exchange)) where !exchange.connected:
            fail(exchange, .connectTimeout(exchange.hop.origin))
        case (.responseHead, .exchange(let exchange)):
            fail(exchange, .responseTimeout(exchange.hop.origin))
        case (.stall, .exchange(let exchange)):
            // No progress for `idle`. Before a response, that is the request body (once it is
            // complete, the response-head timer runs instead): the client stalled; say so and close,
            // as the request can never complete upstream. During a response: cut it.
            if case .awaiting = exchange.response {
                fail(exchange, .requestBodyTimeout, closeClient: true)
            } else {
                cut(exchange)
            }
        case (.stall, .tunnel):
            closeNow()
        case (.stall, .collecting(let collection)):
            reject(.requestBodyTimeout, record: collection.record, consumedBody: false)
        default:
            break
        }
    }

    // MARK: Failures and closing

    /// The intercepted CONNECT's client never got to a request: its line says why, and the
    /// connection closes (the 200 is long gone; there is nothing else to answer).
    private mutating func interceptionFailed(_ record: ExchangeRecord, _ why: InterceptionFailure) {
        guard case .intercepted(let origin, _) = mode else { return }
        var record = record
        record.failure = .proxy(.interceptionFailed(origin, why))
        emit(record)
        cancelTimer()
        state = .closing
        closeNow()
    }

    /// The exchange failed: its hop is released; before the response started the client gets an
    /// error, after it the response is cut.
    private mutating func fail(_ exchange: Exchange, _ error: ProxyError, closeClient: Bool = false) {
        actions.append(.releaseUpstream(exchange.hopID, reuse: false))
        if case .relaying = exchange.response {
            cut(exchange, releasing: false)
            return
        }
        var record = exchange.record
        record.bytesIn += exchange.requestPayload
        // The request never left (the connection failed): nothing was injected anywhere.
        if !exchange.connected { record.injected = [] }
        let consumed = !closeClient && exchange.requestBody == .complete && exchange.request.head.wantsKeepAlive
        state = .closing  // the hop is gone; reject decides what comes next
        reject(error, record: record, consumedBody: consumed, clientVersion: exchange.request.head.version, scrub: exchange.hop.scrub)
    }

    /// The response was already under way: close without completing it (a chunked body is left
    /// unterminated), so the client can never mistake a truncated body for a whole one.
    private mutating func cut(_ exchange: Exchange, releasing: Bool = true) {
        if releasing { actions.append(.releaseUpstream(exchange.hopID, reuse: false)) }
        var record = exchange.record
        record.bytesIn += exchange.requestPayload
        if case .relaying(_, _, _, let payload) = exchange.response { record.bytesOut += payload }
        record.failure = .responseCut
        emit(record)
        closeAfterFlush()
    }

    /// Answers a request the proxy will not (or can no longer) forward. Keeps the connection only
    /// when the request was read whole and the error leaves the byte stream in a known state.
    /// `scrub`: what the exchange's responses are scrubbed of; the proxy's own answer too (its
    /// message names origins, and a redirect can put a value into one).
    private mutating func reject(_ error: ProxyError, record: ExchangeRecord, consumedBody: Bool,
                                 clientVersion: HTTPVersion = .http1_1, scrub: SecretWatch? = nil) {
        cancelTimer()
        let keepAlive = consumedBody && error.allowsKeepAlive && !draining && !clientInputClosed
        var response = error.response(keepAlive: keepAlive, requestID: record.id, clientVersion: clientVersion)
        if let scrub { ResponseScrub.mask(&response, with: scrub) }
        var record = record
        if record.scopes.isEmpty, let covering { record.noteCoveringScopes(covering.policy, client: covering.client) }
        record.status = error.status
        record.failure = .proxy(error)
        record.bytesOut += UInt64(response.count)
        if case .tunnelDenied = error { record.tunnel = .deny }
        // What the guard stopped, for the log and the metrics (a body's finding is already there).
        switch error {
        case .secretEgressBlocked(let finding, _, _) where record.guardFinding == nil:
            record.guardFinding = finding
        case .placeholderOutOfScope(let secret, _, _, _) where record.guardFinding == nil:
            record.guardFinding = SecretFinding(secret: secret, encoding: .raw, isPlaceholder: true)
        default: break
        }
        actions.append(.writeToClient(response))
        emit(record)
        if keepAlive {
            awaitNextRequest()
        } else {
            closeAfterFlush()
        }
    }

    private mutating func closeAfterFlush() {
        state = .closing
        cancelTimer()
        actions.append(.closeClient(.afterFlush))
    }

    /// What was in flight is reported when the transport confirms the close (`connectionClosed`).
    private mutating func closeNow() {
        if case .closed = state { return }
        actions.append(.closeClient(.now))
    }

    /// The client connection is gone: release whatever hop is current and write the line of an
    /// exchange that did not get to write its own.
    private mutating func connectionClosed() {
        cancelTimer()
        switch state {
        case .exchange(let exchange):
            actions.append(.releaseUpstream(exchange.hopID, reuse: false))
            var record = exchange.record
            record.bytesIn += exchange.requestPayload
            if case .relaying(_, _, _, let payload) = exchange.response { record.bytesOut += payload }
            record.failure = .clientClosed
            emit(record)
        case .tunnel(let tunnel):
            actions.append(.releaseUpstream(tunnel.hopID, reuse: false))
            emit(tunnel.record)
        case .collecting(let collection):
            var record = collection.record
            record.failure = .clientClosed
            emit(record)
        case .awaitingToken(let pending):
            var record = pending.record
            record.failure = .clientClosed
            emit(record)
        case .handshaking(var record):
            if case .intercepted(let origin, _) = mode { record.failure = .proxy(.interceptionFailed(origin, .closedDuringHandshake)) }
            emit(record)
        case .awaitingHead, .closing, .closed:
            break
        }
        state = .closed
    }

    // MARK: Helpers

    private mutating func arm(_ purpose: TimerPurpose) {
        timer = purpose
        let timeouts = settings.timeouts
        let milliseconds = switch purpose {
        case .clientHead: timeouts.clientHeader
        case .idle, .stall: timeouts.idle
        case .connect: timeouts.connect
        case .responseHead: timeouts.upstream
        }
        actions.append(.armTimer(purpose, milliseconds: milliseconds))
    }

    private mutating func cancelTimer() {
        guard timer != nil else { return }
        timer = nil
        actions.append(.cancelTimer)
    }

    private mutating func emit(_ record: ExchangeRecord) {
        actions.append(.emit(record))
    }

    private mutating func nextHopID() -> HopID {
        lastHopID &+= 1
        return HopID(lastHopID)
    }

    private mutating func take() -> [ConnectionAction] {
        let taken = actions
        actions = []
        return taken
    }

    /// RFC 9110 §9.2.2.
    static let idempotentMethods: Set<String> = ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"]

    static let connectionEstablished = Array("HTTP/1.1 200 Connection Established\r\n\r\n".utf8)
    static let continueResponse = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)
}
