import HTTP1Codec
import ProxyCore
import ScopePolicy
import SecretScan
import Testing

/// The scrub and the guard look for every value that may still be valid, for every client
/// (docs/security-model.md, "No oracle"). Canaries: `A-AGENT-ONLY-3f9c` (what scope a injects
/// for the agent only), `OLD-VALUE-0000-aaaa` / `NEW-VALUE-1111-bbbb` (a rotated value).
@Suite("No oracle: the scrub is per origin, replaced values stay watched")
struct NoOracleTests {
    static let agentOnly = Fixture(
        """
        secrets:
          a_token: { env: A_TOKEN }
          proxy_password: { env: PROXY_PASSWORD }
        scopes:
          - name: a
            origins: ["https://a.example"]
            inject: { X-A-Key: "${a_token}" }
            clients: [agent]
        clients:
          - { name: agent, auth: { bearer: proxy_password } }
          - { name: anonymous }

        """, secrets: ["a_token": "A-AGENT-ONLY-3f9c", "proxy_password": "let-me-in-please"])

    @Test("a client the scope does not serve gets nothing injected, and its response is scrubbed of what the scope sends for others")
    func scrubCoversOtherClientsSecrets() {
        var p = Playbook(Self.agentOnly)
        p.sent(["GET https://a.example/records/1 HTTP/1.1", "Host: a.example"], to: origin("https://a.example"))
        #expect(!(p.sent(to: hop(1)) ?? "").contains("A-AGENT-ONLY-3f9c"), "anonymous is not served by scope a")
        let returned = p.feed(.responseHead(hop(1), response("HTTP/1.1 200 OK", "X-Stored: A-AGENT-ONLY-3f9c", "Content-Length: 4")))
        let written = returned.compactMap { if case .writeToClient(let bytes) = $0 { text(bytes) } else { nil } }.joined()
        #expect(written.contains("X-Stored: *****************\r\n"), "the head is scrubbed")
        let watch = returned.compactMap { if case .relayResponseBody(_, _, _, _, let watch) = $0 { watch } else { nil } }.first
        #expect(Set(watch?.secrets ?? []) == ["a_token"], "the body relay masks the agent's secret for the anonymous client too")
    }

    static let old: [UInt8] = Array("OLD-VALUE-0000-aaaa".utf8)
    static let new: [UInt8] = Array("NEW-VALUE-1111-bbbb".utf8)

    @Test("a replaced value stays in the scrub and the guard for ten minutes, then leaves; a reload keeps it")
    func replacedValueRetained() {
        let index = SecretValueIndex()
        index.update(values: ["token": Self.old], now: 1_000)
        index.update(values: ["token": Self.new], now: 2_000)
        let scrub = index.scrubWatch(["token"])
        #expect(scrub?.firstMatch(in: Self.old) != nil, "the old value is still masked")
        #expect(scrub?.firstMatch(in: Self.new) != nil)
        let guarding = index.guardWatch(allowed: [], values: true, placeholders: false)
        #expect(guarding?.firstMatch(in: Self.old) != nil, "and still guarded")

        // A reloaded configuration's index starts from the old one's values.
        let reloaded = SecretValueIndex()
        reloaded.inherit(from: index)
        reloaded.update(values: ["token": Self.new], now: 3_000)
        #expect(reloaded.scrubWatch(["token"])?.firstMatch(in: Self.old) != nil)

        let tenMinutes = SecretValueIndex.retiredRetentionMilliseconds
        index.update(expiring: [:], now: 2_000 + tenMinutes - 1)
        #expect(index.scrubWatch(["token"])?.firstMatch(in: Self.old) != nil)
        index.update(expiring: [:], now: 2_000 + tenMinutes)
        #expect(index.scrubWatch(["token"])?.firstMatch(in: Self.old) == nil, "gone once its time is up")
        #expect(index.scrubWatch(["token"])?.firstMatch(in: Self.new) != nil)
    }

    @Test("earlier values a token source still holds valid are watched as long as it passes them")
    func earlierTokensWatched() {
        let index = SecretValueIndex()
        index.update(values: ["token": Self.new], earlier: ["token": [Self.old]], now: 0)
        #expect(index.scrubWatch(["token"])?.firstMatch(in: Self.old) != nil)
        index.update(expiring: [:], now: 1)
        #expect(index.scrubWatch(["token"])?.firstMatch(in: Self.old) == nil)
    }

    @Test("the hold-back depends on the values' lengths only")
    func holdBackFromLengths() {
        let first = SecretValueIndex(values: ["a": Array("plain-value-aaaa".utf8)])
        let second = SecretValueIndex(values: ["a": Array("q\"u\\o%t/e\u{1}-bbbbb".utf8)])
        #expect(first.holdBack == second.holdBack)
        #expect(first.scrubWatch(["a"])?.holdBack == second.scrubWatch(["a"])?.holdBack)
        #expect(first.holdBack == SecretValueIndex.longestFormBound(length: 16) - 1)
    }

    @Test("a 401 cannot rotate an access token past the still-valid ones the scrub and guard keep")
    func staleMarksBounded() {
        var policy = TokenCachePolicy()
        policy.maxReplacedValid = 3
        let cache = OAuth2TokenCache(secret: "t", policy: policy)
        var now: UInt64 = 10_000
        var dropped = 0
        for round in 0..<6 {
            let waiter = TokenWaiter(id: UInt64(round)) { _ in }
            guard case .fetch(let ticket) = cache.acquire(now: now, waiter: waiter) else {
                Issue.record("round \(round): expected a fetch")
                return
            }
            let grant = TokenGrant(value: SecretValue(bytes: Array("tok-\(round)-padding".utf8)), expiresIn: 3600, refreshToken: nil)
            guard case .success(let token) = cache.complete(ticket, .success(grant), now: now).result else { return }
            now += 2_000
            if cache.markStale(token, now: now) { dropped += 1 } else { break }
        }
        #expect(dropped == 3, "the fourth 401 within the tokens' hour keeps the current token")
        // Once the replaced tokens have expired, a 401 drops the current one again.
        if let current = cache.current { #expect(cache.markStale(current, now: now + 3_600_000)) }
    }
}

extension NoOracleTests {
    @Test("a value too long to scan does not set the hold-back: bodies never wait for megabytes")
    func excludedValueDoesNotSetHoldBack() {
        let huge = [UInt8](repeating: 0x61, count: 2_000_000) + Array("-tail".utf8)
        let index = SecretValueIndex(values: ["huge": huge, "token": Array("token-value-1234".utf8)])
        #expect(index.exclusions.map(\.secret) == ["huge"])
        #expect(index.holdBack == SecretValueIndex.longestFormBound(length: 16) - 1)
    }
}
