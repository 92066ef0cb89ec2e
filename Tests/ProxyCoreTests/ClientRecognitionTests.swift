import HTTP1Codec
import ScopePolicy
import Testing

@testable import ProxyCore

private func basic(_ text: String) -> String { "Basic " + Base64.encode(Array(text.utf8)) }
private let ca = "/etc/scopeproxy/clients-ca.pem"

/// Every kind of client, in one directory: the order of the checks is what the rows test.
private let rules: [ClientRule] = [
    ClientRule(name: "tool", tlsClient: TLSClientMatch(caFile: ca, subject: .commonName("tool"))),
    ClientRule(name: "me", auth: .basic(user: "me", passwordSecret: "me_pw")),
    ClientRule(name: "agent", auth: .bearer(tokenSecret: "agent_key")),
    ClientRule(name: "ci", uid: 1001),
    ClientRule(name: "lan", sources: [try! CIDR.parse("10.0.0.0/8").get()]),
]
private let secrets = StaticSecrets(["me_pw": "CANARY-me", "agent_key": "CANARY-agent"])
private let toolCert = ClientCertificate(commonNames: ["tool"], subjectAltNames: [], verifiedBy: [ca])

@Suite("Clients: recognition order (tls_client, auth, uid, source, anonymous), no sockets")
struct ClientRecognitionTests {
    struct Row: Sendable, CustomTestStringConvertible {
        let name: String
        var facts = ConnectionFacts(peer: "127.0.0.1:5000", peerIP: "127.0.0.1")
        var authorization: String?
        var anonymous = false
        let expected: Recognition
        var testDescription: String { name }
    }

    static func client(_ name: String) -> Recognition { .client(ClientIdentity(name: name)) }
    static func refused(_ reason: ClientRefusal.Reason, _ detail: String? = nil) -> Recognition {
        // Only the final 407 lists every kind of rule these clients use (for its message).
        let everyKind = ClientRecognizers(proxyAuthorization: true, clientCertificate: true, uid: true, source: true)
        return .refused(
            ClientRefusal(
                reason: reason, detail: detail, schemes: [.basic, .bearer],
                recognizers: reason == .clientNotRecognised ? everyKind : ClientRecognizers(proxyAuthorization: true)))
    }

