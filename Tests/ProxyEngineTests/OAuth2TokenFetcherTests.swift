import Foundation
import HTTP1Codec
import PosixSupport
import ProxyCore
import ScopePolicy
import SecretStore
import TestSupport
import Testing

@testable import ProxyEngine

/// A clock the test moves (monotonic milliseconds).
private final class TestClock: Sendable {
    private let now = Locked<UInt64>(1_000_000)
    func read() -> UInt64 { now.withLock { $0 } }
    func advance(_ milliseconds: UInt64) { now.withLock { $0 += milliseconds } }
}

/// What the waiters were answered, and whether each answer arrived on the thread that asked.
private final class Answers: Sendable {
    private let results = Locked<[Result<AccessToken, TokenFailure>]>([])
    private let wrongThread = Locked(0)

    func record(_ result: Result<AccessToken, TokenFailure>, askedOn thread: pthread_t) {
        if pthread_equal(thread, pthread_self()) == 0 { wrongThread.withLock { $0 += 1 } }
        results.withLock { $0.append(result) }
    }

    var all: [Result<AccessToken, TokenFailure>] { results.withLock { $0 } }
    var offThread: Int { wrongThread.withLock { $0 } }
    var tokens: [String] { all.compactMap { try? String(decoding: $0.get().value.exposedBytes, as: UTF8.self) } }
    var failures: [TokenFailure] { all.compactMap { if case .failure(let failure) = $0 { failure } else { nil } } }

    /// Waits until `count` answers arrived (or 10 s passed).
    func wait(for count: Int) -> Bool {
        for _ in 0..<1000 {
            if results.withLock({ $0.count }) >= count { return true }
            usleep(10_000)
        }
        return false
    }
}

/// Worker stand-ins (loops with a mailbox) and the token source under test.
private final class Rig {
    let pki: TestPKI
    let endpoint: TokenEndpointFixture
    let clock = TestClock()
    let loops: [MailboxLoop]
    let tokens: CredentialSources
    let answers = Answers()
    /// What the observer (the tripwire's feed) was told.
    let observed = Locked<[(String, SecretValue)]>([])

    init(
        workers: Int = 5, grant: OAuth2Spec.Grant = .clientCredentials, secrets: SecretLookup? = nil, sink: RefreshTokenSink? = nil,
        trustTestCA: Bool = true, endpointURL: ((TokenEndpointFixture) -> String)? = nil, upstreamTimeout: Int = 3_000
    ) throws {
        pki = try TestPKI()
        endpoint = try TokenEndpointFixture(pki: pki)
        var configuration = EngineConfiguration()
        configuration.tls = try TLSContexts(authority: nil, upstreamCA: trustTestCA ? pki.caPath : nil)
        configuration.timeouts = Timeouts(connect: 3_000, upstream: upstreamTimeout)
        loops = try (0..<workers).map { index throws in try MailboxLoop(name: "test-worker-\(index)", configuration: configuration) }
        let url = endpointURL?(endpoint) ?? endpoint.url
        guard case .absolute(let origin, let path, _) = try RequestTarget.parse(url, method: "POST") else { throw FixtureFailed() }
        let spec = OAuth2Spec(
            endpoint: origin, path: path, grant: grant, clientID: "scopeproxy-test",
            scope: "read write", clientAuthentication: .basic(secret: "client_secret"))
        let clock = clock
        tokens = try CredentialSources(
            specs: ["partner": spec],
            secrets: secrets ?? StaticSecrets(["client_secret": Rig.clientSecret]),
            sink: sink, configuration: configuration, clock: { clock.read() },
            observer: { [observed] secret, value, _ in observed.withLock { $0.append((secret, value)) } })
    }

    static let clientSecret = "CANARY-client-secret-\(UInt32.random(in: 0...UInt32.max))"

    deinit {
        tokens.stop()
        for loop in loops { loop.stop() }
        endpoint.stop()
    }

    /// `count` acquisitions spread over the loops, each made on its loop's thread.
    func acquire(_ count: Int) {
        for index in 0..<count {
            let loop = loops[index % loops.count]
            let (tokens, answers, mailbox) = (tokens, answers, loop.mailbox)
            mailbox.post {
                let asker = pthread_self()
                tokens.acquire(secret: "partner", mailbox: mailbox) { result in answers.record(result, askedOn: asker) }
            }
        }
    }

    var lastToken: AccessToken? { answers.all.last.flatMap { try? $0.get() } }
}

