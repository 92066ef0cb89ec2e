import CLibevent
import HTTP1Codec
import ProxyCore
import ScopePolicy

/// An idle upstream connection, known clean: its last response was read to the end and nothing
/// arrived after it.
final class UpstreamConnection {
    let origin: Origin
    let bev: OpaquePointer
    /// A plain connection's reader, kept registered across owners (the pool, then the next leg).
    let reader: SocketReader?
    /// The address it was opened to: a hop reuses it only where its egress rules admit that address.
    let peer: PeerAddress?
    fileprivate(set) var idleSince: UInt64 = 0
    fileprivate weak var pool: UpstreamPool?

    init(origin: Origin, bev: OpaquePointer, reader: SocketReader?, peer: PeerAddress?) {
        self.origin = origin
        self.bev = bev
        self.reader = reader
        self.peer = peer
    }
}

/// Per-worker pool of idle keep-alive upstream connections, bounded per origin and in total.
/// Any byte or EOF on an idle connection means it is no longer clean: it is closed at once.
final class UpstreamPool {
    private let limits: Limits
    let metrics: Metrics
    private let ownSockets: OwnSockets
    private var idle: [Origin: [UpstreamConnection]] = [:]
    private(set) var count = 0
    /// Live HTTP/2 connections per origin (busy or idle), shared by the streams of many hops.
    private var http2: [Origin: [UpstreamH2Connection]] = [:]
    /// Connects under way that later hops to the same origin wait for (RFC 9113 §9.1).
    private var pendingHTTP2: [Origin: [PendingHTTP2]] = [:]
    /// Plain origins that answered an h2c preface as HTTP/1.1: later hops speak HTTP/1.1 at once.
    private var http1Only: Set<Origin> = []
    static let maxRememberedHTTP1Only = 1024

    init(limits: Limits, metrics: Metrics, ownSockets: OwnSockets) {
        self.limits = limits
        self.metrics = metrics
        self.ownSockets = ownSockets
    }

    /// Every upstream bufferevent is freed here, so the open-connections gauge stays true. Its
    /// reader, if any, stops first (it must never touch a freed bufferevent).
    func release(_ bev: OpaquePointer, reader: SocketReader? = nil) {
        reader?.stop()
        ownSockets.forget(descriptor: bufferevent_getfd(bev))
        bufferevent_free(bev)
        metrics.upstreamConnections.subtract(1, ordering: .relaxed)
    }

    /// The most recently used idle connection to `origin` whose address the hop's egress rules
    /// admit (a reload or another client's rules may deny what an earlier hop reached), detached
    /// from the pool's callbacks.
    func checkout(_ origin: Origin, admitting egress: EgressClearance) -> UpstreamConnection? {
        guard var list = idle[origin], let index = list.lastIndex(where: { egress.admitsPeer($0.peer?.endpoint) }) else { return nil }
        let connection = list.remove(at: index)
        idle[origin] = list.isEmpty ? nil : list
        count -= 1
        connection.pool = nil
        bufferevent_setcb(connection.bev, nil, nil, nil, nil)
        if connection.reader == nil { bufferevent_disable(connection.bev, sp_ev_read()) }
        return connection
    }

    /// Keeps the connection for reuse, or frees it when the pool is full.
    func checkin(_ connection: UpstreamConnection) {
        var list = idle[connection.origin] ?? []
        guard list.count < limits.maxIdleUpstreamPerOrigin, count < limits.maxIdleUpstreamTotal else {
            release(connection.bev, reader: connection.reader)
            return
        }
        connection.idleSince = monotonicMilliseconds()
        connection.pool = self
        let context = Unmanaged.passUnretained(connection).toOpaque()
        let broke: bufferevent_data_cb = { _, context in idleConnectionBroke(context) }
        let brokeEvent: bufferevent_event_cb = { _, _, context in idleConnectionBroke(context) }
        bufferevent_setcb(connection.bev, broke, nil, brokeEvent, context)
        // A plain connection's reader keeps watching it (now for the pool); a TLS one is watched by
        // its bufferevent.
        if let reader = connection.reader {
            guard reader.retarget(read: broke, event: brokeEvent, context: context) else {
                release(connection.bev, reader: reader)
                return
            }
        } else {
            bufferevent_enable(connection.bev, sp_ev_read())
        }
        list.append(connection)
        idle[connection.origin] = list
        count += 1
    }

