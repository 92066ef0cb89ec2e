import Foundation
import TestSupport
import Testing

/// Redirects against the built binary, where a crash shows as a failed test rather than a dead test
/// runner: an origin that sends more than one 3xx for one request (a use-after-free once).
@Suite("The built binary: an origin sending 3xx after 3xx in follow mode never ends the process", .serialized)
struct BackToBackRedirectBinaryTests {
    /// The proxy is alive: /healthz answers, a fresh request is served, and the process still runs.
    private func expectAlive(_ configured: ConfiguredProxy, _ healthy: FixtureOrigin, _ label: String) {
        let health = try? adminGet(configured.adminPort, "/healthz")
        #expect(health?.status == 200, "\(label): /healthz did not answer")
        let socket = try? TestSocket.connect(port: configured.port)
        try? socket?.send("GET \(healthy.url)/alive HTTP/1.1\r\nHost: \(healthy.authority)\r\nConnection: close\r\n\r\n")
        let response = socket.flatMap { LenientResponse.read(HTTPReader($0)) }
        #expect(response?.status == 200, "\(label): a fresh request was not served")
        let process = configured.process.process
        let how =
            process.isRunning
            ? "" : (process.terminationReason == .uncaughtSignal ? "signal \(process.terminationStatus)" : "exit \(process.terminationStatus)")
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
    @Test(
        "an origin sending two 3xx back to back does not crash the proxy (follow mode); it keeps serving other clients",
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
        let locations: [String] =
            switch variant {
            case .twoInOneWrite, .secondHop: ["\(landing.url)/a", "\(other.url)/b"]
            case .threeInOneWrite: ["\(landing.url)/a", "\(slow.url)/b", "\(other.url)/c"]
            case .slowThenLive: ["\(slow.url)/a", "\(other.url)/b"]
            case .refusedThenLive: ["http://127.0.0.1:\(refusedPort)/a", "\(other.url)/b"]
            case .liveThenRefused: ["\(landing.url)/a", "http://127.0.0.1:\(refusedPort)/b"]
            }
        let double = try Wire.scripted(host: "127.0.0.2") { _ in redirects(locations) }
        // For `secondHop` the client's origin answers one ordinary redirect into the double one.
        let start = variant == .secondHop ? try Wire.scripted { _ in redirects(["\(double.url)/hop"]) } : double
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
}
