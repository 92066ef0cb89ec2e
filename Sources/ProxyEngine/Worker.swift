import CLibevent
import HTTP1Codec
import PosixSupport
import ProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// One event-loop thread: its own event_base, resolver, listeners (on the process's shared sockets),
/// upstream pool and client connections. Everything here is touched only on that thread, except
/// `post`, which is how other threads ask it to do something.
final class Worker: @unchecked Sendable {
    enum Command: Sendable {
        case drain(graceMilliseconds: Int)
    }

    let index: Int
    let configuration: EngineConfiguration
    let base: OpaquePointer
    let dns: OpaquePointer
    let pool: UpstreamPool
    var requestIDs = RequestIDGenerator()
    private var listeners: [OpaquePointer] = []
    /// What each listener serves: the forward proxy (nil), or a route. Kept alive for the callbacks.
    private var listenerContexts: [ListenerContext] = []

    final class ListenerContext {
        unowned let worker: Worker
        /// The forward proxy, or a route (its upstream and the address clients use for it, for
        /// Location rewriting; set once the listener is bound, as its port may have been 0).
        var mode: ConnectionMode = .forwardProxy
        /// The TLS client listener (`tls.client_listen`): connections start with a TLS handshake.
        let clientTLS: ClientListenerTLS?
        /// The transparent listener (`transparent.listen`): connections redirected by the kernel.
        let transparent: Bool
        init(worker: Worker, clientTLS: ClientListenerTLS? = nil, transparent: Bool = false) {
            self.worker = worker
            self.clientTLS = clientTLS
            self.transparent = transparent
        }
    }
    private var clients: [ObjectIdentifier: ClientConnection] = [:]
    /// Connections to the TLS client listener whose handshake is under way (they hold a slot).
    private var handshakes: [ObjectIdentifier: ClientHandshake] = [:]
    /// Connections to the transparent listener whose first bytes or name are awaited (they hold a slot).
    var acceptors: [ObjectIdentifier: TransparentAcceptor] = [:]
    var transparentLines = LineBudget(perSecond: 20)
    private var clientTLSLines = LineBudget(perSecond: 20)
    private(set) var isDraining = false
    private var wakeEvent: OpaquePointer!
    private var resumeAcceptEvent: OpaquePointer!
    private var acceptPaused = false
    private var lastAcceptFailureLog: UInt64 = 0
    private var lastLimitLog: UInt64 = 0
    /// The process-wide connection budget (`limits.max_connections`).
    let slots: ConnectionSlots
    /// Accepted while every slot was taken: held unread (the client sees a connection that has not
    /// answered yet) and started, in order, when slots free up. At most one per listener, because
    /// accepting pauses as soon as one is parked.
    private var parked: [ParkedConnection] = []

    private struct ParkedConnection {
        let fd: Int32
        let facts: ConnectionFacts
        let mode: ConnectionMode
        let clientTLS: ClientListenerTLS?
        let transparent: Bool
    }
    private var housekeepingEvent: OpaquePointer!
    private var graceEvent: OpaquePointer?
    private let commands = Locked<[Command]>([])
    /// Where access tokens fetched on the token thread are handed back to this loop.
    private(set) var tokenMailbox: EventMailbox!

    init(index: Int, configuration: EngineConfiguration, slots: ConnectionSlots) throws(EngineError) {
        self.index = index
        self.slots = slots
        self.configuration = configuration
        guard let base = event_base_new() else { throw .eventBase }
        self.base = base
        // Nameservers from /etc/resolv.conf; /etc/hosts is loaded explicitly (evdns skips it otherwise).
        guard
            let dns = evdns_base_new(base, EVDNS_BASE_INITIALIZE_NAMESERVERS | EVDNS_BASE_DISABLE_WHEN_INACTIVE)
                ?? evdns_base_new(base, 0)
        else { throw .eventBase }
        evdns_base_load_hosts(dns, nil)
        self.dns = dns
        pool = UpstreamPool(limits: configuration.limits, metrics: configuration.metrics, ownSockets: configuration.ownSockets)

        let context = Unmanaged.passUnretained(self).toOpaque()
        wakeEvent = event_new(
            base, -1, 0,
            { _, _, context in
                Unmanaged<Worker>.fromOpaque(context!).takeUnretainedValue().runCommands()
            }, context)
        resumeAcceptEvent = event_new(
            base, -1, 0,
            { _, _, context in
                Unmanaged<Worker>.fromOpaque(context!).takeUnretainedValue().resumeAccepting()
            }, context)
        housekeepingEvent = event_new(
            base, -1, sp_ev_persist(),
            { _, _, context in
                Unmanaged<Worker>.fromOpaque(context!).takeUnretainedValue().housekeeping()
            }, context)
        sp_event_add_ms(housekeepingEvent, 1000)
        guard let mailbox = EventMailbox(base: base) else { throw .eventBase }
        tokenMailbox = mailbox
    }

