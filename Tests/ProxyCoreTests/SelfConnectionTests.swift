import HTTP1Codec
import ScopePolicy
import Testing

@testable import ProxyCore

// The proxy is never its own client (docs/security-model.md, "Clients"): the pure decisions.

private func ip(_ text: String) -> IPAddress { IPAddress.parse(text)! }
private func at(_ text: String, _ port: UInt16) -> OwnListeners.Endpoint { .init(address: ip(text), port: port) }

@Suite("Self connection: which destinations reach the proxy's own listeners")
struct OwnListenersTests {
    struct Row: Sendable, CustomTestStringConvertible {
        let name: String
        let listeners: [OwnListeners.Endpoint]
        let destination: String
        let port: UInt16
        var interfaces: [String] = ["127.0.0.1", "::1", "192.0.2.10", "2001:db8::10"]
        let reaches: Bool
        var testDescription: String { name }
    }

    static let loopbackProxy = [at("127.0.0.1", 8080), at("127.0.0.1", 40123), at("127.0.0.1", 9090)]

    static let rows: [Row] = [
        Row(name: "the forward listener itself", listeners: loopbackProxy, destination: "127.0.0.1", port: 8080, reaches: true),
        Row(
            name: "a route port bound at port 0, as the kernel resolved it", listeners: loopbackProxy, destination: "127.0.0.1",
            port: 40123, reaches: true),
        Row(
            name: "another loopback address at a listening port", listeners: loopbackProxy, destination: "127.0.0.2", port: 8080,
            reaches: true),
        Row(name: "the end of 127/8", listeners: loopbackProxy, destination: "127.255.255.254", port: 9090, reaches: true),
        Row(
            name: "::1 at a listening port (an IPv4 listener: refused all the same, this machine's)", listeners: loopbackProxy,
            destination: "::1", port: 8080, reaches: true),
        Row(name: "IPv4-mapped loopback", listeners: loopbackProxy, destination: "::ffff:127.0.0.1", port: 8080, reaches: true),
        Row(
            name: "the unspecified address connects to this machine", listeners: loopbackProxy, destination: "0.0.0.0", port: 8080,
            reaches: true),
        Row(name: ":: likewise", listeners: loopbackProxy, destination: "::", port: 8080, reaches: true),
        Row(name: "a local interface address", listeners: loopbackProxy, destination: "192.0.2.10", port: 8080, reaches: true),
        Row(name: "a local IPv6 interface address", listeners: loopbackProxy, destination: "2001:db8::10", port: 9090, reaches: true),
        Row(
            name: "an address that is not this machine's, at a port a loopback listener uses", listeners: loopbackProxy,
            destination: "192.0.2.99", port: 8080, reaches: false),
        Row(name: "loopback at a port no listener uses", listeners: loopbackProxy, destination: "127.0.0.1", port: 8081, reaches: false),
        Row(
            name: "a wildcard listener: any address at its port", listeners: [at("0.0.0.0", 8080)], destination: "203.0.113.7",
            port: 8080, interfaces: [], reaches: true),
        Row(
            name: "an IPv6 wildcard listener: any address at its port", listeners: [at("::", 8080)], destination: "198.51.100.1",
            port: 8080, interfaces: [], reaches: true),
        Row(
            name: "a wildcard listener: other ports are not its", listeners: [at("0.0.0.0", 8080)], destination: "203.0.113.7",
            port: 443, reaches: false),
        Row(
            name: "a listener bound to an interface address, reached by that address even if the interface list lost it",
            listeners: [at("192.0.2.10", 8080)], destination: "192.0.2.10", port: 8080, interfaces: [], reaches: true),
        Row(
            name: "a listener bound to ::1, reached through IPv6 loopback", listeners: [at("::1", 8080)], destination: "::1",
            port: 8080, reaches: true),
        Row(name: "no listeners known yet: nothing is refused", listeners: [], destination: "127.0.0.1", port: 8080, reaches: false),
    ]

