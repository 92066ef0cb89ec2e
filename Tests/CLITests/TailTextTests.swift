import HTTP1Codec
import ProxyCore
import Redaction
import ScopePolicy
import Synchronization
import Testing

@testable import ProxyEngine
@testable import ScopeProxyApp

// `scopeproxy tail` prints a view record's JSON as the access log's text line: for the same
// records, the access log's own text line and tail's line made from the JSON line are the same,
// in colour and without (the clock's parts masked: the two lines are formatted at different
// instants).

private func origin(_ text: String) -> Origin { try! Origin.parse(text) }

private enum Records {
    static var plain: ExchangeRecord {
        var record = ExchangeRecord(id: "plain-1", client: "127.0.0.1:5000", method: "GET", startedAt: 0)
        record.origin = origin("http://api.example")
        record.pathAndQuery = "/users/jane@example.com/orders?limit=20&token=abc123"
        record.status = 200
        record.bytesIn = 229
        record.bytesOut = 313
        return record
    }

    static var everything: ExchangeRecord {
        var record = ExchangeRecord(id: "trace-42", client: "[::1]:6000", method: "POST", startedAt: 0)
        record.clientID = "ci"
        record.proto = .h2
        record.origin = origin("https://api.example:8443")
        record.pathAndQuery = "/v1/items/0123456789abcdef0123?page=2&api_key=zzz"
        record.status = 502
        record.bytesIn = 1_000
        record.bytesOut = 77
        record.scopes = ["api", "backup"]
        record.injected = ["Authorization", "X-Extra"]
        record.stripped = ["Cookie"]
        record.skipped = [SkippedInjection(scope: "backup", why: .path), SkippedInjection(scope: "other", why: .method)]
        record.signed = "aws_sigv4"
        record.substituted = ["github_token"]
        record.scrubbed = [
            SecretFinding(secret: "github_token", encoding: .raw, isPlaceholder: false),
            SecretFinding(secret: "npm_token", encoding: .percentUppercase, isPlaceholder: false),
        ]
        record.scrubSkipped = "gzip"
        record.guardFinding = SecretFinding(secret: "aws_secret", encoding: .percentLowercase, isPlaceholder: true)
        record.egressReported = EgressNote(
            decision: .reportDeny, rule: "deny_ips: 10.0.0.0/8", destination: "api.example:8443", address: "10.1.2.3:8443")
        record.upstreamAddress = "10.1.2.3:8443"
        record.originalDestination = "10.1.2.3:8443"
        record.redirect = RedirectRecord(
            location: "https://cdn.example/file?token=secret#frag", origin: origin("https://cdn.example"), decision: .follow)
        record.requestFields = HTTPFields([HTTPField(name: "Accept", value: "*/*"), HTTPField(name: "Authorization", value: "Bearer x")])
        record.responseFields = HTTPFields([HTTPField(name: "Content-Type", value: "application/json")])
        record.failure = .proxy(.tlsToPlainListener)
        return record
    }

    static var unreadable: ExchangeRecord {
        var record = ExchangeRecord(id: "0123456789abcdef", client: "127.0.0.1:5001", method: nil, startedAt: 0)
        record.status = 400
        record.failure = .proxy(.headTooLarge)
        return record
    }

    static var tunnel: ExchangeRecord {
        var record = ExchangeRecord(id: "tunnel-1", client: "127.0.0.1:5002", method: "CONNECT", startedAt: 0)
        record.origin = origin("https://db.example:5432")
        record.status = 200
        record.bytesIn = 4_096
        record.bytesOut = 8_192
        record.tunnel = .tunnel
        return record
    }

    static var interceptionFailed: ExchangeRecord {
        var record = ExchangeRecord(id: "tunnel-2", client: "127.0.0.1:5003", method: "CONNECT", startedAt: 0)
        record.clientID = "builder"
        record.origin = origin("https://localhost:9")
        record.status = 200
        record.tunnel = .intercept
        record.egressReported = EgressNote(decision: .reportDeny, rule: "default deny", destination: "localhost:9", address: nil)
        record.upstreamAddress = "127.0.0.1:9"
        record.failure = .proxy(.interceptionFailed(origin("https://localhost:9"), .notTLS))
        return record
    }

    static var blockedRedirect: ExchangeRecord {
        var record = ExchangeRecord(id: "redirect-1", client: "127.0.0.1:5004", method: "GET", startedAt: 0)
        record.origin = origin("https://a.example")
        record.pathAndQuery = "/start"
        record.status = 502
        record.scopes = ["a"]
        record.skipped = [SkippedInjection(scope: "a", why: .httpsDowngrade)]
        record.redirect = RedirectRecord(location: nil, origin: nil, decision: .block)
        record.failure = .proxy(.redirectBlocked(nil))
        return record
    }

