import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

/// An http scope and an https one for transparent capture (its plain origins need `require_https: false`).
let transparentFixture = Fixture(
    """
    secrets:
      a_token: { env: A_TOKEN }
    scopes:
      - name: t
        origins: ["http://api.scoped.test", "https://api.scoped.test"]
        require_https: false
        inject: { X-A-Key: "${a_token}" }
    tls: { intercept: ["api.scoped.test"], tunnel: allow }

    """)

let scopedHTTP = origin("http://api.scoped.test")
let scopedHTTPS = origin("https://api.scoped.test")
let tenOne = IPAddress.ipv4(10, 77, 0, 1)
let tenTwo = IPAddress.ipv4(10, 77, 0, 2)

struct ChooseRow: Sendable, CustomTestStringConvertible {
    let name: String
    let scheme: Scheme
    let claimed: String?
    let resolved: [IPAddress]
    let destination: TransparentDestination
    let expected: String
    var testDescription: String { name }
}

@Suite("Transparent capture: which origin a redirected connection is scoped as")
struct TransparentOriginTests {
    static func host(_ text: String) -> Host { try! Host.parse(Substring(text)) }
    static let at80 = TransparentDestination(address: tenOne, port: 80)
    static let at443 = TransparentDestination(address: tenOne, port: 443)

    static let rows: [ChooseRow] = [
        ChooseRow(
            name: "the name resolves to the destination: the name", scheme: .http, claimed: "api.scoped.test", resolved: [tenOne],
            destination: at80, expected: "http://api.scoped.test"),
        ChooseRow(
            name: "one of several addresses is the destination: the name", scheme: .https, claimed: "api.scoped.test",
            resolved: [tenTwo, tenOne], destination: at443, expected: "https://api.scoped.test"),
        ChooseRow(
            name: "the name resolves elsewhere: the address literal", scheme: .http, claimed: "api.scoped.test", resolved: [tenTwo],
            destination: at80, expected: "http://10.77.0.1"),
        ChooseRow(
            name: "the name does not resolve: the address literal", scheme: .https, claimed: "api.scoped.test", resolved: [],
            destination: at443, expected: "https://10.77.0.1"),
        ChooseRow(
            name: "no name (no Host, no SNI): the address literal", scheme: .https, claimed: nil, resolved: [], destination: at443,
            expected: "https://10.77.0.1"),
        ChooseRow(
            name: "the port is the destination's, whatever the Host says", scheme: .http, claimed: "api.scoped.test", resolved: [tenOne],
            destination: TransparentDestination(address: tenOne, port: 8080), expected: "http://api.scoped.test:8080"),
        ChooseRow(
            name: "an address literal that is the destination", scheme: .http, claimed: "10.77.0.1", resolved: [], destination: at80,
            expected: "http://10.77.0.1"),
        ChooseRow(
            name: "an address literal that is not the destination: the destination", scheme: .http, claimed: "10.77.0.2", resolved: [tenTwo],
            destination: at80, expected: "http://10.77.0.1"),
        ChooseRow(
            name: "IPv6: the literal in brackets", scheme: .https, claimed: "api.scoped.test", resolved: [],
            destination: TransparentDestination(address: IPAddress.parse("fd00::1")!, port: 443), expected: "https://[fd00::1]"),
    ]

    @Test("a name counts only when it resolves to the original destination", arguments: rows)
    func choose(_ row: ChooseRow) {
        let chosen = TransparentOrigin.choose(
            scheme: row.scheme, name: row.claimed.map(Self.host), resolved: row.resolved, destination: row.destination)
        #expect(chosen == origin(row.expected))
    }

    /// The class, not the rows: over every combination of names, answers and destinations, the origin
    /// chosen names a host other than the destination's literal only when the destination is among
    /// the name's addresses, and its port is always the destination's.
    @Test("whatever the client names and the resolver answers, a name is chosen only with the destination among its addresses")
    func onlyResolvingNames() {
        let names: [Host?] = [nil, Self.host("api.scoped.test"), Self.host("other.test"), Self.host("10.77.0.1"), Self.host("10.77.0.2")]
        let addresses = [tenOne, tenTwo, IPAddress.parse("fd00::1")!]
        let answers: [[IPAddress]] = [[], [tenOne], [tenTwo], [tenTwo, tenOne], addresses]
        for name in names {
            for answer in answers {
                for address in addresses {
                    for port: UInt16 in [80, 443, 8080] {
                        let destination = TransparentDestination(address: address, port: port)
                        for scheme in [Scheme.http, .https] {
                            let chosen = TransparentOrigin.choose(scheme: scheme, name: name, resolved: answer, destination: destination)
                            let literal = destination.literalOrigin(scheme)
                            #expect(chosen.port == port && chosen.scheme == scheme)
                            if chosen != literal {
                                #expect(name?.kind == .name && answer.contains(address), "\(String(describing: name)) \(answer) \(destination)")
                            }
                        }
                    }
                }
            }
        }
    }
}

