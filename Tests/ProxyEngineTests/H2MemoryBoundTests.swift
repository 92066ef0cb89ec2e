import Foundation
import TestSupport
import Testing

@testable import ProxyEngine

/// The bodies of Tests/Fixtures/h2_bulk_origin.py: byte i is i % 251 (a prime, so a frame of any
/// power-of-two size lost, repeated or out of place changes the hash).
private enum BulkBody {
    static let size = 8 * 1024 * 1024
    static let bytes: [UInt8] = {
        var block = [UInt8](repeating: 0, count: size)
        block.withUnsafeMutableBufferPointer { buffer in
            for index in 0..<size { buffer[index] = UInt8(index % 251) }
        }
        return block
    }()
    static let sha256: String = {
        let digest = SHA256Digest()
        digest.update(bytes)
        return digest.hexDigest()
    }()

    /// An HTTP/1.1 origin answering every GET with `size` bytes of the pattern, written as fast as
    /// the proxy reads them (a blocking socket: the origin waits when the proxy stops reading).
    static func http1Origin() throws -> FixtureOrigin {
        try FixtureOrigin { connection in
            while connection.readRequest() != nil {
                connection.send("HTTP/1.1 200 OK\r\nContent-Length: \(size)\r\n\r\n")
                var offset = 0
                while offset < size {
                    let end = min(size, offset + 1 << 20)
                    guard (try? connection.socket.send(Array(bytes[offset..<end]))) != nil else { return }
                    offset = end
                }
            }
        }
    }
}

/// A fixture process that prints one line first (a port, or "paused") and its answer last.
private final class FixtureProcess {
    let process = Process()
    private let output = Pipe()
    private var pending = Data()

    init(_ script: String, _ arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", GRPCEngineTests.fixture(script)] + arguments
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
    }

    /// The next line of its output (nil at its end).
    func line() -> String? {
        while true {
            if let end = pending.firstIndex(of: 0x0A) {
                let text = String(decoding: pending[pending.startIndex..<end], as: UTF8.self)
                pending = Data(pending[(end + 1)...])
                return text
            }
            let more = output.fileHandleForReading.availableData
            if more.isEmpty { return nil }
            pending.append(more)
        }
    }

    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}

/// Memory per connection stays bounded whatever the client does with its reads (docs/http2.md,
/// "Memory"). Clients that ask for many large bodies and then stop reading (having granted huge
/// HTTP/2 windows, or simply not reading an HTTP/1.1 socket): the proxy's own accounting
/// (`scopeproxy_h2_buffered_bytes_peak`, `scopeproxy_h2_upstream_buffered_bytes_peak`) stays under
/// the documented bound, and once the client reads again every body arrives whole (the bound does
/// not deadlock). No assertion depends on time: the waits only let the pile-up reach its top.
@Suite("HTTP/2 memory: bounded per connection when the client stops reading", .serialized)
struct H2MemoryBoundTests {
    /// Polls /metrics until `name` has not moved for a second (the buffers are full and the origin
    /// is held back), at most a minute; returns the metrics text then.
    private func settledMetrics(_ proxy: ConfiguredProxy, _ name: String) throws -> String {
        var last: Double = -1
        var unchanged = 0
        var started = false
        var text = ""
        for _ in 0..<600 {
            text = try proxy.metrics()
            let value: Double = metricValue(text, name) ?? -1
            if value > 0 { started = true }
            if started, value == last {
                unchanged += 1
            } else {
                unchanged = 0
            }
            if unchanged >= 10 { break }
            last = value
            usleep(100_000)
        }
        return text
    }

    private func gauge(_ text: String, _ metric: MetricName) -> Int {
        let value: Double = metricValue(text, metric.rawValue) ?? -1
        return Int(value)
    }

