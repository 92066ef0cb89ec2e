import ScopePolicy

/// The proxy's own listening sockets (forward, routes, TLS client listener, transparent, admin), as bound:
/// the decision whether an address about to be connected would reach one of them.
///
/// Why the proxy never connects to itself (docs/security-model.md, "Clients"): its own outgoing
/// connection would arrive as a new client, from this machine and owned by the proxy's user, so
/// `uid:` and `source:` rules would recognise it as the developer. A client no scope serves could
/// then launder its requests through that identity (`GET http://127.0.0.1:<route port>/`, a
/// redirect to it in follow mode, a CONNECT to the proxy's own address), and nested CONNECTs to
/// the proxy could take every connection slot from one socket.
///
/// The rule is deliberately wider than "the exact bound address": a destination at one of the
/// listening ports is refused when it is any address of this machine (loopback, the unspecified
/// address, which Linux connects to the local host, or an interface address), and any address at
/// all when a listener on that port is bound to the wildcard (the machine may own addresses the
/// proxy cannot list: a cloud 1:1 NAT, an address added after the check).
public struct OwnListeners: Sendable, Equatable {
    public typealias Endpoint = SocketOwnerTable.Endpoint

    public let endpoints: [Endpoint]
    private let ports: Set<UInt16>

    /// `endpoints`: each listener's bound address and port (port 0 already resolved by the kernel).
    public init(_ endpoints: [Endpoint] = []) {
        self.endpoints = endpoints
        ports = Set(endpoints.map(\.port))
    }

    /// True when connecting to `address`:`port` could reach one of the listeners. `localAddresses`
    /// (this machine's interface addresses) is asked only when the port is a listening port and the
    /// answer is not already known: a connect to any other port costs one set lookup.
    public func reaches(_ address: IPAddress, port: UInt16, localAddresses: () -> [IPAddress]) -> Bool {
        guard ports.contains(port) else { return false }
        let listeners = endpoints.filter { $0.port == port }
        if listeners.contains(where: { $0.address.isUnspecified }) { return true }
        if address.isLoopback || address.isUnspecified || listeners.contains(where: { $0.address == address }) { return true }
        return localAddresses().contains(address)
    }
}

extension IPAddress {
    /// `0.0.0.0/8` (RFC 1122 "this host on this network") or `::`: a listener bound to it takes
    /// every address; a connect to it reaches this machine.
    public var isUnspecified: Bool {
        if isIPv4 { return bytes[12] == 0 }
        return bytes.allSatisfy { $0 == 0 }
    }
}
