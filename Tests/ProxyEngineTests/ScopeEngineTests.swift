import Foundation
import HTTP1Codec
import ProxyCore
import ProxyEngine
import TestSupport
import Testing

/// Unique, prefixed canaries: each stands for one credential, so where it arrives is unambiguous.
private func canary(_ label: String) -> String { "CANARY-\(label)-\(UInt32.random(in: 0...UInt32.max))" }

/// Every canary that appears anywhere in what an origin received (raw heads and bodies).
private func canaries(in origin: FixtureOrigin, among all: [String]) -> Set<String> {
    let received = origin.requests.map { $0.rawHeadText + String(decoding: $0.body, as: UTF8.self) }.joined()
    return Set(all.filter { received.contains($0) })
}

private func request(_ target: String, host: String, _ headers: [(String, String)] = [], method: String = "GET", body: String? = nil) -> String {
    var text = "\(method) \(target) HTTP/1.1\r\nHost: \(host)\r\n"
    for (name, value) in headers { text += "\(name): \(value)\r\n" }
    if let body { text += "Content-Length: \(body.utf8.count)\r\n" }
    return text + "\r\n" + (body ?? "")
}

@Suite("Engine: credential scope", .serialized)
struct ScopeEngineTests {
    @Test("inject where the scope says, pass Cookie there only, strip every sensitive header everywhere else")
    func stripAndInject() throws {
        let api = try FixtureOrigin(host: "127.0.0.1")
        let other = try FixtureOrigin(host: "127.0.0.2")
        defer { api.stop(); other.stop() }
        let token = canary("api-token"), key = canary("api-key")
        let clientAuth = canary("client-auth"), clientKey = canary("client-key"), cookie = canary("cookie"), session = canary("session")
        let proxy = try ProxyHarness(
            yaml: """
                secrets: { api_token: { env: T }, api_key: { env: K } }
                sensitive_headers: [X-Session-Token]
                scopes:
                  - name: api
                    origins: ["\(api.url)"]
                    require_https: false
                    inject: { Authorization: "Bearer ${api_token}", X-API-Key: "${api_key}" }
                    pass: [Cookie]
                """, secrets: ["api_token": token, "api_key": key])
        defer { proxy.stop() }
        let clientHeaders = [
            ("Authorization", "Bearer \(clientAuth)"), ("X-API-Key", clientKey), ("Cookie", "sid=\(cookie)"),
            ("X-Session-Token", session), ("X-Custom", "kept"),
        ]
        for origin in [api, other] {
            let response = try proxy.exchange(request("\(origin.url)/v1/items", host: origin.authority, clientHeaders))
            #expect(response?.status == 200)
        }
        let all = [token, key, clientAuth, clientKey, cookie, session]
        let atAPI = try #require(api.requests.first)
        #expect(atAPI.headers("authorization") == ["Bearer \(token)"])
        #expect(atAPI.headers("x-api-key") == [key])
        #expect(atAPI.header("cookie") == "sid=\(cookie)")
        #expect(atAPI.header("x-session-token") == nil)
        #expect(atAPI.header("x-custom") == "kept")
        #expect(canaries(in: api, among: all) == [token, key, cookie])

        let atOther = try #require(other.requests.first)
        #expect(atOther.header("x-custom") == "kept")
        #expect(canaries(in: other, among: all).isEmpty, "no credential of any kind reached the out-of-scope origin")
    }

    @Test("userinfo in the target never reaches an origin that no scope lets have it")
    func userinfo() throws {
        let origin = try FixtureOrigin(host: "127.0.0.2")
        defer { origin.stop() }
        let password = canary("userinfo")
        let proxy = try ProxyHarness(yaml: "scopes: []", secrets: [:])
        defer { proxy.stop() }
        let response = try proxy.exchange(request("http://user:\(password)@\(origin.authority)/", host: origin.authority))
        #expect(response?.status == 200)
        #expect(canaries(in: origin, among: [password]).isEmpty)
        #expect(origin.requests.first?.header("authorization") == nil)
    }

