import HTTP1Codec
import JSONText
import ProxyCore
import Redaction
import ScopePolicy

/// What the live view's record of an exchange is rendered with: the access log's formatter (its
/// fields and redaction), the secret naming of the configuration in force, its policy (which scope
/// did what), the way in for curl, and `explain`.
public struct ViewRecordContext: Sendable {
    public var formatter: LogLineFormatter
    public var naming: SecretNaming
    public var policy: ScopePolicy?
    public var entrance: CurlEntrance
    /// `scopeproxy explain`'s text for a request; nil: none.
    public var explain: (@Sendable (ExplainQuery) -> ExplainAnswer?)?

    public init(
        formatter: LogLineFormatter, naming: SecretNaming, policy: ScopePolicy?, entrance: CurlEntrance,
        explain: (@Sendable (ExplainQuery) -> ExplainAnswer?)? = nil
    ) {
        self.formatter = formatter
        self.naming = naming
        self.policy = policy
        self.entrance = entrance
        self.explain = explain
    }
}

/// The live view's record of one exchange (docs/view.md): one JSON object, with every field of the
/// JSON access log line first (same names, values and redaction: `LogLineFormatter`), then `view`
/// (the table's words), `detail` (the four heads with secrets by name, the rules, curl) and
/// `explain`. No raw newline (one SSE `data:` line). The caller passes it through the log's
/// tripwire before it leaves the worker.
public enum ViewRecord {
    /// `now`: monotonic microseconds, the end of `duration_ms`. `logLine`: the access log's JSON
    /// line of this record (`{...}` and a line feed) when one was made with `context.formatter`:
    /// its fields are this record's first ones, taken as they are instead of made again.
    public static func render(_ record: ExchangeRecord, _ context: ViewRecordContext, now: UInt64, logLine: [UInt8]? = nil) -> [UInt8] {
        let reusable = logLine.flatMap { $0.count > 3 && $0.suffix(2).elementsEqual([UInt8(ascii: "}"), 0x0A]) ? $0.dropLast(2) : nil }
        var line = reusable.map(JSONLine.init(continuing:)) ?? JSONLine()
        line.bytes.reserveCapacity(4096)
        if reusable == nil { context.formatter.appendJSONFields(of: record, now: now, to: &line) }
        let redactor = context.formatter.redactor
        let isConnect = record.tunnel != nil || record.method == "CONNECT"

        line.beginObject("view")
        line.string("decision", decision(record).rawValue)
        optional("origin", record.origin?.hostAndPort, &line)
        optional("path", isConnect ? nil : record.origin.map { _ in redactor.pathAndQuery(record.pathAndQuery ?? "/") }, &line)
        line.number("hop", UInt64(max(1, record.hop)))
        line.endObject()

        let rules = ViewRule.rules(of: record, policy: context.policy, redactor: redactor)
        line.beginObject("detail")
        line.beginObject("request")
        if let client = clientLine(record, redactor: redactor) {
            head("client", line: client, status: nil, record.requestFields ?? HTTPFields(), context.naming, &line)
        } else {
            line.raw("client", "null")
        }
        if let sent = record.upstreamRequest {
            let target = redactor.pathAndQuery(sent.target)
            head("origin", line: "\(sent.method) \(target) HTTP/1.1", status: nil, sent.fields, context.naming, &line)
        } else {
            line.raw("origin", "null")
        }
        line.endObject()
        line.beginObject("response")
        if let received = record.originResponse {
            head("origin", line: nil, status: received.status, received.fields, context.naming, &line)
        } else {
            line.raw("origin", "null")
        }
        // A followed hop's 3xx went no further than the proxy.
        if let status = record.status, record.redirect?.decision != .follow {
            head("client", line: nil, status: status, record.responseFields ?? HTTPFields(), context.naming, &line)
        } else {
            line.raw("client", "null")
        }
        line.endObject()
        line.key("rules")
        appendRules(rules, to: &line)
        optional("curl", CurlText.render(record, rules: rules, naming: context.naming, entrance: context.entrance), &line)
        line.endObject()

        let query = context.explain == nil ? nil : ExplainQuery(record, redactor: redactor)
        if let answer = query.flatMap({ context.explain?($0) }) {
            line.raw("explain", answer.quoted)
        } else {
            line.raw("explain", "null")
        }
        line.bytes.append(UInt8(ascii: "}"))
        return line.bytes
    }

    /// The one word of the table, the filter and the counts: the first that applies.
    public enum Decision: String, Sendable, CaseIterable {
        case refused, failed, followed
        case redirectBlocked = "redirect_blocked"
        case signed, injected, substituted, stripped, scrubbed, passed
        case intercept, tunnel, deny
    }

    public static func decision(_ record: ExchangeRecord) -> Decision {
        if let tunnel = record.tunnel {
            switch tunnel {
            case .intercept: return .intercept
            case .tunnel: return .tunnel
            case .deny: return .deny
            }
        }
        // A blocked redirect is the proxy's own 502 too: said as what it is, before `failed`.
        if record.redirect?.decision == .block { return .redirectBlocked }
        if let failure = record.failure {
            if case .proxy = failure, let status = record.status, (400..<500).contains(status) { return .refused }
            return .failed
        }
        if record.redirect?.decision == .follow { return .followed }
        if record.signed != nil { return .signed }
        if !record.injected.isEmpty { return .injected }
        if !record.substituted.isEmpty { return .substituted }
        if !record.stripped.isEmpty { return .stripped }
        if !record.scrubbed.isEmpty { return .scrubbed }
        return .passed
    }

