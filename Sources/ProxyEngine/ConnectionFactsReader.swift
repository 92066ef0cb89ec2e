import PosixSupport
import ProxyCore
import ScopePolicy
#if canImport(Glibc)
import Glibc
#endif

/// Gathers `ConnectionFacts` when a connection is accepted: the peer's address, and, only when a
/// configured client is recognised by `uid` and the peer is on loopback, who owns its socket
/// (`/proc/net/tcp{,6}`, parsed by `SocketOwnerTable`). Every failure is `SocketOwner.unknown`:
/// such a client is never recognised by uid (fail closed), and the 407's log line says why.
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
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0, let server = withUnsafePointer(to: &storage, {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { endpoint($0) }
        }) else { return .unknown(reason: "getsockname failed") }
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
            return .unknown(reason: "no socket in this network namespace has the client's address (another network namespace, or it closed)")
        }
        return .uid(uid)
        #else
        return .unknown(reason: "uid recognition needs Linux /proc/net/tcp")
        #endif
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
