import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

@Suite("Machine: access-log records")
struct RecordTests {
    enum Ending: String, Sendable, CaseIterable {
        case completed, connectFailed, responseTimeout, responseCut, clientGoneWaiting, clientGoneRelaying, refusedAtAdmission, invalidHead,
            blockedRedirect
    }

    @Test("exactly one line per request, however it ends (and none more when the connection then closes)", arguments: Ending.allCases)
    func oneLinePerRequest(_ ending: Ending) {
        var p = Playbook(Configs.block)
        switch ending {
        case .completed:
            p.relaying(length: 1)
            _ = p.feed(.responseBody(hop(1), .complete(payload: 1, consumed: 1, captured: nil, observed: nil)))
        case .connectFailed:
            p.requested()
            _ = p.feed(.upstreamConnectFailed(hop(1), .dnsFailure(plain)))
        case .responseTimeout:
            p.sent()
            _ = p.feed(.timerFired(.responseHead))
        case .responseCut:
            p.relaying(length: 10)
            _ = p.feed(.responseBody(hop(1), .cut))
        case .clientGoneWaiting:
            p.sent()
        case .clientGoneRelaying:
            p.relaying(length: 10)
        case .refusedAtAdmission:
            p.start([.arm(.clientHead)])
            _ = p.feed(p.head("GET /not-a-proxy-request HTTP/1.1", "Host: plain.example"))
        case .invalidHead:
            p.start([.arm(.clientHead)])
            _ = p.feed(p.headInvalid(.headTooLarge))
        case .blockedRedirect:
            p.sent(["GET https://a.example/ HTTP/1.1", "Host: a.example"], to: a)
            _ = p.feed(.responseHead(hop(1), response("HTTP/1.1 302 Found", "Location: https://unscoped.example/")))
        }
        _ = p.feed(.clientFailed)
        _ = p.feed(.connectionClosed)
        _ = p.feed(.connectionClosed)
        #expect(p.emitted.count == 1, "\(p.emitted.map { $0.failure?.code ?? "ok" })")
        #expect(p.released.count == Set(p.released).count, "no hop released twice")
        #expect(Set(p.released) == Set(p.connected), "every hop asked for is released")
    }