    @Test(
        "h2c, 16 streams of 8 MiB, the client grants 2^31-1 windows and stops reading: the connection holds at most the bound, then every body arrives whole"
    )
    func slowH2ClientIsBounded() throws {
        let origin = try BulkBody.http1Origin()
        defer { origin.stop() }
        let proxy = try ConfiguredProxy { logPath in "log: { output: \(logPath) }\n" }
        defer { _ = proxy.process.terminate() }
        let streams = 16
        let scratch = ScratchDirectory()
        let resume = scratch.path + "/resume"
        var paths: [String] = []
        for index in 0..<streams { paths.append("/bytes/" + String(BulkBody.size) + "?n=" + String(index)) }
        var plan: [String: Any] = [:]
        plan["proxy_port"] = Int(proxy.port)
        plan["scheme"] = "http"
        plan["authority"] = origin.authority
        plan["timeout"] = 300
        plan["paths"] = paths
        plan["resume_file"] = resume
        let planPath = scratch.write("plan.json", String(decoding: try JSONSerialization.data(withJSONObject: plan), as: UTF8.self))
        let reader = try FixtureProcess("h2_paused_reader.py", [planPath])
        defer { reader.stop() }
        #expect(reader.line() == "paused")
        let residentBefore = proxy.process.residentKiB() ?? 0

        let metrics = try settledMetrics(proxy, MetricName.h2BufferedBytes.rawValue)
        let peak = gauge(metrics, .h2BufferedBytesPeak)
        let bound = H2ClientConnection.bufferedBytesBound(streams: streams, highWatermark: 256 * 1024)
        let residentPaused = proxy.process.residentKiB() ?? 0
        print(
            "h2 slow reader: \(streams) streams, peak \(peak) bytes held (bound \(bound)); RSS \(residentBefore) KiB before, \(residentPaused) KiB paused"
        )
        #expect(peak > H2Stream.bufferLimit, "the responses reached the proxy and filled its buffers")
        #expect(peak <= bound, "one connection held \(peak) bytes, over its bound of \(bound)")

        FileManager.default.createFile(atPath: resume, contents: Data())
        var answerLine = ""
        while let line = reader.line() { answerLine = line }
        let answer = (try? JSONSerialization.jsonObject(with: Data(answerLine.utf8)) as? [String: Any]) ?? [:]
        let bodies = answer["streams"] as? [[String: Any]] ?? []
        #expect(bodies.count == streams)
        for body in bodies {
            #expect(body["status"] as? Int == 200)
            #expect(body["bytes"] as? Int == BulkBody.size)
            #expect(body["sha256"] as? String == BulkBody.sha256, "every body arrives intact")
        }
        // The client has gone: once the proxy has seen its connection close, nothing is held for it.
        var held = -1
        for _ in 0..<100 {
            held = gauge(try proxy.metrics(), .h2BufferedBytes)
            if held == 0 { break }
            usleep(50_000)
        }
        #expect(held == 0, "a closed connection holds nothing")
    }

    @Test(
        "HTTP/1.1 clients to an HTTP/2 origin (one shared connection), each stops reading: the origin's data waits at the origin (flow control), then every body arrives whole"
    )
    func slowHTTP1ClientsOverH2UpstreamAreBounded() throws {
        let pki = try TestPKI()
        let certificate = pki.certificate("valid")
        let origin = try FixtureProcess("h2_bulk_origin.py", [certificate.cert, certificate.key])
        defer { origin.stop() }
        let portLine: String = origin.line() ?? ""
        let originPort = try #require(UInt16(portLine))
        let proxy = try Wire.interceptingProxy(originPort: originPort, upstreamCA: pki.caPath, token: Wire.canary("bulk"))
        defer { _ = proxy.process.terminate() }
        let clients = 8
        var sockets: [TestSocket] = []
        let request = "GET https://localhost:\(originPort)/bytes/\(BulkBody.size) HTTP/1.1\r\nHost: localhost:\(originPort)\r\n\r\n"
        for _ in 0..<clients {
            let socket = try TestSocket.connect(port: proxy.port)
            try socket.send(request)
            sockets.append(socket)
        }
        defer { sockets.forEach { $0.close() } }

        let metrics = try settledMetrics(proxy, MetricName.h2UpstreamBufferedBytes.rawValue)
        let peak = gauge(metrics, .h2UpstreamBufferedBytesPeak)
        // Every stream's response bytes wait in its input until the client's pump takes them, and
        // the origin may send only what each stream's window allows (256 KiB for an HTTP/1.1
        // client's leg). The connection window is credited on receipt, so it bounds nothing here:
        // were it the bound, the streams whose clients read last would hold it all and starve the
        // one being read (the bodies came back cut after a stall before that was fixed).
        let bound = clients * 256 * 1024 + 16_384
        let resident = proxy.process.residentKiB() ?? 0
        print("h2 upstream, \(clients) slow HTTP/1.1 clients: peak \(peak) bytes held (bound \(bound)); RSS \(resident) KiB")
        #expect(peak > 0, "the responses reached the proxy")
        #expect(peak <= bound, "the upstream connection held \(peak) bytes, over \(bound)")

        for socket in sockets {
            let response = try #require(LenientResponse.read(HTTPReader(socket)))
            #expect(response.status == 200)
            #expect(response.body.count == BulkBody.size)
            let digest = SHA256Digest()
            digest.update(response.body)
            #expect(digest.hexDigest() == BulkBody.sha256, "every body arrives intact")
        }
    }
}
