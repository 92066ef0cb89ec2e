import CLibevent
import HTTP1Codec
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The admin listener: `GET /healthz` (200 `ok` once ready, 503 while draining), `GET /metrics`
/// (Prometheus text) and the live decision view (`/view`, `/view/events`, docs/view.md), on its
/// own thread and loop. Plain libevent bufferevents with the codec's strict head parser: every
/// request is bounded (an 8 KiB head, no body), and a viewer costs the workers nothing.
final class AdminServer: @unchecked Sendable {
    struct Limits: Sendable {
        /// Connections that are not viewers (probes, scrapers, page loads); past it one is closed at accept.
        var maxConnections = 64
        /// Viewers of `/view/events`; past it 503.
        var maxViewers = 256
        /// A head must be complete this long after the connection (or its previous response) is
        /// ready for one: an idle keep-alive or a slow-loris sender is closed.
        var headTimeoutMilliseconds = 10_000
        /// A response the client does not read ends the connection after this long.
        var writeTimeoutMilliseconds = 10_000
        /// A viewer this far behind (bytes queued for it and not yet taken by its socket) is dropped.
        var maxUnsentBytes = 1 << 20
        var keepAliveMilliseconds = 15_000
        /// Records gather this long after the first of a batch before they go out: under load a
        /// viewer costs one write per batch, not one per record (a human watches; 10 ms is nothing).
        var batchMilliseconds = 10
        /// A viewer's socket send buffer: fixed and small, so "behind" is counted here, in memory
        /// this process bounds, rather than hidden in megabytes of autotuned kernel buffer.
        var viewerSendBuffer: Int32 = 128 * 1024
    }

    /// Request line and header fields together; a probe or a Prometheus scrape sends well under 1 KiB.
    static let maxHeadBytes = 8 * 1024
    static let headLimits = HeadLimits(maxHeadBytes: maxHeadBytes, maxFields: 100, maxTargetBytes: maxHeadBytes)

    private let base: OpaquePointer
    private var listener: OpaquePointer!
    /// Activated by `stop` from another thread; its callback breaks the loop from inside it.
    private var stopEvent: OpaquePointer!
    /// Activated by the feed when records wait (`ViewFeed.publish`); starts `batchTimer`.
    private var wakeEvent: OpaquePointer!
    /// Fans the batch out when it fires.
    private var batchTimer: OpaquePointer!
    private var keepAliveEvent: OpaquePointer!
    /// Re-enables accepting a second after accept(2) failed (out of descriptors).
    private var acceptPauseEvent: OpaquePointer!
    private let metrics: Metrics
    private let feed: ViewFeed?
    private let routes: AdminRoutes
    let limits: Limits
    let draining = Atomic<Bool>(false)
    private(set) var port: UInt16 = 0
    /// The listening socket (the proxy never connects to it: `OwnSockets`).
    private(set) var descriptor: Int32 = -1
    private var thread: PosixThread?

    // The admin thread's own state.
    private var connections: [ObjectIdentifier: AdminConnection] = [:]
    private var viewers: [ObjectIdentifier: AdminConnection] = [:]

    init(
        address: ListenAddress, metrics: Metrics, feed: ViewFeed? = nil, access: ViewAccess = ViewAccess(), limits: Limits = Limits()
    ) throws(EngineError) {
        guard let base = event_base_new() else { throw .eventBase }
        let socket: ListeningSocket
        do {
            socket = try ListeningSocket.bind(address)
        } catch {
            event_base_free(base)
            // The words tests and people look for: which listener could not bind.
            var reason = error.description
            if reason.hasPrefix("cannot listen on \(address): ") { reason.removeFirst("cannot listen on \(address): ".count) }
            throw .listen("cannot listen on admin address \(address): \(reason)")
        }
        self.base = base
        self.metrics = metrics
        self.feed = feed
        self.limits = limits
        let loopback = (try? Host.parse(Substring(address.host.contains(":") ? "[\(address.host)]" : address.host)))?.isLoopback ?? false
        routes = AdminRoutes(metrics: metrics, access: access, adminHost: address.host, adminIsLoopback: loopback, viewEnabled: feed != nil)
        descriptor = socket.descriptor
        port = socket.address.port
        let context = Unmanaged.passUnretained(self).toOpaque()
        // backlog -1: the socket is listening already; the listener owns (and closes) it.
        listener = evconnlistener_new(
            base,
            { _, fd, _, _, context in Unmanaged<AdminServer>.fromOpaque(context!).takeUnretainedValue().accept(fd) }, context,
            UInt32(LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC), -1, socket.descriptor)
        if listener == nil {
            socket.close()
            event_base_free(base)
            throw .listen("cannot watch the admin address \(address)")
        }
        evconnlistener_set_error_cb(listener) { _, context in
            Unmanaged<AdminServer>.fromOpaque(context!).takeUnretainedValue().acceptFailed()
        }
        stopEvent = event_new(
            base, -1, 0, { _, _, context in event_base_loopbreak(Unmanaged<AdminServer>.fromOpaque(context!).takeUnretainedValue().base) },
            context)
        wakeEvent = event_new(
            base, -1, 0,
            { _, _, context in
                let server = Unmanaged<AdminServer>.fromOpaque(context!).takeUnretainedValue()
                _ = sp_event_add_ms(server.batchTimer, server.limits.batchMilliseconds)
            }, context)
        batchTimer = event_new(
            base, -1, 0, { _, _, context in Unmanaged<AdminServer>.fromOpaque(context!).takeUnretainedValue().fanOut() }, context)
        keepAliveEvent = event_new(
            base, -1, sp_ev_persist(), { _, _, context in Unmanaged<AdminServer>.fromOpaque(context!).takeUnretainedValue().keepAlive() },
            context)
        acceptPauseEvent = event_new(
            base, -1, 0, { _, _, context in evconnlistener_enable(Unmanaged<AdminServer>.fromOpaque(context!).takeUnretainedValue().listener) },
            context)
        _ = sp_event_add_ms(keepAliveEvent, limits.keepAliveMilliseconds)
        if let feed {
            let wake = EventHandle(wakeEvent)
            feed.attach { event_active(wake.event, 0, 0) }
        }
    }

