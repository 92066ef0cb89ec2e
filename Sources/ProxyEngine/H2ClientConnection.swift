import CLibevent
import HTTP1Codec
import ProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// A client connection that speaks HTTP/2: ALPN `h2` inside an intercepted tunnel, or the h2c
/// preface on the plain listener. The `ClientConnection` keeps the socket and hands its bytes here;
/// this drives the HTTP/2 session (libnghttp2 does framing, HPACK and flow control; every decision
/// stays ours), counts what the client sends against the flood limits, and runs one `H2Stream` per
/// stream, each an exchange under every rule an HTTP/1.1 request meets.
///
///   socket bytes → session.receive → h2Headers → H2Stream(StreamMachine) → hop → response pump
///   → the stream's response buffer → the session's data provider → session.send → socket
///
/// Streams never wait for each other: each has its own hop, timers and token wait.
final class H2ClientConnection: H2SessionDelegate {
    unowned let client: ClientConnection
    private(set) var session: H2Session!
    private var floodGuard: H2FloodGuard
    private var streams: [Int32: H2Stream] = [:]
    /// Streams whose response buffer drained while the session was writing: their relay resumes
    /// once the write is done (never from inside the session's callback).
    private var streamsToPump: [H2Stream] = []
    /// Streams that wrote to their upstream leg since the last flush (a head, body bytes): only
    /// their legs are flushed, not every open stream's after every callback.
    private var legsToFlush: [H2Stream] = []
    let connectionKind: H2Connection
    let proto: ExchangeRecord.ClientProtocol
    /// Ids for streams that bring no well-formed X-Request-ID of their own.
    var ids: RequestIDGenerator
    private var goingAway = false
    private(set) var isClosed = false
    /// Why the connection ended early, once (a flood's code, a protocol error's): said once.
    private var endReason: String?
    /// Runs while no stream has an exchange in progress: first `client_header` (the preface and the
    /// first request), then `idle`. A stream already answered whose client never ends its side
    /// (RFC 9113 §5.1: half-closed) is no exchange: it does not hold the connection open.
    private var idleTimer: OpaquePointer!
    private var idleTimerArmed = false
    /// Runs `flushOutputs` on the loop's next turn when a flush ended with relays still waiting to
    /// be resumed: the socket may have taken everything written, so no write callback would come.
    private var continueEvent: OpaquePointer!
    /// Writes the session at the end of the current loop pass (`flushOutputs` arms it): every
    /// response an origin delivered in this pass leaves in one write to the socket, not one each.
    private var writeEvent: OpaquePointer!
    private var writeArmed = false

    var worker: Worker { client.worker }
    private var transport: ClientTransport { client.transport }
    private var highWatermark: Int { worker.configuration.limits.bufferHighWatermark }

    init(client: ClientConnection, kind: H2Connection, proto: ExchangeRecord.ClientProtocol) {
        self.client = client
        connectionKind = kind
        self.proto = proto
        ids = client.worker.requestIDs.fork()
        floodGuard = H2FloodGuard()
    }