    @Test("a followed chain writes one line per hop, all with the request's id, each with its own hop's facts")
    func chainRecords() {
        var p = Playbook(Configs.follow)
        p.requested(["GET https://a.example/a HTTP/1.1", "Host: a.example", "X-Request-ID: trace-123", clientAuthorization, clientCookie], to: a)
        _ = p.feed(.upstreamConnected(hop(1), reused: true))
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 302 Found", "Location: https://b.example/b?x=1")),
            [
                .release(hop(1), reuse: false),
                .emit(
                    .id("trace-123"), .method("GET"), .origin(a), .path("/a"), .status(302), .scopes(["a"]), .injected(["X-A-Key"]),
                    .stripped([]), .redirect(.follow), .redirectOrigin(b), .failure(nil)),
                .arm(.connect), .connect(hop(2), b, .tls, reusePooled: true),
            ])
        _ = p.feed(.upstreamConnected(hop(2), reused: true))
        #expect(p.sent(to: hop(2))?.contains("X-Request-ID: trace-123\r\n") == true, "the id travels to every hop")
        p.on(
            .responseHead(hop(2), response("HTTP/1.1 200 OK", "Content-Length: 4")),
            [
                .write(startingWith: "HTTP/1.1 200 OK\r\n", containing: ["X-Request-ID: trace-123"]),
                .relay(hop(2), .contentLength(4), .contentLength(4)), .arm(.stall),
            ])
        p.on(
            .responseBody(hop(2), .complete(payload: 4, consumed: 4, captured: nil, observed: nil)),
            [
                .cancelTimer, .release(hop(2), reuse: true),
                .emit(
                    .id("trace-123"), .method("GET"), .origin(b), .path("/b?x=1"), .status(200), .scopes(["b"]), .injected(["X-B-Key"]),
                    .stripped(["Authorization", "Cookie"]), .redirect(nil), .failure(nil)),
                .arm(.idle), .readNextRequest,
            ])
    }

    struct IDRow: Sendable, CustomTestStringConvertible {
        let sent: String?
        let used: String
        var testDescription: String { "X-Request-ID \(sent ?? "absent")" }
    }

    @Test(
        "a client's well-formed X-Request-ID is the id; otherwise the proxy makes one",
        arguments: [
            IDRow(sent: nil, used: Playbook.generatedID(1)),
            IDRow(sent: "abc-123_x.y", used: "abc-123_x.y"),
            IDRow(sent: "has space", used: Playbook.generatedID(1)),
            IDRow(sent: String(repeating: "x", count: 65), used: Playbook.generatedID(1)),
        ])
    func requestID(_ row: IDRow) {
        var p = Playbook()
        p.requested(get + (row.sent.map { ["X-Request-ID: \($0)"] } ?? []))
        p.on(
            .upstreamConnected(hop(1), reused: true),
            [.send(hop(1), startingWith: "GET / HTTP/1.1\r\n", containing: ["X-Request-ID: \(row.used)\r\n"]), .arm(.responseHead)])
        #expect(p.sent(to: hop(1)).map { requestHead(text: $0).fields.count("x-request-id") } == 1, "one X-Request-ID upstream")
        _ = p.feed(.upstreamConnectFailed(hop(1), .dnsFailure(plain)))
        _ = p.feed(.timerFired(.responseHead))
        #expect(p.emitted.map(\.id) == [row.used])
    }

    struct ScopeRow: Sendable, CustomTestStringConvertible {
        let name: String
        let target: Origin
        let sent: [String]
        let scopes: [String]
        let injected: [String]
        let stripped: [String]
        var testDescription: String { name }
    }

    @Test(
        "the line names what the scope rules did",
        arguments: [
            ScopeRow(
                name: "unscoped: the client's credentials are stripped", target: unscoped, sent: [clientAuthorization, clientCookie, "X-API-Key: k"],
                scopes: [], injected: [], stripped: ["Authorization", "Cookie", "X-API-Key"]),
            ScopeRow(
                name: "scope a: its token injected, what it passes kept", target: a, sent: [clientAuthorization, clientCookie, "X-API-Key: k"],
                scopes: ["a"], injected: ["X-A-Key"], stripped: ["X-API-Key"]),
            ScopeRow(
                name: "scope b: the client's value under b's injected name is replaced, not reported stripped", target: b,
                sent: ["X-B-Key: client-value"],
                scopes: ["b"], injected: ["X-B-Key"], stripped: []),
            ScopeRow(
                name: "scope a: an underscore alias is stripped", target: a, sent: ["X_A_Key: sneaky"],
                scopes: ["a"], injected: ["X-A-Key"], stripped: ["X_A_Key"]),
        ])
    func scopeFacts(_ row: ScopeRow) {
        var p = Playbook(Configs.pass)
        p.requested(["GET https://\(row.target.host)/ HTTP/1.1", "Host: \(row.target.host)"] + row.sent, to: row.target)
        _ = p.feed(.upstreamConnected(hop(1), reused: true))
        _ = p.feed(.responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 0")))
        p.on(
            .responseBody(hop(1), .complete(payload: 0, consumed: 0, captured: nil, observed: nil)),
            [
                .cancelTimer, .release(hop(1), reuse: true),
                .emit(.origin(row.target), .status(200), .scopes(row.scopes), .injected(row.injected), .stripped(row.stripped)),
                .arm(.idle), .readNextRequest,
            ])
        let sent = p.sent(to: hop(1)) ?? ""
        #expect(!sent.contains("client-value") && !sent.contains("sneaky"))
    }

    @Test("a response body observed with log.bodies is on the line, labelled with the response's Content-Type")
    func observedResponseBody() {
        var p = Playbook(logBodies: true)
        p.sent()
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Type: application/json", "Content-Length: 2")),
            [
                .write(startingWith: "HTTP/1.1 200 OK\r\n"),
                .relay(hop(1), .contentLength(2), .contentLength(2), observe: p.settings.limits.maxObservedBody), .arm(.stall),
            ])
        let observed = ExchangeRecord.ObservedBody(bytes: Array("{}".utf8), total: 2, truncated: false, contentType: nil)
        let returned = p.on(
            .responseBody(hop(1), .complete(payload: 2, consumed: 2, captured: nil, observed: observed)),
            [
                .cancelTimer, .release(hop(1), reuse: true), .emit(.responseBodyTotal(2)), .arm(.idle), .readNextRequest,
            ])
        let record = returned.compactMap { if case .emit(let record) = $0 { record } else { nil } }.first
        #expect(record?.responseBody?.contentType == "application/json")
    }

    enum Stage: String, Sendable, CaseIterable { case connecting, waitingForResponse, pumpingBody, relaying }

    @Test("connectionClosed mid-exchange: the hop is released and one line says client_closed", arguments: Stage.allCases)
    func closedMidExchange(_ stage: Stage) {
        var p = Playbook()
        switch stage {
        case .connecting: p.requested()
        case .waitingForResponse: p.sent()
        case .pumpingBody: p.pumping()
        case .relaying: p.relaying()
        }
        p.on(
            .connectionClosed,
            [
                .cancelTimer, .release(hop(1), reuse: false),
                .emit(.status(stage == .relaying ? 200 : nil), .failure(.clientClosed)),
            ])
        #expect(p.emitted.count == 1)
        #expect(p.released == [hop(1)])
    }

    struct AfterCloseRow: Sendable, CustomTestStringConvertible {
        let name: String
        let event: @Sendable (ScopeContext) -> ConnectionEvent
        var testDescription: String { name }
    }

    static let afterCloseRows: [AfterCloseRow] = [
        AfterCloseRow(name: "headStarted") { _ in .headStarted },
        AfterCloseRow(name: "requestHead") { .requestHead(requestHead(get), headBytes: 40, Arrival(now: 0, scope: $0)) },
        AfterCloseRow(name: "requestHeadInvalid") { .requestHeadInvalid(.headTooLarge, Arrival(now: 0, scope: $0)) },
        AfterCloseRow(name: "clientInputClosed") { _ in .clientInputClosed(bufferedBytes: 0) },
        AfterCloseRow(name: "clientFailed") { _ in .clientFailed },
        AfterCloseRow(name: "upstreamConnected") { _ in .upstreamConnected(hop(1), reused: false) },
        AfterCloseRow(name: "upstreamConnectFailed") { _ in .upstreamConnectFailed(hop(1), .dnsFailure(plain)) },
        AfterCloseRow(name: "requestBody") { _ in .requestBody(hop(1), .complete(payload: 1, consumed: 1, captured: nil, observed: nil)) },
        AfterCloseRow(name: "responseHead") { _ in .responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 0")) },
        AfterCloseRow(name: "responseHeadInvalid") { _ in .responseHeadInvalid(hop(1), reason: "x") },
        AfterCloseRow(name: "responseBody") { _ in .responseBody(hop(1), .complete(payload: 1, consumed: 1, captured: nil, observed: nil)) },
        AfterCloseRow(name: "upstreamClosed") { _ in .upstreamClosed(hop(1), sawResponseBytes: false) },
        AfterCloseRow(name: "tunnelBytes") { _ in .tunnelBytes(hop(1), fromClient: 1, fromUpstream: 1) },
        AfterCloseRow(name: "timerFired(clientHead)") { _ in .timerFired(.clientHead) },
        AfterCloseRow(name: "timerFired(responseHead)") { _ in .timerFired(.responseHead) },
        AfterCloseRow(name: "timerFired(stall)") { _ in .timerFired(.stall) },
        AfterCloseRow(name: "drain") { _ in .drain },
        AfterCloseRow(name: "connectionClosed") { _ in .connectionClosed },
    ]

    @Test("after connectionClosed every event is ignored", arguments: afterCloseRows)
    func ignoredAfterClose(_ row: AfterCloseRow) {
        var p = Playbook()
        p.sent()
        p.on(.connectionClosed, [.cancelTimer, .release(hop(1), reuse: false), .emit(.failure(.clientClosed))])
        p.ignores(row.event(p.fixture.scope))
        // And a fresh connection that closes before anything happened also ignores it.
        var fresh = Playbook()
        fresh.start([.arm(.clientHead)])
        fresh.on(.connectionClosed, [.cancelTimer])
        fresh.ignores(row.event(fresh.fixture.scope))
    }

    @Test("an invalid request head gets its error, one line and a close")
    func invalidHead() {
        var p = Playbook()
        p.start([.arm(.clientHead)])
        p.on(
            p.headInvalid(.headTooLarge),
            [
                .cancelTimer,
                .write(startingWith: "HTTP/1.1 431 Request Header Fields Too Large\r\n", containing: ["Connection: close"]),
                .emit(.status(431), .method(nil), .failure(.proxy(.headTooLarge))),
                .close(.afterFlush),
            ])
    }
}

