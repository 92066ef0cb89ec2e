import HTTP1Codec
import Testing

@testable import ScopePolicy

private func origin(_ text: String) -> Origin { try! Origin.parse(text) }
private func fields(_ pairs: [(String, String)]) -> HTTPFields { HTTPFields(pairs.map { HTTPField(name: $0.0, value: $0.1) }) }

private let canaryToken = "CANARY-token-7f3a91"
private let canaryKey = "CANARY-key-19be22"
private let secrets = StaticSecrets(["library_token": canaryToken, "library_key": canaryKey, "cdn_token": "CANARY-cdn-55aa"])

private let library = Scope(
    name: "library", origins: [origin("https://api.library.example"), origin("http://127.0.0.1:8765")],
    requireHTTPS: true,
    inject: [
        .init(header: "Authorization", template: try! HeaderTemplate.parse("Bearer ${library_token}")),
        .init(header: "X-API-Key", template: try! HeaderTemplate.parse("${library_key}")),
    ],
    pass: ["Cookie"], methods: ["GET", "POST"], paths: ["/v1/"])

private let policy = ScopePolicy(scopes: [library], extraSensitiveHeaders: ["X-Session-Token"])

private func apply(
    _ target: String, _ headers: [(String, String)], method: String = "GET", userinfo: Bool = false,
    chain: ChainContext = ChainContext()
) -> ScopedRequest {
    guard case .absolute(let origin, let path, _) = try! RequestTarget.parse(target, method: method) else { fatalError() }
    return try! policy.apply(
        method: method, origin: origin, pathAndQuery: path, fields: fields(headers),
        hasUserinfo: userinfo, secrets: secrets, chain: chain
    ).get()
}

@Suite("Scope policy: strip and inject by origin")
struct ScopePolicyTests {
    @Test("an origin in no scope gets no sensitive header, built-in or configured; others pass untouched")
    func outOfScopeStripsEverything() {
        let result = apply(
            "https://cdn.example/v1/x",
            [
                ("Authorization", "Bearer client-canary"), ("x-api-key", "client-key"), ("Cookie", "sid=1"),
                ("X-Session-Token", "sess"), ("Accept", "*/*"), ("X-Custom", "kept"),
            ])
        #expect(result.fields.storage == [HTTPField(name: "Accept", value: "*/*"), HTTPField(name: "X-Custom", value: "kept")])
        #expect(result.decision.stripped == ["Authorization", "x-api-key", "Cookie", "X-Session-Token"])
        #expect(result.decision.injected.isEmpty)
        #expect(result.decision.reason == .originNotInScope)
        #expect(result.decision.scopes.isEmpty)
    }

    @Test("in scope over https: injected headers replace the client's, pass lets Cookie through, the rest is stripped")
    func inScopeInjects() {
        let result = apply(
            "https://API.library.example:443/v1/books?limit=20",
            [
                ("Authorization", "Bearer client-supplied"), ("Cookie", "sid=1"), ("X-Auth-Token", "other"), ("Accept", "json"),
            ])
        #expect(result.fields.first("authorization") == "Bearer \(canaryToken)")
        #expect(result.fields.first("x-api-key") == canaryKey)
        #expect(result.fields.first("cookie") == "sid=1")
        #expect(!result.fields.contains("x-auth-token"))
        #expect(result.fields.count("authorization") == 1)
        #expect(result.decision.injected == ["Authorization", "X-API-Key"])
        #expect(result.decision.stripped == ["X-Auth-Token"])
        #expect(result.decision.scopes == ["library"])
    }

    @Test("injection is limited to the scope's methods and path prefixes; the client's own value never passes under an injected name")
    func methodAndPathLimits() {
        let delete = apply("https://api.library.example/v1/books/1", [("Authorization", "Bearer client")], method: "DELETE")
        #expect(!delete.fields.contains("authorization"))
        #expect(delete.decision.injected.isEmpty)
        #expect(delete.decision.stripped == ["Authorization"])
        let outside = apply("https://api.library.example/admin", [])
        #expect(outside.decision.injected.isEmpty)
        for sneaky in ["/v1/../admin", "/v1/%2e%2e/admin", "/v1/%2E%2e/admin", "/v1/..%2fadmin", "/v1/./x"] {
            #expect(apply("https://api.library.example\(sneaky)", []).decision.injected.isEmpty, "\(sneaky)")
        }
    }

