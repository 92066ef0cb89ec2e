import HTTP1Codec
import JSONText
import ScopePolicy

// The access log's fields, one row each: the one list the JSON line, the text line, the field list in
// docs/logging.md and the Playbook's record checks are all made from. Adding a field is one case
// here and one row in `LogField.row`: `AccessLog` writes it by the kind of its fact (a new kind of
// fact makes the compiler ask for its JSON and text forms there), LogFieldTests asks for its line in
// docs/logging.md and checks its redaction rule against its fact.

/// One field of an access log line. The cases are in the JSON line's order.
public enum LogField: String, CaseIterable, Sendable {
    case ts, id, client
    case clientID = "client_id"
    case originalDestination = "original_dst"
    case method, proto, url, status
    case bytesIn = "bytes_in"
    case bytesOut = "bytes_out"
    case durationMS = "duration_ms"
    case decision
    case scope, injected, stripped, signed, substituted, scrubbed
    case scrubSkipped = "scrub_skipped"
    case `guard`
    case egress
    case reason, redirect
    case upstream
    case requestHeaders = "req_headers"
    case responseHeaders = "resp_headers"
    case requestBody = "req_body"
    case responseBody = "resp_body"
    case error

    /// The key on the JSON line and the name in docs/logging.md.
    public var name: String { rawValue }

    /// Every field in the JSON line's order, built once (`allCases` would build an array per line).
    public static let ordered: [LogField] = allCases
    /// The rows, indexed like `ordered`.
    public static let rows: [LogFieldRow] = ordered.map(\.row)
    /// `"name":` of each field, indexed like `ordered` (the JSON line's keys, made once).
    public static let quotedKeys: [[UInt8]] = ordered.map { JSONLine.quotedKey($0.name) }
}

/// Which lines carry a field: a CONNECT line (one per tunnel) says what became of the tunnel
/// instead of what the scope rules did.
public enum LogLines: Sendable, Equatable {
    case every
    /// Lines of requests the proxy read (not CONNECT lines).
    case exchange
    /// CONNECT lines only.
    case tunnel

    public func includes(tunnel isTunnel: Bool) -> Bool {
        switch self {
        case .every: true
        case .exchange: !isTunnel
        case .tunnel: isTunnel
        }
    }
}

/// When a field is on a line that may carry it.
public enum LogPresence: Sendable, Equatable {
    /// Always (the record always has the fact).
    case always
    /// Always: `null` when the record has no value.
    case nullable
    /// Only when the record has the fact.
    case whenSet
    /// Only with `log.bodies: true`, and when the record has the body.
    case withBodies
}

/// How the field's value is made safe to write (docs/logging.md, "Redaction"); the tripwire scans
/// every line after this, whatever the rule.
public enum LogRedaction: String, Sendable, Equatable {
    /// Written by the proxy itself (a time, a count, a word from a fixed set, a configured name, an
    /// error code): nothing a client or an origin chose.
    case none = "-"
    /// Chosen by the client but constrained to a safe alphabet (a request id, `[A-Za-z0-9._-]`; a
    /// method token).
    case token = "token"
    /// A URL: userinfo and fragment dropped, path segments and query values classified.
    case url = "url"
    /// Header and secret names only, never a value.
    case names = "names only"
    /// Header values only for safe headers, `<redacted>` otherwise.
    case headers = "headers"
    /// A structural summary of the body, values only under safe keys.
    case body = "body summary"
}

/// Where a field goes on the text line (docs/logging.md, "Text format").
public enum LogTextForm: Sendable, Equatable {
    /// A word at the start, in table order (`TS METHOD URL STATUS DURATIONms`); `-` when absent.
    case head
    /// `key=value` after the head words, in table order; left out when absent.
    case keyed(String)
    /// `key=value` at the end of the line.
    case last(String)
    /// Written by `decision`'s word on CONNECT lines (`decision=tunnel in=N out=N`).
    case withDecision(String)
    /// Not on the text line (headers and bodies shape the JSON line only).
    case jsonOnly
}

/// The record's facts behind one field, before formatting and redaction: what the formatters write
/// and what the Playbook compares. Payloads are the record's own values (no copy is made).
public enum LogFact: Sendable, Equatable, CustomStringConvertible {
    /// The line's own time (`ts`): read when the line is formatted.
    case now
    /// Monotonic microseconds the exchange started at (`duration_ms` runs to the line).
    case since(UInt64)
    case text(String)
    case number(UInt64)
    /// Names, written as a list (JSON array; text joined with `,`, left out when empty).
    case names([String])
    /// Names written as one string joined with `,` (the `scope` field).
    case joinedNames([String])
    /// An origin and the path and query the request named; `authorityOnly` for a CONNECT.
    case target(Origin, pathAndQuery: String?, authorityOnly: Bool)
    case finding(SecretFinding)
    /// Covering scopes that injected nothing (exchange lines only), and the failure's detail.
    case reasons([SkippedInjection], failure: String?)
    case redirect(RedirectRecord)
    case fields(HTTPFields)
    case body(ExchangeRecord.ObservedBody)
    case tunnel(TunnelDecision)
    case failure(ExchangeFailure)
    case egress(EgressNote)