    deinit {
        // Before the base goes: the mailbox's event lives in it.
        tokenMailbox?.close()
        for listener in listeners { evconnlistener_free(listener) }
        event_free(wakeEvent)
        event_free(resumeAcceptEvent)
        event_free(housekeepingEvent)
        if let graceEvent { event_free(graceEvent) }
        evdns_base_free(dns, 0)
        event_base_free(base)
    }

    // MARK: Listening

    /// Watches a listening socket (shared by every worker of the process) in this worker's loop.
    /// `route`: a route's upstream; the listener then serves origin-form requests for it.
    /// `clientTLS`: the TLS client listener (a forward proxy behind a TLS handshake).
    /// `transparent`: the transparent listener (docs/transparent.md).
    func listen(on socket: ListeningSocket, route: Origin? = nil, clientTLS: ClientListenerTLS? = nil, transparent: Bool = false) throws(EngineError)
    {
        let fd = try socket.duplicate()
        let flags = UInt32(LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC)
        let listenerContext = ListenerContext(worker: self, clientTLS: clientTLS, transparent: transparent)
        let context = Unmanaged.passUnretained(listenerContext).toOpaque()
        // backlog -1: the socket is listening already.
        guard
            let created = evconnlistener_new(
                base,
                { _, fd, address, _, context in
                    let listener = Unmanaged<ListenerContext>.fromOpaque(context!).takeUnretainedValue()
                    listener.worker.accept(
                        fd: fd, address: address!, mode: listener.mode, clientTLS: listener.clientTLS, transparent: listener.transparent)
                }, context, flags, -1, fd)
        else {
            close(fd)
            throw .listen("cannot watch the listening socket of \(socket.address)")
        }
        listenerContexts.append(listenerContext)
        listeners.append(created)
        let host = socket.address.host
        if let route, let publicHost = try? Host.parse(Substring(host.contains(":") ? "[\(host)]" : host)) {
            listenerContext.mode = .route(upstream: route, publicOrigin: Origin(scheme: .http, host: publicHost, port: socket.address.port))
        }
        evconnlistener_set_error_cb(created) { listener, context in
            let listenerContext = Unmanaged<ListenerContext>.fromOpaque(context!).takeUnretainedValue()
            listenerContext.worker.acceptFailed(sp_socket_error())
        }
    }

    private func accept(
        fd: Int32, address: UnsafeMutablePointer<sockaddr>, mode: ConnectionMode, clientTLS: ClientListenerTLS?, transparent: Bool
    ) {
        guard !isDraining else {
            close(fd)
            return
        }
        // Facts are gathered at accept, while the client's socket surely exists (a uid lookup).
        let needsOwner = configuration.scope.context.clients.needsSocketOwner
        // A captured connection's owner is asked by its acceptor, which knows the original destination.
        var facts = ConnectionFactsReader.gather(fd: fd, address: address, needsOwner: needsOwner && !transparent)
        // A connection the proxy itself opened (some path led one of its upstream connects back
        // here): never a client, whatever `uid:` or `source:` would say of it.
        facts.isProxyOwnConnection = configuration.ownSockets.isOwnOutgoing(acceptedDescriptor: fd, peer: address)
        guard slots.acquire() else {
            // Every slot is taken: keep this one waiting and stop accepting, so the next ones wait
            // in the kernel's backlog instead of being reset.
            parked.append(ParkedConnection(fd: fd, facts: facts, mode: mode, clientTLS: clientTLS, transparent: transparent))
            configuration.metrics.increment(.connectionLimitWait)
            let now = monotonicMilliseconds()
            if now - lastLimitLog >= 1000 {
                lastLimitLog = now
                Diagnostics.error("connection_limit_reached", [("max_connections", String(slots.limit))])
            }
            pauseAccepting()
            return
        }
        startConnection(fd: fd, facts: facts, mode: mode, clientTLS: clientTLS, transparent: transparent)
    }

