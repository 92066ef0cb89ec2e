import HTTP1Codec
import PosixSupport
import ProxyCore
import ScopePolicy
import Testing

/// Waiters that record what they were delivered (the engine's would post to a worker).
private final class Deliveries: Sendable {
    private let received = Locked<[UInt64: [Result<AccessToken, TokenFailure>]]>([:])

    func waiter(_ id: UInt64) -> TokenWaiter {
        TokenWaiter(id: id) { result in self.received.withLock { $0[id, default: []].append(result) } }
    }

    func results(_ id: UInt64) -> [Result<AccessToken, TokenFailure>] { received.withLock { $0[id] ?? [] } }
    var count: Int { received.withLock { $0.values.reduce(0) { $0 + $1.count } } }
}

private let endpoint = try! Origin.parse("https://auth.example")
private func grant(_ token: String, expiresIn: Int? = 3600, refresh: String? = nil) -> Result<TokenGrant, TokenFailure> {
    .success(TokenGrant(value: SecretValue(token), expiresIn: expiresIn, refreshToken: refresh.map(SecretValue.init)))
}
private let down = TokenFailure(secret: "partner", endpoint: endpoint, reason: .refused)

/// Completes a fetch and delivers to the waiters, as the engine does.
private func finish(_ cache: OAuth2TokenCache, _ ticket: TokenFetchTicket, _ result: Result<TokenGrant, TokenFailure>, now: UInt64) -> Int {
    let (waiters, delivered) = cache.complete(ticket, result, now: now)
    for waiter in waiters { waiter.deliver(delivered) }
    return waiters.count
}

@Suite("OAuth2 token cache: single flight, expiry, staleness, retry floor")
struct OAuth2TokenCacheTests {
    /// One row: a step and what it must decide.
    enum Step {
        case acquire(at: UInt64, expect: Expect)
        case complete(at: UInt64, Result<TokenGrant, TokenFailure>, wakes: Int)
        case markStaleCurrent(expectDropped: Bool)
    }

    enum Expect: Equatable {
        case ready(String)
        case wait
        case fetch
        case failed
    }

