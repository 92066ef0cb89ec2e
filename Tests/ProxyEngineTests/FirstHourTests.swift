import Foundation
import Testing
import TestSupport

/// What a new user meets first and must not be surprised by.
@Suite("First hour: defaults that do what the config says", .serialized)
struct FirstHourTests {
    @Test("a loopback http:// origin gets its credential without require_https: false (its traffic never leaves the host)")
    func loopbackInjectedByDefault() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let token = Findings.canary("token")
        let proxy = try ProxyHarness(yaml: """
            secrets: { token: { env: T } }
            scopes: [{ name: local, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${token}" } }]
            """, secrets: ["token": token])
        defer { proxy.stop() }
        _ = try proxy.exchange(Findings.request("\(origin.url)/v1/x", host: origin.authority))
        #expect(origin.requests.first?.header("authorization") == "Bearer \(token)")
    }
}
