import CSocketDiag
import PosixSupport
import ProxyCore
import ScopePolicy

#if canImport(Glibc)
    import Glibc
#endif

/// Gathers `ConnectionFacts` when a connection is accepted: the peer's address, and, only when a
/// configured client is recognised by `uid` and the peer is on loopback, who owns its socket. That
/// is one question to the kernel about one socket (NETLINK_SOCK_DIAG, as `ss` asks it): reading
/// `/proc/net/tcp` instead costs time in proportion to every TCP socket of the host (66 000
/// TIME_WAIT entries made each accept take ~3 s, with the event loop stalled), which any local user
/// can inflate. The /proc table (`SocketOwnerTable`) is read only where sock_diag is unavailable.
/// Every failure is `SocketOwner.unknown`: such a client is never recognised by uid (fail closed),
/// and the 407's log line says why.
enum ConnectionFactsReader {
    static func gather(fd: Int32, address: UnsafePointer<sockaddr>, needsOwner: Bool) -> ConnectionFacts {
        let peer = SocketAddress.describe(address)
        var facts = ConnectionFacts(peer: peer, peerIP: ipText(ofPeer: peer))
        if needsOwner {
            facts.owner = endpoint(address).map { owner(fd: fd, client: $0) } ?? .unknown(reason: "not a TCP/IP client")
        }
        return facts
    }

    /// `127.0.0.1` from `127.0.0.1:5000`, `::1` from `[::1]:5000`: cut from the text the log uses
    /// anyway (an address this short is a small string: no allocation per connection).
    static func ipText(ofPeer peer: String) -> String? {
        guard let colon = peer.lastIndex(of: ":") else { return nil }
        var host = peer[..<colon]
        if host.hasPrefix("["), host.hasSuffix("]") { host = host.dropFirst().dropLast() }
        return host.isEmpty ? nil : String(host)
    }

    static func owner(fd: Int32, client: SocketOwnerTable.Endpoint) -> SocketOwner {
        #if os(Linux)
            guard client.address.isLoopback else { return .unknown(reason: "not a loopback client") }
            guard let server = OwnSockets.localEndpoint(fd) else { return .unknown(reason: "getsockname failed") }
            return owner(client: client, server: server)
        #else
            return .unknown(reason: "uid recognition needs Linux /proc/net/tcp")
        #endif
    }

    /// The owner of a transparent client's socket (docs/transparent.md): the client is on this
    /// machine (its address is one of this machine's: the redirect rule acts on the output hook),
    /// and its socket's remote end is the original destination, not the listener (NAT is invisible
    /// to the client's socket).
    static func capturedOwner(client: SocketOwnerTable.Endpoint, originalDestination: SocketOwnerTable.Endpoint) -> SocketOwner {
        #if os(Linux)
            guard client.address.isLoopback || OwnSockets.interfaceAddresses().contains(client.address) else {
                return .unknown(reason: "not a client on this machine")
            }
            return owner(client: client, server: originalDestination)
        #else
            return .unknown(reason: "uid recognition needs Linux /proc/net/tcp")
        #endif
    }

    /// Asks the kernel (else the /proc tables) who holds the socket from `client` to `server`.
    static func owner(client: SocketOwnerTable.Endpoint, server: SocketOwnerTable.Endpoint) -> SocketOwner {
        #if os(Linux)
            switch askKernel(client: client, server: server) {
            case .found(let uid): return .uid(uid)
            case .notLive:
                return .unknown(reason: "the client's socket is no longer held by any process (it closed before it was accepted)")
            case .noSuchSocket:
                return .unknown(reason: "no socket in this network namespace has the client's address (another network namespace, or it closed)")
            case .failed(let errno): return .unknown(reason: "sock_diag lookup failed (errno \(errno))")
            case .unavailable: break  // read the table below
            }
            var tables: [String] = []
            for path in ["/proc/net/tcp", "/proc/net/tcp6"] {
                switch SmallFile.read(path, limit: 64 << 20) {
                case .success(let bytes): tables.append(String(decoding: bytes, as: UTF8.self))
                case .failure(.missing): continue  // no IPv6 in this kernel
                case .failure(let failure): return .unknown(reason: "cannot read \(path): \(failure.describe(path))")
                }
            }
            guard !tables.isEmpty else { return .unknown(reason: "no /proc/net/tcp (is /proc mounted?)") }
            guard let uid = SocketOwnerTable.owner(client: client, server: server, tables: tables) else {
                return .unknown(reason: "no live socket in this network namespace has the client's address (another network namespace, or it closed)")
            }
            return .uid(uid)
        #else
            return .unknown(reason: "uid recognition needs Linux /proc/net/tcp")
        #endif
    }

    enum KernelAnswer: Equatable {
        case found(UInt32)
        /// The kernel has the socket, but no process holds it (`SocketOwnerTable.liveOwner`): its
        /// reported uid means nothing.
        case notLive
        case noSuchSocket
        case failed(Int32)
        /// No NETLINK_SOCK_DIAG here (a kernel without it, or a sandbox that forbids netlink).
        case unavailable
    }

    /// The owner of the client's own socket: local end the client's address, remote end ours.
    /// A client that reached an IPv6 listener from IPv4 has a plain IPv4 socket: asked as such.
    static func askKernel(client: SocketOwnerTable.Endpoint, server: SocketOwnerTable.Endpoint) -> KernelAnswer {
        let v4 = client.address.isIPv4 && server.address.isIPv4
        let clientBytes = v4 ? Array(client.address.bytes.suffix(4)) : client.address.bytes
        let serverBytes = v4 ? Array(server.address.bytes.suffix(4)) : server.address.bytes
        var answer = sp_socket_owner_answer()
        let result = sp_tcp_socket_owner(
            v4 ? AF_INET : AF_INET6, clientBytes, client.port, serverBytes, server.port,
            SocketOwnerTable.liveClientStateMask, &answer)
        if result == 0 {
            guard let uid = SocketOwnerTable.liveOwner(state: answer.state, inode: UInt64(answer.inode), uid: UInt32(answer.uid)) else {
                return .notLive
            }
            return .found(uid)
        }
        switch -result {
        case ENOENT: return .noSuchSocket
        case EPROTONOSUPPORT, EAFNOSUPPORT, EACCES, EPERM, EINVAL: return .unavailable
        case let errno: return .failed(errno)
        }
    }

    static func endpoint(_ address: UnsafePointer<sockaddr>) -> SocketOwnerTable.Endpoint? {
        switch Int32(address.pointee.sa_family) {
        case AF_INET:
            return address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
                var raw = v4.pointee.sin_addr
                let bytes = withUnsafeBytes(of: &raw) { Array($0) }
                return IPAddress(raw: bytes).map { .init(address: $0, port: UInt16(bigEndian: v4.pointee.sin_port)) }
            }
        case AF_INET6:
            return address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
                var raw = v6.pointee.sin6_addr
                let bytes = withUnsafeBytes(of: &raw) { Array($0) }
                return IPAddress(raw: bytes).map { .init(address: $0, port: UInt16(bigEndian: v6.pointee.sin6_port)) }
            }
        default:
            return nil
        }
    }
}
