import CLibevent
import HTTP1Codec
import ProxyCore
import ScopePolicy
import SecretScan

/// What an upstream leg reports to the connection that owns it.
protocol UpstreamLegOwner: AnyObject {
    func legConnected(_ leg: UpstreamLeg)
    func legConnectFailed(_ leg: UpstreamLeg, _ error: ProxyError)
    func legReadable(_ leg: UpstreamLeg)
    func legWritable(_ leg: UpstreamLeg)
    func legClosed(_ leg: UpstreamLeg)
    /// A filtered body held bytes back for `SecretHoldBack.idleReleaseMilliseconds` with nothing new.
    func legHoldBackExpired(_ leg: UpstreamLeg)
}

/// What one run of a body pump tells the machine, in the order it must hear it: the values the
/// scrubber masked (before the progress that carries those bytes), the progress, and the guard's
/// block (after the bytes forwarded before the value; a blocked body never reports `complete`).
struct PumpReports {
    var scrubbed: [SecretFinding]?
    var progress: BodyProgress?
    var blocked: SecretFinding?
    /// With `blocked`: whether any byte of the request (its head first) had left for the origin.
    var blockedAfterBytesSent = false
}

/// The upstream side of one hop: its connector while connecting, then its bufferevent, and the body
/// pumps and response-head scanner that belong to that connection. Created by the `connect` action
/// and gone after `releaseUpstream`.
///
/// Lifetime rule (a use-after-free once came from this; docs/testing.md, "Hardening journal"): libevent holds a *retained* reference
/// to the leg for as long as the leg's callbacks are installed, and `release` removes the callbacks
/// before it gives that reference up, so no callback can ever reach a freed object.
final class UpstreamLeg: UpstreamConnectorDelegate {
    let hop: HopID
    let origin: Origin
    let transport: UpstreamTransport
    /// The hop's egress clearance: what the connect checks addresses with, and what a pooled or
    /// shared connection's address must pass before this hop reuses it (docs/egress.md).
    let egress: EgressClearance
    /// The address the connection went to, with a `mode: report` rule that would have refused it.
    private(set) var peer: PeerAddress?
    private var reportedRule: String?
    /// What the machine hears with `upstreamConnected`.
    var upstreamPeer: UpstreamPeer? { peer.map { UpstreamPeer(address: $0.text, reported: reportedRule) } }
    /// What the leg may speak to its origin (`UpstreamHTTP2.choose`).
    private(set) var http2: UpstreamHTTP2
    /// The hop rides a stream of a shared HTTP/2 connection: `input` and `output` are the stream's
    /// HTTP/1.1 views (UpstreamH2Stream), and `bev` stays nil.
    private(set) var h2: UpstreamH2Stream?
    /// The stream is on a connection an earlier hop opened (a stale-connection retry is allowed).
    private(set) var joinedSharedConnection = false
    private unowned let worker: Worker
    private weak var owner: UpstreamLegOwner?
    private var connector: UpstreamConnector?
    /// The connect this leg opened that hops to the same origin wait for (`PendingHTTP2`).
    private var opening: PendingHTTP2?
    /// Another leg's connect to the same origin that this leg waits for.
    private var waitingOn: PendingHTTP2?
    private(set) var bev: OpaquePointer?
    /// The context pointer libevent holds while callbacks are installed (a +1 on the leg).
    private var callbackContext: Unmanaged<UpstreamLeg>?
    /// Transparent capture: the address this leg connects to instead of resolving its origin
    /// (`PinnedUpstream`); such a leg never speaks HTTP/2 and never goes back to the pool.
    let pinnedAddress: sockaddr_storage?
    /// Reads a plain upstream in large chunks (TLS upstreams read through OpenSSL).
    private var reader: SocketReader?

