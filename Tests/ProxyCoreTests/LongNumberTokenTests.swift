import ScopePolicy
import Testing

@testable import ProxyCore

/// A token endpoint's numbers are read with a bound before any arithmetic (docs/security-model.md,
/// "Strict parsing"): a long `expires_in` is a lifetime of a year (the longest the cache keeps a
/// token), never an overflow. One input per argument: a trap would crash the test process.
@Suite("OAuth2: long numbers in a token answer")
struct LongNumberTokenTests {
    static let year = 365 * 86_400

    @Test(
        "expires_in of any length is a whole number of seconds, capped at a year",
        arguments: [
            (String(repeating: "7", count: 25), year), (String(repeating: "9", count: 40), year), ("9223372036854775807", year),
            ("9223372036854775808", year), ("18446744073709551615", year), ("18446744073709551616", year),
            ("0000000000000000000000001", 1), ("00000000000000000000000000000000256", 256), ("31536001", year), ("3600", 3600),
        ] as [(String, Int)])
    func longExpiry(_ digits: String, _ seconds: Int) {
        // A JSON number (JSON has no leading zeros: those come as a string only), and the numeric
        // string some endpoints send.
        for form in (digits.hasPrefix("0") ? [] : [digits]) + ["\"\(digits)\""] {
            let body = #"{"access_token":"at","token_type":"Bearer","expires_in":"# + form + "}"
            guard case .success(let grant) = OAuth2TokenResponse.parse(status: 200, body: Array(body.utf8)) else {
                Issue.record("\(form) refused")
                continue
            }
            #expect(grant.expiresIn == seconds, "\(form)")
            if seconds == Self.year {
                #expect(TokenCachePolicy().lifetime(expiresIn: grant.expiresIn) == UInt64(Self.year) * 1000 - 30_000, "\(form)")
            }
        }
    }

    @Test("expires_in that is not 1*DIGIT is refused", arguments: ["-1", "1e999", "1E400", "\"+1\"", "\"-1\"", "\"1e999\"", "1.5", "\"0x10\""])
    func notDigits(_ form: String) {
        let body = #"{"access_token":"at","token_type":"Bearer","expires_in":"# + form + "}"
        #expect(
            OAuth2TokenResponse.parse(status: 200, body: Array(body.utf8))
                == .failure(.malformedResponse("expires_in is not a whole number of seconds")), "\(form)")
    }

    @Test("the cache's lifetime is bounded whatever it is handed", arguments: [Int.max, Int.max / 1000 + 1, Int.min, -1, 0])
    func lifetimeBounded(_ expiresIn: Int) {
        let lifetime = TokenCachePolicy().lifetime(expiresIn: expiresIn)
        #expect(lifetime >= 1_000 && lifetime <= UInt64(Self.year) * 1000, "\(expiresIn)")
    }
}
