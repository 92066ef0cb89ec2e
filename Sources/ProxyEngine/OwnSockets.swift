import CLibevent
import PosixSupport
import ProxyCore
import ScopePolicy

#if canImport(Glibc)
    import Glibc
#endif

/// The proxy never connects to itself, and a connection that comes from itself is never a client
/// (docs/security-model.md, "Clients"). One per process, shared by every worker and the token
/// fetcher's loop (it travels in `EngineConfiguration`):
///
/// - `listeners`: what the proxy's listening sockets are bound to, read from the sockets once
///   bound (port 0 resolved); every upstream connect is checked against it after DNS, on the
///   address about to be connected (`refusesConnect`).
/// - the outgoing registry: the local and remote end of every upstream socket the proxy connects,
///   so that an accepted connection whose peer is one of them is recognised as the proxy's own
///   (`isOwnOutgoing`), whatever path led back here (a relay the first check could not see).
public final class OwnSockets: @unchecked Sendable {
    public typealias Endpoint = SocketOwnerTable.Endpoint

    struct Tuple: Hashable {
        var local: Endpoint
        var remote: Endpoint
    }

    /// Keyed by descriptor, so the registry is bounded by the descriptors the process can have: a
    /// socket closed without `forget` is replaced when its descriptor number is used again, and a
    /// stale entry is never believed (`isOwnOutgoing` checks the descriptor still has its ends).
    private struct Registry {
        var byDescriptor: [Int32: Tuple] = [:]
        var byTuple: [Tuple: Int32] = [:]

        mutating func insert(_ tuple: Tuple, descriptor: Int32) {
            remove(descriptor: descriptor)
            byDescriptor[descriptor] = tuple
            byTuple[tuple] = descriptor
        }

        mutating func remove(descriptor: Int32) {
            guard let old = byDescriptor.removeValue(forKey: descriptor) else { return }
            if byTuple[old] == descriptor { byTuple[old] = nil }
        }
    }

    private let bound = Locked(OwnListeners())
    private let outgoing = Locked(Registry())

    public init() {}

    /// What the listeners are bound to (for tests and the banner).
    public var listeners: OwnListeners { bound.withLock { $0 } }

    /// Reads each listening descriptor's bound address (`getsockname`: the kernel's answer, with
    /// port 0 resolved) and adds it to the set.
    func addListeners(descriptors: [Int32]) {
        let endpoints = descriptors.compactMap(Self.localEndpoint)
        bound.withLock { $0 = OwnListeners($0.endpoints + endpoints) }
    }

    /// True when connecting to `destination` could reach one of the proxy's own listeners.
    func refusesConnect(to destination: Endpoint) -> Bool {
        let listeners = bound.withLock { $0 }
        return listeners.reaches(destination.address, port: destination.port, localAddresses: Self.interfaceAddresses)
    }

    /// `bufferevent_socket_connect`, with the socket's two ends registered before any listener of
    /// this process can accept the connection: the lock is held across the connect, and the
    /// accepting side takes it to look (a loopback handshake completes inside connect(2)). No
    /// callback of ours runs inside: libevent defers a connect's outcome to the loop (the connector
    /// relies on that too: it records the attempt only after this returns).
    func connect(_ bev: OpaquePointer, to address: inout sockaddr_storage) -> Int32 {
        let length = SocketAddress.length(of: address)
        let remote = Self.endpoint(address)
        return outgoing.withLock { registry in
            let started = withUnsafeMutablePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bufferevent_socket_connect(bev, $0, length) }
            }
            let descriptor = bufferevent_getfd(bev)
            if started == 0, descriptor >= 0, let remote, let local = Self.localEndpoint(descriptor) {
                registry.insert(Tuple(local: local, remote: remote), descriptor: descriptor)
            }
            return started
        }
    }

    /// The socket behind `descriptor` is about to close.
    func forget(descriptor: Int32) {
        guard descriptor >= 0 else { return }
        outgoing.withLock { $0.remove(descriptor: descriptor) }
    }

    /// True when the connection accepted on `descriptor`, from `peer`, is one the proxy opened:
    /// one of its upstream sockets has the peer's address and port as its local end and this
    /// listener's as its remote end, and still does.
    func isOwnOutgoing(acceptedDescriptor descriptor: Int32, peer: UnsafePointer<sockaddr>) -> Bool {
        guard let peerEnd = ConnectionFactsReader.endpoint(peer), let listenerEnd = Self.localEndpoint(descriptor) else { return false }
        let tuple = Tuple(local: peerEnd, remote: listenerEnd)
        return outgoing.withLock { registry in
            guard let upstream = registry.byTuple[tuple] else { return false }
            guard Self.localEndpoint(upstream) == tuple.local, Self.remoteEndpoint(upstream) == tuple.remote else {
                registry.remove(descriptor: upstream)  // closed and not forgotten, or its number reused
                return false
            }
            return true
        }
    }

    /// How many upstream sockets are registered (tests).
    var registeredCount: Int { outgoing.withLock { $0.byDescriptor.count } }

    // MARK: Addresses

    static func endpoint(_ storage: sockaddr_storage) -> Endpoint? {
        var storage = storage
        return withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { ConnectionFactsReader.endpoint($0) }
        }
    }

    static func localEndpoint(_ descriptor: Int32) -> Endpoint? { name(descriptor, peer: false) }

    static func remoteEndpoint(_ descriptor: Int32) -> Endpoint? { name(descriptor, peer: true) }

    private static func name(_ descriptor: Int32, peer: Bool) -> Endpoint? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                peer ? getpeername(descriptor, $0, &length) : getsockname(descriptor, $0, &length)
            }
        }
        return named == 0 ? endpoint(storage) : nil
    }

    /// This machine's interface addresses now (asked only for a connect to a listening port:
    /// addresses come and go while the proxy runs).
    static func interfaceAddresses() -> [IPAddress] {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0, let first = list else { return [] }
        defer { freeifaddrs(list) }
        var addresses: [IPAddress] = []
        var entry: UnsafeMutablePointer<ifaddrs>? = first
        while let current = entry {
            if let address = current.pointee.ifa_addr, let found = ConnectionFactsReader.endpoint(address) {
                addresses.append(found.address)
            }
            entry = current.pointee.ifa_next
        }
        return addresses
    }
}
