import Foundation
import TestSupport
import Testing

// Trying to reach a denied destination anyway (docs/egress.md): other spellings of a denied
// address, of a denied name, CONNECT authorities, a pooled connection opened for a client with
// laxer rules, and what a refusal tells the client. The property every row checks is at the
// socket: the denied listener never accepts a connection.

@Suite("Egress attacks: no spelling, tunnel, redirect or pooled connection reaches a denied destination", .serialized)
struct EgressAttackTests {
    /// Spellings of 127.0.0.3 in a request URL: IPv4-mapped, NAT64 (well-known and local-use),
    /// 6to4, trailing dot, uppercase hex, the inet_aton forms (decimal, hex, octal, short), and
    /// userinfo that names an allowed host before the real one.
    static func spellings(port: UInt16) -> [String] {
        [
            "[::ffff:127.0.0.3]:\(port)", "[::FFFF:7F00:3]:\(port)", "[64:ff9b::7f00:3]:\(port)", "[64:ff9b:1::7f00:3]:\(port)",
            "[2002:7f00:3::]:\(port)", "127.0.0.3.:\(port)", "2130706435:\(port)", "0x7f.0.0.3:\(port)", "0x7F000003:\(port)",
            "0177.0.0.3:\(port)", "127.3:\(port)", "127.000.000.003:\(port)", "127.0.0.2:\(port)@127.0.0.3:\(port)",
            "127.0.0.%33:\(port)", "%31%32%37.0.0.3:\(port)", "127.0.0.3:0\(port)", "[::127.0.0.3]:\(port)", "[::ffff:127.0.0.3%25lo]:\(port)",
        ]
    }

    @Test("deny_ips: no spelling of a denied IPv4 address in the URL reaches it; the IPv6 forms that embed it are 403 by that rule")
    func deniedAddressSpellings() throws {
        let denied = try Egress.canary("127.0.0.3")
        defer { denied.stop() }
        let proxy = try Egress.proxy { _ in "egress: { deny_ips: [127.0.0.3/32] }" }
        defer { proxy.process.terminate() }
        for authority in Self.spellings(port: denied.port) {
            let response = try Egress.get(proxy.port, "http://\(authority)/x", host: authority)
            #expect(response?.status != 200, "\(authority) reached the denied address")
            // The forms that carry an IPv4 address to the IPv4 network (docs/egress.md); the
            // deprecated IPv4-compatible `::a.b.c.d` has no route on Linux and a zone id is refused.
            let embedding = ["[::ffff:", "[::FFFF:", "[64:", "[2002:"].contains { authority.hasPrefix($0) }
            if embedding && !authority.contains("%") {
                #expect(Egress.json(response)["rule"] as? String == "deny_ips: 127.0.0.3/32", "\(authority): \(response?.bodyText ?? "")")
            }
        }
        #expect(denied.acceptedConnections == 0)
    }

