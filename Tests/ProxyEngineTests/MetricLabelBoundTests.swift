import Foundation
import ScopePolicy
import TestSupport
import Testing

@testable import ProxyEngine

/// /metrics keeps every series it ever made. A label taken from what a client sends must come from a
/// set the configuration fixes, or one client makes the proxy's memory grow without end: the
/// spelling of a header name is the client's (2^n case patterns of one name, `_` for `-`).
@Suite("Metrics: header labels bounded by the configuration, whatever the spelling", .serialized)
struct MetricLabelBoundTests {
    static let yaml = """
        secrets:
          key: { env: KEY }
        sensitive_headers: [X-Custom-Secret]
        scopes:
          - name: fixture
            origins: ["ORIGIN"]
            require_https: false
            inject: { X-Injected-Key: "${key}" }

        """

    /// `name` in the `n`th case pattern, sometimes with `_` for `-` (deterministic per n).
    static func spelling(_ name: String, _ n: Int) -> String {
        var generator = SplitMix(seed: UInt64(n) &* 0x9E37_79B9 &+ UInt64(name.utf8.count))
        return String(
            name.map { character -> Character in
                let bit = generator.next() & 1 == 1
                if character == "-" { return n % 3 == 0 ? "_" : "-" }
                return bit ? Character(character.uppercased()) : Character(character.lowercased())
            })
    }

    /// Every name the proxy strips or injects here, and a few it does not know, in pattern `n`.
    static func request(_ origin: FixtureOrigin, _ n: Int) -> String {
        let names =
            SensitiveHeaders.builtIn.sorted() + ["x-custom-secret", "x-injected-key"] + SensitiveHeaders.methodOverride.sorted()
            + ["x-unrelated-\(n % 7)", "accept"]
        var text = "GET \(origin.url)/m HTTP/1.1\r\nHost: \(origin.authority)\r\n"
        for name in names where name != "proxy-authorization" { text += "\(spelling(name, n)): v\r\n" }
        return text + "\r\n"
    }

    /// The series lines of /metrics (not the HELP and TYPE lines), gauges left out.
    static func series(_ metrics: Metrics) -> [String] {
        metrics.render().split(separator: "\n").map(String.init)
            .filter { !$0.hasPrefix("#") && !$0.hasPrefix("scopeproxy_client_connections") && !$0.hasPrefix("scopeproxy_upstream_connections") }
    }

    /// Waits (bounded) until the proxy has counted `count` exchanges: a record is counted just after
    /// its response's last byte is written, so the client can be ahead of the counters.
    static func waitForRequests(_ metrics: Metrics, _ count: UInt64) -> Bool {
        for _ in 0..<1_000 {
            let total = series(metrics).filter { $0.hasPrefix("scopeproxy_requests_total{") }
                .compactMap { UInt64($0.split(separator: " ").last ?? "") }.reduce(0, +)
            if total >= count { return true }
            usleep(10_000)
        }
        return false
    }

    @Test("1,000 requests, each with every sensitive, configured and injected name in a new spelling: /metrics has as many series as after the first")
    func seriesBoundedWhateverTheSpelling() throws {
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let metrics = Metrics()
        let proxy = try ProxyHarness(yaml: Self.yaml.replacingOccurrences(of: "ORIGIN", with: origin.url), secrets: ["key": "INJECTED-7e2a"]) {
            $0.metrics = metrics
        }
        defer { proxy.stop() }
        let socket = try proxy.connect()
        let reader = HTTPReader(socket)

        try socket.send(Self.request(origin, 0))
        #expect(try reader.readResponse()?.status == 200)
        #expect(Self.waitForRequests(metrics, 1))
        let first = Self.series(metrics)
        let stored = metrics.storedEntries
        #expect(first.contains(#"scopeproxy_stripped_total{header="x-api-key"} 1"#), "\(first)")
        #expect(first.contains(#"scopeproxy_stripped_total{header="x-custom-secret"} 1"#))
        #expect(first.contains(#"scopeproxy_injected_total{header="x-injected-key"} 1"#))

        for n in 1..<1_000 {
            try socket.send(Self.request(origin, n))
            guard try reader.readResponse()?.status == 200 else {
                Issue.record("request \(n) failed")
                return
            }
        }
        #expect(Self.waitForRequests(metrics, 1_000))
        let after = Self.series(metrics)
        #expect(
            after.count == first.count,
            "series grew from \(first.count) to \(after.count): \(Set(after.map { $0.split(separator: " ")[0] }).subtracting(first.map { $0.split(separator: " ")[0] }).sorted().prefix(10))"
        )
        #expect(metrics.storedEntries == stored, "the counters keep \(metrics.storedEntries) entries after 1,000 requests, \(stored) after the first")
        #expect(after.contains(#"scopeproxy_stripped_total{header="x-api-key"} 1000"#), "every spelling counted under one label")
        #expect(!after.contains { $0.contains("x-unrelated") }, "a name the configuration does not know is no label")
        #expect(!after.contains { $0.contains("INJECTED-7e2a") })
    }
}

/// A small deterministic generator (SplitMix64): spellings that differ per request, random
/// rounds that replay from their seed.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
