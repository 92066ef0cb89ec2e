import HTTP1Codec
import Testing

@testable import ScopePolicy

/// Numbers in a Location, a client's source network or address and a rate are read with a bound
/// before any arithmetic (docs/security-model.md, "Strict parsing"). One input per argument: a
/// trap would crash the test process.
@Suite("Scope policy: long numbers in Locations, networks and rates")
struct LongNumberPolicyTests {
    static let forms = [
        String(repeating: "7", count: 25), String(repeating: "9", count: 40), "9223372036854775807",
        "9223372036854775808", "18446744073709551615", "18446744073709551616", "0000000000000000000000001",
        "00000000000000000000000000000000256", "-1", "+1", "1e999", "1E400", "0x" + String(repeating: "f", count: 20),
    ]

    /// Every place a Location holds a number: the host's labels, the port, an IPv6 piece, an
    /// embedded IPv4, next to a percent escape and userinfo, absolute, scheme-relative and with
    /// the curl-only authority reading.
    static let locations: [String] = forms.flatMap { n in
        [
            "http://128.0.\(n).1/", "https://\(n).0.0.1/x", "http://1.2.3.\(n)", "//1.2.3.\(n)/p", "http://\(n)/",
            "http://a.\(n)/", "https://a.example:\(n)/", "//a.example:\(n)", "http://[::\(n)]/", "http://[::ffff:1.2.3.\(n)]/",
            "http://u:p@128.0.\(n).1:8080/", "http://%31.2.3.\(n)/", "http://1.2.3.\(n)%2f/", "http://api\\@1.2.3.\(n)/",
            "http:/1.2.3.\(n)/", "http:\\\\128.0.\(n).1\\", "  http://128.0.\(n).1  ",
        ]
    }

    @Test(
        "a Location with a long number is decided in every mode without trapping, and never followed to a long host",
        arguments: locations)
    func location(_ location: String) throws {
        let api = try Origin.parse("https://api.example")
        for mode in RedirectMode.allCases {
            let verdict = RedirectPolicy(mode: mode).decide(
                status: 302, location: location, requestMethod: "GET", from: api,
                pathAndQuery: "/v1", hops: 0)
            switch verdict {
            case .follow(let target, _, _), .pass(.some(let target)):
                #expect(target.origin.host.utf8.count < 40, "\(mode) \(location) -> \(target.origin)")
            default: break
            }
        }
        _ = RedirectPolicy.rfc3986Origin(location, base: api)
    }

    @Test("a long number in a source address or network is refused", arguments: forms)
    func sources(_ n: String) {
        for text in ["\(n).0.0.1", "10.\(n).0.0", "1.2.3.\(n)", "::ffff:1.2.3.\(n)", "::\(n)"] {
            #expect(IPAddress.parse(text) == nil, "\(text)")
        }
        for text in ["10.0.0.0/\(n)", "\(n).0.0.0/8", "fd00::/\(n)"] {
            if case .success(let cidr) = CIDR.parse(text) { Issue.record("\(text) -> \(cidr)") }
        }
    }

    @Test("a rate's count is at most seven digits, and the bucket's arithmetic stays in range at that bound", arguments: forms)
    func rates(_ n: String) {
        #expect(RateLimit.parse("\(n)/m") == nil, "\(n)")
        #expect(RateLimit.parse("\(n)/s") == nil, "\(n)")
    }

    @Test("the largest rate a config can hold runs its bucket without overflow, at the start and after a long idle")
    func largestRate() throws {
        let limit = try #require(RateLimit.parse("9999999/s"))
        var bucket = TokenBucket(limit: limit, now: 0)
        #expect(bucket.take(now: 0) == .allowed)
        #expect(bucket.take(now: UInt64.max) == .allowed)
        let slow = try #require(RateLimit.parse("1/m"))
        var empty = TokenBucket(limit: slow, now: 0)
        #expect(empty.take(now: 0) == .allowed)
        #expect(empty.take(now: 1) == .limited(retryAfterSeconds: 60))
    }
}
