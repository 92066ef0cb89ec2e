import PosixSupport
import ProxyCore
import ScopePolicy
import Synchronization

/// Counters and gauges for /metrics (Prometheus text format). Labels are bounded sets chosen by the
/// proxy (status classes, scope names, sensitive header names as the configuration spells them,
/// error codes): never a URL, a value or anything a client can vary freely. A label taken from a
/// request's or response's data goes through a mapping onto a set the configuration fixes (header
/// names: `ScopePolicy.metricLabel(forHeader:)`), before it becomes a key: a series stored is
/// never freed, so an unbounded label is unbounded memory.
public final class Metrics: Sendable {
    private struct Key: Hashable {
        let name: String
        let labels: [String]  // "name=value" pairs, rendered when /metrics is read
    }

    private let counters = Locked<[Key: UInt64]>([:])
    public let clientConnections = Atomic<Int>(0)
    public let upstreamConnections = Atomic<Int>(0)
    /// What HTTP/2 client connections hold (`H2ClientConnection.bufferedBytes`).
    public let h2Buffered = BufferedBytesGauge()
    /// What HTTP/2 connections to origins hold (`UpstreamH2Connection.bufferedBytes`).
    public let h2UpstreamBuffered = BufferedBytesGauge()
    /// The live view (docs/view.md): viewers now, viewers dropped for being slow, records published.
    public let viewViewers = Atomic<Int>(0)
    public let viewViewersDropped = Atomic<UInt64>(0)
    public let viewRecordsPublished = Atomic<UInt64>(0)

    public init() {}

    public func increment(_ event: CounterEvent, by amount: UInt64 = 1) {
        let key = Key(name: event.metric.rawValue, labels: Self.pairs(event.metric, event.labelValues))
        counters.withLock { $0[key, default: 0] += amount }
    }

    /// "name", "value" pairs: the names from the table, the values in its order.
    private static func pairs(_ metric: MetricName, _ values: [String]) -> [String] {
        assert(values.count == metric.labels.count, "\(metric.rawValue) takes labels \(metric.labels)")
        return zip(metric.labels, values).flatMap { [$0, $1] }
    }

    /// What every finished exchange moves, kept in a form that costs one small hash per exchange
    /// (its scope) instead of one per counter; turned into ordinary series when /metrics is read.
    private struct ExchangeCounters {
        struct RequestKey: Hashable {
            var statusClass: Int
            var scope: String
            /// A configured client's name, or "none": a bounded set (names come from the config).
            var client: String
        }
        var requests: [RequestKey: UInt64] = [:]
        var bytesIn: UInt64 = 0
        var bytesOut: UInt64 = 0
        /// Header labels (`ScopePolicy.metricLabel(forHeader:)`), never names as the wire spelt them.
        var injected: [String: UInt64] = [:]
        var stripped: [String: UInt64] = [:]
        var redirects: [RedirectDecision: UInt64] = [:]
        var protocols: [String: UInt64] = [:]
        var upstreamErrors: [String: UInt64] = [:]
        var rateLimited: [String: UInt64] = [:]
        var clientRefusals: [String: UInt64] = [:]
        /// Requests refused because they led back to the proxy itself, by kind (`destination`,
        /// `own_connection`).
        var loopRefused: [String: UInt64] = [:]
        /// Matches masked in responses, by secret name.
        var scrubbed: [String: UInt64] = [:]
        /// Requests the proxy signed, by kind of signature (`aws_sigv4`).
        var signed: [String: UInt64] = [:]
        /// Requests the egress guard stopped, by secret name and whether a placeholder was found.
        var egressBlocked: [BlockKey: UInt64] = [:]
        struct BlockKey: Hashable {
            var secret: String
            var placeholder: Bool
        }
        /// Egress denials (and report-mode would-be denials), by rule, client and decision: rules
        /// and clients come from the configuration, so the set is bounded by it.
        var egressDenied: [EgressKey: UInt64] = [:]
        struct EgressKey: Hashable {
            var rule: String
            var client: String
            var decision: EgressNote.Decision
        }
    }

    private let exchanges = Locked(ExchangeCounters())

