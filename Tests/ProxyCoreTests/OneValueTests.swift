import HTTP1Codec
import ProxyCore
import Testing

// One value or refuse (docs/security-model.md, "Strict parsing"): a field that decides where a
// message goes, how long it is or who sent it, present more than once with different values, is
// refused: 400 for a request, 502 for a response. Nothing reads the first one and goes on.

/// What the client and the origins saw of one exchange fed to the machine.
struct OneValueOutcome {
    var actions: [ConnectionAction]

    /// Everything written to the client, as text.
    var written: String {
        actions.compactMap { if case .writeToClient(let bytes) = $0 { text(bytes) } else { nil } }.joined()
    }

    /// The status of the first thing written to the client (nil: nothing written).
    var status: Int? {
        let line = written.prefix { $0 != "\r" }
        return line.split(separator: " ").dropFirst().first.flatMap { Int($0) }
    }

    /// Every origin a connection was asked for, in order.
    var connected: [Origin] {
        actions.compactMap { if case .connect(_, let origin, _, _, _) = $0 { origin } else { nil } }
    }

    /// The `error` of the JSON answer, if the client got one.
    var error: String? {
        let parts = written.split(separator: #""error":""#, maxSplits: 1)
        guard parts.count == 2 else { return nil }
        return String(parts[1].prefix { $0 != "\"" })
    }

    /// The Location fields of the head relayed to the client.
    var relayedLocations: [String] {
        lines.filter { $0.lowercased().hasPrefix("location:") }
    }

    /// The lines written to the client.
    var lines: [String] {
        written.split(separator: "\r\n", omittingEmptySubsequences: false).map(String.init)
    }
}

enum OneValueRun {
    /// A request head alone: what the machine answers before (or instead of) going upstream.
    static func request(_ lines: [String], fixture: Fixture = Configs.pass, mode: ConnectionMode = .forwardProxy) -> OneValueOutcome {
        var p = Playbook(fixture, mode: mode)
        _ = p.feed(p.head(lines))
        return OneValueOutcome(actions: p.actions)
    }

    /// A bodiless request to `origin` answered by `response`.
    static func response(
        _ response: [String], fixture: Fixture = Configs.pass, mode: ConnectionMode = .forwardProxy,
        request: [String]? = nil
    ) -> OneValueOutcome {
        var p = Playbook(fixture, mode: mode)
        let lines: [String] =
            request
            ?? {
                if case .intercepted = mode { return ["GET /start HTTP/1.1", "Host: a.example"] }
                return ["GET https://a.example/start HTTP/1.1", "Host: a.example"]
            }()
        let actions = p.feed(p.head(lines))
        precondition(actions.contains { if case .connect = $0 { true } else { false } }, "the request was not sent: \(actions)")
        _ = p.feed(.upstreamConnected(hop(1), reused: false))
        _ = p.feed(.responseHead(hop(1), responseHead(response)))
        return OneValueOutcome(actions: p.actions)
    }
}

/// One deciding field, twice, and what becomes of the message.
struct OneValueRow: Sendable, CustomTestStringConvertible {
    enum Answer: Sendable, Equatable, CustomStringConvertible {
        /// The message goes on (a request is sent upstream; a response reaches the client).
        case accepted
        /// Refused with this status and error code; a request never sent, a response never relayed.
        case refused(Int, String)

        var description: String {
            switch self {
            case .accepted: "accepted"
            case .refused(let status, let code): "\(status) \(code)"
            }
        }
    }

    let field: String
    /// "same value twice", "different values", "different case of the name", ...
    let variant: String
    /// The two field lines.
    let lines: [String]
    let expected: Answer

    var testDescription: String { "\(field), \(variant): \(expected)" }
}

@Suite("One value or refuse: deciding fields repeated, in requests and responses")
struct OneValueTests {
    // MARK: Requests: 400, never sent

