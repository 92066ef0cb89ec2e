import Foundation
import Testing
import TestSupport

/// Regression tests for scope-rule attacks found in hardening (docs/testing.md), in-process: what each
/// origin received, header by header, and what the client got back.
@Suite("Security findings: scope rules (5 TRACE, 7 paths, 9 aliases, 14 method override, 15 Host)", .serialized)
struct SecurityFindingsScopeTests {
    // MARK: 5. TRACE returns the injected secret

    @Test("5: a TRACE request carries no injected or passed sensitive header, so an echoing origin cannot hand one back")
    func traceCarriesNoCredentials() throws {
        // Answers TRACE as RFC 9110 §9.3.8 says: the request it received, as the body.
        let origin = try Findings.scripted { request in
            let echoed = request.rawHead + request.body
            return Array("HTTP/1.1 200 OK\r\nContent-Type: message/http\r\nContent-Length: \(echoed.count)\r\n\r\n".utf8) + echoed
        }
        defer { origin.stop() }
        let token = Findings.canary("token"), key = Findings.canary("key"), cookie = Findings.canary("cookie")
        let proxy = try ProxyHarness(yaml: """
            secrets: { token: { env: T }, key: { env: K } }
            scopes: [{ name: api, origins: ["\(origin.url)"], require_https: false,
                       inject: { Authorization: "Bearer ${token}", X-API-Key: "${key}" }, pass: [Cookie] }]
            """, secrets: ["token": token, "key": key])
        defer { proxy.stop() }
        let response = try #require(try proxy.exchange(Findings.request("\(origin.url)/v1/items", host: origin.authority, [("Cookie", "sid=\(cookie)")], method: "TRACE")))
        let all = [token, key, cookie]
        #expect(Findings.canaries(in: origin, among: all).isEmpty, "the TRACE carried a credential to the origin")
        let answer = response.bodyText + String(decoding: response.rawHead, as: UTF8.self)
        #expect(all.filter { answer.contains($0) }.isEmpty, "the echoed TRACE handed a credential back to the client")

        // Control: a GET to the same origin does get them (the test would see a leak if there were one).
        _ = try proxy.exchange(Findings.request("\(origin.url)/v1/items", host: origin.authority, [("Cookie", "sid=\(cookie)")]))
        #expect(Findings.canaries(in: origin, among: all) == Set(all))
    }

    // MARK: 7. `paths:` escaped with `..;` and partial-segment prefixes

