import HTTP1Codec
import ScopePolicy

/// The life of one client connection as a sans-I/O state machine: events in, actions out. The
/// engine reads bytes, parses heads with the codec and moves body bytes; every decision about what
/// happens next is made here and in the `ExchangeMachine` of the request under way, so it can be
/// tested with tables of events and no sockets.
///
///   awaitingHead ─ head ─▶ exchange(ExchangeMachine) ─ finished, keep-alive ─▶ awaitingHead
///        │                    │  └─ CONNECT connected / 101 ─▶ tunnel
///        └─ intercepted CONNECT ─▶ handshaking ─ TLS up ─▶ awaitingHead
///   any state ─ error, timeout, hang-up ─▶ closing ─ transport closed ─▶ closed
///
/// This machine owns what is about the client connection and its protocol (HTTP/1.1 here):
/// admission, pipelining and keep-alive, the tunnel, the intercepted TLS handshake, the timers and
/// the close; it renders in HTTP/1.1 what the exchange decides (`ExchangeOutcome`). The exchange
/// owns what is about the request: its body, the token wait, its hops, retry and redirects.
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

        public init(
            timeouts: Timeouts = Timeouts(), limits: Limits = Limits(),
            admission: RequestAdmission.Policy = .init(tunnel: .deny, canIntercept: false), logBodies: Bool = false
        ) {
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

    /// The two cases that carry a record are boxed (`indirect`): the state is matched on every
    /// event, and unboxed each match copied a whole `ExchangeRecord` (make cost: memcpy and
    /// reference counting in `dispatch`).
    public enum State {
        case awaitingHead(HeadWait)
        /// After `200 Connection Established` to an intercepted CONNECT: the client's TLS handshake
        /// is under way. The CONNECT's line waits for its outcome, so a client that refuses the
        /// local CA's certificate shows in the log as such, not as a tunnel that went quiet.
        indirect case handshaking(ExchangeRecord)
        /// A request is under way (its body collected, its token awaited, or its hop).
        case exchange(ExchangeMachine)
        indirect case tunnel(Tunnel)
        /// HTTP/2: the connection carries streams, each an exchange of its own (`StreamMachine`).
        case multiplexed
        /// The answer is written; the transport flushes it and closes. Nothing more is read.
        case closing
        case closed
    }

    /// A spliced tunnel (CONNECT, or an upgrade after 101).
    public struct Tunnel {
        let hopID: HopID
        var record: ExchangeRecord
        /// One side hung up and the engine is finishing it.
        var finishing = false
        /// A WebSocket whose frames are read (nil: bytes are spliced).
        var frames: WebSocketFramePlan? = nil
    }

    public let settings: Settings
    public private(set) var mode: ConnectionMode
    public private(set) var state: State = .awaitingHead(.fresh)
    /// Where the client connected from and what vouches for it (decides `clients:` identities).
    public let facts: ConnectionFacts
    private var peer: String { facts.peer }
    private var clientInputClosed = false
    private var draining = false
    private var effects: MachineEffects
    /// Ids for requests that bring no well-formed X-Request-ID of their own.
    private var ids: RequestIDGenerator
    /// The policy and client the admitted request is scoped under: a refusal before its scope
    /// decision is noted still names the scopes covering its origin (`reject`), computed only then
    /// so that a request that is not refused pays nothing for it.
    private var covering: (policy: ScopePolicy, client: String?)?
    /// Events a correct engine cannot deliver in the state they arrived in (`ImpossibleEvent`):
    /// each asserts in a debug build unless `toleratesImpossibleEvents`, and is counted always.
    public private(set) var impossibleEvents = 0
    /// The last impossible event, and the last event dropped on purpose as stale (for tests).
    public private(set) var lastImpossible: ImpossibleEvent?
    public private(set) var lastIgnored: StaleEvent?
    /// Set by harnesses that feed arbitrary events (the fuzzer, random walks): impossible events
    /// are then only counted.
    public var toleratesImpossibleEvents = false

    public init(settings: Settings, mode: ConnectionMode, facts: ConnectionFacts, ids: RequestIDGenerator) {
        self.settings = settings
        self.mode = mode
        self.facts = facts
        self.ids = ids
        effects = MachineEffects(timeouts: settings.timeouts, originalDestination: facts.captured?.destination.description)
    }

    public init(settings: Settings, mode: ConnectionMode, peer: String, ids: RequestIDGenerator) {
        self.init(settings: settings, mode: mode, facts: ConnectionFacts(peer: peer), ids: ids)
    }

    /// The first actions of a new connection.
    public mutating func start() -> [ConnectionAction] {
        effects.arm(.clientHead)
        return effects.take()
    }

    /// A connection captured by the transparent listener whose first bytes were TLS and whose TLS
    /// the proxy has not terminated (a tunnel, or a refusal before interception): the client never
    /// sent a CONNECT, so nothing of HTTP is written to it.
    private var speaksTLSWithoutHTTP: Bool {
        guard facts.captured?.tls == true else { return false }
        if case .intercepted = mode { return false }
        return true
    }

    private var isLive: Bool {
        switch state {
        case .closing, .closed: false
        default: true
        }
    }

    // MARK: Events

    public mutating func handle(_ event: ConnectionEvent) -> [ConnectionAction] {
        var taken: [ConnectionAction] = []
        handle(event, into: &taken)
        return taken
    }

    /// `handle`, appending the actions to `sink` (the engine reuses one buffer: no allocation per event).
    public mutating func handle(_ event: ConnectionEvent, into sink: inout [ConnectionAction]) {
        swap(&effects.actions, &sink)
        defer { swap(&effects.actions, &sink) }
        dispatch(event)
    }

    private mutating func dispatch(_ event: ConnectionEvent) {
        switch event {
        case .headStarted:
            guard case .awaitingHead(let wait) = state, wait != .started else { return ignore(isLive ? .outOfTurn : .afterClose) }
            if wait == .idle { effects.arm(.clientHead) }
            state = .awaitingHead(.started)
        case .requestHead(let head, let headBytes, let arrival):
            guard isAwaitingHead else { return ignore(isLive ? .outOfTurn : .afterClose) }
            admit(head, headBytes: headBytes, arrival)
        case .requestHeadInvalid(let error, let arrival):
            guard isAwaitingHead else { return ignore(isLive ? .outOfTurn : .afterClose) }
            let record = ExchangeRecord(id: ids.next(), client: peer, method: nil, startedAt: arrival.now)
            reject(ProxyError(error), record: record, consumedBody: false)
        case .clientInputClosed(let buffered):
            clientInputClosed = true
            clientClosedInput(buffered: buffered)
        case .clientFailed:
            if case .handshaking(let record) = state { return interceptionFailed(record, .tlsError) }
            if case .closed = state { return ignore(.afterClose) }
            closeNow()
        case .clientTLSEstablished:
            guard case .handshaking(let record) = state else { return clientTLSOutOfHandshake() }
            emit(record)
            if draining {
                closeAfterFlush()
            } else {
                state = .awaitingHead(.fresh)
                effects.arm(.clientHead)
            }
        case .clientTLSFailed(let why):
            guard case .handshaking(let record) = state else { return clientTLSOutOfHandshake() }
            interceptionFailed(record, why)
        case .switchedToHTTP2:
            // Only before the first byte of an HTTP/1.1 head: a connection is one protocol or the other.
            guard case .awaitingHead(let wait) = state, wait != .started else { return impossible(.http2AfterHTTP1) }
            effects.cancelTimer()
            state = .multiplexed
        case .upstreamConnected(let hop, let reused, let peer):
            toExchange(.upstreamConnected(hop, reused: reused, peer: peer))
        case .upstreamConnectFailed(let hop, let error):
            toExchange(.upstreamConnectFailed(hop, error))
        case .requestBody(let hop, let progress):
            toExchange(.requestBody(hop, progress))
        case .collectedBody(let progress):
            toExchange(.collectedBody(progress), otherwise: .uncollectedBody)
        case .responseHead(let hop, let head, let clientPipelined):
            toExchange(.responseHead(hop, head), clientPipelined: clientPipelined)
        case .responseHeadInvalid(let hop, let reason):
            toExchange(.responseHeadInvalid(hop, reason: reason))
        case .responseBody(let hop, let progress):
            toExchange(.responseBody(hop, progress))
        case .upstreamClosed(let hop, let sawResponseBytes):
            if case .tunnel(var tunnel) = state {
                guard tunnel.hopID == hop else { return ignore(.staleHop) }
                guard !tunnel.finishing else { return ignore(.notAwaited) }
                tunnel.finishing = true
                state = .tunnel(tunnel)
                effects.append(.finishTunnel(hop, closedSide: .upstream))
            } else {
                toExchange(.upstreamClosed(hop, sawResponseBytes: sawResponseBytes))
            }
        case .tunnelBytes(let hop, let fromClient, let fromUpstream):
            guard case .tunnel(var tunnel) = state, tunnel.hopID == hop else { return ignore(isLive ? .staleHop : .afterClose) }
            tunnel.record.bytesIn += fromClient
            tunnel.record.bytesOut += fromUpstream
            state = .tunnel(tunnel)
            if fromClient + fromUpstream > 0 { effects.arm(.stall) }
        case .webSocketScrubbed(let hop, let findings):
            guard case .tunnel(var tunnel) = state, tunnel.hopID == hop, tunnel.frames != nil else {
                return ignore(isLive ? .staleHop : .afterClose)
            }
            tunnel.record.scrubbed += findings
            state = .tunnel(tunnel)
        case .webSocketStopped(let hop, let stop, let sender):
            guard case .tunnel(var tunnel) = state, tunnel.hopID == hop, let plan = tunnel.frames else {
                return ignore(isLive ? .staleHop : .afterClose)
            }
            webSocketStopped(&tunnel, stop, plan, sender: sender)
        case .timerFired(let purpose):
            guard effects.timer == purpose else { return ignore(.timerOfAnotherPurpose) }
            effects.timerFired()
            timerFired(purpose)
        case .drain:
            draining = true
            if case .awaitingHead(let wait) = state, wait != .started { closeNow() }
        case .connectionClosed:
            connectionClosed()
        case .tokenReady(let secret, let token):
            toExchange(.tokenReady(secret: secret, token), otherwise: .unrequestedToken)
        case .tokenFailed(let secret, let provider, let reason):
            toExchange(.tokenFailed(secret: secret, provider: provider, reason: reason), otherwise: .unrequestedToken)
        }
    }

    /// Dropped on purpose: the event is stale (`StaleEvent` says how).
    private mutating func ignore(_ reason: StaleEvent) {
        lastIgnored = reason
    }

    /// An event a correct engine cannot send now: asserted in debug builds, counted always.
    private mutating func impossible(_ reason: ImpossibleEvent) {
        impossibleEvents += 1
        lastImpossible = reason
        assert(toleratesImpossibleEvents, "impossible event for the connection machine: \(reason)")
    }

    private mutating func clientTLSOutOfHandshake() {
        guard case .intercepted = mode else { return impossible(.clientTLSWithoutInterception) }
        // Both of the engine's callbacks may report the same handshake; the second finds it done.
        ignore(isLive ? .notAwaited : .afterClose)
    }

    /// An event of the exchange under way, passed on and its outcome carried out. Without one:
    /// stale after a close or for a hop of the past (`staleHop`); `otherwise` names an event no
    /// live state without an exchange can receive.
    private mutating func toExchange(_ event: ExchangeEvent, clientPipelined: Bool = false, otherwise: ImpossibleEvent? = nil) {
        guard case .exchange(let exchange) = state else {
            if !isLive { return ignore(.afterClose) }
            if let otherwise { return impossible(otherwise) }
            return ignore(.staleHop)
        }
        carryOut(exchange.handle(event, &effects), of: exchange, clientPipelined: clientPipelined)
    }

    private mutating func carryOut(_ outcome: ExchangeOutcome, of exchange: ExchangeMachine, clientPipelined: Bool = false) {
        switch outcome {
        case .proceeding:
            break
        case .ignored(let reason):
            ignore(reason)
        case .impossible(let reason):
            impossible(reason)
        case .answer(let error, let record, let requestRead, let scrub):
            state = .closing  // the exchange is over; reject decides what comes next
            reject(
                error, record: record, consumedBody: requestRead && exchange.request.head.wantsKeepAlive,
                clientVersion: exchange.request.head.version, scrub: scrub)
        case .interim(let head):
            // 1xx must not go to an HTTP/1.0 client (RFC 9110 §15.2).
            guard exchange.request.head.version == .http1_1 else { return }
            var interim = Forwarding.clientResponse(from: head, framing: .none, clientVersion: .http1_1, keepAlive: true)
            exchange.scrub(&interim)
            effects.append(.writeToClient(interim.serialized()))
        case .response(let head, let framing):
            respond(head, framing: framing, exchange)
        case .switchingProtocols(let head):
            switchProtocols(head, exchange, clientPipelined: clientPipelined)
        case .tunnelEstablished(let hop, let record):
            // A captured client sent a ClientHello, not a CONNECT: its bytes go to the origin as they are.
            if !speaksTLSWithoutHTTP { effects.append(.writeToClient(Self.connectionEstablished)) }
            state = .tunnel(Tunnel(hopID: hop, record: record))
            effects.append(.splice(hop))
            effects.arm(.stall)
        case .finished(let keepClient):
            guard keepClient, !draining else { return closeAfterFlush() }
            awaitNextRequest()
        case .cut:
            closeAfterFlush()
        }
    }

    // MARK: Request head → admission → exchange

    private mutating func admit(_ head: RequestHead, headBytes: Int, _ arrival: Arrival) {
        effects.cancelTimer()
        let clientID = head.fields.first("x-request-id").flatMap { RequestID.isWellFormed($0) ? $0 : nil }
        var record = ExchangeRecord(id: clientID ?? ids.next(), client: peer, method: head.method, startedAt: arrival.now)
        record.bytesIn = UInt64(headBytes)
        record.mode = mode
        // A CONNECT's line says what became of the tunnel; the protocol is that of what runs in it.
        if head.method != "CONNECT" { record.proto = .init(http1: head.version) }
        record.requestFields = head.fields
        if case .intercepted(_, let client) = mode { record.clientID = client.name }
        let admission = RequestAdmission.admit(
            head, mode: mode, scope: arrival.scope, policy: settings.admission,
            facts: facts, now: arrival.now)
        covering = nil
        switch admission {
        case .reject(.rateLimited(let client, _)): record.clientID = client
        // Recognised, then refused by its egress rules: the line names the client like any other.
        case .reject(.egressDenied(let refusal)): record.clientID = refusal.client
        case .intercept(_, let client, _), .tunnel(_, let client, _): record.clientID = client.name
        case .forward(let request): record.clientID = request.client.name
        case .reject: break
        }
        switch admission {
        case .reject(let error):
            // Nothing was forwarded and the body (if any) was not read: answer and close. The line
            // still names where the request was going whenever its target can be read.
            record.noteTarget(of: head, fixedOrigin: mode.fixedOrigin)
            reject(error, record: record, consumedBody: false)
        case .intercept(let origin, let client, let egress):
            record.origin = origin
            if let rule = egress.reported {
                record.egressReported = EgressNote(decision: .reportDeny, rule: rule, destination: origin.hostAndPort, address: nil)
            }
            record.status = 200
            record.tunnel = .intercept
            // Counted under the scopes whose origin the tunnel is for (the requests inside are too).
            record.scopes = arrival.scope.policy.covering(origin, client: client.name).map(\.name)
            if !speaksTLSWithoutHTTP {
                record.bytesOut = UInt64(Self.connectionEstablished.count)
                effects.append(.writeToClient(Self.connectionEstablished))
            }
            effects.append(.startClientTLS(origin))
            mode = .intercepted(origin, client: client)
            // The handshake runs under `client_header`, as the head it precedes would.
            state = .handshaking(record)
            effects.arm(.clientHead)
        case .tunnel(let origin, let client, let egress):
            record.origin = origin
            let request = ClientRequest(head: head, origin: origin, pathAndQuery: "", userinfo: nil, framing: .none, client: client)
            let exchange = newExchange(request, arrival, record)
            state = .exchange(exchange)
            exchange.startTunnel(to: origin, egress: egress, &effects)
        case .forward(let request):
            record.origin = request.origin
            record.pathAndQuery = request.pathAndQuery
            covering = (arrival.scope.policy, request.client.name)
            switch ExchangeMachine.bodyRead(request, scope: arrival.scope, limits: settings.limits) {
            case .refuse(let error):
                // Known from the head alone (a Content-Length over the limit): nothing is read.
                reject(error, record: record, consumedBody: false)
            case .read(let limit, let signingScope):
                // The scope decision depends on the body (a form's `_method`), placeholders in it
                // are replaced, or a signature hashes it: read it first.
                if head.version == .http1_1, head.fields.containsListToken("expect", "100-continue") {
                    // The body is read here, not by the origin: the client waiting for the origin's
                    // 100 would otherwise wait for nothing (RFC 9110 §10.1.1 lets a proxy answer it).
                    effects.append(.writeToClient(Self.continueResponse))
                    record.bytesOut += UInt64(Self.continueResponse.count)
                }
                let exchange = newExchange(request, arrival, record)
                state = .exchange(exchange)
                exchange.collect(limit: limit, signingScope: signingScope, &effects)
            case .stream:
                let exchange = newExchange(request, arrival, record)
                state = .exchange(exchange)
                carryOut(exchange.start(body: request.framing == .none ? .none : .streamed(request.framing), &effects), of: exchange)
            }
        }
    }

    private func newExchange(_ request: ClientRequest, _ arrival: Arrival, _ record: ExchangeRecord) -> ExchangeMachine {
        ExchangeMachine(
            request: request, scope: arrival.scope, wallClock: arrival.wallClock, record: record, mode: mode,
            limits: settings.limits, logBodies: settings.logBodies)
    }

    // MARK: Responses, rendered in HTTP/1.1

    /// The final head, rendered for this client: its framing and whether the connection stays open
    /// are decided here; the exchange scrubs it and relays the body.
    private mutating func respond(_ head: ResponseHead, framing: BodyFraming, _ exchange: ExchangeMachine) {
        let version = exchange.request.head.version
        let clientFraming = Forwarding.clientFraming(upstream: framing, clientVersion: version)
        let keepAlive =
            exchange.request.head.wantsKeepAlive && !draining && !clientInputClosed
            && clientFraming != .untilClose && exchange.requestBody == .complete
        var clientHead = Forwarding.clientResponse(from: head, framing: clientFraming, clientVersion: version, keepAlive: keepAlive)
        clientHead.fields.set(name: "X-Request-ID", value: exchange.record.id)
        exchange.scrub(&clientHead)
        let bodyScrub: SecretWatch?
        switch exchange.bodyScrub(for: clientHead, &effects) {
        case .refused(let outcome): return carryOut(outcome, of: exchange)
        case .scrub(let watch): bodyScrub = watch
        }
        let bytes = clientHead.serialized()
        effects.append(.writeToClient(bytes))
        exchange.relay(
            head, clientHead: clientHead, bytes: bytes.count, inbound: framing, outbound: clientFraming,
            keepClient: keepAlive, scrub: bodyScrub, &effects)
    }

    /// A 101: after it every byte the client sends goes to this origin. Bytes it sent before seeing
    /// the 101 belong to requests it pipelined, meant for whatever origins they name: refuse rather
    /// than hand them (and their credentials) to this one.
    private mutating func switchProtocols(_ head: ResponseHead, _ exchange: ExchangeMachine, clientPipelined: Bool) {
        guard !clientPipelined else {
            let origin = exchange.hopState?.hop.origin ?? exchange.request.origin
            let refused = exchange.fail(
                .badUpstreamResponse(origin, "101 on a connection with pipelined requests"),
                closeClient: true, &effects)
            return carryOut(refused, of: exchange)
        }
        var switching = Forwarding.clientResponse(
            from: head, framing: .none, clientVersion: exchange.request.head.version,
            keepAlive: true, switchingProtocols: true)
        guard let (hop, record, frames) = exchange.upgraded(&switching) else { return }
        state = .tunnel(Tunnel(hopID: hop, record: record, frames: frames))
        effects.append(.writeToClient(switching.serialized()))
        effects.append(frames.map { .relayWebSocket(hop, $0) } ?? .splice(hop))
        effects.arm(.stall)
    }

    /// The frame relay ended the WebSocket (the engine already sent both sides a close frame): the
    /// line says why, naming a secret found but never its value, and both connections close.
    private mutating func webSocketStopped(
        _ tunnel: inout Tunnel, _ stop: WebSocketFrameFilter.Stop, _ plan: WebSocketFramePlan, sender: WebSocketSender
    ) {
        tunnel.record.noteWebSocketStop(stop, plan, sender: sender)
        effects.release(tunnel.hopID)
        emit(tunnel.record)
        closeAfterFlush()
    }

    private mutating func awaitNextRequest() {
        state = .awaitingHead(.idle)
        effects.arm(.idle)
        effects.append(.readNextRequest)  // a pipelined request, answered in order
    }

    // MARK: Client hang-ups

    private mutating func clientClosedInput(buffered: Int) {
        switch state {
        case .handshaking(let record):
            interceptionFailed(record, .closedDuringHandshake)
        case .awaitingHead:
            // Whatever is buffered is an incomplete head that will never complete.
            closeAfterFlush()
        case .exchange(let exchange):
            if exchange.requestCannotComplete(buffered: buffered) { closeNow() }
        case .tunnel(var tunnel) where !tunnel.finishing:
            tunnel.finishing = true
            state = .tunnel(tunnel)
            effects.append(.finishTunnel(tunnel.hopID, closedSide: .client))
        case .tunnel, .multiplexed, .closing, .closed:
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
        case (.stall, .tunnel):
            closeNow()
        case (_, .exchange(let exchange)):
            carryOut(exchange.handle(.timerFired(purpose), &effects), of: exchange)
        default:
            ignore(isLive ? .timerOfEarlierPhase : .afterClose)
        }
    }

    // MARK: Failures and closing

    /// The intercepted CONNECT's client never got to a request: its line says why, and the
    /// connection closes (the 200 is long gone; there is nothing else to answer).
    private mutating func interceptionFailed(_ record: ExchangeRecord, _ why: ClientTLSFailure) {
        guard case .intercepted(let origin, _) = mode else { return }
        var record = record
        record.failure = .proxy(.interceptionFailed(origin, why))
        emit(record)
        effects.cancelTimer()
        state = .closing
        closeNow()
    }

    /// Answers a request the proxy will not (or can no longer) forward. Keeps the connection only
    /// when the request was read whole and the error leaves the byte stream in a known state.
    /// `scrub`: what the exchange's responses are scrubbed of; the proxy's own answer too (its
    /// message names origins, and a redirect can put a value into one).
    private mutating func reject(
        _ error: ProxyError, record: ExchangeRecord, consumedBody: Bool,
        clientVersion: HTTPVersion = .http1_1, scrub: SecretWatch? = nil
    ) {
        effects.cancelTimer()
        let keepAlive = consumedBody && error.allowsKeepAlive && !draining && !clientInputClosed
        var response = error.response(keepAlive: keepAlive, requestID: record.id, clientVersion: clientVersion)
        if let scrub { ResponseScrub.mask(&response, with: scrub) }
        var record = record
        if record.scopes.isEmpty, let covering { record.noteCoveringScopes(covering.policy, client: covering.client) }
        if speaksTLSWithoutHTTP {
            // A captured TLS connection whose TLS the proxy does not terminate has no place for an
            // HTTP answer: the refusal is the close and the log line.
            record.noteAnswer(error, bytes: 0)
            emit(record)
            return closeAfterFlush()
        }
        record.noteAnswer(error, bytes: response.count)
        effects.append(.writeToClient(response))
        emit(record)
        if keepAlive {
            awaitNextRequest()
        } else {
            closeAfterFlush()
        }
    }

    private mutating func closeAfterFlush() {
        state = .closing
        effects.cancelTimer()
        effects.append(.closeClient(.afterFlush))
    }

    /// What was in flight is reported when the transport confirms the close (`connectionClosed`).
    private mutating func closeNow() {
        if case .closed = state { return }
        effects.append(.closeClient(.now))
    }

    /// The client connection is gone: release whatever hop is current and write the line of an
    /// exchange that did not get to write its own.
    private mutating func connectionClosed() {
        effects.cancelTimer()
        switch state {
        case .exchange(let exchange):
            exchange.connectionClosed(&effects)
        case .tunnel(let tunnel):
            effects.release(tunnel.hopID)
            emit(tunnel.record)
        case .handshaking(var record):
            if case .intercepted(let origin, _) = mode { record.failure = .proxy(.interceptionFailed(origin, .closedDuringHandshake)) }
            emit(record)
        case .awaitingHead, .multiplexed, .closing, .closed:
            break
        }
        state = .closed
    }

    private mutating func emit(_ record: ExchangeRecord) {
        effects.emit(record)
    }

    static let connectionEstablished = Array("HTTP/1.1 200 Connection Established\r\n\r\n".utf8)
    static let continueResponse = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)
}