    static let rows: [Row] = [
        Row(name: "Basic user selects the client", authorization: basic("me:CANARY-me"), expected: client("me")),
        Row(name: "Bearer token", authorization: "Bearer CANARY-agent", expected: client("agent")),
        Row(
            name: "Basic with the right password under another user: refused", authorization: basic("you:CANARY-me"),
            expected: refused(.proxyAuthorizationNotRecognised)),
        Row(
            name: "a Bearer token that is another client's Basic password: refused", authorization: "Bearer CANARY-me",
            expected: refused(.proxyAuthorizationNotRecognised)),
        Row(
            name: "wrong password, though the uid would match: 407, never a fallback",
            facts: ConnectionFacts(peer: "127.0.0.1:5000", peerIP: "127.0.0.1", owner: .uid(1001)),
            authorization: basic("me:wrong"), expected: refused(.proxyAuthorizationNotRecognised)),
        Row(
            name: "wrong token from a source network: 407, never a fallback",
            facts: ConnectionFacts(peer: "10.1.2.3:5000", peerIP: "10.1.2.3"), authorization: "Bearer wrong",
            expected: refused(.proxyAuthorizationNotRecognised)),
        Row(
            name: "wrong token where anonymous exists: 407, never a fallback", authorization: "Bearer wrong", anonymous: true,
            expected: refused(.proxyAuthorizationNotRecognised)),
        Row(
            name: "malformed Proxy-Authorization: 407 with the malformation", authorization: "Basic !!!!", anonymous: true,
            expected: refused(.proxyAuthorizationInvalid, "bad_base64")),
        Row(name: "uid", facts: ConnectionFacts(peer: "127.0.0.1:5000", peerIP: "127.0.0.1", owner: .uid(1001)), expected: client("ci")),
        Row(
            name: "another uid: not recognised", facts: ConnectionFacts(peer: "127.0.0.1:5000", peerIP: "127.0.0.1", owner: .uid(1002)),
            expected: refused(.clientNotRecognised)),
        Row(
            name: "owner unknown: fails closed, and says why",
            facts: ConnectionFacts(peer: "127.0.0.1:5000", peerIP: "127.0.0.1", owner: .unknown(reason: "another network namespace")),
            expected: refused(.clientNotRecognised, "socket owner unknown: another network namespace")),
        Row(name: "source network", facts: ConnectionFacts(peer: "10.1.2.3:5000", peerIP: "10.1.2.3"), expected: client("lan")),
        Row(
            name: "source network seen IPv4-mapped", facts: ConnectionFacts(peer: "[::ffff:10.1.2.3]:5000", peerIP: "::ffff:10.1.2.3"),
            expected: client("lan")),
        Row(name: "uid before source", facts: ConnectionFacts(peer: "10.1.2.3:5000", peerIP: "10.1.2.3", owner: .uid(1001)), expected: client("ci")),
        Row(
            name: "certificate before a Proxy-Authorization",
            facts: ConnectionFacts(peer: "127.0.0.1:5000", peerIP: "127.0.0.1", certificate: toolCert),
            authorization: "Bearer CANARY-agent", expected: client("tool")),
        Row(
            name: "certificate from another CA: not this client",
            facts: ConnectionFacts(
                peer: "127.0.0.1:5000", peerIP: "127.0.0.1",
                certificate: ClientCertificate(commonNames: ["tool"], subjectAltNames: [], verifiedBy: ["/other-ca.pem"])),
            expected: refused(.clientNotRecognised)),
        Row(
            name: "certificate with another subject: not this client",
            facts: ConnectionFacts(
                peer: "127.0.0.1:5000", peerIP: "127.0.0.1",
                certificate: ClientCertificate(commonNames: ["tool2"], subjectAltNames: ["DNS:tool"], verifiedBy: [ca])),
            expected: refused(.clientNotRecognised)),
        Row(name: "nothing sent, nothing matches: 407", expected: refused(.clientNotRecognised)),
        Row(name: "nothing sent, anonymous defined: anonymous", anonymous: true, expected: client("anonymous")),
    ]

    @Test("each row recognises what it says", arguments: rows)
    func recognize(_ row: Row) {
        let directory = ClientDirectory(rules + (row.anonymous ? [ClientRule(name: "anonymous")] : []))
        #expect(directory.recognize(row.facts, proxyAuthorization: row.authorization, secrets: secrets) == row.expected)
    }

    @Test("no clients configured: every request is the unnamed client, Proxy-Authorization or not")
    func noClients() {
        let directory = ClientDirectory([])
        #expect(directory.recognize(ConnectionFacts(peer: "x"), proxyAuthorization: "Bearer x", secrets: secrets) == .client(.unnamed))
    }

