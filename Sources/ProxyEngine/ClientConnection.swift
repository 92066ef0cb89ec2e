import CLibevent
import PosixSupport
import HTTP1Codec
import ProxyCore
#if canImport(Glibc)
import Glibc
#endif

/// One client connection: the driver between libevent and the connection's state machine. It
/// turns bytes and socket events into `ConnectionEvent`s, and carries out the `ConnectionAction`s
/// the machine returns. Every decision lives in `ConnectionMachine`; what is here is I/O:
///
///   client bytes → head scanner → `requestHead` → machine → `connect` → UpstreamLeg
///   → `sendToUpstream` / `pumpRequestBody` → upstream bytes → `responseHead` → machine
///   → `relayResponseBody` → client → `releaseUpstream` (pool or close) → next request
///
/// Everything runs on the worker's loop thread.
final class ClientConnection: UpstreamLegOwner {
    private unowned let worker: Worker
    private var machine: ConnectionMachine
    private var transport: ClientTransport!
    /// The current hop's upstream, if any (at most one at a time).
    private var leg: UpstreamLeg?
    /// A request body being read whole before its hop is planned.
    private var collector: BodyCollector?
    private var requestReader = HeadReader(limits: .request)
    private var timer: OpaquePointer!
    private var armedTimer: TimerPurpose?
    let peer: String
    /// Events raised while actions run wait here, so the machine never handles one event inside
    /// another (a connector may report success before `connect` returns).
    private var pending: [ConnectionEvent] = []
    private var dispatching = false
    /// The machine's actions for the event being run (one buffer, reused).
    private var actions: [ConnectionAction] = []
    private var isClosed = false
    /// The token fetch this connection waits for, withdrawn from if it closes first.
    var awaitedToken: (tokens: any AccessTokenSource, secret: String, waiterID: UInt64)?
    /// Bulk progress (body bytes, tunnel bytes) goes to the machine at most this often: it only
    /// restarts the stall timer and counts bytes, and a report per 4 KiB read cost more than the
    /// read. Bytes are never lost: the next report carries them.
    private let progressInterval: UInt64
    private var lastProgressReport: UInt64 = 0
    private var unreportedTunnelBytes: (fromClient: UInt64, fromUpstream: UInt64) = (0, 0)

    private var configuration: EngineConfiguration { worker.configuration }
    private var highWatermark: Int { configuration.limits.bufferHighWatermark }

    /// `tls`: `bev` is a TLS bufferevent whose handshake is done (the TLS client listener).
    init(worker: Worker, bev: OpaquePointer, facts: ConnectionFacts, mode: ConnectionMode, tls: Bool = false) {
        self.worker = worker
        self.peer = facts.peer
        let settings = ConnectionMachine.Settings(
            timeouts: worker.configuration.timeouts, limits: worker.configuration.limits,
            admission: .init(tunnel: worker.configuration.tunnel, canIntercept: worker.configuration.tls?.minter != nil),
            logBodies: worker.configuration.accessLog?.logBodies == true)
        machine = ConnectionMachine(settings: settings, mode: mode, facts: facts, ids: worker.requestIDs.fork())
        progressInterval = UInt64(min(100, max(1, worker.configuration.timeouts.idle / 4))) * 1000
        transport = ClientTransport(bev: bev, base: worker.base, idleMilliseconds: worker.configuration.timeouts.idle,
                                    highWatermark: worker.configuration.limits.bufferHighWatermark, tls: tls,
                                    finished: { [unowned self] in close() })
    }

    func start() {
        let context = Unmanaged.passUnretained(self).toOpaque()
        timer = event_new(worker.base, -1, 0, timerCallback, context)
        transport.install(read: clientReadCallback, write: clientWriteCallback, event: clientEventCallback,
                          timer: lingerCallback, context: context)
        execute(machine.start())
        // Bytes decrypted with the end of a TLS handshake arrived before these callbacks were set:
        // no read callback will announce them.
        if transport.isTLS, !isClosed, EventBuffer.length(transport.input) > 0 {
            withExtendedLifetime(self) {
                clientReadable()
                flushOutputs()
            }
        }
    }