    fileprivate func remove(_ connection: UpstreamConnection) {
        guard var list = idle[connection.origin],
            let index = list.firstIndex(where: { $0 === connection })
        else { return }
        list.remove(at: index)
        idle[connection.origin] = list.isEmpty ? nil : list
        count -= 1
        connection.pool = nil
        release(connection.bev, reader: connection.reader)
    }

    // MARK: HTTP/2 connections (UpstreamH2Connection)

    func addHTTP2(_ connection: UpstreamH2Connection) {
        http2[connection.origin, default: []].append(connection)
    }

    /// A connection a GOAWAY or an end took out of service: no new stream goes to it.
    func removeHTTP2(_ connection: UpstreamH2Connection) {
        guard var list = http2[connection.origin], let index = list.firstIndex(where: { $0 === connection }) else { return }
        list.remove(at: index)
        http2[connection.origin] = list.isEmpty ? nil : list
    }

    func rememberHTTP1Only(_ origin: Origin) {
        if http1Only.count >= Self.maxRememberedHTTP1Only { http1Only.removeAll() }  // bounded; relearnt at one connect each
        http1Only.insert(origin)
    }

    func speaksOnlyHTTP1(_ origin: Origin) -> Bool { http1Only.contains(origin) }

    /// A live HTTP/2 connection to `origin` with room for one more stream, to an address the
    /// hop's egress rules admit.
    func sharedHTTP2(_ origin: Origin, admitting egress: EgressClearance) -> UpstreamH2Connection? {
        http2[origin]?.first { $0.acceptsStream && egress.admitsPeer($0.peer?.endpoint) }
    }

    /// An h2c connection whose origin has not answered our preface yet, with room for one more
    /// stream that waits for the answer with it (to an address the hop's egress rules admit).
    func probingHTTP2(_ origin: Origin, admitting egress: EgressClearance) -> UpstreamH2Connection? {
        http2[origin]?.first { $0.acceptsProbingStream && egress.admitsPeer($0.peer?.endpoint) }
    }

    /// A connect under way to `origin` with room for one more waiting hop, checking addresses the
    /// way this hop's egress rules would (the connect it waits for is the opener's).
    func pendingHTTP2WithRoom(_ origin: Origin, admitting egress: EgressClearance) -> PendingHTTP2? {
        pendingHTTP2[origin]?.first { $0.hasRoom && $0.egress.checksAddressesLike(egress) }
    }

    func openPendingHTTP2(_ origin: Origin, opener: UpstreamLeg) -> PendingHTTP2 {
        let pending = PendingHTTP2(origin: origin, opener: opener, egress: opener.egress)
        pendingHTTP2[origin, default: []].append(pending)
        return pending
    }

    func removePendingHTTP2(_ pending: PendingHTTP2) {
        guard var list = pendingHTTP2[pending.origin], let index = list.firstIndex(where: { $0 === pending }) else { return }
        list.remove(at: index)
        pendingHTTP2[pending.origin] = list.isEmpty ? nil : list
    }

    func closeExpired(idleMilliseconds: Int) {
        let now = monotonicMilliseconds()
        for connection in http2.values.flatMap({ $0 }) where connection.isIdle && now - connection.idleSince >= UInt64(idleMilliseconds) {
            connection.closeIdle()
        }
        for connection in idle.values.flatMap({ $0 }) where now - connection.idleSince >= UInt64(idleMilliseconds) {
            remove(connection)
        }
    }

    func closeAll() {
        for connection in http2.values.flatMap({ $0 }) { connection.closeNow() }
        for connection in idle.values.flatMap({ $0 }) { remove(connection) }
    }
}

/// An idle connection became readable or closed: the origin said something unsolicited (or hung
/// up), so it cannot carry the next request.
private func idleConnectionBroke(_ context: UnsafeMutableRawPointer?) {
    let connection = Unmanaged<UpstreamConnection>.fromOpaque(context!).takeUnretainedValue()
    withExtendedLifetime(connection) { connection.pool?.remove(connection) }
}
