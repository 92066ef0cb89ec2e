import CLibevent
import HTTP1Codec
import ProxyCore

/// What a hop's leg may speak to its origin (docs/architecture.md, "Upstream protocol"):
/// - `.offerInALPN`: a TLS origin is offered `h2, http/1.1` and the leg speaks what it chose
///   (not for an HTTP/1.1 upgrade, which HTTP/2 cannot carry);
/// - `.priorKnowledge`: a plain-http origin gets h2c from the first byte, only when the client
///   itself spoke h2c to the proxy (a client with prior knowledge believes its origin speaks
///   HTTP/2: gRPC insecure channels);
/// - `.never`: HTTP/1.1.
enum UpstreamHTTP2: Equatable, Sendable {
    case never, offerInALPN, priorKnowledge

    static func choose(transport: UpstreamTransport, clientSpokeH2c: Bool, isUpgrade: Bool) -> UpstreamHTTP2 {
        guard !isUpgrade else { return .never }
        switch transport {
        case .tls: return .offerInALPN
        case .plain: return clientSpokeH2c ? .priorKnowledge : .never
        case .raw: return .never
        }
    }
}

/// One HTTP/2 connection to an origin (client role), shared by the legs of many hops while the
/// origin allows (its SETTINGS_MAX_CONCURRENT_STREAMS). Each leg gets an `UpstreamH2Stream` that
/// presents the HTTP/1.1 byte interface the exchange already speaks, so every rule (inject, strip,
/// sign, guard, scrub, redirects, retry) applies unchanged.
///
/// Kept by the worker's pool (`UpstreamPool.http2`) from connect until it ends: idle (no stream)
/// it is closed after the idle timeout like an HTTP/1.1 one; a GOAWAY takes it out of the pool
/// (no new stream) and fails only the streams the origin did not process.
///
/// The owners of streams are told what happened from a deferred libevent callback (`wake`), never
/// from inside the session or a pump, so no leg callback re-enters the session.
final class UpstreamH2Connection: H2SessionDelegate {
    let origin: Origin
    /// The address it was opened to: a hop joins it only where its egress rules admit that address.
    let peer: PeerAddress?
    private unowned let worker: Worker
    private(set) var bev: OpaquePointer?
    private(set) var session: H2Session!
    /// Streams attached (a leg was given one), submitted or not yet.
    private var attached: [ObjectIdentifier: UpstreamH2Stream] = [:]
    private var byID: [Int32: UpstreamH2Stream] = [:]
    private var toNotify: [UpstreamH2Stream] = []
    private var wake: OpaquePointer?
    private var wakeArmed = false
    /// GOAWAY came or went, or the socket ended: no new stream.
    private(set) var goingAway = false
    private(set) var isClosed = false
    private(set) var idleSince: UInt64 = monotonicMilliseconds()
    /// Hops served so far: a second hop on this connection is a reused one (a stale-connection retry is allowed).
    private(set) var hopsServed = 0

    /// The origin is known to speak HTTP/2 here: ALPN chose `h2`, or (prior knowledge) its first
    /// frame was SETTINGS. Until then no stream is submitted and no other hop joins.
    private(set) var confirmed: Bool
    /// Prior knowledge: the leg that opened the connection and those that joined it before the
    /// origin answered, told whether it answered as HTTP/2 or not (an HTTP/1.1-only origin: each
    /// falls back to HTTP/1.1 on a new connection). Weak: a leg whose hop ended is not told.
    private var probingLegs: [WeakLeg] = []

    /// The most streams we open on one connection whatever the origin allows.
    static let streamCap = 100

    /// What an origin may send on a stream before it hears from us: the smallest read-ahead a leg
    /// asks for (an HTTP/2 client stream's, `H2Stream.bufferLimit`), since response bytes wait in
    /// the stream's input until its reader takes them. A leg that may hold more (an HTTP/1.1
    /// client's) raises its stream's window when the response starts (`UpstreamH2Stream`).
    static let initialStreamWindow = H2Stream.bufferLimit

