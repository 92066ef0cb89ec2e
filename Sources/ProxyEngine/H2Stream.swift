import CLibevent
import HTTP1Codec
import ProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// One HTTP/2 stream of a client connection: one exchange. It carries out its `StreamMachine`'s
/// actions: the exchange's own (the hop, the bodies, token waits, the line: `ExchangeHost`, the
/// same code an HTTP/1.1 connection runs) and the stream's (its response head, its end, a reset),
/// which go to the connection's HTTP/2 session.
///
/// The client's bytes live in two buffers of the stream's own: the request buffer (DATA frames, as
/// chunks when the request named no length, so the body rules read HTTP/1.1 framing) and the
/// response buffer (the payload the response pump relays; the session's data provider reads it).
/// Flow control follows the origin: DATA is credited back to the client only once the pump took it.
final class H2Stream: ExchangeHost {
    unowned let connection: H2ClientConnection
    let id: Int32
    private(set) var machine: StreamMachine
    var leg: UpstreamLeg?
    var collector: BodyCollector?
    var awaitedToken: (tokens: any AccessTokenSource, secret: String, waiterID: UInt64)?
    private(set) var isClosed = false
    private(set) var dispatching = false
    private var pending: [ConnectionEvent] = []
    private var actions: [StreamAction] = []
    let progressInterval: UInt64
    var lastProgressReport: UInt64 = 0

    let requestSource: OpaquePointer = evbuffer_new()
    let responseSink: OpaquePointer = evbuffer_new()
    private(set) var requestSourceEnded = false
    /// The request named no content-length and did not end with its head: DATA is written as chunks.
    private var requestChunked = false
    /// DATA payload received and not yet credited back to the client's window.
    private var uncredited = 0
    /// Nothing more will be added to the response buffer (the data provider then ends the stream).
    private var responseEnded = false
    /// The relayed response's trailers (cleaned and scrubbed by its pump): sent after the last DATA.
    private var responseTrailers: [H2HeaderField]?
    /// The data provider found the response buffer empty and waits to be resumed.
    private var providerDeferred = false
    /// The proxy reset the stream (a cut response): not the client's doing, not a rapid reset.
    private(set) var resetByUs = false
    private(set) var timer: OpaquePointer!
    var armedTimer: TimerPurpose?

    var worker: Worker { connection.worker }
    var clientPipelined: Bool { false }
    var clientSpokeH2c: Bool { connection.proto == .h2c }
    var pinnedUpstream: PinnedUpstream? { connection.client.pinnedUpstream }
    /// An RFC 8441 WebSocket's hop asks its origin for an HTTP/1.1 upgrade: its leg speaks HTTP/1.1.
    var currentHopIsUpgrade: Bool { machine.currentHopIsUpgrade }
    /// WebSocket bytes moved since the last (throttled) report to the machine.
    var unreportedFrameBytes: (fromClient: UInt64, fromUpstream: UInt64) = (0, 0)
    /// The client ended its WebSocket and its last frames wait in the leg's output (a TLS leg
    /// writes on its own path): the machine hears the end once they are written.
    var endingWhenDrained = false
    /// A stream is one of up to `h2_max_concurrent_streams` on its connection, so it buffers less
    /// than a connection of its own: its response buffer and its leg's read-ahead hold at most this
    /// much each (docs/http2.md, "Memory"). Request bytes keep the connection's mark: the client's
    /// flow-control window already bounds what waits in the stream.
    var bodyBufferLimit: Int { min(highWatermark, Self.bufferLimit) }
    /// 64 KiB: four DATA frames of the default size queued for the client, and as much read ahead
    /// from the origin; enough for one stream to keep a loopback or LAN path busy.
    static let bufferLimit = 64 * 1024

    init(connection: H2ClientConnection, id: Int32, machine: StreamMachine) {
        self.connection = connection
        self.id = id
        self.machine = machine
        progressInterval = UInt64(min(100, max(1, connection.worker.configuration.timeouts.idle / 4))) * 1000
        timer = event_new(connection.worker.base, -1, 0, streamTimerCallback, Unmanaged.passUnretained(self).toOpaque())
    }

    deinit {
        evbuffer_free(requestSource)
        evbuffer_free(responseSink)
    }

    func expectsResponseHead(from hop: HopID) -> Bool { machine.expectsResponseHead(from: hop) }

