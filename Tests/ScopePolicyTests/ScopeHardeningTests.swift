import HTTP1Codec
import Testing

@testable import ScopePolicy

private func origin(_ text: String) -> Origin { try! Origin.parse(text) }

private let secrets = StaticSecrets(["token": "CANARY-token-4c1d", "key": "CANARY-key-8e02"])
private let api = origin("https://api.example")
private let cdn = origin("https://cdn.example")
private let evil = origin("https://evil.example")
private func target(_ origin: Origin, _ path: String) -> RedirectTarget { RedirectTarget(origin: origin, pathAndQuery: path) }

/// Injects Authorization and a non-built-in name, passes Cookie and X-Auth-Token, limited to
/// GET/POST under /v1.
private let apiScope = Scope(
    name: "api", origins: [api],
    inject: [
        .init(header: "Authorization", template: try! HeaderTemplate.parse("Bearer ${token}")),
        .init(header: "X-Tenant-Key", template: try! HeaderTemplate.parse("${key}")),
    ],
    pass: ["Cookie", "X-Auth-Token"], methods: ["GET", "POST"], paths: ["/v1"])

private let policy = ScopePolicy(scopes: [apiScope], extraSensitiveHeaders: ["X_Org_Secret"])

private func run(
    _ target: String, _ headers: [(String, String)], method: String = "GET", userinfo: Bool = false,
    policy: ScopePolicy = policy
) -> ScopedRequest {
    guard case .absolute(let origin, let path, _) = try! RequestTarget.parse(target, method: "GET") else { fatalError() }
    let fields = HTTPFields(headers.map { HTTPField(name: $0.0, value: $0.1) })
    return try! policy.apply(
        method: method, origin: origin, pathAndQuery: path, fields: fields, hasUserinfo: userinfo,
        secrets: secrets
    ).get()
}

@Suite("TRACE: nothing injected, nothing sensitive sent (RFC 9110 §9.3.8)")
struct TraceTests {
    @Test(
        "a TRACE (any case) to an in-scope origin strips every sensitive header, passed ones included, and says why",
        arguments: ["TRACE", "trace", "Trace"])
    func traceStripsEverything(_ method: String) {
        let result = run(
            "https://api.example/v1/x",
            [
                ("Authorization", "Bearer client"), ("Cookie", "sid=1"), ("X-Auth-Token", "t"), ("X-Tenant-Key", "k"),
                ("Accept", "*/*"),
            ], method: method, userinfo: true)
        #expect(result.fields.storage == [HTTPField(name: "Accept", value: "*/*")])
        #expect(result.decision.injected.isEmpty)
        #expect(result.decision.stripped == ["Authorization", "Cookie", "X-Auth-Token", "X-Tenant-Key"])
        #expect(result.decision.reason == .traceMethod)
        #expect(result.decision.scopes == ["api"])
        #expect(result.decision.userinfoRemoved && !result.keepUserinfo)
    }

    @Test("the same request as GET is injected and passes what the scope passes")
    func getForContrast() {
        let result = run("https://api.example/v1/x", [("Cookie", "sid=1"), ("X-Auth-Token", "t")])
        #expect(result.fields.first("cookie") == "sid=1")
        #expect(result.fields.first("x-auth-token") == "t")
        #expect(result.decision.injected == ["Authorization", "X-Tenant-Key"])
        #expect(result.decision.reason == .originInScope)
    }
}