    @Test("each row", arguments: rows)
    func reaches(_ row: Row) {
        var asked = false
        let verdict = OwnListeners(row.listeners).reaches(ip(row.destination), port: row.port) {
            asked = true
            return row.interfaces.map(ip)
        }
        #expect(verdict == row.reaches)
        if !OwnListeners(row.listeners).endpoints.contains(where: { $0.port == row.port }) {
            #expect(!asked, "a port no listener uses never costs an interface lookup")
        }
    }

    @Test("every loopback, unspecified or local address at every listening port is refused (property over a grid)")
    func grid() {
        let listeners = OwnListeners(Self.loopbackProxy)
        let local = ["192.0.2.10", "2001:db8::10"].map(ip)
        for port in Self.loopbackProxy.map(\.port) {
            for last in [UInt8(0), 1, 2, 200, 255] {
                #expect(listeners.reaches(.ipv4(127, 0, 0, last), port: port) { local })
                #expect(listeners.reaches(ip("::ffff:127.0.0.\(last)"), port: port) { local })
            }
            for address in local + [ip("::1"), ip("::"), ip("0.0.0.0")] {
                #expect(listeners.reaches(address, port: port) { local })
            }
            #expect(!listeners.reaches(ip("192.0.2.11"), port: port) { local })
        }
    }
}

@Suite("Self connection: a socket's owner only from a live socket")
struct LiveSocketOwnerTests {
    @Test(
        "states and inodes",
        arguments: [
            (UInt8(1), UInt64(1234), UInt32(1000), UInt32(1000) as UInt32?),  // ESTABLISHED, held by a process
            (4, 1234, 1000, 1000),  // FIN_WAIT1: the client shut down writing, still holds it
            (5, 1234, 1000, 1000),  // FIN_WAIT2, likewise
            (6, 0, 0, nil),  // TIME_WAIT: the kernel reports uid 0 and inode 0
            (6, 1234, 0, nil),  // TIME_WAIT is never live, whatever else it says
            (5, 0, 1000, nil),  // an orphan (closed by its process): inode 0
            (5, 0, 0, nil),  // a FIN_WAIT2 timewait entry: uid 0, inode 0
            (1, 0, 0, nil),  // no inode: nobody holds it
            (7, 1234, 1000, nil),  // CLOSE
            (8, 1234, 1000, nil),  // CLOSE_WAIT: the proxy has not closed its end at accept
            (10, 1234, 0, nil),  // LISTEN
        ])
    func liveOwner(_ state: UInt8, _ inode: UInt64, _ uid: UInt32, _ expected: UInt32?) {
        #expect(SocketOwnerTable.liveOwner(state: state, inode: inode, uid: uid) == expected)
    }

    @Test("the sock_diag question asks exactly the live states (ESTABLISHED, FIN_WAIT1, FIN_WAIT2)")
    func stateMask() {
        #expect(SocketOwnerTable.liveClientStateMask == (1 << 1 | 1 << 4 | 1 << 5))
        #expect(SocketOwnerTable.liveClientStateMask & (1 << 6) == 0, "never TIME_WAIT")
    }

    // A client (127.0.0.1:54321 -> 127.0.0.1:8080) that closed before the proxy accepted: its row is
    // TIME_WAIT (or an orphan), which /proc/net/tcp prints with uid 0 and inode 0.
    static let closed = """
          sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
           0: 0100007F:D431 0100007F:1F90 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0000000000000000
           1: 0100007F:D432 0100007F:1F90 05 00000000:00000000 00:00000000 00000000  1000        0 0 1 0000000000000000
           2: 0100007F:D433 0100007F:1F90 05 00000000:00000000 00:00000000 00000000  1000        0 4321 1 0000000000000000
           3: 0100007F:D434 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 4322 1 0000000000000000
           4: 0100007F:D435 0100007F:1F90 1 00000000:00000000 00:00000000 00000000  1000        0 4323 1 0000000000000000
           5: 0100007F:D436 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 +4 1 0000000000000000
        """

