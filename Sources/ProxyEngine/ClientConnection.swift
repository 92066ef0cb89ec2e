import CLibevent
import HTTP1Codec
import PosixSupport
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
/// The steps live beside this file, in that order: the client's side and the event loop's
/// callbacks here; each action carried out in `ClientConnectionActions.swift` (a token wait in
/// `ClientConnectionTokens.swift`); the hop's leg and its response heads in
/// `ClientConnectionUpstream.swift`; request and response bodies and tunnels in
/// `ClientConnectionBodies.swift`. Their members are internal only so that those files can reach
/// them; nothing outside `ClientConnection` uses them.
///
/// Everything runs on the worker's loop thread.
final class ClientConnection: ExchangeHost {
    unowned let worker: Worker
    private(set) var machine: ConnectionMachine
    private(set) var transport: ClientTransport!
    /// The current hop's upstream, if any (at most one at a time).
    var leg: UpstreamLeg?
    /// Set once the client chose HTTP/2: its streams run there, and this keeps only the socket.
    private(set) var http2: H2ClientConnection?
    /// A request body being read whole before its hop is planned.
    var collector: BodyCollector?
    private var requestReader = HeadReader(limits: .request)
    private(set) var timer: OpaquePointer!
    var armedTimer: TimerPurpose?
    let peer: String
    /// Events raised while actions run wait here, so the machine never handles one event inside
    /// another (a connector may report success before `connect` returns).
    private var pending: [ConnectionEvent] = []
    private(set) var dispatching = false
    /// The machine's actions for the event being run (one buffer, reused).
    private var actions: [ConnectionAction] = []
    private(set) var isClosed = false
    /// The token fetch this connection waits for, withdrawn from if it closes first.
    var awaitedToken: (tokens: any AccessTokenSource, secret: String, waiterID: UInt64)?
    /// Bulk progress (body bytes, tunnel bytes) goes to the machine at most this often: it only
    /// restarts the stall timer and counts bytes, and a report per 4 KiB read cost more than the
    /// read. Bytes are never lost: the next report carries them.
    let progressInterval: UInt64
    var lastProgressReport: UInt64 = 0
    var unreportedTunnelBytes: (fromClient: UInt64, fromUpstream: UInt64) = (0, 0)
    /// Transparent capture: the connection's origin and the address its hops connect to.
    var pinnedUpstream: PinnedUpstream?

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
        transport = ClientTransport(
            bev: bev, base: worker.base, idleMilliseconds: worker.configuration.timeouts.idle,
            highWatermark: worker.configuration.limits.bufferHighWatermark, tls: tls,
            finished: { [unowned self] in close() })
    }

    /// `capturedConnect`: a transparent TLS connection's CONNECT, read from its ClientHello (which
    /// is still in the socket: the tunnel or the interception reads it next).
    func start(capturedConnect: RequestHead? = nil) {
        let context = Unmanaged.passUnretained(self).toOpaque()
        timer = event_new(worker.base, -1, 0, timerCallback, context)
        transport.install(
            read: clientReadCallback, write: clientWriteCallback, event: clientEventCallback,
            timer: lingerCallback, context: context)
        execute(machine.start())
        if let capturedConnect {
            withExtendedLifetime(self) {
                deliver(.requestHead(capturedConnect, headBytes: 0, arrival()))
                flushOutputs()
            }
        }
        // Bytes decrypted with the end of a TLS handshake arrived before these callbacks were set:
        // no read callback will announce them.
        if transport.isTLS, !isClosed, EventBuffer.length(transport.input) > 0 {
            withExtendedLifetime(self) {
                clientReadable()
                flushOutputs()
            }
        }
    }

    // MARK: What the exchange reads and writes (ExchangeHost)

    var requestSource: OpaquePointer { transport.input }
    var requestSourceEnded: Bool { transport.inputClosed }
    var responseSink: OpaquePointer { transport.output }
    var clientPipelined: Bool { EventBuffer.length(transport.input) > 0 }
    var clientSpokeH2c: Bool { false }
    var currentHopIsUpgrade: Bool { machine.currentHopIsUpgrade }
    func expectsResponseHead(from hop: HopID) -> Bool { machine.expectsResponseHead(from: hop) }
    /// A socket's flow control is the kernel's: nothing to credit.
    func requestSourceDrained() {}
    /// The socket's write callback and `flushOutputs` take it from here.
    func responseSinkFilled() {}

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

    /// After a close the machine still hears what was queued (its records stay whole); `execute`
    /// then carries out only bookkeeping.
    private func run(_ event: ConnectionEvent) {
        actions.removeAll(keepingCapacity: true)
        machine.handle(event, into: &actions)
        for action in actions { execute(action) }
    }

    func execute(_ actions: [ConnectionAction]) {
        for action in actions { execute(action) }
    }

    // MARK: Client bytes → request head

    func readRequestHead() {
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

    // MARK: HTTP/2

    /// The intercepted tunnel's TLS is up: the CONNECT's line is written, and a client that chose
    /// `h2` in ALPN speaks HTTP/2 from its first byte.
    private func tlsEstablished() {
        deliver(.clientTLSEstablished)
        if !isClosed, machine.phase == .awaitingHead(.fresh), transport.negotiatedH2 { switchToHTTP2(.h2) }
    }

    private enum PrefaceCheck { case absent, incomplete, switched }

    /// h2c with prior knowledge (RFC 9113 §3.3) on the plain forward listener: a connection whose
    /// first bytes are the HTTP/2 preface speaks HTTP/2. Only before anything else was read; an
    /// HTTP/1.1 request line never starts with it (`PRI` is no method a proxy forwards).
    /// The bytes are compared before the machine is asked its phase: nearly every request begins
    /// otherwise, and asking copies the machine (make cost).
    private func startsWithH2CPreface() -> PrefaceCheck {
        guard machine.mode == .forwardProxy, !transport.isTLS else { return .absent }
        let preface = H2ClientConnection.preface
        let available = min(EventBuffer.length(transport.input), preface.count)
        let matches = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: preface.count) { first in
            _ = evbuffer_copyout(transport.input, first.baseAddress, available)
            return first.prefix(available).elementsEqual(preface.prefix(available))
        }
        guard matches, machine.phase == .awaitingHead(.fresh) else { return .absent }
        guard available == preface.count else { return .incomplete }
        switchToHTTP2(.h2c)
        return .switched
    }

    private func switchToHTTP2(_ proto: ExchangeRecord.ClientProtocol) {
        deliver(.switchedToHTTP2)
        let connection = H2ClientConnection(client: self, kind: H2Connection(machine.mode), proto: proto)
        http2 = connection
        connection.start()
    }

    // MARK: TLS interception

    /// After `200 Connection Established`: terminate the client's TLS with a leaf the local CA mints
    /// for the tunnel's host.
    func startClientTLS(_ origin: Origin) {
        transport.flush()
        let context = Unmanaged.passUnretained(self).toOpaque()
        guard let tls = configuration.tls, let ssl = try? tls.serverSession(for: origin.hostForLookup),
            transport.startTLS(
                ssl, read: clientReadCallback, write: clientWriteCallback, event: clientEventCallback,
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
        if machine.isHandshaking { tlsEstablished() }
        if isClosed { return }
        if transport.closing != .open {
            transport.discardInput()
        } else if let http2 {
            http2.readable()
        } else if machine.isAwaitingHead {
            if startsWithH2CPreface() == .incomplete { return }  // wait for the rest of it
            if http2 == nil { readRequestHead() }
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
        if http2 != nil { return }  // flushOutputs, which ends every callback, writes the session
        guard !isClosed, transport.closing == .open, let leg else { return }
        if leg.splicing { pumpTunnel() } else { pumpResponseBody() }
    }

    fileprivate func clientEvent(_ events: Int16) {
        if events & sp_bev_event_connected() != 0, machine.isHandshaking {
            tlsEstablished()
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
        if transport.inputDidClose() || http2 != nil {
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
    func flushOutputs() {
        if let http2 {
            http2.flushOutputs()
            return
        }
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
        http2?.drain()
    }

    /// What the machine counted as impossible (a bug in this engine, asserted in debug builds):
    /// counted in /metrics and said on stderr with its reason, never silently dropped.
    private func reportImpossibleEvents() {
        guard machine.impossibleEvents > 0 else { return }
        configuration.metrics.increment(.impossibleEvents, by: UInt64(machine.impossibleEvents))
        Diagnostics.error(
            "impossible_event",
            [
                ("reason", machine.lastImpossible.map { "\($0)" } ?? "?"),
                ("count", String(machine.impossibleEvents)),
            ])
    }

    func abort() {
        close()
    }

    /// Frees the client side and tells the machine, which releases the current hop and writes the
    /// line of an exchange that was still in flight.
    func close() {
        guard !isClosed else { return }
        reportPendingProgress()
        isClosed = true
        withdrawFromTokenWait()
        collector = nil
        event_free(timer)
        http2?.close()
        transport.free()
        deliver(.connectionClosed)
        reportImpossibleEvents()
        if let leg {
            self.leg = nil
            leg.release(reuse: false)
        }
        worker.connectionClosed(self)
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