    /// Runs the steps against one cache; the last `.fetch` ticket is what `.complete` completes.
    private func run(_ steps: [Step], sourceLocation: SourceLocation = #_sourceLocation) {
        let cache = OAuth2TokenCache(secret: "partner")
        let deliveries = Deliveries()
        var ticket: TokenFetchTicket?
        var current: AccessToken?
        var nextID: UInt64 = 0
        for (index, step) in steps.enumerated() {
            switch step {
            case .acquire(let now, let expect):
                nextID += 1
                let decision = cache.acquire(now: now, waiter: deliveries.waiter(nextID))
                switch decision {
                case .ready(let token):
                    #expect(
                        expect == .ready(String(decoding: token.value.exposedBytes, as: UTF8.self)), "step \(index)", sourceLocation: sourceLocation)
                    current = token
                case .wait: #expect(expect == .wait, "step \(index)", sourceLocation: sourceLocation)
                case .fetch(let issued):
                    #expect(expect == .fetch, "step \(index)", sourceLocation: sourceLocation)
                    ticket = issued
                case .failed: #expect(expect == .failed, "step \(index)", sourceLocation: sourceLocation)
                }
            case .complete(let now, let result, let wakes):
                guard let ticket else {
                    Issue.record("step \(index): no fetch to complete", sourceLocation: sourceLocation)
                    return
                }
                let (waiters, delivered) = cache.complete(ticket, result, now: now)
                for waiter in waiters { waiter.deliver(delivered) }
                if case .success(let token) = delivered { current = token }
                #expect(waiters.count == wakes, "step \(index)", sourceLocation: sourceLocation)
            case .markStaleCurrent(let expectDropped):
                guard let current else { return }
                #expect(cache.markStale(current) == expectDropped, "step \(index)", sourceLocation: sourceLocation)
            }
        }
    }

    @Test("single flight: the first caller fetches, the others wait, all are woken once with the token, later callers get it cached")
    func singleFlight() {
        run([
            .acquire(at: 0, expect: .fetch),
            .acquire(at: 1, expect: .wait),
            .acquire(at: 2, expect: .wait),
            .acquire(at: 3, expect: .wait),
            .complete(at: 10, grant("t1"), wakes: 4),
            .acquire(at: 11, expect: .ready("t1")),
            .acquire(at: 3_000_000, expect: .ready("t1")),
        ])
    }

    @Test("expiry: cached until expires_in - 30 s, then exactly one refresh while the others wait")
    func expiry() {
        run([
            .acquire(at: 0, expect: .fetch),
            .complete(at: 0, grant("t1", expiresIn: 100), wakes: 1),
            .acquire(at: 69_999, expect: .ready("t1")),
            .acquire(at: 70_000, expect: .fetch),
            .acquire(at: 70_001, expect: .wait),
            .acquire(at: 70_002, expect: .wait),
            .complete(at: 70_010, grant("t2", expiresIn: 100), wakes: 3),
            .acquire(at: 70_011, expect: .ready("t2")),
        ])
    }

    @Test("no expires_in: five minutes")
    func defaultLifetime() {
        run([
            .acquire(at: 0, expect: .fetch),
            .complete(at: 0, grant("t1", expiresIn: nil), wakes: 1),
            .acquire(at: 299_999, expect: .ready("t1")),
            .acquire(at: 300_000, expect: .fetch),
        ])
    }

    @Test("a 401 marks the current token stale: the next acquire fetches once; a second 401 for the same token changes nothing")
    func staleAfter401() {
        run([
            .acquire(at: 0, expect: .fetch),
            .complete(at: 0, grant("t1"), wakes: 1),
            .acquire(at: 5, expect: .ready("t1")),
            .markStaleCurrent(expectDropped: true),
            .markStaleCurrent(expectDropped: false),
            .acquire(at: 6, expect: .fetch),
            .acquire(at: 7, expect: .wait),
            .complete(at: 8, grant("t2"), wakes: 2),
            .acquire(at: 9, expect: .ready("t2")),
        ])
    }

    @Test("failure wakes every waiter with it; during the 1 s retry floor callers fail at once; then one new fetch; recovery")
    func retryFloor() {
        run([
            .acquire(at: 0, expect: .fetch),
            .acquire(at: 1, expect: .wait),
            .acquire(at: 2, expect: .wait),
            .complete(at: 100, .failure(down), wakes: 3),
            .acquire(at: 101, expect: .failed),
            .acquire(at: 1_099, expect: .failed),
            .acquire(at: 1_100, expect: .fetch),
            .acquire(at: 1_101, expect: .wait),
            .complete(at: 1_200, grant("t1"), wakes: 2),
            .acquire(at: 1_201, expect: .ready("t1")),
        ])
    }

    @Test("a late 401 for an old token does not discard the fresh one")
    func late401() {
        let cache = OAuth2TokenCache(secret: "partner")
        let deliveries = Deliveries()
        guard case .fetch(let first) = cache.acquire(now: 0, waiter: deliveries.waiter(1)) else { Issue.record("no fetch"); return }
        _ = finish(cache, first, grant("old"), now: 0)
        guard case .ready(let old) = cache.acquire(now: 1, waiter: deliveries.waiter(2)) else { Issue.record("not ready"); return }
        cache.markStale(old)
        guard case .fetch(let second) = cache.acquire(now: 2, waiter: deliveries.waiter(3)) else { Issue.record("no refetch"); return }
        // The old token's 401 arrives again while the new fetch is in flight, and after it ended.
        #expect(!cache.markStale(old))
        _ = finish(cache, second, grant("new"), now: 3)
        #expect(!cache.markStale(old))
        guard case .ready(let fresh) = cache.acquire(now: 4, waiter: deliveries.waiter(4)) else { Issue.record("not ready"); return }
        #expect(fresh.value == SecretValue("new"))
        #expect(fresh.generation != old.generation)
    }

    @Test("waiters get the result exactly once; a stale ticket completes nothing; a withdrawn waiter is not woken")
    func deliveriesOnce() {
        let cache = OAuth2TokenCache(secret: "partner")
        let deliveries = Deliveries()
        guard case .fetch(let ticket) = cache.acquire(now: 0, waiter: deliveries.waiter(1)) else { Issue.record("no fetch"); return }
        #expect(cache.acquire(now: 0, waiter: deliveries.waiter(2)) == .wait)
        #expect(cache.acquire(now: 0, waiter: deliveries.waiter(3)) == .wait)
        #expect(cache.withdraw(waiterID: 3))
        #expect(cache.waiting == 2)
        #expect(finish(cache, ticket, grant("t1"), now: 1) == 2)
        #expect(finish(cache, ticket, grant("again"), now: 2) == 0)
        #expect(deliveries.results(1).count == 1)
        #expect(deliveries.results(2).count == 1)
        #expect(deliveries.results(3).isEmpty)
        if case .success(let token) = deliveries.results(2).first { #expect(token.value == SecretValue("t1")) } else { Issue.record("not delivered") }
    }

    @Test("lifetimes: expires_in - 30 s, half of a short one, five minutes without")
    func lifetimes() {
        let policy = TokenCachePolicy()
        #expect(policy.lifetime(expiresIn: 3600) == 3_570_000)
        #expect(policy.lifetime(expiresIn: 60) == 30_000)
        #expect(policy.lifetime(expiresIn: 40) == 20_000)
        #expect(policy.lifetime(expiresIn: 0) == 1_000, "never under the retry floor: expires_in 0 is not a token per request")
        #expect(policy.lifetime(expiresIn: nil) == 300_000)
    }

    @Test("50 acquisitions from 5 threads at once: exactly one fetch, 50 deliveries")
    func threadedSingleFlight() async {
        let cache = OAuth2TokenCache(secret: "partner")
        let deliveries = Deliveries()
        let fetches = Locked<[TokenFetchTicket]>([])
        await withTaskGroup(of: Void.self) { group in
            for thread in 0..<5 {
                group.addTask {
                    for index in 0..<10 {
                        let id = UInt64(thread * 10 + index + 1)
                        if case .fetch(let ticket) = cache.acquire(now: 0, waiter: deliveries.waiter(id)) {
                            fetches.withLock { $0.append(ticket) }
                        }
                    }
                }
            }
        }
        let tickets = fetches.withLock { $0 }
        #expect(tickets.count == 1)
        if let ticket = tickets.first { #expect(finish(cache, ticket, grant("t1"), now: 1) == 50) }
        #expect(deliveries.count == 50)
    }
}
