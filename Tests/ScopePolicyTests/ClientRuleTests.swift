import HTTP1Codec
import Testing

@testable import ScopePolicy

private func basic(_ text: String) -> String { "Basic " + Base64.encode(Array(text.utf8)) }

@Suite("Clients: Proxy-Authorization parser (hostile inputs)")
struct ProxyAuthorizationParserTests {
    struct Row: Sendable, CustomTestStringConvertible {
        let name: String
        let value: String
        let expected: ProxyAuthorization
        var testDescription: String { name }
    }

    static let rows: [Row] = [
        Row(name: "Basic user:password", value: basic("me:pw"), expected: .basic(user: Array("me".utf8), password: Array("pw".utf8))),
        Row(
            name: "scheme without case", value: "bAsIc " + Base64.encode(Array("me:pw".utf8)),
            expected: .basic(user: Array("me".utf8), password: Array("pw".utf8))),
        Row(
            name: "a colon in the password stays in it", value: basic("me:a:b"), expected: .basic(user: Array("me".utf8), password: Array("a:b".utf8))
        ),
        Row(name: "empty user", value: basic(":pw"), expected: .basic(user: [], password: Array("pw".utf8))),
        Row(
            name: "non-ASCII password bytes kept as bytes", value: "Basic " + Base64.encode([0x6D, 0x3A, 0xC3, 0xA9]),
            expected: .basic(user: [0x6D], password: [0xC3, 0xA9])),
        Row(name: "Bearer token", value: "Bearer abc.def-ghi_~+/=", expected: .bearer(token: Array("abc.def-ghi_~+/=".utf8))),
        Row(name: "surrounding spaces", value: "  Bearer   tok  ", expected: .bearer(token: Array("tok".utf8))),
        Row(name: "Bearer with a space inside", value: "Bearer a b", expected: .malformed(.unknownScheme)),
        Row(name: "missing colon", value: basic("mepw"), expected: .malformed(.missingColon)),
        Row(name: "bad base64 character", value: "Basic bWU6c*==", expected: .malformed(.badBase64)),
        Row(name: "base64 without padding", value: "Basic bWU6cHc", expected: .malformed(.badBase64)),
        Row(name: "base64 with three padding characters", value: "Basic bWU===", expected: .malformed(.badBase64)),
        Row(name: "padding in the middle", value: "Basic bW=6cHc=", expected: .malformed(.badBase64)),
        Row(name: "non-canonical trailing bits", value: "Basic bWU6cHd=", expected: .malformed(.badBase64)),
        Row(name: "scheme only", value: "Basic", expected: .malformed(.empty)),
        Row(name: "scheme and spaces only", value: "Bearer   ", expected: .malformed(.empty)),
        Row(name: "a word alone", value: "Token", expected: .malformed(.unknownScheme)),
        Row(name: "empty", value: "", expected: .malformed(.empty)),
        Row(name: "unknown scheme", value: "Digest username=\"me\"", expected: .malformed(.unknownScheme)),
        Row(name: "huge value", value: "Bearer " + String(repeating: "a", count: 5000), expected: .malformed(.tooLong)),
        Row(name: "NUL in base64", value: "Basic bWU6\u{0}cHc=", expected: .malformed(.badBase64)),
    ]

    @Test("each value parses to what the row says", arguments: rows)
    func parse(_ row: Row) {
        #expect(ProxyAuthorization.parse(row.value) == row.expected)
    }

    @Test("a parsed credential never prints its bytes")
    func redacted() {
        let parsed = ProxyAuthorization.parse(basic("me:CANARY-secret"))
        #expect(!"\(parsed)".contains("CANARY"))
        #expect(!String(reflecting: parsed).contains("CANARY"))
    }

    @Test("constant-time comparison: equal, different, different lengths")
    func compare() {
        #expect(ProxyAuthorization.constantTimeEqual([1, 2, 3], [1, 2, 3]))
        #expect(!ProxyAuthorization.constantTimeEqual([1, 2, 3], [1, 2, 4]))
        #expect(!ProxyAuthorization.constantTimeEqual([1, 2], [1, 2, 0]))
        #expect(!ProxyAuthorization.constantTimeEqual([], [0]))
    }
}

