import Foundation
import TestSupport
import Testing

/// The admin endpoint (/healthz, /metrics) reads only bounded requests: a client of that port must
/// not be able to grow the proxy's memory. Measured as the process's RSS, so against the built binary.
@Suite("Admin endpoint: a large body or an endless head is not buffered", .serialized)
struct AdminMemoryBinaryTests {
    @Test("a large POST body to the admin address is not buffered: RSS does not grow by anything near its size, and /healthz still answers")
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

    @Test("an endless header block to the admin address is cut off: RSS does not grow by its size, and /healthz still answers")
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
}
