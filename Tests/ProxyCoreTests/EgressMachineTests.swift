import HTTP1Codec
import ScopePolicy
import Testing

@testable import ProxyCore

// The egress policy's name check as event sequences (docs/egress.md): every hop is checked before
// anything connects: the client's request, a CONNECT, a followed redirect, a request inside an
// intercepted tunnel. The address check (deny_ips) happens at connect: EgressEngineTests.

private let denyAll =
    Configs.scopes + """
        egress:
          default: deny
          allow: ["https://*.allowed.example", "plain.example:80"]
        clients:
          - name: agent
            auth: { bearer: proxy_password }
            egress: { default: deny, allow: ["https://only-agent.example"] }
          - name: anonymous

        """

@Suite("Machine: the egress policy checks every hop by name before anything connects")
struct EgressMachineTests {
    @Test("a request to a destination default deny does not list: 403 egress_denied with what an agent acts on; nothing connects")
    func deniedRequest() {
        var p = Playbook(Fixture(denyAll))
        p.start([.arm(.clientHead)])
        let actions = p.on(
            p.head("GET https://unlisted.example/x HTTP/1.1", "Host: unlisted.example"),
            [
                .cancelTimer,
                .write(
                    startingWith: "HTTP/1.1 403 Forbidden\r\n",
                    containing: [
                        "\"error\":\"egress_denied\"", "\"destination\":\"unlisted.example:443\"", "\"rule\":\"default deny\"",
                        "\"client\":\"anonymous\"", "add \\\"https://unlisted.example\\\" to egress.allow",
                    ]),
                .emit(.status(403), .origin(unlisted)),
                .close(.afterFlush),
            ])
        #expect(p.connected.isEmpty, "\(actions)")
    }

    @Test(
        "allowed by glob, by host:port, and a scope's origin under default deny: each connects",
        arguments: [
            ("GET https://api.allowed.example/ HTTP/1.1", "api.allowed.example"),
            ("GET https://a.b.allowed.example/ HTTP/1.1", "a.b.allowed.example"),
            ("GET http://plain.example/ HTTP/1.1", "plain.example"),
            ("GET https://a.example/ HTTP/1.1", "a.example"),
        ])
    func allowed(_ line: String, _ host: String) {
        var p = Playbook(Fixture(denyAll))
        p.start([.arm(.clientHead)])
        p.on(
            p.head(line, "Host: \(host)"),
            [
                .cancelTimer, .arm(.connect),
                .connecting(hop(1), p.targetOrigin(line), p.targetOrigin(line).scheme == .https ? .tls : .plain, reusePooled: true),
            ])
    }

