import HTTP1Codec
import ProxyCore
import Redaction
import ScopePolicy
import SecretScan
import Synchronization
import Testing

@testable import ProxyEngine

// The access log's lines, byte for byte, for records that between them use every field: a change to
// how lines are built must not change a line (programs parse them; docs/logging.md shows them). The
// expected lines were taken from the formatter as it was before the field table; only the clock's
// parts (`ts`, the duration) are masked.

private func origin(_ text: String) -> Origin { try! Origin.parse(text) }

private enum Golden {
    /// A plain forwarded GET: no scope, a query with a value to redact.
    static var plain: ExchangeRecord {
        var record = ExchangeRecord(id: "plain-1", client: "127.0.0.1:5000", method: "GET", startedAt: 0)
        record.origin = origin("http://api.example")
        record.pathAndQuery = "/users/jane@example.com/orders?limit=20&token=abc123"
        record.status = 200
        record.bytesIn = 229
        record.bytesOut = 313
        return record
    }

    /// Every optional field of an HTTP exchange set at once (a record no real exchange makes, so
    /// that one line shows every field's form and place).
    static var everything: ExchangeRecord {
        var record = ExchangeRecord(id: "trace-42", client: "[::1]:6000", method: "POST", startedAt: 0)
        record.clientID = "ci"
        record.proto = .h2
        record.origin = origin("https://api.example:8443")
        record.pathAndQuery = "/v1/items/0123456789abcdef0123?page=2&api_key=zzz"
        record.status = 502
        record.bytesIn = 1_000
        record.bytesOut = 77
        record.scopes = ["api", "backup"]
        record.injected = ["Authorization", "X-Extra"]
        record.stripped = ["Cookie"]
        record.skipped = [SkippedInjection(scope: "backup", why: .path), SkippedInjection(scope: "other", why: .method)]
        record.signed = "aws_sigv4"
        record.substituted = ["github_token"]
        record.scrubbed = [
            SecretFinding(secret: "github_token", encoding: .raw, isPlaceholder: false),
            SecretFinding(secret: "github_token", encoding: .base64(alignment: 2), isPlaceholder: false),
            SecretFinding(secret: "npm_token", encoding: .percentUppercase, isPlaceholder: false),
        ]
        record.scrubSkipped = "gzip"
        record.guardFinding = SecretFinding(secret: "aws_secret", encoding: .percentLowercase, isPlaceholder: true)
        record.egressReported = EgressNote(
            decision: .reportDeny, rule: "deny_ips: 10.0.0.0/8", destination: "api.example:8443", address: "10.1.2.3:8443")
        record.upstreamAddress = "10.1.2.3:8443"
        record.originalDestination = "10.1.2.3:8443"
        record.redirect = RedirectRecord(
            location: "https://cdn.example/file?token=secret#frag", origin: origin("https://cdn.example"),
            decision: .follow)
        record.requestFields = HTTPFields([
            HTTPField(name: "Host", value: "api.example:8443"), HTTPField(name: "Authorization", value: "Bearer x"),
            HTTPField(name: "Accept", value: "*/*"), HTTPField(name: "Accept", value: "text/plain"),
        ])
        record.responseFields = HTTPFields([
            HTTPField(name: "Content-Type", value: "application/json"),
            HTTPField(name: "Set-Cookie", value: "s=1"), HTTPField(name: "Location", value: "/next?code=42"),
        ])
        record.requestBody = ExchangeRecord.ObservedBody(
            bytes: Array(#"{"id":"r-1","password":"p"}"#.utf8), total: 27, truncated: false,
            contentType: "application/json")
        record.responseBody = ExchangeRecord.ObservedBody(bytes: Array("abc".utf8), total: 9_000, truncated: true, contentType: "text/plain")
        record.failure = .proxy(.tlsToPlainListener)
        return record
    }

    /// A head that could not be read: no method, no url, an error.
    static var unreadable: ExchangeRecord {
        var record = ExchangeRecord(id: "0123456789abcdef", client: "127.0.0.1:5001", method: nil, startedAt: 0)
        record.status = 400
        record.bytesIn = 17
        record.bytesOut = 120
        record.failure = .proxy(.headTooLarge)
        return record
    }

    /// A spliced tunnel: the CONNECT's line carries its decision and byte counts, no scope fields.
    static var tunnel: ExchangeRecord {
        var record = ExchangeRecord(id: "tunnel-1", client: "127.0.0.1:5002", method: "CONNECT", startedAt: 0)
        record.origin = origin("https://db.example:5432")
        record.pathAndQuery = "/ignored"
        record.status = 200
        record.bytesIn = 4_096
        record.bytesOut = 8_192
        record.tunnel = .tunnel
        return record
    }

    /// An interception whose client handshake failed: decision, error and the failure's reason.
    static var interceptionFailed: ExchangeRecord {
        var record = ExchangeRecord(id: "tunnel-2", client: "127.0.0.1:5003", method: "CONNECT", startedAt: 0)
        record.clientID = "builder"
        record.origin = origin("https://localhost:9")
        record.status = 200
        record.bytesIn = 106
        record.bytesOut = 39
        record.tunnel = .intercept
        record.egressReported = EgressNote(decision: .reportDeny, rule: "default deny", destination: "localhost:9", address: nil)
        record.upstreamAddress = "127.0.0.1:9"
        record.originalDestination = "127.0.0.1:9"
        record.failure = .proxy(.interceptionFailed(origin("https://localhost:9"), .notTLS))
        return record
    }

    /// A blocked redirect to a Location that names no readable origin, with a covering scope that
    /// injected nothing.
    static var blockedRedirect: ExchangeRecord {
        var record = ExchangeRecord(id: "redirect-1", client: "127.0.0.1:5004", method: "GET", startedAt: 0)
        record.origin = origin("https://a.example")
        record.pathAndQuery = "/start"
        record.status = 502
        record.scopes = ["a"]
        record.skipped = [SkippedInjection(scope: "a", why: .httpsDowngrade)]
        record.redirect = RedirectRecord(location: nil, origin: nil, decision: .block)
        record.failure = .proxy(.redirectBlocked(nil))
        return record
    }

    /// A response cut under way: no status sent.
    static var cut: ExchangeRecord {
        var record = ExchangeRecord(id: "cut-1", client: "127.0.0.1:5005", method: "GET", startedAt: 0)
        record.origin = origin("http://127.0.0.1:18765")
        record.pathAndQuery = "/"
        record.bytesIn = 50
        record.failure = .responseCut
        return record
    }
}

/// The line the access log formats for `record`, with the clock's parts masked: `TS` for the
/// timestamp, `D` for the milliseconds of the duration.
private func line(_ record: ExchangeRecord, _ format: LogFormat, colour: Bool = false, bodies: Bool = false) throws -> String {
    let lines = Mutex<[String]>([])
    let log = try AccessLog(
        format: format, colour: colour, output: .discard, rules: RedactionRules(), logBodies: bodies,
        secretValues: [], metrics: Metrics(), observer: { line in lines.withLock { $0.append(line) } })
    log.record(record)
    let raw = lines.withLock { $0.first ?? "" }
    return raw.replacing(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/, with: "TS")
        .replacing(/"duration_ms":\d+\.\d{3}/, with: #""duration_ms":D"#)
        .replacing(/\ \d+\.\d{3}ms\ /, with: " Dms ")
}

@Suite("Access log: golden lines, JSON and text")
struct AccessLogGoldenTests {
    struct Row: Sendable, CustomTestStringConvertible {
        let name: String
        let record: ExchangeRecord
        let json: String
        let jsonWithBodies: String
        let text: String
        let textInColour: String
        var testDescription: String { name }
    }

    static let rows: [Row] = [
        Row(
            name: "plain", record: Golden.plain,
            json:
                #"{"ts":"TS","id":"plain-1","client":"127.0.0.1:5000","method":"GET","url":"http://api.example:80/users/:email/orders?limit=20&token=:redacted","status":200,"bytes_in":229,"bytes_out":313,"duration_ms":D,"scope":null,"injected":[],"stripped":[]}"#,
            jsonWithBodies:
                #"{"ts":"TS","id":"plain-1","client":"127.0.0.1:5000","method":"GET","url":"http://api.example:80/users/:email/orders?limit=20&token=:redacted","status":200,"bytes_in":229,"bytes_out":313,"duration_ms":D,"scope":null,"injected":[],"stripped":[]}"#,
            text: #"TS GET http://api.example:80/users/:email/orders?limit=20&token=:redacted 200 Dms scope=- id=plain-1"#,
            textInColour:
                #"TS GET http://api.example:80/users/:email/orders?limit=20&token=:redacted \#u{1B}[32m200\#u{1B}[0m Dms scope=- \#u{1B}[2mid=plain-1\#u{1B}[0m"#
        ),
        Row(
            name: "everything", record: Golden.everything,
            json:
                #"{"ts":"TS","id":"trace-42","client":"[::1]:6000","client_id":"ci","original_dst":"10.1.2.3:8443","method":"POST","proto":"h2","url":"https://api.example:8443/v1/items/:uuid?page=2&api_key=:redacted","status":502,"bytes_in":1000,"bytes_out":77,"duration_ms":D,"scope":"api,backup","injected":["Authorization","X-Extra"],"stripped":["Cookie"],"signed":"aws_sigv4","substituted":["github_token"],"scrubbed":["github_token","npm_token"],"scrub_skipped":"gzip","guard":{"secret":"aws_secret","placeholder":true,"encoding":"percent-lowercase"},"egress":{"decision":"report_deny","rule":"deny_ips: 10.0.0.0/8","destination":"api.example:8443","address":"10.1.2.3:8443"},"reason":"backup: path_not_in_paths; other: method_not_in_methods; client spoke TLS to the plain proxy listener; use http:// for the proxy URL (HTTPS_PROXY=http://HOST:PORT)","redirect":{"location":"https://cdn.example/file?token=:redacted","origin":"https://cdn.example:443","decision":"follow"},"upstream":"10.1.2.3:8443","req_headers":{"host":"api.example:8443","authorization":"<redacted>","accept":"*/*, text/plain"},"resp_headers":{"content-type":"application/json","set-cookie":"<redacted>","location":"/next?code=:redacted"},"error":"tls_to_plain_listener"}"#,
            jsonWithBodies:
                #"{"ts":"TS","id":"trace-42","client":"[::1]:6000","client_id":"ci","original_dst":"10.1.2.3:8443","method":"POST","proto":"h2","url":"https://api.example:8443/v1/items/:uuid?page=2&api_key=:redacted","status":502,"bytes_in":1000,"bytes_out":77,"duration_ms":D,"scope":"api,backup","injected":["Authorization","X-Extra"],"stripped":["Cookie"],"signed":"aws_sigv4","substituted":["github_token"],"scrubbed":["github_token","npm_token"],"scrub_skipped":"gzip","guard":{"secret":"aws_secret","placeholder":true,"encoding":"percent-lowercase"},"egress":{"decision":"report_deny","rule":"deny_ips: 10.0.0.0/8","destination":"api.example:8443","address":"10.1.2.3:8443"},"reason":"backup: path_not_in_paths; other: method_not_in_methods; client spoke TLS to the plain proxy listener; use http:// for the proxy URL (HTTPS_PROXY=http://HOST:PORT)","redirect":{"location":"https://cdn.example/file?token=:redacted","origin":"https://cdn.example:443","decision":"follow"},"upstream":"10.1.2.3:8443","req_headers":{"host":"api.example:8443","authorization":"<redacted>","accept":"*/*, text/plain"},"resp_headers":{"content-type":"application/json","set-cookie":"<redacted>","location":"/next?code=:redacted"},"req_body":"{\"id\":\"r-1\",\"password\":\"<redacted>\"}","resp_body":"<9000 bytes text/plain>","error":"tls_to_plain_listener"}"#,
            text:
                #"TS POST https://api.example:8443/v1/items/:uuid?page=2&api_key=:redacted 502 Dms client=ci original_dst=10.1.2.3:8443 proto=h2 scope=api,backup injected=Authorization,X-Extra stripped=Cookie signed=aws_sigv4 substituted=github_token scrubbed=github_token,npm_token scrub_skipped=gzip guard=aws_secret:placeholder:percent-lowercase egress=report_deny:deny_ips:10.0.0.0/8 reason=backup:path_not_in_paths,other:method_not_in_methods redirect=follow:https://cdn.example:443 upstream=10.1.2.3:8443 error=tls_to_plain_listener reason=client spoke TLS to the plain proxy listener; use http:// for the proxy URL (HTTPS_PROXY=http://HOST:PORT) id=trace-42"#,
            textInColour:
                #"TS POST https://api.example:8443/v1/items/:uuid?page=2&api_key=:redacted \#u{1B}[31m502\#u{1B}[0m Dms client=ci original_dst=10.1.2.3:8443 proto=h2 scope=api,backup injected=Authorization,X-Extra stripped=Cookie signed=aws_sigv4 substituted=github_token scrubbed=github_token,npm_token scrub_skipped=gzip guard=aws_secret:placeholder:percent-lowercase egress=report_deny:deny_ips:10.0.0.0/8 reason=backup:path_not_in_paths,other:method_not_in_methods redirect=follow:https://cdn.example:443 upstream=10.1.2.3:8443 \#u{1B}[31merror=tls_to_plain_listener\#u{1B}[0m \#u{1B}[31mreason=client spoke TLS to the plain proxy listener; use http:// for the proxy URL (HTTPS_PROXY=http://HOST:PORT)\#u{1B}[0m \#u{1B}[2mid=trace-42\#u{1B}[0m"#
        ),
        Row(
            name: "unreadable", record: Golden.unreadable,
            json:
                #"{"ts":"TS","id":"0123456789abcdef","client":"127.0.0.1:5001","status":400,"bytes_in":17,"bytes_out":120,"duration_ms":D,"scope":null,"injected":[],"stripped":[],"error":"head_too_large"}"#,
            jsonWithBodies:
                #"{"ts":"TS","id":"0123456789abcdef","client":"127.0.0.1:5001","status":400,"bytes_in":17,"bytes_out":120,"duration_ms":D,"scope":null,"injected":[],"stripped":[],"error":"head_too_large"}"#,
            text: #"TS - - 400 Dms scope=- error=head_too_large id=0123456789abcdef"#,
            textInColour:
                #"TS - - \#u{1B}[33m400\#u{1B}[0m Dms scope=- \#u{1B}[31merror=head_too_large\#u{1B}[0m \#u{1B}[2mid=0123456789abcdef\#u{1B}[0m"#),
        Row(
            name: "tunnel", record: Golden.tunnel,
            json:
                #"{"ts":"TS","id":"tunnel-1","client":"127.0.0.1:5002","method":"CONNECT","url":"https://db.example:5432","status":200,"bytes_in":4096,"bytes_out":8192,"duration_ms":D,"decision":"tunnel"}"#,
            jsonWithBodies:
                #"{"ts":"TS","id":"tunnel-1","client":"127.0.0.1:5002","method":"CONNECT","url":"https://db.example:5432","status":200,"bytes_in":4096,"bytes_out":8192,"duration_ms":D,"decision":"tunnel"}"#,
            text: #"TS CONNECT https://db.example:5432 200 Dms decision=tunnel in=4096 out=8192 id=tunnel-1"#,
            textInColour:
                #"TS CONNECT https://db.example:5432 \#u{1B}[32m200\#u{1B}[0m Dms decision=tunnel in=4096 out=8192 \#u{1B}[2mid=tunnel-1\#u{1B}[0m"#),
        Row(
            name: "interceptionFailed", record: Golden.interceptionFailed,
            json:
                #"{"ts":"TS","id":"tunnel-2","client":"127.0.0.1:5003","client_id":"builder","original_dst":"127.0.0.1:9","method":"CONNECT","url":"https://localhost:9","status":200,"bytes_in":106,"bytes_out":39,"duration_ms":D,"decision":"intercept","egress":{"decision":"report_deny","rule":"default deny","destination":"localhost:9"},"reason":"not_tls","upstream":"127.0.0.1:9","error":"interception_failed"}"#,
            jsonWithBodies:
                #"{"ts":"TS","id":"tunnel-2","client":"127.0.0.1:5003","client_id":"builder","original_dst":"127.0.0.1:9","method":"CONNECT","url":"https://localhost:9","status":200,"bytes_in":106,"bytes_out":39,"duration_ms":D,"decision":"intercept","egress":{"decision":"report_deny","rule":"default deny","destination":"localhost:9"},"reason":"not_tls","upstream":"127.0.0.1:9","error":"interception_failed"}"#,
            text:
                #"TS CONNECT https://localhost:9 200 Dms client=builder original_dst=127.0.0.1:9 decision=intercept in=106 out=39 egress=report_deny:default_deny upstream=127.0.0.1:9 error=interception_failed reason=not_tls id=tunnel-2"#,
            textInColour:
                #"TS CONNECT https://localhost:9 \#u{1B}[32m200\#u{1B}[0m Dms client=builder original_dst=127.0.0.1:9 decision=intercept in=106 out=39 egress=report_deny:default_deny upstream=127.0.0.1:9 \#u{1B}[31merror=interception_failed\#u{1B}[0m \#u{1B}[31mreason=not_tls\#u{1B}[0m \#u{1B}[2mid=tunnel-2\#u{1B}[0m"#
        ),
        Row(
            name: "blockedRedirect", record: Golden.blockedRedirect,
            json:
                #"{"ts":"TS","id":"redirect-1","client":"127.0.0.1:5004","method":"GET","url":"https://a.example:443/start","status":502,"bytes_in":0,"bytes_out":0,"duration_ms":D,"scope":"a","injected":[],"stripped":[],"reason":"a: https_downgrade","redirect":{"origin":null,"decision":"block"},"error":"redirect_blocked"}"#,
            jsonWithBodies:
                #"{"ts":"TS","id":"redirect-1","client":"127.0.0.1:5004","method":"GET","url":"https://a.example:443/start","status":502,"bytes_in":0,"bytes_out":0,"duration_ms":D,"scope":"a","injected":[],"stripped":[],"reason":"a: https_downgrade","redirect":{"origin":null,"decision":"block"},"error":"redirect_blocked"}"#,
            text:
                #"TS GET https://a.example:443/start 502 Dms scope=a reason=a:https_downgrade redirect=block:unreadable error=redirect_blocked id=redirect-1"#,
            textInColour:
                #"TS GET https://a.example:443/start \#u{1B}[31m502\#u{1B}[0m Dms scope=a reason=a:https_downgrade redirect=block:unreadable \#u{1B}[31merror=redirect_blocked\#u{1B}[0m \#u{1B}[2mid=redirect-1\#u{1B}[0m"#
        ),
        Row(
            name: "cut", record: Golden.cut,
            json:
                #"{"ts":"TS","id":"cut-1","client":"127.0.0.1:5005","method":"GET","url":"http://127.0.0.1:18765/","status":null,"bytes_in":50,"bytes_out":0,"duration_ms":D,"scope":null,"injected":[],"stripped":[],"error":"response_cut"}"#,
            jsonWithBodies:
                #"{"ts":"TS","id":"cut-1","client":"127.0.0.1:5005","method":"GET","url":"http://127.0.0.1:18765/","status":null,"bytes_in":50,"bytes_out":0,"duration_ms":D,"scope":null,"injected":[],"stripped":[],"error":"response_cut"}"#,
            text: #"TS GET http://127.0.0.1:18765/ - Dms scope=- error=response_cut id=cut-1"#,
            textInColour:
                #"TS GET http://127.0.0.1:18765/ \#u{1B}[35m-\#u{1B}[0m Dms scope=- \#u{1B}[31merror=response_cut\#u{1B}[0m \#u{1B}[2mid=cut-1\#u{1B}[0m"#
        ),
    ]

    @Test("each line is what it was: JSON, JSON with bodies, text, text in colour", arguments: rows)
    func golden(_ row: Row) throws {
        #expect(try line(row.record, .json) == row.json + "\n")
        #expect(try line(row.record, .json, bodies: true) == row.jsonWithBodies + "\n")
        let text = try line(row.record, .text)
        #expect(text == row.text + "\n", "\(text)")
        #expect(try line(row.record, .text, colour: true) == row.textInColour + "\n")
    }
}

@Suite("Access log: the field table drives the line")
struct AccessLogFieldTableTests {
    @Test(
        "a record with every fact of its kind writes every field of the table for that kind, JSON and text, in the table's order",
        arguments: [(Golden.everything, false), (Golden.interceptionFailed, true)])
    func everyField(_ record: ExchangeRecord, isTunnel: Bool) throws {
        let keys = topLevelKeys(try line(record, .json, bodies: true))
        let text = try line(record, .text)
        let expected = zip(LogField.ordered, LogField.rows).filter { $0.1.lines.includes(tunnel: isTunnel) }
        #expect(keys == expected.map(\.0.name))
        for (field, row) in expected {
            switch row.text {
            case .keyed(let key), .last(let key):
                #expect(text.contains(" \(key)="), "\(field.name) on the text line as \(key)=")
            case .withDecision(let key):
                // Only a CONNECT line's decision carries the byte counts on the text line.
                #expect(text.contains(" \(key)=") == isTunnel, "\(field.name) on the text line as \(key)=: \(isTunnel)")
            case .head, .jsonOnly: break
            }
        }
    }

    /// The keys of a JSON object's own members, in order (not those of objects inside it).
    private func topLevelKeys(_ json: String) -> [String] {
        var keys: [String] = []
        var depth = 0, inString = false, escaped = false, current = "", expectingKey = false
        for character in json {
            if inString {
                if escaped {
                    escaped = false; current.append(character)
                } else if character == "\\" {
                    escaped = true
                } else if character == "\"" {
                    inString = false
                    if depth == 1 && expectingKey { keys.append(current); expectingKey = false }
                } else {
                    current.append(character)
                }
                continue
            }
            switch character {
            case "\"": inString = true; current = ""
            case "{", "[": depth += 1; expectingKey = character == "{" && depth == 1
            case "}", "]": depth -= 1
            case ",": expectingKey = depth == 1
            default: break
            }
        }
        return keys
    }
}
