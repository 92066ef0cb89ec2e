import Foundation
import TestSupport
import Testing

// Per-client identity (`clients:`) through the built binary: canary tokens show which client's
// credential arrived where, and that nothing arrived where it must not.

private func canary(_ label: String) -> String { "CANARY\(label)\(String(UInt64.random(in: 0...UInt64.max), radix: 16))" }

private func basicAuth(_ user: String, _ password: String) -> String {
    "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
}

/// One request on a fresh connection; returns the response.
private func send(_ port: UInt16, _ url: String, host: String, _ headers: [(String, String)] = []) throws -> TestResponse? {
    let socket = try TestSocket.connect(port: port)
    var text = "GET \(url) HTTP/1.1\r\nHost: \(host)\r\n"
    for (name, value) in headers { text += "\(name): \(value)\r\n" }
    try socket.send(text + "\r\n")
    return try HTTPReader(socket).readResponse()
}

/// Every canary that appears anywhere in what an origin received.
private func arrived(at origin: FixtureOrigin, among all: [String]) -> [Set<String>] {
    origin.requests.map { request in
        let text = request.rawHeadText + String(decoding: request.body, as: UTF8.self)
        return Set(all.filter { text.contains($0) })
    }
}

/// Runs a program, optionally through `setpriv` as another user; returns (status, stdout).
private func run(_ arguments: [String]) throws -> (Int32, String) {
    let outcome = try runProgram(arguments)
    return (outcome.status, outcome.body)
}

private func logLines(_ path: String) -> [String] {
    ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
}

/// Waits (bounded) until the proxy's stderr has `count` occurrences of `text` (a SIGHUP reload).
private func waitForStderr(_ proxy: ProxyProcess, _ text: String, count: Int) -> Bool {
    for _ in 0..<100 {
        if proxy.standardError.components(separatedBy: text).count - 1 >= count { return true }
        usleep(50_000)
    }
    return false
}

