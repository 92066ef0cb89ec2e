import HTTP1Codec
import ProxyCore

/// A connect under way to an origin that may answer in HTTP/2 (ALPN offered, or h2c with prior
/// knowledge). Hops to the same origin wait for it instead of each opening a connection of its
/// own: "Clients SHOULD NOT open more than one HTTP/2 connection to a given host and port pair"
/// (RFC 9113 §9.1). Without this, a client that opens a hundred streams at once (a gRPC channel,
/// h2load) made a hundred connections, and as many TLS handshakes, before the first one could say
/// it multiplexes.
///
/// How it ends (`UpstreamLeg` carries it out):
/// - the opener's connect brings HTTP/2: every waiter takes a stream on that connection (for prior
///   knowledge, they wait with the opener for the origin's SETTINGS, `UpstreamH2Connection.probing`);
/// - it brings HTTP/1.1 (ALPN chose it): the origin is remembered as HTTP/1.1-only and every waiter
///   connects on its own at once (HTTP/1.1 cannot share);
/// - it fails: every waiter's hop hears the same failure (same origin, same addresses);
/// - the opener's hop ends first (a cancelled stream): the first waiter takes over the connect in
///   progress, so nobody starts over.
/// A waiter whose hop ends leaves the list; the list holds at most `UpstreamH2Connection.streamCap`
/// legs with the opener, and a leg that finds every pending connect full opens one more.
final class PendingHTTP2 {
    let origin: Origin
    /// The leg whose connector is connecting.
    private(set) unowned var opener: UpstreamLeg
    /// Legs waiting for the outcome, in arrival order (each removes itself when its hop ends).
    private(set) var waiters: [UpstreamLeg] = []
    /// The opener's egress clearance, which its connect checks addresses with: only hops whose
    /// rules check addresses the same way wait for it.
    let egress: EgressClearance

    init(origin: Origin, opener: UpstreamLeg, egress: EgressClearance) {
        self.origin = origin
        self.opener = opener
        self.egress = egress
    }

    var hasRoom: Bool { waiters.count + 1 < UpstreamH2Connection.streamCap }

    func add(_ leg: UpstreamLeg) { waiters.append(leg) }

    func remove(_ leg: UpstreamLeg) { waiters.removeAll { $0 === leg } }

    /// The opener's hop ended: the first waiter becomes the opener (nil: nobody waits).
    func promoteFirstWaiter() -> UpstreamLeg? {
        guard !waiters.isEmpty else { return nil }
        opener = waiters.removeFirst()
        return opener
    }

    /// The connect is over: who waited, once.
    func takeWaiters() -> [UpstreamLeg] {
        defer { waiters.removeAll() }
        return waiters
    }
}