@Suite("Clients: CIDR parser and matching (hostile inputs)")
struct CIDRTests {
    @Test(
        "valid networks and what they contain",
        arguments: [
            ("10.0.0.0/8", "10.255.1.2", true), ("10.0.0.0/8", "11.0.0.1", false),
            ("10.0.0.0/8", "::ffff:10.1.2.3", true),  // IPv4-mapped: a dual-stack listener's view of an IPv4 client
            ("192.168.1.7", "192.168.1.7", true), ("192.168.1.7", "192.168.1.8", false),
            ("0.0.0.0/0", "1.2.3.4", true), ("0.0.0.0/0", "::1", false),
            ("fd00::/8", "fd12::1", true), ("fd00::/8", "fe80::1", false),
            ("::/0", "10.0.0.1", true), ("::1/128", "::1", true),
            ("172.16.0.0/12", "172.31.255.255", true), ("172.16.0.0/12", "172.32.0.0", false),
        ])
    func contains(_ network: String, _ address: String, _ expected: Bool) throws {
        let cidr = try CIDR.parse(network).get()
        let ip = try #require(IPAddress.parse(address))
        #expect(cidr.contains(ip) == expected)
    }

    @Test(
        "refused",
        arguments: [
            ("10.0.0.0/33", CIDR.ParseError.invalidPrefix), ("::/129", .invalidPrefix), ("10.0.0.0/", .invalidPrefix),
            ("10.0.0.0/08", .invalidPrefix), ("10.0.0.0/-1", .invalidPrefix), ("10.0.0.0/8/8", .invalidPrefix),
            ("010.0.0.0/8", .invalidAddress), ("10.0.0.01", .invalidAddress), ("10.0.0", .invalidAddress),
            ("10.0.0.0.0", .invalidAddress), ("256.0.0.0/8", .invalidAddress), ("0x0A.0.0.0/8", .invalidAddress),
            ("10.0.0.1/8", .hostBitsSet), ("fd00::1/8", .hostBitsSet), ("", .invalidAddress), ("/8", .invalidAddress),
            ("[::1]/128", .invalidAddress), ("fe80::1%eth0/64", .invalidAddress), (" 10.0.0.0/8", .invalidAddress),
            (String(repeating: "1", count: 100), .invalidAddress),
        ])
    func refused(_ text: String, _ expected: CIDR.ParseError) {
        #expect(throws: expected) { try CIDR.parse(text).get() }
    }

    @Test("addresses: strict IPv4, mapped IPv6 is IPv4, loopback")
    func addresses() {
        #expect(IPAddress.parse("127.0.0.1") == IPAddress.parse("::ffff:127.0.0.1"))
        #expect(IPAddress.parse("127.0.0.1")?.description == "127.0.0.1")
        #expect(IPAddress.parse("::1")?.description == "::1")
        #expect(IPAddress.parse("127.9.9.9")?.isLoopback == true)
        #expect(IPAddress.parse("::ffff:127.0.0.1")?.isLoopback == true)
        #expect(IPAddress.parse("::1")?.isLoopback == true)
        #expect(IPAddress.parse("::2")?.isLoopback == false)
        #expect(IPAddress.parse("1.2.3") == nil)
        #expect(IPAddress.parse("01.2.3.4") == nil)
        #expect(IPAddress.parse("1.2.3.4 ") == nil)
    }
}

@Suite("Clients: rate limit token bucket (time injected)")
struct TokenBucketTests {
    @Test(
        "parse",
        arguments: [
            ("10/s", RateLimit(count: 10, periodSeconds: 1) as RateLimit?), ("100/m", RateLimit(count: 100, periodSeconds: 60)),
            ("0/s", nil), ("10/h", nil), ("010/s", nil), ("-1/s", nil), ("10", nil), ("/s", nil), ("10/s/s", nil),
            ("99999999/s", nil),
        ])
    func parse(_ text: String, _ expected: RateLimit?) {
        #expect(RateLimit.parse(text) == expected)
    }

    /// (microseconds since start, expected decision)
    static let twoPerSecond: [(UInt64, TokenBucket.Decision)] = [
        (0, .allowed), (0, .allowed),  // the burst: 2
        (0, .limited(retryAfterSeconds: 1)),  // empty; a token is back in 0.5 s -> 1 (whole seconds)
        (100_000, .limited(retryAfterSeconds: 1)),
        (500_000, .allowed),  // one token refilled after 0.5 s
        (500_000, .limited(retryAfterSeconds: 1)),
        (10_000_000, .allowed), (10_000_000, .allowed),  // a long pause refills to the burst, not beyond
        (10_000_000, .limited(retryAfterSeconds: 1)),
    ]