    init(origin: Origin, bev: OpaquePointer, worker: Worker, peer: PeerAddress?, probing: UpstreamLeg? = nil) {
        self.origin = origin
        self.peer = peer
        self.bev = bev
        self.worker = worker
        confirmed = probing == nil
        if let probing { probingLegs = [WeakLeg(probing)] }
        var settings = H2Session.Settings()
        settings.streamWindow = Self.initialStreamWindow
        session = H2Session(role: .client, settings: settings, delegate: self)
        let context = Unmanaged.passUnretained(self).toOpaque()
        wake = event_new(worker.base, -1, 0, upstreamH2Wake, context)
        bufferevent_setcb(bev, upstreamH2Read, upstreamH2Write, upstreamH2Event, context)
        let watermark = worker.configuration.limits.bufferHighWatermark
        bufferevent_setwatermark(bev, sp_ev_write(), watermark / 2, 0)
        bufferevent_enable(bev, sp_ev_read() | sp_ev_write())
        flush()
    }

    deinit {
        if let wake { event_free(wake) }
    }

    var isIdle: Bool { attached.isEmpty }

    /// A new stream fits: the connection is up, not going away, and under the origin's limit.
    var acceptsStream: Bool {
        confirmed && !goingAway && !isClosed && session.session != nil
            && attached.count < min(Self.streamCap, max(1, session.remoteMaxConcurrentStreams))
    }

    /// Prior knowledge not answered yet: one more leg may wait for the answer on this connection.
    var acceptsProbingStream: Bool {
        !confirmed && !goingAway && !isClosed && attached.count < Self.streamCap
    }

    /// A leg waits with the opener for the origin's answer to our preface; its stream goes with theirs.
    func attachProbing(_ leg: UpstreamLeg) -> UpstreamH2Stream {
        probingLegs.append(WeakLeg(leg))
        return attach(leg)
    }

    /// A stream for `leg`, whose HEADERS go out once the leg wrote its request head.
    func attach(_ leg: UpstreamLeg) -> UpstreamH2Stream {
        let stream = UpstreamH2Stream(
            connection: self, leg: leg, highWatermark: worker.configuration.limits.bufferHighWatermark, inputLimit: leg.inputLimit)
        attached[ObjectIdentifier(stream)] = stream
        hopsServed += 1
        return stream
    }

    func detach(_ stream: UpstreamH2Stream) {
        attached[ObjectIdentifier(stream)] = nil
        if stream.id > 0, byID[stream.id] === stream {
            byID[stream.id] = nil
            // Unfinished: the origin stops sending it (CANCEL, RFC 9113 §8.1).
            if !stream.isFinished { session.reset(stream: stream.id, code: H2ErrorCode.cancel.rawValue) }
        }
        if attached.isEmpty { idleSince = monotonicMilliseconds() }
        flush()
        closeIfDone()
    }

    func submit(_ stream: UpstreamH2Stream, fields: [H2HeaderField], hasBody: Bool) -> Bool {
        guard !goingAway, !isClosed else { return false }
        let id = session.submitRequest(fields: fields, hasBody: hasBody)
        guard id > 0 else { return false }
        stream.id = id
        byID[id] = stream
        return true
    }

    func resume(_ stream: UpstreamH2Stream) {
        guard stream.id > 0 else { return }
        session.resumeData(stream: stream.id)
    }

    /// The stream's reader may hold `size` bytes of its response: the origin may send that much ahead.
    func raiseWindow(_ stream: UpstreamH2Stream, to size: Int) {
        guard stream.id > 0 else { return }
        session.raiseStreamWindow(stream: stream.id, to: size)
    }

    func consume(_ stream: UpstreamH2Stream, bytes: Int) {
        guard stream.id > 0 else { return }
        session.consume(stream: stream.id, bytes: bytes)
    }