    /// The client's first bytes: the connection preface, then SETTINGS (RFC 9113 §3.4).
    static let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)

    /// Starts the session (our SETTINGS go out first) and reads what the client already sent.
    func start() {
        let limits = worker.configuration.limits
        session = H2Session(
            role: .server,
            settings: H2Session.Settings(maxConcurrentStreams: limits.h2MaxConcurrentStreams),
            delegate: self)
        idleTimer = event_new(worker.base, -1, 0, h2IdleTimerCallback, Unmanaged.passUnretained(self).toOpaque())
        continueEvent = event_new(worker.base, -1, 0, h2ContinueCallback, Unmanaged.passUnretained(self).toOpaque())
        writeEvent = event_new(worker.base, -1, 0, h2WriteCallback, Unmanaged.passUnretained(self).toOpaque())
        // The preface and the first request must come as fast as an HTTP/1.1 head would.
        sp_event_add_ms(idleTimer, worker.configuration.timeouts.clientHeader)
        idleTimerArmed = true
        readable()
    }

    func arrival() -> Arrival {
        Arrival(now: monotonicMicroseconds(), scope: worker.configuration.scope.context, wallClock: Int64(time(nil)))
    }

    // MARK: Socket → session

    func readable() {
        guard !isClosed else { return }
        if let failure = session.receive(from: transport.input) {
            // The session cannot go on: GOAWAY (ENHANCE_YOUR_CALM for a flood, PROTOCOL_ERROR
            // otherwise; nghttp2 keeps the one it may have queued first), then the close once it
            // is written. A flood the guard stopped already said why.
            end(reason: failure.code)
            let code: H2ErrorCode = failure == .flooded || failure == .stoppedByGuard ? .enhanceYourCalm : .protocolError
            session.terminate(code: code.rawValue)
        }
    }

    /// Runs at the end of every callback. The writing itself waits for the end of the loop pass
    /// (`writeOutputs`): an activated event runs after the callbacks libevent already queued for
    /// this pass, so the responses of every origin that answered in it share one socket write.
    func flushOutputs() {
        // Inside a session callback (a leg that connected at once, a token already cached): the
        // callback's caller flushes when nghttp2 is off the stack.
        guard !isClosed, !session.isProcessing, !writeArmed else { return }
        writeArmed = true
        event_active(writeEvent, 0, 0)
    }

    /// The end of the pass: the session writes what it has (up to the watermark), then relays
    /// whose buffers drained take more from their origins, and the session writes again.
    fileprivate func writeOutputs() {
        writeArmed = false
        guard !isClosed, !session.isProcessing else { return }
        defer { accountBufferedBytes() }
        var settled = false
        for _ in 0..<4 {
            guard !isClosed else { return }
            session.send(to: transport.output, highWatermark: highWatermark)
            transport.flush()
            // The session stopped at the watermark and the socket then took every byte: no write
            // callback will come for what the session still holds, so it writes again here.
            let sessionHasMore = session.wantsWrite && EventBuffer.length(transport.output) < highWatermark
            guard !streamsToPump.isEmpty || sessionHasMore else {
                settled = true
                break
            }
            let waiting = streamsToPump
            streamsToPump.removeAll(keepingCapacity: true)
            for stream in waiting { stream.resumeResponsePump() }
        }
        guard !isClosed else { return }
        // Rounds are bounded so one connection cannot hold the loop. When they ran out with work
        // left (the session holds frames, or relays refilled their buffers after it last wrote),
        // that goes on at the loop's next turn: nothing else may wake it (the socket took every
        // byte, so no write callback comes, and a client with an open window has nothing to send).
        if !settled { sp_event_add_ms(continueEvent, 0) }
        for stream in legsToFlush { stream.leg?.flush() }
        legsToFlush.removeAll(keepingCapacity: true)
        if !session.wantsRead, !session.wantsWrite {
            // The session is over (GOAWAY sent, nothing left). nghttp2 may have ended it on its own
            // (a connection error, its own limits): said once, like the ends this connection
            // decides (fixed words, never a field value). The close waits for the output.
            if let why = session.endedByLibrary { end(reason: "h2_protocol_error", detail: why) }
            if transport.closing == .open { transport.closeAfterFlush() }
            transport.didFlush()
            return
        }
        armIdleTimerWhenQuiet()
        transport.didFlush()
    }

    // MARK: Memory (docs/http2.md, "Memory")

    /// Bytes this connection holds in the proxy: the client socket's buffers (every TLS layer's),
    /// and each stream's (`H2Stream.bufferedBytes`): at most `bufferedBytesBound`.
    var bufferedBytes: Int {
        let socket = EventBuffer.length(transport.input) + EventBuffer.length(transport.output) + transport.lowerLayersBufferedBytes
        return streams.values.reduce(socket) { $0 + $1.bufferedBytes }
    }

    /// What `bufferedBytes` was when last reported to the gauges.
    private var reportedBufferedBytes = 0

    /// The most one connection with `streams` open streams holds, by construction: per stream
    /// `H2Stream.bufferLimit` in its response buffer and as much in its leg's read-ahead, and
    /// `highWatermark` of request bytes in its leg's output; for the connection the client socket's
    /// output (`highWatermark` and one frame) and input (`highWatermark`), as much again under a TLS
    /// filter; and per stream the request bytes its window lets the client send ahead (the
    /// connection window is credited on receipt, so it bounds nothing: `H2Session.dataReceived`).
    static func bufferedBytesBound(streams: Int, highWatermark: Int) -> Int {
        let stream = 2 * min(highWatermark, H2Stream.bufferLimit) + highWatermark + H2Session.Settings().streamWindow
        return streams * stream + 4 * highWatermark + 16_384 + 9
    }

    /// After a flush (when what the connection holds can have grown): the metrics' gauges hear it.
    private func accountBufferedBytes() {
        guard !isClosed, !transport.isFreed else { return }
        let now = bufferedBytes
        worker.configuration.metrics.h2Buffered.update(from: reportedBufferedBytes, to: now)
        reportedBufferedBytes = now
    }

    /// Whether no stream has an exchange in progress: every open stream (if any) was answered,
    /// relayed whole, cut or reset, and waits only for the client.
    private var isQuiet: Bool { streams.values.allSatisfy { $0.machine.isFinished } }

    /// The idle timer runs from the moment the last exchange of the connection ended, as between
    /// two HTTP/1.1 requests; a new request stops it (`h2Headers`).
    private func armIdleTimerWhenQuiet() {
        guard !idleTimerArmed, isQuiet else { return }
        idleTimerArmed = true
        sp_event_add_ms(idleTimer, worker.configuration.timeouts.idle)
    }

    func needsPump(_ stream: H2Stream) {
        streamsToPump.append(stream)
    }

    func wroteUpstream(_ stream: H2Stream) {
        legsToFlush.append(stream)
    }

    // MARK: Session → streams (H2SessionDelegate)

    func h2FrameStarted(_ session: H2Session, type: H2FrameType, flags: UInt8, stream: Int32, length: Int) -> Bool {
        switch floodGuard.frameStarted(H2FrameKind(type: type.rawValue), flags: flags, stream: stream, length: length) {
        case .proceed:
            return true
        case .goAway(let violation):
            end(reason: violation.code)
            return false
        }
    }

    func h2Headers(_ session: H2Session, stream id: Int32, fields: [H2HeaderField], endStream: Bool, kind: H2HeadersKind) {
        switch kind {
        case .request:
            guard !goingAway else { return session.reset(stream: id, code: H2ErrorCode.refusedStream.rawValue) }
            event_del(idleTimer)
            idleTimerArmed = false
            if case .goAway(let violation) = floodGuard.streamOpened() {
                end(reason: violation.code)
                return session.terminate(code: violation.errorCode.rawValue)
            }
            let machine = StreamMachine(settings: client.machine.settings, mode: client.machine.mode, facts: client.machine.facts, proto: proto)
            let stream = H2Stream(connection: self, id: id, machine: machine)
            streams[id] = stream
            let headBytes = fields.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 32 }
            stream.start(fields, endStream: endStream, headBytes: headBytes)
        case .trailers:
            // Request trailers are dropped, as HTTP/1.1 chunked trailers are: a field sent after
            // the body would ride past the scope rules (RFC 9110 §6.5.1 lets a proxy drop them).
            if endStream { streams[id]?.requestEnded() }
        case .response, .interim:
            // A client does not send responses: nghttp2's messaging checks reset such a stream.
            session.reset(stream: id, code: H2ErrorCode.protocolError.rawValue)
        }
    }

    func h2Data(_ session: H2Session, stream id: Int32, bytes: UnsafeRawBufferPointer) {
        if let stream = streams[id] {
            stream.requestData(bytes)
        } else {
            session.consume(stream: id, bytes: bytes.count)
        }
    }

    func h2StreamEnded(_ session: H2Session, stream id: Int32) {
        streams[id]?.requestEnded()
    }

    func h2StreamClosed(_ session: H2Session, stream id: Int32, code: UInt32) {
        guard let stream = streams.removeValue(forKey: id) else { return }
        // Any code counts (NO_ERROR included: a reset is a reset): what matters is that the stream
        // was opened, started work, and was cancelled before it was answered.
        // An open RFC 8441 WebSocket was answered (its 200): RST_STREAM is how a client aborts one
        // (RFC 8441 §5, a TCP RST), not a request cancelled before its answer.
        if !stream.machine.isFinished, !stream.resetByUs,
            case .goAway(let violation) = floodGuard.streamResetByClient(responseEnded: stream.machine.isWebSocket)
        {
            // Rapid reset: streams opened and cancelled faster than they are answered.
            end(reason: violation.code)
            session.terminate(code: violation.errorCode.rawValue)
        }
        // A stream answered whole is useful work: the control-frame budgets refill.
        if stream.machine.isFinished { floodGuard.streamAnswered() }
        stream.close()
        // Draining, or ending after a flood: the last stream is done, so is the connection (the
        // idle timer is armed by `flushOutputs` once no exchange is under way).
        if streams.isEmpty, !isClosed, goingAway { session.terminate(code: H2ErrorCode.noError.rawValue) }
    }

    func h2StreamRejected(_ session: H2Session, stream id: Int32, reason: String) {
        Diagnostics.error("h2_stream_rejected", [("client", client.peer), ("stream", String(id)), ("reason", reason)])
        // A stream nghttp2 refused before its head reached us (a malformed header block, RFC 9113
        // §8.1.1) gets its line too, as a malformed HTTP/1.1 head does; the reason names a rule and
        // at most a field's name, never a value. A stream we started writes its own line.
        if streams[id] == nil, !isClosed {
            var record = ExchangeRecord(id: ids.next(), client: client.peer, method: nil, startedAt: monotonicMicroseconds())
            record.proto = proto
            if case .intercepted(let origin, let identity) = client.machine.mode {
                record.origin = origin
                record.clientID = identity.name
            }
            record.failure = .proxy(.malformedRequest(reason))
            ExchangeLine.emit(record, worker.configuration)
        }
    }

    func h2ReadBody(_ session: H2Session, stream id: Int32, into buffer: UnsafeMutableRawBufferPointer) -> H2BodyRead {
        guard let stream = streams[id] else { return .end(0, trailers: Optional<[H2HeaderField]>.none) }
        let read = stream.readResponse(into: buffer)
        // A DATA frame goes out: the WINDOW_UPDATEs (and BDP PINGs) it prompts are the client's due.
        if read != .deferred { floodGuard.responseDataSent() }
        return read
    }

    // MARK: The end

    /// The worker stops: no new streams (GOAWAY), the ones under way finish.
    func drain() {
        guard !goingAway else { return }
        goingAway = true
        if streams.isEmpty {
            session.terminate(code: H2ErrorCode.noError.rawValue)
            flushOutputs()
        } else {
            // Streams under way finish; new ones are refused (RFC 9113 §6.8).
            session.goAway(code: H2ErrorCode.noError.rawValue, debug: "")
        }
    }

    /// A protocol error or a flood: GOAWAY (the session queued it), then the connection closes
    /// once it is written. Said once per connection, with the fixed code of why.
    private func end(reason code: String, detail: String? = nil) {
        goingAway = true
        guard endReason == nil else { return }
        endReason = code
        worker.configuration.metrics.increment(.h2ConnectionEnded(reason: code))
        var fields = [("client", client.peer), ("reason", code)]
        if let detail { fields.append(("detail", detail)) }
        Diagnostics.error("h2_connection_ended", fields)
    }

    fileprivate func idleTimerFired() {
        idleTimerArmed = false
        guard !isClosed else { return }
        // Streams still open here were answered and wait only for the client: they close with it.
        if isQuiet {
            goingAway = true
            session.goAway(code: H2ErrorCode.noError.rawValue, debug: "idle")
            session.send(to: transport.output, highWatermark: highWatermark)
            transport.closeAfterFlush()
        }
    }

    /// The socket is gone: every stream ends (its line says the client left).
    func close() {
        guard !isClosed else { return }
        isClosed = true
        worker.configuration.metrics.h2Buffered.update(from: reportedBufferedBytes, to: 0)
        reportedBufferedBytes = 0
        event_free(idleTimer)
        event_free(continueEvent)
        event_free(writeEvent)
        let open = streams
        streams.removeAll()
        for stream in open.values { stream.close() }
    }
}

private func h2ContinueCallback(_: Int32, _: Int16, _ context: UnsafeMutableRawPointer?) {
    let connection = Unmanaged<H2ClientConnection>.fromOpaque(context!).takeUnretainedValue()
    withExtendedLifetime(connection) { connection.flushOutputs() }
}

private func h2WriteCallback(_: Int32, _: Int16, _ context: UnsafeMutableRawPointer?) {
    let connection = Unmanaged<H2ClientConnection>.fromOpaque(context!).takeUnretainedValue()
    withExtendedLifetime(connection) { connection.writeOutputs() }
}

private func h2IdleTimerCallback(_: Int32, _: Int16, _ context: UnsafeMutableRawPointer?) {
    let connection = Unmanaged<H2ClientConnection>.fromOpaque(context!).takeUnretainedValue()
    withExtendedLifetime(connection) { connection.idleTimerFired() }
}