    @Test("default deny: no spelling of an unlisted address, nor a look-alike name, gets past the name rules")
    func deniedNameSpellings() throws {
        let denied = try Egress.canary("127.0.0.3")
        defer { denied.stop() }
        let proxy = try Egress.proxy { _ in #"egress: { default: deny, allow: ["http://127.0.0.2:*", "http://localhost:*"] }"# }
        defer { proxy.process.terminate() }
        let port = denied.port
        let others = [
            "LOCALHOST.:\(port)@127.0.0.3:\(port)", "localhost.127.0.0.3:\(port)", "127.0.0.2.nip.io:\(port)", "xn--lcalhost-:\(port)",
            "l\u{2170}calhost:\(port)",
        ]
        for authority in Self.spellings(port: port) + others {
            let response = try Egress.get(proxy.port, "http://\(authority)/x", host: authority)
            #expect(response?.status != 200, "\(authority) got past the name rules")
        }
        #expect(denied.acceptedConnections == 0)
    }

    @Test("Host naming a denied destination does not redirect an allowed absolute-form request, and origin-form reaches nothing")
    func hostFieldCannotSteer() throws {
        let allowed = try Egress.canary("127.0.0.2"), denied = try Egress.canary("127.0.0.3")
        defer { [allowed, denied].forEach { $0.stop() } }
        let proxy = try Egress.proxy { _ in #"egress: { default: deny, allow: ["http://127.0.0.2:*"] }"# }
        defer { proxy.process.terminate() }
        _ = try Egress.get(proxy.port, "\(allowed.url)/abs", host: denied.authority)
        _ = try Egress.send(proxy.port, "GET /origin-form HTTP/1.1\r\nHost: \(denied.authority)\r\n\r\n")
        #expect(allowed.requests.map(\.target) == ["/abs"], "the absolute-form target decides where a request goes")
        #expect(denied.acceptedConnections == 0)
    }

    @Test("CONNECT with other spellings of a denied address, userinfo or a trailing dot is refused, and nothing is connected")
    func connectAuthorities() throws {
        let denied = try Egress.canary("127.0.0.3")
        defer { denied.stop() }
        let proxy = try Egress.proxy { _ in "tls: { tunnel: allow }\negress: { deny_ips: [127.0.0.3/32] }" }
        defer { proxy.process.terminate() }
        let port = denied.port
        for authority in Self.spellings(port: port) + ["user@127.0.0.3:\(port)", "127.0.0.3:\(port)/", "127.0.0.3:0\(port)"] {
            let response = try Egress.send(proxy.port, "CONNECT \(authority) HTTP/1.1\r\nHost: \(authority)\r\n\r\n")
            #expect(response?.status != 200, "CONNECT \(authority) opened a tunnel")
        }
        #expect(denied.acceptedConnections == 0)
    }

    @Test(
        "0.0.0.0 and :: are connected to as this machine's loopback: a deny_ips CIDR on 127.0.0.1 denies them too (request, CONNECT, redirect)"
    )
    func unspecifiedAddressIsLoopback() throws {
        let denied = try Egress.canary("127.0.0.1")
        defer { denied.stop() }
        let redirect = try Wire.scripted(host: "127.0.0.2") { _ in
            Array("HTTP/1.1 302 Found\r\nLocation: http://0.0.0.0:\(denied.port)/landing\r\nContent-Length: 0\r\n\r\n".utf8)
        }
        defer { redirect.stop() }
        let proxy = try Egress.proxy { _ in "tls: { tunnel: allow }\nredirects: { cross_origin: follow }\negress: { deny_ips: [127.0.0.1/32] }" }
        defer { proxy.process.terminate() }
        let port = denied.port
        for authority in ["0.0.0.0:\(port)", "[::ffff:0.0.0.0]:\(port)", "[::]:\(port)"] {
            let response = try Egress.get(proxy.port, "http://\(authority)/x", host: authority)
            #expect(response?.status != 200, "\(authority) reached 127.0.0.1")
            let tunnel = try Egress.send(proxy.port, "CONNECT \(authority) HTTP/1.1\r\nHost: \(authority)\r\n\r\n")
            #expect(tunnel?.status != 200, "CONNECT \(authority) reached 127.0.0.1")
        }
        let followed = try Egress.get(proxy.port, "\(redirect.url)/go")
        #expect(followed?.status == 403, "the followed hop to 0.0.0.0 is refused")
        #expect(Egress.json(followed)["rule"] as? String == "deny_ips: 127.0.0.1/32")
        #expect(denied.acceptedConnections == 0)
    }

    @Test("a pooled connection opened for a client with laxer rules is not reused by a client whose deny_ips refuse its address")
    func pooledConnectionOfLaxerClient() throws {
        let origin = try Egress.canary("127.0.0.3")
        defer { origin.stop() }
        // One thread: both clients' requests are served by the same worker, whose pool holds the connection.
        let (proxy, laxKey, strictKey) = try Self.laxAndStrictClients(strictDenying: "127.0.0.3/32")
        defer { proxy.process.terminate() }
        #expect(try Egress.get(proxy.port, "\(origin.url)/lax", [("Proxy-Authorization", "Bearer \(laxKey)")])?.status == 200)
        let strict = try Egress.get(proxy.port, "\(origin.url)/strict", [("Proxy-Authorization", "Bearer \(strictKey)")])
        #expect(strict?.status == 403)
        #expect(Egress.json(strict)["rule"] as? String == "deny_ips: 127.0.0.3/32")
        #expect(origin.requests.map(\.target) == ["/lax"], "the strict client's request never rode the lax client's connection")
        // Control: the pooled connection is still there for the lax client.
        #expect(try Egress.get(proxy.port, "\(origin.url)/lax2", [("Proxy-Authorization", "Bearer \(laxKey)")])?.status == 200)
        #expect(origin.acceptedConnections == 1)
    }

    @Test("a shared HTTP/2 connection opened for a client with laxer rules carries no stream of a client whose deny_ips refuse its address")
    func sharedHTTP2ConnectionOfLaxerClient() throws {
        let origin = try GRPCOrigin()  // h2c, 127.0.0.1
        defer { origin.stop() }
        // One thread: both clients' requests are served by the same worker, whose pool holds the connection.
        let (proxy, laxKey, strictKey) = try Self.laxAndStrictClients(strictDenying: "127.0.0.1/32")
        defer { proxy.process.terminate() }
        func call(_ key: String, _ caller: String) -> [String: Any] {
            [
                "method": "POST", "scheme": "http", "authority": "127.0.0.1:\(origin.port)", "path": "/svc/Unary",
                "headers": [
                    ["content-type", "application/grpc"], ["te", "trailers"], ["proxy-authorization", "Bearer \(key)"], ["x-caller", caller],
                ],
                "body": "\u{0}\u{0}\u{0}\u{0}\u{5}hello",
            ]
        }
        // The lax client's call opens the HTTP/2 connection, which stays open for other streams.
        let first = Wire.streams(try Wire.h2Client(["proxy_port": Int(proxy.port), "streams": [call(laxKey, "lax")]]))
        #expect(first.first?["status"] as? Int == 200, "\(first)")
        // Then both clients on one client connection: the strict stream neither rides the open
        // connection nor waits for another's connect; the lax one still does.
        let both = Wire.streams(
            try Wire.h2Client(["proxy_port": Int(proxy.port), "streams": [call(strictKey, "strict"), call(laxKey, "lax2")]]))
        try #require(both.count == 2)
        #expect(both[0]["status"] as? Int == 403, "\(both[0])")
        #expect((both[0]["body"] as? String)?.contains("deny_ips: 127.0.0.1/32") == true)
        #expect(both[1]["status"] as? Int == 200)
        #expect(origin.metadata("x-caller") == ["lax", "lax2"], "only the lax client's calls reached the origin")
        #expect(try proxy.metrics().contains("scopeproxy_upstream_connections 1"), "control: one upstream connection carried both lax calls")
    }

    @Test("mode: report leaks no unreported connection: a would-be denial that rides a pooled connection is logged report_deny too")
    func reportModeOnPooledReuse() throws {
        let origin = try Egress.canary("127.0.0.3")
        defer { origin.stop() }
        let proxy = try Egress.proxy(threads: 1) { _ in "egress: { mode: report, deny_ips: [127.0.0.3/32] }" }
        defer { proxy.process.terminate() }
        #expect(try Egress.get(proxy.port, "\(origin.url)/one")?.status == 200)
        #expect(try Egress.get(proxy.port, "\(origin.url)/two")?.status == 200)
        #expect(origin.acceptedConnections == 1, "control: the second request rode the pooled connection")
        let notes = Egress.lines(proxy, 2).map { $0["egress"] as? [String: Any] }
        try #require(notes.count == 2)
        for note in notes {
            #expect(
                note?["decision"] as? String == "report_deny" && note?["rule"] as? String == "deny_ips: 127.0.0.3/32", "\(String(describing: note))")
        }
    }

    @Test(
        "a secret's value used as a host name label is refused by name and never written to the log, not even lowercased",
        arguments: ["abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"])
    func secretAsHostNameNotLogged(_ letters: String) throws {
        let origin = try Egress.canary("127.0.0.2")
        defer { origin.stop() }
        // Letters only, so a host name label keeps it whole; host names are lowercased, so an
        // upper-case value would reach the log as a lower-case spelling of itself.
        let token = String((0..<30).map { _ in letters.randomElement()! })
        let proxy = try Egress.proxy(environment: ["TOKEN": token]) { _ in
            """
            secrets: { token: { env: TOKEN } }
            scopes: [{ name: api, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${token}" } }]
            egress: { default: deny }
            """
        }
        defer { proxy.process.terminate() }
        for url in ["http://\(token).x.test:8080/a", "http://x.test:8080/\(token)"] {
            let response = try Egress.get(proxy.port, url)
            #expect(response?.status == 403, "\(url)")
        }
        #expect(Egress.lines(proxy, 2).count == 2)
        let log = (try? String(contentsOfFile: proxy.logPath, encoding: .utf8)) ?? ""
        #expect(!log.lowercased().contains(token.lowercased()), "the secret's value is in the log: \(log)")
        #expect(!proxy.process.standardError.lowercased().contains(token.lowercased()))
    }

    @Test("a refusal by deny_ips does not tell the client what the name resolved to (the log does)")
    func refusalDoesNotRevealResolvedAddress() throws {
        let denied = try Egress.canary("127.0.0.3")
        defer { denied.stop() }
        // localhost resolves to 127.0.0.1 and ::1: both denied, so the answer is the refusal.
        let proxy = try Egress.proxy { _ in #"egress: { deny_ips: [127.0.0.0/8, "::1/128"] }"# }
        defer { proxy.process.terminate() }
        let response = try Egress.get(proxy.port, "http://localhost:\(denied.port)/x")
        #expect(response?.status == 403)
        let answer = Egress.json(response)
        #expect(["deny_ips: 127.0.0.0/8", "deny_ips: ::1/128"].contains(answer["rule"] as? String ?? ""), "\(answer)")
        #expect(answer["address"] == nil, "the answer names no resolved address")
        let body = response?.bodyText ?? ""
        #expect(!body.contains("127.0.0.1") && !body.contains("\"::1\"") && !body.contains("[::1]"), "no resolved address in the answer: \(body)")
        let note = try #require(Egress.lines(proxy, 1).first?["egress"] as? [String: Any])
        #expect((note["address"] as? String)?.hasPrefix("127.0.0.1") == true || (note["address"] as? String)?.hasPrefix("[::1]") == true)
    }

    @Test("default deny answers a name that does not exist exactly as one that does: the rules decide before any lookup")
    func refusalByNameIsNoExistenceOracle() throws {
        let proxy = try Egress.proxy { _ in "egress: { default: deny }" }
        defer { proxy.process.terminate() }
        func answer(_ host: String) throws -> [String: String] {
            let response = try Egress.get(proxy.port, "http://\(host):8080/x")
            var fields = (Egress.json(response) as? [String: Any])?.compactMapValues { $0 as? String } ?? [:]
            fields["id"] = nil
            for (key, value) in fields { fields[key] = value.replacingOccurrences(of: host, with: "HOST") }
            fields["status"] = response?.status.map(String.init)
            return fields
        }
        let existing = try answer("localhost")
        #expect(existing["status"] == "403")
        #expect(try answer("no-such-name.invalid") == existing)
    }

    /// Two Bearer clients on one worker (one thread: one pool): `lax` under the global rules,
    /// `strict` whose `deny_ips` refuses `cidr`.
    static func laxAndStrictClients(strictDenying cidr: String) throws -> (ConfiguredProxy, laxKey: String, strictKey: String) {
        let laxKey = Wire.canary("lax"), strictKey = Wire.canary("strict")
        let proxy = try Egress.proxy(environment: ["LAX": laxKey, "STRICT": strictKey], threads: 1) { _ in
            """
            secrets: { lax: { env: LAX }, strict: { env: STRICT } }
            clients:
              - { name: lax, auth: { bearer: lax } }
              - { name: strict, auth: { bearer: strict }, egress: { default: allow, deny_ips: [\(cidr)] } }
            """
        }
        return (proxy, laxKey, strictKey)
    }
}
