import Foundation
import ProxyCore
import Testing

@testable import ProxyEngine

private let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

/// One metric as the table or the docs give it.
private struct Declared: Hashable, CustomStringConvertible {
    var name: String
    var kind: String
    var labels: [String]
    var description: String { "\(name) \(kind) [\(labels.joined(separator: ","))]" }
}

/// docs/logging.md's metrics table: `| `name` | type | `label`, `label` | what |`.
private func documentedMetrics() throws -> Set<Declared> {
    let text = try String(contentsOf: repositoryRoot.appendingPathComponent("docs/logging.md"), encoding: .utf8)
    var result: Set<Declared> = []
    for line in text.split(separator: "\n") where line.hasPrefix("| `scopeproxy_") {
        let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        guard cells.count >= 5 else { continue }
        let labels = cells[3].split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).trimmingCharacters(in: ["`"]) }
        result.insert(Declared(name: cells[1].trimmingCharacters(in: ["`"]), kind: cells[2], labels: labels.filter { !$0.isEmpty }))
    }
    return result
}

/// One event of each kind; the switch makes a new kind fail to compile here until it has one.
private let everyCounterEvent: [CounterEvent] = {
    let events: [CounterEvent] = [
        .tokenFetch(secret: "partner", failure: nil), .tokenFetch(secret: "partner", failure: .refused),
        .refreshTokenRotation(secret: "partner", .memoryOnly), .reload(ok: false), .clientTLSFailure(.notTLS),
        .logTripwireHits, .logLineDropped, .logWriteError, .connectionLimitWait, .impossibleEvents,
        .h2ConnectionEnded(reason: "rapid_reset"),
    ]
    for event in events {
        switch event {
        case .tokenFetch, .refreshTokenRotation, .reload, .clientTLSFailure, .logTripwireHits, .logLineDropped, .logWriteError,
            .connectionLimitWait, .impossibleEvents, .h2ConnectionEnded:
            break
        }
    }
    return events
}()

@Suite("Metric names: one table for the code, the /metrics headers and the docs")
struct MetricTableTests {
    @Test("docs/logging.md lists exactly the metrics of the table, with their types and label names (both directions)")
    func docsEqualTable() throws {
        let table = Set(MetricName.allCases.map { Declared(name: $0.rawValue, kind: $0.kind.rawValue, labels: $0.labels) })
        let documented = try documentedMetrics()
        #expect(table.subtracting(documented).isEmpty, "in the table, not (so) in docs/logging.md: \(table.subtracting(documented))")
        #expect(documented.subtracting(table).isEmpty, "in docs/logging.md, not (so) in the table: \(documented.subtracting(table))")
    }

    @Test("every counter event gives exactly the labels its metric declares, and /metrics renders them under those names")
    func eventsUseDeclaredLabels() {
        let metrics = Metrics()
        for event in everyCounterEvent {
            #expect(event.labelValues.count == event.metric.labels.count, "\(event.metric.rawValue)")
            metrics.increment(event)
        }
        let declared = Dictionary(uniqueKeysWithValues: MetricName.allCases.map { ($0.rawValue, $0.labels) })
        for line in metrics.render().split(separator: "\n") where !line.hasPrefix("#") {
            let series = line.split(separator: " ")[0]
            let name = String(series.prefix { $0 != "{" })
            let labels =
                series.contains("{")
                ? series.drop { $0 != "{" }.dropFirst().dropLast().split(separator: ",").map { String($0.prefix { $0 != "=" }) }
                : []
            #expect(declared[name] == labels, "\(line)")
        }
    }

    @Test("/metrics has one # HELP and one # TYPE line per metric of the table, and no other")
    func headersFromTable() {
        let rendered = Metrics().render().split(separator: "\n")
        for metric in MetricName.allCases {
            #expect(rendered.filter { $0 == "# HELP \(metric.rawValue) \(metric.help)" }.count == 1, "\(metric.rawValue)")
            #expect(rendered.filter { $0 == "# TYPE \(metric.rawValue) \(metric.kind.rawValue)" }.count == 1, "\(metric.rawValue)")
        }
        #expect(rendered.filter { $0.hasPrefix("# HELP ") }.count == MetricName.allCases.count)
        #expect(rendered.filter { $0.hasPrefix("# TYPE ") }.count == MetricName.allCases.count)
    }
}