    var requestPump: BodyPump?
    var responsePump: BodyPump?
    var responseReader = HeadReader(limits: .response)
    /// Any byte of a response (interim or final) arrived: a retry is no longer safe.
    var sawResponseBytes = false
    /// The origin hung up (its remaining input may still be relayed).
    var closed = false
    /// Bytes are spliced both ways (CONNECT, upgrade).
    var splicing = false
    /// A spliced WebSocket whose frames are read (guarded, substituted, scrubbed) on their way.
    var webSocket: WebSocketRelay?
    /// The client hung up on a tunnel: close once this leg's output has drained.
    var closingAfterDrain = false
    /// Releases what a filtered body holds back after an idle time (created the first time a body
    /// holds bytes past a pump run; most never do). Freed by `release`, which every path runs.
    private var holdBackTimer: OpaquePointer?
    /// Body bytes taken by both pumps when the timer was last armed: it restarts only for new bytes.
    private var bytesAtHoldBackArm: UInt64 = .max

    var isTLS: Bool { transport == .tls }
    /// Bytes this leg put in its output buffer (head and request body): what was appended and is
    /// no longer there has been written towards the origin (libevent writes from the event loop,
    /// never while a pump runs).
    private var appendedToOutput: Int = 0

    /// The most response bytes read ahead from the origin into `input` before reading stops (the
    /// owner's `bodyBufferLimit`); the kernel's socket buffer then holds the origin back.
    let inputLimit: Int

    init(
        hop: HopID, origin: Origin, transport: UpstreamTransport, http2: UpstreamHTTP2 = .never, egress: EgressClearance, worker: Worker,
        owner: UpstreamLegOwner, inputLimit: Int? = nil, pinnedAddress: sockaddr_storage? = nil
    ) {
        self.pinnedAddress = pinnedAddress
        self.egress = egress
        self.inputLimit = inputLimit ?? worker.configuration.limits.bufferHighWatermark
        self.hop = hop
        self.origin = origin
        self.transport = transport
        self.http2 = http2
        self.worker = worker
        self.owner = owner
    }

    deinit {
        // `release` runs first on every path; this is only a guard against a leaked connector.
        connector?.cancel()
        if let holdBackTimer { event_free(holdBackTimer) }
    }

    /// Takes an idle pooled connection (its pool callbacks are already removed), with its reader.
    func attach(pooled: UpstreamConnection) {
        peer = pooled.peer
        reportedRule = reported(pooled.peer)
        install(pooled.bev, reader: pooled.reader)
    }

    /// Resolves and connects; the owner hears `legConnected` or `legConnectFailed` (possibly before
    /// this returns: IP literals and /etc/hosts names resolve inline). A leg that may speak HTTP/2
    /// to an origin another leg is already connecting to waits for that connect instead
    /// (`PendingHTTP2`, RFC 9113 §9.1).
    func connect() {
        if http2 != .never, !worker.pool.speaksOnlyHTTP1(origin) {
            if let probing = worker.pool.probingHTTP2(origin, admitting: egress) {
                adopt(peerOf: probing)
                h2 = probing.attachProbing(self)  // the owner hears `h2Confirmed` or a fall-back
                return
            }
            if let pending = worker.pool.pendingHTTP2WithRoom(origin, admitting: egress) {
                pending.add(self)
                waitingOn = pending
                return
            }
            opening = worker.pool.openPendingHTTP2(origin, opener: self)
        }
        startConnector()
    }

    private func startConnector() {
        let connector = UpstreamConnector(
            origin: origin, worker: worker, tls: transport == .tls, http2: http2, egress: egress, pinnedAddress: pinnedAddress)
        connector.delegate = self
        self.connector = connector
        connector.start()
    }

    /// The opener's hop ended with its connect in progress: this leg carries it on.
    private func takeOver(_ connector: UpstreamConnector, _ pending: PendingHTTP2) {
        waitingOn = nil
        opening = pending
        connector.delegate = self
        self.connector = connector
    }

