import CLibevent
import HTTP1Codec
import ProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// libevent must be told to use pthread locks once, before any event_base exists.
private let threadingConfigured: Bool = {
    signal(SIGPIPE, SIG_IGN)  // a peer that hangs up must cost an EPIPE, not the process
    event_set_log_callback { severity, message in
        // libevent's own warnings (e.g. an unreachable nameserver) as structured diagnostics.
        guard severity >= Int32(EVENT_LOG_WARN), let message else { return }
        Diagnostics.info("libevent", [("message", String(cString: message))])
    }
    return evthread_use_pthreads() == 0
}()

/// The running proxy: N workers, each an event loop on its own thread, sharing one listening socket.
public final class ProxyServer: @unchecked Sendable {
    public let configuration: EngineConfiguration
    private var workers: [Worker] = []
    private var threads: [PosixThread] = []
    public private(set) var address: ListenAddress
    private var admin: AdminServer?
    private var mainBase: OpaquePointer?
    /// Each route's bound address (after start), in config order.
    public private(set) var routeAddresses: [ListenAddress] = []
    /// The TLS client listener's bound address (after start), when one is configured.
    public private(set) var clientListenAddress: ListenAddress?
    /// The transparent listener's bound address (after start), when one is configured.
    public private(set) var transparentListenAddress: ListenAddress?
    /// The admin endpoint's bound port (after start), when one is configured.
    public var adminPort: UInt16? { admin?.port }

    public init(configuration: EngineConfiguration) {
        var configuration = configuration
        if configuration.tls == nil {
            // Upstream TLS always works (system trust store); interception needs a CA from config.
            configuration.tls = try? TLSContexts(authority: nil, upstreamCA: nil)
        }
        self.configuration = configuration
        address = configuration.listen
    }

    /// glibc's defaults fit a proxy badly: body buffers come and go in extents of up to 256 KiB,
    /// and the worker threads' arenas handed freed extents back to the kernel (madvise) only to
    /// fault them in again on the next read: a chunked 1 GiB upload spent most of its system time
    /// there (strace: a madvise every 4 reads). Fixed thresholds keep them: up to 32 MiB of free
    /// heap per arena stays mapped, and extents up to 4 MiB come from the heap, not mmap. What is
    /// kept is bounded by what was once in use (the buffers' watermarks times the connections).
    static func tuneAllocator() {
        _ = sp_set_malloc_trim_threshold(32 << 20)
        _ = sp_set_malloc_mmap_threshold(4 << 20)
    }

    /// Binds every worker's listener, then starts the loops. When this returns the port accepts
    /// connections; the bound address (port 0 resolved) is `address`.
    @discardableResult
    public func start() throws(EngineError) -> ListenAddress {
        precondition(threadingConfigured, "evthread_use_pthreads failed")
        Self.tuneAllocator()
        // The main loop's base is made before any listener accepts: once clients arrive they may use
        // up every descriptor, and a signal loop created later could not even get its epoll fd.
        guard let base = event_base_new() else { throw .eventBase }
        mainBase = base
        // A start that fails (an address in use, no CA for the client listener) leaves no base behind.
        var started = false
        defer {
            if !started {
                event_base_free(base)
                mainBase = nil
            }
        }
        let slots = ConnectionSlots(limit: configuration.limits.maxClientConnections)
        let descriptors = raiseDescriptorLimit()
        // Said once at start when the descriptor limit, not max_connections, will bound the clients
        // (a busy connection holds a second descriptor upstream; EMFILE then pauses accepting).
        if descriptors >= 0, descriptors < slots.limit + 64 {
            Diagnostics.info(
                "descriptor_limit",
                [
                    ("max_connections", String(slots.limit)), ("open_files_limit", String(descriptors)),
                    ("note", "the descriptor limit is lower than max_connections; accepting pauses when it is reached"),
                ])
        }
        // Every address is bound once, before any worker watches it: a taken address fails here,
        // whole, and nothing listens half-configured.
        var sockets = [try ListeningSocket.bind(configuration.listen)]
        defer { for socket in sockets { socket.close() } }  // the workers hold duplicates
        for route in configuration.routes { sockets.append(try ListeningSocket.bind(route.listen)) }
        let clientTLS = try configuration.clientListener.map { listener throws(EngineError) in
            (try ListeningSocket.bind(listener.listen), try Self.clientListenerTLS(listener, tls: configuration.tls))
        }
        if let (socket, _) = clientTLS { sockets.append(socket) }
        let transparent = try configuration.transparentListen.map { address throws(EngineError) in try ListeningSocket.bind(address) }
        if let transparent { sockets.append(transparent) }
        for index in 0..<max(1, configuration.threads) {
            let worker = try Worker(index: index, configuration: configuration, slots: slots)
            try worker.listen(on: sockets[0])
            for (route, socket) in zip(configuration.routes, sockets.dropFirst()) { try worker.listen(on: socket, route: route.upstream) }
            if let (socket, tls) = clientTLS { try worker.listen(on: socket, clientTLS: tls) }
            if let transparent { try worker.listen(on: transparent, transparent: true) }
            workers.append(worker)
        }
        address = sockets[0].address
        configuration.viewRecorder?.noteListening(address)
        routeAddresses = sockets.dropFirst().prefix(configuration.routes.count).map(\.address)
        clientListenAddress = clientTLS?.0.address
        transparentListenAddress = transparent?.address
        var listening = sockets.map(\.descriptor)
        if let adminAddress = configuration.admin {
            let server = try AdminServer(
                address: adminAddress, metrics: configuration.metrics, feed: configuration.viewFeed, access: configuration.viewAccess)
            listening.append(server.descriptor)
            server.start()
            admin = server
        }
        // From the sockets as bound, before any loop runs: no connect can precede the set.
        configuration.ownSockets.addListeners(descriptors: listening)
        for worker in workers {
            threads.append(PosixThread(name: "scopeproxy-\(worker.index)") { worker.run() })
        }
        started = true
        return address
    }