struct FirstBytesRow: Sendable, CustomTestStringConvertible {
    let name: String
    let bytes: [UInt8]
    let expected: CapturedFirstBytes
    var testDescription: String { name }
}

@Suite("Transparent capture: what the first bytes are")
struct CapturedFirstBytesTests {
    static let rows: [FirstBytesRow] = [
        FirstBytesRow(name: "nothing yet", bytes: [], expected: .incomplete),
        FirstBytesRow(
            name: "a whole head: its Host", bytes: Array("GET / HTTP/1.1\r\nHost: API.scoped.test:8080\r\n\r\n".utf8),
            expected: .http(host: TransparentOriginTests.host("api.scoped.test"), port: 8080)),
        FirstBytesRow(name: "half a head", bytes: Array("GET / HTTP/1.1\r\nHost: api.scoped.test\r\n".utf8), expected: .incomplete),
        FirstBytesRow(name: "a head without Host", bytes: Array("GET / HTTP/1.0\r\n\r\n".utf8), expected: .http(host: nil, port: nil)),
        FirstBytesRow(
            name: "two Hosts: none (admission refuses the head)", bytes: Array("GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n".utf8),
            expected: .http(host: nil, port: nil)),
        FirstBytesRow(
            name: "a head the parser refuses", bytes: Array("GET / HTTP/1.1\r\nBad Field\r\n\r\n".utf8), expected: .http(host: nil, port: nil)),
        FirstBytesRow(name: "the first byte of TLS", bytes: [0x16], expected: .incomplete),
        FirstBytesRow(
            name: "a TLS record that is no handshake", bytes: [0x16, 0x02, 0, 0, 1, 0], expected: .unreadableTLS("not a TLS record version")),
    ]

    @Test("each start's verdict", arguments: rows)
    func classify(_ row: FirstBytesRow) {
        #expect(CapturedFirstBytes.classify(row.bytes) == row.expected)
    }
}

@Suite("Transparent capture: the connection machine")
struct TransparentMachineTests {
    static let destination443 = TransparentDestination(address: tenOne, port: 443)
    static let destination80 = TransparentDestination(address: tenOne, port: 80)

    static func tlsFacts(loopsBack: Bool = false) -> ConnectionFacts {
        ConnectionFacts(peer: Playbook.peer, captured: CapturedConnection(destination: destination443, tls: true, loopsBack: loopsBack))
    }

    static func plainFacts(loopsBack: Bool = false) -> ConnectionFacts {
        ConnectionFacts(peer: Playbook.peer, captured: CapturedConnection(destination: destination80, tls: false, loopsBack: loopsBack))
    }

    @Test("TLS to a scoped host: intercepted like a CONNECT, without a 200 the client never asked for")
    func interceptWithoutEstablished() {
        var p = Playbook(transparentFixture, facts: Self.tlsFacts())
        p.start([.arm(.clientHead)])
        p.on(
            .requestHead(TransparentOrigin.connectHead(for: scopedHTTPS), headBytes: 0, Arrival(now: p.now, scope: p.fixture.scope)),
            [.cancelTimer, .startClientTLS(scopedHTTPS), .arm(.clientHead)])
        p.on(
            .clientTLSEstablished,
            [
                .emit(
                    .method("CONNECT"), .origin(scopedHTTPS), .tunnel(.intercept), .bytesOut(0), .field(.originalDestination, .text("10.77.0.1:443"))),
                .arm(.clientHead),
            ])
        // Inside, HTTP is spoken (over the client's TLS): a refusal there is an HTTP answer again.
        p.on(.headStarted, [])
        p.on(
            p.head("GET / HTTP/1.1", "Host: other.test"),
            [
                .cancelTimer, .write(startingWith: "HTTP/1.1 400 Bad Request\r\n", containing: ["host_mismatch"]), .emit(.status(400)),
                .close(.afterFlush),
            ])
    }

