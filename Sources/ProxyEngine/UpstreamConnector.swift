import CLibevent
import COpenSSL
import HTTP1Codec
import ProxyCore
import ScopePolicy

#if canImport(Glibc)
    import Glibc
#endif

protocol UpstreamConnectorDelegate: AnyObject {
    /// The connection is established (for https origins: the TLS handshake verified); the
    /// delegate now owns `bev`.
    /// `h2`: the origin speaks HTTP/2 on it (ALPN `h2`, or prior knowledge for h2c).
    func connectorDidConnect(_ connector: UpstreamConnector, bev: OpaquePointer, tls: Bool, h2: Bool)
    func connectorDidFail(_ connector: UpstreamConnector, error: ProxyError)
}

/// Resolves an origin with evdns (IP literals short-circuited) and connects to its addresses in
/// turn; or, pinned (transparent capture), connects to the one address given, never resolving.
/// Every address goes through the same per-address checks before its connect. Nothing here
/// blocks the loop.
final class UpstreamConnector {
    let origin: Origin
    /// TLS towards the origin: https forwarding (not CONNECT tunnels, which splice raw bytes).
    let useTLS: Bool
    /// What the leg may speak: ALPN offers `h2` (TLS), or h2c with prior knowledge (plain).
    let http2: UpstreamHTTP2
    /// The hop's egress clearance: every address is checked against its `deny_ips` before it is
    /// connected to, and only an address it admits is (nil: the proxy's own fetch of a configured
    /// endpoint, which egress does not govern; docs/egress.md).
    let egress: EgressClearance?
    /// The address being connected to, then the one connected (for the log and for a pooled
    /// connection's later reuse), with a `mode: report` rule that would have refused it.
    private(set) var peer: (address: PeerAddress, reported: String?)?
    private unowned let worker: Worker
    weak var delegate: UpstreamConnectorDelegate?
    private var lookup: NameLookup?
    private var addresses: [sockaddr_storage] = []
    private var nextAddress = 0
    private var connecting: OpaquePointer?
    private var finished = false
    private var firstDenial: (rule: String, address: IPAddress)?
    private var triedAllowed = false

    /// Connect here instead of resolving the origin (the TLS session still verifies the origin's name).
    let pinnedAddress: sockaddr_storage?

    init(
        origin: Origin, worker: Worker, tls: Bool, http2: UpstreamHTTP2 = .never, egress: EgressClearance?,
        pinnedAddress: sockaddr_storage? = nil
    ) {
        self.pinnedAddress = pinnedAddress
        self.origin = origin
        self.egress = egress
        self.http2 = http2
        self.worker = worker
        useTLS = tls
    }

    deinit {
        // A lookup in flight retains the connector, so only a connect attempt can be left here; its
        // callback context is this object, so it must go before the object does.
        if let connecting { bufferevent_free(connecting) }
    }

    func start() {
        if let pinnedAddress {
            addresses = [pinnedAddress]
            connectNext()
            return
        }
        let host = origin.hostForLookup
        if let numeric = SocketAddress.numeric(host, port: origin.port) {
            addresses = [numeric]
            connectNext()
            return
        }
        // The closure holds the connector until the answer (or the cancel) arrives.
        let started = NameLookup.start(host, dns: worker.dns) { [self] answer in
            lookup = nil
            resolved(answer)
        }
        if started.isInFlight { lookup = started }
    }

    /// Stops whatever is in progress; the delegate hears nothing more.
    func cancel() {
        finished = true
        lookup?.cancel()
        lookup = nil
        if let connecting {
            self.connecting = nil
            bufferevent_free(connecting)
        }
    }

    private func resolved(_ answer: [sockaddr_storage]?) {
        guard !finished else { return }
        guard let answer else {
            fail(.dnsFailure(origin))
            return
        }
        for var storage in answer {
            setPort(&storage, origin.port)
            addresses.append(storage)
        }
        connectNext()
    }

    private func setPort(_ storage: inout sockaddr_storage, _ port: UInt16) {
        let isIPv6 = Int32(storage.ss_family) == AF_INET6
        withUnsafeMutableBytes(of: &storage) { raw in
            let base = raw.baseAddress!
            if isIPv6 {
                base.assumingMemoryBound(to: sockaddr_in6.self).pointee.sin6_port = port.bigEndian
            } else {
                base.assumingMemoryBound(to: sockaddr_in.self).pointee.sin_port = port.bigEndian
            }
        }
    }