    @Test("a secret with no value recognises nobody (fail closed), an empty one neither")
    func missingSecret() {
        let directory = ClientDirectory([
            ClientRule(name: "agent", auth: .bearer(tokenSecret: "absent")),
            ClientRule(name: "empty", auth: .bearer(tokenSecret: "blank")),
        ])
        let facts = ConnectionFacts(peer: "x")
        #expect(
            directory.recognize(facts, proxyAuthorization: "Bearer ", secrets: StaticSecrets(["blank": ""]))
                == .refused(ClientRefusal(reason: .proxyAuthorizationInvalid, detail: "empty_credentials", schemes: [.bearer])))
        #expect(
            directory.recognize(facts, proxyAuthorization: "Bearer x", secrets: StaticSecrets(["blank": ""]))
                == .refused(ClientRefusal(reason: .proxyAuthorizationNotRecognised, schemes: [.bearer])))
    }

    @Test("proxy_auth shorthand: Basic any user or Bearer, one client named proxy_auth")
    func shorthand() {
        let context = ScopeContext(policy: .stripEverything, secrets: StaticSecrets(["pw": "CANARY-pw"]), proxyAuthSecret: "pw")
        let facts = ConnectionFacts(peer: "x")
        #expect(context.recognize(facts, proxyAuthorization: basic("anyone:CANARY-pw")) == .client(ClientIdentity(name: "proxy_auth")))
        #expect(context.recognize(facts, proxyAuthorization: "Bearer CANARY-pw") == .client(ClientIdentity(name: "proxy_auth")))
        #expect(
            context.recognize(facts, proxyAuthorization: nil)
                == .refused(ClientRefusal(reason: .clientNotRecognised, schemes: [.basic, .bearer])))
    }

    /// A credential in a scheme no client uses says so, and how the configured scheme is sent. The
    /// answer is the same whatever name or key was sent (the schemes are public in
    /// Proxy-Authenticate; which clients exist is not), and recognition itself is unchanged: a
    /// Bearer client's key sent as a Basic password is still refused.
    @Test(
        "a credential in a scheme no client uses: the same refusal for every name and key, naming the configured scheme",
        arguments: [
            (
                [ClientRule(name: "agent", auth: .bearer(tokenSecret: "agent_key"))],
                [basic("agent:CANARY-agent"), basic("any:CANARY-agent"), basic("nobody:wrong")], ProxyAuthScheme.bearer
            ),
            (
                [ClientRule(name: "me", auth: .basic(user: "me", passwordSecret: "me_pw"))],
                ["Bearer CANARY-me", "Bearer wrong"], ProxyAuthScheme.basic
            ),
        ])
    func schemeNotConfigured(rules: [ClientRule], sent: [String], configured: ProxyAuthScheme) {
        let directory = ClientDirectory(rules + [ClientRule(name: "ci", uid: 1001)])
        let facts = ConnectionFacts(peer: "127.0.0.1:5000", peerIP: "127.0.0.1", owner: .uid(1001))
        let expected = Recognition.refused(ClientRefusal(reason: .proxyAuthorizationSchemeNotConfigured, schemes: [configured]))
        for value in sent {
            #expect(directory.recognize(facts, proxyAuthorization: value, secrets: secrets) == expected)
        }
        let message = ProxyError.proxyAuthenticationRequired(ClientRefusal(reason: .proxyAuthorizationSchemeNotConfigured, schemes: [configured]))
            .message
        #expect(message.contains("authenticate with \(configured.rawValue)"))
        #expect(!message.contains("agent") && !message.contains("'me'"))
    }

    @Test("with Basic and Bearer clients both, a wrong credential of either scheme is not recognised (no scheme hint)")
    func bothSchemesConfigured() {
        let directory = ClientDirectory(rules)
        for value in [basic("agent:CANARY-agent"), basic("me:wrong"), "Bearer wrong", "Bearer CANARY-me"] {
            #expect(
                directory.recognize(ConnectionFacts(peer: "x"), proxyAuthorization: value, secrets: secrets)
                    == .refused(ClientRefusal(reason: .proxyAuthorizationNotRecognised, schemes: [.basic, .bearer])))
        }
    }

    @Test("the rate limit is per client, with the time passed in")
    func rate() {
        let directory = ClientDirectory([
            ClientRule(name: "a", sources: [try! CIDR.parse("10.0.0.0/8").get()], rate: RateLimit(count: 1, periodSeconds: 1)),
            ClientRule(name: "b", sources: [try! CIDR.parse("11.0.0.0/8").get()]),
        ])
        let a = ClientIdentity(name: "a"), b = ClientIdentity(name: "b")
        #expect(directory.admit(a, now: 0) == .allowed)
        #expect(directory.admit(a, now: 1) == .limited(retryAfterSeconds: 1))
        for _ in 0..<100 { #expect(directory.admit(b, now: 1) == .allowed) }
        #expect(directory.admit(a, now: 1_000_001) == .allowed)
        #expect(directory.admit(.unnamed, now: 0) == .allowed)
    }

    @Test("the 407 offers the configured schemes and says nothing the client sent")
    func response() {
        let refusal = ClientRefusal(reason: .proxyAuthorizationNotRecognised, schemes: [.basic, .bearer])
        let text = String(decoding: ProxyError.proxyAuthenticationRequired(refusal).response(keepAlive: false, requestID: "r"), as: UTF8.self)
        #expect(text.hasPrefix("HTTP/1.1 407 Proxy Authentication Required\r\n"))
        #expect(text.contains("Proxy-Authenticate: Basic realm=\"scopeproxy\"\r\nProxy-Authenticate: Bearer realm=\"scopeproxy\"\r\n"))
        let limited = String(
            decoding: ProxyError.rateLimited(client: "a", retryAfterSeconds: 7).response(keepAlive: false, requestID: "r"), as: UTF8.self)
        #expect(limited.hasPrefix("HTTP/1.1 429 Too Many Requests\r\n"))
        #expect(limited.contains("Retry-After: 7\r\n"))
    }
}