    @Test("TLS to an unscoped host where tunnels are allowed: spliced without a 200")
    func tunnelWithoutEstablished() {
        let unscopedAddress = TransparentDestination(address: tenOne, port: 443).literalOrigin(.https)
        var p = Playbook(transparentFixture, facts: Self.tlsFacts())
        p.start([.arm(.clientHead)])
        p.on(
            .requestHead(TransparentOrigin.connectHead(for: unscopedAddress), headBytes: 0, Arrival(now: p.now, scope: p.fixture.scope)),
            [.cancelTimer, .arm(.connect), .connect(hop(1), unscopedAddress, .raw, reusePooled: false)])
        p.on(.upstreamConnected(hop(1), reused: false), [.splice(hop(1)), .arm(.stall)])
    }

    @Test("TLS refused (tunnels denied, or the destination is the proxy): no HTTP bytes, a CONNECT line, the close")
    func refusalIsAClose() {
        var denied = Playbook(Configs.intercept, facts: Self.tlsFacts())
        denied.start([.arm(.clientHead)])
        denied.on(
            .requestHead(TransparentOrigin.connectHead(for: unscoped), headBytes: 0, Arrival(now: denied.now, scope: denied.fixture.scope)),
            [
                .cancelTimer,
                .emit(.method("CONNECT"), .status(403), .tunnel(.deny), .bytesOut(0), .failure(.proxy(.tunnelDenied(unscoped)))),
                .close(.afterFlush),
            ])
        var looped = Playbook(Configs.tunnelAllowed, facts: Self.tlsFacts(loopsBack: true))
        looped.start([.arm(.clientHead)])
        looped.on(
            .requestHead(TransparentOrigin.connectHead(for: unscoped), headBytes: 0, Arrival(now: looped.now, scope: looped.fixture.scope)),
            [
                .cancelTimer,
                .emit(.status(403), .failure(.proxy(.loopRefused(Self.destination443.literalOrigin(.https))))),
                .close(.afterFlush),
            ])
        #expect(looped.connected.isEmpty && denied.connected.isEmpty)
    }

    @Test("plain HTTP whose destination is a proxy listener: 403 loop_refused, nothing connected")
    func plainLoopRefused() {
        let target = TransparentTarget(origin: Self.destination80.literalOrigin(.http), firstHost: scopedHTTP)
        var p = Playbook(transparentFixture, mode: .transparent(target), facts: Self.plainFacts(loopsBack: true))
        p.start([.arm(.clientHead)])
        p.on(
            p.head("GET / HTTP/1.1", "Host: api.scoped.test"),
            [
                .cancelTimer, .write(startingWith: "HTTP/1.1 403 Forbidden\r\n", containing: ["loop_refused"]),
                .emit(.status(403), .field(.originalDestination, .text("10.77.0.1:80"))), .close(.afterFlush),
            ])
        #expect(p.connected.isEmpty)
    }