@Suite("Machine: a credential that cannot be had")
struct CredentialUnavailableTests {
    @Test("a secret without a value: 502 credential_unavailable, nothing connected, the connection kept")
    func keepAlive() {
        var p = Playbook(Configs.pass)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("GET https://broken.example/ HTTP/1.1", "Host: broken.example"),
            [
                .cancelTimer,
                .write(startingWith: "HTTP/1.1 502 Bad Gateway\r\n", containing: ["credential_unavailable"], excluding: ["Connection: close"]),
                .emit(.status(502), .failure(.proxy(.credentialUnavailable(scope: "broken", secret: "missing")))),
                .arm(.idle), .readNextRequest,
            ])
        #expect(p.connected.isEmpty)
    }

    struct CloseRow: Sendable, CustomTestStringConvertible {
        let name: String
        let request: [String]
        var testDescription: String { name }
    }

    static let closeRows = [
        CloseRow(name: "Connection: close", request: ["GET https://broken.example/ HTTP/1.1", "Host: broken.example", "Connection: close"]),
        CloseRow(name: "HTTP/1.0 without keep-alive", request: ["GET https://broken.example/ HTTP/1.0"]),
    ]

    @Test("a secret without a value, for a client that asked to close: the answer says so and the connection closes", arguments: closeRows)
    func clientAskedToClose(_ row: CloseRow) {
        var p = Playbook(Configs.pass)
        p.start([.arm(.clientHead)])
        p.on(
            .requestHead(requestHead(row.request), headBytes: 60, Arrival(now: p.now, scope: p.fixture.scope)),
            [
                .cancelTimer,
                .write(startingWith: "HTTP/1.1 502 Bad Gateway\r\n", containing: ["credential_unavailable", "Connection: close"]),
                .emit(.status(502), .failure(.proxy(.credentialUnavailable(scope: "broken", secret: "missing")))),
                .close(.afterFlush),
            ])
    }

    @Test("a followed redirect into a scope whose secret has no value, for a client that asked to close: the connection closes")
    func followedClientAskedToClose() {
        var p = Playbook(Configs.follow)
        p.sent(["GET https://a.example/ HTTP/1.1", "Host: a.example", "Connection: close"], to: a)
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 302 Found", "Location: https://broken.example/")),
            [
                .release(hop(1), reuse: false), .emit(.status(302), .redirect(.follow)),
                .cancelTimer,
                .write(startingWith: "HTTP/1.1 502 Bad Gateway\r\n", containing: ["credential_unavailable", "Connection: close"]),
                .emit(
                    .status(502), .origin(origin("https://broken.example")),
                    .failure(.proxy(.credentialUnavailable(scope: "broken", secret: "missing")))),
                .close(.afterFlush),
            ])
        #expect(p.connected == [hop(1)])
    }
}