    // MARK: Events into the machine

    private func deliver(_ event: ConnectionEvent) {
        if dispatching {
            pending.append(event)
            return
        }
        dispatching = true
        run(event)
        while !pending.isEmpty { run(pending.removeFirst()) }
        dispatching = false
    }

    /// After a close the machine still hears what was queued (its records stay whole); `execute`
    /// then carries out only bookkeeping.
    private func run(_ event: ConnectionEvent) {
        actions.removeAll(keepingCapacity: true)
        machine.handle(event, into: &actions)
        for action in actions { execute(action) }
    }

    private func execute(_ actions: [ConnectionAction]) {
        for action in actions { execute(action) }
    }

    // MARK: Actions out of the machine

    private func execute(_ action: ConnectionAction) {
        if isClosed {
            // Only bookkeeping is left once the transport is gone.
            switch action {
            case .emit(let record): emit(record)
            case .releaseUpstream(let hop, _): release(hop, reuse: false)
            default: break
            }
            return
        }
        switch action {
        case .writeToClient(let bytes):
            transport.write(bytes)
        case .startClientTLS(let origin):
            startClientTLS(origin)
        case .readNextRequest:
            readRequestHead()
            if !isClosed, machine.isAwaitingHead, transport.inputClosed {
                deliver(.clientInputClosed(bufferedBytes: EventBuffer.length(transport.input)))
            }
        case .closeClient(.afterFlush):
            transport.closeAfterFlush()
        case .closeClient(.now):
            close()
        case .connect(let hop, let origin, let upstreamTransport, let reusePooled):
            connect(hop, origin, upstreamTransport, reusePooled: reusePooled)
        case .sendToUpstream(let hop, let bytes):
            if let leg, leg.hop == hop { leg.write(bytes) }
        case .collectRequestBody(let framing, let limit):
            collector = BodyCollector(framing: framing, limit: limit)
            collectRequestBody()
        case .pumpRequestBody(let hop, let framing, let capture, let observe, let egressGuard):
            guard let leg, leg.hop == hop else { return }
            leg.requestPump = BodyPump(inbound: framing, outbound: framing, capture: capture, observe: observe,
                                       guard: egressGuard)
            pumpRequestBody()
        case .relayResponseBody(let hop, let inbound, let outbound, let observe, let scrub):
            guard let leg, leg.hop == hop else { return }
            leg.responsePump = BodyPump(inbound: inbound, outbound: outbound, observe: observe, scrub: scrub)
            pumpResponseBody()
        case .splice(let hop):
            guard let leg, leg.hop == hop else { return }
            leg.splicing = true
            pumpTunnel()
        case .finishTunnel(let hop, let side):
            finishTunnel(hop, closedSide: side)
        case .releaseUpstream(let hop, let reuse):
            release(hop, reuse: reuse)
        case .armTimer(let purpose, let milliseconds):
            armedTimer = purpose
            sp_event_add_ms(timer, milliseconds)
        case .cancelTimer:
            armedTimer = nil
            event_del(timer)
        case .emit(let record):
            emit(record)
        case .acquireToken(let secret, let scope):
            acquireToken(secret, from: scope)
        case .markTokenStale(let secret, let token, let scope):
            scope.tokens?.markStale(secret: secret, token: token)
        }
    }

    /// The token comes back as an event on this loop (at once when cached, else from the worker's
    /// mailbox once the one fetch in flight ends); a connection gone by then ignores it. Whatever
    /// kind of source the context holds, only `AccessTokenSource` is used.
    func acquireToken(_ secret: String, from scope: ScopeContext) {
        let requested = scope.tokens?.acquire(secret: secret, mailbox: worker.tokenMailbox) { [weak self] result in
            guard let self, !self.isClosed else { return }
            self.awaitedToken = nil
            // From the mailbox this is a loop callback of its own: it flushes what it wrote, as the
            // socket callbacks do (at once, inside `execute`, the running callback does).
            let fromMailbox = !self.dispatching
            switch result {
            case .success(let token): self.deliver(.tokenReady(secret: secret, token))
            case .failure(let failure): self.deliver(.tokenFailed(secret: secret, endpoint: failure.endpoint, reason: failure.reason))
            }
            if fromMailbox, !self.isClosed { self.flushOutputs() }
        }
        switch requested {
        case .answered:
            break
        case .waiting(let waiterID):
            if let tokens = scope.tokens { awaitedToken = (tokens, secret, waiterID) }
        case nil:
            // The context's source does not know the secret (a reload removed it): fail closed.
            deliver(.tokenFailed(secret: secret, endpoint: scope.tokens?.endpoint(of: secret), reason: .noTokenSource))
        }
    }