    static let requestRows: [OneValueRow] = [
        // RFC 9112 §3.2: exactly one Host. Repeated at all is refused, equal or not.
        .init(
            field: "Host", variant: "same value twice", lines: ["Host: a.example", "Host: a.example"],
            expected: .refused(400, "malformed_request")),
        .init(
            field: "Host", variant: "different values", lines: ["Host: a.example", "Host: b.example"],
            expected: .refused(400, "malformed_request")),
        .init(
            field: "Host", variant: "different case of the name", lines: ["Host: a.example", "hOST: a.example"],
            expected: .refused(400, "malformed_request")),
        // RFC 9110 §8.6 / RFC 9112 §6.3 item 5: identical values (fields or list members) may be
        // taken as one; the proxy re-frames the body, so one Content-Length goes upstream.
        .init(
            field: "Content-Length", variant: "same value twice", lines: ["Content-Length: 5", "Content-Length: 5"],
            expected: .accepted),
        .init(
            field: "Content-Length", variant: "same value twice in one list", lines: ["Content-Length: 5, 5"],
            expected: .accepted),
        .init(
            field: "Content-Length", variant: "different values", lines: ["Content-Length: 5", "Content-Length: 6"],
            expected: .refused(400, "malformed_request")),
        .init(
            field: "Content-Length", variant: "different values in one list", lines: ["Content-Length: 5, 6"],
            expected: .refused(400, "malformed_request")),
        .init(
            field: "Content-Length", variant: "different case of the name", lines: ["Content-Length: 5", "content-LENGTH: 6"],
            expected: .refused(400, "malformed_request")),
        // RFC 9112 §6.1: codings are one list across fields. Only one `chunked`, alone, frames a
        // body here: chunked twice is refused, another coding is not supported.
        .init(
            field: "Transfer-Encoding", variant: "same value twice", lines: ["Transfer-Encoding: chunked", "Transfer-Encoding: chunked"],
            expected: .refused(400, "malformed_request")),
        .init(
            field: "Transfer-Encoding", variant: "different values", lines: ["Transfer-Encoding: gzip", "Transfer-Encoding: chunked"],
            expected: .refused(501, "unsupported_transfer_coding")),
        .init(
            field: "Transfer-Encoding", variant: "different values, chunked first",
            lines: ["Transfer-Encoding: chunked", "Transfer-Encoding: identity"],
            expected: .refused(400, "malformed_request")),
        .init(
            field: "Transfer-Encoding", variant: "different case of the name", lines: ["Transfer-Encoding: chunked", "transfer-encoding: chunked"],
            expected: .refused(400, "malformed_request")),
        .init(
            field: "Transfer-Encoding", variant: "beside a Content-Length", lines: ["Transfer-Encoding: chunked", "Content-Length: 5"],
            expected: .refused(400, "malformed_request")),
        // How the proxy reads the body (a form's `_method` where a scope limits methods, placeholders
        // in JSON or a form) follows Content-Type: text/plain first and a form last would be read
        // as no form here and as a form by an origin that takes the last.
        .init(
            field: "Content-Type", variant: "same value twice",
            lines: ["Content-Type: application/json", "Content-Type: application/json"], expected: .accepted),
        .init(
            field: "Content-Type", variant: "different values",
            lines: ["Content-Type: text/plain", "Content-Type: application/x-www-form-urlencoded"], expected: .refused(400, "malformed_request")),
        .init(
            field: "Content-Type", variant: "different case of the name",
            lines: ["Content-Type: text/plain", "content-type: application/json"], expected: .refused(400, "malformed_request")),
        // Two claims of identity: refused even when they agree (stricter than a conflict alone).
        .init(
            field: "Proxy-Authorization", variant: "same value twice",
            lines: ["Proxy-Authorization: Bearer let-me-in", "Proxy-Authorization: Bearer let-me-in"], expected: .refused(400, "malformed_request")),
        .init(
            field: "Proxy-Authorization", variant: "different values, the right one first",
            lines: ["Proxy-Authorization: Bearer let-me-in", "Proxy-Authorization: Bearer wrong"], expected: .refused(400, "malformed_request")),
        .init(
            field: "Proxy-Authorization", variant: "different values, the right one last",
            lines: ["Proxy-Authorization: Bearer wrong", "Proxy-Authorization: Bearer let-me-in"], expected: .refused(400, "malformed_request")),
        .init(
            field: "Proxy-Authorization", variant: "different case of the name",
            lines: ["Proxy-Authorization: Bearer let-me-in", "proxy-AUTHORIZATION: Bearer wrong"], expected: .refused(400, "malformed_request")),
    ]

    @Test(
        "a request with a deciding field repeated: the answer of the table, and a refused one never goes upstream",
        arguments: requestRows, [false, true])
    func request(_ row: OneValueRow, intercepted: Bool) {
        let start = intercepted ? ["POST /up HTTP/1.1"] : ["POST https://a.example/up HTTP/1.1"]
        let host = row.field == "Host" ? [] : ["Host: a.example"]
        // Proxy-Authorization is read where clients are recognised: on the CONNECT for a tunnel,
        // on each request otherwise.
        if row.field == "Proxy-Authorization" && intercepted {
            let connect = OneValueRun.request(
                ["CONNECT a.example:443 HTTP/1.1", "Host: a.example:443"] + row.lines,
                fixture: Configs.clients)
            #expect(connect.status == 400, "\(connect.written.prefix(120))")
            #expect(connect.connected.isEmpty)
            return
        }
        let fixture = row.field == "Proxy-Authorization" ? Configs.clients : Configs.pass
        let outcome = OneValueRun.request(start + host + row.lines, fixture: fixture, mode: intercepted ? insideA : .forwardProxy)
        switch row.expected {
        case .accepted:
            #expect(outcome.written.isEmpty, "answered: \(outcome.written.prefix(120))")
            #expect(outcome.connected == [a])
        case .refused(let status, let code):
            #expect(outcome.status == status, "\(outcome.written.prefix(120))")
            #expect(outcome.error == code)
            #expect(outcome.connected.isEmpty, "a refused request was sent upstream")
        }
    }