    /// Skipped scopes and no failure: every part of `reason` is a skipped scope.
    static var skippedOnly: ExchangeRecord {
        var record = ExchangeRecord(id: "skip-1", client: "127.0.0.1:5006", method: "DELETE", startedAt: 0)
        record.origin = origin("https://a.example")
        record.pathAndQuery = "/x"
        record.status = 204
        record.scopes = ["a"]
        record.skipped = [SkippedInjection(scope: "a", why: .method)]
        return record
    }

    static var cut: ExchangeRecord {
        var record = ExchangeRecord(id: "cut-1", client: "127.0.0.1:5005", method: "GET", startedAt: 0)
        record.origin = origin("http://127.0.0.1:18765")
        record.pathAndQuery = "/"
        record.failure = .responseCut
        return record
    }

    static let all: [(String, ExchangeRecord)] = [
        ("plain", plain), ("everything", everything), ("unreadable", unreadable), ("tunnel", tunnel),
        ("interceptionFailed", interceptionFailed), ("blockedRedirect", blockedRedirect), ("skippedOnly", skippedOnly), ("cut", cut),
    ]
}

/// The access log's line for `record`.
private func logLine(_ record: ExchangeRecord, _ format: LogFormat, colour: Bool) throws -> String {
    let lines = Mutex<[String]>([])
    let log = try AccessLog(
        format: format, colour: colour, output: .discard, rules: RedactionRules(), logBodies: false, secretValues: [],
        metrics: Metrics(), observer: { line in lines.withLock { $0.append(line) } })
    log.record(record)
    return lines.withLock { $0.first ?? "" }
}

/// The clock's parts masked: the timestamp and the duration's milliseconds.
private func masked(_ line: String) -> String {
    line.replacing(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/, with: "TS").replacing(/\ \d+\.\d{3}ms\ /, with: " Dms ")
}

@Suite("scopeproxy tail: a record's JSON as the access log's text line")
struct TailTextTests {
    @Test("the access log's text line and tail's line from the JSON line are the same", arguments: Records.all.map(\.0))
    func parity(_ name: String) throws {
        let record = try #require(Records.all.first { $0.0 == name }?.1)
        let json = try logLine(record, .json, colour: false)
        for colour in [false, true] {
            let text = try logLine(record, .text, colour: colour)
            let rendered = try TailText.render(Array(json.utf8.dropLast()), colour: colour).get()
            #expect(masked(rendered.line + "\n") == masked(text), "\(name), colour \(colour)")
            #expect(masked(rendered.line + "\n") != "", "\(name)")
        }
    }

    @Test("a view record (the log's fields, then seq, view, detail, explain) gives the log's line and the decision")
    func viewRecord() throws {
        let json = try logLine(Records.skippedOnly, .json, colour: false)
        var object = String(json.dropLast().dropLast())  // the newline and the closing brace
        object =
            #"{"seq":7,"# + object.dropFirst()
            + #","view":{"decision":"passed","origin":"a.example:443","path":"/x","hop":2},"detail":{"rules":[]},"explain":"x"}"#
        let rendered = try TailText.render(Array(object.utf8), colour: false).get()
        #expect(masked(rendered.line + "\n") == masked(try logLine(Records.skippedOnly, .text, colour: false)))
        #expect(rendered.decision == "passed")
        #expect(TailText.decisionLine(rendered, colour: false) == "  -> passed (redirect hop 2)")
    }

    @Test("a CONNECT line gets no decision line: its decision= already says it")
    func connectDecision() throws {
        let json = try logLine(Records.tunnel, .json, colour: false)
        let object = String(json.dropLast().dropLast()) + #","view":{"decision":"tunnel","origin":"db.example:5432","path":null,"hop":1}}"#
        let rendered = try TailText.render(Array(object.utf8), colour: false).get()
        #expect(TailText.decisionLine(rendered, colour: false) == nil)
    }

    @Test(
        "hostile JSON is refused with a fixed reason, never a trap",
        arguments: [
            "", "{", "[", String(repeating: "[", count: 100_000), String(repeating: "{\"a\":", count: 10_000), #"{"a":1,"a":2}"#, "{} x",
            #"{"id":"\ud800"}"#, #"{"status":"#, "nul", "1", #""text""#, #"{"injected":[1]}"#, #"{"redirect":"follow"}"#,
            #"{"egress":{"decision":"allow","rule":"x"}}"#, #"{"guard":{"secret":"s","placeholder":"yes","encoding":"raw"}}"#,
        ])
    func hostile(_ text: String) {
        guard case .failure(let unreadable) = TailText.render(Array(text.utf8), colour: true) else {
            Issue.record("accepted: \(text.prefix(40))")
            return
        }
        #expect(!unreadable.reason.isEmpty)
    }