@Suite("Clients: per-client identity through the binary", .serialized)
struct ClientIdentityTests {
    @Test(
        "two clients through one proxy to one origin get different tokens; a client the scopes do not serve gets nothing and its own credentials are stripped; the log names each client and says why"
    )
    func twoClientsOneOrigin() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let mePassword = canary("mepw"), agentKey = canary("agentkey"), meToken = canary("metok"), agentToken = canary("agenttok")
        let meCookie = canary("mecookie"), agentCookie = canary("agentcookie"), guestKey = canary("guestkey"), guestAuth = canary("guestauth")
        let configured = try ConfiguredProxy(environment: [
            "ME_PW": mePassword, "AGENT_KEY": agentKey, "ME_TOKEN": meToken,
            "AGENT_TOKEN": agentToken,
        ]) { log in
            """
            secrets:
              me_pw: { env: ME_PW }
              agent_key: { env: AGENT_KEY }
              me_token: { env: ME_TOKEN }
              agent_token: { env: AGENT_TOKEN }
            clients:
              - { name: me, auth: { basic: { user: me, password: me_pw } } }
              - { name: agent, auth: { bearer: agent_key } }
              - { name: guest, source: ["127.0.0.0/8"] }
            scopes:
              - { name: for-me, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${me_token}" }, pass: [Cookie], clients: [me] }
              - { name: for-agent, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${agent_token}" }, clients: [agent] }
            log: { output: \(log) }
            """
        }
        let proxy = configured.process
        defer { proxy.terminate() }
        let url = origin.url + "/v1/items"
        #expect(
            try send(
                proxy.port, url, host: origin.authority,
                [("Proxy-Authorization", basicAuth("me", mePassword)), ("Cookie", "sid=\(meCookie)")])?.status == 200)
        #expect(
            try send(
                proxy.port, url, host: origin.authority,
                [("Proxy-Authorization", "Bearer \(agentKey)"), ("Cookie", "sid=\(agentCookie)")])?.status == 200)
        #expect(
            try send(
                proxy.port, url, host: origin.authority,
                [("Authorization", "Bearer \(guestAuth)"), ("X-API-Key", guestKey)])?.status == 200)
        let metrics = try configured.metrics()
        #expect(proxy.terminate() == 0)

        let all = [mePassword, agentKey, meToken, agentToken, meCookie, agentCookie, guestKey, guestAuth]
        let seen = arrived(at: origin, among: all)
        #expect(
            seen == [[meToken, meCookie], [agentToken], []],
            "me: its token and its passed cookie; agent: its own token, its cookie stripped (for-me does not serve it); guest: nothing, its own credentials stripped"
        )
        #expect(origin.requests.allSatisfy { $0.header("proxy-authorization") == nil })

        let lines = logLines(configured.logPath)
        #expect(lines.count == 3)
        guard lines.count == 3 else { return }
        #expect(
            lines[0].contains(#""client_id":"me""#) && lines[0].contains(#""scope":"for-me""#)
                && lines[0].contains(#""reason":"for-agent: client_not_served""#))
        #expect(
            lines[1].contains(#""client_id":"agent""#) && lines[1].contains(#""scope":"for-agent""#)
                && lines[1].contains(#""reason":"for-me: client_not_served""#))
        #expect(
            lines[2].contains(#""client_id":"guest""#) && lines[2].contains(#""scope":null"#)
                && lines[2].contains(#""reason":"for-me: client_not_served; for-agent: client_not_served""#))
        #expect(lines.allSatisfy { $0.contains(#""client":"127.0.0.1:"#) }, "client keeps the address")
        #expect(metrics.contains(#"scopeproxy_requests_total{status_class="2xx",scope="for-me",client="me"} 1"#))
        #expect(metrics.contains(#"scopeproxy_requests_total{status_class="2xx",scope="none",client="guest"} 1"#))
        let banner = proxy.standardError
        #expect(banner.contains("client me: Basic user me, password from secret 'me_pw'"))
        #expect(banner.contains("client agent: Bearer token from secret 'agent_key'"))
        #expect(banner.contains("client guest: address in 127.0.0.0/8"))
        #expect(banner.contains("only for clients: me"))
        let everything = lines.joined() + metrics + proxy.standardError
        #expect(all.allSatisfy { !everything.contains($0) }, "no secret or client credential in the log, /metrics or stderr")
    }

    @Test(
        "missing or wrong credentials: 407 with Proxy-Authenticate, nothing sent; a wrong Proxy-Authorization never falls back to source or anonymous"
    )
    func refusals() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let mePassword = canary("mepw"), agentKey = canary("agentkey"), token = canary("tok")
        let environment = ["ME_PW": mePassword, "AGENT_KEY": agentKey, "TOKEN": token]
        let strict = try ConfiguredProxy(environment: environment) { log in
            """
            secrets: { me_pw: { env: ME_PW }, agent_key: { env: AGENT_KEY }, token: { env: TOKEN } }
            clients:
              - { name: me, auth: { basic: { user: me, password: me_pw } } }
              - { name: agent, auth: { bearer: agent_key } }
              - { name: lan, source: ["10.0.0.0/8"] }
            scopes: [{ name: api, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${token}" } }]
            log: { output: \(log) }
            """
        }
        defer { strict.process.terminate() }
        let url = origin.url + "/x"
        let missing = try #require(try send(strict.port, url, host: origin.authority))
        #expect(missing.status == 407)
        let challenges = missing.headers.filter { $0.0.lowercased() == "proxy-authenticate" }.map(\.1)
        #expect(challenges == [#"Basic realm="scopeproxy""#, #"Bearer realm="scopeproxy""#])
        #expect(try send(strict.port, url, host: origin.authority, [("Proxy-Authorization", basicAuth("me", "wrong"))])?.status == 407)
        #expect(
            try send(strict.port, url, host: origin.authority, [("Proxy-Authorization", basicAuth("agent", agentKey))])?.status == 407,
            "a Bearer client's token as someone's Basic password is not it")
        #expect(try send(strict.port, url, host: origin.authority, [("Proxy-Authorization", "Basic %%%")])?.status == 407)
        #expect(strict.process.terminate() == 0)
        let lines = logLines(strict.logPath)
        #expect(lines.count == 4)
        guard lines.count == 4 else { return }
        #expect(lines[0].contains(#""status":407"#) && lines[0].contains(#""reason":"client_not_recognised""#) && !lines[0].contains("client_id"))
        #expect(lines[1].contains(#""reason":"proxy_authorization_not_recognised""#))
        #expect(lines[2].contains(#""reason":"proxy_authorization_not_recognised""#))
        #expect(lines[3].contains(#""reason":"proxy_authorization_invalid (bad_base64)""#))
        #expect(!(lines.joined() + strict.process.standardError).contains(agentKey))

        // With a client for this address and an anonymous one, a wrong Proxy-Authorization is still 407.
        let lenient = try ConfiguredProxy(environment: environment) { log in
            """
            secrets: { me_pw: { env: ME_PW }, token: { env: TOKEN } }
            clients:
              - { name: me, auth: { basic: { user: me, password: me_pw } } }
              - { name: local, source: ["127.0.0.0/8", "::1/128"] }
              - { name: anonymous }
            scopes: [{ name: api, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${token}" } }]
            log: { output: \(log) }
            """
        }
        defer { lenient.process.terminate() }
        #expect(try send(lenient.port, url, host: origin.authority, [("Proxy-Authorization", basicAuth("me", "wrong"))])?.status == 407)
        #expect(try send(lenient.port, url, host: origin.authority, [("Proxy-Authorization", "Bearer wrong")])?.status == 407)
        #expect(origin.requests.isEmpty, "nothing of a refused request reached the origin")
        #expect(try send(lenient.port, url, host: origin.authority)?.status == 200, "without Proxy-Authorization the source applies")
        #expect(lenient.process.terminate() == 0)
        #expect(logLines(lenient.logPath).last?.contains(#""client_id":"local""#) == true)
        #expect(arrived(at: origin, among: [token]) == [[token]])
    }

    /// "Put the password in the proxy URL" is Basic: where every `auth` client is Bearer, the 407
    /// and the log say so and show the header to send, and the banner shows it before any request.
    @Test("a password in the proxy URL where clients authenticate with Bearer: the 407 and the log name the scheme and the header; the header works")
    func basicSentToBearerClients() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let agentKey = canary("agentkey"), token = canary("tok")
        let configured = try ConfiguredProxy(environment: ["AGENT_KEY": agentKey, "TOKEN": token]) { log in
            """
            secrets: { agent_key: { env: AGENT_KEY }, token: { env: TOKEN } }
            clients: [{ name: agent, auth: { bearer: agent_key } }]
            scopes: [{ name: api, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${token}" } }]
            log: { output: \(log) }
            """
        }
        defer { configured.process.terminate() }
        let proxy = "127.0.0.1:\(configured.port)"
        let inURL = try curl(["-w", "\n%{http_code}", "-x", "http://any:\(agentKey)@\(proxy)", origin.url + "/x"])
        #expect(inURL.body.hasSuffix("\n407"))
        #expect(inURL.body.contains(#""message":"this proxy's clients authenticate with Bearer: send Proxy-Authorization: Bearer KEY"#))
        let unknownUser = try curl(["-x", "http://nobody:wrong@\(proxy)", origin.url + "/x"])
        // The same answer (but its request id) whatever name and key were sent.
        let message = { (body: String) in body.split(separator: ",").filter { !$0.hasPrefix(#""id""#) }.joined(separator: ",") }
        #expect(message(unknownUser.body) == message(inURL.body.replacingOccurrences(of: "\n407", with: "")))
        let inHeader = try curl([
            "-w", "\n%{http_code}", "--proxy-header", "Proxy-Authorization: Bearer \(agentKey)", "-x", "http://\(proxy)",
            origin.url + "/x",
        ])
        #expect(inHeader.body.hasSuffix("\n200"))
        #expect(configured.process.terminate() == 0)
        let lines = logLines(configured.logPath)
        #expect(lines.count == 3)
        #expect(lines.prefix(2).allSatisfy { $0.contains(#""status":407"#) && $0.contains(#""reason":"proxy_authorization_scheme_not_configured""#) })
        #expect(
            configured.process.standardError.contains(
                "use it (a Bearer client: KEY the value of its token secret, in a header, not the URL): "
                    + "curl --proxy-header 'Proxy-Authorization: Bearer KEY' -x http://\(proxy) URL"))
        #expect(!(lines.joined() + configured.process.standardError + inURL.body).contains(agentKey))
    }

    @Test("identity is established on CONNECT and inherited by every request in the intercepted tunnel")
    func connectIdentityIntoTunnel() throws {
        let pki = try TestPKI()
        let origin = try HTTPSOrigin(certificate: pki.certificate("valid"))
        defer { origin.stop() }
        let mePassword = canary("mepw"), agentKey = canary("agentkey"), meToken = canary("metok"), agentToken = canary("agenttok")
        let configured = try ConfiguredProxy(environment: [
            "ME_PW": mePassword, "AGENT_KEY": agentKey, "ME_TOKEN": meToken,
            "AGENT_TOKEN": agentToken,
        ]) { log in
            let directory = (log as NSString).deletingLastPathComponent
            return """
                secrets: { me_pw: { env: ME_PW }, agent_key: { env: AGENT_KEY }, me_token: { env: ME_TOKEN }, agent_token: { env: AGENT_TOKEN } }
                clients:
                  - { name: me, auth: { basic: { user: me, password: me_pw } } }
                  - { name: agent, auth: { bearer: agent_key } }
                scopes:
                  - { name: for-me, origins: ["https://localhost:\(origin.port)"], inject: { Authorization: "Bearer ${me_token}" }, clients: [me] }
                  - { name: for-agent, origins: ["https://localhost:\(origin.port)"], inject: { Authorization: "Bearer ${agent_token}" }, clients: [agent] }
                tls: { intercept: scoped, ca_dir: \(directory)/ca, upstream_ca: \(pki.caPath) }
                log: { output: \(log) }
                """
        }
        let proxy = configured.process
        defer { proxy.terminate() }
        let ca = (configured.logPath as NSString).deletingLastPathComponent + "/ca/scopeproxy-ca.pem"
        let proxyURL = "http://127.0.0.1:\(proxy.port)"
        let target = "https://localhost:\(origin.port)/v1/items"
        // curl sends Proxy-Authorization on the CONNECT only: the requests inside carry none.
        let (meStatus, meBody) = try run([
            "/usr/bin/curl", "-sS", "--max-time", "10", "--cacert", ca, "-x", proxyURL,
            "--proxy-user", "me:\(mePassword)", target, target,
        ])
        let (agentStatus, agentBody) = try run([
            "/usr/bin/curl", "-sS", "--max-time", "10", "--cacert", ca, "-x", proxyURL,
            "--proxy-header", "Proxy-Authorization: Bearer \(agentKey)", target,
        ])
        let (noneStatus, _) = try run(["/usr/bin/curl", "-sS", "--max-time", "10", "--cacert", ca, "-x", proxyURL, target])
        #expect(meStatus == 0 && agentStatus == 0)
        #expect(noneStatus != 0, "a CONNECT without credentials gets 407 and no tunnel")
        // What the origin received (it echoes the request; the client's copy is scrubbed to stars).
        let received = origin.received.joined(separator: "\n")
        #expect(received.components(separatedBy: "Bearer \(meToken)").count - 1 == 2, "both requests in me's tunnel got me's token")
        #expect(received.components(separatedBy: "Bearer \(agentToken)").count - 1 == 1, "the agent's request got the agent's token")
        #expect(meBody.components(separatedBy: "Bearer " + String(repeating: "*", count: meToken.utf8.count)).count - 1 == 2)
        #expect(!meBody.contains(meToken) && !meBody.contains(agentToken) && !agentBody.contains(agentToken) && !agentBody.contains(meToken))
        #expect(proxy.terminate() == 0)
        let lines = logLines(configured.logPath)
        let inside = lines.filter { $0.contains(#""method":"GET""#) }
        #expect(inside.count == 3)
        #expect(inside.filter { $0.contains(#""client_id":"me""#) }.count == 2)
        #expect(inside.filter { $0.contains(#""client_id":"agent""#) }.count == 1)
        let connects = lines.filter { $0.contains(#""method":"CONNECT""#) }
        #expect(connects.contains { $0.contains(#""status":407"#) && $0.contains("client_not_recognised") })
        #expect(![mePassword, agentKey, meToken, agentToken].contains { (lines.joined() + proxy.standardError).contains($0) })
    }

    @Test("uid: a client running as root and one as nobody (setpriv) get their own tokens from one proxy")
    func uidClients() throws {
        guard getuid() == 0 else {
            print("skipped: the uid test needs root, to run one client as nobody with setpriv")
            return
        }
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv") else {
            print("skipped: /usr/bin/setpriv is missing (util-linux), needed to run a client as nobody")
            return
        }
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let rootToken = canary("roottok"), nobodyToken = canary("nobodytok")
        let configured = try ConfiguredProxy(environment: ["ROOT_TOKEN": rootToken, "NOBODY_TOKEN": nobodyToken]) { log in
            """
            secrets: { root_token: { env: ROOT_TOKEN }, nobody_token: { env: NOBODY_TOKEN } }
            clients:
              - { name: admin, uid: 0 }
              - { name: sandbox, uid: 65534 }
            scopes:
              - { name: for-admin, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${root_token}" }, clients: [admin] }
              - { name: for-sandbox, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${nobody_token}" }, clients: [sandbox] }
            log: { output: \(log) }
            """
        }
        let proxy = configured.process
        defer { proxy.terminate() }
        let proxyURL = "http://127.0.0.1:\(proxy.port)"
        let curl = ["/usr/bin/curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", "-x", proxyURL, origin.url + "/who"]
        let (rootStatus, rootCode) = try run(curl)
        let (nobodyStatus, nobodyCode) = try run(["/usr/bin/setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] + curl)
        // A uid no client has: 407 (no anonymous client).
        let (_, otherCode) = try run(["/usr/bin/setpriv", "--reuid=12345", "--regid=12345", "--clear-groups"] + curl)
        #expect(rootStatus == 0 && rootCode == "200")
        #expect(nobodyStatus == 0 && nobodyCode == "200")
        #expect(otherCode == "407")
        #expect(arrived(at: origin, among: [rootToken, nobodyToken]) == [[rootToken], [nobodyToken]])
        #expect(proxy.terminate() == 0)
        let lines = logLines(configured.logPath)
        #expect(lines.count == 3)
        guard lines.count == 3 else { return }
        #expect(lines[0].contains(#""client_id":"admin""#))
        #expect(lines[1].contains(#""client_id":"sandbox""#))
        #expect(lines[2].contains(#""status":407"#) && lines[2].contains(#""reason":"client_not_recognised""#))
    }

    @Test("rate: a burst beyond the client's limit gets 429 with Retry-After, counted in metrics")
    func rateLimit() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let configured = try ConfiguredProxy { log in
            """
            clients: [{ name: local, source: ["127.0.0.0/8"], rate: "3/m" }]
            scopes: []
            log: { output: \(log) }
            """
        }
        defer { configured.process.terminate() }
        var statuses: [Int] = []
        var retryAfter: String?
        for _ in 0..<5 {
            let response = try #require(try send(configured.port, origin.url + "/x", host: origin.authority))
            statuses.append(response.status)
            if response.status == 429 { retryAfter = response.header("retry-after") }
        }
        #expect(statuses == [200, 200, 200, 429, 429])
        #expect(retryAfter.flatMap(Int.init).map { $0 >= 1 && $0 <= 20 } == true)
        let metrics = try configured.metrics()
        #expect(metrics.contains(#"scopeproxy_rate_limited_total{client="local"} 2"#))
        #expect(configured.process.terminate() == 0)
        #expect(logLines(configured.logPath).filter { $0.contains(#""error":"rate_limited""#) && $0.contains(#""client_id":"local""#) }.count == 2)
    }

    @Test("SIGHUP reload adds and removes a client; the text log names the client")
    func reload() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let agentKey = canary("agentkey"), token = canary("tok")
        var logPath = ""
        func yaml(withAgent: Bool) -> String {
            """
            log: { output: \(logPath), format: text }
            secrets: { agent_key: { env: AGENT_KEY }, token: { env: TOKEN } }
            clients:
              - { name: lan, source: ["10.0.0.0/8"] }
            \(withAgent ? "  - { name: agent, auth: { bearer: agent_key } }" : "")
            scopes: [{ name: api, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${token}" } }]
            """
        }
        let configured = try ConfiguredProxy(environment: ["AGENT_KEY": agentKey, "TOKEN": token]) { log in
            logPath = log
            return yaml(withAgent: false)
        }
        let proxy = configured.process
        defer { proxy.terminate() }
        let admin = "admin: \"127.0.0.1:\(configured.adminPort)\"\n"
        let agent = [("Proxy-Authorization", "Bearer \(agentKey)")]
        // No client uses auth yet: the header decides nothing, and nothing else recognises this client.
        #expect(try send(proxy.port, origin.url + "/1", host: origin.authority, agent)?.status == 407)

        try (admin + yaml(withAgent: true)).write(toFile: configured.configPath, atomically: true, encoding: .utf8)
        proxy.signal(SIGHUP)
        #expect(waitForStderr(proxy, #""event":"reloaded""#, count: 1))
        #expect(try send(proxy.port, origin.url + "/2", host: origin.authority, agent)?.status == 200)

        try (admin + yaml(withAgent: false)).write(toFile: configured.configPath, atomically: true, encoding: .utf8)
        proxy.signal(SIGHUP)
        #expect(waitForStderr(proxy, #""event":"reloaded""#, count: 2))
        #expect(try send(proxy.port, origin.url + "/3", host: origin.authority, agent)?.status == 407)
        #expect(origin.requests.map(\.target) == ["/2"])
        #expect(arrived(at: origin, among: [token, agentKey]) == [[token]])
        #expect(proxy.terminate() == 0)
        let lines = logLines(logPath)
        #expect(lines.count == 3)
        guard lines.count == 3 else { return }
        #expect(lines[0].contains(" 407 ") && lines[0].contains("reason=client_not_recognised") && !lines[0].contains("client="))
        #expect(lines[1].contains(" 200 ") && lines[1].contains(" client=agent "))
        #expect(lines[2].contains(" 407 "))
        #expect(!lines.joined().contains(agentKey) && !lines.joined().contains(token))
    }
}