@Suite("Clients: socket owner from /proc/net/tcp text")
struct SocketOwnerTableTests {
    // Captured shape of /proc/net/tcp on x86-64: the proxy listens on 127.0.0.1:8080 (1F90), a client
    // connects from 127.0.0.1:54321 (D431) as uid 1000; the accepted socket is the proxy's (uid 0).
    static let tcp = """
          sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
           0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0000000000000000 100 0 0 10 0
           1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 1002 1 0000000000000000 20 4 30 10 -1
           2: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 1003 1 0000000000000000 20 4 30 10 -1
           3: 0200007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  2000        0 1004 1 0000000000000000 20 4 30 10 -1
        """
    static let tcp6 = """
          sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
           0: 00000000000000000000000001000000:C350 00000000000000000000000001000000:1F90 01 00000000:00000000 00:00000000 00000000 65534        0 2001 1
           1: 0000000000000000FFFF00000100007F:C351 0000000000000000FFFF00000100007F:1F90 01 00000000:00000000 00:00000000 00000000  1234        0 2002 1
        """

    static func endpoint(_ ip: String, _ port: UInt16) -> SocketOwnerTable.Endpoint {
        SocketOwnerTable.Endpoint(address: IPAddress.parse(ip)!, port: port)
    }

    @Test(
        "rows",
        arguments: [
            ("127.0.0.1", 54321, "127.0.0.1", 8080, 1000 as UInt32?),  // the client's row, not the proxy's accepted socket
            ("127.0.0.2", 54321, "127.0.0.1", 8080, 2000),  // same port, other loopback address
            ("127.0.0.1", 54321, "127.0.0.1", 8081, nil),  // remote must be the proxy's address
            ("127.0.0.1", 54322, "127.0.0.1", 8080, nil),  // not in the table (another namespace, or closed)
            ("::1", 50000, "::1", 8080, 65534),
            ("::ffff:127.0.0.1", 50001, "::ffff:127.0.0.1", 8080, 1234),  // IPv4-mapped in tcp6
        ])
    func owner(_ clientIP: String, _ clientPort: Int, _ serverIP: String, _ serverPort: Int, _ expected: UInt32?) {
        let found = SocketOwnerTable.owner(
            client: Self.endpoint(clientIP, UInt16(clientPort)), server: Self.endpoint(serverIP, UInt16(serverPort)),
            tables: [Self.tcp, Self.tcp6], littleEndian: true)
        #expect(found == expected)
    }