    @Test("a scope that passes authorization gets userinfo as Basic credentials")
    func userinfoPassed() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let proxy = try ProxyHarness(
            yaml: """
                scopes: [{ name: basic, origins: ["\(origin.url)"], require_https: false, pass: [Authorization] }]
                """, secrets: [:])
        defer { proxy.stop() }
        _ = try proxy.exchange(request("http://alice:s%40cret@\(origin.authority)/", host: origin.authority))
        #expect(origin.requests.first?.header("authorization") == "Basic " + Data("alice:s@cret".utf8).base64EncodedString())
    }

    @Test("a secret without a value fails closed: 502 naming scope and secret, and the origin receives nothing")
    func missingSecret() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let proxy = try ProxyHarness(
            yaml: """
                secrets: { token: { env: T } }
                scopes: [{ name: api, origins: ["\(origin.url)"], require_https: false, inject: { Authorization: "Bearer ${token}" } }]
                """, secrets: [:])
        defer { proxy.stop() }
        let response = try #require(try proxy.exchange(request("\(origin.url)/", host: origin.authority)))
        #expect(response.status == 502)
        #expect(response.bodyText.contains("credential_unavailable"))
        #expect(response.bodyText.contains("'token'"))
        #expect(origin.acceptedConnections == 0)
    }

    @Test("proxy_auth: 407 with Proxy-Authenticate without the password; Basic and Bearer accepted; never forwarded")
    func proxyAuth() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let password = canary("proxy-password")
        let proxy = try ProxyHarness(
            yaml: """
                proxy_auth: { secret: pw }
                secrets: { pw: { env: PW } }
                """, secrets: ["pw": password])
        defer { proxy.stop() }
        let missing = try #require(try proxy.exchange(request("\(origin.url)/", host: origin.authority)))
        #expect(missing.status == 407)
        #expect(missing.header("proxy-authenticate") == "Basic realm=\"scopeproxy\"")
        let wrong = try proxy.exchange(request("\(origin.url)/", host: origin.authority, [("Proxy-Authorization", "Bearer nope")]))
        #expect(wrong?.status == 407)
        #expect(origin.acceptedConnections == 0)
        let basic = "Basic " + Data("anyone:\(password)".utf8).base64EncodedString()
        #expect(try proxy.exchange(request("\(origin.url)/", host: origin.authority, [("Proxy-Authorization", basic)]))?.status == 200)
        #expect(try proxy.exchange(request("\(origin.url)/", host: origin.authority, [("Proxy-Authorization", "Bearer \(password)")]))?.status == 200)
        #expect(canaries(in: origin, among: [password]).isEmpty)
        #expect(origin.requests.count == 2)
    }

    @Test("reload: a new scope context applies to new requests")
    func reload() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let first = canary("first"), second = canary("second")
        let proxy = try ProxyHarness(
            yaml: """
                secrets: { token: { env: T } }
                scopes: [{ name: api, origins: ["\(origin.url)"], require_https: false, inject: { X-Token: "${token}" } }]
                """, secrets: ["token": first])
        defer { proxy.stop() }
        _ = try proxy.exchange(request("\(origin.url)/", host: origin.authority))
        let replacement = try ProxyHarness.context(
            yaml: """
                secrets: { token: { env: T } }
                scopes: [{ name: api, origins: ["\(origin.url)"], require_https: false, inject: { X-Token: "${token}" } }]
                """, secrets: ["token": second])
        proxy.server.configuration.scope.replace(with: replacement)
        _ = try proxy.exchange(request("\(origin.url)/", host: origin.authority))
        #expect(origin.requests.map { $0.header("x-token") } == [first, second])
    }
}

@Suite("Engine: redirects re-scoped (API -> CDN -> attacker)", .serialized)
struct RedirectEngineTests {
    /// api (127.0.0.1) redirects to cdn (127.0.0.2) with a token in the query; cdn redirects to
    /// attacker (127.0.0.1, another port).
    final class Chain {
        let attacker: FixtureOrigin
        let cdn: FixtureOrigin
        let api: FixtureOrigin
        let apiToken = canary("api-token"), cdnToken = canary("cdn-token"), cookie = canary("cookie"), clientKey = canary("client-key")
        var all: [String] { [apiToken, cdnToken, cookie, clientKey] }

        init() throws {
            let attacker = try FixtureOrigin(host: "127.0.0.1")
            let cdn = try FixtureOrigin(host: "127.0.0.2") { connection in
                while connection.readRequest() != nil {
                    connection.respond(status: 302, headers: [("Location", "\(attacker.url)/steal")], body: "")
                }
            }
            api = try FixtureOrigin(host: "127.0.0.1") { connection in
                while connection.readRequest() != nil {
                    connection.respond(status: 302, headers: [("Location", "\(cdn.url)/asset?sig=abc")], body: "moved")
                }
            }
            self.attacker = attacker
            self.cdn = cdn
        }

        func yaml(mode: String) -> String {
            """
            secrets: { api_token: { env: A }, cdn_token: { env: C } }
            scopes:
              - { name: api, origins: ["\(api.url)"], require_https: false, inject: { Authorization: "Bearer ${api_token}" }, pass: [Cookie] }
              - { name: cdn, origins: ["\(cdn.url)"], require_https: false, inject: { X-CDN-Token: "${cdn_token}" } }
            redirects: { cross_origin: \(mode), allow: ["\(cdn.url)"], max_hops: 5 }
            """
        }

