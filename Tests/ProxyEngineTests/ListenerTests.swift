import Foundation
import TestSupport
import Testing

/// The listening port belongs to one process. With SO_REUSEPORT on every worker's socket, a second
/// scopeproxy on the same address joined the group and the kernel split new connections between the
/// two: requests alternated between injected and not injected.
@Suite("Listening: the port is never shared between processes", .serialized)
struct ListenerTests {
    @Test("a second process on a taken address exits non-zero naming it; the first keeps every connection")
    func secondProcessRefused() throws {
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let first = try ProxyProcess(arguments: ["--listen", "127.0.0.1:0", "--threads", "2"])
        let address = "127.0.0.1:\(first.port)"
        // Started as a long-running proxy: if it did come up (the old behaviour), the test fails
        // instead of hanging on a process that never exits.
        do {
            let second = try ProxyProcess(arguments: ["run", "--listen", address, "--threads", "2"])
            _ = second.terminate()
            Issue.record("a second proxy started on \(address)")
        } catch {
            let message = "\(error)"
            #expect(message.contains(address), "names the address: \(message)")
            #expect(message.contains("address already in use"))
        }
        // Every connection still reaches the first proxy (each is answered by the embedded default,
        // which the second one would also be: the X-Request-ID count proves they all went through one).
        for index in 0..<24 {
            let socket = try TestSocket.connect(port: first.port)
            try socket.send("GET \(origin.url)/n\(index) HTTP/1.1\r\nHost: \(origin.authority)\r\nConnection: close\r\n\r\n")
            let response = try #require(try HTTPReader(socket).readResponse())
            #expect(response.status == 200)
        }
        #expect(origin.requests.count == 24)
        #expect(first.terminate() == 0)
    }

    @Test("a route's address that is taken fails the start, naming it; nothing is left listening")
    func routeAddressTaken() throws {
        let taken = try TestListener()
        defer { taken.close() }
        let scratch = ScratchDirectory()
        let config = scratch.write(
            "c.yaml",
            """
            routes: [{ listen: "127.0.0.1:\(taken.port)", upstream: "http://127.0.0.1:9" }]
            """)
        let result = try ProxyProcess.runToCompletion(["run", "--config", config, "--listen", "127.0.0.1:0"])
        #expect(result.status != 0)
        #expect(result.stderr.contains("127.0.0.1:\(taken.port)"))
        #expect(!result.stderr.contains("listening on"))
    }
}
