import ProxyCore
import RecordRendering
import ScopePolicy

/// One view record (docs/view.md, "The event stream") as `scopeproxy tail` prints it: the access
/// log's text line (`TS METHOD URL STATUS DURATIONms key=value... id=ID`, docs/logging.md "Text
/// format"), made from the record's JSON by the same field table (`LogField`) the access log's
/// formatter walks, so the two cannot drift: a field added to the table makes `word(for:)` below ask
/// for its text form. The record comes from whatever answers on the admin port: it is read with
/// bounds and refused whole when it is not what the proxy writes; nothing in it is trusted to be
/// printable (control characters become `?`, so no escape sequence reaches the terminal).
enum TailText {
    /// A record larger than this is refused before parsing (the proxy's largest lines carry a
    /// head's worth of safe header values and the record's detail: well under it).
    static let maxRecordBytes = 1 << 20

    struct Unreadable: Error, Equatable {
        let reason: String
    }

    /// The line and the view's words about it.
    struct Rendered: Equatable {
        /// The access log's text line, without its line feed.
        let line: String
        /// `view.decision` (`injected`, `refused`, ...), when the record has one.
        let decision: String?
        /// `view.hop`: 2 and more for the hops of a redirect the proxy followed.
        let hop: Int?
    }

    static func render(_ json: [UInt8], colour: Bool) -> Result<Rendered, Unreadable> {
        guard json.count <= maxRecordBytes else { return .failure(Unreadable(reason: "record larger than 1 MiB")) }
        let value: TokenJSON
        do { value = try TokenJSON.parse(json) } catch { return .failure(Unreadable(reason: error.reason)) }
        guard case .object(let members) = value else { return .failure(Unreadable(reason: "the record is not a JSON object")) }
        var builder = LineBuilder(members: members, colour: colour)
        do { try builder.build() } catch { return .failure(error) }
        let view: [String: TokenJSON]
        if case .object(let object)? = members["view"] { view = object } else { view = [:] }
        let decision: String? = if case .string(let word)? = view["decision"] { printable(word) } else { nil }
        let hop: Int? = if case .number(let text)? = view["hop"], text.utf8.count <= 6 { Int(text) } else { nil }
        return .success(Rendered(line: builder.line, decision: decision, hop: hop))
    }

    /// The dim line under a record: the view's decision word (and the hop of a followed redirect).
    /// None for a CONNECT line, whose `decision=` already says it.
    static func decisionLine(_ rendered: Rendered, colour: Bool) -> String? {
        guard let decision = rendered.decision, !rendered.line.contains(" decision=\(decision)") else { return nil }
        let hop = rendered.hop.map { $0 > 1 ? " (redirect hop \($0))" : "" } ?? ""
        let text = "  -> \(decision)\(hop)"
        return colour ? "\u{1B}[\(LogColour.dim)m\(text)\u{1B}[0m" : text
    }

    /// UTF-8 as text with every control character (C0, DEL, C1) replaced by `?`: a terminal
    /// would act on an escape sequence a hostile listener put in a field.
    static func printable(_ bytes: [UInt8]) -> String {
        let text = String(decoding: bytes, as: UTF8.self)
        guard text.unicodeScalars.contains(where: isControl) else { return text }
        var clean = String.UnicodeScalarView()
        for scalar in text.unicodeScalars { clean.append(isControl(scalar) ? "?" : scalar) }
        return String(clean)
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }

    /// The text line, word by word, in the order `AccessLog.text` writes them: the head words,
    /// then the keyed words in table order, then the last (the request id).
    private struct LineBuilder {
        let members: [String: TokenJSON]
        let colour: Bool
        var line = ""

        init(members: [String: TokenJSON], colour: Bool) {
            self.members = members
            self.colour = colour
        }

        /// A CONNECT line carries `decision` (and no scope fields).
        var isTunnel: Bool { members[LogField.decision.name] != nil }

        /// The value of a field; nil when the line has none (absent, or `null`).
        func value(_ field: LogField) -> TokenJSON? {
            guard let value = members[field.name] else { return nil }
            if case .null = value { return nil }
            return value
        }

        mutating func build() throws(Unreadable) {
            let fields = zip(LogField.ordered, LogField.rows).filter { $0.1.lines.includes(tunnel: isTunnel) }
            for (field, row) in fields where row.text == .head {
                let text = try value(field).map { value throws(Unreadable) in try head(field, value) } ?? "-"
                word(nil, painted: field == .status ? LogColour.status(status) : nil, text)
            }
            for (field, row) in fields {
                guard case .keyed(let key) = row.text else { continue }
                guard let value = value(field) else {
                    if row.presence == .nullable { word(key, "-") }
                    continue
                }
                try keyed(field, key: key, value, fields: fields)
            }
            for (field, row) in fields {
                if case .last(let key) = row.text, let value = value(field) { word(key, painted: LogColour.dim, try scalar(field, value)) }
            }
        }

        var status: Int? {
            guard case .number(let text)? = value(.status), text.utf8.count <= 3 else { return nil }
            return Int(text)
        }

        /// A head word: the time, method, URL and status as they are; the duration with `ms`.
        func head(_ field: LogField, _ value: TokenJSON) throws(Unreadable) -> String {
            let text = try scalar(field, value)
            return field == .durationMS ? text + "ms" : text
        }