    /// The caller holds a slot for this connection.
    private func startConnection(fd: Int32, facts: ConnectionFacts, mode: ConnectionMode, clientTLS: ClientListenerTLS?, transparent: Bool) {
        _ = sp_set_nodelay(fd)
        if transparent {
            let acceptor = TransparentAcceptor(worker: self, fd: fd, facts: facts)
            acceptors[ObjectIdentifier(acceptor)] = acceptor
            configuration.metrics.clientConnections.add(1, ordering: .relaxed)
            acceptor.start()
            return
        }
        if let clientTLS {
            startHandshake(fd: fd, facts: facts, tls: clientTLS)
            return
        }
        guard let bev = bufferevent_socket_new(base, fd, Int32(BEV_OPT_CLOSE_ON_FREE.rawValue)) else {
            close(fd)
            slots.release()
            return
        }
        configuration.metrics.clientConnections.add(1, ordering: .relaxed)
        startClient(bev: bev, facts: facts, mode: mode, tls: false)
    }

    /// A connection that holds a slot and is counted in `clientConnections` starts its machine.
    /// `pin`, `capturedConnect`: a transparent connection's upstream address and, for TLS, the
    /// CONNECT the proxy read from its ClientHello.
    func startClient(
        bev: OpaquePointer, facts: ConnectionFacts, mode: ConnectionMode, tls: Bool, pin: PinnedUpstream? = nil,
        capturedConnect: RequestHead? = nil
    ) {
        configuration.connectionObserver?(facts)
        let connection = ClientConnection(worker: self, bev: bev, facts: facts, mode: mode, tls: tls)
        connection.pinnedUpstream = pin
        clients[ObjectIdentifier(connection)] = connection
        connection.start(capturedConnect: capturedConnect)
    }

    // MARK: The TLS client listener

    private func startHandshake(fd: Int32, facts: ConnectionFacts, tls: ClientListenerTLS) {
        guard let handshake = ClientHandshake(worker: self, fd: fd, facts: facts, tls: tls) else {
            slots.release()
            return
        }
        handshakes[ObjectIdentifier(handshake)] = handshake
        configuration.metrics.clientConnections.add(1, ordering: .relaxed)
        handshake.start()
    }

    /// The handshake is done: the connection (its slot and count too) goes on as a forward-proxy
    /// client over the TLS bufferevent, with the certificate the client showed, if any.
    func clientHandshakeSucceeded(_ handshake: ClientHandshake, bev: OpaquePointer, certificate: ClientCertificate?) {
        guard handshakes.removeValue(forKey: ObjectIdentifier(handshake)) != nil else {
            bufferevent_free(bev)
            return
        }
        if isDraining {
            bufferevent_free(bev)
            connectionEnded()
            return
        }
        var facts = handshake.facts
        facts.certificate = certificate
        startClient(bev: bev, facts: facts, mode: .forwardProxy, tls: true)
    }

    /// The handshake failed or the worker closed it.
    func clientHandshakeEnded(_ handshake: ClientHandshake) {
        guard handshakes.removeValue(forKey: ObjectIdentifier(handshake)) != nil else { return }
        connectionEnded()
    }

    /// Counted always; said on stderr at most 20 times a second per worker (a scanner on the port
    /// must not flood the diagnostics), with the number left unsaid in the next line.
    func clientTLSFailed(peer: String, _ why: ClientTLSFailure, detail: String? = nil) {
        configuration.metrics.increment(.clientTLSFailure(why))
        guard let suppressed = clientTLSLines.take(now: monotonicMilliseconds()) else { return }
        var fields = [("client", peer), ("reason", why.rawValue)]
        if let detail { fields.append(("detail", detail)) }
        fields.append(("hint", why.hint(at: .clientListener)))
        if suppressed > 0 { fields.append(("suppressed", String(suppressed))) }
        Diagnostics.error("client_tls_failed", fields)
    }

    /// Out of descriptors (EMFILE/ENFILE) or memory: the pending connection stays in the kernel's
    /// queue and the listener stays readable, so retrying at once would spin. Pause accepting for a
    /// moment (connections wait in the backlog) and log at most once a second.
    fileprivate func acceptFailed(_ error: Int32) {
        let now = monotonicMilliseconds()
        if now - lastAcceptFailureLog >= 1000 {
            lastAcceptFailureLog = now
            Diagnostics.error("accept_failed", [("errno", String(error)), ("open_connections", String(clients.count))])
        }
        pauseAccepting()
    }

    /// Disables the listeners and checks again in 100 ms (slots may free up on other workers,
    /// which do not tell this one).
    private func pauseAccepting() {
        guard !acceptPaused, !isDraining else { return }
        acceptPaused = true
        for listener in listeners { evconnlistener_disable(listener) }
        sp_event_add_ms(resumeAcceptEvent, 100)
    }