    @Test("odd but well-formed values are printed safely: huge numbers as written, control characters as ?")
    func oddValues() throws {
        let rendered = try TailText.render(
            Array(#"{"ts":"\u001b[31m","status":123456789012345678901234567890,"duration_ms":1e400,"id":"\u0085x"}"#.utf8), colour: true
        ).get()
        #expect(!rendered.line.contains("\u{85}"))
        #expect(rendered.line.hasPrefix("?[31m - - \u{1B}[35m123456789012345678901234567890\u{1B}[0m 1e400ms"), "\(rendered.line.debugDescription)")
        #expect(rendered.line.hasSuffix("\u{1B}[2mid=?x\u{1B}[0m"))
        let huge = [UInt8](repeating: UInt8(ascii: " "), count: TailText.maxRecordBytes + 1)
        #expect(throws: TailText.Unreadable.self) { try TailText.render(huge, colour: false).get() }
    }

    @Test("reason: skipped scopes first, then a failure's detail (which may hold '; ')")
    func reasonParts() {
        #expect(
            TailText.reasonParts("a: path_not_in_paths; b: https_downgrade", isTunnel: false, hasError: false) == (
                ["a:path_not_in_paths", "b:https_downgrade"], nil
            ))
        let mixed = TailText.reasonParts("a: path_not_in_paths; client spoke TLS; use http://", isTunnel: false, hasError: true)
        #expect(mixed.skipped == ["a:path_not_in_paths"])
        #expect(mixed.failure == "client spoke TLS; use http://")
        #expect(TailText.reasonParts("refused", isTunnel: false, hasError: true) == ([], "refused"))
        #expect(TailText.reasonParts("a: b", isTunnel: true, hasError: true) == ([], "a: b"))
    }
}

@Suite("scopeproxy tail: the stream's parsing")
struct TailStreamTests {
    @Test("events: id and data, comments skipped, LF, CRLF and CR line ends, split anywhere")
    func events() throws {
        let stream = Array(": keep-alive\n\nid: 1\ndata: {\"a\":1}\n\nid: 2\r\ndata: x\r\ndata: y\r\n\r\nid: 3\rdata:z\r\r".utf8)
        for split in 0...stream.count {
            var parser = SSEParser()
            var events = try parser.feed(stream[..<split]).get()
            events += try parser.feed(stream[split...]).get()
            #expect(
                events == [
                    SSEEvent(id: "1", data: Array(#"{"a":1}"#.utf8)), SSEEvent(id: "2", data: Array("x\ny".utf8)),
                    SSEEvent(id: "3", data: Array("z".utf8)),
                ], "split at \(split)")
            #expect(parser.lastEventID == "3")
        }
    }

    @Test("an id that could not go back in a header is not kept; a line past the bound is refused")
    func bounds() {
        var parser = SSEParser()
        _ = parser.feed(Array("id: 5\n\nid: a b\r\nid: \(String(repeating: "9", count: 65))\n\n".utf8))
        #expect(parser.lastEventID == "5")
        var endless = SSEParser()
        let chunk = [UInt8](repeating: UInt8(ascii: "a"), count: 1 << 16)
        var result: Result<[SSEEvent], SSEParser.Problem> = .success([])
        for _ in 0..<20 {
            result = endless.feed(chunk)
            if case .failure = result { break }
        }
        #expect(result == .failure(.lineTooLong))
    }

    @Test("the response head: status, content type, what followed; not HTTP and too large refused")
    func head() throws {
        let head = try TailResponseHead.parse(Array("HTTP/1.1 200 OK\r\nContent-Type: Text/Event-Stream; charset=utf-8\r\n\r\nid: 1\n".utf8)).get()
        #expect(head.status == 200 && head.isEventStream && head.rest == Array("id: 1\n".utf8))
        #expect(TailResponseHead.parse(Array("HTTP/1.1 200 OK\r\n".utf8)) == .failure(.incomplete))
        #expect(TailResponseHead.parse(Array("SSH-2.0-x\r\n".utf8)) == .failure(.notHTTP))
        #expect(TailResponseHead.parse(Array("HTTP/1.1 2000 OK\r\n\r\n".utf8)) == .failure(.notHTTP))
        #expect(TailResponseHead.parse(Array("HTTP/1.1 200 OK\r\n".utf8) + [UInt8](repeating: 65, count: 20_000)) == .failure(.tooLarge))
    }

    @Test("the request: filters percent-encoded where needed, the token only in its header")
    func request() {
        let text = String(
            decoding: TailRequest.text(admin: "127.0.0.1:9090", client: "ci bot", origin: "https://a.x:443", token: "CANARY-tok", lastEventID: "7"),
            as: UTF8.self)
        #expect(text.hasPrefix("GET /view/events?client=ci%20bot&origin=https://a.x:443 HTTP/1.1\r\nHost: 127.0.0.1:9090\r\n"))
        #expect(text.contains("\r\nLast-Event-ID: 7\r\n"))
        #expect(text.contains("\r\nAuthorization: Bearer CANARY-tok\r\n"))
        #expect(text.hasSuffix("\r\n\r\n"))
        #expect(
            !String(decoding: TailRequest.text(admin: "h:1", client: nil, origin: nil, token: nil, lastEventID: nil), as: UTF8.self).contains("?"))
    }
}