    // MARK: Responses: 502, never relayed

    static let responseRows: [OneValueRow] = [
        .init(field: "Content-Length", variant: "same value twice", lines: ["Content-Length: 5", "Content-Length: 5"], expected: .accepted),
        .init(field: "Content-Length", variant: "same value twice in one list", lines: ["Content-Length: 5, 5"], expected: .accepted),
        .init(
            field: "Content-Length", variant: "different values", lines: ["Content-Length: 5", "Content-Length: 6"],
            expected: .refused(502, "bad_upstream_response")),
        .init(
            field: "Content-Length", variant: "different case of the name", lines: ["Content-Length: 5", "CONTENT-length: 6"],
            expected: .refused(502, "bad_upstream_response")),
        .init(
            field: "Transfer-Encoding", variant: "same value twice", lines: ["Transfer-Encoding: chunked", "Transfer-Encoding: chunked"],
            expected: .refused(502, "bad_upstream_response")),
        .init(
            field: "Transfer-Encoding", variant: "different values", lines: ["Transfer-Encoding: gzip", "Transfer-Encoding: chunked"],
            expected: .refused(502, "bad_upstream_response")),
        .init(
            field: "Transfer-Encoding", variant: "different case of the name", lines: ["Transfer-Encoding: chunked", "TRANSFER-ENCODING: chunked"],
            expected: .refused(502, "bad_upstream_response")),
        .init(field: "Location", variant: "same value twice", lines: ["Location: /next", "Location: /next"], expected: .accepted),
        .init(
            field: "Location", variant: "different values", lines: ["Location: /next", "Location: /other"],
            expected: .refused(502, "ambiguous_location")),
        .init(
            field: "Location", variant: "different case of the name", lines: ["Location: /next", "location: /other"],
            expected: .refused(502, "ambiguous_location")),
        .init(
            field: "Location", variant: "values that differ only in case", lines: ["Location: /next", "Location: /NEXT"],
            expected: .refused(502, "ambiguous_location")),
    ]