    func start() {
        thread = PosixThread(name: "scopeproxy-admin") { [self] in _ = event_base_dispatch(base) }
    }

    /// Not `event_base_loopbreak` from here: a loop that starts clears a pending break, so a stop
    /// that came before the admin thread reached its loop (a SIGTERM right after start) was lost
    /// and the join below waited forever. An activated event stays pending until the loop runs it,
    /// whenever that is, and its callback breaks the loop from inside.
    func stop() {
        event_active(stopEvent, 0, 0)
        thread?.join()
        thread = nil  // its closure holds self: keeping it would be a cycle (LeakSanitizer found it)
        // No worker wakes the loop after this returns: the wake event can go.
        feed?.detach()
        for connection in Array(connections.values) { close(connection) }
        evconnlistener_free(listener)
        for event in [stopEvent, wakeEvent, batchTimer, keepAliveEvent, acceptPauseEvent] { event_free(event) }
        event_base_free(base)
    }

    // MARK: Connections

    private func accept(_ fd: Int32) {
        if connections.count - viewers.count >= limits.maxConnections {
            // At the cap the oldest connection still waiting for a head gives way, not the new
            // one: a local process holding every slot with heads it never finishes would
            // otherwise keep health checks and scrapes out for as long as it likes. A probe sends
            // its head at once, so it is never the oldest waiting for long.
            guard let oldest = oldestWaitingForHead() else {
                Glibc.close(fd)
                return
            }
            close(oldest)
        }
        guard let bev = bufferevent_socket_new(base, fd, Int32(BEV_OPT_CLOSE_ON_FREE.rawValue)) else {
            Glibc.close(fd)
            return
        }
        _ = sp_set_nodelay(fd)
        acceptedCount &+= 1
        let connection = AdminConnection(server: self, bev: bev, serial: acceptedCount)
        connections[ObjectIdentifier(connection)] = connection
        connection.start()
    }

    /// Connections accepted so far: each connection's serial, so the oldest is known.
    private var acceptedCount: UInt64 = 0

    /// The connection accepted first among those waiting for a head (idle keep-alive included).
    private func oldestWaitingForHead() -> AdminConnection? {
        connections.values.filter(\.isWaitingForHead).min { $0.serial < $1.serial }
    }

    private func acceptFailed() {
        // Out of descriptors (EMFILE): the listening socket stays readable, and retrying at once
        // would spin the loop. Try again in a second.
        evconnlistener_disable(listener)
        _ = sp_event_add_ms(acceptPauseEvent, 1000)
    }

    func close(_ connection: AdminConnection) {
        guard connections.removeValue(forKey: ObjectIdentifier(connection)) != nil else { return }
        if viewers.removeValue(forKey: ObjectIdentifier(connection)) != nil {
            metrics.viewViewers.subtract(1, ordering: .relaxed)
            if viewers.isEmpty { feed?.viewersGone() }
        }
        connection.free()
    }

    func answer(_ head: RequestHead) -> AdminAnswer { routes.answer(head, draining: draining.load(ordering: .relaxed)) }

    var headTimeout: Int { limits.headTimeoutMilliseconds }
    var writeTimeout: Int { limits.writeTimeoutMilliseconds }

    // MARK: Viewers

