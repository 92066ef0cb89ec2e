import HTTP1Codec
import JSONText
import ProxyCore
import Redaction
import ScopePolicy

#if canImport(Glibc)
    import Glibc
#endif

/// The access log's fields of one record, as the JSON line writes them: the one implementation the
/// log line (`AccessLog`) and the live view's record (`ViewRecord`) share, so that both carry the
/// same fields with the same redaction (docs/logging.md). The text line reads the same rows.
public struct LogLineFormatter: Sendable {
    public let redactor: Redactor
    /// `log.bodies`: the body summaries are fields of the line.
    public let logBodies: Bool

    public init(redactor: Redactor, logBodies: Bool) {
        self.redactor = redactor
        self.logBodies = logBodies
    }

    /// The fields a line carries, in the table's order (`LogField`, Sources/ProxyCore/LogField.swift):
    /// each row says on which lines and when, and reads its fact from the record; what is left here
    /// is how each kind of fact is written, with its redaction.
    public func forEachField(of record: ExchangeRecord, _ body: (LogField, LogFieldRow, LogFact?) -> Void) {
        forEachCarried(by: record) { index, row in body(LogField.ordered[index], row, row.read(record)) }
    }

    /// The rows a line of `record` carries, with their index in `LogField.ordered` (and `rows`,
    /// `quotedKeys`).
    @inline(__always)
    private func forEachCarried(by record: ExchangeRecord, _ body: (Int, LogFieldRow) -> Void) {
        let isTunnel = record.tunnel != nil
        let rows = LogField.rows
        for index in rows.indices {
            let row = rows[index]
            guard row.lines.includes(tunnel: isTunnel), row.presence != .withBodies || logBodies else { continue }
            body(index, row)
        }
    }

    /// The log's origins carry their port always (`https://api.x:443`), as they always have: a log
    /// is read by programs that compare them (docs/logging.md); people's texts (banner, `explain`,
    /// errors) print the RFC 6454 form.
    public func url(_ origin: Origin, _ pathAndQuery: String?, authorityOnly: Bool) -> String {
        authorityOnly ? origin.withPort : origin.withPort + redactor.pathAndQuery(pathAndQuery ?? "/")
    }

    /// Every field of the JSON line, appended to `line` (the caller closes it). `now`: monotonic
    /// microseconds, the end of `duration_ms`.
    public func appendJSONFields(of record: ExchangeRecord, now: UInt64, to line: inout JSONLine) {
        // Each field's key written in advance (`LogField.quotedKeys`).
        let keys = LogField.quotedKeys
        forEachCarried(by: record) { index, row in
            if let fact = row.read(record) {
                json(fact, key: keys[index], now: now, into: &line)
            } else if row.presence == .nullable {
                line.key(quoted: keys[index])
                line.bytes += "null".utf8
            }
        }
    }

    private func json(_ fact: LogFact, key: [UInt8], now: UInt64, into line: inout JSONLine) {
        switch fact {
        case .now:
            line.key(quoted: key)
            Self.appendTimestamp(to: &line.bytes, quoted: true)
        case .since(let start):
            line.key(quoted: key)
            Self.appendMilliseconds(since: start, now: now, to: &line.bytes)
        case .text(let value): line.string(quoted: key, value)
        case .number(let value): line.number(quoted: key, value)
        case .names(let names): line.array(quoted: key, names)
        case .joinedNames(let names): line.string(quoted: key, names.joined(separator: ","))
        case .target(let origin, let path, let authorityOnly): line.string(quoted: key, url(origin, path, authorityOnly: authorityOnly))
        case .finding(let finding):
            // Secrets by name only, never by value.
            line.beginObject(quoted: key)
            line.string("secret", finding.secret)
            line.raw("placeholder", finding.isPlaceholder ? "true" : "false")
            line.string("encoding", finding.encoding.description)
            line.endObject()
        case .reasons(let skipped, let failure):
            line.string(quoted: key, (skipped.map(\.description) + (failure.map { [$0] } ?? [])).joined(separator: "; "))
        case .redirect(let redirect):
            line.beginObject(quoted: key)
            line.optionalString("location", redirect.location.map(redactor.url))
            if let origin = redirect.origin { line.string("origin", origin.withPort) } else { line.raw("origin", "null") }
            line.string("decision", redirect.decision.rawValue)
            line.endObject()
        case .fields(let fields):
            line.beginObject(quoted: key)
            redactor.forEachHeader(fields) { name, value in line.string(name, value) }
            line.endObject()
        case .body(let body):
            line.string(
                quoted: key, redactor.bodySummary(body.bytes, totalBytes: body.total, contentType: body.contentType, truncated: body.truncated))
        case .tunnel(let decision): line.string(quoted: key, decision.rawValue)
        case .failure(let failure): line.string(quoted: key, failure.code)
        case .egress(let note):
            line.beginObject(quoted: key)
            line.string("decision", note.decision.rawValue)
            line.string("rule", note.rule)
            line.string("destination", note.destination)
            line.optionalString("address", note.address)
            line.endObject()
        }
    }

    /// `12.345`: milliseconds with three decimals from `start` to `now` (monotonic microseconds).
    public static func appendMilliseconds(since start: UInt64, now: UInt64, to bytes: inout [UInt8]) {
        let elapsed = now >= start ? now - start : 0
        JSONLine.appendDecimal(elapsed / 1000, to: &bytes)
        bytes.append(UInt8(ascii: "."))
        JSONLine.appendDecimal(elapsed % 1000, minimumDigits: 3, to: &bytes)
    }

    /// RFC 3339 UTC with milliseconds, without Foundation.
    public static func appendTimestamp(to bytes: inout [UInt8], quoted: Bool) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var seconds = now.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        if quoted { bytes.append(UInt8(ascii: "\"")) }
        func put(_ value: Int32, _ digits: Int, _ separator: UInt8?) {
            JSONLine.appendDecimal(UInt64(value), minimumDigits: digits, to: &bytes)
            if let separator { bytes.append(separator) }
        }
        put(parts.tm_year + 1900, 4, UInt8(ascii: "-"))
        put(parts.tm_mon + 1, 2, UInt8(ascii: "-"))
        put(parts.tm_mday, 2, UInt8(ascii: "T"))
        put(parts.tm_hour, 2, UInt8(ascii: ":"))
        put(parts.tm_min, 2, UInt8(ascii: ":"))
        put(parts.tm_sec, 2, UInt8(ascii: "."))
        put(Int32(now.tv_nsec / 1_000_000), 3, UInt8(ascii: "Z"))
        if quoted { bytes.append(UInt8(ascii: "\"")) }
    }

    /// Microseconds on the monotonic clock (the clock `ExchangeRecord.startedAt` is read on).
    public static func monotonicMicroseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
    }
}