    /// Frames out, as far as the socket's output allows; then the owners hear what changed.
    func flush() {
        guard let bev, !isClosed else { return }
        if let failure = session.send(to: outputBuffer(bev), highWatermark: worker.configuration.limits.bufferHighWatermark) {
            fail(reason: failure.code)
            return
        }
        if !session.wantsRead && !session.wantsWrite { fail(reason: session.lastProtocolError ?? "h2_session_over") }
        accountBufferedBytes()
    }

    // MARK: Memory (docs/http2.md, "Memory")

    /// Bytes this connection holds in the proxy: its socket's buffers and its streams' request and
    /// response buffers. A stream's response bytes are credited back to the origin only as its
    /// pump takes them (`UpstreamH2Stream.inputDrained`), so they stay under the stream window,
    /// and all streams' together under the connection window.
    var bufferedBytes: Int {
        let socket = bev.map { EventBuffer.length(inputBuffer($0)) + EventBuffer.length(outputBuffer($0)) } ?? 0
        return attached.values.reduce(socket) { $0 + EventBuffer.length($1.input) + EventBuffer.length($1.output) }
    }

    /// What `bufferedBytes` was when last reported to the gauges.
    private var reportedBufferedBytes = 0

    private func accountBufferedBytes() {
        let now = isClosed ? 0 : bufferedBytes
        worker.configuration.metrics.h2UpstreamBuffered.update(from: reportedBufferedBytes, to: now)
        reportedBufferedBytes = now
    }

    func notify(_ stream: UpstreamH2Stream) {
        // Once per wake (a flag, not a scan of the list: this runs for every DATA chunk).
        if !stream.queuedForNotification {
            stream.queuedForNotification = true
            toNotify.append(stream)
        }
        guard !wakeArmed, let wake else { return }
        wakeArmed = true
        event_active(wake, 0, 0)
    }

    /// Closes an idle connection (the pool's expiry).
    func closeIdle() {
        guard isIdle else { return }
        shutdown()
    }

    /// The worker stops: every stream still attached ends with it.
    func closeNow() { fail(reason: "shutdown") }

    // MARK: Socket callbacks

    fileprivate func readable() {
        guard let bev, !isClosed else { return }
        if !confirmed {
            // RFC 9113 §3.4: a server's preface is a SETTINGS frame (type 4 on stream 0). Anything
            // else (an HTTP/1.1 "400 Bad Request" to our preface) says the origin does not speak h2c.
            let input = inputBuffer(bev)
            guard EventBuffer.length(input) >= 9 else { return }
            let header = Array(UnsafeRawBufferPointer(EventBuffer.contiguousPrefix(input, 9)))
            guard header[3] == 0x04, header[5] & 0x7F == 0, header[6] == 0, header[7] == 0, header[8] == 0 else {
                refusePriorKnowledge()
                return
            }
            confirmed = true
            let legs = probingLegs.compactMap(\.leg)
            probingLegs = []
            for leg in legs { leg.h2Confirmed() }
        }
        if let failure = session.receive(from: inputBuffer(bev)) {
            session.terminate(code: H2ErrorCode.protocolError.rawValue)
            flush()
            fail(reason: failure.code)
            return
        }
        flush()
    }

    fileprivate func writable() { flush() }

    fileprivate func ended() {
        if !confirmed {
            refusePriorKnowledge()
            return
        }
        fail(reason: "upstream_closed")
    }

    /// The origin did not answer our preface as HTTP/2: it is remembered as HTTP/1.1-only and the
    /// leg that opened this connection starts over with HTTP/1.1 (nothing of the request was sent:
    /// no stream is submitted before the origin's SETTINGS).
    private func refusePriorKnowledge() {
        worker.pool.rememberHTTP1Only(origin)
        let legs = probingLegs.compactMap(\.leg)
        probingLegs = []
        for stream in attached.values { attached[ObjectIdentifier(stream)] = nil }
        shutdown()
        for leg in legs { leg.h2FallBackToHTTP1() }
    }

