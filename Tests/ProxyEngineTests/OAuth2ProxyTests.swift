import Foundation
import HTTP1Codec
import PosixSupport
import ProxyCore
import ProxyEngine
import ScopeConfig
import ScopePolicy
import ScopeProxyApp
import TestSupport
import Testing

/// OAuth2 through the whole proxy: the token endpoint is a TLS fixture signed by the test CA (the
/// proxy reaches it over the same verified upstream TLS as any origin), the origin records the
/// Authorization each request brought.
@Suite("OAuth2 through the proxy: single flight, 401, a broken endpoint", .serialized)
struct OAuth2ProxyTests {
    static let clientSecret = "CANARY-cs-\(UInt32.random(in: 0...UInt32.max))"

    final class Rig: @unchecked Sendable {
        let pki: TestPKI
        let endpoint: TokenEndpointFixture
        let origin: FixtureOrigin
        let proxy: ProxyHarness
        let tokens: CredentialSources
        let unauthorizedOnce = Locked(false)

        init(threads: Int = 4) throws {
            pki = try TestPKI()
            endpoint = try TokenEndpointFixture(pki: pki)
            let once = unauthorizedOnce
            origin = try FixtureOrigin { connection in
                while let request = connection.readRequest() {
                    let refuse =
                        request.target.hasPrefix("/refuse-all")
                        || request.target.hasPrefix("/refuse")
                            && once.withLock { done in
                                defer { done = true }
                                return !done
                            }
                    connection.respond(status: refuse ? 401 : 200, body: refuse ? "expired" : "ok")
                }
            }
            let yaml = """
                secrets:
                  cs: { env: CS }
                  partner_token:
                    oauth2: { token_url: "\(endpoint.url)", grant: client_credentials, client_id: scopeproxy-test, client_secret: cs }
                scopes:
                  - { name: partner, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${partner_token}" } }
                """
            let config = try ConfigLoader.parse(yaml, file: "oauth2.yaml", home: "/nonexistent")
            var engine = EngineConfiguration(listen: ListenAddress(host: "127.0.0.1", port: 0), threads: threads)
            engine.tls = try TLSContexts(authority: nil, upstreamCA: pki.caPath)
            let secrets = StaticSecrets(["cs": OAuth2ProxyTests.clientSecret])
            tokens = try CredentialSources(specs: config.oauth2, secrets: secrets, sink: nil, configuration: engine)
            let context = Runtime.scopeContext(config, secrets: secrets, tokens: tokens)
            let tls = engine.tls
            proxy = try ProxyHarness(threads: threads) { configuration in
                configuration.tls = tls
                configuration.scope = ScopeContextHolder(context)
            }
        }