@Suite("OAuth2 tokens through the engine: one token endpoint fixture over verified TLS", .serialized)
struct OAuth2TokenFetcherTests {
    @Test("50 acquisitions on 5 worker threads while the endpoint is slow: exactly one token request, 50 answers on the asking threads")
    func singleFlight() throws {
        let rig = try Rig()
        rig.endpoint.set(.grant, delay: 0.3)
        rig.acquire(50)
        #expect(rig.answers.wait(for: 50))
        #expect(rig.endpoint.requests.count == 1)
        #expect(Set(rig.answers.tokens) == ["CANARY-at-1"])
        #expect(rig.answers.tokens.count == 50)
        #expect(rig.answers.offThread == 0)
        // What the endpoint received: RFC 6749 §4.4.2 with HTTP Basic client authentication (§2.3.1).
        let request = try #require(rig.endpoint.requests.first)
        #expect(request.path == "/oauth/token")
        #expect(request.body == "grant_type=client_credentials&scope=read+write")
        #expect(request.headers["Authorization"] == "Basic " + Base64.encode(Array("scopeproxy-test:\(Rig.clientSecret)".utf8)))
        #expect(request.headers["Content-Type"] == "application/x-www-form-urlencoded")
        // Cached: more acquisitions cost no request.
        rig.acquire(10)
        #expect(rig.answers.wait(for: 60))
        #expect(rig.endpoint.requests.count == 1)
    }

    @Test("expiry: at expires_in - 30 s exactly one refresh for 20 waiting requests")
    func expiry() throws {
        let rig = try Rig()
        rig.endpoint.set(.grant, expiresIn: 100)
        rig.acquire(1)
        #expect(rig.answers.wait(for: 1))
        rig.clock.advance(69_000)
        rig.acquire(5)
        #expect(rig.answers.wait(for: 6))
        #expect(rig.endpoint.requests.count == 1)
        rig.clock.advance(1_000)
        rig.endpoint.set(.grant, delay: 0.2, expiresIn: 100)
        rig.acquire(20)
        #expect(rig.answers.wait(for: 26))
        #expect(rig.endpoint.requests.count == 2)
        #expect(rig.answers.tokens.suffix(20).allSatisfy { $0 == "CANARY-at-2" })
    }

    @Test("a 401 marks the token stale: the next request gets a new token, once")
    func staleToken() throws {
        let rig = try Rig()
        rig.acquire(1)
        #expect(rig.answers.wait(for: 1))
        let first = try #require(rig.lastToken)
        #expect(!rig.tokens.markStale(secret: "partner", token: first), "younger than the retry floor: kept")
        rig.clock.advance(1_000)
        #expect(rig.tokens.markStale(secret: "partner", token: first))
        #expect(!rig.tokens.markStale(secret: "partner", token: first))
        rig.acquire(10)
        #expect(rig.answers.wait(for: 11))
        #expect(rig.endpoint.requests.count == 2)
        #expect(rig.answers.tokens.suffix(10).allSatisfy { $0 == "CANARY-at-2" })
    }

    @Test("endpoint down: every waiter is failed, the retry floor answers at once without a request, then recovery")
    func downAndRecovery() throws {
        let rig = try Rig()
        rig.endpoint.set(.down, delay: 0.2)
        rig.acquire(10)
        #expect(rig.answers.wait(for: 10))
        #expect(rig.answers.failures.count == 10)
        #expect(rig.answers.failures.allSatisfy { $0.reason == .closedEarly && $0.endpoint?.port == rig.endpoint.port })
        #expect(rig.endpoint.requests.count == 1)
        rig.endpoint.set(.grant)
        // Within the floor: failed at once, no request.
        rig.clock.advance(999)
        rig.acquire(5)
        #expect(rig.answers.wait(for: 15))
        #expect(rig.answers.failures.count == 15)
        #expect(rig.endpoint.requests.count == 1)
        // After it: one request, recovery.
        rig.clock.advance(1)
        rig.acquire(5)
        #expect(rig.answers.wait(for: 20))
        #expect(rig.endpoint.requests.count == 2)
        #expect(rig.answers.tokens == Array(repeating: "CANARY-at-1", count: 5))
    }

    @Test("nothing listening, and a certificate the proxy does not trust: failures, named by origin, without secrets")
    func unreachable() throws {
        let refused = try Rig(workers: 1, endpointURL: { _ in "https://127.0.0.1:1/token" })
        refused.acquire(3)
        #expect(refused.answers.wait(for: 3))
        #expect(refused.answers.failures.map(\.reason) == [.refused, .refused, .refused])

        let untrusted = try Rig(workers: 1, trustTestCA: false)
        untrusted.acquire(2)
        #expect(untrusted.answers.wait(for: 2))
        #expect(untrusted.answers.failures.map(\.reason) == [.tlsVerification("unknown issuer"), .tlsVerification("unknown issuer")])
        #expect(untrusted.endpoint.requests.isEmpty)
    }