    @Test(
        "a response with a deciding field repeated (a 200, and a 201 for Location): the answer of the table; a refused one relays nothing of it",
        arguments: responseRows, [false, true])
    func response(_ row: OneValueRow, intercepted: Bool) {
        let status = row.field == "Location" ? "HTTP/1.1 201 Created" : "HTTP/1.1 200 OK"
        let framing = row.field == "Location" ? ["Content-Length: 0"] : []
        let outcome = OneValueRun.response(
            [status] + row.lines + framing + ["X-Canary: ORIGIN-HEAD-CANARY"],
            mode: intercepted ? insideA : .forwardProxy)
        switch row.expected {
        case .accepted:
            #expect(outcome.status == (row.field == "Location" ? 201 : 200), "\(outcome.written.prefix(160))")
            #expect(outcome.written.contains("ORIGIN-HEAD-CANARY"))
            if row.field == "Location" { #expect(outcome.relayedLocations == ["Location: /next"], "one Location relayed") }
            if row.field == "Content-Length" {
                #expect(outcome.lines.filter { $0.lowercased().hasPrefix("content-length:") } == ["Content-Length: 5"])
            }
        case .refused(let status, let code):
            #expect(outcome.status == status, "\(outcome.written.prefix(160))")
            #expect(outcome.error == code)
            #expect(!outcome.written.contains("ORIGIN-HEAD-CANARY"), "the refused response's head reached the client")
            #expect(outcome.relayedLocations.isEmpty)
        }
    }

    // MARK: Location in every redirect mode

    enum Mode: String, CaseIterable, Sendable { case pass, follow, block }

    static func fixture(_ mode: Mode, intercepted: Bool) -> Fixture {
        Fixture(
            Configs.scopes + Configs.redirects(mode.rawValue, allow: #"["https://b.example"]"#)
                + (intercepted ? "tls: { intercept: [\"a.example\"] }\n" : ""))
    }

    @Test(
        "a 3xx with two different Locations: 502 ambiguous_location in every mode, neither followed nor relayed, whichever comes first",
        arguments: Mode.allCases, [false, true])
    func differingLocations(_ mode: Mode, intercepted: Bool) {
        let allowed = "Location: https://b.example/ALLOWED-CANARY", elsewhere = "Location: https://unscoped.example/ELSEWHERE-CANARY"
        for (first, second) in [(allowed, elsewhere), (elsewhere, allowed), (allowed, "location: https://b.example/OTHER-PATH-CANARY")] {
            for status in ["HTTP/1.1 302 Found", "HTTP/1.1 307 Temporary Redirect", "HTTP/1.1 300 Multiple Choices"] {
                let outcome = OneValueRun.response(
                    [status, first, second, "Content-Length: 0"], fixture: Self.fixture(mode, intercepted: intercepted),
                    mode: intercepted ? insideA : .forwardProxy)
                #expect(outcome.status == 502, "\(status) \(first) / \(second): \(outcome.written.prefix(160))")
                #expect(outcome.error == "ambiguous_location")
                #expect(outcome.connected == [a], "followed a Location: \(outcome.connected)")
                for canary in ["ALLOWED-CANARY", "ELSEWHERE-CANARY", "OTHER-PATH-CANARY", "b.example", "unscoped.example"] {
                    #expect(!outcome.written.contains(canary), "the client saw \(canary)")
                }
                let records = outcome.actions.compactMap { if case .emit(let record) = $0 { record } else { nil } }
                #expect(records.last?.failure == .proxy(.ambiguousLocation(a)))
            }
        }
    }

    @Test(
        "a 3xx with the same Location twice is one Location: passed once, followed once, or blocked as it would be alone",
        arguments: Mode.allCases, [false, true])
    func repeatedLocation(_ mode: Mode, intercepted: Bool) {
        let fixture = Self.fixture(mode, intercepted: intercepted)
        let connection: ConnectionMode = intercepted ? insideA : .forwardProxy
        let toB = OneValueRun.response(
            ["HTTP/1.1 302 Found", "Location: https://b.example/next", "Location: https://b.example/next", "Content-Length: 0"],
            fixture: fixture, mode: connection)
        let toElsewhere = OneValueRun.response(
            [
                "HTTP/1.1 302 Found", "Location: https://unscoped.example/x", "Location: https://unscoped.example/x",
                "Content-Length: 0",
            ], fixture: fixture, mode: connection)
        switch mode {
        case .pass:
            #expect(toB.status == 302)
            #expect(toB.relayedLocations == ["Location: https://b.example/next"], "once")
        case .follow:
            #expect(toB.connected == [a, b], "followed once")
            #expect(toElsewhere.connected == [a, unscoped])
        case .block:
            #expect(toB.status == 302, "allowed")
            #expect(toB.relayedLocations == ["Location: https://b.example/next"], "once")
            #expect(toElsewhere.status == 502)
            #expect(toElsewhere.error == "redirect_blocked")
        }
    }

    // MARK: The accessor every deciding read goes through

    @Test("singleValue(of:): absent, one, the same value repeated, or conflicting; names case-insensitive, values byte for byte")
    func singleValueAccessor() {
        func fields(_ pairs: (String, String)...) -> HTTPFields { HTTPFields(pairs.map { HTTPField(name: $0.0, value: $0.1) }) }
        #expect(fields(("Other", "x")).singleValue(of: "location") == .absent)
        #expect(fields(("Location", "/a")).singleValue(of: "location") == .one("/a"))
        #expect(fields(("Location", "/a"), ("LOCATION", "/a")).singleValue(of: "location") == .repeated("/a"))
        #expect(fields(("Location", "/a"), ("location", "/A")).singleValue(of: "location") == .conflicting)
        #expect(fields(("Location", "/a"), ("Location", "/a"), ("Location", "/b")).singleValue(of: "location") == .conflicting)
        #expect(fields(("Location", "/b"), ("X", "1"), ("Location", "/a"), ("Location", "/b")).singleValue(of: "location") == .conflicting)
        #expect(SingleFieldValue.repeated("/a").only == nil && SingleFieldValue.one("/a").only == "/a")
        #expect(HTTPFields.decidingNames == ["host", "location", "content-length", "transfer-encoding", "proxy-authorization", "content-type"])
        #expect(SingleFieldValue.repeated("/a").agreed == "/a" && SingleFieldValue.conflicting.agreed == nil)
        // A body's codings are every Content-Encoding field's: identity first does not hide a gzip after it.
        #expect(
            PlaceholderSite.body(of: fields(("Content-Type", "application/json"), ("Content-Encoding", "identity"), ("Content-Encoding", "gzip")))
                == nil)
        #expect(PlaceholderSite.body(of: fields(("Content-Type", "application/json"), ("Content-Encoding", "identity"))) == .jsonBody)
        #expect(PlaceholderSite.body(of: fields(("Content-Type", "application/json"), ("content-type", "application/json"))) == .jsonBody)
    }
}
