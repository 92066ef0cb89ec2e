import Foundation
import HTTP1Codec
import JSONText
import ProxyCore
import Redaction
import ScopePolicy
import SecretScan
import Testing

@testable import RecordRendering

// The live view's record, rendered from records the data path makes (no sockets): the decision
// word, the rules, the heads with secrets by name, JSON validity, and that no value the log hides
// ever appears (canaries, in every encoding the scanner knows).

enum Canary {
    /// A secret value the proxy injects (`gh_token`) and one it signs with (`aws_key`).
    static let token = "ghp_CANARYvalue0123456789abcdef"
    static let awsKey = "AKIACANARY0123456789"
    static let placeholderKey = [UInt8](repeating: 7, count: 32)
    static let placeholders = PlaceholderTable([PlaceholderSecret(secret: "npm_token")], key: placeholderKey)
    static var placeholder: String { placeholders.texts["npm_token"]! }
    static let index = SecretValueIndex(
        placeholders: placeholders,
        values: ["gh_token": Array(token.utf8), "aws_key": Array(awsKey.utf8), "npm_token": Array("npm_CANARYnpmvalue42".utf8)])

    /// Every form a value can take that the view must never show.
    static func forms(_ value: String) -> [String] {
        let bytes = Array(value.utf8)
        return [value, PercentEncoding.encode(bytes), Base64.encode(bytes), Base64.encodeURLSafe(bytes)]
    }

    static var everyForm: [String] { forms(token) + forms(awsKey) + forms("npm_CANARYnpmvalue42") + [placeholder] }
}

private func origin(_ text: String) -> Origin { try! Origin.parse(text) }

private let formatter = LogLineFormatter(redactor: Redactor(rules: RedactionRules()), logBodies: false)
private let naming = SecretNaming(redactor: formatter.redactor, watch: Canary.index.everything)

private func context(policy: ScopePolicy? = nil, explain: (@Sendable (ExplainQuery) -> ExplainAnswer?)? = nil) -> ViewRecordContext {
    ViewRecordContext(
        formatter: formatter, naming: naming, policy: policy,
        entrance: CurlEntrance(listen: ListenAddress(host: "127.0.0.1", port: 8080), configPath: "/etc/scopeproxy/config.yaml"),
        explain: explain)
}

/// The record parsed back (every record must be one JSON object).
private func parsed(_ bytes: [UInt8]) throws -> [String: Any] {
    #expect(!bytes.contains(0x0A), "one SSE data line: no raw newline")
    let object = try JSONSerialization.jsonObject(with: Data(bytes))
    return try #require(object as? [String: Any])
}

