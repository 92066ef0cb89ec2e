import Dispatch
import HTTP1Codec
import JSONText
import PosixSupport
import ProxyCore
import RecordRendering
import Redaction
import ScopePolicy

#if canImport(Glibc)
    import Glibc
#endif

/// Formats, scrubs and writes access log lines. Formatting runs on the worker that finished the
/// exchange; writing happens on one writer thread, a whole line per write(2), so lines never
/// interleave and a slow consumer never blocks an event loop (past a bounded backlog lines are
/// dropped and counted).
public final class AccessLog: Sendable {
    public let format: LogFormat
    /// Text lines with ANSI colour (status class, dim request id): only for a terminal.
    public let colour: Bool
    public let logBodies: Bool
    /// The JSON line's fields and their redaction, shared with the live view's record.
    public let formatter: LogLineFormatter
    private let tripwire: Locked<Tripwire>
    private let metrics: Metrics
    private let output: LogOutput
    private let descriptor: Locked<Int32>
    /// Whole lines waiting for the writer thread, and whether it has been woken for them. Under
    /// load many lines go out in one write(2); a line is never split, and an idle log writes each
    /// line as soon as it is complete.
    private let backlog = Locked<(bytes: [UInt8], lines: Int, flushRequested: Bool)>(([], 0, false))
    private let wake = DispatchSemaphore(value: 0)
    private let written = DispatchSemaphore(value: 0)
    private let observer: (@Sendable (String) -> Void)?
    /// The backlog's bounds: lines and bytes. A line can carry up to a head's worth of safe header
    /// values, so a count alone lets a stalled consumer (a pipe nobody reads) grow memory by
    /// gigabytes; past either bound lines are dropped and counted.
    static let maxPending = 10_000
    /// A batch of at least this many lines means a busy log: the writer then gathers longer.
    static let busyBatch = 16
    static let maxPendingBytes = 16 << 20

    /// Opens the output now: a file that cannot be opened (a missing directory, no permission) is an
    /// error at start, never a proxy that runs and loses every line.
    public init(
        format: LogFormat, colour: Bool = false, output: LogOutput, rules: RedactionRules, logBodies: Bool,
        secretValues: [SecretValue], metrics: Metrics, observer: (@Sendable (String) -> Void)? = nil
    ) throws(EngineError) {
        let fd = Self.open(output)
        if case .file(let path) = output, fd < 0 {
            throw .logOutput("cannot open the access log \(path): \(String(cString: strerror(errno)))")
        }
        self.format = format
        self.colour = colour && format == .text
        self.logBodies = logBodies
        formatter = LogLineFormatter(redactor: Redactor(rules: rules), logBodies: logBodies)
        tripwire = Locked(Tripwire(secrets: secretValues.map(\.exposedBytes)))
        self.metrics = metrics
        self.output = output
        self.observer = observer
        descriptor = Locked(fd)
        if output != .discard {
            PosixThread(name: "scopeproxy-log") { [self] in writerLoop() }.detach()
        }
    }

    private func writerLoop() {
        var lastBatch = 0
        while true {
            wake.wait()
            // Let lines gather for a moment: 2 ms while the log is quiet (a line is on disk about
            // as soon as it is complete), 10 ms once a batch held many lines. Under load one
            // write(2) then carries hundreds of lines, and the writer thread wakes (futex, sleep,
            // a switch on the worker's core) about a hundred times a second, not once per
            // request: measured, that kernel time was most of what the log cost per request.
            usleep(lastBatch >= Self.busyBatch ? 10_000 : 2_000)
            let (bytes, lines, flush) = backlog.withLock { state -> ([UInt8], Int, Bool) in
                defer { state = ([], 0, false) }
                return (state.bytes, state.lines, state.flushRequested)
            }
            lastBatch = lines
            if !bytes.isEmpty {
                let fd = descriptor.withLock { $0 }
                if let failure = writeReportingError(fd, bytes) { writeFailed(failure) }
            }
            if flush { written.signal() }
        }
    }

    /// The secret values the tripwire looks for (after a reload or a rotation).
    public func updateSecrets(_ values: [SecretValue]) {
        let replacement = Tripwire(secrets: values.map(\.exposedBytes))
        tripwire.withLock { $0 = replacement }
    }

    /// A failed write (disk full, a closed pipe) loses those lines: they are counted, and said on
    /// stderr at most once a minute so a full disk does not also flood the terminal.
    private func writeFailed(_ errorNumber: Int32) {
        metrics.increment(.logWriteError)
        let now = time(nil)
        guard now - lastWriteErrorReport >= 60 else { return }
        lastWriteErrorReport = now
        Diagnostics.error(
            "log_write_failed",
            [
                ("error", String(cString: strerror(errorNumber))),
                ("hint", "lines are lost until writes succeed; see \(MetricName.logWriteErrors.rawValue)"),
            ])
    }