    /// Starts parked connections while slots allow; accepting resumes only once none is left.
    private func resumeAccepting() {
        guard acceptPaused, !isDraining else { return }
        while let next = parked.first, slots.acquire() {
            parked.removeFirst()
            startConnection(fd: next.fd, facts: next.facts, mode: next.mode, clientTLS: next.clientTLS, transparent: next.transparent)
        }
        guard parked.isEmpty else {
            sp_event_add_ms(resumeAcceptEvent, 100)
            return
        }
        acceptPaused = false
        for listener in listeners { evconnlistener_enable(listener) }
    }

    func connectionClosed(_ connection: ClientConnection) {
        guard clients.removeValue(forKey: ObjectIdentifier(connection)) != nil else { return }
        connectionEnded()
    }

    /// A connection (or a handshake) gave back its slot.
    func connectionEnded() {
        configuration.metrics.clientConnections.subtract(1, ordering: .relaxed)
        slots.release()
        if isDraining && clients.isEmpty && handshakes.isEmpty && acceptors.isEmpty { finishDrain() }
        if !parked.isEmpty { resumeAccepting() }
    }

    // MARK: Running and stopping

    /// Runs the loop on the calling thread until the worker has drained.
    func run() {
        event_base_dispatch(base)
    }

    /// Thread-safe: queue a command and wake the loop.
    func post(_ command: Command) {
        commands.withLock { $0.append(command) }
        event_active(wakeEvent, 0, 0)
    }

    private func runCommands() {
        let pending = commands.withLock { queue in
            defer { queue.removeAll() }
            return queue
        }
        for command in pending {
            switch command {
            case .drain(let grace): beginDrain(graceMilliseconds: grace)
            }
        }
    }

    /// Stop accepting, close idle connections, let in-flight exchanges finish; after the grace
    /// period, close whatever is left.
    private func beginDrain(graceMilliseconds: Int) {
        guard !isDraining else { return }
        isDraining = true
        for listener in listeners { evconnlistener_free(listener) }
        listeners.removeAll()
        for waiting in parked { close(waiting.fd) }
        parked.removeAll()
        // A handshake has no request in flight: it closes now.
        for handshake in Array(handshakes.values) { handshake.abort() }
        // A transparent connection still being read has no request in flight either.
        for acceptor in Array(acceptors.values) {
            acceptor.cancel()
            transparentEnded(acceptor)
        }
        for connection in Array(clients.values) { connection.drain() }
        if clients.isEmpty && handshakes.isEmpty && acceptors.isEmpty {
            finishDrain()
            return
        }
        let context = Unmanaged.passUnretained(self).toOpaque()
        graceEvent = event_new(
            base, -1, 0,
            { _, _, context in
                let worker = Unmanaged<Worker>.fromOpaque(context!).takeUnretainedValue()
                for connection in Array(worker.clients.values) { connection.abort() }
                worker.finishDrain()
            }, context)
        sp_event_add_ms(graceEvent, graceMilliseconds)
    }

    private func finishDrain() {
        pool.closeAll()
        event_base_loopbreak(base)
    }

    private func housekeeping() {
        pool.closeExpired(idleMilliseconds: configuration.timeouts.idle)
    }
}

/// At most `perSecond` lines in any one-second window; the lines refused meanwhile are counted and
/// reported by the next line that is allowed.
struct LineBudget {
    let perSecond: Int
    private var windowStart: UInt64 = 0
    private var used = 0
    private var refused = 0

    init(perSecond: Int) {
        self.perSecond = perSecond
    }

    /// nil: say nothing. Otherwise the line may be written, with how many were left unsaid before it.
    mutating func take(now: UInt64) -> Int? {
        if now - windowStart >= 1000 {
            windowStart = now
            used = 0
        }
        guard used < perSecond else {
            refused += 1
            return nil
        }
        used += 1
        defer { refused = 0 }
        return refused
    }
}

public enum EngineError: Error, CustomStringConvertible {
    case eventBase
    case listen(String)
    case logOutput(String)
    /// `tls.client_listen` cannot start (no local CA, an unreadable client CA file).
    case clientListener(String)

    public var description: String {
        switch self {
        case .eventBase: "cannot create a libevent event base"
        case .listen(let message): message
        case .logOutput(let message): message
        case .clientListener(let message): message
        }
    }
}
