import Foundation
import Testing
import TestSupport

@Suite("Limits: running out of file descriptors", .serialized)
struct LimitsTests {
    @Test("EMFILE pauses accepting instead of spinning, logs at most once a second, and the proxy serves again afterwards")
    func descriptorExhaustion() throws {
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let proxy = try ProxyProcess(arguments: ["--threads", "1", "--no-access-log"], fileLimit: 48)
        defer { proxy.terminate() }
        var clients: [TestSocket] = []
        for _ in 0..<80 {
            if let socket = try? TestSocket.connect(port: proxy.port) { clients.append(socket) }
        }
        #expect(clients.count == 80, "connections beyond the limit wait in the listen backlog")
        usleep(1_500_000)
        let failures = proxy.standardError.components(separatedBy: "accept_failed").count - 1
        #expect(failures >= 1, "the limit was actually hit")
        #expect(failures <= 4, "rate-limited: a busy accept loop would log thousands of lines (\(failures))")
        clients.forEach { $0.close() }
        clients.removeAll()
        var served = false
        for _ in 0..<30 where !served {
            usleep(100_000)
            if let socket = try? TestSocket.connect(port: proxy.port) {
                socket.setReceiveTimeout(milliseconds: 2_000)
                try? socket.send("GET \(origin.url)/after HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
                served = (try? HTTPReader(socket).readResponse())??.status == 200
            }
        }
        #expect(served, "once descriptors are free again, the proxy serves; stderr: \(proxy.standardError.suffix(600))")
        #expect(proxy.terminate() == 0)
    }
}
