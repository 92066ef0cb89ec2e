import Testing

@testable import ScopeConfig

/// Every number a config holds is read with a bound before any arithmetic (docs/security-model.md,
/// "Strict parsing"): `check` exits 2 and a reload keeps the old config, where an overflow would
/// end the process. One input per argument: a trap would crash the test process.
@Suite("Config: long numbers are refused, never an overflow")
struct LongNumberConfigTests {
    /// Values no field takes: past every bound, past Int64 and UInt64.
    static let huge = [
        String(repeating: "7", count: 25), String(repeating: "9", count: 40), "9223372036854775807",
        "9223372036854775808", "18446744073709551615", "18446744073709551616", "9223372036854776",
    ]
    /// Forms a field may read as a small number or refuse; either way, no trap.
    static let odd = [
        "0000000000000000000000001", "00000000000000000000000000000000256", "-1", "+1", "1e999", "1E400", "0x" + String(repeating: "f", count: 20),
    ]

    /// Each place a number sits in a config, with `N` where the number goes.
    static let places = [
        "timeouts: { connect: Nms }", "timeouts: { upstream: Ns }", "timeouts: { idle: Nm }", "timeouts: { client_header: Nh }",
        "scopes: [{ name: a, origins: [\"http://128.0.N.1\"] }]", "scopes: [{ name: a, origins: [\"https://1.2.3.N\"] }]",
        "scopes: [{ name: a, origins: [\"https://a.example:N\"] }]",
        "redirects: { allow: [\"https://N.0.0.1\"] }", "redirects: { max_hops: N }", "limits: { max_connections: N }",
        "limits: { h2_max_concurrent_streams: N }",
        "clients: [{ name: c, uid: N }]", "clients: [{ name: c, source: [\"10.0.0.0/N\"] }]",
        "clients: [{ name: c, source: [\"N.0.0.1\"] }]", "clients: [{ name: c, source: [\"::ffff:1.2.3.N\"] }]",
        "clients: [{ name: c, source: [\"10.0.0.0/8\"], rate: \"N/m\" }]", "listen: \"127.0.0.1:N\"", "admin: \"127.0.0.1:N\"",
        "routes: [{ listen: \"127.0.0.1:0\", upstream: \"http://127.0.N.1\" }]", "tls: { intercept: [\"1.2.3.N\"] }",
        "secrets: { t: { oauth2: { token_url: \"https://1.2.N.4/token\", client_id: c, client_secret: t } } }",
    ]

    static func text(_ place: String, _ number: String) -> String {
        place.replacingOccurrences(of: "N", with: number)
    }

    @Test("a number past every bound is refused with FILE:LINE:COLUMN", arguments: places, huge)
    func hugeRefused(_ place: String, _ number: String) {
        let yaml = Self.text(place, number)
        #expect(throws: ConfigError.self, "\(yaml)") { try ConfigLoader.parse(yaml, file: "n.yaml", home: "/home/t") }
    }

    @Test("signs, leading zeros, exponents and hex load or are refused, never trap", arguments: places, odd)
    func oddForms(_ place: String, _ number: String) {
        let yaml = Self.text(place, number)
        do { _ = try ConfigLoader.parse(yaml, file: "n.yaml", home: "/home/t") } catch { #expect(error.description.hasPrefix("n.yaml:1:")) }
    }

    @Test(
        "a duration is 1*DIGIT and a unit: no sign, at most a day",
        arguments: [
            ("+5s", nil), ("-5s", nil), ("0s", nil), ("86400s", 86_400_000), ("86401s", nil), ("1440m", 86_400_000), ("24h", 86_400_000),
            ("25h", nil), ("0000000000000000000000002s", 2000), ("86400000ms", 86_400_000), ("86400001ms", nil),
        ] as [(String, Int?)])
    func durations(_ text: String, _ milliseconds: Int?) {
        let config = try? ConfigLoader.parse("timeouts: { connect: \(text) }", file: "n.yaml", home: "/home/t")
        #expect(config?.timeouts.connect == milliseconds, "\(text)")
    }
}
