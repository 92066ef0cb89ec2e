import Foundation
import TestSupport
import Testing

/// Where a scope sets `methods:`, a request must not get its credential by naming another method
/// in a way the origin honours: override headers, or `_method` in the query or a form body, as
/// Rails, Symfony, Laravel and Rack read it (docs/security-model.md). The pure tables:
/// ProxyCoreTests/MethodOverrideTests.swift.
@Suite("Engine: where a scope sets methods, no method override rides its credential", .serialized)
struct MethodOverrideEngineTests {
    @Test(
        "where a scope sets methods, X-HTTP-Method-Override, X-Method-Override and X-HTTP-Method never reach its origins",
        arguments: ["GET", "POST"])
    func methodOverrideStripped(_ method: String) throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let token = Wire.canary("token")
        let proxy = try ProxyHarness(
            yaml: """
                secrets: { token: { env: T } }
                scopes: [{ name: api, origins: ["\(origin.url)"], require_https: false, inject: { Authorization: "Bearer ${token}" }, methods: [GET] }]
                """, secrets: ["token": token])
        defer { proxy.stop() }
        let overrides = [
            ("X-HTTP-Method-Override", "DELETE"), ("X-Method-Override", "DELETE"), ("X-HTTP-Method", "DELETE"),
            ("x-http-method-override", "PUT"),
        ]
        let response = try proxy.exchange(
            Wire.request(
                "\(origin.url)/v1/items/1", host: origin.authority, overrides, method: method,
                body: method == "POST" ? "" : nil))
        #expect(response?.status == 200)
        let arrived = try #require(origin.requests.first)
        for name in ["x-http-method-override", "x-method-override", "x-http-method"] {
            #expect(arrived.headers(name).isEmpty, "\(method): \(name) reached the origin")
        }
    }

    static func methodsLimitedProxy(_ origin: FixtureOrigin, token: String) throws -> ProxyHarness {
        try ProxyHarness(
            yaml: """
                secrets: { token: { env: T } }
                scopes: [{ name: api, origins: ["\(origin.url)"], require_https: false, inject: { Authorization: "Bearer ${token}" }, methods: [GET, POST] }]
                """, secrets: ["token": token])
    }

    @Test(
        "with methods: [GET, POST], a POST whose query or form body says _method=DELETE carries no credential",
        arguments: ["query", "form", "chunked form"])
    func methodParameter(_ where_: String) throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let token = Wire.canary("token")
        let proxy = try Self.methodsLimitedProxy(origin, token: token)
        defer { proxy.stop() }
        let request: String
        switch where_ {
        case "query":
            request = Wire.request("\(origin.url)/v1/users/7?_method=DELETE", host: origin.authority, method: "POST", body: "")
        case "form":
            request = Wire.request(
                "\(origin.url)/v1/users/7", host: origin.authority,
                [("Content-Type", "application/x-www-form-urlencoded")], method: "POST", body: "name=x&_method=DELETE")
        default:
            request =
                "POST \(origin.url)/v1/users/7 HTTP/1.1\r\nHost: \(origin.authority)\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                + "Transfer-Encoding: chunked\r\n\r\n7\r\nname=x&\r\ne\r\n_method=DELETE\r\n0\r\n\r\n"
        }
        let response = try #require(try proxy.exchange(request, method: "POST"))
        #expect(response.status == 200)
        #expect(Wire.canaries(in: origin, among: [token]).isEmpty, "_method=DELETE rode the POST-only credential (\(where_))")
        #expect(
            origin.requests.first.map { String(decoding: $0.body, as: UTF8.self) }?.contains("_method=DELETE") == (where_ != "query"),
            "the body arrives as sent")
    }

    @Test("a plain form POST to the same scope still gets its credential, body intact (control)")
    func formPostControl() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let token = Wire.canary("token")
        let proxy = try Self.methodsLimitedProxy(origin, token: token)
        defer { proxy.stop() }
        _ = try proxy.exchange(
            Wire.request(
                "\(origin.url)/v1/users", host: origin.authority,
                [("Content-Type", "application/x-www-form-urlencoded")], method: "POST", body: "name=x"), method: "POST")
        #expect(Wire.canaries(in: origin, among: [token]) == [token])
        #expect(origin.requests.first.map { String(decoding: $0.body, as: UTF8.self) } == "name=x")
    }

    @Test("a form body larger than the proxy reads to check it is refused with 413; the origin receives nothing")
    func formTooLarge() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let proxy = try Self.methodsLimitedProxy(origin, token: Wire.canary("token"))
        defer { proxy.stop() }
        let body = String(repeating: "a", count: 70 * 1024)
        let response = try #require(
            try proxy.exchange(
                Wire.request(
                    "\(origin.url)/v1/users", host: origin.authority,
                    [("Content-Type", "application/x-www-form-urlencoded")], method: "POST", body: body),
                method: "POST"))
        #expect(response.status == 413)
        #expect(response.bodyText.contains("body_too_large_to_inspect"))
        #expect(origin.requests.isEmpty)
    }
}