@Suite("Records: what the log and metrics are told")
struct RecordDetailTests {
    @Test("an intercepted CONNECT is counted under the scopes of its origin, not as no scope")
    func interceptScope() {
        var p = Playbook(Configs.intercept)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("CONNECT a.example:443 HTTP/1.1"),
            [
                .cancelTimer, .writeExactly(established), .startClientTLS(a), .arm(.clientHead),
            ])
        p.on(.clientTLSEstablished, [.emit(.status(200)), .arm(.clientHead)])
        #expect(p.emitted.first?.scopes == ["a"])
    }

    /// A request refused at admission, and where its line must say it was going.
    struct RefusedTarget: Sendable, CustomStringConvertible {
        let head: [String]
        let origin: Origin?
        let pathAndQuery: String?
        var description: String { head[0] }
    }

    @Test(
        "a refused request's line names the target whenever it can be read (a denied CONNECT its host:port), and nothing when it cannot",
        arguments: [
            RefusedTarget(head: ["CONNECT unscoped.example:443 HTTP/1.1", "Host: unscoped.example:443"], origin: unscoped, pathAndQuery: nil),
            RefusedTarget(
                head: ["CONNECT unscoped.example:8443 HTTP/1.1", "Content-Length: 5"], origin: origin("https://unscoped.example:8443"),
                pathAndQuery: nil),
            RefusedTarget(head: ["GET https://a.example/v1/x HTTP/1.1", "Host: a.example", "Host: b.example"], origin: a, pathAndQuery: "/v1/x"),
            RefusedTarget(head: ["GET /not-a-proxy-request HTTP/1.1", "Host: plain.example"], origin: nil, pathAndQuery: nil),
            RefusedTarget(head: ["CONNECT unscoped.example HTTP/1.1"], origin: nil, pathAndQuery: nil),
        ])
    func refusedRequestNamesItsTarget(_ refused: RefusedTarget) {
        var p = Playbook(Configs.intercept)
        p.start([.arm(.clientHead)])
        _ = p.feed(
            .requestHead(
                requestHead(refused.head), headBytes: refused.head.joined(separator: "\r\n").utf8.count + 4,
                Arrival(now: p.now, scope: p.fixture.scope)))
        let record = p.emitted.first
        #expect(record?.status.map { $0 >= 400 } == true, "refused: \(String(describing: record))")
        #expect(record?.origin == refused.origin)
        #expect(record?.pathAndQuery == refused.pathAndQuery)
    }

    @Test("a request whose connection failed lists nothing as injected: nothing left the proxy")
    func nothingInjectedWhenNeverSent() {
        var p = Playbook(Configs.pass)
        p.requested(["GET https://a.example/ HTTP/1.1", "Host: a.example"], to: a)
        p.on(
            .upstreamConnectFailed(hop(1), .upstreamTLSVerification(a, "self-signed certificate")),
            [
                .release(hop(1), reuse: false), .cancelTimer, .write(startingWith: "HTTP/1.1 502 "), .emit(.status(502)),
                .arm(.idle), .readNextRequest,
            ])
        #expect(p.emitted.first?.injected == [])
        #expect(p.emitted.first?.scopes == ["a"])
    }
}

