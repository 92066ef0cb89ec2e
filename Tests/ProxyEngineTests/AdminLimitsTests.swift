import Foundation
import TestSupport
import Testing

/// The binary with only an admin endpoint (no scopes, no access log).
private func adminOnly() throws -> ConfiguredProxy {
    try ConfiguredProxy(arguments: ["--threads", "1", "--no-access-log"]) { _ in "" }
}

/// A raw connection to the admin port whose reads and writes give up after `seconds`: a server that
/// stops reading must not hang the test in send(2).
private func adminSocket(_ port: UInt16, seconds: Int = 5) throws -> TestSocket {
    let socket = try TestSocket.connect(port: port)
    socket.setReceiveTimeout(milliseconds: seconds * 1000)
    var timeout = timeval(tv_sec: seconds, tv_usec: 0)
    setsockopt(socket.fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    return socket
}

/// Sends `head`, then up to `total` filler bytes in 256 KiB writes until the proxy stops taking
/// them (a reset, EPIPE or the send timeout); returns how many filler bytes went out.
@discardableResult
private func stream(_ socket: TestSocket, head: String, filler: UInt8, total: Int) -> Int {
    guard (try? socket.send(head)) != nil else { return 0 }
    let chunk = [UInt8](repeating: filler, count: 256 * 1024)
    var sent = 0
    while sent < total {
        guard (try? socket.send(Array(chunk.prefix(total - sent)))) != nil else { break }
        sent += min(chunk.count, total - sent)
    }
    return sent
}

/// What the proxy did with a request it should refuse.
private enum Outcome: Equatable {
    case status(Int)
    /// Closed or reset without an answer (a reset can overtake an answer already sent).
    case closed
    /// Nothing before the read timed out: the proxy was still waiting for more.
    case silent
}

private func outcome(_ socket: TestSocket) -> Outcome {
    do {
        guard let response = try HTTPReader(socket).readResponse() else { return .closed }
        return .status(response.status)
    } catch {
        return errno == EAGAIN || errno == EWOULDBLOCK ? .silent : .closed
    }
}

@Suite("Admin endpoint: bounded requests", .serialized)
struct AdminLimitsTests {
    @Test("a declared body (Content-Length or chunked, any method) is refused with 413 before a byte of it is read")
    func bodyRefusedUpFront() throws {
        let configured = try adminOnly()
        defer { configured.process.terminate() }
        let heads = [
            "POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 67108864\r\n\r\n",
            "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\n\r\n",
            "POST /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n100000\r\n",
            "PUT /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n",
        ]
        for head in heads {
            // Only the head is sent: a server that waits for the body answers nothing until the
            // read times out (what evhttp's unbounded default did).
            let socket = try adminSocket(configured.adminPort)
            try socket.send(head)
            let response = try HTTPReader(socket).readResponse()
            #expect(response?.status == 413, "\(head.prefix(30))")
            #expect(socket.peerClosed(), "the connection is closed after the refusal")
        }
        #expect(try adminGet(configured.adminPort, "/healthz")?.status == 200)
    }

    @Test("a 64 MiB streamed body and 16 MiB of streamed headers leave the proxy's RSS nearly unchanged; /healthz still answers")
    func streamedFloodsAreNotBuffered() throws {
        let configured = try adminOnly()
        defer { configured.process.terminate() }
        let proxy = configured.process
        #expect(try adminGet(configured.adminPort, "/healthz")?.status == 200)
        let residentBefore = try #require(proxy.residentKiB())
        let peakBefore = try #require(proxy.peakResidentKiB())

        let body = 64 << 20
        let bodySocket = try adminSocket(configured.adminPort)
        let bodySent = stream(
            bodySocket, head: "POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: \(body)\r\n\r\n",
            filler: UInt8(ascii: "b"), total: body)
        let bodyOutcome = outcome(bodySocket)
        bodySocket.close()

        // Header lines without the blank line that would end them: evhttp kept adding them.
        let headerSocket = try adminSocket(configured.adminPort)
        let line = Array("X-Filler: \(String(repeating: "h", count: 1000))\r\n".utf8)
        var headerBytes = 0
        _ = try? headerSocket.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        while headerBytes < 16 << 20, (try? headerSocket.send(line)) != nil { headerBytes += line.count }
        let headerOutcome = outcome(headerSocket)
        headerSocket.close()

        let residentAfter = try #require(proxy.residentKiB())
        let peakAfter = try #require(proxy.peakResidentKiB())
        print(
            "admin floods: body \(bodySent) B sent -> \(bodyOutcome), headers \(headerBytes) B sent -> \(headerOutcome); RSS \(residentBefore) -> \(residentAfter) KiB, peak \(peakBefore) -> \(peakAfter) KiB"
        )
        #expect([.status(413), .closed].contains(bodyOutcome))
        #expect([.status(400), .status(413), .closed].contains(headerOutcome))
        // 64 MiB offered; a few MiB of slack for allocator noise, nothing like the body.
        #expect(residentAfter - residentBefore < 8 * 1024, "RSS grew \(residentAfter - residentBefore) KiB")
        #expect(peakAfter - peakBefore < 8 * 1024, "peak RSS grew \(peakAfter - peakBefore) KiB")
        #expect(try adminGet(configured.adminPort, "/healthz")?.status == 200, "the admin endpoint still serves")
    }
}
