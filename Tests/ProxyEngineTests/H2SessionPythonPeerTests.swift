import CLibevent
import Foundation
import ProxyCore
import TestSupport
import Testing

@testable import ProxyEngine

// A server-role H2Session against python-h2 (another implementation) over a loopback socket,
// driven by hand: read, `receive`, `send`, write. Responses are submitted from inside `receive`.

@Suite("H2Session with python-h2")
struct H2SessionPythonPeerTests {
    @Test func pythonH2ClientGetsAnswersTrailersAndAResetForAnUppercaseName() throws {
        let listener = try TestListener()
        defer { listener.close() }
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/h2_client_peer.py").path
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [script, String(listener.port)]
        let stdout = Pipe()
        process.standardOutput = stdout
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        let socket = try #require(listener.accept())

        let events = H2Recorder()
        let session = H2Session(role: .server)
        session.delegate = events
        events.onStreamEnded = { [unowned events] session, stream in
            let path = events.headerBlocks.first { $0.stream == stream && $0.kind == .request }?.fields.first { $0.name == ":path" }?.value
            let received = events.received[stream]?.count ?? 0
            switch path {
            case "/hello":
                events.outgoing[stream] = .init(bytes: Array("hello from nghttp2".utf8))
                session.submitResponse(stream: stream, status: 200, fields: [H2HeaderField(name: "Content-Type", value: "text/plain")], hasBody: true)
            case "/upload":
                events.outgoing[stream] = .init(
                    bytes: Array("received \(received)".utf8),
                    trailers: [H2HeaderField(name: "grpc-status", value: "0"), H2HeaderField(name: "x-received", value: String(received))])
                session.submitResponse(stream: stream, status: 200, fields: [], hasBody: true)
            default:
                session.submitResponse(stream: stream, status: 404, fields: [], hasBody: false)
            }
        }

        let input = evbuffer_new()!
        let output = evbuffer_new()!
        defer {
            evbuffer_free(input)
            evbuffer_free(output)
        }
        var failure: H2SessionFailure?
        while session.wantsRead || session.wantsWrite {
            session.send(to: output, highWatermark: 1 << 20)
            let pending = evbuffer_get_length(output)
            if pending > 0 {
                var bytes = [UInt8](repeating: 0, count: pending)
                bytes.withUnsafeMutableBytes { _ = evbuffer_remove(output, $0.baseAddress, pending) }
                try socket.send(bytes)
            }
            let bytes = try socket.receive()
            if bytes.isEmpty { break }
            bytes.withUnsafeBytes { _ = evbuffer_add(input, $0.baseAddress, $0.count) }
            failure = session.receive(from: input)
            if failure != nil { break }
        }
        let summary = stdout.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(failure == nil)
        #expect(process.terminationStatus == 0)

        let result = try #require(try JSONSerialization.jsonObject(with: summary) as? [String: [String: Any]])
        #expect(result["get"]?["status"] as? String == "200")
        #expect(result["get"]?["body"] as? String == "hello from nghttp2")
        #expect(result["upload"]?["body"] as? String == "received 300000")
        #expect(result["upload"]?["trailers"] as? [String: String] == ["grpc-status": "0", "x-received": "300000"])
        #expect(result["upper"]?["reset"] as? Int == 1, "PROTOCOL_ERROR")

        // What the server heard: the padded upload byte for byte, its trailers, the rejection.
        let upload = try #require(events.headerBlocks.first { $0.fields.contains(H2HeaderField(name: ":path", value: "/upload")) }?.stream)
        #expect(events.received[upload] == (0..<300_000).map { UInt8($0 % 251) })
        #expect(events.headerBlocks.first { $0.stream == upload && $0.kind == .trailers }?.fields.first?.name == "x-checksum")
        #expect(events.rejections.count == 1)
        #expect(events.rejections.first?.reason.contains("uppercase header field name 'X-Upper'") == true)
    }
}
