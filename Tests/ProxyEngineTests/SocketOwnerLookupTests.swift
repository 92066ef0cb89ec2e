import Foundation
import ProxyCore
import ScopePolicy
import Testing

@testable import ProxyEngine

#if canImport(Glibc)
    import Glibc
#endif

/// `uid` clients: the owner of one socket, asked of the kernel (NETLINK_SOCK_DIAG). Reading
/// /proc/net/tcp instead made every accept cost time in proportion to all TCP sockets of the host
/// (an attacker's 66 000 TIME_WAIT entries: ~3 s per accept, the event loop stalled).
@Suite("Clients: socket owner from the kernel, one socket at a time")
struct SocketOwnerLookupTests {
    @Test("a loopback connection's client socket is found and owned by this process's uid; a socket that does not exist is not")
    func ownerOfALoopbackClient() throws {
        for family in [AF_INET, AF_INET6] {
            let (client, server) = try Self.connectedPair(family: family)
            defer { close(client.fd); close(server.fd); close(server.listener) }
            #expect(
                ConnectionFactsReader.askKernel(client: client.endpoint, server: server.endpoint) == .found(getuid()),
                "family \(family)")
            // The same addresses with the ends swapped name the proxy's accepted socket, also ours;
            // a port nobody uses names nothing (fail closed).
            var nobody = client.endpoint
            nobody.port = client.endpoint.port == 1 ? 2 : 1
            #expect(ConnectionFactsReader.askKernel(client: nobody, server: server.endpoint) == .noSuchSocket)
        }
    }

    @Test(
        "a client that closed before the lookup has no owner: its orphaned or TIME_WAIT entry (uid 0 to the kernel) is never read as root, by sock_diag or from /proc/net/tcp"
    )
    func closedClientHasNoOwner() throws {
        for family in [AF_INET, AF_INET6] {
            let (client, server) = try Self.connectedPair(family: family)
            defer { close(server.listener) }
            #expect(ConnectionFactsReader.askKernel(client: client.endpoint, server: server.endpoint) == .found(getuid()))
            close(client.fd)  // the client's socket: an orphan, no process holds it
            Self.expectNoOwner(client: client.endpoint, server: server.endpoint, "family \(family), closed by the client")
            close(server.fd)  // both ends closed: the client's end is in TIME_WAIT
            Self.expectNoOwner(client: client.endpoint, server: server.endpoint, "family \(family), TIME_WAIT")
        }
    }

    static func expectNoOwner(client: SocketOwnerTable.Endpoint, server: SocketOwnerTable.Endpoint, _ what: String) {
        let answer = ConnectionFactsReader.askKernel(client: client, server: server)
        #expect(answer == .notLive || answer == .noSuchSocket, "\(what): sock_diag said \(answer)")
        let tables = ["/proc/net/tcp", "/proc/net/tcp6"].compactMap { try? String(contentsOfFile: $0, encoding: .utf8) }
        #expect(!tables.isEmpty)
        #expect(SocketOwnerTable.owner(client: client, server: server, tables: tables) == nil, "\(what): /proc/net/tcp")
    }

    @Test("gather fills the owner for a loopback peer when a uid client needs it, and only then")
    func gatherOnlyWhenNeeded() throws {
        let (client, server) = try Self.connectedPair(family: AF_INET)
        defer { close(client.fd); close(server.fd); close(server.listener) }
        var address = client.address
        let facts = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { ConnectionFactsReader.gather(fd: server.fd, address: $0, needsOwner: true) }
        }
        #expect(facts.owner == .uid(getuid()))
        let without = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { ConnectionFactsReader.gather(fd: server.fd, address: $0, needsOwner: false) }
        }
        #expect(without.owner == .notLookedUp)
    }

    struct End { var fd: Int32; var endpoint: SocketOwnerTable.Endpoint; var address: sockaddr_storage; var listener: Int32 = -1 }

    /// A listener on loopback, a client connected to it and the accepted socket (blocking sockets).
    static func connectedPair(family: Int32) throws -> (client: End, server: End) {
        let listener = socket(family, Int32(SOCK_STREAM.rawValue), 0)
        var storage = sockaddr_storage()
        if family == AF_INET {
            withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                    $0.pointee.sin_family = sa_family_t(AF_INET)
                    $0.pointee.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
                }
            }
        } else {
            withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                    $0.pointee.sin6_family = sa_family_t(AF_INET6)
                    $0.pointee.sin6_addr = in6addr_loopback
                }
            }
        }
        let size = socklen_t(family == AF_INET ? MemoryLayout<sockaddr_in>.size : MemoryLayout<sockaddr_in6>.size)
        try withUnsafePointer(to: &storage) { pointer in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                guard bind(listener, $0, size) == 0, listen(listener, 4) == 0 else { throw POSIXError(.EADDRNOTAVAIL) }
            }
        }
        var bound = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &bound) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) } }
        let client = socket(family, Int32(SOCK_STREAM.rawValue), 0)
        try withUnsafePointer(to: &bound) { pointer in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                guard connect(client, $0, size) == 0 else { throw POSIXError(.ECONNREFUSED) }
            }
        }
        let accepted = accept(listener, nil, nil)
        func endpoint(_ fd: Int32, peer: Bool) -> (SocketOwnerTable.Endpoint, sockaddr_storage) {
            var address = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            _ = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { peer ? getpeername(fd, $0, &length) : getsockname(fd, $0, &length) }
            }
            let parsed = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { ConnectionFactsReader.endpoint($0)! }
            }
            return (parsed, address)
        }
        let (clientEnd, clientAddress) = endpoint(client, peer: false)
        let (serverEnd, serverAddress) = endpoint(accepted, peer: false)
        return (
            End(fd: client, endpoint: clientEnd, address: clientAddress),
            End(fd: accepted, endpoint: serverEnd, address: serverAddress, listener: listener)
        )
    }
}