    private func connectNext() {
        while nextAddress < addresses.count {
            var address = addresses[nextAddress]
            nextAddress += 1
            guard let endpoint = OwnSockets.endpoint(address) else { continue }
            // On the resolved address about to be connected: a name, a redirect or a route that
            // leads back to one of the proxy's listeners is refused whatever it was spelt as.
            if worker.configuration.ownSockets.refusesConnect(to: endpoint) {
                fail(.loopRefused(origin))
                return
            }
            // The address checked is the address connected to: no second lookup can swap it (DNS
            // rebinding). A denied address is skipped; the next one of the name may be allowed.
            var reported: String?
            switch egress?.admits(endpoint.address) ?? .allowed {
            case .allowed: break
            case .reported(let rule): reported = rule
            case .denied(let rule):
                if firstDenial == nil { firstDenial = (rule, endpoint.address) }
                continue
            }
            triedAllowed = true
            peer = (PeerAddress(endpoint), reported)
            guard let bev = makeBufferevent() else {
                fail(.upstreamTLSHandshake(origin))
                return
            }
            let context = Unmanaged.passUnretained(self).toOpaque()
            bufferevent_setcb(
                bev, nil, nil,
                { bev, events, context in
                    let connector = Unmanaged<UpstreamConnector>.fromOpaque(context!).takeUnretainedValue()
                    withExtendedLifetime(connector) { connector.connectEvent(events) }
                }, context)
            let started = worker.configuration.ownSockets.connect(bev, to: &address)
            if started == 0 {
                connecting = bev
                return
            }
            bufferevent_free(bev)
        }
        // Refused by the policy only when no address was allowed at all: otherwise the allowed
        // ones failed to connect, and that is what the client is told.
        if !triedAllowed, let egress, let (rule, address) = firstDenial {
            fail(egress.refusal(for: origin, rule: rule, address: address))
            return
        }
        fail(.upstreamRefused(origin))
    }

    private func makeBufferevent() -> OpaquePointer? {
        let options = Int32(BEV_OPT_CLOSE_ON_FREE.rawValue)
        guard useTLS else { return bufferevent_socket_new(worker.base, -1, options) }
        guard let tls = worker.configuration.tls, let ssl = tls.clientSession(for: origin.hostForLookup, offerH2: http2 == .offerInALPN) else {
            return nil
        }
        let bev = bufferevent_openssl_socket_new(worker.base, -1, ssl, bufferevent_ssl_state(UInt32(sp_bufferevent_ssl_connecting())), options)
        // Many servers close without close_notify; the body framing tells us where a response ends.
        if let bev { bufferevent_openssl_set_allow_dirty_shutdown(bev, 1) }
        return bev
    }

    private func connectEvent(_ events: Int16) {
        guard let bev = connecting else { return }
        connecting = nil
        if events & sp_bev_event_connected() != 0 {
            finished = true
            _ = sp_set_nodelay(bufferevent_getfd(bev))
            bufferevent_setcb(bev, nil, nil, nil, nil)
            guard let delegate else {
                bufferevent_free(bev)
                return
            }
            let h2: Bool
            switch http2 {
            case .never: h2 = false
            case .priorKnowledge: h2 = !useTLS
            case .offerInALPN: h2 = useTLS && bufferevent_openssl_get_ssl(bev).map { sp_ssl_alpn_is_h2($0) == 1 } == true
            }
            delegate.connectorDidConnect(self, bev: bev, tls: useTLS, h2: h2)
        } else {
            // Read before anything else can make a system call: libevent leaves the failed
            // operation's error in errno for the event callback.
            let socketError = sp_socket_error()
            if useTLS, let ssl = bufferevent_openssl_get_ssl(bev) {
                // A certificate problem is final (another address would present the same one).
                let result = SSL_get_verify_result(ssl)
                if result != X509_V_OK {
                    bufferevent_free(bev)
                    fail(.upstreamTLSVerification(origin, TLSContexts.verifyReason(result)))
                    return
                }
                var onlySocketErrors = true
                var anyError = false
                while case let code = bufferevent_get_openssl_error(bev), code != 0 {
                    anyError = true
                    if code != UInt(SSL_ERROR_SYSCALL) { onlySocketErrors = false }
                }
                // The openssl bufferevent starts its handshake on the socket as soon as the connect
                // is issued, so a TCP connect that failed (refused, unreachable) surfaces here as a
                // handshake I/O error. That is not a TLS problem: treat it like the plain-http path
                // (next address, then `upstream_refused`). A TLS protocol error, or a peer that
                // accepted and then reset or closed, is the handshake's fault.
                if anyError && !(onlySocketErrors && Self.connectNeverCompleted(bev, socketError: socketError)) {
                    bufferevent_free(bev)
                    fail(.upstreamTLSHandshake(origin))
                    return
                }
            }
            bufferevent_free(bev)
            connectNext()
        }
    }

    /// True when the TCP connection itself never came up: the socket has no peer and the error is
    /// one that only a connect attempt produces (a reset after accepting has no peer either, but
    /// reports ECONNRESET or EPIPE).
    private static func connectNeverCompleted(_ bev: OpaquePointer, socketError: Int32) -> Bool {
        switch socketError {
        case ECONNREFUSED, ENETUNREACH, EHOSTUNREACH, ETIMEDOUT, EHOSTDOWN, ENETDOWN: break
        default: return false
        }
        var peer = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &peer) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(bufferevent_getfd(bev), $0, &length) }
        }
        return named != 0 && errno == ENOTCONN
    }

    private func fail(_ error: ProxyError) {
        finished = true
        delegate?.connectorDidFail(self, error: error)
    }
}

/// The address an upstream connection went to, with its text for the log (`10.0.0.5:443`,
/// `[2001:db8::1]:443`) made once per connection, not per request that reuses it.
struct PeerAddress {
    let endpoint: SocketOwnerTable.Endpoint
    let text: String

    init(_ endpoint: SocketOwnerTable.Endpoint) {
        self.endpoint = endpoint
        text = endpoint.address.isIPv4 ? "\(endpoint.address):\(endpoint.port)" : "[\(endpoint.address)]:\(endpoint.port)"
    }
}