@Suite("paths: prefixes match whole segments as the origin routes them")
struct PathPrefixTests {
    @Test(
        "which request paths get the credential",
        arguments: [
            // Whole segments: /v1 and /v1/ cover the same paths.
            ("/v1", "/v1", true), ("/v1", "/v1/", true), ("/v1", "/v1/x", true), ("/v1", "/v1/x?q=1", true),
            ("/v1/", "/v1", true), ("/v1/", "/v1/", true), ("/v1/", "/v1/x/y", true),
            ("/v1", "/v1-admin", false), ("/v1/", "/v1-admin", false), ("/v1", "/v10", false), ("/v1", "/v10/x", false),
            ("/v1", "/", false), ("/v1", "/admin", false), ("/v1", "/V1/x", false), ("/v1/x", "/v1/xy", false),
            // Path parameters are dropped, a single percent-encoding is decoded, before comparing.
            ("/v1", "/v1;a=b/x", true), ("/v1", "/v1;/x", true), ("/v1", "/%76%31/x", true), ("/v1", "/v%31", true),
            ("/v1", "/v1/file%2ejson", true), ("/v1", "/v1%3b/x", false),
            // Escapes out of the prefix on the origin's side (Tomcat/Jetty/Spring `..;`, encoded dots).
            ("/v1", "/v1/..;/admin", false), ("/v1", "/v1/..;x=1/admin", false), ("/v1", "/v1/.;/x", false),
            ("/v1", "/v1/../admin", false), ("/v1", "/v1/./x", false), ("/v1", "/v1/%2e%2e/admin", false),
            ("/v1", "/v1/%2E%2e/admin", false), ("/v1", "/v1/.%2e/admin", false), ("/v1", "/v1/%2e/x", false),
            ("/v1", "/v1/..%3b/admin", false), ("/v1", "/v1/..%2fadmin", false), ("/v1", "/v1/..%2Fadmin", false),
            ("/v1", "/v1/..%5cadmin", false), ("/v1", "/v1\\..\\admin", false), ("/v1", "/v1/x%00.json", false),
            ("/v1", "/v1/%252e%252e/admin", false), ("/v1", "/v1/%25", false), ("/v1", "/v1/%zz", false), ("/v1", "/v1/%2", false),
            // `/` covers everything that is not ambiguous.
            ("/", "/", true), ("/", "/anything/at/all", true), ("/", "/a/..;/b", false),
        ])
    func prefix(_ prefix: String, _ path: String, _ covered: Bool) {
        let scope = Scope(name: "p", origins: [api], inject: apiScope.inject, paths: [prefix])
        let result = run("https://api.example\(path)", [], policy: ScopePolicy(scopes: [scope]))
        #expect(result.decision.injected.isEmpty == !covered, "prefix \(prefix), path \(path)")
    }
}

@Suite("Underscore aliases of sensitive headers (CGI/WSGI read `_` as `-`)")
struct UnderscoreAliasTests {
    @Test(
        "a sensitive or injected name spelled with `_` is never forwarded and is reported",
        arguments: [
            // (origin, client header, forwarded?, reported as stripped?)
            ("https://api.example/v1/x", "X_Auth_Token", false, true),  // passed when dashed
            ("https://api.example/v1/x", "X-Auth-Token", true, false),
            ("https://api.example/v1/x", "x_tenant_key", false, true),  // injected (not built in)
            ("https://api.example/v1/x", "X_API_KEY", false, true),  // built in, not passed
            ("https://api.example/v1/x", "X_Org_Secret", false, true),  // configured with `_`
            ("https://api.example/v1/x", "X-Org-Secret", false, true),  // ... and its dashed spelling
            ("https://api.example/v1/x", "X_Custom", true, false),  // not sensitive: untouched
            ("https://other.example/", "X_Auth_Token", false, true),
            ("https://other.example/", "Proxy_Authorization", false, true),
            ("https://other.example/", "X_Custom", true, false),
        ])
    func alias(_ target: String, _ name: String, _ forwarded: Bool, _ reported: Bool) {
        let result = run(target, [(name, "client-value")])
        #expect(result.fields.values(name.lowercased()).contains("client-value") == forwarded, "\(name) at \(target)")
        #expect(result.decision.stripped.contains(name) == reported, "\(name) at \(target)")
    }

    @Test("an alias of an injected header leaves exactly one value: the proxy's")
    func oneValue() {
        let result = run("https://api.example/v1/x", [("X_Tenant_Key", "client"), ("Authorization", "client")])
        #expect(
            result.fields.storage.filter { SensitiveHeaders.canonicalName($0.name) == "x-tenant-key" }
                == [HTTPField(name: "X-Tenant-Key", value: "CANARY-key-8e02")])
        #expect(result.decision.stripped == ["X_Tenant_Key"], "the replaced Authorization is not a strip; the alias is")
    }

    @Test(
        "isSensitive folds case and `_`",
        arguments: [
            ("Authorization", true), ("x_api_key", true), ("X_Org_Secret", true), ("x-org-secret", true), ("X_Custom", false),
        ])
    func isSensitive(_ name: String, _ expected: Bool) {
        #expect(policy.isSensitive(name) == expected)
    }
}

@Suite("Method override headers where a scope limits methods")
struct MethodOverrideTests {
    @Test(
        "X-HTTP-Method-Override and kin are removed where a covering scope sets methods:",
        arguments: [
            ("https://api.example/v1/x", "X-HTTP-Method-Override", false),
            ("https://api.example/v1/x", "x-method-override", false),
            ("https://api.example/v1/x", "X-HTTP-Method", false),
            ("https://api.example/v1/x", "X_HTTP_Method_Override", false),
            ("https://api.example/admin", "X-HTTP-Method-Override", false),  // covered origin, even without injection
            ("https://other.example/", "X-HTTP-Method-Override", true),  // no covering scope
        ])
    func overrideStripped(_ target: String, _ name: String, _ forwarded: Bool) {
        let result = run(target, [(name, "DELETE")], method: "POST")
        #expect(result.fields.contains(name.lowercased()) == forwarded, "\(name) at \(target)")
        #expect(result.decision.stripped.contains(name) == !forwarded)
    }

