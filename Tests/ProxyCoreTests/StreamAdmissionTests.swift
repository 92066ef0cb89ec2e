import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

/// A stream is admitted by the same rules as an HTTP/1.1 request, and refused with the same answer:
/// each row is one request sent both ways (an HTTP/1.1 head to a `ConnectionMachine`, an HTTP/2
/// header block to a `StreamMachine`), and the two answers must agree on the status, the fields
/// and the bytes of the JSON body.
@Suite("HTTP/2: streams admitted and answered as HTTP/1.1 requests")
struct StreamAdmissionTests {
    struct Row: CustomTestStringConvertible, Sendable {
        let name: String
        let fixture: Fixture
        let mode: ConnectionMode
        let facts: ConnectionFacts
        let http1: [String]
        let http2: [H2HeaderField]
        let status: Int

        var testDescription: String { name }
    }

    static let id = "x-request-id: same-id-1"
    static let idLine = "X-Request-ID: same-id-1"
    static let peer = ConnectionFacts(peer: Playbook.peer)

    static let rows: [Row] = [
        Row(
            name: "no Proxy-Authorization where proxy_auth is set: 407 with its challenge", fixture: Configs.proxyAuth, mode: .forwardProxy,
            facts: peer, http1: ["GET http://plain.example/ HTTP/1.1", "Host: plain.example", idLine],
            http2: block("GET", "http://plain.example/", id), status: 407),
        Row(
            name: "two Proxy-Authorization fields: 400", fixture: Configs.proxyAuth, mode: .forwardProxy, facts: peer,
            http1: [
                "GET http://plain.example/ HTTP/1.1", "Host: plain.example", "Proxy-Authorization: Basic YTpi", "Proxy-Authorization: Basic YTpi",
                idLine,
            ],
            http2: block("GET", "http://plain.example/", "proxy-authorization: Basic YTpi", "proxy-authorization: Basic YTpi", id), status: 400),
        Row(
            name: "a connection the proxy opened itself: 403 loop_refused", fixture: .stripEverything, mode: .forwardProxy,
            facts: ConnectionFacts(peer: Playbook.peer, isProxyOwnConnection: true),
            http1: ["GET http://plain.example/ HTTP/1.1", "Host: plain.example", idLine], http2: block("GET", "http://plain.example/", id),
            status: 403),
        Row(
            name: "a secret's value to an origin outside its scopes: 403 secret_egress_blocked", fixture: Configs.pass, mode: .forwardProxy,
            facts: peer, http1: ["GET https://unscoped.example/ HTTP/1.1", "Host: unscoped.example", "x-leak: A-INJECTED-7c1e", idLine],
            http2: block("GET", "https://unscoped.example/", "x-leak: A-INJECTED-7c1e", id), status: 403),
        Row(
            name: "a scope's secret has no value: 502 credential_unavailable", fixture: Configs.pass, mode: .forwardProxy, facts: peer,
            http1: ["GET https://broken.example/ HTTP/1.1", "Host: broken.example", idLine], http2: block("GET", "https://broken.example/", id),
            status: 502),
        Row(
            name: "two different Content-Types: 400", fixture: .stripEverything, mode: .forwardProxy, facts: peer,
            http1: ["GET http://plain.example/ HTTP/1.1", "Host: plain.example", "Content-Type: a/b", "Content-Type: c/d", idLine],
            http2: block("GET", "http://plain.example/", "content-type: a/b", "content-type: c/d", id), status: 400),
        Row(
            name: "a client removed by a reload, inside a tunnel: 407", fixture: Configs.clients,
            mode: .intercepted(a, client: ClientIdentity(name: "gone")), facts: peer,
            http1: ["GET /v1 HTTP/1.1", "Host: a.example", idLine], http2: block("GET", "https://a.example/v1", id), status: 407),
    ]

    @Test("the same refusal, fields and JSON bytes for the same request over HTTP/1.1 and HTTP/2", arguments: rows)
    func sameAnswer(_ row: Row) throws {
        var http1 = Playbook(row.fixture, mode: row.mode, facts: row.facts)
        _ = http1.mismatches(nil, [])
        let written = http1.feed(
            .requestHead(requestHead(row.http1), headBytes: 40, Arrival(now: 1, scope: row.fixture.scope))
        ).compactMap { if case .writeToClient(let bytes) = $0 { bytes } else { nil } }.joined()
        let h1 = try #require(responseParts(Array(written)))
        var stream = StreamBook(row.fixture, mode: row.mode, facts: row.facts)
        stream.feedStart(row.http2)
        let h2 = try #require(stream.answer, "no answer on the stream")
        #expect(h1.status == row.status)
        #expect(h2.status == h1.status)
        #expect(h2.body == h1.body, "\(text(h2.body)) vs \(text(h1.body))")
        // The HTTP/1.1 fields, lower-cased, without the connection's own (Connection: close).
        let expected = h1.fields.filter { $0.lowercasedName != "connection" }.map { "\($0.lowercasedName): \($0.value)" }
        #expect(Array(h2.fields).map { "\($0.name): \($0.value)" } == expected)
        #expect(stream.connected.isEmpty && http1.connected.isEmpty)
        #expect(stream.emitted.count == 1 && stream.emitted.first?.status == row.status)
    }

    @Test("the stream's line names the configured client and the scopes covering the origin, as the HTTP/1.1 line does")
    func sameLine() throws {
        var stream = StreamBook(Configs.clients, facts: Self.peer)
        stream.feedStart(block("GET", "https://a.example/v1", "proxy-authorization: Bearer let-me-in"))
        #expect(stream.connected.count == 1)
        let id = try #require(stream.machine.currentHop)
        stream.feed(.upstreamConnected(id, reused: false))
        #expect(stream.sent(to: id)?.contains(aToken) == true, "agent is served by scope a")
        #expect(stream.sent(to: id)?.contains("let-me-in") == false, "Proxy-Authorization never goes upstream")
        stream.feed(.connectionClosed)
        #expect(stream.emitted.first?.clientID == "agent")
    }

    /// Status, fields and body of an HTTP/1.1 response with a Content-Length body.
    func responseParts(_ bytes: [UInt8]) -> (status: Int, fields: [HTTPField], body: [UInt8])? {
        guard let end = bytes.firstRange(of: Array("\r\n\r\n".utf8)) else { return nil }
        let head = responseHead(text(Array(bytes[..<end.lowerBound])).components(separatedBy: "\r\n"))
        return (head.status, Array(head.fields), Array(bytes[end.upperBound...]))
    }
}