    @Test("plain HTTP: the name that resolved gets the scope's credential; a later request naming another Host is 400")
    func plainNamedOrigin() {
        var p = Playbook(
            transparentFixture, mode: .transparent(TransparentTarget(origin: scopedHTTP, firstHost: scopedHTTP)), facts: Self.plainFacts())
        p.start([.arm(.clientHead)])
        p.on(
            p.head("GET /v1 HTTP/1.1", "Host: api.scoped.test"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), scopedHTTP, .plain, reusePooled: true)])
        p.on(
            .upstreamConnected(hop(1), reused: false),
            [.send(hop(1), startingWith: "GET /v1 HTTP/1.1\r\nHost: api.scoped.test\r\n", containing: [aToken]), .arm(.responseHead)])
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 0")),
            [.write(startingWith: "HTTP/1.1 200 OK\r\n"), .relay(hop(1), .contentLength(0), .contentLength(0)), .arm(.stall)])
        p.on(
            .responseBody(hop(1), .complete(payload: 0, consumed: 0, captured: nil, observed: nil)),
            [
                .cancelTimer, .release(hop(1), reuse: true),
                .emit(.origin(scopedHTTP), .injected(["X-A-Key"]), .field(.originalDestination, .text("10.77.0.1:80"))),
                .arm(.idle), .readNextRequest,
            ])
        p.on(.headStarted, [.arm(.clientHead)])
        p.on(
            p.head("GET / HTTP/1.1", "Host: other.test"),
            [
                .cancelTimer, .write(startingWith: "HTTP/1.1 400 Bad Request\r\n", containing: ["host_mismatch"]), .emit(.status(400)),
                .close(.afterFlush),
            ])
    }

    @Test("plain HTTP whose Host did not resolve to the destination: scoped as the address, no credential")
    func plainAddressOrigin() {
        let literal = Self.destination80.literalOrigin(.http)
        var p = Playbook(transparentFixture, mode: .transparent(TransparentTarget(origin: literal, firstHost: scopedHTTP)), facts: Self.plainFacts())
        p.start([.arm(.clientHead)])
        p.on(p.head("GET / HTTP/1.1", "Host: api.scoped.test"), [.cancelTimer, .arm(.connect), .connect(hop(1), literal, .plain, reusePooled: true)])
        p.on(
            .upstreamConnected(hop(1), reused: false),
            [.send(hop(1), startingWith: "GET / HTTP/1.1\r\nHost: 10.77.0.1\r\n", excluding: ["A-INJECTED"]), .arm(.responseHead)])
    }

    @Test("a CONNECT a client sends on the transparent listener is refused (only the proxy's own reading of a ClientHello is one)")
    func clientConnectRefused() {
        var p = Playbook(
            transparentFixture, mode: .transparent(TransparentTarget(origin: scopedHTTP, firstHost: scopedHTTP)), facts: Self.plainFacts())
        p.start([.arm(.clientHead)])
        p.on(
            p.head("CONNECT api.scoped.test:443 HTTP/1.1", "Host: api.scoped.test:443"),
            [.cancelTimer, .write(startingWith: "HTTP/1.1 400 Bad Request\r\n"), .emit(.status(400)), .close(.afterFlush)])
    }

    @Test("every line of a captured connection names its original destination, a head that never parsed included")
    func everyLineNamesTheDestination() {
        var p = Playbook(transparentFixture, mode: .transparent(TransparentTarget(origin: scopedHTTP, firstHost: nil)), facts: Self.plainFacts())
        p.start([.arm(.clientHead)])
        p.on(
            .requestHeadInvalid(.unsupportedVersion, Arrival(now: p.now, scope: p.fixture.scope)),
            [
                .cancelTimer, .write(startingWith: "HTTP/1.1 505 HTTP Version Not Supported\r\n"),
                .emit(.status(505), .field(.originalDestination, .text("10.77.0.1:80"))), .close(.afterFlush),
            ])
    }
}

@Suite("Transparent capture: which client-chosen names are looked up at all")
struct TransparentLookupTests {
    /// The sandboxed client (uid 65534) may reach one name; the anonymous client (the global rules)
    /// anything; a client recognised by a token (plain HTTP may send Proxy-Authorization) one other name.
    static let fixture = Fixture(
        """
        secrets:
          a_token: { env: A_TOKEN }
          proxy_password: { env: PROXY_PASSWORD }
        scopes:
          - name: t
            origins: ["http://api.scoped.test", "https://api.scoped.test"]
            require_https: false
            inject: { X-A-Key: "${a_token}" }
            clients: [sandboxed]
        clients:
          - name: sandboxed
            uid: 65534
            egress: { default: deny, allow: ["http://public.test", "https://*.public.test"] }
          - name: ci
            auth: { bearer: proxy_password }
            egress: { default: deny, allow: ["http://ci.test"] }
          - name: anonymous

        """)
    static let destination80 = TransparentDestination(address: tenOne, port: 80)
    static let destination443 = TransparentDestination(address: tenOne, port: 443)
    static let sandboxed = ConnectionFacts(peer: Playbook.peer, owner: .uid(65534))
    static let stranger = ConnectionFacts(peer: Playbook.peer, owner: .uid(1000))

    static func mayLookUp(_ name: String, _ scheme: Scheme, _ facts: ConnectionFacts) -> Bool {
        TransparentOrigin.mayLookUp(
            TransparentOriginTests.host(name), scheme: scheme, destination: scheme == .http ? destination80 : destination443, facts: facts,
            scope: fixture.scope)
    }

