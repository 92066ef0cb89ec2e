import HTTP1Codec
import ScopePolicy

/// One HTTP/2 request stream as a sans-I/O state machine: its header block in (`start`), events of
/// its exchange in (`handle`), `StreamAction`s out. A stream is one exchange: it is admitted by the
/// same `RequestAdmission.admit` as an HTTP/1.1 request and runs the same `ExchangeMachine`, so
/// every rule (strip, inject, placeholders, scrub, guard, signing, token waits, redirects) applies
/// per stream exactly as for HTTP/1.1. This machine only renders the exchange's outcomes as
/// HTTP/2: HEADERS and a body or END_STREAM, interim HEADERS, RST_STREAM.
///
///   awaitingHead ─ start ─▶ exchange(ExchangeMachine) ─ finished, answered, cut, reset ─▶ finished
///                                     └─ 101 to an RFC 8441 WebSocket ─▶ webSocket ─ closed, stopped ─▶ finished
///
/// An extended CONNECT for a WebSocket (RFC 8441) is mapped to the HTTP/1.1 upgrade request
/// (`ExtendedConnect`), so it meets every rule an HTTP/1.1 upgrade meets; the origin's 101, its
/// accept checked against the proxy's key, becomes `:status 200`, and the stream then carries
/// frames both ways under the same frame rules (`relayWebSocket`).
///
/// Everything here is about this one stream: its timer, its token wait, its hop. Nothing it does
/// can hold up another stream of the same connection (the connection's own limits, the flood
/// guard and GOAWAY belong to the engine's connection and `H2FloodGuard`).
///
/// Invariants (as `ConnectionMachine`'s): a stream gets at most one final response; nothing of a
/// hop the machine released reaches the client; a client-sent credential goes only to the origin
/// the client addressed; every hop that was connected is released exactly once.
public struct StreamMachine {
    public enum State {
        /// `start` has not run.
        case awaitingHead
        /// The stream's exchange is under way.
        case exchange(ExchangeMachine)
        /// An RFC 8441 WebSocket after its 200: frames move both ways until a side ends.
        case webSocket(WebSocketStream)
        /// Answered, relayed whole, cut or reset: the stream's line is written and its hop released.
        case finished
    }

    /// A WebSocket on a stream (the HTTP/1.1 path's `ConnectionMachine.Tunnel` with frames).
    public struct WebSocketStream {
        let hopID: HopID
        var record: ExchangeRecord
        /// The frames' plan (nil: no rule reads them, they move unread).
        let frames: WebSocketFramePlan?
    }

    public let settings: ConnectionMachine.Settings
    /// `.forwardProxy` for h2c on the plain listener, `.intercepted` inside a terminated CONNECT.
    public let mode: ConnectionMode
    public let facts: ConnectionFacts
    /// The log's `proto`: `.h2` (TLS, ALPN) or `.h2c` (prior knowledge).
    public let proto: ExchangeRecord.ClientProtocol
    public private(set) var state: State = .awaitingHead
    /// The mapped request (nil before `start`, or when its header block was refused).
    public private(set) var request: H2Request?
    /// The final response's HEADERS were handed to the engine.
    public private(set) var responseStarted = false
    /// The response is over on the wire (END_STREAM sent with it, or the stream reset).
    public private(set) var responseEnded = false
    /// The request id (X-Request-ID) of the stream, once started.
    public private(set) var requestID: String?
    private var effects: MachineEffects
    private var covering: (policy: ScopePolicy, client: String?)?
    public private(set) var impossibleEvents = 0
    public private(set) var lastImpossible: ImpossibleEvent?
    public private(set) var lastIgnored: StaleEvent?
    /// Set by harnesses that feed arbitrary events: impossible events are then only counted.
    public var toleratesImpossibleEvents = false
    /// The Sec-WebSocket-Key of an RFC 8441 stream's upgrade request (random; tests fix it).
    public var makeWebSocketKey: () -> String = ExtendedConnect.freshKey

    public init(settings: ConnectionMachine.Settings, mode: ConnectionMode, facts: ConnectionFacts, proto: ExchangeRecord.ClientProtocol) {
        self.settings = settings
        self.mode = mode
        self.facts = facts
        self.proto = proto
        effects = MachineEffects(timeouts: settings.timeouts, originalDestination: facts.captured?.destination.description)
    }

    // MARK: Queries (read-only)