    /// `/view/events` was asked for and allowed: the connection becomes a viewer, is sent the
    /// replay, and from then on every record its filter matches.
    func startViewer(_ connection: AdminConnection, filter: ViewFilter, lastEventID: UInt64?, headOnly: Bool) {
        guard let feed else {
            connection.respond(.text(404, "not found\n"), includeBody: !headOnly, keepAlive: false)
            return
        }
        guard viewers.count < limits.maxViewers else {
            connection.respond(
                .json(503, error: "view_viewers_full", hint: "\(limits.maxViewers) viewers are connected; close one and retry"),
                includeBody: !headOnly, keepAlive: false)
            return
        }
        var head = "HTTP/1.1 200 OK\r\n"
        for (name, value) in AdminRoutes.streamHeaders { head += "\(name): \(value)\r\n" }
        head += "Connection: close\r\n\r\n"
        guard !headOnly else {
            connection.respond(raw: Array(head.utf8))
            return
        }
        var size = limits.viewerSendBuffer
        setsockopt(bufferevent_getfd(connection.bev), SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        connection.becomeViewer(filter: filter)
        EventBuffer.append(outputBuffer(connection.bev), Array(head.utf8))
        let (pending, lost, replay) = feed.join(after: lastEventID)
        viewers[ObjectIdentifier(connection)] = connection
        metrics.viewViewers.add(1, ordering: .relaxed)
        // What was pending goes to the viewers already there; the new one's replay includes it.
        // (It is in `viewers` already, so dropping the others never leaves the feed without one.)
        deliver(pending, lost: lost, excluding: connection)
        for event in replay where filter.isEverything || filter.matches(event) {
            connection.queue(event.frame)
        }
        send(to: connection)
    }

    private func fanOut() {
        guard let feed else { return }
        let (events, lost) = feed.takePending()
        deliver(events, lost: lost)
    }

    /// Renders each group's share of the batch once (one block, shared by reference) and gives
    /// every viewer of the group one reference and one write.
    private func deliver(_ events: [ViewEvent], lost: Bool, excluding joining: AdminConnection? = nil) {
        let receivers = viewers.values.filter { $0 !== joining }
        if lost {
            // The admin thread fell a whole drop threshold behind: every viewer missed records.
            for viewer in receivers { drop(viewer) }
            return
        }
        guard !events.isEmpty, !receivers.isEmpty else { return }
        var groups: [ViewFilter: [AdminConnection]] = [:]
        for viewer in receivers { groups[viewer.filter, default: []].append(viewer) }
        for (filter, members) in groups {
            let frames = filter.isEverything ? events.map(\.frame) : events.filter(filter.matches).map(\.frame)
            guard !frames.isEmpty else { continue }
            let block = frames.count == 1 ? frames[0] : SharedBytes(joining: frames)
            for viewer in members {
                viewer.queue(block)
                send(to: viewer)
            }
        }
    }

    /// Writes what the viewer has queued; one that is more than the limit behind is dropped.
    private func send(to viewer: AdminConnection) {
        flushOutput(viewer.bev)
        if evbuffer_get_length(outputBuffer(viewer.bev)) > limits.maxUnsentBytes { drop(viewer) }
    }

    private func drop(_ viewer: AdminConnection) {
        metrics.viewViewersDropped.add(1, ordering: .relaxed)
        close(viewer)
    }

    private static let keepAliveComment = Array(": keep-alive\n\n".utf8)

    private func keepAlive() {
        for viewer in Array(viewers.values) {
            EventBuffer.append(outputBuffer(viewer.bev), Self.keepAliveComment)
            send(to: viewer)
        }
    }

    /// How many viewers are connected (tests).
    var viewerCount: Int { viewers.count }
}

/// An event pointer handed to the feed's waker closure (called on worker threads, under the
/// feed's lock; `event_active` is thread-safe with libevent's pthread locking).
private struct EventHandle: @unchecked Sendable {
    let event: OpaquePointer
    init(_ event: OpaquePointer) { self.event = event }
}

/// One connection to the admin listener: requests one at a time (a pipelined next one waits in
/// the input, bounded by the read watermark), then possibly a viewer until either side closes.
final class AdminConnection {
    enum State {
        case readingHead
        case writing(closeAfter: Bool)
        case viewer
    }

    unowned let server: AdminServer
    let bev: OpaquePointer
    private var reader = HeadReader(limits: AdminServer.headLimits)
    private var state = State.readingHead
    private(set) var filter = ViewFilter.everything
    private var deadline: OpaquePointer!
    /// The client closed its side; the response being written is its last.
    private var peerEnded = false
    private var freed = false

    /// When it was accepted, in order (`AdminServer.oldestWaitingForHead`).
    let serial: UInt64