        /// A keyed word (or words: `error` brings its reason, `decision` its byte counts).
        mutating func keyed(_ field: LogField, key: String, _ value: TokenJSON, fields: [(LogField, LogFieldRow)]) throws(Unreadable) {
            switch field {
            case .injected, .stripped, .substituted, .scrubbed:
                let names = try strings(field, value)
                if !names.isEmpty { word(key, names.joined(separator: ",")) }
            case .guard:
                let object = try object(field, value)
                let placeholder: Bool
                switch object["placeholder"] {
                case .bool(let flag)?: placeholder = flag
                default: throw Unreadable(reason: "guard.placeholder is not true or false")
                }
                word(
                    key,
                    "\(try text(object["secret"], "guard.secret")):\(placeholder ? "placeholder" : "value"):\(try text(object["encoding"], "guard.encoding"))"
                )
            case .egress:
                let object = try object(field, value)
                let decision = try text(object["decision"], "egress.decision"), rule = try text(object["rule"], "egress.rule")
                word(key, try TailText.egressWord(decision: decision, rule: rule))
            case .redirect:
                let object = try object(field, value)
                let origin = object["origin"].flatMap { value -> TokenJSON? in if case .null = value { nil } else { value } }
                word(
                    key,
                    "\(try text(object["decision"], "redirect.decision")):\(try origin.map { value throws(Unreadable) in try text(value, "redirect.origin") } ?? "unreadable")"
                )
            case .reason:
                let skipped = TailText.reasonParts(try scalar(field, value), isTunnel: isTunnel, hasError: self.value(.error) != nil).skipped
                if !skipped.isEmpty { word(key, skipped.joined(separator: ",")) }
            case .error:
                word(key, painted: LogColour.red, try scalar(field, value))
                if let reason = self.value(.reason) {
                    let failure = TailText.reasonParts(try scalar(.reason, reason), isTunnel: isTunnel, hasError: true).failure
                    if let failure { word(LogField.reason.name, painted: LogColour.red, failure) }
                }
            case .decision:
                word(key, try scalar(field, value))
                for (other, row) in fields {
                    if case .withDecision(let otherKey) = row.text {
                        word(otherKey, try self.value(other).map { value throws(Unreadable) in try scalar(other, value) } ?? "-")
                    }
                }
            case .ts, .id, .client, .clientID, .originalDestination, .method, .proto, .url, .status, .bytesIn, .bytesOut, .durationMS, .scope,
                .signed, .scrubSkipped, .upstream, .requestHeaders, .responseHeaders, .requestBody, .responseBody:
                word(key, try scalar(field, value))
            }
        }

        /// A string as its text, a number as written: what a scalar field holds.
        func scalar(_ field: LogField, _ value: TokenJSON) throws(Unreadable) -> String {
            try text(value, field.name)
        }

        func text(_ value: TokenJSON?, _ name: String) throws(Unreadable) -> String {
            switch value {
            case .string(let bytes)?: return TailText.printable(bytes)
            case .number(let text)?: return text
            default: throw Unreadable(reason: "\(name) is not a string or a number")
            }
        }

        func strings(_ field: LogField, _ value: TokenJSON) throws(Unreadable) -> [String] {
            guard case .array(let items) = value else { throw Unreadable(reason: "\(field.name) is not a list") }
            var names: [String] = []
            for item in items {
                guard case .string(let bytes) = item else { throw Unreadable(reason: "\(field.name) holds something other than names") }
                names.append(TailText.printable(bytes))
            }
            return names
        }

        func object(_ field: LogField, _ value: TokenJSON) throws(Unreadable) -> [String: TokenJSON] {
            guard case .object(let object) = value else { throw Unreadable(reason: "\(field.name) is not an object") }
            return object
        }

        /// One word: a space before all but the first, `key=` when it has a key, in colour when
        /// the line is (the access log's `word`).
        mutating func word(_ key: String?, painted code: String? = nil, _ value: String) {
            if !line.isEmpty { line += " " }
            let code = colour ? code : nil
            if let code { line += "\u{1B}[\(code)m" }
            if let key { line += key + "=" }
            line += value
            if code != nil { line += "\u{1B}[0m" }
        }
    }

    /// The JSON `reason` holds two things the text line writes apart: the covering scopes that
    /// injected nothing (`SCOPE: WHY` each, joined with `; `: text `SCOPE:WHY` joined with `,`, at
    /// `reason`'s place) and then a failure's detail (text: after `error`). A part is a skipped
    /// scope when it reads `SCOPE: WHY` with a WHY of `InjectionSkip`; the first that does not
    /// starts the failure's detail (which may itself hold `; `). A CONNECT line has no skipped scopes.
    static func reasonParts(_ reason: String, isTunnel: Bool, hasError: Bool) -> (skipped: [String], failure: String?) {
        if isTunnel { return ([], hasError ? reason : nil) }
        let parts = reason.split(separator: "; ", omittingEmptySubsequences: false).map(String.init)
        var skipped: [String] = []
        for (index, part) in parts.enumerated() {
            let pieces = part.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            if pieces.count == 2, !pieces[0].isEmpty, !pieces[0].contains(" "), pieces[1].hasPrefix(" "),
                InjectionSkip(rawValue: String(pieces[1].dropFirst())) != nil
            {
                skipped.append(pieces[0] + ":" + pieces[1].dropFirst())
                continue
            }
            return (skipped, parts[index...].joined(separator: "; "))
        }
        return (skipped, nil)
    }

    /// `report_deny:deny_ips:10.0.0.0/8`: the egress note's own text word (`EgressNote.word`).
    static func egressWord(decision: String, rule: String) throws(Unreadable) -> String {
        guard let known = EgressNote.Decision(rawValue: decision) else { throw Unreadable(reason: "egress.decision is not a known word") }
        return EgressNote(decision: known, rule: rule, destination: "", address: nil).word
    }
}