    @Test("a client's own egress replaces the global allow list: the same destination is denied for it, naming it and its key")
    func clientOwnRules() {
        var p = Playbook(Fixture(denyAll))
        p.start([.arm(.clientHead)])
        p.on(
            p.head("GET https://api.allowed.example/ HTTP/1.1", "Host: api.allowed.example", "Proxy-Authorization: Bearer let-me-in"),
            [
                .cancelTimer,
                .write(
                    startingWith: "HTTP/1.1 403 Forbidden\r\n",
                    containing: ["\"client\":\"agent\"", "egress.allow of client 'agent'", "\"rule\":\"default deny\""]),
                .emit(.status(403)), .close(.afterFlush),
            ])
        var q = Playbook(Fixture(denyAll))
        q.start([.arm(.clientHead)])
        q.on(
            q.head("GET https://only-agent.example/ HTTP/1.1", "Host: only-agent.example", "Proxy-Authorization: Bearer let-me-in"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), origin("https://only-agent.example"), .tls, reusePooled: true)])
    }

    @Test("CONNECT to a denied destination: 403 egress_denied, no tunnel; to an allowed one: the tunnel connects")
    func connect() {
        var p = Playbook(Fixture(denyAll + "tls: { tunnel: allow }\n"))
        p.start([.arm(.clientHead)])
        p.on(
            p.head("CONNECT unlisted.example:443 HTTP/1.1", "Host: unlisted.example:443"),
            [
                .cancelTimer,
                .write(startingWith: "HTTP/1.1 403 Forbidden\r\n", containing: ["egress_denied", "unlisted.example:443"]),
                .emit(.status(403)), .close(.afterFlush),
            ])
        var q = Playbook(Fixture(denyAll + "tls: { tunnel: allow }\n"))
        q.start([.arm(.clientHead)])
        q.on(
            q.head("CONNECT x.allowed.example:443 HTTP/1.1", "Host: x.allowed.example:443"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), origin("https://x.allowed.example"), .raw, reusePooled: false)])
    }

    @Test("a followed redirect to a denied destination is answered 403 egress_denied; the next hop never connects")
    func followedRedirect() {
        var p = Playbook(Fixture(denyAll + Configs.redirects("follow")))
        p.sent(["GET https://a.example/start HTTP/1.1", "Host: a.example"], to: a)
        let actions = p.on(
            .responseHead(hop(1), response("HTTP/1.1 302 Found", "Location: https://unlisted.example/next", "Content-Length: 0")),
            [
                .release(hop(1), reuse: false), .emit(.status(302), .redirect(.follow)), .cancelTimer,
                .write(startingWith: "HTTP/1.1 403 Forbidden\r\n", containing: ["egress_denied", "unlisted.example:443"], excluding: ["/next"]),
                .emit(
                    .status(403),
                    .field(.egress, .egress(EgressNote(decision: .deny, rule: "default deny", destination: "unlisted.example:443", address: nil)))),
                .close(.afterFlush),
            ])
        #expect(p.connected == [hop(1)], "\(actions)")
    }

    @Test("inside an intercepted tunnel every request is a hop of its own: checked again against the current rules")
    func interceptedRequest() {
        // The tunnel's CONNECT was admitted earlier; this request is checked on its own.
        var p = Playbook(
            Fixture(denyAll + "tls: { intercept: [\"unlisted.example\"] }\n"), mode: .intercepted(unlisted, client: ClientIdentity(name: "anonymous"))
        )
        p.start([.arm(.clientHead)])
        p.on(
            p.head("GET /inside HTTP/1.1", "Host: unlisted.example"),
            [
                .cancelTimer, .write(startingWith: "HTTP/1.1 403 Forbidden\r\n", containing: ["egress_denied"]), .emit(.status(403)),
                .close(.afterFlush),
            ])
    }

    @Test("mode report: the denial is logged as report_deny with its rule, and the request goes on")
    func reportMode() {
        var p = Playbook(Fixture(Configs.scopes + "egress: { default: deny, mode: report }\n"))
        p.start([.arm(.clientHead)])
        p.on(
            p.head("GET https://unlisted.example/ HTTP/1.1", "Host: unlisted.example"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), unlisted, .tls, reusePooled: true)])
        p.on(
            .upstreamConnected(hop(1), reused: false, peer: UpstreamPeer(address: "192.0.2.7:443")),
            [.send(hop(1), startingWith: "GET "), .arm(.responseHead)])
        p.feed(.responseHead(hop(1), response("HTTP/1.1 204 No Content")))
        p.feed(.responseBody(hop(1), .complete(payload: 0, consumed: 0, captured: nil, observed: nil)))
        let line = p.emitted.last
        #expect(line?.egressNote == EgressNote(decision: .reportDeny, rule: "default deny", destination: "unlisted.example:443", address: nil))
        #expect(line?.upstreamAddress == "192.0.2.7:443")
        #expect(line?.status == 204)
    }

    @Test("a deny_ips rule in report mode, reported by the connect: the line names the address")
    func reportedAddress() {
        var q = Playbook(Fixture(Configs.scopes + "egress: { mode: report }\n"))
        q.start([.arm(.clientHead)])
        q.on(
            q.head("GET https://unscoped.example/ HTTP/1.1", "Host: unscoped.example"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), unscoped, .tls, reusePooled: true)])
        q.on(
            .upstreamConnected(hop(1), reused: false, peer: UpstreamPeer(address: "169.254.169.254:443", reported: "deny_ips: metadata")),
            [.send(hop(1), startingWith: "GET "), .arm(.responseHead)])
        q.feed(.responseHead(hop(1), response("HTTP/1.1 204 No Content")))
        q.feed(.responseBody(hop(1), .complete(payload: 0, consumed: 0, captured: nil, observed: nil)))
        #expect(
            q.emitted.last?.egressNote
                == EgressNote(decision: .reportDeny, rule: "deny_ips: metadata", destination: "unscoped.example:443", address: "169.254.169.254:443"))
    }

    @Test("a route's upstream is configured, not chosen: neither default deny nor deny_ips applies to it; a redirect away from it does")
    func routeExempt() {
        let upstream = origin("http://10.0.0.5:8080")
        let fixture = Fixture(Configs.scopes + "egress: { default: deny, deny_ips: [private] }\n" + Configs.redirects("follow"))
        var p = Playbook(fixture, mode: .route(upstream: upstream, publicOrigin: origin("http://127.0.0.1:9000")))
        p.start([.arm(.clientHead)])
        p.on(
            p.head("GET /x HTTP/1.1", "Host: 127.0.0.1:9000"), [.cancelTimer, .arm(.connect), .connect(hop(1), upstream, .plain, reusePooled: true)])
        guard case .connect(_, _, _, _, let egress)? = p.actions.last else {
            Issue.record("no connect")
            return
        }
        #expect(egress.rules.denyIPs.isEmpty && egress.rules.defaultAction == .allow)
        p.on(.upstreamConnected(hop(1), reused: false), [.send(hop(1), startingWith: "GET "), .arm(.responseHead)])
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 302 Found", "Location: https://unlisted.example/", "Content-Length: 0")),
            [
                .release(hop(1), reuse: false), .emit(.status(302), .redirect(.follow)), .cancelTimer,
                .write(startingWith: "HTTP/1.1 403 Forbidden\r\n", containing: ["egress_denied", "unlisted.example:443"]),
                .emit(.status(403)), .close(.afterFlush),
            ])
    }

    @Test("without an egress key nothing is checked by name: today's behaviour, every destination connects")
    func standardPolicy() {
        var p = Playbook(Fixture(Configs.scopes))
        p.start([.arm(.clientHead)])
        p.on(
            p.head("GET https://unlisted.example/ HTTP/1.1", "Host: unlisted.example"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), unlisted, .tls, reusePooled: true)])
        guard case .connect(_, _, _, _, let egress)? = p.actions.last else {
            Issue.record("no connect")
            return
        }
        #expect(egress.rules.denyIPs == .standard, "link_local and metadata are still refused at connect")
    }
}

private let unlisted = origin("https://unlisted.example")

extension Playbook {
    func targetOrigin(_ line: String) -> Origin {
        let target = line.split(separator: " ")[1]
        let end = target.dropFirst(8).firstIndex(of: "/") ?? target.endIndex
        return origin(String(target[..<end]))
    }
}