    public var description: String {
        switch self {
        case .now: "now"
        case .since(let start): "since \(start)"
        case .text(let value): value
        case .number(let value): String(value)
        case .names(let names): "[\(names.joined(separator: ","))]"
        case .joinedNames(let names): names.joined(separator: ",")
        case .target(let origin, let path, let authorityOnly): origin.withPort + (authorityOnly ? "" : path ?? "/")
        case .finding(let finding): "\(finding.secret):\(finding.isPlaceholder ? "placeholder" : "value"):\(finding.encoding)"
        case .reasons(let skipped, let failure): (skipped.map(\.description) + (failure.map { [$0] } ?? [])).joined(separator: "; ")
        case .redirect(let redirect): "\(redirect.decision.rawValue):\(redirect.origin?.withPort ?? "unreadable")"
        case .fields(let fields): "\(fields.count) fields"
        case .body(let body): "\(body.total) bytes"
        case .tunnel(let decision): decision.rawValue
        case .failure(let failure): failure.code
        case .egress(let note): note.word
        }
    }
}

/// Everything about one field but its formatting (which `AccessLog` does, one exhaustive switch per
/// format).
public struct LogFieldRow: Sendable {
    public let lines: LogLines
    public let presence: LogPresence
    public let redaction: LogRedaction
    public let text: LogTextForm
    /// Its line in docs/logging.md's field list.
    public let doc: String
    /// How the fact is read from the record; nil when the record has none.
    public let read: @Sendable (ExchangeRecord) -> LogFact?

    init(
        _ lines: LogLines, _ presence: LogPresence, _ redaction: LogRedaction, text: LogTextForm, _ doc: String,
        read: @escaping @Sendable (ExchangeRecord) -> LogFact?
    ) {
        self.lines = lines
        self.presence = presence
        self.redaction = redaction
        self.text = text
        self.doc = doc
        self.read = read
    }
}