    /// The connect this leg opened is over: the legs that waited for it, no longer waiting.
    private func settleOpening() -> [UpstreamLeg] {
        guard let opening else { return [] }
        self.opening = nil
        worker.pool.removePendingHTTP2(opening)
        let waiters = opening.takeWaiters()
        for waiter in waiters { waiter.waitingOn = nil }
        return waiters
    }

    func connectorDidConnect(_ connector: UpstreamConnector, bev: OpaquePointer, tls: Bool, h2: Bool) {
        worker.configuration.metrics.upstreamConnections.add(1, ordering: .relaxed)
        guard self.connector === connector else {
            worker.pool.release(bev)
            return
        }
        self.connector = nil
        if let connected = connector.peer {
            peer = connected.address
            reportedRule = connected.reported
        }
        let waiters = settleOpening()
        if h2 {
            // Prior knowledge is confirmed by the origin's first frame (`h2Confirmed`), or the leg
            // falls back to HTTP/1.1 (`h2FallBackToHTTP1`); ALPN already said h2.
            let probing = http2 == .priorKnowledge
            let connection = UpstreamH2Connection(origin: origin, bev: bev, worker: worker, peer: peer, probing: probing ? self : nil)
            worker.pool.addHTTP2(connection)
            self.h2 = connection.attach(self)
            if !probing { owner?.legConnected(self) }
            for waiter in waiters { waiter.joinOpened(connection, probing: probing) }
            return
        }
        install(bev)
        // ALPN chose HTTP/1.1: later hops connect at once, and the waiters each open their own.
        if http2 == .offerInALPN { worker.pool.rememberHTTP1Only(origin) }
        owner?.legConnected(self)
        for waiter in waiters { waiter.startConnector() }
    }

    /// The connect this leg waited for brought HTTP/2: a stream on it (with prior knowledge, once
    /// the origin's SETTINGS confirm it).
    private func joinOpened(_ connection: UpstreamH2Connection, probing: Bool) {
        guard !connection.goingAway else { return startConnector() }  // it ended already: a connect of its own
        adopt(peerOf: connection)
        if probing {
            h2 = connection.attachProbing(self)
            return
        }
        h2 = connection.attach(self)
        owner?.legConnected(self)
    }

    /// The origin answered our h2c preface with SETTINGS: the hop goes on over HTTP/2.
    func h2Confirmed() { owner?.legConnected(self) }

    /// The origin did not speak h2c: a new connection, HTTP/1.1 (no byte of the request was sent).
    func h2FallBackToHTTP1() {
        h2 = nil
        http2 = .never
        connect()
    }

    /// Takes a stream on a live HTTP/2 connection to this origin, if one has room; the owner hears
    /// `legConnected` before this returns true.
    func joinSharedHTTP2() -> Bool {
        guard http2 != .never, let connection = worker.pool.sharedHTTP2(origin, admitting: egress) else { return false }
        adopt(peerOf: connection)
        h2 = connection.attach(self)
        joinedSharedConnection = true
        owner?.legConnected(self)
        return true
    }

    func connectorDidFail(_ connector: UpstreamConnector, error: ProxyError) {
        guard self.connector === connector else { return }
        self.connector = nil
        let waiters = settleOpening()
        owner?.legConnectFailed(self, error)
        // Same origin, same addresses: the hops that waited fail the same way, at once.
        for waiter in waiters { waiter.owner?.legConnectFailed(waiter, error) }
    }

    /// A connection another hop opened carries this one: its address, as this hop's rules see it.
    private func adopt(peerOf connection: UpstreamH2Connection) {
        peer = connection.peer
        reportedRule = reported(connection.peer)
    }

    /// The `mode: report` rule this hop's egress would have refused `peer` with, if any (only
    /// report mode has one: enforce mode never reuses a connection its rules deny).
    private func reported(_ peer: PeerAddress?) -> String? {
        guard egress.rules.mode == .report, let peer, case .reported(let rule) = egress.admits(peer.endpoint.address) else { return nil }
        return rule
    }