    @Test("rows that disagree fail closed; garbage lines are skipped")
    func hostile() {
        let twice = Self.tcp + "\n   9: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0 0 9 1\n"
        #expect(
            SocketOwnerTable.owner(
                client: Self.endpoint("127.0.0.1", 54321), server: Self.endpoint("127.0.0.1", 8080),
                tables: [twice], littleEndian: true) == nil)
        let garbage = "header\n 0: ZZZZ:1F90 x y\n1:\n 2: 0100007F:D431 0100007F:1F90 01 a b c -5\n 3: 0100007F:D4310 0100007F:1F90 01 a b c 7\n"
        #expect(
            SocketOwnerTable.owner(
                client: Self.endpoint("127.0.0.1", 54321), server: Self.endpoint("127.0.0.1", 8080),
                tables: [garbage, ""], littleEndian: true) == nil)
    }

    @Test("a big-endian kernel prints the address bytes in order")
    func bigEndian() {
        let table = "h\n 0: 7F000001:D431 7F000001:1F90 01 00000000:00000000 00:00000000 00000000  42 0 1 1\n"
        #expect(
            SocketOwnerTable.owner(
                client: Self.endpoint("127.0.0.1", 54321), server: Self.endpoint("127.0.0.1", 8080),
                tables: [table], littleEndian: false) == 42)
    }
}