    // MARK: Client bytes → request head

    private func readRequestHead() {
        guard EventBuffer.length(transport.input) > 0 else { return }
        if !requestReader.hasStarted { deliver(.headStarted) }
        do {
            guard let (head, bytes) = try requestReader.next(from: transport.input, HeadParser.parseRequest) else { return }
            deliver(.requestHead(head, headBytes: bytes, arrival()))
        } catch {
            deliver(.requestHeadInvalid(error, arrival()))
        }
    }

    private func arrival() -> Arrival {
        Arrival(now: monotonicMicroseconds(), scope: configuration.scope.context, wallClock: Int64(time(nil)))
    }

    // MARK: Upstream legs

    private func connect(_ hop: HopID, _ origin: Origin, _ upstreamTransport: UpstreamTransport, reusePooled: Bool) {
        if let old = leg { old.release(reuse: false) }  // the machine releases first; never two legs
        let leg = UpstreamLeg(hop: hop, origin: origin, transport: upstreamTransport, worker: worker, owner: self)
        self.leg = leg
        if reusePooled, let pooled = worker.pool.checkout(origin) {
            leg.attach(pooled: pooled)
            deliver(.upstreamConnected(hop, reused: true))
        } else {
            leg.connect()
        }
    }

    private func release(_ hop: HopID, reuse: Bool) {
        guard let leg, leg.hop == hop else { return }
        self.leg = nil
        leg.release(reuse: reuse)
    }

    func legConnected(_ leg: UpstreamLeg) {
        guard leg === self.leg else { return }
        deliver(.upstreamConnected(leg.hop, reused: false))
        flushOutputs()
    }

    func legConnectFailed(_ leg: UpstreamLeg, _ error: ProxyError) {
        guard leg === self.leg else { return }
        deliver(.upstreamConnectFailed(leg.hop, error))
        flushOutputs()
    }

    func legReadable(_ leg: UpstreamLeg) {
        guard leg === self.leg else { return }
        if leg.splicing {
            pumpTunnel()
        } else if leg.responsePump != nil {
            pumpResponseBody()
        } else {
            readResponseHeads(leg)
        }
        flushOutputs()
    }

    func legWritable(_ leg: UpstreamLeg) {
        guard leg === self.leg else { return }
        if leg.closingAfterDrain {
            if let output = leg.output, EventBuffer.length(output) == 0 { close() }
        } else if leg.splicing {
            pumpTunnel()
        } else {
            pumpRequestBody()
        }
        flushOutputs()
    }

    func legHoldBackExpired(_ leg: UpstreamLeg) {
        guard leg === self.leg, !isClosed else { return }
        leg.releaseHeldBytes(clientOutput: transport.output)
        flushOutputs()
    }

    func legClosed(_ leg: UpstreamLeg) {
        guard leg === self.leg else { return }
        deliver(.upstreamClosed(leg.hop, sawResponseBytes: leg.sawResponseBytes))
        // A body being relayed ends (close-delimited) or is cut once the bytes sent before the
        // close (held back by backpressure) are out.
        if self.leg === leg, leg.responsePump != nil { pumpResponseBody() }
        flushOutputs()
    }

    // MARK: Response heads ← upstream