        var secrets: [String: String] { ["api_token": apiToken, "cdn_token": cdnToken] }
        var clientHeaders: [(String, String)] { [("Cookie", "sid=\(cookie)"), ("X-API-Key", clientKey)] }

        func stop() { [api, cdn, attacker].forEach { $0.stop() } }
    }

    @Test("follow: each hop is scoped on its own origin; the CDN token is swapped in; the attacker gets nothing")
    func follow() throws {
        let chain = try Chain()
        defer { chain.stop() }
        let proxy = try ProxyHarness(yaml: chain.yaml(mode: "follow"), secrets: chain.secrets)
        defer { proxy.stop() }
        let response = try #require(try proxy.exchange(request("\(chain.api.url)/v1/file", host: chain.api.authority, chain.clientHeaders)))
        #expect(response.status == 200, "the proxy followed both redirects")
        #expect(response.bodyText.hasPrefix("target=/steal"))
        #expect(canaries(in: chain.api, among: chain.all) == [chain.apiToken, chain.cookie])
        #expect(canaries(in: chain.cdn, among: chain.all) == [chain.cdnToken])
        #expect(chain.cdn.requests.first?.target == "/asset?sig=abc")
        #expect(canaries(in: chain.attacker, among: chain.all).isEmpty)
        #expect(chain.attacker.requests.count == 1)
    }

    @Test("block: a cross-origin redirect outside `allow` becomes 502 naming only the origin; the target receives nothing")
    func block() throws {
        let chain = try Chain()
        defer { chain.stop() }
        let proxy = try ProxyHarness(yaml: chain.yaml(mode: "block"), secrets: chain.secrets)
        defer { proxy.stop() }
        let first = try #require(try proxy.exchange(request("\(chain.api.url)/v1/file", host: chain.api.authority, chain.clientHeaders)))
        #expect(first.status == 302, "the CDN is in `allow`")
        let second = try #require(try proxy.exchange(request("\(chain.cdn.url)/asset?sig=abc", host: chain.cdn.authority, chain.clientHeaders)))
        #expect(second.status == 502)
        #expect(second.bodyText.contains("redirect_blocked"))
        #expect(second.bodyText.contains("http://127.0.0.1:\(chain.attacker.port)"))
        #expect(!second.bodyText.contains("/steal"))
        #expect(chain.attacker.acceptedConnections == 0)
        #expect(canaries(in: chain.cdn, among: chain.all) == [chain.cdnToken])
    }

    @Test("pass: the 3xx goes back unchanged and the client's follow-up is scoped on its own origin")
    func pass() throws {
        let chain = try Chain()
        defer { chain.stop() }
        let proxy = try ProxyHarness(yaml: chain.yaml(mode: "pass"), secrets: chain.secrets)
        defer { proxy.stop() }
        let first = try #require(try proxy.exchange(request("\(chain.api.url)/v1/file", host: chain.api.authority, chain.clientHeaders)))
        #expect(first.status == 302)
        #expect(first.header("location") == "\(chain.cdn.url)/asset?sig=abc")
        #expect(first.bodyText == "moved")
        _ = try proxy.exchange(request("\(chain.cdn.url)/asset?sig=abc", host: chain.cdn.authority, chain.clientHeaders))
        _ = try proxy.exchange(request("\(chain.attacker.url)/steal", host: chain.attacker.authority, chain.clientHeaders))
        #expect(canaries(in: chain.api, among: chain.all) == [chain.apiToken, chain.cookie])
        #expect(canaries(in: chain.cdn, among: chain.all) == [chain.cdnToken])
        #expect(canaries(in: chain.attacker, among: chain.all).isEmpty)
    }

    @Test("A1 -> B -> A2: a client cookie stripped at B stays stripped back at A; the injected token is looked up afresh")
    func strippedStaysStripped() throws {
        let back = try FixtureOrigin(host: "127.0.0.1")  // A2: same scope as A1
        let detour = try FixtureOrigin(host: "127.0.0.2") { connection in
            while connection.readRequest() != nil {
                connection.respond(status: 307, headers: [("Location", "\(back.url)/done")], body: "")
            }
        }
        let start = try FixtureOrigin(host: "127.0.0.1") { connection in
            while connection.readRequest() != nil {
                connection.respond(status: 307, headers: [("Location", "\(detour.url)/detour")], body: "")
            }
        }
        defer { [start, detour, back].forEach { $0.stop() } }
        let token = canary("token"), cookie = canary("cookie")
        let proxy = try ProxyHarness(
            yaml: """
                secrets: { token: { env: T } }
                scopes:
                  - { name: a, origins: ["\(start.url)", "\(back.url)"], require_https: false, inject: { Authorization: "Bearer ${token}" }, pass: [Cookie] }
                  # B is covered (by a scope that gives nothing), so its redirect may be followed into A2:
                  # an origin no scope covers could not make the proxy send an authenticated request.
                  - { name: b, origins: ["\(detour.url)"] }
                redirects: { cross_origin: follow }
                """, secrets: ["token": token])
        defer { proxy.stop() }
        let response = try proxy.exchange(
            request("\(start.url)/begin", host: start.authority, [("Cookie", cookie)], method: "POST", body: "payload-307"))
        #expect(response?.status == 200)
        #expect(canaries(in: start, among: [token, cookie]) == [token, cookie])
        #expect(canaries(in: detour, among: [token, cookie]).isEmpty)
        #expect(canaries(in: back, among: [token, cookie]) == [token])
        #expect(back.requests.first?.method == "POST", "307 keeps the method")
        #expect(String(decoding: back.requests.first?.body ?? [], as: UTF8.self) == "payload-307", "and replays the body")
    }