    /// Whether the engine should parse a response head from this hop now.
    public func expectsResponseHead(from hop: HopID) -> Bool {
        guard case .exchange(let exchange) = state else { return false }
        return exchange.expectsResponseHead(from: hop)
    }

    /// The hop whose bytes may currently move (request pump, response relay, WebSocket frames), if any.
    public var currentHop: HopID? {
        switch state {
        case .exchange(let exchange): exchange.currentHop
        case .webSocket(let socket): socket.hopID
        case .awaitingHead, .finished: nil
        }
    }

    /// The current hop asks its origin for an HTTP/1.1 upgrade (an RFC 8441 WebSocket): its leg
    /// must speak HTTP/1.1, whatever the client speaks (an upgrade cannot ride HTTP/2).
    public var currentHopIsUpgrade: Bool {
        guard case .exchange(let exchange) = state else { return false }
        return exchange.currentHopIsUpgrade
    }

    /// The stream carries WebSocket frames (after its 200): the engine relays them.
    public var isWebSocket: Bool {
        if case .webSocket = state { return true }
        return false
    }

    /// The secret whose access token this stream waits for, if it waits.
    public var awaitedToken: String? {
        guard case .exchange(let exchange) = state else { return nil }
        return exchange.awaitedToken
    }

    /// The request body is being read whole before its hop is planned (`collectRequestBody`).
    public var isCollecting: Bool {
        guard case .exchange(let exchange) = state else { return false }
        return exchange.isCollecting
    }

    /// The stream's exchange is over: its line is written, its hop released; the engine drops the
    /// machine once the stream is closed. A stream that finished while the client was still
    /// sending its request (an answer before the body, a reset) is, once the response is sent,
    /// reset with NO_ERROR so the client stops sending (RFC 9113 §8.1); its DATA is discarded.
    public var isFinished: Bool {
        if case .finished = state { return true }
        return false
    }

    // MARK: Start

    /// The stream's whole header block arrived (after END_HEADERS). `endStream`: the HEADERS
    /// ended the stream (no body). `headBytes`: its size for the log's `bytes_in`. `ids`: the
    /// connection's generator, for a request that brings no well-formed X-Request-ID.
    public mutating func start(
        _ fields: [H2HeaderField], endStream: Bool, headBytes: Int, _ arrival: Arrival, ids: inout RequestIDGenerator,
        into sink: inout [StreamAction]
    ) {
        swap(&out, &sink)
        defer {
            flush()
            swap(&out, &sink)
        }
        guard case .awaitingHead = state else { return impossible(.notOnAStream) }
        let sentID = fields.first { $0.name == "x-request-id" }.map(\.value)
        let method = fields.first { $0.name == ":method" }.map(\.value).flatMap { HTTPField.isValidName($0) ? $0 : nil }
        var record = ExchangeRecord(
            id: sentID.flatMap { RequestID.isWellFormed($0) ? $0 : nil } ?? ids.next(), client: facts.peer, method: method,
            startedAt: arrival.now)
        requestID = record.id
        record.bytesIn = UInt64(max(0, headBytes))
        record.proto = proto
        record.mode = mode
        if case .intercepted(_, let client) = mode { record.clientID = client.name }
        switch H2RequestMapping.requestHead(fields, endStream: endStream, on: H2Connection(mode), webSocketKey: makeWebSocketKey) {
        case .failure(let error):
            // A header block HTTP/2 makes malformed: answered (RFC 9113 §8.1.1 lets a server
            // answer one), nothing forwarded; the line names the tunnel's origin where there is one.
            record.origin = mode.fixedOrigin
            reject(error, record: record)
        case .success(let mapped):
            request = mapped
            admit(mapped, record: record, arrival)
        }
    }

    /// The stream's actions so far (the exchange's, as `.exchange`, and the client's), in order.
    private var out: [StreamAction] = []

    /// An action for the client, after every exchange action appended before it.
    private mutating func client(_ action: StreamAction) {
        flush()
        out.append(action)
    }

    private mutating func flush() {
        guard !effects.actions.isEmpty else { return }
        for action in effects.take() { out.append(.exchange(action)) }
    }