    /// Parses heads for as long as the machine expects one from this hop: interim responses keep
    /// it waiting; once the final head is handled (relayed, followed, blocked) the loop ends, and
    /// the hop's remaining bytes are never read as another response (a desync otherwise; docs/security-model.md, "Redirects").
    private func readResponseHeads(_ leg: UpstreamLeg) {
        while leg === self.leg, machine.expectsResponseHead(from: leg.hop), let input = leg.input, EventBuffer.length(input) > 0 {
            leg.sawResponseBytes = true
            do {
                guard let (head, _) = try leg.responseReader.next(from: input, HeadParser.parseResponse) else { return }
                let pipelined = !leg.awaitsRequestBytes && EventBuffer.length(transport.input) > 0
                deliver(.responseHead(leg.hop, head, clientPipelined: pipelined))
            } catch {
                deliver(.responseHeadInvalid(leg.hop, reason: error.responseProblem))
                return
            }
        }
    }

    // MARK: Bodies and tunnels (the leg and the splice move bytes; the machine hears what moved)

    /// Bytes moved since the last (throttled) report, so the records of a connection that ends
    /// now count every byte.
    private func reportPendingProgress() {
        guard let leg else { return }
        if leg.requestPump?.isComplete == false, let progress = leg.requestProgress() { deliver(.requestBody(leg.hop, progress)) }
        if leg.responsePump?.isComplete == false, let progress = leg.responseProgress() { deliver(.responseBody(leg.hop, progress)) }
        if unreportedTunnelBytes.fromClient + unreportedTunnelBytes.fromUpstream > 0 {
            deliver(.tunnelBytes(leg.hop, fromClient: unreportedTunnelBytes.fromClient, fromUpstream: unreportedTunnelBytes.fromUpstream))
            unreportedTunnelBytes = (0, 0)
        }
    }

    private func progressDue() -> Bool {
        let now = monotonicMicroseconds()
        guard now - lastProgressReport >= progressInterval else { return false }
        lastProgressReport = now
        return true
    }

    private func collectRequestBody() {
        guard let collector, let progress = collector.collect(from: transport.input, highWatermark: highWatermark) else { return }
        if case .progressed = progress {} else { self.collector = nil }
        deliver(.collectedBody(progress))
    }

    private func pumpRequestBody() {
        guard let leg else { return }
        let reports = leg.pumpRequestBody(from: transport.input, highWatermark: highWatermark, reportProgress: progressDue())
        leg.scheduleHoldBackRelease()
        if let progress = reports.progress { deliver(.requestBody(leg.hop, progress)) }
        // After the bytes forwarded before it: the machine cuts the hop and answers 403 if it can.
        if let finding = reports.blocked { deliver(.requestBody(leg.hop, .blocked(finding, bytesSent: reports.blockedAfterBytesSent))) }
        if leg === self.leg, leg.awaitsRequestBytes, transport.inputClosed, EventBuffer.length(transport.input) == 0 {
            deliver(.clientInputClosed(bufferedBytes: 0))  // gone mid-body: the machine aborts
        }
    }

    private func pumpResponseBody() {
        guard let leg else { return }
        let reports = leg.pumpResponseBody(to: transport.output, highWatermark: highWatermark, reportProgress: progressDue())
        leg.scheduleHoldBackRelease()
        // The findings first: a `complete` ends the exchange, and its record must already name them.
        if let findings = reports.scrubbed { deliver(.responseBody(leg.hop, .scrubbed(findings))) }
        if let progress = reports.progress { deliver(.responseBody(leg.hop, progress)) }
    }

    private func pumpTunnel() {
        guard let leg, leg.splicing else { return }
        let moved = TunnelSplice.pump(client: transport, upstream: leg, highWatermark: highWatermark)
        unreportedTunnelBytes.fromClient += moved.fromClient
        unreportedTunnelBytes.fromUpstream += moved.fromUpstream
        if unreportedTunnelBytes.fromClient + unreportedTunnelBytes.fromUpstream > 0, progressDue() {
            deliver(.tunnelBytes(leg.hop, fromClient: unreportedTunnelBytes.fromClient, fromUpstream: unreportedTunnelBytes.fromUpstream))
            unreportedTunnelBytes = (0, 0)
        }
    }