    @Test("require_https: a non-loopback http origin of a https-only scope gets nothing; a loopback one gets its credentials")
    func requireHTTPS() {
        // Loopback traffic never leaves the host: 127/8, ::1 and localhost need no require_https: false.
        #expect(apply("http://127.0.0.1:8765/v1/books", []).decision.injected == ["Authorization", "X-API-Key"])
        let internalOrigin = origin("http://api.internal")
        let strict = ScopePolicy(scopes: [Scope(name: "internal", origins: [internalOrigin], inject: library.inject)])
        let result = try! strict.apply(
            method: "GET", origin: internalOrigin, pathAndQuery: "/v1/books",
            fields: HTTPFields(), hasUserinfo: false, secrets: secrets
        ).get()
        #expect(result.decision.injected.isEmpty)
        let relaxed = ScopePolicy(scopes: [
            Scope(
                name: "dev", origins: [origin("http://127.0.0.1:8765")], requireHTTPS: false,
                inject: library.inject)
        ])
        let devResult = try! relaxed.apply(
            method: "GET", origin: origin("http://127.0.0.1:8765"), pathAndQuery: "/",
            fields: HTTPFields(), hasUserinfo: false, secrets: secrets
        ).get()
        #expect(devResult.fields.first("authorization") == "Bearer \(canaryToken)")
    }

    @Test("userinfo is removed unless a covering scope passes authorization")
    func userinfo() {
        #expect(apply("https://cdn.example/", [], userinfo: true).decision.userinfoRemoved)
        #expect(!apply("https://cdn.example/", [], userinfo: true).keepUserinfo)
        let passing = ScopePolicy(scopes: [Scope(name: "basic", origins: [origin("https://basic.example")], pass: ["authorization"])])
        let kept = try! passing.apply(
            method: "GET", origin: origin("https://basic.example"), pathAndQuery: "/",
            fields: HTTPFields(), hasUserinfo: true, secrets: secrets
        ).get()
        #expect(kept.keepUserinfo)
        #expect(!kept.decision.userinfoRemoved)
    }

    @Test("a missing secret fails closed, naming the secret and never a value")
    func missingSecret() {
        let result = policy.apply(
            method: "GET", origin: origin("https://api.library.example"), pathAndQuery: "/v1/x",
            fields: HTTPFields(), hasUserinfo: false, secrets: StaticSecrets([:]))
        #expect(throws: ScopeError.secretUnavailable(scope: "library", secret: "library_token")) { try result.get() }
    }

    @Test("several scopes on one origin: the union of what they pass and inject")
    func unionOfScopes() {
        let a = Scope(name: "a", origins: [origin("https://x.example")], inject: [.init(header: "X-A", template: try! .parse("${library_token}"))])
        let b = Scope(name: "b", origins: [origin("https://x.example")], pass: ["cookie"])
        let union = ScopePolicy(scopes: [a, b])
        let result = try! union.apply(
            method: "GET", origin: origin("https://x.example"), pathAndQuery: "/",
            fields: fields([("Cookie", "c"), ("X-A", "client")]), hasUserinfo: false, secrets: secrets
        ).get()
        #expect(result.fields.first("cookie") == "c")
        #expect(result.fields.first("x-a") == canaryToken)
        #expect(result.decision.scopes == ["a", "b"])
    }

    @Test("along a followed chain, a client header once stripped stays stripped; a downgrade carries nothing")
    func chainRules() {
        var chain = ChainContext()
        chain.strippedByClientHeader = ["cookie"]
        let back = apply("https://api.library.example/v1/x", [("Cookie", "sid=1")], chain: chain)
        #expect(!back.fields.contains("cookie"))
        #expect(back.fields.first("authorization") == "Bearer \(canaryToken)", "injected values are looked up afresh")
        var downgraded = ChainContext()
        downgraded.downgraded = true
        let down = apply("https://api.library.example/v1/x", [("Cookie", "sid=1")], chain: downgraded)
        #expect(!down.fields.contains("cookie"))
        #expect(!down.fields.contains("authorization"))
        #expect(down.decision.reason == .httpsDowngrade)
    }

    @Test("a secret value prints as <redacted>")
    func redactedDescription() {
        let value = SecretValue(canaryToken)
        #expect("\(value)" == "<redacted>")
        #expect(String(reflecting: value) == "<redacted>")
    }

    @Test("templates: references, $$ escapes, and invalid input")
    func templates() throws {
        #expect(try HeaderTemplate.parse("Bearer ${a}-$$-${b.c}").parts == [.literal("Bearer "), .secret("a"), .literal("-$-"), .secret("b.c")])
        #expect(throws: HeaderTemplate.ParseError.unterminatedReference) { try HeaderTemplate.parse("${a") }
        #expect(throws: HeaderTemplate.ParseError.emptyReference) { try HeaderTemplate.parse("${}") }
        #expect(throws: HeaderTemplate.ParseError.invalidCharacter) { try HeaderTemplate.parse("a\r\nX-Evil: 1") }
    }
}

@Suite("Redirect decisions")
struct RedirectTests {
    let api = origin("https://api.library.example")

