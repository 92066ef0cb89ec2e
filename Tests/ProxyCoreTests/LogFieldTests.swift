import Foundation
import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

// The access log's one table of fields (Sources/ProxyCore/LogField.swift) against what is made from
// it by hand: the field list in docs/logging.md. The formatters and the Playbook read the table
// itself (AccessLogGoldenTests, HarnessTests).

private let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

@Suite("Access log: one table of fields")
struct LogFieldTests {
    static let begin = "<!-- log fields: generated from LogField (Sources/ProxyCore/LogField.swift); LogFieldTests checks it -->"
    static let end = "<!-- end of log fields -->"

    @Test("docs/logging.md lists exactly the table's fields, in its order, with its words")
    func documentedFields() throws {
        let text = try String(contentsOf: repositoryRoot.appendingPathComponent("docs/logging.md"), encoding: .utf8)
        let start = try #require(text.range(of: Self.begin), "docs/logging.md has no generated field list")
        let stop = try #require(text.range(of: Self.end, range: start.upperBound..<text.endIndex))
        let documented = text[start.upperBound..<stop.lowerBound].trimmingCharacters(in: .whitespacesAndNewlines)
        // After a change to the table: `SCOPEPROXY_WRITE_DOCS=1 swift test --filter LogFieldTests` writes the list.
        if ProcessInfo.processInfo.environment["SCOPEPROXY_WRITE_DOCS"] == "1" {
            let updated = text[..<start.upperBound] + "\n" + LogField.documentation + "\n" + text[stop.lowerBound...]
            try updated.write(to: repositoryRoot.appendingPathComponent("docs/logging.md"), atomically: true, encoding: .utf8)
            return
        }
        #expect(
            documented == LogField.documentation,
            "docs/logging.md's field list is not the table's; replace it with:\n\(LogField.documentation)")
    }

    @Test("every field has a doc line and a distinct place on the text line")
    func textPlaces() {
        var keys: [String] = []
        for (field, row) in zip(LogField.ordered, LogField.rows) {
            #expect(!row.doc.isEmpty && !row.doc.contains("\n"), "\(field.name)")
            switch row.text {
            case .keyed(let key), .last(let key), .withDecision(let key): keys.append(key)
            case .head, .jsonOnly: break
            }
        }
        #expect(Set(keys).count == keys.count, "two fields write the same key on the text line: \(keys)")
        #expect(LogField.rows.count == LogField.allCases.count)
    }

    @Test("the head words are the text line's start: time, method, url, status, duration")
    func headWords() {
        #expect(zip(LogField.ordered, LogField.rows).filter { $0.1.text == .head }.map(\.0) == [.ts, .method, .url, .status, .durationMS])
    }

    /// A record with every fact the table reads (`tunnel` aside: its line has the scope fields' place).
    static var everything: ExchangeRecord {
        var record = ExchangeRecord(id: "r", client: "127.0.0.1:1", method: "GET", startedAt: 0)
        record.clientID = "c"
        record.proto = .h2c
        record.origin = try? Origin.parse("https://a.example")
        record.pathAndQuery = "/p?q=1"
        record.status = 200
        record.scopes = ["a"]
        record.injected = ["X-A"]
        record.stripped = ["Cookie"]
        record.skipped = [SkippedInjection(scope: "a", why: .path)]
        record.signed = "aws_sigv4"
        record.substituted = ["s"]
        record.scrubbed = [SecretFinding(secret: "s", encoding: .raw, isPlaceholder: false)]
        record.scrubSkipped = "gzip"
        record.guardFinding = SecretFinding(secret: "s", encoding: .raw, isPlaceholder: true)
        record.redirect = RedirectRecord(location: "/next", origin: nil, decision: .pass)
        record.requestFields = HTTPFields([HTTPField(name: "Host", value: "a.example")])
        record.responseFields = HTTPFields([])
        record.requestBody = ExchangeRecord.ObservedBody(bytes: [], total: 0, truncated: false, contentType: nil)
        record.responseBody = ExchangeRecord.ObservedBody(bytes: [], total: 0, truncated: false, contentType: nil)
        record.failure = .responseCut
        record.originalDestination = "10.77.0.1:443"
        record.egressReported = EgressNote(decision: .reportDeny, rule: "default deny", destination: "a.example:443", address: nil)
        record.upstreamAddress = "192.0.2.1:443"
        return record
    }

    @Test("each field's redaction rule is the one its kind of fact is written with", arguments: LogField.ordered)
    func redactionRule(_ field: LogField) throws {
        var record = Self.everything
        if field == .decision { record.tunnel = .tunnel }
        let fact = try #require(field.row.read(record), "the record has every fact")
        let written: [LogRedaction] =
            switch fact {
            // What the client or the origin chose, in its place: URLs through the URL rules, headers and
            // bodies through theirs.
            case .target, .redirect, .egress: [.url]
            case .fields: [.headers]
            case .body: [.body]
            // Names the configuration or the header rules fixed, never a value.
            case .names, .finding: [.names]
            // A request id or method (a token alphabet), or what the proxy wrote itself.
            case .text: [.token, .none]
            case .now, .since, .number, .joinedNames, .reasons, .tunnel, .failure: [.none]
            }
        #expect(written.contains(field.row.redaction), "\(field.name): \(fact) is written as \(written), the table says \(field.row.redaction)")
    }
}