    /// Admission exactly as for an HTTP/1.1 request head (`ConnectionMachine.admit`): proxy
    /// authentication and clients, rate limits, Host rules, loop refusal, body reading.
    private mutating func admit(_ mapped: H2Request, record: ExchangeRecord, _ arrival: Arrival) {
        let head = mapped.head
        var record = record
        // The log shows the fields the client sent: the chunked framing is the proxy's own.
        var sent = head.fields
        if mapped.reframedAsChunked { sent.removeAll("transfer-encoding") }
        // An RFC 8441 stream's upgrade fields and key are the proxy's own, not the client's.
        if mapped.isWebSocket { for name in ExtendedConnect.addedToRequest { sent.removeAll(name) } }
        record.requestFields = sent
        let admission = RequestAdmission.admit(
            head, mode: mode, scope: arrival.scope, policy: settings.admission, facts: facts, now: arrival.now)
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
            record.noteTarget(of: head, fixedOrigin: mode.fixedOrigin)
            reject(error, record: record)
        case .intercept, .tunnel:
            // The mapping refuses CONNECT before admission: a stream never becomes a tunnel.
            impossible(.notOnAStream)
            record.noteTarget(of: head, fixedOrigin: mode.fixedOrigin)
            reject(.connectOverHTTP2(extended: false), record: record)
        case .forward(let request):
            record.origin = request.origin
            record.pathAndQuery = request.pathAndQuery
            covering = (arrival.scope.policy, request.client.name)
            let exchange = ExchangeMachine(
                request: request, scope: arrival.scope, wallClock: arrival.wallClock, record: record, mode: mode,
                limits: settings.limits, logBodies: settings.logBodies)
            switch ExchangeMachine.bodyRead(request, scope: arrival.scope, limits: settings.limits) {
            case .refuse(let error):
                reject(error, record: record)
            case .read(let limit, let signingScope):
                if head.fields.containsListToken("expect", "100-continue") {
                    // The body is read here, not by the origin (RFC 9110 §10.1.1): a client waiting
                    // for a 100 before sending it would wait for nothing.
                    var interim = HTTPFields()
                    interim.append(name: "x-request-id", value: record.id)
                    client(.interim(status: 100, fields: interim))
                }
                state = .exchange(exchange)
                exchange.collect(limit: limit, signingScope: signingScope, &effects)
            case .stream:
                state = .exchange(exchange)
                carryOut(exchange.start(body: request.framing == .none ? .none : .streamed(request.framing), &effects), of: exchange)
            }
        }
    }

    // MARK: Events

    /// `ConnectionEvent`s of this stream: its hop's, its timer's, its token's, its collected body;
    /// `clientFailed` (the client reset the stream), `clientInputClosed` (END_STREAM came with the
    /// request incomplete), `connectionClosed` (the stream or its connection is gone).
    public mutating func handle(_ event: ConnectionEvent, into sink: inout [StreamAction]) {
        swap(&out, &sink)
        defer {
            flush()
            swap(&out, &sink)
        }
        dispatch(event)
    }

    public mutating func handle(_ event: ConnectionEvent) -> [StreamAction] {
        var taken: [StreamAction] = []
        handle(event, into: &taken)
        return taken
    }

    private var isLive: Bool {
        if case .finished = state { return false }
        return true
    }

    private mutating func dispatch(_ event: ConnectionEvent) {
        switch event {
        case .headStarted, .requestHead, .requestHeadInvalid, .clientTLSEstablished, .clientTLSFailed, .switchedToHTTP2:
            // A stream's head comes whole with `start`; TLS belongs to its connection.
            impossible(.notOnAStream)
        case .tunnelBytes(let hop, let fromClient, let fromUpstream):
            guard case .webSocket(var socket) = state, socket.hopID == hop else { return ignore(isLive ? .staleHop : .afterClose) }
            socket.record.bytesIn += fromClient
            socket.record.bytesOut += fromUpstream
            state = .webSocket(socket)
            if fromClient + fromUpstream > 0 { effects.arm(.stall) }
        case .webSocketScrubbed(let hop, let findings):
            guard case .webSocket(var socket) = state, socket.hopID == hop, socket.frames != nil else {
                return ignore(isLive ? .staleHop : .afterClose)
            }
            socket.record.scrubbed += findings
            state = .webSocket(socket)
        case .webSocketStopped(let hop, let stop, let sender):
            // The relay already wrote a close frame to each side (1008 or 1002), as for HTTP/1.1.
            guard case .webSocket(var socket) = state, socket.hopID == hop, let plan = socket.frames else {
                return ignore(isLive ? .staleHop : .afterClose)
            }
            socket.record.noteWebSocketStop(stop, plan, sender: sender)
            endWebSocket(socket)
        case .drain:
            // The connection drains (GOAWAY): a stream under way is let finish.
            break
        case .clientInputClosed(let buffered):
            // END_STREAM on a WebSocket stream is the client's FIN (RFC 8441 §5): its last frames
            // were relayed; the upstream connection ends and so does our side of the stream.
            if case .webSocket(let socket) = state { return endWebSocket(socket) }
            guard case .exchange(let exchange) = state else { return ignore(isLive ? .outOfTurn : .afterClose) }
            // The client ended the stream before the request it announced was whole: it can never
            // complete. The stream is reset; the exchange closes as for a client that hung up.
            guard exchange.requestCannotComplete(buffered: buffered) else { return }
            closeExchange(exchange, reset: .protocolError)
        case .clientFailed, .connectionClosed:
            switch state {
            case .exchange(let exchange): closeExchange(exchange, reset: nil)
            case .webSocket(let socket):
                // The client reset the stream (or the connection went): the origin's connection ends.
                effects.cancelTimer()
                effects.release(socket.hopID)
                effects.emit(socket.record)
                state = .finished
                responseEnded = true
            case .awaitingHead: state = .finished
            case .finished: ignore(.afterClose)
            }
        case .upstreamConnected(let hop, let reused, let peer):
            toExchange(.upstreamConnected(hop, reused: reused, peer: peer))
        case .upstreamConnectFailed(let hop, let error):
            toExchange(.upstreamConnectFailed(hop, error))
        case .requestBody(let hop, let progress):
            toExchange(.requestBody(hop, progress))
        case .collectedBody(let progress):
            toExchange(.collectedBody(progress), otherwise: .uncollectedBody)
        case .responseHead(let hop, let head, _):
            toExchange(.responseHead(hop, head))
        case .responseHeadInvalid(let hop, let reason):
            toExchange(.responseHeadInvalid(hop, reason: reason))
        case .responseBody(let hop, let progress):
            toExchange(.responseBody(hop, progress))
        case .upstreamClosed(let hop, let sawResponseBytes):
            if case .webSocket(let socket) = state {
                // The origin closed its TCP (the engine relayed what it sent before): the stream ends.
                guard socket.hopID == hop else { return ignore(.staleHop) }
                return endWebSocket(socket)
            }
            toExchange(.upstreamClosed(hop, sawResponseBytes: sawResponseBytes))
        case .timerFired(let purpose):
            guard effects.timer == purpose else { return ignore(.timerOfAnotherPurpose) }
            effects.timerFired()
            // A WebSocket with nothing moving either way for the stall time ends, as an HTTP/1.1 one.
            if purpose == .stall, case .webSocket(let socket) = state { return endWebSocket(socket) }
            guard case .exchange(let exchange) = state else { return ignore(isLive ? .timerOfEarlierPhase : .afterClose) }
            carryOut(exchange.handle(.timerFired(purpose), &effects), of: exchange)
        case .tokenReady(let secret, let token):
            toExchange(.tokenReady(secret: secret, token), otherwise: .unrequestedToken)
        case .tokenFailed(let secret, let provider, let reason):
            toExchange(.tokenFailed(secret: secret, provider: provider, reason: reason), otherwise: .unrequestedToken)
        }
    }

    private mutating func ignore(_ reason: StaleEvent) {
        lastIgnored = reason
    }

    private mutating func toExchange(_ event: ExchangeEvent, otherwise: ImpossibleEvent? = nil) {
        guard case .exchange(let exchange) = state else {
            if case .finished = state { return ignore(.afterClose) }
            if let otherwise { return impossible(otherwise) }
            return ignore(.staleHop)
        }
        carryOut(exchange.handle(event, &effects), of: exchange)
    }

    /// The stream ends before its exchange did (the client reset it, or its connection is gone):
    /// the hop is released and the line written (`client_closed`), as when an HTTP/1.1 client
    /// hangs up. `reset`: the stream is reset with this code first (the client cannot have).
    private mutating func closeExchange(_ exchange: ExchangeMachine, reset: H2ErrorCode?) {
        effects.cancelTimer()
        if let reset, !responseEnded { client(.reset(reset)) }
        exchange.connectionClosed(&effects)
        state = .finished
        responseEnded = true
    }

    // MARK: Outcomes, rendered in HTTP/2

    private mutating func carryOut(_ outcome: ExchangeOutcome, of exchange: ExchangeMachine) {
        switch outcome {
        case .proceeding:
            break
        case .ignored(let reason):
            ignore(reason)
        case .impossible(let reason):
            impossible(reason)
        case .answer(let error, let record, _, let scrub):
            reject(error, record: record, scrub: scrub)
        case .interim(let head):
            var interim = Forwarding.clientResponse(from: head, framing: .none, clientVersion: .http1_1, keepAlive: true)
            exchange.scrub(&interim)
            client(.interim(status: head.status, fields: Self.h2Fields(interim.fields)))
        case .response(let head, let framing):
            respond(head, framing: framing, exchange)
        case .switchingProtocols(let head):
            switchToWebSocket(head, exchange)
        case .tunnelEstablished(let hop, var record):
            // The mapping refuses CONNECT: an exchange of a stream never tunnels.
            impossible(.notOnAStream)
            effects.cancelTimer()
            effects.release(hop)
            record.failure = .responseCut
            effects.emit(record)
            state = .finished
            endWithReset(.internalError)
        case .finished:
            effects.cancelTimer()
            state = .finished
            if !responseEnded {
                responseEnded = true
                client(.endStream)
            }
        case .cut:
            // The response started and cannot be completed: the client must never take what it got
            // for the whole body (the line is written, `response_cut`).
            effects.cancelTimer()
            state = .finished
            endWithReset(.internalError)
        }
    }

    // MARK: WebSocket (RFC 8441)

    /// The origin's 101. HTTP/2 has no 101 (RFC 9113 §8.6): only an RFC 8441 stream may switch,
    /// and only when the origin's accept answers the key the proxy sent (the proxy is the
    /// handshake's client towards the origin, RFC 6455 §4.1); it then gets `:status 200` (RFC 8441
    /// §5) with the 101's fields that mean something on HTTP/2 (subprotocol), scrubbed.
    private mutating func switchToWebSocket(_ head: ResponseHead, _ exchange: ExchangeMachine) {
        let origin = exchange.hopState?.hop.origin ?? exchange.request.origin
        guard let key = request?.webSocketKey else {
            return carryOut(exchange.fail(.badUpstreamResponse(origin, "101 Switching Protocols to an HTTP/2 stream"), &effects), of: exchange)
        }
        guard ExtendedConnect.originAccepted(head, key: key) else {
            return carryOut(
                exchange.fail(.badUpstreamResponse(origin, "101 whose Sec-WebSocket-Accept does not answer the proxy's key"), &effects),
                of: exchange)
        }
        var switching = Forwarding.clientResponse(from: head, framing: .none, clientVersion: .http1_1, keepAlive: true, switchingProtocols: true)
        for name in ExtendedConnect.removedFromSuccess { switching.fields.removeAll(name) }
        switching.fields.set(name: "X-Request-ID", value: exchange.record.id)
        guard let (hop, upgraded, frames) = exchange.upgraded(&switching) else { return }
        let fields = Self.h2Fields(switching.fields)
        var record = upgraded
        record.status = 200  // what the client got: RFC 8441's success (`proto` says websocket)
        record.bytesOut += UInt64(Self.headerListSize(fields))
        state = .webSocket(WebSocketStream(hopID: hop, record: record, frames: frames))
        responseStarted = true
        client(.respond(status: 200, fields: fields, body: .relayed))
        client(.relayWebSocket(hop, frames))
        effects.arm(.stall)
    }

    /// The WebSocket is over (a side ended, the guard stopped it, nothing moved for the stall
    /// time): the origin's connection is let go, the line written, and the stream ended with
    /// END_STREAM after the frames already relayed. Not RST_STREAM(CANCEL): RFC 8441 §5 maps
    /// END_STREAM to TCP FIN and RST_STREAM to TCP RST, and a reset lets the client's stack drop
    /// DATA it has not read yet (RFC 9113 §8.5: the CONNECT tunnel's RST), which would lose the
    /// close frame (1008, 1002) that tells the client why (RFC 6455 §7.1.1: a close, then a FIN).
    private mutating func endWebSocket(_ socket: WebSocketStream) {
        effects.cancelTimer()
        effects.release(socket.hopID)
        effects.emit(socket.record)
        state = .finished
        if !responseEnded {
            responseEnded = true
            client(.endStream)
        }
    }

    private mutating func endWithReset(_ code: H2ErrorCode) {
        guard !responseEnded else { return }
        responseEnded = true
        client(.reset(code))
    }

    /// The final head, rendered for HTTP/2: no connection-specific fields, content-length only as
    /// the origin declared it, X-Request-ID set, scrubbed like HTTP/1.1; its body relayed as raw
    /// payload (the engine frames it as DATA), or END_STREAM with the HEADERS when it has none.
    private mutating func respond(_ head: ResponseHead, framing: BodyFraming, _ exchange: ExchangeMachine) {
        if request?.isWebSocket == true, (200..<300).contains(head.status) {
            // RFC 8441 §5: a 2xx to an extended CONNECT means the WebSocket is open. An origin that
            // answered the upgrade with a plain 2xx opened none: relayed, the client would take
            // its body for frames. Any other status is relayed as the CONNECT's answer.
            let origin = exchange.hopState?.hop.origin ?? exchange.request.origin
            return carryOut(
                exchange.fail(.badUpstreamResponse(origin, "a \(head.status) to a WebSocket upgrade instead of 101"), &effects),
                of: exchange)
        }
        // A chunked body is decoded and sent as DATA: its length is not known, and HTTP/2 has no
        // transfer coding. A declared length stays (RFC 9113 §8.1.1: it must match the DATA).
        let declared: BodyFraming = framing == .chunked ? .untilClose : framing
        var clientHead = Forwarding.clientResponse(from: head, framing: declared, clientVersion: .http1_1, keepAlive: true)
        clientHead.fields.set(name: "X-Request-ID", value: exchange.record.id)
        exchange.scrub(&clientHead)
        let bodyScrub: SecretWatch?
        switch exchange.bodyScrub(for: clientHead, &effects) {
        case .refused(let outcome): return carryOut(outcome, of: exchange)
        case .scrub(let watch): bodyScrub = watch
        }
        let fields = Self.h2Fields(clientHead.fields)
        let hasBody = framing != .none
        responseStarted = true
        if !hasBody { responseEnded = true }
        client(.respond(status: clientHead.status, fields: fields, body: hasBody ? .relayed : .none))
        exchange.relay(
            head, clientHead: clientHead, bytes: Self.headerListSize(fields), inbound: framing,
            outbound: hasBody ? .untilClose : .none, keepClient: true, scrub: bodyScrub, &effects)
    }

    /// Answers with the proxy's own error (the same fields and JSON as for HTTP/1.1, from
    /// `ProxyError.answer`), and writes the stream's line. `scrub`: as `ConnectionMachine.reject`.
    private mutating func reject(_ error: ProxyError, record: ExchangeRecord, scrub: SecretWatch? = nil) {
        effects.cancelTimer()
        let answer = error.answer(requestID: record.id)
        var body = answer.body
        if let scrub { ResponseScrub.mask(&body, with: scrub) }
        let fields = Self.h2Fields(answer.fields)
        var record = record
        if record.scopes.isEmpty, let covering { record.noteCoveringScopes(covering.policy, client: covering.client) }
        record.noteAnswer(error, bytes: Self.headerListSize(fields) + body.count)
        state = .finished
        responseStarted = true
        responseEnded = true
        client(.respond(status: answer.status, fields: fields, body: .bytes(body)))
        effects.emit(record)
    }

    private mutating func impossible(_ reason: ImpossibleEvent) {
        impossibleEvents += 1
        lastImpossible = reason
        assert(toleratesImpossibleEvents, "impossible event for a stream machine: \(reason)")
    }

    /// Fields as HTTP/2 sends them: names in lower case (RFC 9113 §8.2), without the fields that
    /// only mean something on one HTTP/1.1 connection (§8.2.2).
    static func h2Fields(_ fields: HTTPFields) -> HTTPFields {
        var converted = HTTPFields()
        converted.reserveCapacity(fields.count)
        for field in fields {
            let name = field.lowercasedName
            guard !H2RequestMapping.connectionSpecific.contains(name) else { continue }
            converted.append(name: name, value: field.value)
        }
        return converted
    }

    /// What a head counts for in the log's bytes: its header list size (RFC 9113 §6.5.2: each
    /// field's name and value plus 32), as HPACK's compressed size depends on the connection.
    static func headerListSize(_ fields: HTTPFields) -> Int {
        fields.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 32 }
    }
}