extension LogField {
    /// The row of this field (read through `LogField.rows`, built once).
    public var row: LogFieldRow {
        switch self {
        case .ts:
            LogFieldRow(.every, .always, .none, text: .head, "when the line was written, RFC 3339 UTC with milliseconds") { _ in .now }
        case .id:
            LogFieldRow(
                .every, .always, .token, text: .last("id"),
                "the request id (see below); every hop of a followed redirect has the same one"
            ) { .text($0.id) }
        case .client:
            LogFieldRow(.every, .always, .none, text: .jsonOnly, "the client's address and port") { .text($0.client) }
        case .clientID:
            LogFieldRow(
                .every, .whenSet, .none, text: .keyed("client"),
                "the name of the configured client (`clients:`, or `proxy_auth` for the shorthand) the request came from; "
                    + "absent when no clients are configured or the client was not recognised (a 407: then `reason` says why)"
            ) {
                $0.clientID.map(LogFact.text)
            }
        case .originalDestination:
            LogFieldRow(
                .every, .whenSet, .none, text: .keyed("original_dst"),
                "transparent capture only (docs/transparent.md): the address and port the connection was redirected from "
                    + "(`SO_ORIGINAL_DST`), where the proxy connects; a TLS connection's line is a CONNECT line"
            ) { $0.originalDestination.map(LogFact.text) }
        case .method:
            LogFieldRow(.every, .whenSet, .token, text: .head, "the request method; absent when no head could be parsed") {
                $0.method.map(LogFact.text)
            }
        case .proto:
            LogFieldRow(
                .exchange, .whenSet, .none, text: .keyed("proto"),
                "what the client spoke: `http/1.0`, `http/1.1`, `h2` (HTTP/2 in an intercepted TLS tunnel), `h2c` (HTTP/2 with "
                    + "prior knowledge on the plain listener) or `websocket` (the line of a WebSocket the origin accepted, whether "
                    + "the client asked with an HTTP/1.1 upgrade or an HTTP/2 extended CONNECT, RFC 8441); absent "
                    + "when no head could be parsed"
            ) { $0.proto.map { LogFact.text($0.rawValue) } }
        case .url:
            LogFieldRow(
                .every, .whenSet, .url, text: .head,
                "the origin with its port, always (`https://api.x:443`; the banner, `explain` and errors print the default "
                    + "port nowhere, as people write origins), plus the redacted path and query; for a CONNECT, the requested "
                    + "host:port as `https://host:port` (the port always), whatever became of it (tunnelled, intercepted, denied, "
                    + "refused, failed); a refused request (a 407, a 403, a 400) names its target whenever the target could be read; "
                    + "absent only when it could not (a malformed head, an origin-form request to the forward proxy, a TLS client "
                    + "on the plain listener)"
            ) { record in
                // A CONNECT names an authority, not a path: its line shows the origin alone, whatever became of it.
                record.origin.map {
                    .target($0, pathAndQuery: record.pathAndQuery, authorityOnly: record.tunnel != nil || record.method == "CONNECT")
                }
            }
        case .status:
            LogFieldRow(
                .every, .nullable, .none, text: .head,
                "the status sent to the client (an error's own status), `null` when none was sent"
            ) {
                $0.status.map { .number(UInt64($0)) }
            }
        case .bytesIn:
            LogFieldRow(
                .every, .always, .none, text: .withDecision("in"),
                "bytes from the client: head plus payload; for a tunnel, the bytes spliced from the client"
            ) { .number($0.bytesIn) }
        case .bytesOut:
            LogFieldRow(
                .every, .always, .none, text: .withDecision("out"),
                "bytes to the client: head plus payload; for a tunnel, the bytes spliced to the client"
            ) { .number($0.bytesOut) }
        case .durationMS:
            LogFieldRow(
                .every, .always, .none, text: .head,
                "from the request head's arrival to the line, milliseconds with three decimals"
            ) { .since($0.startedAt) }
        case .decision:
            LogFieldRow(
                .tunnel, .always, .none, text: .keyed("decision"),
                "CONNECT lines only, instead of the scope fields: `intercept`, `tunnel` or `deny` (below)"
            ) {
                $0.tunnel.map(LogFact.tunnel)
            }
        case .scope:
            LogFieldRow(
                .exchange, .nullable, .none, text: .keyed("scope"),
                "the names of the scopes covering the origin for this client, joined with `,`, or `null` (no scope covers it, "
                    + "or the request was refused before its client and origin were known: a 407, a 429, a malformed head); a "
                    + "request refused after that (`placeholder_out_of_scope`, `secret_egress_blocked`, `credential_unavailable`...) "
                    + "names them too"
            ) { $0.scopes.isEmpty ? nil : .joinedNames($0.scopes) }
        case .injected:
            LogFieldRow(.exchange, .always, .names, text: .keyed("injected"), "header names the proxy injected") { .names($0.injected) }
        case .stripped:
            LogFieldRow(
                .exchange, .always, .names, text: .keyed("stripped"),
                "header names removed from the client's request by the scope rules (a header the proxy replaced with its own "
                    + "injection is not listed)"
            ) { .names($0.stripped) }
        case .signed:
            LogFieldRow(
                .exchange, .whenSet, .none, text: .keyed("signed"),
                "only when the proxy signed the request: `aws_sigv4` (then `injected` lists `Authorization`)"
            ) {
                $0.signed.map(LogFact.text)
            }
        case .substituted:
            LogFieldRow(
                .exchange, .whenSet, .names, text: .keyed("substituted"),
                "only when placeholders were replaced: the names of the secrets whose values went out in their place"
            ) {
                $0.substituted.isEmpty ? nil : .names($0.substituted)
            }
        case .scrubbed:
            LogFieldRow(
                .exchange, .whenSet, .names, text: .keyed("scrubbed"),
                "only when the response scrub masked something: the names of the secrets found (and masked) in the response's "
                    + "headers or body, each once"
            ) { $0.scrubbed.isEmpty ? nil : .names($0.scrubbedNames) }
        case .scrubSkipped:
            LogFieldRow(
                .exchange, .whenSet, .none, text: .keyed("scrub_skipped"),
                "only when the response body could not be scanned: its `Content-Encoding` (`gzip`); it passed as the origin "
                    + "sent it (`scrub: on`)"
            ) { $0.scrubSkipped.map(LogFact.text) }
        case .guard:
            LogFieldRow(
                .exchange, .whenSet, .names, text: .keyed("guard"),
                "only when the egress guard stopped the request: `{\"secret\": NAME, \"placeholder\": true\\|false, "
                    + "\"encoding\": FORM}` where FORM is `raw`, `percent`, `percent-lowercase`, `base64+N` or `base64url+N` "
                    + "(N: the value's offset in its base64 group, 0-2) (`error` says `secret_egress_blocked` or "
                    + "`placeholder_out_of_scope`); text: `guard=SECRET:value\\|placeholder:FORM`"
            ) { $0.guardFinding.map(LogFact.finding) }
        case .egress:
            LogFieldRow(
                // The destination is the origin the client named (as in `url`), never more of it.
                .every, .whenSet, .url, text: .keyed("egress"),
                "only when the egress policy denied the destination, or would have in `mode: report`: `decision` (`deny` or "
                    + "`report_deny`), `rule` (`default deny`, `deny_ips: NAME` or `deny_ips: CIDR`), `destination` (the requested "
                    + "HOST:PORT) and, for a `deny_ips` rule, `address` (what the name resolved to); text: `egress=DECISION:RULE` with spaces dropped after `:` and `_` for the others (`egress=deny:default_deny`)"
            ) { $0.egressNote.map(LogFact.egress) }
        case .upstream:
            LogFieldRow(
                .every, .whenSet, .none, text: .keyed("upstream"),
                "the address and port the upstream connection went to (`93.184.216.34:443`, `[2001:db8::1]:443`), once connected "
                    + "(a pooled connection: the address it was opened to)"
            ) { $0.upstreamAddress.map(LogFact.text) }
        case .reason:
            LogFieldRow(
                .every, .whenSet, .none, text: .keyed("reason"),
                "only when a covering scope injected nothing into this request: `SCOPE: WHY` for each such scope, joined with "
                    + "`; ` (below; text: `SCOPE:WHY` joined with `,`); on a 407, why the client was not recognised "
                    + "(`client_not_recognised`, `proxy_authorization_not_recognised`, `proxy_authorization_scheme_not_configured`, "
                    + "`proxy_authorization_invalid (WHY)`); on a failed interception, why (text: after `error`); on a 502 "
                    + "`credential_unavailable` for a computed secret ([credentials.md](credentials.md)), the code of why it could "
                    + "not be had (`refused`, `rejected`, `response_timeout`, `malformed_response`, `no_token_source`, `key_unusable`, "
                    + "`command_not_started`, `command_failed`, `command_timeout`, `invalid_output`, `aws_chain`: never what the "
                    + "endpoint answered or the command printed)"
            ) { record in
                let skipped = record.tunnel == nil ? record.skipped : []
                let failure = record.failure?.reason
                return skipped.isEmpty && failure == nil ? nil : .reasons(skipped, failure: failure)
            }
        case .redirect:
            LogFieldRow(
                .exchange, .whenSet, .url, text: .keyed("redirect"),
                "only on 3xx with a Location: `location` (redacted as a URL), `origin` it resolves to (`null` if unreadable), "
                    + "`decision` (`pass`, `follow`, `block`); text: `redirect=DECISION:ORIGIN`"
            ) { $0.redirect.map(LogFact.redirect) }
        case .requestHeaders:
            LogFieldRow(
                .exchange, .whenSet, .headers, text: .jsonOnly,
                "the client's request headers, names lowercased, values redacted (below); repeated names joined with `, `"
            ) {
                $0.requestFields.map(LogFact.fields)
            }
        case .responseHeaders:
            LogFieldRow(
                .exchange, .whenSet, .headers, text: .jsonOnly,
                "the response headers sent to the client, as `req_headers`"
            ) { $0.responseFields.map(LogFact.fields) }
        case .requestBody:
            LogFieldRow(.exchange, .withBodies, .body, text: .jsonOnly, "with `log.bodies: true` only: the request body's redacted summary (below)") {
                $0.requestBody.map(LogFact.body)
            }
        case .responseBody:
            LogFieldRow(.exchange, .withBodies, .body, text: .jsonOnly, "with `log.bodies: true` only: the response body's redacted summary (below)")
            {
                $0.responseBody.map(LogFact.body)
            }
        case .error:
            LogFieldRow(
                .every, .whenSet, .none, text: .keyed("error"),
                "only on failures: a proxy error code (the `error` of the JSON error body), `response_cut` (the response failed "
                    + "under way and was cut) or `client_closed` (the client left first)"
            ) { $0.failure.map(LogFact.failure) }
        }
    }

    /// docs/logging.md's field list: one table line per field, in the JSON line's order.
    public static var documentation: String {
        var lines = ["| field | on | redaction | meaning |", "|---|---|---|---|"]
        for (field, row) in zip(ordered, rows) {
            let on =
                switch row.lines {
                case .every: "every line"
                case .exchange: "requests"
                case .tunnel: "CONNECT"
                }
            lines.append("| `\(field.name)` | \(on) | \(row.redaction.rawValue) | \(row.doc) |")
        }
        return lines.joined(separator: "\n")
    }
}

extension ExchangeRecord {
    /// The names of the secrets masked in the response, each once, in the order first found (the
    /// record has one finding per form of a value; the metric counts them).
    public var scrubbedNames: [String] {
        var names: [String] = []
        for finding in scrubbed where !names.contains(finding.secret) { names.append(finding.secret) }
        return names
    }
}
