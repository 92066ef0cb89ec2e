import Foundation
import TestSupport
import Testing

/// The scope rules on the wire, through the in-process engine: what each origin received, header by
/// header, and what the client got back. The same rules as pure tables: ScopePolicyTests/ScopeHardeningTests.swift.
@Suite("Engine: TRACE carries no injected or passed credential (RFC 9110 §9.3.8)", .serialized)
struct TraceEngineTests {
    @Test("a TRACE request carries no injected or passed sensitive header, so an echoing origin cannot hand one back")
    func traceCarriesNoCredentials() throws {
        // Answers TRACE as RFC 9110 §9.3.8 says: the request it received, as the body.
        let origin = try Wire.scripted { request in
            let echoed = request.rawHead + request.body
            return Array("HTTP/1.1 200 OK\r\nContent-Type: message/http\r\nContent-Length: \(echoed.count)\r\n\r\n".utf8) + echoed
        }
        defer { origin.stop() }
        let token = Wire.canary("token"), key = Wire.canary("key"), cookie = Wire.canary("cookie")
        let proxy = try ProxyHarness(
            yaml: """
                secrets: { token: { env: T }, key: { env: K } }
                scopes: [{ name: api, origins: ["\(origin.url)"], require_https: false,
                           inject: { Authorization: "Bearer ${token}", X-API-Key: "${key}" }, pass: [Cookie] }]
                """, secrets: ["token": token, "key": key])
        defer { proxy.stop() }
        let response = try #require(
            try proxy.exchange(Wire.request("\(origin.url)/v1/items", host: origin.authority, [("Cookie", "sid=\(cookie)")], method: "TRACE")))
        let all = [token, key, cookie]
        #expect(Wire.canaries(in: origin, among: all).isEmpty, "the TRACE carried a credential to the origin")
        let answer = response.bodyText + String(decoding: response.rawHead, as: UTF8.self)
        #expect(all.filter { answer.contains($0) }.isEmpty, "the echoed TRACE handed a credential back to the client")

        // Control: a GET to the same origin does get them (the test would see a leak if there were one).
        _ = try proxy.exchange(Wire.request("\(origin.url)/v1/items", host: origin.authority, [("Cookie", "sid=\(cookie)")]))
        #expect(Wire.canaries(in: origin, among: all) == Set(all))
    }
}

@Suite("Engine: a paths prefix matches whole segments, as the origin routes them", .serialized)
struct PathPrefixEngineTests {
    @Test(
        "with paths [/v1/], a path that a Tomcat/Jetty/Spring origin normalizes out of /v1/ gets no credential",
        arguments: [
            "/v1/..;/admin", "/v1/..;jsessionid=x/admin", "/v1/.;/../admin", "/v1/%2e%2e;/admin", "/v1/.%2e;x/admin",
            "/v1/..;/..;/admin", "/v1/x/..;/..;/admin",
        ])
    func dotDotSemicolon(_ path: String) throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let token = Wire.canary("token")
        let proxy = try ProxyHarness(
            yaml: """
                secrets: { token: { env: T } }
                scopes: [{ name: api, origins: ["\(origin.url)"], require_https: false, inject: { Authorization: "Bearer ${token}" }, paths: ["/v1/"] }]
                """, secrets: ["token": token])
        defer { proxy.stop() }
        _ = try proxy.exchange(Wire.request("\(origin.url)\(path)", host: origin.authority))
        #expect(origin.requests.count == 1)
        #expect(Wire.canaries(in: origin, among: [token]).isEmpty, "\(path) got the token")
    }

    @Test("a paths prefix matches whole segments: /v1 covers /v1 and /v1/x, never /v1-admin or /v1admin")
    func prefixMatchesWholeSegments() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let token = Wire.canary("token")
        let proxy = try ProxyHarness(
            yaml: """
                secrets: { token: { env: T } }
                scopes: [{ name: api, origins: ["\(origin.url)"], require_https: false, inject: { Authorization: "Bearer ${token}" }, paths: ["/v1"] }]
                """, secrets: ["token": token])
        defer { proxy.stop() }
        for path in ["/v1-admin/users", "/v1admin", "/v1.bak", "/v1/items", "/v1", "/v1?x=1", "/v1/a;b=c/items"] {
            _ = try proxy.exchange(Wire.request("\(origin.url)\(path)", host: origin.authority, [("X-Test-Id", path)]))
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
}

@Suite("Engine: a sensitive header spelled with `_` is never forwarded", .serialized)
struct UnderscoreAliasEngineTests {
    @Test("a sensitive header spelled with `_` (X_API_Key, x_api_key, X_Session_Token, ...) is never forwarded, in scope or out of it")
    func underscoreAliases() throws {
        let scoped = try FixtureOrigin(host: "127.0.0.1")
        let other = try FixtureOrigin(host: "127.0.0.2")
        defer { scoped.stop(); other.stop() }
        let token = Wire.canary("injected")
        let proxy = try ProxyHarness(
            yaml: """
                secrets: { key: { env: K } }
                sensitive_headers: [X-Session-Token]
                scopes: [{ name: api, origins: ["\(scoped.url)"], require_https: false, inject: { X-API-Key: "${key}" }, pass: [X-Auth-Token] }]
                """, secrets: ["key": token])
        defer { proxy.stop() }
        var aliases: [(String, String)] = []
        for name in ["X_API_Key", "x_api_key", "X-API_Key", "X_Auth_Token", "X_Session_Token", "Private_Token", "X_Goog_Api_Key"] {
            aliases.append((name, Wire.canary(name.lowercased().replacingOccurrences(of: "_", with: ""))))
        }
        let canaries = aliases.map(\.1)
        for origin in [scoped, other] {
            let response = try proxy.exchange(Wire.request("\(origin.url)/v1", host: origin.authority, aliases))
            #expect(response?.status == 200)
        }
        #expect(Wire.canaries(in: other, among: canaries).isEmpty, "an alias reached the out-of-scope origin")
        #expect(Wire.canaries(in: scoped, among: canaries).isEmpty, "an alias reached the scoped origin (even one its scope passes)")
        let atScoped = try #require(scoped.requests.first)
        #expect(atScoped.headers("x-api-key") == [token], "only the injected value, once")
        let underscored = atScoped.headers.map(\.0).filter { $0.contains("_") }
        #expect(underscored.isEmpty, "forwarded: \(underscored)")
    }
}