    @Test("a name the connection's client may not reach is never looked up; one it may reach (an allow entry, its scope) is")
    func deniedNamesStayInside() {
        // The data a client would spell into names: its rules deny them, so no query carries them.
        #expect(!Self.mayLookUp("c2VjcmV0.exfil.test", .http, Self.sandboxed))
        #expect(!Self.mayLookUp("c2VjcmV0.exfil.test", .https, Self.sandboxed))
        #expect(!Self.mayLookUp("public.test", .https, Self.sandboxed))  // the allow entry is for http only
        #expect(Self.mayLookUp("public.test", .http, Self.sandboxed))
        #expect(Self.mayLookUp("a.public.test", .https, Self.sandboxed))
        #expect(Self.mayLookUp("api.scoped.test", .https, Self.sandboxed))  // a scope serving it: reachable by name
        // Another client's rules: the anonymous one (global rules) reaches anything.
        #expect(Self.mayLookUp("c2VjcmV0.exfil.test", .https, Self.stranger))
        // Plain HTTP may carry Proxy-Authorization: a password client's names are looked up; TLS never carries one.
        #expect(Self.mayLookUp("ci.test", .http, Self.sandboxed))
        #expect(!Self.mayLookUp("ci.test", .https, Self.sandboxed))
    }

    /// The class, against the consumer: a TLS connection's one CONNECT (no Proxy-Authorization) for a
    /// name is refused by egress exactly when the name is not looked up. So a skipped lookup never
    /// changes an admission, and a lookup happens only for a name the connection may go on to use.
    @Test("over TLS, a name is looked up exactly when its CONNECT would pass the egress policy")
    func lookupMatchesAdmission() {
        let names = ["public.test", "a.public.test", "ci.test", "api.scoped.test", "exfil.test", "x.exfil.test", "API.Scoped.Test"]
        for name in names {
            for facts in [Self.sandboxed, Self.stranger] {
                let origin = Origin(scheme: .https, host: TransparentOriginTests.host(name), port: 443)
                var captured = facts
                captured.captured = CapturedConnection(destination: Self.destination443, tls: true, loopsBack: false)
                let admission = RequestAdmission.admit(
                    TransparentOrigin.connectHead(for: origin), mode: .forwardProxy, scope: Self.fixture.scope,
                    policy: .init(tunnel: .allow, canIntercept: false), facts: captured)
                let egressDenied = if case .reject(.egressDenied) = admission { true } else { false }
                #expect(Self.mayLookUp(name, .https, facts) == !egressDenied, "\(name) \(facts.owner): \(admission)")
            }
        }
    }
}

@Suite("Transparent capture: first bytes that arrive slowly")
struct CapturedFirstBytesDripTests {
    /// A head nearly as large as a head may be, in fewer fields than a head may have.
    static let bigHead: [UInt8] = {
        var text = "GET / HTTP/1.1\r\nHost: api.scoped.test\r\n"
        while text.utf8.count < HeadLimits.request.maxHeadBytes - 2000 { text += "X-Filler: " + String(repeating: "a", count: 1000) + "\r\n" }
        return Array((text + "\r\n").utf8)
    }()

    /// The engine wakes on every new byte a client sends and reads the whole prefix again (it peeks):
    /// a head sent a byte at a time must still be scanned once, or one slow client costs the loop
    /// quadratic work (64 KiB dribbled: two billion bytes scanned, instead of 64 Ki).
    @Test("a head that arrives a byte at a time is scanned once in all, and read the same as whole")
    func dribbledHeadIsScannedOnce() {
        var reader = CapturedFirstBytesReader()
        var verdict = CapturedFirstBytes.incomplete
        for end in 1...Self.bigHead.count {
            verdict = reader.read(Array(Self.bigHead[..<end]))
            if end < Self.bigHead.count { #expect(verdict == .incomplete) }
        }
        #expect(verdict == CapturedFirstBytes.classify(Self.bigHead))
        #expect(verdict == .http(host: TransparentOriginTests.host("api.scoped.test"), port: nil))
        #expect(reader.headBytesScanned <= Self.bigHead.count, "\(reader.headBytesScanned) bytes scanned for a \(Self.bigHead.count)-byte head")
    }
}