    /// Touched by the writer thread only.
    nonisolated(unsafe) private var lastWriteErrorReport: time_t = 0

    /// SIGHUP: reopen a file output (log rotation). When the new file cannot be opened the old
    /// descriptor stays in use (lines keep going somewhere) and the failure is said.
    public func reopen() {
        guard case .file(let path) = output else { return }
        let fresh = Self.open(output)
        guard fresh >= 0 else {
            Diagnostics.error(
                "log_reopen_failed",
                [
                    ("path", path), ("error", String(cString: strerror(errno))),
                    ("hint", "still writing to the previously opened file"),
                ])
            return
        }
        let old = descriptor.withLock { current in
            defer { current = fresh }
            return current
        }
        // A write in flight may still use the old descriptor for a moment; closing it a second
        // later costs nothing and avoids writing into a reused fd number.
        PosixThread(name: "scopeproxy-logrot") {
            sleep(1); close(old)
        }.detach()
    }

    private static func open(_ output: LogOutput) -> Int32 {
        switch output {
        case .standardOutput: return 1
        case .standardError: return 2
        case .discard: return -1
        case .file(let path): return Glibc.open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        }
    }

    /// Writes `record`'s line. Returns the JSON line as formatted (before the tripwire), which
    /// the live view's record starts with (`ViewRecord.render`), or nil (a text log, none made).
    @discardableResult
    func record(_ record: ExchangeRecord) -> [UInt8]? {
        // A log kept only for the live view's redaction (`--no-access-log` with `admin:`) writes
        // nothing: no line is formatted for it.
        if output == .discard, observer == nil { return nil }
        let line = self.format == .json ? json(record) : text(record)
        let reusable = self.format == .json ? line : nil
        // The lock only hands out the current (immutable) tripwire; scanning runs outside it, so
        // workers finishing exchanges at once do not queue behind each other's scans.
        let (scrubbed, hits) = tripwire.withLock { $0 }.scrub(line)
        if hits > 0 { metrics.increment(.logTripwireHits, by: UInt64(hits)) }
        observer?(String(decoding: scrubbed, as: UTF8.self))
        guard output != .discard else { return reusable }
        let (accepted, wasEmpty) = backlog.withLock { state -> (Bool, Bool) in
            guard state.lines < Self.maxPending, state.bytes.count + scrubbed.count <= Self.maxPendingBytes else {
                return (false, false)
            }
            let wasEmpty = state.lines == 0
            state.bytes.append(contentsOf: scrubbed)
            state.lines += 1
            return (true, wasEmpty)
        }
        if !accepted {
            metrics.increment(.logLineDropped)
        } else if wasEmpty {
            wake.signal()
        }
        return reusable
    }

    /// Another text about an exchange (a live view record) through the tripwire every line goes
    /// through: a secret value anywhere in it is masked, and the hit counted like a line's.
    public func scrubbed(_ bytes: [UInt8]) -> [UInt8] {
        let (scrubbed, hits) = tripwire.withLock { $0 }.scrub(bytes)
        if hits > 0 { metrics.increment(.logTripwireHits, by: UInt64(hits)) }
        return scrubbed
    }

    /// Waits until every queued line is written (shutdown and tests).
    public func flush() {
        guard output != .discard else { return }
        backlog.withLock { $0.flushRequested = true }
        wake.signal()
        _ = written.wait(timeout: .now() + 5)
    }

    // MARK: Formatting

    /// The line's fields, through the implementation the live view's record shares.
    private func forEachField(of record: ExchangeRecord, _ body: (LogField, LogFieldRow, LogFact?) -> Void) {
        formatter.forEachField(of: record, body)
    }

    private func url(_ origin: Origin, _ pathAndQuery: String?, authorityOnly: Bool) -> String {
        formatter.url(origin, pathAndQuery, authorityOnly: authorityOnly)
    }

    /// One line, built as bytes: no intermediate strings for the parts the proxy writes itself.
    private func json(_ record: ExchangeRecord) -> [UInt8] {
        var line = JSONLine()
        formatter.appendJSONFields(of: record, now: monotonicMicroseconds(), to: &line)
        return line.finishLine()
    }

