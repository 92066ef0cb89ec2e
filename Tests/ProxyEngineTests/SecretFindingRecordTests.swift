import ProxyCore
import Redaction
import SecretScan
import Synchronization
import Testing

@testable import ProxyEngine

// Placeholders, scrub and guard as the log and the metrics see them: from the exchange record,
// by secret name only.

private func record() -> ExchangeRecord {
    var record = ExchangeRecord(id: "h15-record", client: "127.0.0.1:5000", method: "POST", startedAt: 0)
    record.status = 403
    record.scopes = ["github"]
    record.substituted = ["github_token"]
    record.scrubbed = [
        SecretFinding(secret: "github_token", encoding: .raw, isPlaceholder: false),
        SecretFinding(secret: "github_token", encoding: .base64(alignment: 1), isPlaceholder: false),
        SecretFinding(secret: "npm_token", encoding: .percentUppercase, isPlaceholder: false),
    ]
    record.guardFinding = SecretFinding(secret: "aws_secret", encoding: .percentLowercase, isPlaceholder: true)
    return record
}

/// The line the access log formats for `record` (the log writes nowhere).
private func line(_ record: ExchangeRecord, _ format: LogFormat) throws -> String {
    let lines = Mutex<[String]>([])
    let log = try AccessLog(
        format: format, output: .discard, rules: RedactionRules(), logBodies: false,
        secretValues: [], metrics: Metrics(), observer: { line in lines.withLock { $0.append(line) } })
    log.record(record)
    return lines.withLock { $0.first ?? "" }
}

@Suite("Secret findings in the access log and metrics")
struct SecretFindingRecordTests {
    @Test("JSON line: substituted, scrubbed (names once) and guard (name, kind, form)")
    func jsonFields() throws {
        let json = try line(record(), .json)
        #expect(json.contains(#""substituted":["github_token"]"#))
        #expect(json.contains(#""scrubbed":["github_token","npm_token"]"#))
        #expect(json.contains(#""guard":{"secret":"aws_secret","placeholder":true,"encoding":"percent-lowercase"}"#))
    }

    @Test("JSON line: none of the fields when nothing happened")
    func jsonQuiet() throws {
        let json = try line(ExchangeRecord(id: "quiet", client: "c", method: "GET", startedAt: 0), .json)
        #expect(!json.contains("substituted") && !json.contains("scrubbed") && !json.contains("guard"))
    }

    @Test("text line: the same fields as words")
    func textFields() throws {
        let text = try line(record(), .text)
        #expect(text.contains(" substituted=github_token scrubbed=github_token,npm_token guard=aws_secret:placeholder:percent-lowercase "))
    }

    @Test("metrics: every finding counted by name, repeats added, blocks by name and kind")
    func metrics() {
        let metrics = Metrics()
        metrics.count(record(), policy: .stripEverything)
        var value = record()
        value.scrubbed = []
        value.guardFinding = SecretFinding(secret: "aws_secret", encoding: .raw, isPlaceholder: false)
        metrics.count(value, policy: .stripEverything)
        metrics.countScrubbed(secret: "github_token", matches: 5)
        #expect(metrics.value("scopeproxy_scrubbed_total", [("secret", "github_token")]) == 7)
        #expect(metrics.value("scopeproxy_scrubbed_total", [("secret", "npm_token")]) == 1)
        #expect(metrics.value("scopeproxy_egress_blocked_total", [("secret", "aws_secret"), ("kind", "placeholder")]) == 1)
        #expect(metrics.value("scopeproxy_egress_blocked_total", [("secret", "aws_secret"), ("kind", "value")]) == 1)
        let text = metrics.render()
        #expect(text.contains(#"scopeproxy_scrubbed_total{secret="github_token"} 7"#))
        #expect(text.contains(#"scopeproxy_egress_blocked_total{secret="aws_secret",kind="placeholder"} 1"#))
        #expect(text.contains("# TYPE scopeproxy_scrubbed_total counter"))
    }
}
