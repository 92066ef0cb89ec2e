import Foundation
import HTTP1Codec
import TestSupport
import Testing

@testable import ProxyEngine

@Suite("Admin endpoint: shutdown", .serialized)
struct AdminShutdownTests {
    /// A SIGTERM soon after start (a health check that fails fast, a test that stops the proxy at
    /// once) stops the admin server before its thread has entered the event loop. libevent clears a
    /// pending loopbreak when a loop starts, so that stop was lost and `run` hung in join forever.
    @Test("an admin server stopped right after it starts stops: the stop is not lost before its loop runs")
    func stopRightAfterStart() throws {
        let warmUp = try ProxyHarness()  // configures libevent's pthread locking, as run does first
        warmUp.stop()
        for round in 0..<100 {
            let admin = try AdminServer(address: ListenAddress(host: "127.0.0.1", port: 0), metrics: Metrics())
            admin.start()
            let stopped = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                admin.stop()
                stopped.signal()
            }
            // On failure the stopping thread stays blocked in join; the test reports and gives up.
            try #require(stopped.wait(timeout: .now() + 5) == .success, "round \(round): stop() did not return within 5 s")
        }
    }
}