    /// `TS METHOD URL STATUS DURATIONms key=value... id=ID`: the same rows, placed by their
    /// `LogTextForm`. A text line leaves out a list the JSON line writes empty, and carries no
    /// headers and no bodies.
    private func text(_ record: ExchangeRecord) -> [UInt8] {
        var line: [UInt8] = []
        forEachField(of: record) { field, row, fact in
            guard row.text == .head else { return }
            word(nil, painted: field == .status ? LogColour.status(record.status) : nil, into: &line) { text(fact, into: &$0) }
        }
        forEachField(of: record) { _, row, fact in
            guard case .keyed(let key) = row.text else { return }
            guard let fact else {
                if row.presence == .nullable { word(key, into: &line) { text(nil, into: &$0) } }
                return
            }
            switch fact {
            case .names(let names) where names.isEmpty:
                return
            case .reasons(let skipped, _) where skipped.isEmpty:
                return
            case .failure(let failure):
                // The failure's detail follows its code, both in red.
                word(key, painted: LogColour.red, into: &line) { text(fact, into: &$0) }
                if let reason = failure.reason { word(LogField.reason.name, painted: LogColour.red, into: &line) { $0 += reason.utf8 } }
            case .tunnel:
                // `decision=tunnel in=N out=N`: a CONNECT line's byte counts follow its decision.
                word(key, into: &line) { text(fact, into: &$0) }
                forEachField(of: record) { _, row, fact in
                    if case .withDecision(let key) = row.text { word(key, into: &line) { text(fact, into: &$0) } }
                }
            default:
                word(key, into: &line) { text(fact, into: &$0) }
            }
        }
        forEachField(of: record) { _, row, fact in
            if case .last(let key) = row.text, let fact { word(key, painted: LogColour.dim, into: &line) { text(fact, into: &$0) } }
        }
        line.append(UInt8(ascii: "\n"))
        return line
    }

    /// One word of a text line: a space before all but the first, `key=` when it has a key, in
    /// colour when the line is.
    private func word(_ key: String?, painted code: String? = nil, into line: inout [UInt8], _ value: (inout [UInt8]) -> Void) {
        if !line.isEmpty { line.append(UInt8(ascii: " ")) }
        let code = colour ? code : nil
        if let code { line += "\u{1B}[".utf8; line += code.utf8; line.append(UInt8(ascii: "m")) }
        if let key { line += key.utf8; line.append(UInt8(ascii: "=")) }
        value(&line)
        if code != nil { line += "\u{1B}[0m".utf8 }
    }

    /// A fact as the text line writes it; `-` for none.
    private func text(_ fact: LogFact?, into line: inout [UInt8]) {
        func join(_ parts: [String], _ separator: UInt8 = UInt8(ascii: ",")) {
            for (index, part) in parts.enumerated() {
                if index > 0 { line.append(separator) }
                line += part.utf8
            }
        }
        guard let fact else { return line.append(UInt8(ascii: "-")) }
        switch fact {
        case .now: Self.appendTimestamp(to: &line, quoted: false)
        case .since(let start):
            Self.appendMilliseconds(since: start, to: &line)
            line += "ms".utf8
        case .text(let value): line += value.utf8
        case .number(let value): JSONLine.appendDecimal(value, to: &line)
        case .names(let names), .joinedNames(let names): join(names)
        case .target(let origin, let path, let authorityOnly): line += url(origin, path, authorityOnly: authorityOnly).utf8
        case .finding(let finding):
            line += "\(finding.secret):\(finding.isPlaceholder ? "placeholder" : "value"):\(finding.encoding)".utf8
        case .reasons(let skipped, _):
            // A failure's detail is written after its error code (`LogField.error`).
            join(skipped.map { "\($0.scope):\($0.why.rawValue)" })
        case .redirect(let redirect): line += "\(redirect.decision.rawValue):\(redirect.origin?.withPort ?? "unreadable")".utf8
        case .tunnel(let decision): line += decision.rawValue.utf8
        case .failure(let failure): line += failure.code.utf8
        case .egress(let note): line += note.word.utf8
        case .fields, .body:
            // Never placed on a text line (`LogTextForm.jsonOnly`); a count, if ever, never a value.
            line += fact.description.utf8
        }
    }

    /// `12.345`: milliseconds with three decimals.
    static func appendMilliseconds(since start: UInt64, to bytes: inout [UInt8]) {
        LogLineFormatter.appendMilliseconds(since: start, now: monotonicMicroseconds(), to: &bytes)
    }

    /// RFC 3339 UTC with milliseconds, without Foundation.
    static func appendTimestamp(to bytes: inout [UInt8], quoted: Bool) {
        LogLineFormatter.appendTimestamp(to: &bytes, quoted: quoted)
    }
}