    /// The stream's head arrived: admission, scope, and the first hop (or an answer).
    func start(_ fields: [H2HeaderField], endStream: Bool, headBytes: Int) {
        dispatching = true
        actions.removeAll(keepingCapacity: true)
        machine.start(fields, endStream: endStream, headBytes: headBytes, connection.arrival(), ids: &connection.ids, into: &actions)
        requestChunked = machine.request?.reframedAsChunked ?? false
        if endStream { requestSourceEnded = true }
        for action in actions { execute(action) }
        while !pending.isEmpty { run(pending.removeFirst()) }
        dispatching = false
    }

    // MARK: Events into the machine

    func deliver(_ event: ConnectionEvent) {
        if dispatching {
            pending.append(event)
            return
        }
        dispatching = true
        run(event)
        while !pending.isEmpty { run(pending.removeFirst()) }
        dispatching = false
    }

    private func run(_ event: ConnectionEvent) {
        actions.removeAll(keepingCapacity: true)
        machine.handle(event, into: &actions)
        for action in actions { execute(action) }
    }

    func flushOutputs() {
        leg?.flush()
        connection.flushOutputs()
    }

    // MARK: Client → stream (the session's callbacks, through the connection)

    /// DATA payload for this stream. Bytes nobody will read any more (the stream was answered
    /// before its body) are credited back at once, so the connection's window does not close.
    func requestData(_ bytes: UnsafeRawBufferPointer) {
        guard !isClosed, !requestSourceEnded, !machine.isFinished else {
            connection.session.consume(stream: id, bytes: bytes.count)
            return
        }
        if requestChunked {
            guard !bytes.isEmpty else { return }
            EventBuffer.append(requestSource, Array(String(bytes.count, radix: 16).utf8) + [0x0D, 0x0A])
            evbuffer_add(requestSource, bytes.baseAddress, bytes.count)
            EventBuffer.append(requestSource, [0x0D, 0x0A])
        } else {
            evbuffer_add(requestSource, bytes.baseAddress, bytes.count)
        }
        uncredited += bytes.count
        takeRequestBytes()
    }

    /// END_STREAM from the client: the request is whole (a chunked one gets its last chunk).
    func requestEnded() {
        guard !isClosed, !requestSourceEnded else { return }
        requestSourceEnded = true
        if requestChunked { EventBuffer.append(requestSource, ChunkedEncoder.lastChunk) }
        takeRequestBytes()
        // The client's FIN on a WebSocket (RFC 8441 §5): its last frames go through the filter
        // whatever the origin's backlog, then the machine ends the upstream connection.
        if !isClosed, machine.isWebSocket {
            return endWebSocketFromClient()
        }
        // A body that needed more than the client sent: the machine hears it ended short.
        if !isClosed, !machine.isFinished, leg?.awaitsRequestBytes == true || collector != nil {
            deliver(.clientInputClosed(bufferedBytes: EventBuffer.length(requestSource)))
        }
    }

    private func takeRequestBytes() {
        if collector != nil {
            collectRequestBody()
        } else if leg?.requestPump != nil {
            pumpRequestBody()
        } else if leg?.splicing == true {
            pumpWebSocket()
        }
    }

    func requestSourceDrained() {
        if leg != nil { connection.wroteUpstream(self) }
        let credit = uncredited - min(uncredited, EventBuffer.length(requestSource))
        guard credit > 0 else { return }
        uncredited -= credit
        connection.session.consume(stream: id, bytes: credit)
    }

    // MARK: Stream → client (the data provider)

    func responseSinkFilled() {
        if responseTrailers == nil, let trailers = leg?.responsePump?.trailers {
            responseTrailers = trailers.map { H2HeaderField(name: lowercasedFieldName($0.name), value: $0.value) }
        }
        guard providerDeferred, EventBuffer.length(responseSink) > 0 || responseEnded else { return }
        providerDeferred = false
        connection.session.resumeData(stream: id)
    }

    /// The session asks for the next DATA payload: what the pump relayed, then the end.
    func readResponse(into buffer: UnsafeMutableRawBufferPointer) -> H2BodyRead {
        let count = Int(evbuffer_remove(responseSink, buffer.baseAddress, buffer.count))
        if count > 0 {
            if leg?.responsePump != nil || leg?.splicing == true, EventBuffer.length(responseSink) < bodyBufferLimit / 2 {
                connection.needsPump(self)
            }
            return responseEnded && EventBuffer.length(responseSink) == 0 ? .end(count, trailers: responseTrailers) : .bytes(count)
        }
        if responseEnded { return .end(0, trailers: responseTrailers) }
        providerDeferred = true
        return .deferred
    }

