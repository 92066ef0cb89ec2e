import Foundation
import ProxyCore
import ProxyEngine
import ScopeConfig
import ScopePolicy
import ScopeProxyApp
import TestSupport
import Testing

/// HTTP/2 clients that break the rules a library keeps, sent as raw frames
/// (Tests/Fixtures/h2_raw_client.py): what each may hold, and what it leaves in the log.
@Suite("HTTP/2: hostile clients as raw frames (what they hold, what is said)", .serialized)
struct H2HostileClientTests {
    /// The binary with one scope on `origin` and h2c on its plain port; `extra` is appended.
    private func proxy(_ origin: FixtureOrigin, extra: String = "") throws -> ConfiguredProxy {
        try ConfiguredProxy(environment: ["TOKEN": Wire.canary("hostile-h2-token")]) { logPath in
            """
            log: { output: \(logPath) }
            secrets: { token: { env: TOKEN } }
            scopes:
              - { name: api, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${token}" } }
            \(extra)
            """
        }
    }

    /// Runs h2_raw_client.py with `plan` (see the script) and returns its JSON answer.
    private func rawClient(_ plan: [String: Any]) throws -> [String: Any] { try Wire.runFixture("h2_raw_client.py", plan: plan) }

    private func request(_ authority: String, _ path: String, method: String = "GET") -> [[String]] {
        [[":method", method], [":scheme", "http"], [":authority", authority], [":path", path]]
    }

    /// Waits (briefly, without a time assertion) until the proxy's stderr says `text`.
    private func stderr(_ proxy: ConfiguredProxy, contains text: String) -> Bool {
        for _ in 0..<100 {
            if proxy.process.standardError.contains(text) { return true }
            usleep(50_000)
        }
        return false
    }

    @Test(
        "a stream answered before its client ends it (half-closed, RFC 9113 §5.1) does not hold the connection open: it closes after timeouts.idle, as an HTTP/1.1 connection between requests does"
    )
    func answeredStreamDoesNotHoldConnection() throws {
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let proxy = try proxy(origin, extra: "timeouts: { idle: 1s }")
        defer { _ = proxy.process.terminate() }
        // A POST to the proxy's own port is refused at once (403 loop_refused); the client never
        // sends the body nor END_STREAM, and sends nothing else.
        let answer = try rawClient([
            "proxy_port": Int(proxy.port), "timeout": 15, "wait_for_close": true,
            "actions": [["headers": request("127.0.0.1:\(proxy.port)", "/upload", method: "POST"), "stream": 1, "end_stream": false]],
        ])
        let stream = (answer["streams"] as? [String: Any])?["1"] as? [String: Any]
        #expect(stream?["status"] as? Int == 403, "\(answer)")
        #expect(answer["closed"] as? Bool == true, "the proxy closed the idle connection: \(answer)")
        #expect((answer["goaway"] as? [String: Any])?["code"] as? Int == 0, "a graceful GOAWAY first: \(answer)")
        #expect(origin.requests.isEmpty)
    }

    @Test(
        "a stream nghttp2 refuses as malformed (an upper-case name, a CR in a value) is reset and still gets an access-log line, naming the rule, never the value; its sibling is served"
    )
    func malformedStreamHasItsLine() throws {
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let proxy = try proxy(origin)
        defer { _ = proxy.process.terminate() }
        let canary = Wire.canary("malformed-value")
        let answer = try rawClient([
            "proxy_port": Int(proxy.port), "timeout": 10,
            "actions": [
                ["headers": request(origin.authority, "/bad") + [["X-Upper", canary]], "stream": 1, "end_stream": true],
                ["headers": request(origin.authority, "/bad2") + [["x-cr", "a\r" + canary]], "stream": 3, "end_stream": true],
                ["headers": request(origin.authority, "/good"), "stream": 5, "end_stream": true],
            ],
        ])
        let streams = answer["streams"] as? [String: [String: Any]] ?? [:]
        #expect(streams["1"]?["reset"] != nil && streams["3"]?["reset"] != nil, "\(answer)")
        #expect(streams["5"]?["status"] as? Int == 200)
        var lines: [String] = []
        for _ in 0..<100 {
            lines = ((try? String(contentsOfFile: proxy.logPath, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
            if lines.count >= 3 { break }
            usleep(50_000)
        }
        let refused = lines.filter { $0.contains("\"error\":\"malformed_request\"") }
        #expect(refused.count == 2, "one line per refused stream: \(lines)")
        #expect(refused.allSatisfy { $0.contains("\"proto\":\"h2c\"") })
        #expect(!lines.joined().contains(canary), "the value is never written")
        #expect(!origin.requests.contains { $0.target.hasPrefix("/bad") }, "nothing of a refused stream reached the origin")
    }

    @Test(
        "a connection nghttp2 ends on its own (a connection error: a zero WINDOW_UPDATE) gets a GOAWAY and one stderr line that says why, without a field value"
    )
    func connectionErrorIsSaid() throws {
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let proxy = try proxy(origin)
        defer { _ = proxy.process.terminate() }
        let secretLooking = Wire.canary("hostile-h2-value")
        let answer = try rawClient([
            "proxy_port": Int(proxy.port), "timeout": 10, "wait_for_close": true,
            "actions": [
                ["headers": request(origin.authority, "/v1/one") + [["x-note", secretLooking]], "stream": 1, "end_stream": true],
                // WINDOW_UPDATE on the connection with an increment of 0: a connection error (RFC 9113 §6.9).
                ["raw": "000004080000000000" + "00000000"],
            ],
        ])
        #expect((answer["goaway"] as? [String: Any])?["code"] as? Int == 1, "PROTOCOL_ERROR: \(answer)")
        #expect(answer["closed"] as? Bool == true)
        #expect(stderr(proxy, contains: "h2_protocol_error"), "the end is said: \(proxy.process.standardError.suffix(600))")
        let lines = proxy.process.standardError.split(separator: "\n").filter { $0.contains("h2_connection_ended") }
        #expect(lines.count == 1, "said once: \(lines)")
        #expect(lines.first?.contains("WINDOW_UPDATE") == true, "with nghttp2's fixed reason: \(lines)")
        #expect(!proxy.process.standardError.contains(secretLooking), "no field value on stderr")
    }
}

/// A response larger than what one flush moves (four rounds of the 256 KiB buffer) keeps flowing
/// with nothing from the client to wake the connection: a client with a large window (curl) sends
/// nothing while it downloads, and the socket may take every byte written, so no write callback
/// comes either.
@Suite("HTTP/2: a large response flows to a client that sends nothing while it downloads", .serialized)
struct H2LargeResponseTests {
    @Test("an 8 MiB download over h2c with curl (a window large enough that it sends no WINDOW_UPDATE for a while) arrives whole")
    func largeDownloadCompletes() throws {
        let payload = String(repeating: "0123456789abcdef", count: 8 * 65_536)
        let origin = try FixtureOrigin { connection in
            while connection.readRequest() != nil { connection.respond(body: payload) }
        }
        defer { origin.stop() }
        let proxy = try ConfiguredProxy { logPath in
            """
            log: { output: \(logPath) }
            timeouts: { idle: 3s }
            """
        }
        defer { _ = proxy.process.terminate() }
        let (status, body) = try curl([
            "--http2-prior-knowledge", "--connect-to", "\(origin.authority):127.0.0.1:\(proxy.port)", "--max-time", "30", "\(origin.url)/big",
        ])
        #expect(status == 0, "curl exit status (18 or 28: the transfer stopped short)")
        #expect(body.utf8.count == payload.utf8.count, "received \(body.utf8.count) of \(payload.utf8.count) bytes")
    }
}