    /// One side of a tunnel hung up: hand over what it sent, then close once the other side has it.
    private func finishTunnel(_ hop: HopID, closedSide: TunnelSide) {
        guard let leg, leg.hop == hop, let upstreamOutput = leg.output, let upstreamInput = leg.input else {
            close()
            return
        }
        let pending = unreportedTunnelBytes
        unreportedTunnelBytes = (0, 0)
        switch closedSide {
        case .client:
            let moved = TunnelSplice.handOver(from: transport.input, to: upstreamOutput)
            deliver(.tunnelBytes(hop, fromClient: pending.fromClient + moved, fromUpstream: pending.fromUpstream))
            leg.flush()
            if EventBuffer.length(upstreamOutput) == 0 {
                close()
            } else {
                // Give the upstream a moment to take the last bytes, bounded.
                leg.closingAfterDrain = true
                transport.waitForUpstream(milliseconds: 2_000)
            }
        case .upstream:
            let moved = TunnelSplice.handOver(from: upstreamInput, to: transport.output)
            deliver(.tunnelBytes(hop, fromClient: pending.fromClient, fromUpstream: pending.fromUpstream + moved))
            release(hop, reuse: false)
            transport.closeAfterFlush()
        }
    }

    // MARK: TLS interception

    /// After `200 Connection Established`: terminate the client's TLS with a leaf the local CA mints
    /// for the tunnel's host.
    private func startClientTLS(_ origin: Origin) {
        transport.flush()
        let context = Unmanaged.passUnretained(self).toOpaque()
        guard let tls = configuration.tls, let ssl = try? tls.serverSession(for: origin.hostForLookup),
              transport.startTLS(ssl, read: clientReadCallback, write: clientWriteCallback, event: clientEventCallback,
                                 context: context)
        else {
            deliver(.clientTLSFailed(.certificateUnavailable))
            return
        }
        requestReader = HeadReader(limits: .request)
    }

    // MARK: Client events

    fileprivate func clientReadable() {
        // Decrypted bytes mean the handshake is done, whichever callback libevent ran first.
        if machine.isHandshaking { deliver(.clientTLSEstablished) }
        if isClosed { return }
        if transport.closing != .open {
            transport.discardInput()
        } else if machine.isAwaitingHead {
            readRequestHead()
        } else if collector != nil {
            collectRequestBody()
        } else if let leg, leg.splicing {
            pumpTunnel()
        } else {
            // Body bytes go upstream; bytes after the body are a pipelined request and wait.
            pumpRequestBody()
        }
    }

    fileprivate func clientWritable() {
        transport.writable()
        guard !isClosed, transport.closing == .open, let leg else { return }
        if leg.splicing { pumpTunnel() } else { pumpResponseBody() }
    }

    fileprivate func clientEvent(_ events: Int16) {
        if events & sp_bev_event_connected() != 0, machine.isHandshaking {
            deliver(.clientTLSEstablished)
            return
        }
        guard events & (sp_bev_event_eof() | sp_bev_event_error()) != 0 else { return }
        if machine.isHandshaking {
            let why = transport.handshakeFailure()
            deliver(.clientTLSFailed(why))
            return
        }
        if events & sp_bev_event_error() != 0 {
            deliver(.clientFailed)
            return
        }
        if transport.inputDidClose() {
            close()
            return
        }
        // Hand over what was buffered before the EOF, then say what is left (unless handing it over
        // already ended the connection).
        if machine.isAwaitingHead {
            readRequestHead()
        } else if collector != nil {
            collectRequestBody()
        } else if let leg, leg.requestPump != nil {
            pumpRequestBody()
        }
        guard !isClosed else { return }
        deliver(.clientInputClosed(bufferedBytes: EventBuffer.length(transport.input)))
    }

    /// The events already hinted on stderr in this process (ExchangeFailure.stderrHint): each the
    /// first time only, so a client retrying in a loop does not flood it.
    private static let hintedOnStderr = Locked<Set<String>>([])

    private static func hintOnStderrOnce(_ failure: ExchangeFailure?, client: String) {
        guard let (event, hint) = failure?.stderrHint,
              hintedOnStderr.withLock({ $0.insert(event).inserted }) else { return }
        Diagnostics.error(event, [("client", client), ("hint", hint + "; said once, the access log has every case")])
    }

    fileprivate func lingerTimerFired() {
        transport.lingerTimerFired()
    }

