import PosixSupport
import Dispatch
import HTTP1Codec
import JSONText
import ProxyCore
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
    private let redactor: Redactor
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
    static let maxPendingBytes = 16 << 20

    /// Opens the output now: a file that cannot be opened (a missing directory, no permission) is an
    /// error at start, never a proxy that runs and loses every line.
    public init(format: LogFormat, colour: Bool = false, output: LogOutput, rules: RedactionRules, logBodies: Bool,
                secretValues: [SecretValue], metrics: Metrics, observer: (@Sendable (String) -> Void)? = nil) throws(EngineError) {
        let fd = Self.open(output)
        if case .file(let path) = output, fd < 0 {
            throw .logOutput("cannot open the access log \(path): \(String(cString: strerror(errno)))")
        }
        self.format = format
        self.colour = colour && format == .text
        self.logBodies = logBodies
        redactor = Redactor(rules: rules)
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
        while true {
            wake.wait()
            // Let lines gather for a moment: under load one write(2) carries hundreds of whole
            // lines and the writer wakes a few hundred times a second, not once per request.
            usleep(2_000)
            let (bytes, flush) = backlog.withLock { state -> ([UInt8], Bool) in
                defer { state = ([], 0, false) }
                return (state.bytes, state.flushRequested)
            }
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
        Diagnostics.error("log_write_failed", [("error", String(cString: strerror(errorNumber))),
                                               ("hint", "lines are lost until writes succeed; see \(MetricName.logWriteErrors.rawValue)")])
    }

    /// Touched by the writer thread only.
    nonisolated(unsafe) private var lastWriteErrorReport: time_t = 0

    /// SIGHUP: reopen a file output (log rotation). When the new file cannot be opened the old
    /// descriptor stays in use (lines keep going somewhere) and the failure is said.
    public func reopen() {
        guard case .file(let path) = output else { return }
        let fresh = Self.open(output)
        guard fresh >= 0 else {
            Diagnostics.error("log_reopen_failed", [("path", path), ("error", String(cString: strerror(errno))),
                                                    ("hint", "still writing to the previously opened file")])
            return
        }
        let old = descriptor.withLock { current in
            defer { current = fresh }
            return current
        }
        // A write in flight may still use the old descriptor for a moment; closing it a second
        // later costs nothing and avoids writing into a reused fd number.
        PosixThread(name: "scopeproxy-logrot") { sleep(1); close(old) }.detach()
    }

    private static func open(_ output: LogOutput) -> Int32 {
        switch output {
        case .standardOutput: return 1
        case .standardError: return 2
        case .discard: return -1
        case .file(let path): return Glibc.open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        }
    }

    func record(_ record: ExchangeRecord) {
        let line = self.format == .json ? json(record) : Array(text(record).utf8)
        // The lock only hands out the current (immutable) tripwire; scanning runs outside it, so
        // workers finishing exchanges at once do not queue behind each other's scans.
        let (scrubbed, hits) = tripwire.withLock { $0 }.scrub(line)
        if hits > 0 { metrics.increment(.logTripwireHits, by: UInt64(hits)) }
        observer?(String(decoding: scrubbed, as: UTF8.self))
        guard output != .discard else { return }
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
    }

    /// Waits until every queued line is written (shutdown and tests).
    public func flush() {
        guard output != .discard else { return }
        backlog.withLock { $0.flushRequested = true }
        wake.signal()
        _ = written.wait(timeout: .now() + 5)
    }

    // MARK: Formatting

    /// The log's origins carry their port always (`https://api.x:443`), as they always have: a log
    /// is read by programs that compare them (docs/logging.md); people's texts (banner, `explain`,
    /// errors) print the RFC 6454 form.
    private func url(_ record: ExchangeRecord) -> String? {
        guard let origin = record.origin else { return nil }
        // A CONNECT names an authority, not a path: its line shows the origin alone, whatever became of it.
        if record.tunnel != nil || record.method == "CONNECT" { return origin.withPort }
        return origin.withPort + redactor.pathAndQuery(record.pathAndQuery ?? "/")
    }

    /// One line, built as bytes: no intermediate strings for the parts the proxy writes itself.
    private func json(_ record: ExchangeRecord) -> [UInt8] {
        var line = JSONLine()
        line.key("ts")
        Self.appendTimestamp(to: &line.bytes, quoted: true)
        line.string("id", record.id)
        line.string("client", record.client)
        // The configured client's name (`clients:`); absent when the proxy does not tell clients
        // apart or did not recognise this one (then `reason` says why).
        line.optionalString("client_id", record.clientID)
        line.optionalString("method", record.method)
        line.optionalString("url", url(record))
        if let status = record.status { line.number("status", UInt64(status)) } else { line.raw("status", "null") }
        line.number("bytes_in", record.bytesIn)
        line.number("bytes_out", record.bytesOut)
        line.key("duration_ms")
        Self.appendMilliseconds(since: record.startedAt, to: &line.bytes)
        if let decision = record.tunnel {
            line.string("decision", decision.rawValue)
            line.optionalString("reason", record.failure?.reason)
        } else {
            if record.scopes.isEmpty { line.raw("scope", "null") } else { line.string("scope", record.scopes.joined(separator: ",")) }
            line.array("injected", record.injected)
            line.array("stripped", record.stripped)
            // Secrets by name only, never by value; present when something happened.
            if let signed = record.signed { line.string("signed", signed) }
            if !record.substituted.isEmpty { line.array("substituted", record.substituted) }
            if !record.scrubbed.isEmpty { line.array("scrubbed", Self.scrubbedNames(record)) }
            if let encoding = record.scrubSkipped { line.string("scrub_skipped", encoding) }
            if let finding = record.guardFinding {
                line.beginObject("guard")
                line.string("secret", finding.secret)
                line.raw("placeholder", finding.isPlaceholder ? "true" : "false")
                line.string("encoding", finding.encoding.description)
                line.endObject()
            }
            let reasons = record.skipped.map(\.description) + (record.failure?.reason.map { [$0] } ?? [])
            if !reasons.isEmpty { line.string("reason", reasons.joined(separator: "; ")) }
            if let redirect = record.redirect {
                line.beginObject("redirect")
                line.optionalString("location", redirect.location.map(redactor.url))
                if let origin = redirect.origin { line.string("origin", origin.withPort) } else { line.raw("origin", "null") }
                line.string("decision", redirect.decision.rawValue)
                line.endObject()
            }
            if let fields = record.requestFields { headers(fields, as: "req_headers", into: &line) }
            if let fields = record.responseFields { headers(fields, as: "resp_headers", into: &line) }
            if logBodies, let body = record.requestBody { line.string("req_body", summary(body)) }
            if logBodies, let body = record.responseBody { line.string("resp_body", summary(body)) }
        }
        line.optionalString("error", record.failure?.code)
        return line.finishLine()
    }

    /// The names of the secrets masked in the response, each once, in the order first found (the
    /// record has one finding per form of a value; the metric counts them).
    static func scrubbedNames(_ record: ExchangeRecord) -> [String] {
        var names: [String] = []
        for finding in record.scrubbed where !names.contains(finding.secret) { names.append(finding.secret) }
        return names
    }

    private func summary(_ body: ExchangeRecord.ObservedBody) -> String {
        redactor.bodySummary(body.bytes, totalBytes: body.total, contentType: body.contentType, truncated: body.truncated)
    }

    private func headers(_ fields: HTTPFields, as name: String, into line: inout JSONLine) {
        line.beginObject(name)
        redactor.forEachHeader(fields) { name, value in line.string(name, value) }
        line.endObject()
    }

    private func text(_ record: ExchangeRecord) -> String {
        let status = record.status.map(String.init) ?? "-"
        var parts = [Self.timestamp(), record.method ?? "-", url(record) ?? "-",
                     colour ? Self.paint(status, Self.statusColour(record.status)) : status,
                     Self.milliseconds(since: record.startedAt) + "ms"]
        if let clientID = record.clientID { parts.append("client=\(clientID)") }
        if let decision = record.tunnel {
            parts.append("decision=\(decision.rawValue) in=\(record.bytesIn) out=\(record.bytesOut)")
        } else {
            parts.append("scope=\(record.scopes.isEmpty ? "-" : record.scopes.joined(separator: ","))")
            if !record.injected.isEmpty { parts.append("injected=\(record.injected.joined(separator: ","))") }
            if !record.stripped.isEmpty { parts.append("stripped=\(record.stripped.joined(separator: ","))") }
            if let signed = record.signed { parts.append("signed=\(signed)") }
            if !record.substituted.isEmpty { parts.append("substituted=\(record.substituted.joined(separator: ","))") }
            if !record.scrubbed.isEmpty { parts.append("scrubbed=\(Self.scrubbedNames(record).joined(separator: ","))") }
            if let encoding = record.scrubSkipped { parts.append("scrub_skipped=\(encoding)") }
            if let finding = record.guardFinding {
                parts.append("guard=\(finding.secret):\(finding.isPlaceholder ? "placeholder" : "value"):\(finding.encoding)")
            }
            if !record.skipped.isEmpty { parts.append("reason=\(record.skipped.map { "\($0.scope):\($0.why.rawValue)" }.joined(separator: ","))") }
            if let redirect = record.redirect {
                parts.append("redirect=\(redirect.decision.rawValue):\(redirect.origin?.withPort ?? "unreadable")")
            }
        }
        if let failure = record.failure { parts.append(colour ? Self.paint("error=\(failure.code)", Self.red) : "error=\(failure.code)") }
        if let reason = record.failure?.reason { parts.append(colour ? Self.paint("reason=\(reason)", Self.red) : "reason=\(reason)") }
        parts.append(colour ? Self.paint("id=\(record.id)", Self.dim) : "id=\(record.id)")
        return parts.joined(separator: " ") + "\n"
    }

    // SGR codes for the text format on a terminal.
    static let green = "32", cyan = "36", yellow = "33", red = "31", magenta = "35", dim = "2"

    /// 2xx green, 3xx cyan, 4xx yellow, 5xx red, anything else (1xx, none) magenta.
    static func statusColour(_ status: Int?) -> String {
        switch status ?? 0 {
        case 200..<300: green
        case 300..<400: cyan
        case 400..<500: yellow
        case 500..<600: red
        default: magenta
        }
    }

    static func paint(_ text: String, _ code: String) -> String { "\u{1B}[\(code)m\(text)\u{1B}[0m" }

    static func milliseconds(since start: UInt64) -> String {
        var bytes: [UInt8] = []
        appendMilliseconds(since: start, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `12.345`: milliseconds with three decimals.
    static func appendMilliseconds(since start: UInt64, to bytes: inout [UInt8]) {
        let elapsed = monotonicMicroseconds() - start
        JSONLine.appendDecimal(elapsed / 1000, to: &bytes)
        bytes.append(UInt8(ascii: "."))
        JSONLine.appendDecimal(elapsed % 1000, minimumDigits: 3, to: &bytes)
    }

    static func timestamp(quoted: Bool = false) -> String {
        var bytes: [UInt8] = []
        appendTimestamp(to: &bytes, quoted: quoted)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// RFC 3339 UTC with milliseconds, without Foundation.
    static func appendTimestamp(to bytes: inout [UInt8], quoted: Bool) {
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
}