    /// `GET https://api.github.com/user HTTP/1.1`: the request as the client sent it, the URL as
    /// the log redacts it (the origin in its RFC 6454 form); nil when no head was read.
    static func clientLine(_ record: ExchangeRecord, redactor: Redactor) -> String? {
        guard let method = record.method else { return nil }
        let version =
            switch record.proto {
            case .http1_0: "HTTP/1.0"
            case .h2, .h2c: "HTTP/2"
            case .http1_1, .websocket, nil: "HTTP/1.1"
            }
        guard let origin = record.origin else { return "\(method) - \(version)" }
        if record.tunnel != nil || method == "CONNECT" { return "\(method) \(origin.hostAndPort) \(version)" }
        return "\(method) \(origin.description)\(redactor.pathAndQuery(record.pathAndQuery ?? "/")) \(version)"
    }

    /// A head in `detail` shows at most this many bytes of names and values, each name at most
    /// `maxShownNameBytes` and each value `maxShownValueBytes`; what is cut says how much was.
    static let maxShownHeadBytes = 16 * 1024
    static let maxShownNameBytes = 256
    static let maxShownValueBytes = 2048

    /// `text` cut at a character boundary to at most `limit` bytes, with how many bytes were left out.
    static func clipped(_ text: String, to limit: Int) -> String {
        let total = text.utf8.count
        guard total > limit else { return text }
        var end = text.utf8.index(text.utf8.startIndex, offsetBy: limit)
        // Back to the start of the character the cut falls in (at most a few bytes).
        while end > text.startIndex, end.samePosition(in: text) == nil { end = text.utf8.index(before: end) }
        let kept = text[..<end]
        return kept + "…(+\(total - kept.utf8.count) bytes)"
    }

    /// `"NAME":{"line"|"status": ..., "headers":[[name, value], ...]}`.
    static func head(_ name: String, line text: String?, status: Int?, _ fields: HTTPFields, _ naming: SecretNaming, _ line: inout JSONLine) {
        line.beginObject(name)
        if let text { line.string("line", text) }
        if let status { line.number("status", UInt64(max(0, status))) }
        line.key("headers")
        line.bytes.append(UInt8(ascii: "["))
        var budget = maxShownHeadBytes
        for (index, field) in fields.enumerated() {
            if index > 0 { line.bytes.append(UInt8(ascii: ",")) }
            let lowercase = field.lowercasedName
            // Named (a value in a name is as secret as one in a value), then cut to the bounds.
            let shownName = clipped(naming.shownName(lowercase), to: maxShownNameBytes)
            let shownValue = clipped(naming.shown(lowercase, field.value), to: maxShownValueBytes)
            guard budget >= shownName.utf8.count + shownValue.utf8.count else {
                // A client or an origin cannot make a record big enough to be left out of the
                // view, or to push the ring's other records out (docs/view.md).
                line.bytes += #"["…","\#(fields.count - index) more fields not shown"]"#.utf8
                break
            }
            budget -= shownName.utf8.count + shownValue.utf8.count
            line.bytes.append(UInt8(ascii: "["))
            JSONLine.appendQuoted(shownName, to: &line.bytes)
            line.bytes.append(UInt8(ascii: ","))
            JSONLine.appendQuoted(shownValue, to: &line.bytes)
            line.bytes.append(UInt8(ascii: "]"))
        }
        line.bytes.append(UInt8(ascii: "]"))
        line.endObject()
    }

    static func appendRules(_ rules: [ViewRule], to line: inout JSONLine) {
        line.bytes.append(UInt8(ascii: "["))
        for (index, rule) in rules.enumerated() {
            if index > 0 { line.bytes.append(UInt8(ascii: ",")) }
            var object = JSONLine()
            switch rule {
            case .inject(let header, let scope, let secrets):
                object.string("rule", "inject")
                object.string("header", header)
                optional("scope", scope, &object)
                object.array("secrets", secrets)
            case .strip(let header, let why):
                object.string("rule", "strip")
                object.string("header", header)
                object.string("why", why)
            case .skip(let scope, let why):
                object.string("rule", "skip")
                object.string("scope", scope)
                object.string("why", why)
            case .substitute(let secret):
                object.string("rule", "substitute")
                object.string("secret", secret)
            case .sign(let kind, let scope):
                object.string("rule", "sign")
                object.string("kind", kind)
                optional("scope", scope, &object)
            case .scrub(let secret, let encoding):
                object.string("rule", "scrub")
                object.string("secret", secret)
                object.string("encoding", encoding)
            case .guardStop(let secret, let placeholder, let site):
                object.string("rule", "guard")
                object.string("secret", secret)
                object.raw("placeholder", placeholder ? "true" : "false")
                optional("where", site, &object)
            case .redirect(let decision, let location, let origin):
                object.string("rule", "redirect")
                object.string("decision", decision.rawValue)
                optional("location", location, &object)
                optional("origin", origin, &object)
            case .egress(let note):
                // The log's egress object, its `rule` said as `why` (`rule` names the view's rule).
                object.string("rule", "egress")
                object.string("decision", note.decision.rawValue)
                object.string("why", note.rule)
                object.string("destination", note.destination)
                optional("address", note.address, &object)
            }
            line.bytes += object.bytes
            line.bytes.append(UInt8(ascii: "}"))
        }
        line.bytes.append(UInt8(ascii: "]"))
    }

    /// A string member, or `null`.
    static func optional(_ name: String, _ value: String?, _ line: inout JSONLine) {
        if let value { line.string(name, value) } else { line.raw(name, "null") }
    }
}
