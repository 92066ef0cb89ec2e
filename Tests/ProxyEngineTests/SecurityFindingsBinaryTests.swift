import Foundation
import Testing
import TestSupport

/// Regression tests for hardening findings that need the built binary (docs/testing.md): a crash
/// must show as a failed test rather than a dead test runner, and RSS, the log file, secret loading
/// and `check` are properties of the process.
@Suite("Security findings: through the built binary (2 redirect crash, 8 log, 11 admin memory, 12 UTF-8 secrets, 13 loopback)", .serialized)
struct SecurityFindingsBinaryTests {
    // MARK: 2. A redirect crashes the proxy (use-after-free)

    /// The proxy is alive: /healthz answers, a fresh request is served, and the process still runs.
    private func expectAlive(_ configured: ConfiguredProxy, _ healthy: FixtureOrigin, _ label: String) {
        let health = try? adminGet(configured.adminPort, "/healthz")
        #expect(health?.status == 200, "\(label): /healthz did not answer")
        let socket = try? TestSocket.connect(port: configured.port)
        try? socket?.send("GET \(healthy.url)/alive HTTP/1.1\r\nHost: \(healthy.authority)\r\nConnection: close\r\n\r\n")
        let response = socket.flatMap { LenientResponse.read(HTTPReader($0)) }
        #expect(response?.status == 200, "\(label): a fresh request was not served")
        let process = configured.process.process
        let how = process.isRunning ? "" : (process.terminationReason == .uncaughtSignal ? "signal \(process.terminationStatus)" : "exit \(process.terminationStatus)")
        #expect(process.isRunning, "\(label): the proxy process died (\(how))")
    }

    /// One request through the proxy to `origin`; reads whatever comes back (or nothing).
    private func poke(_ configured: ConfiguredProxy, _ origin: FixtureOrigin, _ path: String = "/start") {
        guard let socket = try? TestSocket.connect(port: configured.port) else { return }
        socket.setReceiveTimeout(milliseconds: 5_000)
        try? socket.send("GET \(origin.url)\(path) HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        _ = LenientResponse.read(HTTPReader(socket))
        socket.close()
    }

    enum DoubleRedirect: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case twoInOneWrite = "two 3xx in one write"
        case threeInOneWrite = "three 3xx in one write"
        case slowThenLive = "3xx to a slow target, then 3xx"
        case refusedThenLive = "3xx to a refused port, then 3xx"
        case liveThenRefused = "3xx, then 3xx to a refused port"
        case secondHop = "a redirect answered by an origin sending two 3xx"
        var testDescription: String { rawValue }
    }

    /// Before each try, `other` (the last redirect's target) gets an idle keep-alive connection in the
    /// proxy's pool (one worker thread), so following the leftover 3xx allocates no new connector
    /// that could land where the orphaned one was freed and hide the use-after-free. The proxy runs
    /// with freed memory poisoned and glibc's per-thread cache off (MALLOC_PERTURB_, GLIBC_TUNABLES)
    /// so that a use-after-free crashes every time instead of now and then; correct code never
    /// reads freed memory, so this cannot fail a fixed proxy.
    @Test("2: an origin sending two 3xx back to back does not crash the proxy (follow mode); it keeps serving other clients",
          arguments: DoubleRedirect.allCases)
    func twoRedirectsBackToBack(_ variant: DoubleRedirect) throws {
        let healthy = try FixtureOrigin(host: "127.0.0.1")
        let landing = try FixtureOrigin(host: "127.0.0.2")
        let other = try FixtureOrigin(host: "127.0.0.1")
        let refusedPort = try TestListener.freePort()  // nothing listens there any more
        // Accepts and reads the request, then answers nothing until its peer hangs up (a slow target).
        let slow = try FixtureOrigin(host: "127.0.0.2") { connection in
            _ = connection.readRequest()
            _ = try? connection.socket.receive()
        }
        @Sendable func redirects(_ locations: [String]) -> [UInt8] {
            Array(locations.map { "HTTP/1.1 307 Temporary Redirect\r\nLocation: \($0)\r\nContent-Length: 0\r\n\r\n" }.joined().utf8)
        }
        let locations: [String] = switch variant {
        case .twoInOneWrite, .secondHop: ["\(landing.url)/a", "\(other.url)/b"]
        case .threeInOneWrite: ["\(landing.url)/a", "\(slow.url)/b", "\(other.url)/c"]
        case .slowThenLive: ["\(slow.url)/a", "\(other.url)/b"]
        case .refusedThenLive: ["http://127.0.0.1:\(refusedPort)/a", "\(other.url)/b"]
        case .liveThenRefused: ["\(landing.url)/a", "http://127.0.0.1:\(refusedPort)/b"]
        }
        let double = try Findings.scripted(host: "127.0.0.2") { _ in redirects(locations) }
        // For `secondHop` the client's origin answers one ordinary redirect into the double one.
        let start = variant == .secondHop ? try Findings.scripted { _ in redirects(["\(double.url)/hop"]) } : double
        defer { [healthy, landing, other, slow, double, start].forEach { $0.stop() } }

        // No crash backtrace either: a crashed proxy dies at once instead of lingering while it symbolicates.
        let environment = ["SWIFT_BACKTRACE": "enable=no", "MALLOC_PERTURB_": "85", "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"]
        let configured = try ConfiguredProxy(arguments: ["--threads", "1"], environment: environment) { _ in
            "redirects: { cross_origin: follow, max_hops: 5 }\ntimeouts: { connect: 1s, upstream: 2s }\n"
        }
        defer { configured.process.terminate() }
        for _ in 0..<3 where configured.process.process.isRunning {
            poke(configured, other, "/warm")
            poke(configured, start)
        }
        expectAlive(configured, healthy, variant.rawValue)
    }