@Suite("Records: the failures the proxy also hints on its stderr, once")
struct StderrHintTests {
    /// The set-up mistakes whose fix must reach someone who reads only the proxy's terminal;
    /// every other failure stays in the access log alone (a hint per kind, not per connection).
    @Test(
        "each failure hints on stderr or not, with a fixed text that says the fix",
        arguments: [
            (ExchangeFailure.proxy(.tlsToPlainListener), "client_spoke_tls_to_plain_listener", "should say http://"),
            (.proxy(.tlsToPlainListener), "client_spoke_tls_to_plain_listener", "HTTPS_PROXY=http://HOST:PORT"),
            (.proxy(.interceptionFailed(a, .clientRejectedCertificate)), "client_rejected_certificate", "scopeproxy ca"),
            (.proxy(.interceptionFailed(a, .notTLS)), nil, nil),
            (.proxy(.notProxyRequest), nil, nil),
            (.responseCut, nil, nil),
            (.clientClosed, nil, nil),
        ] as [(ExchangeFailure, String?, String?)])
    func hint(failure: ExchangeFailure, event: String?, says: String?) {
        #expect(failure.stderrHint?.event == event)
        if let says { #expect(failure.stderrHint?.hint.contains(says) == true) }
    }
}

@Suite("Records: a request refused after its scopes are known names them")
struct RefusedRecordScopeTests {
    struct Row: Sendable, CustomTestStringConvertible {
        let name: String
        let fixture: Fixture
        let lines: [String]
        let failure: String
        let scopes: [String]
        var testDescription: String { name }
    }