    /// The client listener's certificate comes from the local CA, which exists only when TLS
    /// interception is on: clients trust the one CA for both.
    private static func clientListenerTLS(_ listener: ClientListener, tls: TLSContexts?) throws(EngineError) -> ClientListenerTLS {
        guard let minter = tls?.minter else {
            throw .clientListener(
                "tls.client_listen needs the local CA to sign its certificate, and the CA is loaded only when "
                    + "TLS interception is on: list hosts in tls.intercept (or intercept: scoped with an https scope)")
        }
        do {
            return try ClientListenerTLS(caFiles: listener.caFiles, minter: minter)
        } catch {
            throw .clientListener("tls.client_listen: \(error.description)")
        }
    }

    /// Stops accepting, lets in-flight exchanges finish for up to `graceMilliseconds`, then
    /// closes the rest and joins the loop threads.
    public func shutdown(graceMilliseconds: Int? = nil) {
        let grace = graceMilliseconds ?? configuration.shutdownGraceMilliseconds
        admin?.draining.store(true, ordering: .relaxed)
        for worker in workers { worker.post(.drain(graceMilliseconds: grace)) }
        for thread in threads { thread.join() }
        threads.removeAll()
        workers.removeAll()
        admin?.stop()
        admin = nil
        if let mainBase {  // never run (in-process servers): free it here
            event_base_free(mainBase)
            self.mainBase = nil
        }
        configuration.accessLog?.flush()
    }

    /// Hooks the main loop runs between signals: `tick` about once a second (secret rotation),
    /// `hangup` on SIGHUP (reload). Both run on the calling thread, never on an event-loop worker.
    public struct MainLoopHooks: Sendable {
        public var tick: @Sendable () -> Void
        public var hangup: @Sendable () -> Void

        public init(tick: @escaping @Sendable () -> Void = {}, hangup: @escaping @Sendable () -> Void = {}) {
            self.tick = tick
            self.hangup = hangup
        }
    }

    private final class MainLoop {
        let base: OpaquePointer
        let hooks: MainLoopHooks
        init(base: OpaquePointer, hooks: MainLoopHooks) {
            self.base = base
            self.hooks = hooks
        }
    }

    /// Blocks until SIGTERM or SIGINT, then shuts down gracefully.
    /// Blocks the signals `runUntilSignalled` handles, on the calling thread and every thread it
    /// starts afterwards; one that arrives meanwhile stays pending until the handlers are in place.
    public static func holdStopSignals() {
        var handled = handledSignals
        pthread_sigmask(SIG_BLOCK, &handled, nil)
    }

    private static var handledSignals: sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for signalNumber in [SIGTERM, SIGINT, SIGHUP] { sigaddset(&set, signalNumber) }
        return set
    }

    public func runUntilSignalled(hooks: MainLoopHooks = MainLoopHooks()) {
        // A parent may have spawned us with these signals blocked (the mask survives exec), and
        // then SIGTERM would never stop the proxy: they are unblocked once the handlers are added
        // below, so one held since start (`holdStopSignals`) is handled, not fatal.
        var handled = Self.handledSignals
        defer { pthread_sigmask(SIG_UNBLOCK, &handled, nil) }
        guard let base = mainBase else { return }
        mainBase = nil  // this loop owns it now
        defer { event_base_free(base) }
        let loop = MainLoop(base: base, hooks: hooks)
        let context = Unmanaged.passUnretained(loop).toOpaque()
        var events: [OpaquePointer] = []
        for signalNumber in [SIGTERM, SIGINT] {
            let event = event_new(
                base, signalNumber, sp_ev_signal() | sp_ev_persist(),
                { signalNumber, _, context in
                    let loop = Unmanaged<MainLoop>.fromOpaque(context!).takeUnretainedValue()
                    Diagnostics.info("shutdown", [("signal", signalNumber == SIGTERM ? "SIGTERM" : "SIGINT")])
                    event_base_loopbreak(loop.base)
                }, context)!
            event_add(event, nil)
            events.append(event)
        }
        let hangup = event_new(
            base, SIGHUP, sp_ev_signal() | sp_ev_persist(),
            { _, _, context in
                Unmanaged<MainLoop>.fromOpaque(context!).takeUnretainedValue().hooks.hangup()
            }, context)!
        event_add(hangup, nil)
        let tick = event_new(
            base, -1, sp_ev_persist(),
            { _, _, context in
                Unmanaged<MainLoop>.fromOpaque(context!).takeUnretainedValue().hooks.tick()
            }, context)!
        sp_event_add_ms(tick, 1000)
        events += [hangup, tick]
        pthread_sigmask(SIG_UNBLOCK, &handled, nil)
        withExtendedLifetime(loop) { _ = event_base_dispatch(base) }
        for event in events { event_free(event) }
        shutdown()
    }
}