/// The record parsed, and as text: what the view adds to the log's fields (`view`, `detail`,
/// `explain`) as rendered, and the whole record after the log's tripwire (the log's own fields show
/// a safe header as it is, as the log line does, and the tripwire masks a value there, as there).
private func render(_ record: ExchangeRecord, _ context: ViewRecordContext = context()) throws -> (json: [String: Any], text: String) {
    let bytes = ViewRecord.render(record, context, now: 1_000_000)
    let text = String(decoding: bytes, as: UTF8.self)
    let added = String(text[try #require(text.range(of: #","view":{"#)).lowerBound...])
    let tripwire = Tripwire(secrets: [Canary.token, Canary.awsKey, "npm_CANARYnpmvalue42", Canary.placeholder].map { Array($0.utf8) })
    let (scrubbed, _) = tripwire.scrub(bytes)
    return (try parsed(scrubbed), added + String(decoding: scrubbed, as: UTF8.self))
}

private func fields(_ pairs: [(String, String)]) -> HTTPFields {
    HTTPFields(pairs.map { HTTPField(name: $0.0, value: $0.1) })
}

enum Records {
    static func base(_ method: String = "GET", _ url: String = "https://api.github.com", path: String = "/user") -> ExchangeRecord {
        var record = ExchangeRecord(id: "abc123", client: "127.0.0.1:5000", method: method, startedAt: 0)
        record.proto = .http1_1
        record.origin = origin(url)
        record.pathAndQuery = path
        record.status = 200
        record.mode = .forwardProxy
        record.requestFields = fields([("Host", "api.github.com"), ("Accept", "*/*")])
        return record
    }

    /// An injected GitHub request, every head present, with canaries where the data path puts values.
    static var injected: ExchangeRecord {
        var record = base()
        record.scopes = ["github"]
        record.injected = ["Authorization"]
        record.stripped = ["Cookie"]
        record.requestFields = fields([
            ("Host", "api.github.com"), ("Accept", "*/*"), ("Cookie", "own=client-cookie-CANARYcookie"),
            ("User-Agent", "curl/8 \(Canary.token)"), ("Authorization", "Bearer client-own-CANARYauth"),
        ])
        record.upstreamRequest = RequestHead(
            method: "GET", target: "/user?access_token=\(Canary.token)", version: .http1_1,
            fields: fields([
                ("Host", "api.github.com"), ("Accept", "*/*"), ("Authorization", "Bearer \(Canary.token)"),
                ("X-Request-ID", "abc123"),
            ]))
        record.originResponse = ResponseHead(
            version: .http1_1, status: 200, reason: "OK",
            fields: fields([
                ("Content-Type", "application/json"), ("Server", "echo \(Canary.token)"), ("X-Echo", Canary.token),
                ("Set-Cookie", "s=\(Base64.encode(Array(Canary.token.utf8)))"), ("Connection", "keep-alive"),
            ]))
        record.responseFields = fields([("Content-Type", "application/json"), ("X-Request-ID", "abc123")])
        return record
    }
}

private let github = ScopePolicy(scopes: [
    Scope(
        name: "github", origins: [origin("https://api.github.com")],
        inject: [Scope.Injection(header: "Authorization", template: HeaderTemplate(parts: [.literal("Bearer "), .secret("gh_token")]))])
])

@Suite("View record: the decision word, the rules, the heads by name")
struct ViewRecordTests {
    @Test(
        "each decision word, first that applies",
        arguments: [
            (
                {
                    var r = Records.base(); r.status = 403; r.failure = .proxy(.tunnelDenied(origin("https://x.test"))); return r
                }(), "refused"
            ),
            (
                {
                    var r = Records.base(); r.status = 502; r.failure = .proxy(.upstreamRefused(origin("https://x.test"))); return r
                }(), "failed"
            ),
            (
                {
                    var r = Records.base(); r.failure = .clientClosed; r.status = nil; return r
                }(), "failed"
            ),
            (
                {
                    var r = Records.base(); r.status = 302; r.redirect = RedirectRecord(location: "/b", origin: nil, decision: .follow); return r
                }(),
                "followed"
            ),
            (
                {
                    var r = Records.base()
                    r.status = 502
                    r.redirect = RedirectRecord(location: "https://evil.test/", origin: origin("https://evil.test"), decision: .block)
                    r.failure = .proxy(.redirectBlocked(origin("https://evil.test")))
                    return r
                }(), "redirect_blocked"
            ),
            (
                {
                    var r = Records.base(); r.signed = "aws_sigv4"; r.injected = ["Authorization"]; return r
                }(), "signed"
            ),
            (
                {
                    var r = Records.base(); r.injected = ["Authorization"]; r.stripped = ["Cookie"]; return r
                }(), "injected"
            ),
            (
                {
                    var r = Records.base(); r.substituted = ["npm_token"]; return r
                }(), "substituted"
            ),
            (
                {
                    var r = Records.base(); r.stripped = ["Cookie"]; return r
                }(), "stripped"
            ),
            (
                {
                    var r = Records.base(); r.scrubbed = [SecretFinding(secret: "gh_token", encoding: .raw, isPlaceholder: false)]; return r
                }(),
                "scrubbed"
            ),
            (Records.base(), "passed"),
            (
                {
                    var r = Records.base("CONNECT", "https://api.github.com:443"); r.tunnel = .intercept; return r
                }(), "intercept"
            ),
            (
                {
                    var r = Records.base("CONNECT", "https://api.github.com:443"); r.tunnel = .tunnel; return r
                }(), "tunnel"
            ),
            (
                {
                    var r = Records.base("CONNECT", "https://api.github.com:443"); r.tunnel = .deny; r.status = 403; return r
                }(), "deny"
            ),
        ])
    func decisionWord(record: ExchangeRecord, word: String) throws {
        #expect(ViewRecord.decision(record).rawValue == word)
        let (json, _) = try render(record)
        let view = try #require(json["view"] as? [String: Any])
        #expect(view["decision"] as? String == word)
    }

    @Test("the log's JSON fields come first, the same as the access log line's, then view, detail and explain")
    func logFieldsFirst() throws {
        var record = Records.injected
        record.pathAndQuery = "/users/jane@example.com?page=2&token=abc"
        let bytes = ViewRecord.render(record, context(), now: 1_000_000)
        var line = JSONLine()
        formatter.appendJSONFields(of: record, now: 1_000_000, to: &line)
        let logLine = line.finishLine()
        // The same bytes up to the view's members (the clock's `ts` masked: read twice).
        func masked(_ bytes: [UInt8]) -> String {
            String(decoding: bytes, as: UTF8.self).replacingOccurrences(
                of: #""ts":"[^"]*""#, with: #""ts":"-""#, options: .regularExpression)
        }
        let logText = masked(Array(logLine.dropLast(2)))
        #expect(masked(bytes).hasPrefix(logText + #","view":{"#))
        let json = try parsed(bytes)
        let view = try #require(json["view"] as? [String: Any])
        #expect(view["origin"] as? String == "api.github.com:443")
        #expect(view["path"] as? String == "/users/:email?page=2&token=:redacted")
        #expect(view["hop"] as? Int == 1)
        #expect(json["explain"] is NSNull)
    }

    @Test("a record that starts from the access log's line (the engine's path) is the record made whole")
    func fromLogLine() throws {
        // Every kind of record the engine publishes: plain, injected with every head, a CONNECT.
        var connect = Records.base("CONNECT", "https://api.github.com")
        connect.tunnel = .intercept
        for record in [Records.base(), Records.injected, connect] {
            var line = JSONLine()
            formatter.appendJSONFields(of: record, now: 1_000_000, to: &line)
            let logLine = line.finishLine()
            let whole = ViewRecord.render(record, context(), now: 1_000_000)
            let fromLine = ViewRecord.render(record, context(), now: 1_000_000, logLine: logLine)
            // Byte for byte, but for the wall clock's `ts` (read at each rendering).
            func masked(_ bytes: [UInt8]) -> String {
                String(decoding: bytes, as: UTF8.self).replacingOccurrences(
                    of: #""ts":"[^"]*""#, with: #""ts":"-""#, options: .regularExpression)
            }
            #expect(masked(fromLine) == masked(whole))
            #expect(String(decoding: fromLine, as: UTF8.self).hasPrefix(String(decoding: logLine.dropLast(2), as: UTF8.self) + ","))
        }
        // A line that is not a closed JSON line is not taken: the record makes its own fields.
        let record = Records.base()
        #expect(
            ViewRecord.render(record, context(), now: 1, logLine: Array("{}".utf8)).count
                == ViewRecord.render(record, context(), now: 1).count)
    }

    @Test("the four heads: the client's as the log shows it, the origin's with secrets by name, never a value")
    func heads() throws {
        let (json, text) = try render(Records.injected, context(policy: github))
        for form in Canary.everyForm { #expect(!text.contains(form), "the record shows a value (\(form.prefix(8))...)") }
        #expect(!text.contains("CANARYcookie") && !text.contains("CANARYauth"), "the client's own credentials stay hidden")
        let detail = try #require(json["detail"] as? [String: Any])
        let request = try #require(detail["request"] as? [String: Any])
        let client = try #require(request["client"] as? [String: Any])
        #expect(client["line"] as? String == "GET https://api.github.com/user HTTP/1.1")
        let clientHeaders = try #require(client["headers"] as? [[String]])
        #expect(clientHeaders[0] == ["host", "api.github.com"])
        #expect(clientHeaders[2] == ["cookie", "<redacted>"], "a hidden header with no known value is <redacted>, as in the log")
        #expect(clientHeaders[3] == ["user-agent", "curl/8 ${gh_token}"], "a safe header shows its value, a secret in it by name")
        #expect(clientHeaders[4] == ["authorization", "<redacted>"])
        let sent = try #require(request["origin"] as? [String: Any])
        #expect(sent["line"] as? String == "GET /user?access_token=:redacted HTTP/1.1")
        let sentHeaders = try #require(sent["headers"] as? [[String]])
        #expect(sentHeaders.contains(["authorization", "Bearer ${gh_token}"]))
        #expect(sentHeaders.contains(["x-request-id", "abc123"]))
        let response = try #require(detail["response"] as? [String: Any])
        let received = try #require(response["origin"] as? [String: Any])
        #expect(received["status"] as? Int == 200)
        let receivedHeaders = try #require(received["headers"] as? [[String]])
        #expect(receivedHeaders.contains(["server", "echo ${gh_token}"]))
        #expect(receivedHeaders.contains(["x-echo", "${gh_token}"]), "a hidden header shows only the reference")
        #expect(receivedHeaders.contains(["set-cookie", "<redacted>${gh_token}<redacted>"]), "base64 of a value is named too")
        let answered = try #require(response["client"] as? [String: Any])
        #expect(answered["headers"] as? [[String]] == [["content-type", "application/json"], ["x-request-id", "abc123"]])
        let rules = try #require(detail["rules"] as? [[String: Any]])
        #expect(rules.count == 2)
        #expect(rules[0]["rule"] as? String == "strip" && rules[0]["header"] as? String == "Cookie")
        #expect(rules[1]["rule"] as? String == "inject" && rules[1]["scope"] as? String == "github")
        #expect(rules[1]["secrets"] as? [String] == ["gh_token"])
    }

    @Test(
        "header values: shown as the log shows them, every known value or placeholder by name",
        arguments: [
            ("accept", "*/*", "*/*"),
            ("cookie", "sid=abc", "<redacted>"),
            ("set-cookie", "s=1", "<redacted>"),
            ("authorization", "Bearer \(Canary.token)", "Bearer ${gh_token}"),
            ("authorization", "bearer \(Canary.token)", "bearer ${gh_token}"),
            ("authorization", "token \(Canary.token)", "token ${gh_token}"),
            ("authorization", "Basic \(Base64.encode(Array("user:\(Canary.token)".utf8)))", "Basic <redacted>${gh_token}"),
            (
                "authorization", "AWS4-HMAC-SHA256 Credential=\(Canary.awsKey)/20250101/us-east-1/s3/aws4_request, Signature=ab",
                "AWS4-HMAC-SHA256 <redacted>${aws_key}<redacted>"
            ),
            ("authorization", "\(Canary.token) Bearer", "${gh_token}<redacted>"),
            ("x-api-key", PercentEncoding.encode(Array(Canary.token.utf8)), "${gh_token}"),
            ("x-api-key", Canary.placeholder, "${npm_token}"),
            ("x-api-key", "one \(Canary.token) two \(Canary.awsKey)", "<redacted>${gh_token}<redacted>${aws_key}"),
            ("user-agent", "tool \(Canary.token.lowercased())", "tool ${gh_token}"),
            ("location", "https://cdn.test/a?sig=\(Canary.token)", "https://cdn.test/a?sig=:redacted"),
            ("location", "https://cdn.test/\(Canary.token)", "https://cdn.test/${gh_token}"),
        ])
    func headerValue(name: String, value: String, shown: String) {
        let result = naming.shown(name, value)
        #expect(result == shown)
        for form in Canary.everyForm { #expect(!result.contains(form)) }
    }

    @Test("each rule kind, in the order the rules act")
    func rules() throws {
        var record = Records.base("POST")
        record.scopes = ["github"]
        record.skipped = [SkippedInjection(scope: "backup", why: .path)]
        record.stripped = ["Cookie"]
        record.substituted = ["npm_token"]
        record.injected = ["Authorization", "X-Other"]
        record.signed = "aws_sigv4"
        record.guardFinding = SecretFinding(secret: "aws_key", encoding: .percentUppercase, isPlaceholder: false)
        record.failure = .proxy(
            .secretEgressBlocked(record.guardFinding!, where: "header x-api-key", origin("https://api.github.com")))
        record.status = 403
        record.egressReported = EgressNote(decision: .reportDeny, rule: "default deny", destination: "api.github.com:443", address: nil)
        record.redirect = RedirectRecord(location: "https://cdn.test/x?token=\(Canary.token)", origin: origin("https://cdn.test"), decision: .pass)
        record.scrubbed = [SecretFinding(secret: "gh_token", encoding: .base64(alignment: 1), isPlaceholder: false)]
        let (json, text) = try render(record, context(policy: github))
        for form in Canary.everyForm { #expect(!text.contains(form)) }
        let rules = try #require((json["detail"] as? [String: Any])?["rules"] as? [[String: Any]])
        #expect(
            rules.map { $0["rule"] as? String } == [
                "skip", "strip", "substitute", "inject", "inject", "sign", "guard", "egress", "redirect", "scrub",
            ])
        #expect(rules[0]["why"] as? String == InjectionSkip.path.explanation)
        #expect(rules[1]["why"] as? String == "sensitive, and no covering scope lists it in pass")
        #expect(rules[2]["secret"] as? String == "npm_token")
        #expect(rules[4]["header"] as? String == "X-Other" && rules[4]["scope"] is NSNull)
        #expect(rules[5]["kind"] as? String == "aws_sigv4")
        #expect(rules[6]["secret"] as? String == "aws_key" && rules[6]["placeholder"] as? Bool == false)
        #expect(rules[6]["where"] as? String == "header x-api-key")
        #expect(rules[7]["decision"] as? String == "report_deny" && rules[7]["why"] as? String == "default deny")
        #expect(rules[8]["location"] as? String == "https://cdn.test/x?token=:redacted" && rules[8]["origin"] as? String == "cdn.test:443")
        #expect(rules[9]["secret"] as? String == "gh_token" && rules[9]["encoding"] as? String == "base64+1")
        let view = try #require(json["view"] as? [String: Any])
        #expect(view["decision"] as? String == "refused")
    }

    @Test("a followed redirect chain: one record per hop, the same id, hop 1 and 2; the 3xx went no further than the proxy")
    func followedChain() throws {
        var first = Records.base()
        first.status = 302
        first.redirect = RedirectRecord(location: "https://api.github.com/next", origin: origin("https://api.github.com"), decision: .follow)
        first.originResponse = ResponseHead(version: .http1_1, status: 302, reason: "Found", fields: fields([("Location", "/next")]))
        first.responseFields = first.originResponse?.fields
        var second = Records.base(path: "/next")
        second.hop = 2
        let (one, _) = try render(first)
        let (two, twoText) = try render(second)
        #expect(one["id"] as? String == two["id"] as? String)
        #expect((one["view"] as? [String: Any])?["hop"] as? Int == 1)
        #expect((two["view"] as? [String: Any])?["hop"] as? Int == 2)
        #expect((one["view"] as? [String: Any])?["decision"] as? String == "followed")
        let response = try #require((one["detail"] as? [String: Any])?["response"] as? [String: Any])
        #expect(response["client"] is NSNull)
        #expect((response["origin"] as? [String: Any])?["status"] as? Int == 302)
        #expect(twoText.contains("hop 2 of a redirect the proxy followed"))
    }

    @Test("CONNECT lines: the tunnel's word, no path, no explain; a refused request; an HTTP/2 stream")
    func connectRefusedAndH2() throws {
        var connect = Records.base("CONNECT", "https://api.github.com:443", path: "")
        connect.pathAndQuery = nil
        connect.proto = nil
        connect.tunnel = .intercept
        let (tunnel, _) = try render(connect, context(explain: { _ in ExplainAnswer("explained") }))
        let view = try #require(tunnel["view"] as? [String: Any])
        #expect(view["decision"] as? String == "intercept" && view["path"] is NSNull)
        #expect(tunnel["explain"] is NSNull)
        #expect(tunnel["decision"] as? String == "intercept", "the CONNECT line's own field is there too")
        let request = try #require((tunnel["detail"] as? [String: Any])?["request"] as? [String: Any])
        #expect((request["client"] as? [String: Any])?["line"] as? String == "CONNECT api.github.com:443 HTTP/1.1")
        #expect(request["origin"] is NSNull)

        var refused = ExchangeRecord(id: "r1", client: "127.0.0.1:1", method: nil, startedAt: 0)
        refused.status = 400
        refused.failure = .proxy(.tlsToPlainListener)
        let (unreadable, _) = try render(refused, context(explain: { _ in ExplainAnswer("explained") }))
        #expect((unreadable["view"] as? [String: Any])?["decision"] as? String == "refused")
        #expect((unreadable["view"] as? [String: Any])?["origin"] is NSNull)
        let detail = try #require(unreadable["detail"] as? [String: Any])
        #expect((detail["request"] as? [String: Any])?["client"] is NSNull)
        #expect(detail["curl"] is NSNull)
        #expect(unreadable["explain"] is NSNull)

        var stream = Records.injected
        stream.proto = .h2
        let queries = QueryLog()
        let (h2, _) = try render(
            stream,
            context(explain: { query in
                queries.add(query); return ExplainAnswer("request GET \(query.url)\nline two")
            }))
        let client = try #require(((h2["detail"] as? [String: Any])?["request"] as? [String: Any])?["client"] as? [String: Any])
        #expect(client["line"] as? String == "GET https://api.github.com/user HTTP/2")
        #expect(h2["explain"] as? String == "request GET https://api.github.com/user\nline two")
        #expect(queries.all.first?.headerNames == ["accept", "cookie", "user-agent", "authorization"], "host is explain's own")
    }
}

@Suite("View record: hostile bytes keep it one valid JSON line")
struct ViewRecordHostileTests {
    @Test(
        "quotes, backslashes, controls, obs-text and a CR-free newline escape in header values and paths: valid JSON, curl still one command",
        arguments: ["say \"hi\" \\ there", "tab\there", "bell\u{07}", "caf\u{E9} \u{FF}", "it's $(id) `id`", "</script><script>"])
    func hostileValue(value: String) throws {
        var record = Records.base("PUT", path: "/a/it's/\(value.unicodeScalars.count)?q=\"x\"")
        record.requestFields = HTTPFields([
            HTTPField(name: "Accept", value: value), HTTPField(name: "X-Hidden", value: value),
            HTTPField(name: "User-Agent", value: value + Canary.token),
        ])
        record.originResponse = ResponseHead(
            version: .http1_1, status: 201, reason: "x", fields: HTTPFields([HTTPField(name: "Server", value: value)]))
        let bytes = ViewRecord.render(record, context(), now: 1)
        let json = try parsed(bytes)
        let headers = try #require(((json["detail"] as? [String: Any])?["request"] as? [String: Any])?["client"] as? [String: Any])
        #expect((headers["headers"] as? [[String]])?.first == ["accept", value])
        let curl = try #require((json["detail"] as? [String: Any])?["curl"] as? String)
        #expect(curl.split(separator: "\n").last?.hasPrefix("curl ") == true, "the command is the one last line")
        #expect(!curl.contains(Canary.token))
    }
}

@Suite("View record: a client or an origin cannot make a record too big to show")
struct ViewRecordBoundsTests {
    @Test("a 40,000-byte header of quotes and 300 fields: the record keeps its log fields, detail is cut and says how much")
    func hugeHeads() throws {
        var record = Records.base("GET", path: "/big")
        record.requestFields = HTTPFields(
            [HTTPField(name: "User-Agent", value: String(repeating: "\"", count: 40_000))]
                + (0..<300).map { HTTPField(name: "Accept", value: "v\($0)" + String(repeating: "v", count: 100)) })
        let bytes = ViewRecord.render(record, context(), now: 1)
        #expect(bytes.count < 200 * 1024, "\(bytes.count) bytes")
        let json = try parsed(bytes)
        #expect(json["method"] as? String == "GET" && (json["view"] as? [String: Any])?["decision"] != nil)
        let client = try #require(((json["detail"] as? [String: Any])?["request"] as? [String: Any])?["client"] as? [String: Any])
        let headers = try #require(client["headers"] as? [[String]])
        let agent = try #require(headers.first { $0.first == "user-agent" }?.last)
        #expect(agent.hasSuffix("…(+\(40_000 - ViewRecord.maxShownValueBytes) bytes)"))
        #expect(headers.last?.first == "…" && headers.last?.last?.hasSuffix("more fields not shown") == true)
    }

    @Test("a value cut in the middle of a character is cut before it")
    func clippedAtCharacter() {
        let text = String(repeating: "é", count: 10)  // 2 bytes each
        #expect(ViewRecord.clipped(text, to: 5) == "éé…(+16 bytes)")
        #expect(ViewRecord.clipped("short", to: 5) == "short")
    }

    @Test("a secret value or placeholder in a header name is named, in every head")
    func namesAreNamed() throws {
        var record = Records.base("GET", path: "/n")
        record.originResponse = ResponseHead(
            version: .http1_1, status: 200, reason: "OK",
            fields: HTTPFields([HTTPField(name: "X-Seen-\(Canary.token)", value: "1")]))
        let (json, text) = try render(record)
        #expect(!text.contains(Canary.token))
        let origin = try #require(((json["detail"] as? [String: Any])?["response"] as? [String: Any])?["origin"] as? [String: Any])
        #expect((origin["headers"] as? [[String]])?.first?.first?.hasPrefix("x-seen-${") == true)
    }
}

final class QueryLog: @unchecked Sendable {
    private let lock = NSLock()
    private var queries: [ExplainQuery] = []
    func add(_ query: ExplainQuery) { lock.withLock { queries.append(query) } }
    var all: [ExplainQuery] { lock.withLock { queries } }
}