    // MARK: 8. Query values behind `;` reach the log

    @Test("8: a query value hidden behind `;` under a safe name (limit=20;api_key=...) never reaches the access log")
    func semicolonQueryValue() throws {
        let secrets = (0..<5).map { Findings.canary("query\($0)") }
        let origin = try Findings.scripted { request in
            request.target.hasPrefix("/moved")  // the redirect's Location is logged too (redacted like a URL)
                ? Array("HTTP/1.1 302 Found\r\nLocation: https://cdn.example/file?limit=5;sig=\(secrets[4])\r\nContent-Length: 0\r\n\r\n".utf8)
                : Array("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".utf8)
        }
        defer { origin.stop() }
        let configured = try ConfiguredProxy { logPath in "log: { output: \(logPath), format: json }\n" }
        let proxy = configured.process
        defer { proxy.terminate() }
        let targets = [
            "/items?limit=20;api_key=\(secrets[0])",
            "/items?limit=20;api_key=\(secrets[1])&page=2",
            "/items?page=2&sort=name;token=\(secrets[2])",
            "/items?limit=20%3Bapi_key=x;password=\(secrets[3])",
            "/moved?page=1",
        ]
        for target in targets {
            let socket = try TestSocket.connect(port: proxy.port)
            try socket.send("GET \(origin.url)\(target) HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
            #expect(try HTTPReader(socket).readResponse()?.status == (target.hasPrefix("/moved") ? 302 : 200))
        }
        #expect(origin.requests.count == targets.count)
        #expect(proxy.terminate() == 0)
        let log = try String(contentsOfFile: configured.logPath, encoding: .utf8)
        #expect(log.split(separator: "\n").count == targets.count)
        for (index, secret) in secrets.enumerated() {
            #expect(!log.contains(secret), "the log shows the value hidden in \(index < 4 ? targets[index].prefix(30) : "the Location")…")
        }
        #expect(!secrets.contains { proxy.standardError.contains($0) })
    }

    // MARK: 11. Admin endpoint buffers unbounded

    @Test("11: a large POST body to the admin address is not buffered: RSS does not grow by anything near its size, and /healthz still answers")
    func adminBodyBounded() throws {
        let configured = try ConfiguredProxy { _ in "" }
        let proxy = configured.process
        defer { proxy.terminate() }
        #expect(try adminGet(configured.adminPort, "/healthz")?.status == 200)
        let before = try #require(proxy.residentKiB())
        let bodySize = 64 << 20
        let socket = try TestSocket.connect(port: configured.adminPort)
        try socket.send("POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\nContent-Length: \(bodySize)\r\n\r\n")
        let block = [UInt8](repeating: 0x61, count: 1 << 20)
        for _ in 0..<(bodySize >> 20) {
            do { try socket.send(block) } catch { break }  // a bounded endpoint may hang up early: that is fine
        }
        _ = LenientResponse.read(HTTPReader(socket))  // whatever it answers (405, 413, a close)
        socket.close()
        #expect(try adminGet(configured.adminPort, "/healthz")?.status == 200, "/healthz still answers")
        let after = try #require(proxy.residentKiB())
        #expect(after - before < 16 << 10, "RSS grew by \((after - before) >> 10) MiB after a \(bodySize >> 20) MiB body")
    }

    @Test("11: an endless header block to the admin address is cut off: RSS does not grow by its size, and /healthz still answers")
    func adminHeadersBounded() throws {
        let configured = try ConfiguredProxy { _ in "" }
        let proxy = configured.process
        defer { proxy.terminate() }
        #expect(try adminGet(configured.adminPort, "/healthz")?.status == 200)
        let before = try #require(proxy.residentKiB())
        let headerBytes = 48 << 20
        let socket = try TestSocket.connect(port: configured.adminPort)
        try socket.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        let line = "X-Filler: " + String(repeating: "h", count: 4096 - 12) + "\r\n"
        let block = Array(String(repeating: line, count: 256).utf8)  // 1 MiB of header lines
        var refused = false
        for _ in 0..<(headerBytes / block.count) {
            do { try socket.send(block) } catch { refused = true; break }
        }
        if !refused { try? socket.send("\r\n") }
        _ = LenientResponse.read(HTTPReader(socket))
        socket.close()
        #expect(try adminGet(configured.adminPort, "/healthz")?.status == 200, "/healthz still answers")
        let after = try #require(proxy.residentKiB())
        #expect(after - before < 16 << 10, "RSS grew by \((after - before) >> 10) MiB after \(headerBytes >> 20) MiB of header lines")
    }

    // MARK: 12. Non-ASCII secrets are mangled

    @Test("12: a UTF-8 secret (env and file) arrives at the origin byte for byte")
    func utf8SecretBytes() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let envSecret = Findings.canary("env") + "-ü-€-日本-🔑"
        let fileSecret = Findings.canary("file") + "-é-Ж-中文"
        let scratch = ScratchDirectory()
        scratch.write("token", fileSecret + "\n")
        let path = scratch.write("c.yaml", """
            secrets: { env_token: { env: UTF8_TOKEN }, file_token: { file: token } }
            scopes: [{ name: api, origins: ["\(origin.url)"], require_https: false,
                       inject: { X-Env-Token: "${env_token}", X-File-Token: "tok ${file_token}" } }]
            """)
        let proxy = try ProxyProcess(arguments: ["--config", path], environment: ["UTF8_TOKEN": envSecret])
        defer { proxy.terminate() }
        let socket = try TestSocket.connect(port: proxy.port)
        try socket.send("GET \(origin.url)/v1 HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        _ = LenientResponse.read(HTTPReader(socket))
        let arrived = try #require(origin.requests.first, "the request was forwarded")
        #expect(Findings.contains(arrived.rawHead, Array("X-Env-Token: \(envSecret)\r\n".utf8)),
                "env secret altered on the wire: \(arrived.rawHead.count) head bytes")
        #expect(Findings.contains(arrived.rawHead, Array("X-File-Token: tok \(fileSecret)\r\n".utf8)),
                "file secret altered on the wire")
        #expect(!proxy.standardError.contains(envSecret) && !proxy.standardError.contains(fileSecret))
    }

    // MARK: 13. Loopback decided by the parsed host, never a string prefix

    @Test("13: check refuses a credentialed http://127.evil.example (and look-alikes) without require_https: false, naming FILE:LINE:COLUMN",
          arguments: ["http://127.evil.example", "http://127.0.0.1.evil.example", "http://localhost.evil.example:8080", "http://127.0.0.1evil.example"])
    func loopbackLookAlikeRefused(_ origin: String) throws {
        let scratch = ScratchDirectory()
        let path = scratch.write("c.yaml", """
            secrets: { t: { env: T } }
            scopes:
              - name: dev
                origins: ["\(origin)"]
                inject: { Authorization: "Bearer ${t}" }
            """)
        let result = try ProxyProcess.runToCompletion(["check", "--config", path])
        #expect(result.status == 2, "\(origin) accepted as loopback: \(result.stdout)")
        #expect(result.stderr.hasPrefix("\(path):4:"), "the error points at the origin: \(result.stderr)")
        let passing = scratch.write("p.yaml", """
            scopes:
              - name: dev
                origins: ["\(origin)"]
                pass: [Cookie]
            """)
        #expect(try ProxyProcess.runToCompletion(["check", "--config", passing]).status == 2, "\(origin) with pass: [Cookie]")
    }

    @Test("13: real loopback http origins (127.0.0.1:PORT, 127.1.2.3, [::1], localhost) are accepted without require_https: false (control)")
    func realLoopbackAccepted() throws {
        let scratch = ScratchDirectory()
        for origin in ["http://127.0.0.1:8765", "http://127.1.2.3", "http://[::1]:9000", "http://localhost:8080"] {
            let path = scratch.write("c.yaml", """
                secrets: { t: { env: T } }
                scopes: [{ name: dev, origins: ["\(origin)"], inject: { Authorization: "Bearer ${t}" } }]
                """)
            let result = try ProxyProcess.runToCompletion(["check", "--config", path])
            #expect(result.status == 0, "\(origin): \(result.stderr)")
        }
    }
}
