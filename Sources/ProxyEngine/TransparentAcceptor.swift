import CLibevent
import HTTP1Codec
import ProxyCore
import ScopePolicy

#if canImport(Glibc)
    import Glibc
#endif

/// One connection accepted on the transparent listener, before it becomes a `ClientConnection`:
/// where it was going (`SO_ORIGINAL_DST`), what its first bytes are (peeked, never consumed: the
/// ClientHello or the request head stays in the socket for whoever reads it next), and, when the
/// client named a host (Host, SNI), whether that name resolves to the original destination
/// (docs/transparent.md). Everything waits on the loop: the bytes under `client_header`, the name
/// on evdns. The connection holds its slot throughout.
final class TransparentAcceptor {
    private unowned let worker: Worker
    private(set) var fd: Int32
    private(set) var facts: ConnectionFacts
    private let destination: TransparentDestination
    private let loopsBack: Bool
    private var readEvent: OpaquePointer?
    private var lookup: NameLookup?
    private var finished = false
    /// Monotonic milliseconds by which the first bytes must have arrived (`timeouts.client_header`).
    private var deadline: UInt64 = 0
    /// What the first bytes said, kept while the name resolves.
    private var firstBytes: CapturedFirstBytes = .incomplete
    /// Reads the growing prefix each wake-up peeks at, resuming where the last read stopped.
    private var reader = CapturedFirstBytesReader()
    private var name: Host?

    init(worker: Worker, fd: Int32, facts: ConnectionFacts) {
        self.worker = worker
        self.fd = fd
        self.facts = facts
        let local = OwnSockets.localEndpoint(fd)
        let original = Self.originalDestination(fd)
        if worker.configuration.scope.context.clients.needsSocketOwner {
            if let original, let client = OwnSockets.remoteEndpoint(fd) {
                self.facts.owner = ConnectionFactsReader.capturedOwner(client: client, originalDestination: original)
            } else {
                self.facts.owner = .unknown(reason: "not redirected: no original destination to find the client's socket by")
            }
        }
        if let original {
            destination = TransparentDestination(address: original.address, port: original.port)
            // Not redirected (the original destination is this listener), or redirected to any
            // listener of the proxy: connecting there would be the proxy reaching itself.
            loopsBack = worker.configuration.ownSockets.refusesConnect(to: original)
        } else {
            // No NAT entry (no conntrack, or not redirected at all): nowhere to go but here.
            let fallback = local ?? .init(address: .ipv4(0, 0, 0, 0), port: 0)
            destination = TransparentDestination(address: fallback.address, port: fallback.port)
            loopsBack = true
        }
    }

    deinit {
        if let readEvent { event_free(readEvent) }
    }

    func start() {
        let context = Unmanaged.passUnretained(self).toOpaque()
        readEvent = event_new(
            worker.base, fd, sp_ev_read(),
            { _, events, context in
                let acceptor = Unmanaged<TransparentAcceptor>.fromOpaque(context!).takeUnretainedValue()
                withExtendedLifetime(acceptor) { acceptor.readable(timedOut: events & sp_ev_timeout() != 0) }
            }, context)
        deadline = monotonicMilliseconds() + UInt64(max(1, worker.configuration.timeouts.clientHeader))
        sp_event_add_ms(readEvent, worker.configuration.timeouts.clientHeader)
    }