    /// The counters one finished exchange (or hop, or tunnel) moves, under one lock. `policy` (the
    /// configuration in force) bounds the header labels.
    func count(_ record: ExchangeRecord, policy: ScopePolicy) {
        let statusClass = record.status.map { min(max($0 / 100, 0), 5) } ?? 6
        let upstreamError = record.failure.flatMap { $0.isUpstreamFailure ? $0.code : nil }
        exchanges.withLock { counters in
            counters.requests[.init(statusClass: statusClass, scope: record.scopes.first ?? "none", client: record.clientID ?? "none"), default: 0] +=
                1
            switch record.failure {
            case .proxy(.rateLimited(let client, _))?: counters.rateLimited[client, default: 0] += 1
            case .proxy(.proxyAuthenticationRequired(let refusal))?: counters.clientRefusals[refusal.reason.rawValue, default: 0] += 1
            case .proxy(.loopRefused(let origin))?: counters.loopRefused[origin == nil ? "own_connection" : "destination", default: 0] += 1
            default: break
            }
            counters.bytesIn += record.bytesIn
            counters.bytesOut += record.bytesOut
            for name in record.injected { counters.injected[policy.metricLabel(forHeader: name), default: 0] += 1 }
            for name in record.stripped { counters.stripped[policy.metricLabel(forHeader: name), default: 0] += 1 }
            if let redirect = record.redirect { counters.redirects[redirect.decision, default: 0] += 1 }
            counters.protocols[record.proto?.rawValue ?? "none", default: 0] += 1
            if let upstreamError { counters.upstreamErrors[upstreamError, default: 0] += 1 }
            // Findings by name only: the core's (head values) and the engine's (bodies) alike.
            for finding in record.scrubbed { counters.scrubbed[finding.secret, default: 0] += 1 }
            if let signed = record.signed { counters.signed[signed, default: 0] += 1 }
            if let finding = record.guardFinding {
                counters.egressBlocked[.init(secret: finding.secret, placeholder: finding.isPlaceholder), default: 0] += 1
            }
            if let note = record.egressNote {
                counters.egressDenied[.init(rule: note.rule, client: record.clientID ?? "none", decision: note.decision), default: 0] += 1
            }
        }
    }

    /// Matches masked in a response body beyond those its record names (a record names each form
    /// of a value once; the metric counts every match).
    func countScrubbed(secret: String, matches: UInt64) {
        exchanges.withLock { $0.scrubbed[secret, default: 0] += matches }
    }

    private static let statusClasses = ["0xx", "1xx", "2xx", "3xx", "4xx", "5xx", "none"]

    /// How many keyed entries the counters hold (what their memory grows with; each is kept until
    /// the process exits), whether or not rendering would merge some of them.
    var storedEntries: Int {
        let generic = counters.withLock { $0.count }
        return generic
            + exchanges.withLock { counters in
                counters.requests.count + counters.injected.count + counters.stripped.count + counters.redirects.count
                    + counters.protocols.count
                    + counters.upstreamErrors.count + counters.rateLimited.count + counters.clientRefusals.count
                    + counters.scrubbed.count + counters.signed.count + counters.egressBlocked.count + counters.egressDenied.count
            }
    }

    /// Every counter as (key, value): the generic ones and the per-exchange ones.
    private func snapshot() -> [Key: UInt64] {
        var result = counters.withLock { $0 }
        let exchange = exchanges.withLock { $0 }
        func add(_ metric: MetricName, _ values: [String], _ amount: UInt64) {
            guard amount > 0 else { return }
            result[Key(name: metric.rawValue, labels: Self.pairs(metric, values)), default: 0] += amount
        }
        for (key, count) in exchange.requests {
            add(.requests, [Self.statusClasses[key.statusClass], key.scope, key.client], count)
        }
        add(.bytesIn, [], exchange.bytesIn)
        add(.bytesOut, [], exchange.bytesOut)
        for (label, count) in exchange.injected { add(.injected, [label], count) }
        for (label, count) in exchange.stripped { add(.stripped, [label], count) }
        for (decision, count) in exchange.redirects { add(.redirects, [decision.rawValue], count) }
        for (proto, count) in exchange.protocols { add(.requestsByProtocol, [proto], count) }
        for (kind, count) in exchange.upstreamErrors { add(.upstreamErrors, [kind], count) }
        for (client, count) in exchange.rateLimited { add(.rateLimited, [client], count) }
        for (reason, count) in exchange.clientRefusals { add(.clientsRefused, [reason], count) }
        for (kind, count) in exchange.loopRefused { add(.loopRefused, [kind], count) }
        for (secret, count) in exchange.scrubbed { add(.scrubbed, [secret], count) }
        for (kind, count) in exchange.signed { add(.signed, [kind], count) }
        for (key, count) in exchange.egressBlocked {
            add(.egressBlocked, [key.secret, key.placeholder ? "placeholder" : "value"], count)
        }
        for (key, count) in exchange.egressDenied { add(.egressDenied, [key.rule, key.client, key.decision.rawValue], count) }
        add(.viewViewersDropped, [], viewViewersDropped.load(ordering: .relaxed))
        add(.viewRecordsPublished, [], viewRecordsPublished.load(ordering: .relaxed))
        return result
    }