    @Test("refresh-token rotation: the new refresh token is saved to the store (0600) and used for the next fetch")
    func rotation() throws {
        let scratch = ScratchDirectory()
        let storeDirectory = scratch.path + "/store"
        let initial = "CANARY-rt-initial-\(UInt32.random(in: 0...UInt32.max))"
        try LocalSecretDirectory(path: storeDirectory).set("refresh", bytes: Array(initial.utf8))
        try LocalSecretDirectory(path: storeDirectory).set("client", bytes: Array(Rig.clientSecret.utf8))
        let store = SecretStore(sources: ["client_secret": .store("client"), "partner_refresh": .store("refresh")], storeDirectory: storeDirectory)
        try store.load()
        let rig = try Rig(workers: 2, grant: .refreshToken(secret: "partner_refresh"), secrets: store, sink: store)
        rig.endpoint.set(.rotate, initialRefresh: initial)

        rig.acquire(4)
        #expect(rig.answers.wait(for: 4))
        #expect(rig.answers.tokens == Array(repeating: "CANARY-at-1", count: 4))
        #expect(rig.endpoint.requests.first?.body == "grant_type=refresh_token&refresh_token=\(initial)&scope=read+write")
        let path = storeDirectory + "/refresh"
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "CANARY-rt-1")
        var info = stat()
        #expect(stat(path, &info) == 0 && info.st_mode & 0o777 == 0o600)
        #expect(try FileManager.default.contentsOfDirectory(atPath: storeDirectory).sorted() == ["client", "refresh"])

        // Before the store re-reads the file the rotated value is used from memory...
        rig.clock.advance(1_000)
        #expect(rig.tokens.markStale(secret: "partner", token: try #require(rig.lastToken)))
        rig.acquire(1)
        #expect(rig.answers.wait(for: 5))
        #expect(rig.answers.tokens.last == "CANARY-at-2")
        #expect(rig.endpoint.requests.last?.body.contains("refresh_token=CANARY-rt-1&") == true)
        // ...and after, from the store.
        #expect(store.refresh().changed == ["partner_refresh"])
        rig.clock.advance(1_000)
        #expect(rig.tokens.markStale(secret: "partner", token: try #require(rig.lastToken)))
        rig.acquire(1)
        #expect(rig.answers.wait(for: 6))
        #expect(rig.answers.tokens.last == "CANARY-at-3")
        #expect(rig.endpoint.requests.last?.body.contains("refresh_token=CANARY-rt-2&") == true)
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "CANARY-rt-3")
    }

    @Test("an endpoint slower than the upstream timeout: every waiter gets response_timeout, the loops never block")
    func responseTimeout() throws {
        let rig = try Rig(workers: 2, upstreamTimeout: 300)
        rig.endpoint.set(.grant, delay: 1.5)
        let started = Date()
        rig.acquire(6)
        // While the fetch is pending the workers' loops keep running their other work.
        let echoed = Locked(0)
        for loop in rig.loops { loop.mailbox.post { echoed.withLock { $0 += 1 } } }
        usleep(100_000)
        #expect(echoed.withLock { $0 } == 2)
        #expect(rig.answers.all.isEmpty)
        #expect(rig.answers.wait(for: 6))
        #expect(Date().timeIntervalSince(started) < 1.4)
        #expect(rig.answers.failures.map(\.reason) == Array(repeating: .responseTimeout, count: 6))
        #expect(rig.answers.failures.first?.reason.code == "response_timeout")
    }

    @Test("the observer (the tripwire's feed) learns every access token and rotated refresh token; currentValues lists the live token")
    func observer() throws {
        let rig = try Rig(workers: 1)
        rig.acquire(1)
        #expect(rig.answers.wait(for: 1))
        #expect(rig.observed.withLock { $0.map(\.0) } == ["partner"])
        #expect(rig.observed.withLock { $0.map(\.1) } == [SecretValue("CANARY-at-1")])
        #expect(rig.tokens.currentValues == [SecretValue("CANARY-at-1")])
    }

    @Test("canaries: client secret, access and refresh tokens, and the endpoint's error text appear in no failure text")
    func canaries() throws {
        let rig = try Rig(workers: 1)
        let canary = "CANARY-error-body-\(UInt32.random(in: 0...UInt32.max))"
        rig.endpoint.set(.reject, canary: canary)
        rig.acquire(2)
        #expect(rig.answers.wait(for: 2))
        let failure = try #require(rig.answers.failures.first)
        #expect(failure.reason == .rejected(status: 400, error: .invalidClient))
        #expect(
            failure.description
                == "'partner' from https://127.0.0.1:\(rig.endpoint.port): refused (400 invalid_client)")
        let texts = rig.answers.all.map { "\($0)" } + rig.answers.failures.map { String(reflecting: $0) }
        rig.clock.advance(1_000)
        rig.endpoint.set(.grant)
        rig.acquire(1)
        #expect(rig.answers.wait(for: 3))
        let granted = rig.answers.all.map { "\($0)" } + [String(reflecting: rig.answers.all.last!)]
        for text in texts + granted {
            #expect(!text.contains("CANARY"), "\(text)")
        }
    }
}
