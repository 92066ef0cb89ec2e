import Foundation
import TestSupport
import Testing

/// One stream whose far side does not read must not hold up its siblings on the same HTTP/2
/// connection (RFC 9113 §5.2.2). The connection window is credited as DATA arrives and each
/// stream's window as its bytes are forwarded; with the connection window as the bound, the streams
/// whose origin had not read yet held all of it and the one being read starved.
/// (The response direction is `H2MemoryBoundTests`' HTTP/1.1 clients sharing an HTTP/2 origin.)
@Suite("HTTP/2 flow control: a stream nobody reads does not starve its siblings", .serialized)
struct H2FlowControlTests {
    @Test("six 6 MiB uploads on one h2c connection to an origin that reads one request at a time: each arrives whole and is answered")
    func uploadsToAnOriginThatReadsOneAtATime() throws {
        let size = 6 * 1024 * 1024
        let expected = (0..<size).map { UInt8($0 % 251) }
        let oneAtATime = NSLock()
        let origin = try FixtureOrigin { connection in
            // The origin takes requests one by one: the others wait, unread, in their sockets and
            // in the proxy (their streams' windows shut), while the one it reads must keep flowing.
            oneAtATime.lock()
            defer { oneAtATime.unlock() }
            guard let request = connection.readRequest() else { return }
            connection.respond(body: "got \(request.body.count) intact=\(request.body == expected)")
        }
        defer { origin.stop() }
        let proxy = try ConfiguredProxy { logPath in "log: { output: \(logPath) }" }
        defer { _ = proxy.process.terminate() }
        let streams: [[String: Any]] = (0..<6).map { index in
            ["method": "POST", "scheme": "http", "authority": origin.authority, "path": "/upload\(index)", "body_bytes": size]
        }
        let answer = try Wire.h2Client(["proxy_port": Int(proxy.port), "timeout": 90, "streams": streams])
        let answered = Wire.streams(answer)
        #expect(answered.map { $0["status"] as? Int } == Array(repeating: 200, count: 6), "\(answered.map { $0["body"] ?? "" })")
        #expect(answered.allSatisfy { $0["body"] as? String == "got \(size) intact=true" })
    }
}