    @Test("2/s: burst, refusal with Retry-After, recovery, cap")
    func perSecond() {
        var bucket = TokenBucket(limit: RateLimit(count: 2, periodSeconds: 1), now: 0)
        for (index, (now, expected)) in Self.twoPerSecond.enumerated() {
            #expect(bucket.take(now: now) == expected, "step \(index)")
        }
    }

    @Test("3/m: Retry-After counts the seconds until the next token")
    func perMinute() {
        var bucket = TokenBucket(limit: RateLimit(count: 3, periodSeconds: 60), now: 0)
        let steps: [(UInt64, TokenBucket.Decision)] = [
            (0, .allowed), (0, .allowed), (0, .allowed),
            (0, .limited(retryAfterSeconds: 20)), (5_000_000, .limited(retryAfterSeconds: 15)),
            (19_500_000, .limited(retryAfterSeconds: 1)), (20_000_000, .allowed), (20_000_000, .limited(retryAfterSeconds: 20)),
        ]
        for (index, (now, expected)) in steps.enumerated() {
            #expect(bucket.take(now: now) == expected, "step \(index)")
        }
    }
}

@Suite("Clients: certificate subject matching")
struct SubjectMatchTests {
    @Test(
        "forms",
        arguments: [
            ("CN=tool", ["tool"], [String](), true), ("CN=tool", ["other"], ["DNS:tool"], false),
            ("DNS:tool.example", [], ["DNS:TOOL.example"], true), ("email:a@b", [], ["email:a@b"], true),
            ("URI:spiffe://x/y", [], ["URI:spiffe://x/y"], true), ("IP:10.0.0.1", [], ["IP:10.0.0.2"], false),
        ])
    func matches(_ text: String, _ commonNames: [String], _ sans: [String], _ expected: Bool) throws {
        let subject = try #require(SubjectMatch.parse(text))
        #expect(subject.matches(commonNames: commonNames, subjectAltNames: sans) == expected)
    }

    @Test("refused forms", arguments: ["O=tool", "CN=", "DNS:", "tool", "cn=tool"])
    func refused(_ text: String) {
        #expect(SubjectMatch.parse(text) == nil)
    }
}

@Suite("Clients: a scope serves only its clients")
struct ScopeClientsTests {
    static let origin = try! Origin.parse("https://api.example")
    static let policy = ScopePolicy(scopes: [
        Scope(
            name: "api", origins: [origin], inject: [.init(header: "Authorization", template: try! HeaderTemplate.parse("Bearer ${tok}"))],
            pass: ["cookie"], clients: ["me"])
    ])

    func apply(client: String?) throws -> ScopedRequest {
        var fields = HTTPFields()
        fields.append(name: "Cookie", value: "sid=CANARY-cookie")
        fields.append(name: "X-API-Key", value: "CANARY-key")
        return try Self.policy.apply(
            method: "GET", origin: Self.origin, pathAndQuery: "/", fields: fields, hasUserinfo: false,
            secrets: StaticSecrets(["tok": "CANARY-token"]), client: client
        ).get()
    }

    @Test("the served client gets the injection and its passed cookie")
    func served() throws {
        let scoped = try apply(client: "me")
        #expect(scoped.fields.first("authorization") == "Bearer CANARY-token")
        #expect(scoped.fields.first("cookie") == "sid=CANARY-cookie")
        #expect(scoped.decision.scopes == ["api"])
    }

    @Test(
        "another client, or an unnamed one: nothing injected or passed, its credentials stripped, the reason said",
        arguments: ["agent", nil] as [String?])
    func notServed(_ client: String?) throws {
        let scoped = try apply(client: client)
        #expect(scoped.fields.first("authorization") == nil)
        #expect(scoped.fields.first("cookie") == nil)
        #expect(scoped.fields.first("x-api-key") == nil)
        #expect(Set(scoped.decision.stripped) == ["Cookie", "X-API-Key"])
        #expect(scoped.decision.scopes.isEmpty)
        #expect(scoped.decision.reason == .originNotInScope)
        #expect(scoped.decision.skipped == [SkippedInjection(scope: "api", why: .clientNotServed)])
    }
}