@Suite("Clients: the connection machine, no sockets")
struct ClientMachineTests {
    @Test("identity is established on the CONNECT and inherited inside the intercepted tunnel; the record names the client")
    func connectIdentityInherited() {
        var p = Playbook(Configs.clients)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("CONNECT a.example:443 HTTP/1.1", "Proxy-Authorization: Bearer let-me-in"),
            [.cancelTimer, .writeExactly(established), .startClientTLS(a), .arm(.clientHead)])
        p.on(.clientTLSEstablished, [.emit(.tunnel(.intercept), .clientID("agent")), .arm(.clientHead)])
        // No Proxy-Authorization inside: the tunnel's client is `agent`, whom scope a serves.
        p.on(p.head("GET / HTTP/1.1", "Host: a.example", clientCookie), [.cancelTimer, .arm(.connect), .connect(hop(1), a, .tls, reusePooled: true)])
        p.on(
            .upstreamConnected(hop(1), reused: true),
            [.send(hop(1), startingWith: "GET / HTTP/1.1\r\n", containing: [aToken, clientCookie]), .arm(.responseHead)])
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 0")),
            [.write(startingWith: "HTTP/1.1 200 OK\r\n"), .relay(hop(1), .contentLength(0), .contentLength(0)), .arm(.stall)])
        p.on(
            .responseBody(hop(1), .complete(payload: 0, consumed: 0, captured: nil, observed: nil)),
            [
                .cancelTimer, .release(hop(1), reuse: true), .emit(.status(200), .clientID("agent"), .injected(["X-A-Key"])), .arm(.idle),
                .readNextRequest,
            ])
    }

    @Test("a reload that removes the tunnel's client ends what the tunnel may do: the next request inside is 407, nothing sent")
    func tunnelClientRemovedByReload() {
        var p = Playbook(Configs.clients)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("CONNECT a.example:443 HTTP/1.1", "Proxy-Authorization: Bearer let-me-in"),
            [.cancelTimer, .writeExactly(established), .startClientTLS(a), .arm(.clientHead)])
        p.on(.clientTLSEstablished, [.emit(.tunnel(.intercept), .clientID("agent")), .arm(.clientHead)])
        // The reloaded config: `agent` is gone, scope a now serves every client.
        let reloaded = Fixture(
            Configs.scopes + """
                clients:
                  - { name: ci, uid: 1001 }
                tls: { intercept: ["a.example"] }

                """)
        let request = requestHead(["GET / HTTP/1.1", "Host: a.example"])
        let actions = p.feed(.requestHead(request, headBytes: 40, Arrival(now: p.now, scope: reloaded.scope)))
        #expect(!actions.contains { if case .connect = $0 { true } else { false } }, "nothing may be sent for a removed client")
        let written = actions.compactMap { if case .writeToClient(let bytes) = $0 { String(decoding: bytes, as: UTF8.self) } else { nil } }
        #expect(written.first?.hasPrefix("HTTP/1.1 407 ") == true, "\(written)")
        let records = actions.compactMap { if case .emit(let record) = $0 { record } else { nil } }
        #expect(records.first?.failure?.reason?.contains("removed by a reload") == true)
    }

    @Test("two Proxy-Authorization fields are refused (400) like two Hosts, whichever comes first")
    func twoProxyAuthorizations() {
        for order in [["Bearer let-me-in", "Bearer wrong"], ["Bearer wrong", "Bearer let-me-in"]] {
            var p = Playbook(Configs.clients)
            p.start([.arm(.clientHead)])
            let actions = p.feed(
                p.head(
                    "GET http://plain.example/ HTTP/1.1", "Host: plain.example",
                    "Proxy-Authorization: \(order[0])", "Proxy-Authorization: \(order[1])"))
            #expect(!actions.contains { if case .connect = $0 { true } else { false } })
            let written = actions.compactMap { if case .writeToClient(let bytes) = $0 { String(decoding: bytes, as: UTF8.self) } else { nil } }
            #expect(written.first?.hasPrefix("HTTP/1.1 400 ") == true, "\(written)")
        }
    }

    @Test("a client the covering scope does not serve: nothing injected, its own credentials stripped, the reason recorded")
    func notServed() {
        let facts = ConnectionFacts(peer: "127.0.0.1:50000", peerIP: "127.0.0.1", owner: .uid(1001))
        var p = Playbook(Configs.clients, facts: facts)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("GET https://a.example/ HTTP/1.1", "Host: a.example", clientCookie, clientAuthorization),
            [.cancelTimer, .arm(.connect), .connect(hop(1), a, .tls, reusePooled: true)])
        p.on(
            .upstreamConnected(hop(1), reused: true),
            [
                .send(hop(1), startingWith: "GET / HTTP/1.1\r\n", excluding: ["A-INJECTED", "CLIENT-COOKIE-CANARY", "CLIENT-AUTH-CANARY"]),
                .arm(.responseHead),
            ])
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 0")),
            [.write(startingWith: "HTTP/1.1 200 OK\r\n"), .relay(hop(1), .contentLength(0), .contentLength(0)), .arm(.stall)])
        let actions = p.feed(.responseBody(hop(1), .complete(payload: 0, consumed: 0, captured: nil, observed: nil)))
        let records = actions.compactMap { if case .emit(let record) = $0 { record } else { nil } }
        #expect(records.count == 1)
        #expect(records.first?.clientID == "ci")
        #expect(records.first?.scopes == [])
        #expect(records.first?.injected == [])
        #expect(Set(records.first?.stripped ?? []) == ["Cookie", "Authorization"])
        #expect(records.first?.skipped == [SkippedInjection(scope: "a", why: .clientNotServed)])
    }

    @Test("rate: the third request of a burst of 2/s is 429 with Retry-After, then one is allowed again after half a second")
    func rateLimited() {
        let fixture = Configs.clients
        func request(at now: UInt64) -> [ConnectionAction] {
            var p = Playbook(fixture)
            p.now = now
            p.start([.arm(.clientHead)])
            return p.feed(p.head("GET http://plain.example/ HTTP/1.1", "Host: plain.example", "Proxy-Authorization: Bearer let-me-in"))
        }
        func refusal(_ actions: [ConnectionAction]) -> String? {
            for action in actions { if case .writeToClient(let bytes) = action { return String(decoding: bytes, as: UTF8.self) } }
            return nil
        }
        #expect(refusal(request(at: 1_000_000)) == nil)
        #expect(refusal(request(at: 1_000_000)) == nil)
        let third = refusal(request(at: 1_000_000)) ?? ""
        #expect(third.hasPrefix("HTTP/1.1 429 Too Many Requests\r\n") && third.contains("Retry-After: 1\r\n"))
        #expect(refusal(request(at: 1_500_000)) == nil)
        #expect(refusal(request(at: 1_500_000))?.hasPrefix("HTTP/1.1 429") == true)
    }
}