    @Test(
        "/proc/net/tcp: a TIME_WAIT or orphaned row is no owner; live rows are",
        arguments: [
            (UInt16(0xD431), nil as UInt32?),  // TIME_WAIT, uid 0: not root, unknown
            (0xD432, nil),  // orphan: inode 0
            (0xD433, 1000),  // FIN_WAIT2 still held
            (0xD434, 1000),  // ESTABLISHED
            (0xD435, nil),  // a state column that is not two hex digits: unreadable
            (0xD436, nil),  // an inode that is not digits: unreadable
        ])
    func table(_ clientPort: UInt16, _ expected: UInt32?) {
        let client = SocketOwnerTable.Endpoint(address: .ipv4(127, 0, 0, 1), port: clientPort)
        let server = SocketOwnerTable.Endpoint(address: .ipv4(127, 0, 0, 1), port: 8080)
        #expect(SocketOwnerTable.owner(client: client, server: server, tables: [Self.closed], littleEndian: true) == expected)
    }

    @Test("a TIME_WAIT row beside the live one does not make the answer disagree")
    func timeWaitBesideLive() {
        let table = Self.closed + "\n   6: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000 0 999 1\n"
        let client = SocketOwnerTable.Endpoint(address: .ipv4(127, 0, 0, 1), port: 0xD431)
        let server = SocketOwnerTable.Endpoint(address: .ipv4(127, 0, 0, 1), port: 8080)
        #expect(SocketOwnerTable.owner(client: client, server: server, tables: [table], littleEndian: true) == 1000)
    }
}

@Suite("Self connection: the proxy's own connection is nobody")
struct OwnConnectionAdmissionTests {
    static let own = ConnectionFacts(peer: "127.0.0.1:40000", peerIP: "127.0.0.1", owner: .uid(1001), isProxyOwnConnection: true)

    @Test(
        "refused with loop_refused before any client rule: uid, source, anonymous, or no clients at all",
        arguments: [
            ["GET http://a.example/ HTTP/1.1", "Host: a.example"],
            ["CONNECT a.example:443 HTTP/1.1", "Host: a.example:443"],
            ["GET http://a.example/ HTTP/1.1", "Host: a.example", "Proxy-Authorization: Bearer let-me-in"],
        ])
    func refused(_ head: [String]) {
        let anonymous = Fixture(
            Configs.scopes + """
                clients:
                  - { name: ci, uid: 1001 }
                  - { name: local, source: ["127.0.0.0/8"] }
                  - { name: anonymous }
                """)
        for fixture in [Configs.clients, anonymous, Configs.pass] {
            let modes: [ConnectionMode] =
                head[0].hasPrefix("CONNECT")
                ? [.forwardProxy]
                : [.forwardProxy, .intercepted(a, client: ClientIdentity(name: "ci"))]
            for mode in modes {
                let admitted = RequestAdmission.admit(
                    requestHead(head), mode: mode, scope: fixture.scope,
                    policy: .init(tunnel: .allow, canIntercept: true), facts: Self.own)
                #expect(admitted == .reject(.loopRefused(nil)), "\(mode)")
                // The same facts from any other socket are the uid client (where one is configured).
                var notOwn = Self.own
                notOwn.isProxyOwnConnection = false
                let other = RequestAdmission.admit(
                    requestHead(head), mode: mode, scope: fixture.scope,
                    policy: .init(tunnel: .allow, canIntercept: true), facts: notOwn)
                #expect(other != .reject(.loopRefused(nil)))
            }
        }
    }

    @Test("loop_refused is a 403 with a small JSON body, and the connection closes")
    func response() {
        let error = ProxyError.loopRefused(origin("http://127.0.0.1:8080"))
        #expect(error.status == 403)
        #expect(error.code == "loop_refused")
        #expect(!error.allowsKeepAlive)
        let text = String(decoding: error.response(keepAlive: false, requestID: "r1"), as: UTF8.self)
        #expect(text.hasPrefix("HTTP/1.1 403 Forbidden\r\n"))
        #expect(text.contains(#"{"error":"loop_refused","message":"http://127.0.0.1:8080 resolves to this proxy's own listening port"#))
        #expect(ProxyError.loopRefused(nil).message.contains("opened by the proxy itself"))
    }
}