    fileprivate func wakeFired() {
        wakeArmed = false
        let streams = toNotify
        toNotify.removeAll()
        for stream in streams { stream.queuedForNotification = false }
        for stream in streams { stream.deliverNotifications() }
        flush()
    }

    /// The connection cannot go on: every stream still attached hears its end (a cut, or a 502
    /// before its response head, as for an HTTP/1.1 origin that hung up).
    private func fail(reason: String) {
        guard !isClosed else { return }
        goingAway = true
        for stream in attached.values { stream.connectionEnded() }
        shutdown()
    }

    private func shutdown() {
        guard !isClosed else { return }
        isClosed = true
        goingAway = true
        accountBufferedBytes()
        worker.pool.removeHTTP2(self)
        if let bev {
            self.bev = nil
            worker.pool.release(bev)  // bufferevent_free clears the callbacks
        }
    }

    private func closeIfDone() {
        if goingAway, attached.isEmpty { shutdown() }
    }

    // MARK: H2SessionDelegate

    func h2FrameStarted(_ session: H2Session, type: H2FrameType, flags: UInt8, stream: Int32, length: Int) -> Bool { true }

    func h2Headers(_ session: H2Session, stream: Int32, fields: [H2HeaderField], endStream: Bool, kind: H2HeadersKind) {
        byID[stream]?.receivedHeaders(fields, endStream: endStream, kind: kind)
    }

    func h2Data(_ session: H2Session, stream: Int32, bytes: UnsafeRawBufferPointer) {
        guard let target = byID[stream] else {
            session.consume(stream: stream, bytes: bytes.count)
            return
        }
        target.receivedData(bytes)
    }

    func h2StreamEnded(_ session: H2Session, stream: Int32) { byID[stream]?.receivedEnd() }

    func h2StreamClosed(_ session: H2Session, stream: Int32, code: UInt32) {
        guard let target = byID[stream] else { return }
        byID[stream] = nil
        target.streamClosed(code: code)
    }

    func h2StreamRejected(_ session: H2Session, stream: Int32, reason: String) {}

    func h2ReadBody(_ session: H2Session, stream: Int32, into buffer: UnsafeMutableRawBufferPointer) -> H2BodyRead {
        guard let target = byID[stream] else { return .end(0, trailers: nil) }
        return target.readRequestBody(into: buffer)
    }

    func h2GoAwayReceived(_ session: H2Session, lastStream: Int32, code: UInt32) {
        // Streams above `lastStream` were not processed: nghttp2 closes them (REFUSED_STREAM) and
        // their legs may retry elsewhere; the others finish here. No new stream on this connection.
        goingAway = true
        worker.pool.removeHTTP2(self)
    }
}

/// A leg held without keeping it alive (its host owns it).
private struct WeakLeg {
    weak var leg: UpstreamLeg?
    init(_ leg: UpstreamLeg) { self.leg = leg }
}

private func withConnection(_ context: UnsafeMutableRawPointer?, _ body: (UpstreamH2Connection) -> Void) {
    let connection = Unmanaged<UpstreamH2Connection>.fromOpaque(context!).takeUnretainedValue()
    withExtendedLifetime(connection) { body(connection) }
}

// The context is unretained: the pool (or an attached stream) holds the connection until
// `shutdown` frees the bufferevent, which removes these callbacks; the wake event goes with it.
private func upstreamH2Read(_: OpaquePointer?, _ context: UnsafeMutableRawPointer?) { withConnection(context) { $0.readable() } }
private func upstreamH2Write(_: OpaquePointer?, _ context: UnsafeMutableRawPointer?) { withConnection(context) { $0.writable() } }
private func upstreamH2Event(_: OpaquePointer?, _ events: Int16, _ context: UnsafeMutableRawPointer?) {
    guard events & (sp_bev_event_eof() | sp_bev_event_error()) != 0 else { return }
    withConnection(context) { $0.ended() }
}
private func upstreamH2Wake(_: Int32, _: Int16, _ context: UnsafeMutableRawPointer?) { withConnection(context) { $0.wakeFired() } }