    /// Bytes this stream holds in the proxy now: its request and response buffers and its leg's.
    var bufferedBytes: Int {
        EventBuffer.length(requestSource) + EventBuffer.length(responseSink) + (leg?.bufferedBytes ?? 0)
    }

    // MARK: The leg's callbacks

    func legReadable(_ leg: UpstreamLeg) {
        guard leg === self.leg else { return }
        if leg.splicing {
            pumpWebSocket()
        } else if leg.responsePump != nil {
            pumpResponseBody()
        } else {
            readResponseHeads(leg)
        }
        flushOutputs()
    }

    func legWritable(_ leg: UpstreamLeg) {
        guard leg === self.leg else { return }
        if leg.splicing { endingWhenDrained ? endWebSocketWhenDrained(leg) : pumpWebSocket() } else { pumpRequestBody() }
        flushOutputs()
    }

    func legClosed(_ leg: UpstreamLeg) {
        guard leg === self.leg else { return }
        if leg.splicing {
            endWebSocketFromOrigin(leg)
            flushOutputs()
            return
        }
        deliver(.upstreamClosed(leg.hop, sawResponseBytes: leg.sawResponseBytes))
        if self.leg === leg, leg.responsePump != nil { pumpResponseBody() }
        flushOutputs()
    }

    /// The response buffer drained below half: the relay takes more from the origin.
    func resumeResponsePump() {
        guard !isClosed else { return }
        if leg?.splicing == true {
            pumpWebSocket()
        } else if leg?.responsePump != nil {
            pumpResponseBody()
        }
    }

    // MARK: Actions

    private func execute(_ action: StreamAction) {
        if isClosed {
            switch action {
            case .exchange(.emit(let record)): emit(record)
            case .exchange(.releaseUpstream(let hop, _)): release(hop, reuse: false)
            default: break
            }
            return
        }
        switch action {
        case .exchange(let exchangeAction):
            execute(exchangeAction)
        case .respond(let status, let fields, let body):
            switch body {
            case .none:
                responseEnded = true
                connection.session.submitResponse(stream: id, status: status, fields: fields, hasBody: false)
            case .bytes(let bytes):
                EventBuffer.append(responseSink, bytes)
                responseEnded = true
                connection.session.submitResponse(stream: id, status: status, fields: fields, hasBody: true)
            case .relayed:
                connection.session.submitResponse(stream: id, status: status, fields: fields, hasBody: true)
            }
        case .interim(let status, let fields):
            connection.session.submitInterim(stream: id, status: status, fields: fields.map { H2HeaderField(name: $0.name, value: $0.value) })
        case .endStream:
            responseEnded = true
            responseSinkFilled()
        case .reset(let code):
            resetByUs = true
            connection.session.reset(stream: id, code: code.rawValue)
        case .relayWebSocket(let hop, let plan):
            guard let leg, leg.hop == hop else { return }
            if let plan { leg.webSocket = WebSocketRelay(plan: plan) }
            leg.splicing = true
            pumpWebSocket()
            // The client ended its side before the 200 came (END_STREAM on a DATA frame): its FIN.
            if requestSourceEnded, !isClosed, machine.isWebSocket { endWebSocketFromClient() }
        }
    }

    private func execute(_ action: ConnectionAction) {
        if case .sendToUpstream = action { connection.wroteUpstream(self) }
        // A stream's machine renders its answers as stream actions: what is left is the exchange's.
        let carried = executeExchangeAction(action)
        assert(carried, "HTTP/1.1 action \(action) from a stream machine")
    }

    fileprivate func timerFired() {
        guard let purpose = armedTimer else { return }
        armedTimer = nil
        deliver(.timerFired(purpose))
        flushOutputs()
    }

    // MARK: The end

    /// The stream is over (both sides ended, reset by either side, or the connection went): the
    /// machine releases what is in flight and writes the line of an exchange that had not ended.
    func close() {
        guard !isClosed else { return }
        reportPendingBodyProgress()
        reportFrameBytes()
        isClosed = true
        withdrawFromTokenWait()
        collector = nil
        event_free(timer)
        deliver(.connectionClosed)
        if let leg {
            self.leg = nil
            leg.release(reuse: false)
        }
    }
}

private func streamTimerCallback(_: Int32, _: Int16, _ context: UnsafeMutableRawPointer?) {
    let stream = Unmanaged<H2Stream>.fromOpaque(context!).takeUnretainedValue()
    withExtendedLifetime(stream) { stream.timerFired() }
}