        func get(_ path: String) throws -> TestResponse? {
            try proxy.exchange("GET \(origin.url)\(path) HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        }

        deinit {
            proxy.stop()
            tokens.stop()
            origin.stop()
            endpoint.stop()
        }
    }

    @Test("50 concurrent requests on 50 connections across the workers: exactly one token request, every request carries its token")
    func singleFlight() throws {
        let rig = try Rig()
        rig.endpoint.set(.grant, delay: 0.3)  // slow: all 50 arrive while the one fetch is in flight
        let statuses = Locked<[Int]>([])
        DispatchQueue.concurrentPerform(iterations: 50) { index in
            let status = (try? rig.get("/v1/orders/\(index)"))??.status ?? -1
            statuses.withLock { $0.append(status) }
        }
        #expect(statuses.withLock { $0 }.allSatisfy { $0 == 200 })
        #expect(rig.endpoint.requests.count == 1, "one token request for all of them")
        let authorizations = rig.origin.requests.map { $0.header("authorization") }
        #expect(authorizations.count == 50 && authorizations.allSatisfy { $0 == "Bearer CANARY-at-1" })
    }

    @Test("a 401 from the origin: the next request gets a new token (one more token request)")
    func unauthorizedRefreshes() throws {
        let rig = try Rig()
        #expect(try rig.get("/v1")?.status == 200)
        usleep(1_100_000)  // a token is dropped for a 401 only once it is a second old (a wait, not an assertion on time)
        #expect(try rig.get("/refuse")?.status == 401)
        #expect(try rig.get("/v1")?.status == 200)
        #expect(rig.endpoint.requests.count == 2)
        #expect(rig.origin.requests.map { $0.header("authorization") } == ["Bearer CANARY-at-1", "Bearer CANARY-at-1", "Bearer CANARY-at-2"])
    }

    @Test("a storm of 401s right after a token arrived: no new token request (the endpoint is not hammered)")
    func unauthorizedStorm() throws {
        let rig = try Rig()
        rig.unauthorizedOnce.withLock { $0 = false }
        for _ in 0..<20 { _ = try rig.get("/refuse-all") }
        #expect(rig.endpoint.requests.count == 1)
    }

    /// The fetch answers every waiter through a callback that reaches its connection: a client gone
    /// before the answer must not stay reachable (nor kept) until the fetch ends.
    @Test("a client that hangs up mid-request while its token is fetched: closed at once, withdrawn from the fetch; the other waiter is served")
    func hangUpWhileWaiting() throws {
        let rig = try Rig()
        rig.endpoint.set(.grant, delay: 3)  // the fetch stays in flight while the client leaves
        let cache = try #require(rig.tokens.cache(for: "partner_token"))
        let staying = try rig.proxy.connect()
        try staying.send("GET \(rig.origin.url)/v1 HTTP/1.1\r\nHost: \(rig.origin.authority)\r\n\r\n")
        let leaving = try rig.proxy.connect()
        try leaving.send("POST \(rig.origin.url)/upload HTTP/1.1\r\nHost: \(rig.origin.authority)\r\nContent-Length: 100\r\n\r\n")
        // Both wait for the one fetch (a bounded wait for the proxy to read them, not a timing check).
        for _ in 0..<1000 where cache.waiterCount < 2 { usleep(10_000) }
        #expect(cache.waiterCount == 2)
        // Its body can no longer arrive: the proxy closes the connection without waiting for the
        // token, and the fetch in flight no longer holds it.
        leaving.shutdownWrite()
        #expect(leaving.receiveUntilClose().isEmpty)
        #expect(cache.waiterCount == 1, "the closed connection is still a waiter of the fetch")
        let answer = String(decoding: try staying.receive(), as: UTF8.self)
        #expect(answer.hasPrefix("HTTP/1.1 200 "))
        #expect(rig.origin.requests.map(\.target) == ["/v1"], "the abandoned upload never reaches the origin")
        #expect(rig.endpoint.requests.count == 1)
    }

    @Test("the endpoint down: 502 credential_unavailable naming its origin, nothing reaches the origin; then it recovers")
    func endpointDown() throws {
        let rig = try Rig()
        rig.endpoint.set(.down)
        let failed = try #require(try rig.get("/v1"))
        #expect(failed.status == 502)
        #expect(failed.bodyText.contains("credential_unavailable") && failed.bodyText.contains("https://127.0.0.1:\(rig.endpoint.port)"))
        #expect(!failed.bodyText.contains(Self.clientSecret))
        #expect(rig.origin.requests.isEmpty)
        // Within the retry floor the endpoint is not asked again.
        let before = rig.endpoint.requests.count
        #expect(try rig.get("/v1")?.status == 502)
        #expect(rig.endpoint.requests.count == before)
        rig.endpoint.set(.grant)
        usleep(1_200_000)  // past the one-second retry floor (a wait, not an assertion on time)
        #expect(try rig.get("/v1")?.status == 200)
        #expect(rig.origin.requests.last?.header("authorization")?.hasPrefix("Bearer CANARY-at-") == true)
    }
}