    private func install(_ upstream: OpaquePointer, reader pooledReader: SocketReader? = nil) {
        bev = upstream
        let context = Unmanaged.passRetained(self)
        callbackContext = context
        bufferevent_setcb(upstream, legReadCallback, legWriteCallback, legEventCallback, context.toOpaque())
        let watermark = worker.configuration.limits.bufferHighWatermark
        bufferevent_setwatermark(upstream, sp_ev_read(), 0, inputLimit)
        bufferevent_setwatermark(upstream, sp_ev_write(), watermark / 2, 0)
        bufferevent_set_max_single_read(upstream, 128 * 1024)
        bufferevent_set_max_single_write(upstream, 128 * 1024)
        if isTLS {
            bufferevent_enable(upstream, sp_ev_read() | sp_ev_write())
        } else {
            // EV_WRITE only while output is pending: see flushOutput. Reading is the SocketReader's.
            bufferevent_disable(upstream, sp_ev_write())
            if let pooledReader,
                pooledReader.retarget(read: legReadCallback, event: legEventCallback, context: context.toOpaque(), highWatermark: inputLimit)
            {
                reader = pooledReader
            } else {
                reader = SocketReader(
                    base: worker.base, bev: upstream, highWatermark: inputLimit, read: legReadCallback,
                    event: legEventCallback, context: context.toOpaque())
            }
        }
    }

    var input: OpaquePointer? { h2?.input ?? bev.map(inputBuffer) }
    var output: OpaquePointer? { h2?.output ?? bev.map(outputBuffer) }

    /// Bytes this leg holds in the proxy now: read from the origin and not yet pumped, written
    /// for it and not yet sent (the buffers' accounting: `H2ClientConnection.bufferedBytes`).
    var bufferedBytes: Int {
        (input.map(EventBuffer.length) ?? 0) + (output.map(EventBuffer.length) ?? 0)
    }

    func write(_ bytes: [UInt8]) {
        guard let output else { return }
        appendedToOutput += bytes.count
        EventBuffer.append(output, bytes)
        h2?.outputAdded()
    }

    func flush() {
        if let h2 {
            h2.connection.flush()
            return
        }
        guard let bev else { return }
        flushOutput(bev, tls: isTLS)
    }

    /// Stops every callback, then hands the connection to the pool (`reuse`, when it is clean: nothing
    /// unread after the response) or closes it. Idempotent.
    func release(reuse: Bool) {
        if let waitingOn {
            self.waitingOn = nil
            waitingOn.remove(self)
        }
        if let opening {
            self.opening = nil
            // Others wait for this connect: the first of them carries it on (nobody starts over).
            if let connector, let next = opening.promoteFirstWaiter() {
                self.connector = nil
                next.takeOver(connector, opening)
            } else {
                worker.pool.removePendingHTTP2(opening)
            }
        }
        connector?.cancel()
        connector = nil
        requestPump = nil
        responsePump = nil
        if let holdBackTimer {
            event_free(holdBackTimer)  // removes it first: its callback cannot run after this
            self.holdBackTimer = nil
        }
        if let h2 {
            self.h2 = nil
            h2.detach()  // an unfinished stream is cancelled; the connection stays for others
        }
        let reader = self.reader
        self.reader = nil
        if let upstream = bev {
            bev = nil
            // A pinned leg's connection is never pooled (`PinnedUpstream`): it is closed.
            if reuse, pinnedAddress == nil, !closed, EventBuffer.length(inputBuffer(upstream)) == 0, reader?.isReading ?? true {
                // The pool replaces our callbacks, on the bufferevent and on the reader.
                worker.pool.checkin(UpstreamConnection(origin: origin, bev: upstream, reader: reader, peer: peer))
            } else {
                worker.pool.release(upstream, reader: reader)  // the reader stops, then bufferevent_free clears the callbacks
            }
        } else {
            reader?.stop()
        }
        callbackContext?.release()
        callbackContext = nil
    }

