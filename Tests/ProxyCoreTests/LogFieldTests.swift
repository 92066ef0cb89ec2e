import Foundation
import ProxyCore
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
        #expect(documented == LogField.documentation,
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
}