    @Test("7: with paths [/v1/], a path that a Tomcat/Jetty/Spring origin normalizes out of /v1/ gets no credential",
          arguments: ["/v1/..;/admin", "/v1/..;jsessionid=x/admin", "/v1/.;/../admin", "/v1/%2e%2e;/admin", "/v1/.%2e;x/admin",
                      "/v1/..;/..;/admin", "/v1/x/..;/..;/admin"])
    func dotDotSemicolon(_ path: String) throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let token = Findings.canary("token")
        let proxy = try ProxyHarness(yaml: """
            secrets: { token: { env: T } }
            scopes: [{ name: api, origins: ["\(origin.url)"], require_https: false, inject: { Authorization: "Bearer ${token}" }, paths: ["/v1/"] }]
            """, secrets: ["token": token])
        defer { proxy.stop() }
        _ = try proxy.exchange(Findings.request("\(origin.url)\(path)", host: origin.authority))
        #expect(origin.requests.count == 1)
        #expect(Findings.canaries(in: origin, among: [token]).isEmpty, "\(path) got the token")
    }

    @Test("7: a paths prefix matches whole segments: /v1 covers /v1 and /v1/x, never /v1-admin or /v1admin")
    func prefixMatchesWholeSegments() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let token = Findings.canary("token")
        let proxy = try ProxyHarness(yaml: """
            secrets: { token: { env: T } }
            scopes: [{ name: api, origins: ["\(origin.url)"], require_https: false, inject: { Authorization: "Bearer ${token}" }, paths: ["/v1"] }]
            """, secrets: ["token": token])
        defer { proxy.stop() }
        for path in ["/v1-admin/users", "/v1admin", "/v1.bak", "/v1/items", "/v1", "/v1?x=1", "/v1/a;b=c/items"] {
            _ = try proxy.exchange(Findings.request("\(origin.url)\(path)", host: origin.authority, [("X-Test-Id", path)]))
        }
        func got(_ path: String) -> Bool? {
            origin.requests.first { $0.header("x-test-id") == path }.map { $0.header("authorization") == "Bearer \(token)" }
        }
        #expect(got("/v1-admin/users") == false)
        #expect(got("/v1admin") == false)
        #expect(got("/v1.bak") == false)
        #expect(got("/v1/items") == true, "control")
        #expect(got("/v1") == true, "control")
        #expect(got("/v1?x=1") == true, "control")
        #expect(got("/v1/a;b=c/items") == true, "control: a ;param without dot segments stays in the prefix")
    }

    // MARK: 9. `X_API_Key`-style aliases

    @Test("9: a sensitive header spelled with `_` (X_API_Key, x_api_key, X_Session_Token, ...) is never forwarded, in scope or out of it")
    func underscoreAliases() throws {
        let scoped = try FixtureOrigin(host: "127.0.0.1")
        let other = try FixtureOrigin(host: "127.0.0.2")
        defer { scoped.stop(); other.stop() }
        let token = Findings.canary("injected")
        let proxy = try ProxyHarness(yaml: """
            secrets: { key: { env: K } }
            sensitive_headers: [X-Session-Token]
            scopes: [{ name: api, origins: ["\(scoped.url)"], require_https: false, inject: { X-API-Key: "${key}" }, pass: [X-Auth-Token] }]
            """, secrets: ["key": token])
        defer { proxy.stop() }
        var aliases: [(String, String)] = []
        for name in ["X_API_Key", "x_api_key", "X-API_Key", "X_Auth_Token", "X_Session_Token", "Private_Token", "X_Goog_Api_Key"] {
            aliases.append((name, Findings.canary(name.lowercased().replacingOccurrences(of: "_", with: ""))))
        }
        let canaries = aliases.map(\.1)
        for origin in [scoped, other] {
            let response = try proxy.exchange(Findings.request("\(origin.url)/v1", host: origin.authority, aliases))
            #expect(response?.status == 200)
        }
        #expect(Findings.canaries(in: other, among: canaries).isEmpty, "an alias reached the out-of-scope origin")
        #expect(Findings.canaries(in: scoped, among: canaries).isEmpty, "an alias reached the scoped origin (even one its scope passes)")
        let atScoped = try #require(scoped.requests.first)
        #expect(atScoped.headers("x-api-key") == [token], "only the injected value, once")
        let underscored = atScoped.headers.map(\.0).filter { $0.contains("_") }
        #expect(underscored.isEmpty, "forwarded: \(underscored)")
    }

    // MARK: 14. Method-override headers where a scope sets `methods:`

    @Test("14: where a scope sets methods, X-HTTP-Method-Override, X-Method-Override and X-HTTP-Method never reach its origins",
          arguments: ["GET", "POST"])
    func methodOverrideStripped(_ method: String) throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let token = Findings.canary("token")
        let proxy = try ProxyHarness(yaml: """
            secrets: { token: { env: T } }
            scopes: [{ name: api, origins: ["\(origin.url)"], require_https: false, inject: { Authorization: "Bearer ${token}" }, methods: [GET] }]
            """, secrets: ["token": token])
        defer { proxy.stop() }
        let overrides = [("X-HTTP-Method-Override", "DELETE"), ("X-Method-Override", "DELETE"), ("X-HTTP-Method", "DELETE"),
                         ("x-http-method-override", "PUT")]
        let response = try proxy.exchange(Findings.request("\(origin.url)/v1/items/1", host: origin.authority, overrides, method: method,
                                                           body: method == "POST" ? "" : nil))
        #expect(response?.status == 200)
        let arrived = try #require(origin.requests.first)
        for name in ["x-http-method-override", "x-method-override", "x-http-method"] {
            #expect(arrived.headers(name).isEmpty, "\(method): \(name) reached the origin")
        }
    }

    // MARK: 15. Host handling (RFC 9112 §3.2.2)

    @Test("15: an absolute-form request whose Host names the proxy itself (Node's http.request) succeeds; the origin gets Host = the target's authority")
    func absoluteFormHostReplaced() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let proxy = try ProxyHarness(yaml: "scopes: []", secrets: [:])
        defer { proxy.stop() }
        for host in ["127.0.0.1:\(proxy.port)", "elsewhere.example", "127.0.0.2:\(origin.port)"] {
            let response = try #require(try proxy.exchange(Findings.request("\(origin.url)/node", host: host, [("X-Test-Id", host)])))
            #expect(response.status == 200, "Host: \(host)")
            let arrived = origin.requests.first { $0.header("x-test-id") == host }
            #expect(arrived?.headers("host") == [origin.authority], "Host: \(host)")
        }
    }

    @Test("15: two Host fields are 400 (alike or not), and the origin receives nothing", arguments: [false, true])
    func twoHostFields(_ differ: Bool) throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let proxy = try ProxyHarness(yaml: "scopes: []", secrets: [:])
        defer { proxy.stop() }
        let second = differ ? "127.0.0.1:\(proxy.port)" : origin.authority
        let response = try proxy.exchange(Findings.request("\(origin.url)/", host: origin.authority, [("Host", second)]))
        #expect(response?.status == 400)
        #expect(origin.acceptedConnections == 0)
    }

    @Test("15: a CONNECT is judged by its target alone: a Host naming something else, or no Host, plays no part",
          arguments: ["other.example:443", nil] as [String?])
    func connectIgnoresHost(_ host: String?) throws {
        let echo = try EchoServer()
        let proxy = try ProxyHarness { $0.tunnel = .allow }
        defer { proxy.stop() }
        let socket = try proxy.connect()
        try socket.send("CONNECT 127.0.0.1:\(echo.port) HTTP/1.1\r\n" + (host.map { "Host: \($0)\r\n" } ?? "") + "\r\nping")
        let reader = HTTPReader(socket)
        let head = String(decoding: try #require(try reader.readHeadBytes()), as: UTF8.self)
        #expect(head.hasPrefix("HTTP/1.1 200 "), "Host \(host ?? "absent"): \(head.prefix(40))")
        if head.hasPrefix("HTTP/1.1 200 ") {
            #expect(try reader.readExactly(4) == Array("ping".utf8))
        }
    }
}