    // MARK: Bodies (the pumps move bytes; the machine hears what moved)

    /// Client → upstream, as far as backpressure allows. With `reportProgress` false a body that
    /// is not finished reports no `moved` yet (its bytes are counted in the next report): the
    /// engine reports bulk progress a few times a second, not for every read. A guard's block is
    /// reported at once, after the bytes forwarded before the value, and ends the body (never
    /// `complete`).
    func pumpRequestBody(from clientInput: OpaquePointer, highWatermark: Int, reportProgress: Bool = true) -> PumpReports {
        // The pump is mutated where it is stored: a copy would copy the body it captures, every time.
        guard requestPump?.expectsMore == true, let output else { return PumpReports() }
        let before = EventBuffer.length(output)
        defer {
            appendedToOutput += max(0, EventBuffer.length(output) - before)
            h2?.outputAdded()
        }
        do {
            _ = try requestPump!.pump(from: clientInput, to: output, highWatermark: highWatermark)
        } catch {
            return PumpReports(progress: .invalid)
        }
        if let leak = requestPump!.takeBlock() {
            // Measured before this run's bytes count as appended: only earlier bytes can have left.
            return PumpReports(
                progress: nonEmpty(requestPump!.progress()), blocked: leak,
                blockedAfterBytesSent: appendedToOutput > before)
        }
        guard reportProgress || requestPump!.isComplete else { return PumpReports() }
        return PumpReports(progress: nonEmpty(requestPump!.progress()))
    }

    private func nonEmpty(_ progress: BodyProgress) -> BodyProgress? {
        if case .moved(0, 0) = progress { return nil }
        return progress
    }

    /// What moved since the last report, if anything (a connection that ends reports the rest).
    func requestProgress() -> BodyProgress? { unreported(&requestPump) }
    func responseProgress() -> BodyProgress? { unreported(&responsePump) }

    private func unreported(_ pump: inout BodyPump?) -> BodyProgress? {
        guard pump != nil, case .moved(let payload, let consumed) = pump!.progress(), payload + consumed > 0 else { return nil }
        return .moved(payload: payload, consumed: consumed)
    }

    /// The request body still expects bytes from the client (not once the guard stopped it).
    var awaitsRequestBytes: Bool { requestPump?.expectsMore ?? false }

    /// Upstream → client, as far as backpressure allows. An origin that hung up ends a
    /// close-delimited body, and cuts any other, once what it sent before closing has gone out.
    /// Values the scrubber masked are reported in the same run, before the progress that carries
    /// them (a throttled `moved` comes later still, never earlier).
    func pumpResponseBody(to clientOutput: OpaquePointer, highWatermark: Int, reportProgress: Bool = true) -> PumpReports {
        guard responsePump != nil, let input else { return PumpReports() }
        var reports = PumpReports()
        defer {
            countRepeatedMatches()
            h2?.inputDrained()
        }
        do {
            _ = try responsePump!.pump(from: input, to: clientOutput, highWatermark: highWatermark)
        } catch {
            reports.scrubbed = responsePump!.takeFindings()
            reports.progress = .invalid
            return reports
        }
        let drainedAfterClose = closed && EventBuffer.length(input) == 0
        if drainedAfterClose, !responsePump!.isComplete { responsePump!.sourceClosed(destination: clientOutput) }
        reports.scrubbed = responsePump!.takeFindings()
        if drainedAfterClose, !responsePump!.isComplete {
            reports.progress = .cut
            return reports
        }
        guard reportProgress || responsePump!.isComplete else { return reports }
        reports.progress = nonEmpty(responsePump!.progress())
        return reports
    }

