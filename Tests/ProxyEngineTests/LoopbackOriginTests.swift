import Foundation
import TestSupport
import Testing

/// An http:// origin needs no `require_https: false` when it is loopback (its traffic never leaves
/// the host); loopback is decided by the parsed host, never by a string prefix (docs/configuration.md).
@Suite("Loopback http origins: decided by the parsed host, credentialed without require_https: false", .serialized)
struct LoopbackOriginTests {
    @Test("a loopback http:// origin gets its credential without require_https: false (its traffic never leaves the host)")
    func loopbackInjectedByDefault() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let token = Wire.canary("token")
        let proxy = try ProxyHarness(
            yaml: """
                secrets: { token: { env: T } }
                scopes: [{ name: local, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${token}" } }]
                """, secrets: ["token": token])
        defer { proxy.stop() }
        _ = try proxy.exchange(Wire.request("\(origin.url)/v1/x", host: origin.authority))
        #expect(origin.requests.first?.header("authorization") == "Bearer \(token)")
    }

    @Test(
        "check refuses a credentialed http://127.evil.example (and look-alikes) without require_https: false, naming FILE:LINE:COLUMN",
        arguments: ["http://127.evil.example", "http://127.0.0.1.evil.example", "http://localhost.evil.example:8080", "http://127.0.0.1evil.example"])
    func loopbackLookAlikeRefused(_ origin: String) throws {
        let scratch = ScratchDirectory()
        let path = scratch.write(
            "c.yaml",
            """
            secrets: { t: { env: T } }
            scopes:
              - name: dev
                origins: ["\(origin)"]
                inject: { Authorization: "Bearer ${t}" }
            """)
        let result = try ProxyProcess.runToCompletion(["check", "--config", path])
        #expect(result.status == 2, "\(origin) accepted as loopback: \(result.stdout)")
        #expect(result.stderr.hasPrefix("\(path):4:"), "the error points at the origin: \(result.stderr)")
        let passing = scratch.write(
            "p.yaml",
            """
            scopes:
              - name: dev
                origins: ["\(origin)"]
                pass: [Cookie]
            """)
        #expect(try ProxyProcess.runToCompletion(["check", "--config", passing]).status == 2, "\(origin) with pass: [Cookie]")
    }

    @Test("real loopback http origins (127.0.0.1:PORT, 127.1.2.3, [::1], localhost) are accepted without require_https: false (control)")
    func realLoopbackAccepted() throws {
        let scratch = ScratchDirectory()
        for origin in ["http://127.0.0.1:8765", "http://127.1.2.3", "http://[::1]:9000", "http://localhost:8080"] {
            let path = scratch.write(
                "c.yaml",
                """
                secrets: { t: { env: T } }
                scopes: [{ name: dev, origins: ["\(origin)"], inject: { Authorization: "Bearer ${t}" } }]
                """)
            let result = try ProxyProcess.runToCompletion(["check", "--config", path])
            #expect(result.status == 0, "\(origin): \(result.stderr)")
        }
    }
}
