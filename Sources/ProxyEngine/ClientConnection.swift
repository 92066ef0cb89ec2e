import CLibevent
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
    private var scanner = HeadScanner(limits: .request)
    private var timer: OpaquePointer!
    private var armedTimer: TimerPurpose?
    let peer: String
    /// Events raised while actions run wait here, so the machine never handles one event inside
    /// another (a connector may report success before `connect` returns).
    private var pending: [ConnectionEvent] = []
    private var dispatching = false
    private var isClosed = false

    private var configuration: EngineConfiguration { worker.configuration }
    private var highWatermark: Int { configuration.limits.bufferHighWatermark }

    init(worker: Worker, bev: OpaquePointer, peer: String, mode: ConnectionMode) {
        self.worker = worker
        self.peer = peer
        let settings = ConnectionMachine.Settings(
            timeouts: worker.configuration.timeouts, limits: worker.configuration.limits,
            admission: .init(tunnel: worker.configuration.tunnel, canIntercept: worker.configuration.tls?.minter != nil),
            logBodies: worker.configuration.accessLog?.logBodies == true)
        machine = ConnectionMachine(settings: settings, mode: mode, peer: peer, ids: worker.requestIDs.fork())
        transport = ClientTransport(bev: bev, base: worker.base, idleMilliseconds: worker.configuration.timeouts.idle,
                                    highWatermark: worker.configuration.limits.bufferHighWatermark,
                                    finished: { [unowned self] in close() })
    }

    func start() {
        let context = Unmanaged.passUnretained(self).toOpaque()
        timer = event_new(worker.base, -1, 0, timerCallback, context)
        transport.install(read: clientReadCallback, write: clientWriteCallback, event: clientEventCallback,
                          timer: lingerCallback, context: context)
        execute(machine.start())
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

    private func run(_ event: ConnectionEvent) {
        if isClosed, case .connectionClosed = event {} else if isClosed { return }
        execute(machine.handle(event))
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
            if machine.isAwaitingHead, transport.inputClosed {
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
        case .pumpRequestBody(let hop, let framing, let capture, let observe):
            guard let leg, leg.hop == hop else { return }
            var pump = BodyPump(inbound: framing, outbound: framing)
            if let capture { pump.startCapture(limit: capture) }
            if let observe { pump.startObserving(limit: observe) }
            leg.requestPump = pump
            pumpRequestBody()
        case .relayResponseBody(let hop, let inbound, let outbound, let observe):
            guard let leg, leg.hop == hop else { return }
            var pump = BodyPump(inbound: inbound, outbound: outbound)
            if let observe { pump.startObserving(limit: observe) }
            leg.responsePump = pump
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
        }
    }

    // MARK: Client bytes → request head

    private func readRequestHead() {
        let input = transport.input
        let available = EventBuffer.length(input)
        guard available > 0 else { return }
        if !scanner.hasStarted { deliver(.headStarted) }
        let bytes = EventBuffer.contiguousPrefix(input, min(available, HeadLimits.request.maxHeadBytes + 2))
        do {
            guard let boundary = try scanner.scan(bytes) else { return }
            let head = try HeadParser.parseRequest(UnsafeRawBufferPointer(rebasing: bytes[boundary.start..<boundary.end]))
            evbuffer_drain(input, boundary.end)
            scanner = HeadScanner(limits: .request)
            deliver(.requestHead(head, headBytes: boundary.end, arrival()))
        } catch {
            deliver(.requestHeadInvalid(HTTPParseError(error), arrival()))
        }
    }

    private func arrival() -> Arrival {
        Arrival(now: monotonicMicroseconds(), scope: configuration.scope.context)
    }

    // MARK: Upstream legs

    private func connect(_ hop: HopID, _ origin: Origin, _ upstreamTransport: UpstreamTransport, reusePooled: Bool) {
        if let old = leg { old.release(reuse: false) }  // the machine releases first; never two legs
        let leg = UpstreamLeg(hop: hop, origin: origin, transport: upstreamTransport, worker: worker, owner: self)
        self.leg = leg
        if reusePooled, let pooled = worker.pool.checkout(origin) {
            leg.attach(pooled: pooled.bev)
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
    /// the hop's remaining bytes are never read as another response (finding 1 of the review).
    private func readResponseHeads(_ leg: UpstreamLeg) {
        while leg === self.leg, machine.expectsResponseHead(from: leg.hop), let input = leg.input {
            let available = EventBuffer.length(input)
            guard available > 0 else { return }
            leg.sawResponseBytes = true
            let bytes = EventBuffer.contiguousPrefix(input, min(available, HeadLimits.response.maxHeadBytes + 2))
            let head: ResponseHead
            do {
                guard let boundary = try leg.responseScanner.scan(bytes) else { return }
                head = try HeadParser.parseResponse(UnsafeRawBufferPointer(rebasing: bytes[boundary.start..<boundary.end]))
                evbuffer_drain(input, boundary.end)
                leg.responseScanner = HeadScanner(limits: .response)
            } catch {
                deliver(.responseHeadInvalid(leg.hop, reason: HTTPParseError(error).responseProblem))
                return
            }
            deliver(.responseHead(leg.hop, head))
        }
    }

    // MARK: Bodies

    /// Client → upstream, as far as backpressure allows.
    private func pumpRequestBody() {
        guard let leg, var pump = leg.requestPump, !pump.isComplete, let output = leg.output else { return }
        let result: Result<Bool, HTTPParseError>
        do {
            result = .success(try pump.pump(from: transport.input, to: output, highWatermark: highWatermark))
        } catch {
            result = .failure(error)
        }
        leg.requestPump = pump
        let progress: BodyProgress
        switch result {
        case .failure: progress = .invalid
        case .success: progress = pump.progress()
        }
        if case .moved(0, 0) = progress {} else { deliver(.requestBody(leg.hop, progress)) }
        if self.leg === leg, !pump.isComplete, transport.inputClosed, EventBuffer.length(transport.input) == 0 {
            deliver(.clientInputClosed(bufferedBytes: 0))  // gone mid-body: the machine aborts
        }
    }

    /// Upstream → client, as far as backpressure allows. An origin that hung up ends a
    /// close-delimited body, and cuts any other, once what it sent before closing has gone out.
    private func pumpResponseBody() {
        guard let leg, var pump = leg.responsePump, let input = leg.input else { return }
        var progress: BodyProgress
        do {
            _ = try pump.pump(from: input, to: transport.output, highWatermark: highWatermark)
            if !pump.isComplete, leg.closed, EventBuffer.length(input) == 0 {
                pump.sourceClosed()
            }
            progress = pump.progress()
            if !pump.isComplete, leg.closed, EventBuffer.length(input) == 0 { progress = .cut }
        } catch {
            progress = .invalid
        }
        leg.responsePump = pump
        if case .moved(0, 0) = progress { return }
        deliver(.responseBody(leg.hop, progress))
    }

    /// Both directions of a tunnel, each as far as the other side's output allows.
    private func pumpTunnel() {
        guard let leg, leg.splicing, let upstreamInput = leg.input, let upstreamOutput = leg.output else { return }
        let fromClient = move(from: transport.input, to: upstreamOutput)
        let fromUpstream = move(from: upstreamInput, to: transport.output)
        if fromClient + fromUpstream > 0 {
            deliver(.tunnelBytes(leg.hop, fromClient: fromClient, fromUpstream: fromUpstream))
        }
    }

    private func move(from input: OpaquePointer, to output: OpaquePointer) -> UInt64 {
        let room = highWatermark - EventBuffer.length(output)
        guard room > 0 else { return 0 }
        return UInt64(EventBuffer.move(from: input, to: output, count: min(room, EventBuffer.length(input))))
    }

    /// One side of a tunnel hung up: hand over what it sent, then close once the other side has it.
    private func finishTunnel(_ hop: HopID, closedSide: TunnelSide) {
        guard let leg, leg.hop == hop, let upstreamOutput = leg.output, let upstreamInput = leg.input else {
            close()
            return
        }
        switch closedSide {
        case .client:
            let moved = EventBuffer.move(from: transport.input, to: upstreamOutput, count: EventBuffer.length(transport.input))
            if moved > 0 { deliver(.tunnelBytes(hop, fromClient: UInt64(moved), fromUpstream: 0)) }
            // Give the upstream a moment to take the last bytes, bounded.
            leg.flush()
            if EventBuffer.length(upstreamOutput) == 0 {
                close()
            } else {
                leg.closingAfterDrain = true
                transport.waitForUpstream(milliseconds: 2_000)
            }
        case .upstream:
            let moved = EventBuffer.move(from: upstreamInput, to: transport.output, count: EventBuffer.length(upstreamInput))
            if moved > 0 { deliver(.tunnelBytes(hop, fromClient: 0, fromUpstream: UInt64(moved))) }
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
            deliver(.clientFailed)
            return
        }
        scanner = HeadScanner(limits: .request)
    }

    // MARK: Client events

    fileprivate func clientReadable() {
        if transport.closing != .open {
            transport.discardInput()
        } else if machine.isAwaitingHead {
            readRequestHead()
        } else if let leg, leg.splicing {
            pumpTunnel()
        } else {
            // Body bytes go upstream; bytes after the body are a pipelined request and wait.
            pumpRequestBody()
        }
    }

    fileprivate func clientWritable() {
        transport.writable()
        guard transport.closing == .open, let leg else { return }
        if leg.splicing { pumpTunnel() } else { pumpResponseBody() }
    }

    fileprivate func clientEvent(_ events: Int16) {
        guard events & (sp_bev_event_eof() | sp_bev_event_error()) != 0 else { return }
        if events & sp_bev_event_error() != 0 {
            deliver(.clientFailed)
            return
        }
        if transport.inputDidClose() {
            close()
            return
        }
        // Hand over what was buffered before the EOF, then say what is left.
        if machine.isAwaitingHead {
            readRequestHead()
        } else if let leg, leg.requestPump != nil {
            pumpRequestBody()
        }
        deliver(.clientInputClosed(bufferedBytes: EventBuffer.length(transport.input)))
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
    fileprivate func flushOutputs() {
        guard !isClosed else { return }
        leg?.flush()
        transport.flush()
        transport.didFlush()
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
        isClosed = true
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
        var updates: [(name: String, labels: [(String, String)], amount: UInt64)] = [
            ("scopeproxy_requests_total", [("status_class", Self.statusClass(record.status)), ("scope", record.scopes.first ?? "none")], 1),
            ("scopeproxy_bytes_in_total", [], record.bytesIn),
            ("scopeproxy_bytes_out_total", [], record.bytesOut),
        ]
        for name in record.injected { updates.append(("scopeproxy_injected_total", [("header", name.lowercased())], 1)) }
        for name in record.stripped { updates.append(("scopeproxy_stripped_total", [("header", name.lowercased())], 1)) }
        if let redirect = record.redirect { updates.append(("scopeproxy_redirects_total", [("decision", redirect.decision.rawValue)], 1)) }
        if let failure = record.failure, failure.isUpstreamFailure {
            updates.append(("scopeproxy_upstream_errors_total", [("kind", failure.code)], 1))
        }
        configuration.metrics.increment(updates)
        configuration.accessLog?.record(record)
    }

    private static let statusClasses = ["0xx", "1xx", "2xx", "3xx", "4xx", "5xx"]

    private static func statusClass(_ status: Int?) -> String {
        status.map { statusClasses[min(max($0 / 100, 0), 5)] } ?? "none"
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