    @Test("Locations resolve against the request URL")
    func resolution() {
        func resolve(_ location: String) -> String? {
            guard case .target(let target) = RedirectPolicy.resolve(location, origin: api, pathAndQuery: "/v1/books/list?x=1") else { return nil }
            return target.origin.withPort + target.pathAndQuery
        }
        #expect(resolve("https://CDN.library.example/a?token=t#frag") == "https://cdn.library.example:443/a?token=t")
        #expect(resolve("//cdn.example/b") == "https://cdn.example:443/b")
        #expect(resolve("/c") == "https://api.library.example:443/c")
        #expect(resolve("d") == "https://api.library.example:443/v1/books/d")
        #expect(resolve("../e") == "https://api.library.example:443/v1/e")
        #expect(resolve("?page=2") == "https://api.library.example:443/v1/books/list?page=2")
        #expect(resolve("http://api.library.example/") == "http://api.library.example:80/")
        #expect(RedirectPolicy.resolve("javascript:alert(1)", origin: api, pathAndQuery: "/") == .otherScheme)
        // WHATWG ends the authority at `\`: host `a`, and `@b.example` is path (the old resolver
        // refused it; a browser goes to `a`, so the proxy now reads `a` too).
        #expect(resolve("http://a\\@b.example/") == "http://a:80/@b.example/")
        #expect(RedirectPolicy.resolve("http://%61.example/", origin: api, pathAndQuery: "/") == .unparseable)
    }

    @Test("pass returns the 3xx; block refuses cross-origin targets not allowed; follow rewrites methods per RFC 9110")
    func verdicts() {
        let cdn = origin("https://cdn.library.example")
        let pass = RedirectPolicy(mode: .pass)
        #expect(
            pass.decide(status: 302, location: "https://evil.example/", requestMethod: "GET", from: api, pathAndQuery: "/", hops: 0)
                == .pass(RedirectTarget(origin: origin("https://evil.example"), pathAndQuery: "/")))
        #expect(
            pass.decide(status: 200, location: "https://evil.example/", requestMethod: "GET", from: api, pathAndQuery: "/", hops: 0) == .notRedirect)

        let block = RedirectPolicy(mode: .block, allow: [cdn])
        #expect(
            block.decide(status: 302, location: "https://evil.example/x?t=1", requestMethod: "GET", from: api, pathAndQuery: "/", hops: 0)
                == .block(origin("https://evil.example")))
        #expect(
            block.decide(status: 302, location: "https://cdn.library.example/x", requestMethod: "GET", from: api, pathAndQuery: "/", hops: 0)
                == .pass(RedirectTarget(origin: cdn, pathAndQuery: "/x")))
        #expect(
            block.decide(status: 301, location: "/same", requestMethod: "GET", from: api, pathAndQuery: "/", hops: 0)
                == .pass(RedirectTarget(origin: api, pathAndQuery: "/same")))

        let follow = RedirectPolicy(mode: .follow, maxHops: 2)
        let target = RedirectTarget(origin: cdn, pathAndQuery: "/x")
        #expect(
            follow.decide(status: 303, location: "https://cdn.library.example/x", requestMethod: "POST", from: api, pathAndQuery: "/", hops: 0)
                == .follow(target, method: "GET", replayBody: false))
        #expect(
            follow.decide(status: 302, location: "https://cdn.library.example/x", requestMethod: "POST", from: api, pathAndQuery: "/", hops: 0)
                == .follow(target, method: "GET", replayBody: false))
        // A 301/302 keeps any method but POST, with its body (a `case 301, 302 where` once applied
        // the condition to 302 only, turning every 301 into a bodiless GET; the fuzz build's
        // warnings showed it).
        #expect(
            follow.decide(status: 301, location: "https://cdn.library.example/x", requestMethod: "PUT", from: api, pathAndQuery: "/", hops: 0)
                == .follow(target, method: "PUT", replayBody: true))
        #expect(
            follow.decide(status: 302, location: "https://cdn.library.example/x", requestMethod: "DELETE", from: api, pathAndQuery: "/", hops: 0)
                == .follow(target, method: "DELETE", replayBody: true))
        #expect(
            follow.decide(status: 301, location: "https://cdn.library.example/x", requestMethod: "POST", from: api, pathAndQuery: "/", hops: 0)
                == .follow(target, method: "GET", replayBody: false))
        #expect(
            follow.decide(status: 307, location: "https://cdn.library.example/x", requestMethod: "PUT", from: api, pathAndQuery: "/", hops: 1)
                == .follow(target, method: "PUT", replayBody: true))
        #expect(
            follow.decide(status: 308, location: "https://cdn.library.example/x", requestMethod: "GET", from: api, pathAndQuery: "/", hops: 2)
                == .tooManyHops)
    }
}