    @Test("follow: 303 turns POST into GET without a body; a loop ends with 508 at max_hops")
    func methodRewriteAndLoop() throws {
        let target = try FixtureOrigin(host: "127.0.0.1")
        let seeOther = try FixtureOrigin(host: "127.0.0.1") { connection in
            while connection.readRequest() != nil {
                connection.respond(status: 303, headers: [("Location", "\(target.url)/result")], body: "")
            }
        }
        let loop = try FixtureOrigin(host: "127.0.0.1") { connection in
            while let request = connection.readRequest() {
                connection.respond(status: 302, headers: [("Location", request.target + "x")], body: "")
            }
        }
        defer { [target, seeOther, loop].forEach { $0.stop() } }
        let proxy = try ProxyHarness(yaml: "redirects: { cross_origin: follow, max_hops: 3 }", secrets: [:])
        defer { proxy.stop() }
        let response = try proxy.exchange(
            request("\(seeOther.url)/form", host: seeOther.authority, [("Content-Type", "text/plain")], method: "POST", body: "data"))
        #expect(response?.status == 200)
        let arrived = try #require(target.requests.first)
        #expect(arrived.method == "GET")
        #expect(arrived.body.isEmpty)
        #expect(arrived.header("content-type") == nil)
        let looped = try #require(try proxy.exchange(request("\(loop.url)/l", host: loop.authority)))
        #expect(looped.status == 508)
        #expect(loop.requests.count == 4, "the first request and three followed hops")
    }
}

@Suite("Engine: routes (sidecar mode for clients that cannot use a proxy)", .serialized)
struct RouteEngineTests {
    @Test("origin-form requests on a route go to its upstream, scoped as that origin; Locations to the upstream come back as the route")
    func route() throws {
        let other = try FixtureOrigin(host: "127.0.0.2")
        let upstream = try FixtureOrigin(host: "127.0.0.1") { connection in
            while let request = connection.readRequest() {
                switch request.target {
                case "/moved": connection.respond(status: 302, headers: [("Location", "/next?x=1")], body: "")
                case "/away": connection.respond(status: 302, headers: [("Location", "http://127.0.0.2:1/elsewhere")], body: "")
                default: connection.respond(body: "target=\(request.target)")
                }
            }
        }
        defer { upstream.stop(); other.stop() }
        let token = "CANARY-route-\(UInt32.random(in: 0...UInt32.max))"
        let yaml = """
            secrets: { token: { env: T } }
            scopes: [{ name: api, origins: ["\(upstream.url)"], require_https: false, inject: { Authorization: "Bearer ${token}" } }]
            redirects: { cross_origin: block }
            """
        let proxy = try ProxyHarness(yaml: yaml, secrets: ["token": token]) { engine in
            engine.routes = [Route(listen: ListenAddress(host: "127.0.0.1", port: 0), upstream: try! Origin.parse(upstream.url))]
        }
        defer { proxy.stop() }
        let routePort = try #require(proxy.server.routeAddresses.first?.port)
        func get(_ path: String) throws -> TestResponse? {
            let socket = try TestSocket.connect(port: routePort)
            try socket.send("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(routePort)\r\nX-API-Key: client\r\n\r\n")
            return try HTTPReader(socket).readResponse()
        }
        #expect(try get("/v1/items")?.bodyText == "target=/v1/items")
        let arrived = try #require(upstream.requests.first)
        #expect(arrived.header("host") == upstream.authority, "the upstream sees its own Host")
        #expect(arrived.header("authorization") == "Bearer \(token)")
        #expect(arrived.header("x-api-key") == nil)
        let moved = try #require(try get("/moved"))
        #expect(moved.status == 302)
        #expect(moved.header("location") == "http://127.0.0.1:\(routePort)/next?x=1", "a Location to the upstream comes back as the route")
        let away = try #require(try get("/away"))
        #expect(away.status == 502, "other redirects follow the redirect mode (block)")
        #expect(other.acceptedConnections == 0)
    }
}