    /// A counter's current value (tests, the admin endpoint's checks). `labels` as rendered.
    public func value(_ name: String, _ labels: [(String, String)] = []) -> UInt64 {
        snapshot()[Key(name: name, labels: labels.flatMap { [$0.0, $0.1] })] ?? 0
    }

    public func value(_ metric: MetricName, _ labels: [(String, String)] = []) -> UInt64 {
        value(metric.rawValue, labels)
    }

    private static func render(_ labels: [String]) -> String {
        stride(from: 0, to: labels.count, by: 2).map { "\(labels[$0])=\"\(escapeLabel(labels[$0 + 1]))\"" }.joined(separator: ",")
    }

    /// Prometheus text format 0.0.4 escapes exactly `\\`, `\"` and line feed in label values; JSON's
    /// escaper would also turn a tab into `\t`, which that format does not define.
    static func escapeLabel(_ text: String) -> String {
        var result = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\\": result += "\\\\"
            case "\"": result += "\\\""
            case "\n": result += "\\n"
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    /// Prometheus text exposition format 0.0.4.
    public func render() -> String {
        let snapshot = snapshot()
        var output = ""
        // Counters by name, then the gauges: every `# HELP` and `# TYPE` from the table.
        let counters = MetricName.allCases.filter { $0.kind == .counter }.sorted { $0.rawValue < $1.rawValue }
        let series = Dictionary(grouping: snapshot, by: \.key.name)
        for metric in counters {
            let name = metric.rawValue
            output += Self.header(metric)
            let samples = (series[name] ?? []).map { (Self.render($0.key.labels), $0.value) }.sorted { $0.0 < $1.0 }
            if samples.isEmpty {
                // Unlabelled counters exist from the start; labelled ones appear with their first sample.
                if metric.labels.isEmpty { output += "\(name) 0\n" }
                continue
            }
            for (labels, value) in samples {
                output += labels.isEmpty ? "\(name) \(value)\n" : "\(name){\(labels)} \(value)\n"
            }
        }
        output += Self.header(.clientConnections) + "\(MetricName.clientConnections.rawValue) \(clientConnections.load(ordering: .relaxed))\n"
        output += Self.header(.upstreamConnections) + "\(MetricName.upstreamConnections.rawValue) \(upstreamConnections.load(ordering: .relaxed))\n"
        output += Self.header(.viewViewers) + "\(MetricName.viewViewers.rawValue) \(viewViewers.load(ordering: .relaxed))\n"
        for (metric, value) in [
            (MetricName.h2BufferedBytes, h2Buffered.total), (.h2BufferedBytesPeak, h2Buffered.peak),
            (.h2UpstreamBufferedBytes, h2UpstreamBuffered.total), (.h2UpstreamBufferedBytesPeak, h2UpstreamBuffered.peak),
        ] {
            output += Self.header(metric) + "\(metric.rawValue) \(value)\n"
        }
        return output
    }

    private static func header(_ metric: MetricName) -> String {
        "# HELP \(metric.rawValue) \(metric.help)\n# TYPE \(metric.rawValue) \(metric.kind.rawValue)\n"
    }
}

/// Bytes a kind of connection holds in the proxy: the sum over the open ones, and the most one of
/// them held at once. Each connection reports its own figure when it changes (`update`) and its
/// last one goes when it closes (`update(from: last, to: 0)`).
public final class BufferedBytesGauge: Sendable {
    private let current = Atomic<Int>(0)
    private let highest = Atomic<Int>(0)

    public init() {}

    public var total: Int { current.load(ordering: .relaxed) }
    public var peak: Int { highest.load(ordering: .relaxed) }

    /// One connection went from holding `old` bytes to holding `new`.
    func update(from old: Int, to new: Int) {
        guard old != new else { return }
        current.wrappingAdd(new - old, ordering: .relaxed)
        highest.max(new, ordering: .relaxed)
    }
}