    /// The record names each masked form once; the metric counts every match, so the repeats go
    /// to it directly (the record's findings are counted when the record is emitted).
    private func countRepeatedMatches() {
        // The closure runs only when there are repeats: an unfiltered relay does not touch the metrics.
        responsePump?.takeRepeats { secret, count in
            worker.configuration.metrics.countScrubbed(secret: secret, matches: count)
        }
    }

    // MARK: The hold-back's idle release (docs/security-model.md, "No oracle")

    /// After a pump run: a body that holds bytes back gets them released after the idle time,
    /// counted from the last byte taken (a run that took nothing does not restart it); a body that
    /// holds nothing needs no timer.
    func scheduleHoldBackRelease() {
        let holding =
            (requestPump?.holdsBack ?? false) || (responsePump?.holdsBack ?? false) || (webSocket?.holdsBack ?? false)
        guard holding else {
            if let holdBackTimer, bytesAtHoldBackArm != .max {
                event_del(holdBackTimer)
                bytesAtHoldBackArm = .max
            }
            return
        }
        let taken = (requestPump?.bodyBytes ?? 0) &+ (responsePump?.bodyBytes ?? 0) &+ (webSocket?.taken ?? 0)
        guard taken != bytesAtHoldBackArm else { return }
        bytesAtHoldBackArm = taken
        if holdBackTimer == nil {
            holdBackTimer = event_new(worker.base, -1, 0, legHoldBackCallback, Unmanaged.passUnretained(self).toOpaque())
        }
        if let holdBackTimer { sp_event_add_ms(holdBackTimer, SecretHoldBack.idleReleaseMilliseconds) }
    }

    /// The idle time ran out: both bodies' held bytes go to their destinations.
    func releaseHeldBytes(clientOutput: OpaquePointer) {
        bytesAtHoldBackArm = .max
        if let output {
            requestPump?.releaseHeld(to: output)
            h2?.outputAdded()
        }
        if responsePump != nil { responsePump!.releaseHeld(to: clientOutput) }
        webSocket?.releaseHeld(clientOutput: clientOutput, upstreamOutput: output)
    }

    fileprivate func holdBackExpired() { owner?.legHoldBackExpired(self) }

    // The HTTP/2 stream's events, from its connection's deferred callback (never from inside the session).
    func h2Readable() { owner?.legReadable(self) }
    func h2Writable() { owner?.legWritable(self) }
    func h2Closed() {
        guard !closed else { return }
        closed = true
        owner?.legClosed(self)
    }

    fileprivate func readable() { owner?.legReadable(self) }
    fileprivate func writable() {
        if let bev, !isTLS, EventBuffer.length(outputBuffer(bev)) == 0 { bufferevent_disable(bev, sp_ev_write()) }
        owner?.legWritable(self)
    }
    fileprivate func event(_ events: Int16) {
        guard events & (sp_bev_event_eof() | sp_bev_event_error()) != 0, !closed else { return }
        closed = true
        owner?.legClosed(self)
    }
}

// Trampolines: the context is the leg, retained while installed (see `release`).

private func withLeg(_ context: UnsafeMutableRawPointer?, _ body: (UpstreamLeg) -> Void) {
    let leg = Unmanaged<UpstreamLeg>.fromOpaque(context!).takeUnretainedValue()
    withExtendedLifetime(leg) { body(leg) }
}

private func legReadCallback(_: OpaquePointer?, _ context: UnsafeMutableRawPointer?) {
    withLeg(context) { $0.readable() }
}

private func legWriteCallback(_: OpaquePointer?, _ context: UnsafeMutableRawPointer?) {
    withLeg(context) { $0.writable() }
}

/// The timer's context is the leg unretained: `release` frees the timer before the leg can go.
private func legHoldBackCallback(_: Int32, _: Int16, _ context: UnsafeMutableRawPointer?) {
    withLeg(context) { $0.holdBackExpired() }
}

private func legEventCallback(_: OpaquePointer?, _ events: Int16, _ context: UnsafeMutableRawPointer?) {
    withLeg(context) { $0.event(events) }
}