    /// Peeks at what arrived; decides, or waits for more (the socket's receive low-watermark is
    /// raised past what is there, so the loop is woken only by new bytes, not by the same ones).
    private func readable(timedOut: Bool) {
        guard !finished else { return }
        if timedOut { return give("no ClientHello or request head within timeouts.client_header") }
        var buffer = [UInt8](repeating: 0, count: CapturedFirstBytes.peekLimit)
        let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_PEEK)) }
        if count < 0, errno == EAGAIN || errno == EINTR { return rearm() }
        guard count > 0 else { return give("the client closed before sending a request") }
        firstBytes = reader.read(Array(buffer.prefix(count)))
        switch firstBytes {
        case .incomplete:
            guard count < CapturedFirstBytes.peekLimit else { return give("first bytes over the peek limit") }
            // Woken again only when a read can say more: the ClientHello's record under way is whole.
            var lowWatermark = Int32(max(count + 1, reader.bytesWanted))
            setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowWatermark, socklen_t(MemoryLayout<Int32>.size))
            rearm()
        case .unreadableTLS(let reason):
            give("unreadable ClientHello: \(reason)")
        case .tls(let serverName):
            resolve(serverName, scheme: .https)
        case .http(let host, _):
            resolve(host, scheme: .http)
        }
    }

    /// Waits for more bytes until the deadline set at accept: the whole ClientHello or head must
    /// arrive within `client_header`, however it is dribbled.
    private func rearm() {
        let now = monotonicMilliseconds()
        guard now < deadline else { return give("no ClientHello or request head within timeouts.client_header") }
        sp_event_add_ms(readEvent, Int(deadline - now))
    }

    /// The name counts only if it resolves to the destination; an address literal, or none, needs
    /// no lookup, and a name the egress policy denies this client is never looked up (the query
    /// itself would carry it out: `TransparentOrigin.mayLookUp`).
    private func resolve(_ name: Host?, scheme: Scheme) {
        var lowWatermark: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowWatermark, socklen_t(MemoryLayout<Int32>.size))
        guard let name, name.kind == .name, !loopsBack,
            TransparentOrigin.mayLookUp(name, scheme: scheme, destination: destination, facts: facts, scope: worker.configuration.scope.context)
        else {
            // Unlooked-up, a name can only be the destination's literal: none counts.
            self.name = nil
            return decide(resolved: [])
        }
        self.name = name
        let started = NameLookup.start(name.normalized, dns: worker.dns) { [self] answer in
            lookup = nil
            guard !finished else { return }
            decide(resolved: (answer ?? []).compactMap { OwnSockets.endpoint($0)?.address })
        }
        if started.isInFlight { lookup = started }
    }

    private func decide(resolved: [IPAddress]) {
        guard !finished else { return }
        finished = true
        if let readEvent { event_del(readEvent) }
        var facts = facts
        let tls: Bool
        let mode: ConnectionMode
        let origin: Origin
        switch firstBytes {
        case .tls:
            tls = true
            origin = TransparentOrigin.choose(scheme: .https, name: name, resolved: resolved, destination: destination)
            mode = .forwardProxy  // until the proxy's own CONNECT is admitted
        case .http(let host, let port):
            tls = false
            origin = TransparentOrigin.choose(scheme: .http, name: name, resolved: resolved, destination: destination)
            let firstHost = host.map { Origin(scheme: .http, host: $0, port: port) }
            mode = .transparent(TransparentTarget(origin: origin, firstHost: firstHost))
        case .incomplete, .unreadableTLS:
            return  // `give` handles these
        }
        facts.captured = CapturedConnection(destination: destination, tls: tls, loopsBack: loopsBack)
        let pin = PinnedUpstream(origin: origin, address: Self.socketAddress(.init(address: destination.address, port: destination.port)))
        let descriptor = fd
        fd = -1
        worker.transparentAccepted(
            self, fd: descriptor, facts: facts, mode: mode, pin: pin,
            connect: tls ? TransparentOrigin.connectHead(for: origin) : nil)
    }

    /// Gives up on the connection: closed, with a structured line saying why (never a byte of what
    /// the client sent). Rate-limited by the worker.
    private func give(_ reason: String) {
        guard !finished else { return }
        finished = true
        if let readEvent { event_del(readEvent) }
        worker.transparentRefused(self, peer: facts.peer, destination: destination.description, reason: reason)
        close(fd)
        fd = -1
    }

    /// The worker is draining or the acceptor is dropped: stop whatever is under way.
    func cancel() {
        guard !finished else { return }
        finished = true
        if let readEvent { event_del(readEvent) }
        lookup?.cancel()
        lookup = nil
        close(fd)
        fd = -1
    }

    static func socketAddress(_ endpoint: SocketOwnerTable.Endpoint) -> sockaddr_storage {
        // An IPAddress always prints as a numeric host.
        SocketAddress.numeric(endpoint.address.description, port: endpoint.port) ?? sockaddr_storage()
    }

    /// `SO_ORIGINAL_DST` (IPv4, `SOL_IP`) or `IP6T_SO_ORIGINAL_DST` (IPv6, `SOL_IPV6`): both 80
    /// (linux/netfilter_ipv4.h, linux/netfilter_ipv6/ip6_tables.h). The address conntrack saw
    /// before the REDIRECT rewrote it; nil without a NAT entry.
    static func originalDestination(_ fd: Int32) -> SocketOwnerTable.Endpoint? {
        let originalDestinationOption: Int32 = 80
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let family = OwnSockets.localEndpoint(fd).map { $0.address.isIPv4 } ?? true
        let level = family ? Int32(IPPROTO_IP) : Int32(IPPROTO_IPV6)
        let got = withUnsafeMutablePointer(to: &storage) { getsockopt(fd, level, originalDestinationOption, $0, &length) }
        guard got == 0 else { return nil }
        return withUnsafePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { ConnectionFactsReader.endpoint($0) }
        }
    }
}

/// A transparent connection's origin and the address every hop to it connects to (never a lookup
/// of its name). Pinned legs are never pooled: the pool and the HTTP/2 connections it shares are
/// keyed by origin alone, and an unpinned hop to the same origin must not ride a pinned
/// connection, nor the reverse.
struct PinnedUpstream {
    let origin: Origin
    let address: sockaddr_storage
}

// MARK: The worker's side

extension Worker {
    /// The acceptor decided: the connection (its slot and count too) goes on as a client.
    func transparentAccepted(
        _ acceptor: TransparentAcceptor, fd: Int32, facts: ConnectionFacts, mode: ConnectionMode, pin: PinnedUpstream,
        connect: RequestHead?
    ) {
        guard acceptors.removeValue(forKey: ObjectIdentifier(acceptor)) != nil else {
            close(fd)
            return
        }
        guard !isDraining, let bev = bufferevent_socket_new(base, fd, Int32(BEV_OPT_CLOSE_ON_FREE.rawValue)) else {
            close(fd)
            connectionEnded()
            return
        }
        startClient(bev: bev, facts: facts, mode: mode, tls: false, pin: pin, capturedConnect: connect)
    }

    /// The acceptor gave up (it closed the socket): a line, at most 20 a second per worker.
    func transparentRefused(_ acceptor: TransparentAcceptor, peer: String, destination: String, reason: String) {
        if let suppressed = transparentLines.take(now: monotonicMilliseconds()) {
            var fields = [("client", peer), ("original_dst", destination), ("reason", reason)]
            if suppressed > 0 { fields.append(("suppressed", String(suppressed))) }
            Diagnostics.info("transparent_closed", fields)
        }
        transparentEnded(acceptor)
    }

    func transparentEnded(_ acceptor: TransparentAcceptor) {
        guard acceptors.removeValue(forKey: ObjectIdentifier(acceptor)) != nil else { return }
        connectionEnded()
    }
}