    @Test("a scope without methods: leaves them alone")
    func noMethodLimit() {
        let open = ScopePolicy(scopes: [Scope(name: "open", origins: [api], inject: apiScope.inject)])
        let result = run("https://api.example/v1/x", [("X-HTTP-Method-Override", "DELETE")], method: "POST", policy: open)
        #expect(result.fields.first("x-http-method-override") == "DELETE")
        #expect(result.decision.injected == ["Authorization", "X-Tenant-Key"])
    }
}

@Suite("Redirect verdicts: block fails closed, pass and follow hand back what they cannot read")
struct RedirectVerdictTests {

    @Test(
        "verdicts by mode, status and Location",
        arguments: [
            // Block: anything not shown to stay on the origin or an allowed one is refused.
            (RedirectMode.block, 302, "https://evil.example/x", RedirectVerdict.block(evil)),
            (.block, 302, "///evil.example/x", .block(evil)),
            (.block, 302, "/\\evil.example/x", .block(evil)),
            (.block, 302, "https:\\\\evil.example", .block(evil)),
            (.block, 302, "ht\ttps://evil.example/", .block(evil)),
            (.block, 301, "http://api.example/", .block(origin("http://api.example"))),
            (.block, 302, "http://0x7f.1/", .block(nil)),
            (.block, 302, "http://127.1/", .block(nil)),
            (.block, 302, "http://ev%69l.example/", .block(nil)),
            (.block, 302, "http://h:99999/", .block(nil)),
            (.block, 303, "javascript:alert(1)", .block(nil)),
            (.block, 307, "ftp://evil.example/", .block(nil)),
            (.block, 300, "https://evil.example/", .block(evil)),  // curl -L follows any 3xx
            (.block, 399, "https://evil.example/", .block(evil)),
            // Same scheme, one slash: WHATWG reads it relative, curl reads host evil.example; the
            // unsafe reading decides.
            (.block, 302, "https:/evil.example/x", .block(evil)),
            (.block, 302, "https:/api.example/x", .pass(target(api, "/api.example/x"))),
            // WHATWG ends the authority at `\`, curl (RFC 3986) does not: host api.example to one,
            // userinfo `api.example\` and host evil.example to the other.
            (.block, 302, "https://api.example\\@evil.example/x", .block(evil)),
            (.block, 302, "https://api.example/a\\@evil.example/x", .pass(target(api, "/a/@evil.example/x"))),
            (.block, 302, "/same", .pass(target(api, "/same"))),
            (.block, 302, "//cdn.example/x", .pass(target(cdn, "/x"))),
            (.block, 308, "https://cdn.example/a/../b", .pass(target(cdn, "/b"))),
            (.block, 200, "https://evil.example/", .notRedirect),
            (.block, 400, "http://0x7f.1/", .notRedirect),
            // Pass: a Location the proxy cannot read goes back as it is.
            (.pass, 302, "https://evil.example/", .pass(target(evil, "/"))),
            (.pass, 302, "http://0x7f.1/", .pass(nil)),
            (.pass, 302, "mailto:a@b", .pass(nil)),
            (.pass, 300, "/x", .pass(target(api, "/x"))),
            // Follow: only the five fetch follows are followed; unreadable ones go back as they are.
            (.follow, 302, "http://0x7f.1/", .pass(nil)),
            (.follow, 307, "javascript:x", .pass(nil)),
            (.follow, 300, "https://cdn.example/x", .pass(target(cdn, "/x"))),
            (.follow, 307, "ht\ttps://cdn.example/x", .follow(target(cdn, "/x"), method: "GET", replayBody: true)),
        ] as [(RedirectMode, Int, String, RedirectVerdict)])
    func verdict(_ mode: RedirectMode, _ status: Int, _ location: String, _ expected: RedirectVerdict) {
        let policy = RedirectPolicy(mode: mode, allow: [cdn])
        let verdict = policy.decide(status: status, location: location, requestMethod: "GET", from: api, pathAndQuery: "/v1/x", hops: 0)
        #expect(verdict == expected, "\(mode) \(status) \(location.debugDescription)")
    }

    @Test("a redirect status without Location is not a redirect, in every mode", arguments: RedirectMode.allCases)
    func noLocation(_ mode: RedirectMode) {
        #expect(
            RedirectPolicy(mode: mode).decide(status: 302, location: nil, requestMethod: "GET", from: api, pathAndQuery: "/", hops: 0) == .notRedirect
        )
    }
}