    fileprivate func timerFired() {
        guard let purpose = armedTimer else { return }
        armedTimer = nil
        deliver(.timerFired(purpose))
    }

    /// Runs at the end of every callback: writes pending output on both sides directly, so one
    /// turn of the loop produces at most one writev per socket.
    ///
    /// A direct write can also drain an output that a pump was waiting on: EV_WRITE goes off once an
    /// output is empty, so the write callback that would resume that pump never comes. When a flush
    /// takes an output from above the low watermark to below it, the pump feeding it runs again
    /// here (a few rounds at most; the next callback carries on).
    fileprivate func flushOutputs() {
        let lowWatermark = highWatermark / 2
        for _ in 0..<4 {
            guard !isClosed else { return }
            var pumped = false
            if let leg, let output = leg.output {
                let wasBacked = EventBuffer.length(output) >= lowWatermark
                leg.flush()
                if wasBacked, EventBuffer.length(output) < lowWatermark, leg.splicing || leg.awaitsRequestBytes {
                    if leg.splicing { pumpTunnel() } else { pumpRequestBody() }
                    pumped = true
                }
            }
            guard !isClosed else { return }
            let clientWasBacked = EventBuffer.length(transport.output) >= lowWatermark
            transport.flush()
            if clientWasBacked, EventBuffer.length(transport.output) < lowWatermark, let leg, leg.splicing || leg.responsePump != nil {
                if leg.splicing { pumpTunnel() } else { pumpResponseBody() }
                pumped = true
            }
            guard !isClosed else { return }
            transport.didFlush()
            if !pumped { return }
        }
    }

    // MARK: Closing

    /// Called by the worker when it starts draining: idle connections close now, busy ones after
    /// their exchange.
    func drain() {
        deliver(.drain)
    }

    func abort() {
        close()
    }

    /// Frees the client side and tells the machine, which releases the current hop and writes the
    /// line of an exchange that was still in flight.
    private func close() {
        guard !isClosed else { return }
        reportPendingProgress()
        isClosed = true
        if let (tokens, secret, waiterID) = awaitedToken {
            awaitedToken = nil
            tokens.withdraw(secret: secret, waiterID: waiterID)
        }
        collector = nil
        event_free(timer)
        transport.free()
        deliver(.connectionClosed)
        if let leg {
            self.leg = nil
            leg.release(reuse: false)
        }
        worker.connectionClosed(self)
    }

    // MARK: Access log and metrics

    private func emit(_ record: ExchangeRecord) {
        Self.hintOnStderrOnce(record.failure, client: record.client)
        configuration.metrics.count(record, policy: configuration.scope.context.policy)
        configuration.accessLog?.record(record)
    }
}

// Trampolines: capture-free C callbacks that recover the connection from the context pointer.
// The worker's registry keeps the connection alive until `close`, which frees the bufferevent and
// timers (removing these callbacks) first; withExtendedLifetime covers a close() inside.
// Every callback ends by flushing output, so a turn of the loop writes each socket at most once.

private func withConnection(_ context: UnsafeMutableRawPointer?, _ body: (ClientConnection) -> Void) {
    let connection = Unmanaged<ClientConnection>.fromOpaque(context!).takeUnretainedValue()
    withExtendedLifetime(connection) {
        body(connection)
        connection.flushOutputs()
    }
}

private func clientReadCallback(_: OpaquePointer?, _ context: UnsafeMutableRawPointer?) {
    withConnection(context) { $0.clientReadable() }
}

private func clientWriteCallback(_: OpaquePointer?, _ context: UnsafeMutableRawPointer?) {
    withConnection(context) { $0.clientWritable() }
}

private func clientEventCallback(_: OpaquePointer?, _ events: Int16, _ context: UnsafeMutableRawPointer?) {
    withConnection(context) { $0.clientEvent(events) }
}

private func timerCallback(_: Int32, _: Int16, _ context: UnsafeMutableRawPointer?) {
    withConnection(context) { $0.timerFired() }
}

private func lingerCallback(_: Int32, _: Int16, _ context: UnsafeMutableRawPointer?) {
    withConnection(context) { $0.lingerTimerFired() }
}