    init(server: AdminServer, bev: OpaquePointer, serial: UInt64) {
        self.server = server
        self.bev = bev
        self.serial = serial
    }

    /// Waiting for a request head: a new connection, or one idle between keep-alive requests.
    var isWaitingForHead: Bool {
        if case .readingHead = state { return true }
        return false
    }

    func start() {
        let context = Unmanaged.passUnretained(self).toOpaque()
        bufferevent_setcb(
            bev, { _, context in Unmanaged<AdminConnection>.fromOpaque(context!).takeUnretainedValue().readable() },
            { _, context in Unmanaged<AdminConnection>.fromOpaque(context!).takeUnretainedValue().drained() },
            { _, events, context in Unmanaged<AdminConnection>.fromOpaque(context!).takeUnretainedValue().event(events) }, context)
        // Input stops being read past twice a head's bound: a pipelining or flooding client waits.
        bufferevent_setwatermark(bev, sp_ev_read(), 0, 2 * AdminServer.maxHeadBytes)
        bufferevent_enable(bev, sp_ev_read())
        bufferevent_disable(bev, sp_ev_write())  // armed only for what a direct write left (flushOutput)
        deadline = event_new(
            bufferevent_get_base(bev), -1, 0,
            { _, _, context in
                let connection = Unmanaged<AdminConnection>.fromOpaque(context!).takeUnretainedValue()
                connection.server.close(connection)
            }, context)
        _ = sp_event_add_ms(deadline, server.headTimeout)
    }

    func free() {
        guard !freed else { return }
        freed = true
        event_free(deadline)
        bufferevent_free(bev)
    }

    private func readable() {
        switch state {
        case .readingHead: readHeads()
        case .writing: break  // the next request waits until this response is out
        case .viewer: evbuffer_drain(inputBuffer(bev), evbuffer_get_length(inputBuffer(bev)))
        }
    }

    private func readHeads() {
        while case .readingHead = state, !freed {
            let head: RequestHead
            do {
                guard let (next, _) = try reader.next(from: inputBuffer(bev), HeadParser.parseRequest) else { return }
                head = next
            } catch {
                // Past 8 KiB of head, or anything the strict parser refuses: one answer, then close.
                respond(AdminResponse(status: 400, body: Array("bad request\n".utf8), close: true), includeBody: true, keepAlive: false)
                return
            }
            event_del(deadline)
            let keepAlive = head.wantsKeepAlive && !peerEnded
            switch server.answer(head) {
            case .response(let response): respond(response, includeBody: head.method != "HEAD", keepAlive: keepAlive)
            case .events(let filter, let lastEventID):
                server.startViewer(self, filter: filter, lastEventID: lastEventID, headOnly: head.method == "HEAD")
            }
        }
    }

    func respond(_ response: AdminResponse, includeBody: Bool, keepAlive: Bool) {
        write(response.serialized(includeBody: includeBody, keepAlive: keepAlive), closeAfter: !keepAlive || response.close)
    }

    /// A head written as it is, then the connection ends.
    func respond(raw: [UInt8]) { write(raw, closeAfter: true) }

    private func write(_ bytes: [UInt8], closeAfter: Bool) {
        state = .writing(closeAfter: closeAfter)
        EventBuffer.append(outputBuffer(bev), bytes)
        _ = sp_event_add_ms(deadline, server.writeTimeout)
        if flushOutput(bev) { written() }
    }

    /// libevent's write callback: what `flushOutput` left has gone out.
    private func drained() {
        guard case .writing = state else { return }
        written()
        // A keep-alive connection goes on with a request that arrived meanwhile.
        if case .readingHead = state { readHeads() }
    }

    private func written() {
        guard case .writing(let closeAfter) = state else { return }
        if closeAfter || peerEnded {
            server.close(self)
            return
        }
        state = .readingHead
        reader = HeadReader(limits: AdminServer.headLimits)
        _ = sp_event_add_ms(deadline, server.headTimeout)
    }

    private func event(_ events: Int16) {
        if events & sp_bev_event_eof() != 0, case .writing = state, events & sp_bev_event_error() == 0 {
            peerEnded = true  // a half-close after the request: the answer still goes out
            return
        }
        server.close(self)
    }

    func becomeViewer(filter: ViewFilter) {
        self.filter = filter
        state = .viewer
        event_del(deadline)
    }

    /// Adds a reference to `block` to the output; the block lives until libevent lets go of it.
    func queue(_ block: SharedBytes) {
        let retained = Unmanaged.passRetained(block).toOpaque()
        let added = evbuffer_add_reference(
            outputBuffer(bev), block.base, block.count, { _, _, extra in Unmanaged<SharedBytes>.fromOpaque(extra!).release() }, retained)
        if added != 0 { Unmanaged<SharedBytes>.fromOpaque(retained).release() }
    }
}