    static let placeholder = SecretTrafficTests.placeholder

    /// `scope=-` in the log must mean only that no scope covers the origin: every refusal made once
    /// the request is admitted (its origin and client known) carries the covering scopes, as a
    /// request that went through would.
    @Test(
        "the record of a refusal after admission names the scopes covering its origin",
        arguments: [
            Row(
                name: "a placeholder toward an origin a scope covers without substituting it", fixture: SecretTrafficTests.fixture,
                lines: ["GET https://a.example/ HTTP/1.1", "Host: a.example", "Authorization: token \(placeholder)"],
                failure: "placeholder_out_of_scope", scopes: ["a"]),
            Row(
                name: "a secret's value toward an origin another scope covers", fixture: SecretTrafficTests.fixture,
                lines: ["GET https://gh.example/ HTTP/1.1", "Host: gh.example", "X-Debug: A-INJECTED-7c1e"],
                failure: "secret_egress_blocked", scopes: ["gh"]),
            Row(
                name: "a credential without a value", fixture: Configs.pass,
                lines: ["GET https://broken.example/ HTTP/1.1", "Host: broken.example"],
                failure: "credential_unavailable", scopes: ["broken"]),
            Row(
                name: "a placeholder toward an origin no scope covers: no scope", fixture: SecretTrafficTests.fixture,
                lines: ["GET https://unscoped.example/?k=\(placeholder) HTTP/1.1", "Host: unscoped.example"],
                failure: "placeholder_out_of_scope", scopes: []),
        ])
    func refusedRecordNamesScopes(_ row: Row) {
        var p = Playbook(row.fixture)
        p.start([.arm(.clientHead)])
        _ = p.feed(p.head(row.lines))
        #expect(p.connected.isEmpty, "nothing was sent")
        #expect(p.emitted.count == 1)
        #expect(p.emitted.first?.failure?.code == row.failure)
        #expect(p.emitted.first?.scopes == row.scopes)
    }

    @Test("a followed hop refused after its scopes are known names its own scopes, not the previous hop's")
    func followedHopRefusalNamesItsScopes() {
        var p = Playbook(Configs.follow)
        p.sent(["GET https://a.example/1 HTTP/1.1", "Host: a.example"], to: a)
        _ = p.feed(.responseHead(hop(1), response("HTTP/1.1 307 Temporary Redirect", "Location: https://broken.example/2")))
        #expect(p.emitted.map(\.status) == [307, 502])
        #expect(p.emitted.last?.failure?.code == "credential_unavailable")
        #expect(p.emitted.map(\.scopes) == [["a"], ["broken"]])
    }
}
