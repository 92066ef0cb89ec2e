import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

/// One HTTP/2 stream is one exchange: admitted like an HTTP/1.1 request, run by the same exchange
/// machine, its outcomes rendered as HEADERS, END_STREAM and RST_STREAM.
@Suite("HTTP/2: a stream is one exchange")
struct StreamMachineTests {
    static let firstID = Playbook.generatedID(1)
    static let clientAuth = "authorization: Bearer CLIENT-AUTH-CANARY"

    @Test("two streams, two decisions: scope a's credential is injected on one; the client's Authorization is stripped on the other")
    func twoStreamsTwoDecisions() {
        var scoped = StreamBook(Configs.pass)
        var other = StreamBook(Configs.pass)
        scoped.start(block("GET", "https://a.example/v1", Self.clientAuth), [.arm(.connect), .connect(hop(1), a, .tls, reusePooled: true)])
        other.start(
            block("GET", "https://unscoped.example/", Self.clientAuth), [.arm(.connect), .connect(hop(1), unscoped, .tls, reusePooled: true)])
        scoped.on(
            .upstreamConnected(hop(1), reused: false),
            [
                .send(
                    hop(1), startingWith: "GET /v1 HTTP/1.1\r\nHost: a.example\r\n", containing: [aToken, "authorization: Bearer CLIENT-AUTH-CANARY"]),
                .arm(.responseHead),
            ])
        other.on(
            .upstreamConnected(hop(1), reused: false),
            [.send(hop(1), startingWith: "GET / HTTP/1.1\r\nHost: unscoped.example\r\n", excluding: ["CANARY", "INJECTED"]), .arm(.responseHead)])
        // The origin echoes the injected value: masked in the HEADERS as in an HTTP/1.1 head.
        scoped.on(
            .responseHead(
                hop(1), response("HTTP/1.1 200 OK", "Content-Length: 2", "Connection: keep-alive", "Keep-Alive: timeout=5", "X-Echo: A-INJECTED-7c1e")
            ),
            [
                .respond(
                    200, .relayed, has: ["content-length": "2", "x-request-id": Self.firstID, "x-echo": String(repeating: "*", count: 15)],
                    lacks: ["connection", "keep-alive", "transfer-encoding"]),
                .relay(hop(1), .contentLength(2), .untilClose, scrubs: ["a_token"]), .arm(.stall),
            ])
        scoped.on(
            .responseBody(hop(1), .complete(payload: 2, consumed: 2, captured: nil, observed: nil)),
            [
                .cancelTimer, .release(hop(1), reuse: true),
                .emit(.status(200), .scopes(["a"]), .injected(["X-A-Key"]), .failure(nil), .field(.proto, .text("h2c"))), .endStream,
            ])
        other.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "Transfer-Encoding: chunked")),
            [.respond(200, .relayed, lacks: ["transfer-encoding", "content-length"]), .relay(hop(1), .chunked, .untilClose), .arm(.stall)])
        other.on(
            .responseBody(hop(1), .complete(payload: 9, consumed: 20, captured: nil, observed: nil)),
            [.cancelTimer, .release(hop(1), reuse: true), .emit(.status(200), .stripped(["authorization"]), .injected([])), .endStream])
        #expect(scoped.finalResponses == 1 && other.finalResponses == 1)
        #expect(scoped.machine.isFinished && other.machine.isFinished)
    }

    @Test("a secret's value for an origin outside its scopes: 403 on that stream, nothing connected")
    func egressRefused() {
        var s = StreamBook(Configs.pass)
        s.start(
            block("GET", "https://unscoped.example/", "x-leak: A-INJECTED-7c1e"),
            [
                .respond(403, .error("secret_egress_blocked"), has: ["x-request-id": Self.firstID, "content-type": "application/json"]),
                .emit(.status(403)),
            ])
        #expect(s.connected.isEmpty)
        #expect(s.machine.isFinished)
    }

    @Test("a token wait holds its own stream only: another stream connects meanwhile, and the waiting one goes when its token comes")
    func tokenWaitIsPerStream() {
        let fixture = AccessTokenMachineTests.fixture
        var waiting = StreamBook(fixture)
        var other = StreamBook(fixture)
        waiting.start(
            block("GET", "https://api.example/v1"), [.x(.exactly(.acquireToken(secret: "partner_token", from: fixture.scope)))])
        #expect(waiting.machine.awaitedToken == "partner_token")
        other.start(block("GET", "http://plain.example/"), [.arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        other.on(.upstreamConnected(hop(1), reused: true), [.send(hop(1), startingWith: "GET / HTTP/1.1\r\n"), .arm(.responseHead)])
        #expect(waiting.connected.isEmpty)
        waiting.on(
            .tokenReady(secret: "partner_token", AccessTokenMachineTests.token),
            [.arm(.connect), .connect(hop(1), AccessTokenMachineTests.api, .tls, reusePooled: true)])
        waiting.on(
            .upstreamConnected(hop(1), reused: false),
            [
                .send(hop(1), startingWith: "GET /v1 HTTP/1.1\r\n", containing: ["Authorization: Bearer ACCESS-TOKEN-CANARY-1\r\n"]),
                .arm(.responseHead),
            ])
    }

    @Test("inside an intercepted tunnel, a stream for another origin is 421 misdirected_request and reaches no origin")
    func misdirected() {
        var s = StreamBook(Configs.intercept, mode: .intercepted(a, client: .unnamed), proto: .h2)
        s.start(
            block("GET", "https://b.example/", Self.clientAuth),
            [
                .respond(421, .error("misdirected_request"), has: ["x-request-id": Self.firstID]),
                .emit(.status(421), .failure(.proxy(.misdirectedRequest(tunnel: a))), .origin(a), .field(.proto, .text("h2"))),
            ])
        #expect(s.connected.isEmpty)
        // The tunnel's own origin, on a second stream, goes.
        var own = StreamBook(Configs.intercept, mode: .intercepted(a, client: .unnamed), proto: .h2)
        own.start(block("GET", "https://a.example/v1"), [.arm(.connect), .connect(hop(1), a, .tls, reusePooled: true)])
    }

    @Test("on a route's listener, a stream is an origin-form request for the route's upstream; a Host on another port is refused as for HTTP/1.1")
    func routed() {
        let mode = ConnectionMode.route(upstream: plain, publicOrigin: origin("http://127.0.0.1:9000"))
        var s = StreamBook(mode: mode)
        s.start(block("GET", "http://localhost:9000/x"), [.arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        s.on(
            .upstreamConnected(hop(1), reused: true),
            [.send(hop(1), startingWith: "GET /x HTTP/1.1\r\nHost: plain.example\r\n"), .arm(.responseHead)])
        var other = StreamBook(mode: mode)
        other.start(block("GET", "http://localhost:9001/x"), [.respond(400, .error("host_mismatch")), .emit(.status(400))])
    }

    @Test("the client resets a stream mid-body: the hop is released once and the line says client_closed; later events change nothing")
    func clientResetMidBody() {
        var s = StreamBook()
        s.start(
            block("POST", "http://plain.example/up", "content-length: 100"), endStream: false,
            [.arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        s.on(
            .upstreamConnected(hop(1), reused: true),
            [
                .send(hop(1), startingWith: "POST /up HTTP/1.1\r\n", containing: ["Content-Length: 100"]), .pump(hop(1), .contentLength(100)),
                .arm(.stall),
            ])
        s.on(.requestBody(hop(1), .moved(payload: 40, consumed: 40)), [.arm(.stall)])
        s.on(.clientFailed, [.cancelTimer, .release(hop(1), reuse: false), .emit(.failure(.clientClosed), .bytesIn(80))])
        s.ignores(.responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 0")), as: .afterClose)
        s.ignores(.connectionClosed, as: .afterClose)
        s.ignores(.clientFailed, as: .afterClose)
        #expect(s.released == [hop(1)])
        #expect(s.emitted.count == 1)
        #expect(s.finalResponses == 0)
    }

    @Test("the client resets a stream while its response is relayed: released once, one line, no END_STREAM")
    func clientResetMidResponse() {
        var s = StreamBook()
        s.start(block("GET", "http://plain.example/"), [.arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        s.on(.upstreamConnected(hop(1), reused: true), [.send(hop(1), startingWith: "GET / HTTP/1.1\r\n"), .arm(.responseHead)])
        s.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 10")),
            [.respond(200, .relayed), .relay(hop(1), .contentLength(10), .untilClose), .arm(.stall)])
        s.on(.connectionClosed, [.cancelTimer, .release(hop(1), reuse: false), .emit(.failure(.clientClosed), .status(200))])
        s.ignores(.responseBody(hop(1), .complete(payload: 10, consumed: 10, captured: nil, observed: nil)), as: .afterClose)
        #expect(s.released == [hop(1)])
    }

    @Test("a body without content-length is pumped as the chunked body the engine re-frames DATA into")
    func reframedBody() {
        var s = StreamBook()
        s.start(block("PUT", "http://plain.example/f"), endStream: false, [.arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        #expect(s.machine.request?.reframedAsChunked == true)
        s.on(
            .upstreamConnected(hop(1), reused: true),
            [.send(hop(1), startingWith: "PUT /f HTTP/1.1\r\n", containing: ["Transfer-Encoding: chunked"]), .pump(hop(1), .chunked), .arm(.stall)])
        // The log shows the fields the client sent, not the proxy's framing.
        s.on(.clientFailed, [.cancelTimer, .release(hop(1), reuse: false), .emit(.failure(.clientClosed))])
        #expect(s.emitted.first?.requestFields?.contains("transfer-encoding") == false)
    }

    @Test("END_STREAM before the announced body is whole: the stream is reset, the hop released, the line written")
    func endedEarly() {
        var s = StreamBook()
        s.start(
            block("POST", "http://plain.example/up", "content-length: 100"), endStream: false,
            [.arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        _ = s.feed(.upstreamConnected(hop(1), reused: true))
        s.on(
            .clientInputClosed(bufferedBytes: 0),
            [.cancelTimer, .reset(.protocolError), .release(hop(1), reuse: false), .emit(.failure(.clientClosed))])
        #expect(s.released == [hop(1)])
    }

    @Test("a response cut mid-body resets the stream (INTERNAL_ERROR): the client never takes it for whole")
    func cut() {
        var s = StreamBook()
        s.start(block("GET", "http://plain.example/"), [.arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        _ = s.feed(.upstreamConnected(hop(1), reused: true))
        _ = s.feed(.responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 10")))
        s.on(
            .responseBody(hop(1), .cut),
            [.release(hop(1), reuse: false), .emit(.failure(.responseCut)), .cancelTimer, .reset(.internalError)])
        #expect(s.released == [hop(1)])
    }

    @Test("a response without a body (204, HEAD) ends the stream with its HEADERS, and no END_STREAM follows")
    func bodiless() {
        var s = StreamBook()
        s.start(block("HEAD", "http://plain.example/"), [.arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        _ = s.feed(.upstreamConnected(hop(1), reused: true))
        s.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 42")),
            [.respond(200, .none, has: ["content-length": "42"]), .relay(hop(1), .none, .none), .arm(.stall)])
        s.on(
            .responseBody(hop(1), .complete(payload: 0, consumed: 0, captured: nil, observed: nil)),
            [.cancelTimer, .release(hop(1), reuse: true), .emit(.status(200))])
    }

    @Test("a 101 from the origin on an HTTP/2 stream is 502 (HTTP/2 has no protocol switch)")
    func switchingProtocols() {
        var s = StreamBook()
        s.start(block("GET", "http://plain.example/ws"), [.arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        _ = s.feed(.upstreamConnected(hop(1), reused: true))
        s.on(
            .responseHead(hop(1), response("HTTP/1.1 101 Switching Protocols", "Connection: Upgrade", "Upgrade: websocket")),
            [.release(hop(1), reuse: false), .cancelTimer, .respond(502, .error("bad_upstream_response")), .emit(.status(502))])
        #expect(s.finalResponses == 1)
    }

    @Test("interim responses become interim HEADERS; the final one follows")
    func interim() {
        var s = StreamBook()
        s.start(block("GET", "http://plain.example/"), [.arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        _ = s.feed(.upstreamConnected(hop(1), reused: true))
        s.on(.responseHead(hop(1), response("HTTP/1.1 103 Early Hints", "Link: </s.css>; rel=preload")), [.interim(103)])
        s.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 1")),
            [.respond(200, .relayed), .relay(hop(1), .contentLength(1), .untilClose), .arm(.stall)])
    }

    @Test("timers are the stream's own: a connect timeout answers 502 connect_timeout on that stream")
    func connectTimeout() {
        var s = StreamBook()
        s.start(block("GET", "http://plain.example/"), [.arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        s.ignores(.timerFired(.stall), as: .timerOfAnotherPurpose)
        s.on(.timerFired(.connect), [.release(hop(1), reuse: false), .respond(502, .error("connect_timeout")), .emit(.status(502))])
    }

    @Test("events only an HTTP/1 connection has are impossible on a stream")
    func impossibleEvents() {
        var s = StreamBook()
        s.start(block("GET", "http://plain.example/"), [.arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        for event: ConnectionEvent in [.headStarted, .clientTLSEstablished, s.playbookHead()] {
            let before = s.machine.impossibleEvents
            #expect(s.feed(event).isEmpty)
            #expect(s.machine.impossibleEvents == before + 1)
            #expect(s.machine.lastImpossible == .notOnAStream)
        }
    }
}

extension StreamBook {
    /// An HTTP/1 request head event, which a stream never gets.
    func playbookHead() -> ConnectionEvent {
        .requestHead(requestHead(get), headBytes: 40, Arrival(now: now, scope: fixture.scope))
    }
}

@Suite("Log: a followed redirect's lines")
struct FollowedLineProtocolTests {
    static let found = response("HTTP/1.1 302 Found", "Location: https://b.example/next", "Content-Length: 0")

    @Test("every line of a followed chain says the protocol the client spoke (HTTP/1.1 and h2c)")
    func protoOnEveryLine() {
        var p = Playbook(Configs.follow)
        p.sent(["GET https://a.example/start HTTP/1.1", "Host: a.example"], to: a)
        _ = p.feed(.responseHead(hop(1), Self.found))
        _ = p.feed(.upstreamConnectFailed(hop(2), .upstreamRefused(b)))
        #expect(p.emitted.count == 2)
        #expect(p.emitted.map(\.proto) == [.http1_1, .http1_1])

        var s = StreamBook(Configs.follow)
        s.feedStart(block("GET", "https://a.example/start"))
        s.feed(.upstreamConnected(hop(1), reused: false))
        s.feed(.responseHead(hop(1), Self.found))
        s.feed(.upstreamConnectFailed(hop(2), .upstreamRefused(b)))
        #expect(s.emitted.count == 2)
        #expect(s.emitted.map(\.proto) == [.h2c, .h2c])
    }
}
