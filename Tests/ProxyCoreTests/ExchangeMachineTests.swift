import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

// The exchange machine alone, without a connection: events in, the actions it appends and the
// outcome it returns to its connection, checked in order (the Playbook's `Expect` vocabulary).

/// One `ExchangeMachine` and what it appended so far.
struct ExchangeBook {
    let exchange: ExchangeMachine
    var effects: MachineEffects
    let timeouts: Timeouts

    /// A bodiless request of `method` to `origin` + `path`, under `fixture`.
    init(_ fixture: Fixture, _ method: String, _ origin: Origin, _ path: String) {
        let head = requestHead(["\(method) \(origin)\(path) HTTP/1.1", "Host: \(origin.authority)"])
        let request = ClientRequest(head: head, origin: origin, pathAndQuery: path, userinfo: nil, framing: .none, client: .unnamed)
        var record = ExchangeRecord(id: "req-1", client: Playbook.peer, method: method, startedAt: 1)
        record.origin = origin
        timeouts = fixture.configuration.timeouts
        exchange = ExchangeMachine(
            request: request, scope: fixture.scope, wallClock: 0, record: record, mode: .forwardProxy,
            limits: fixture.configuration.limits, logBodies: false)
        effects = MachineEffects(timeouts: timeouts)
    }

    /// Starts the client's own hop and checks what comes back.
    mutating func start(_ expected: [Expect], _ outcome: ExchangeOutcome = .proceeding, sourceLocation: SourceLocation = #_sourceLocation) {
        _ = effects.take()  // each event's actions are checked alone
        let returned = exchange.start(body: .none, &effects)
        check("start", returned, outcome, expected, sourceLocation)
    }

    /// Feeds `event` and checks the actions (all of them, in order) and the outcome.
    mutating func on(
        _ event: ExchangeEvent, _ expected: [Expect], _ outcome: ExchangeOutcome = .proceeding,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        _ = effects.take()  // each event's actions are checked alone
        let returned = exchange.handle(event, &effects)
        check("\(event)", returned, outcome, expected, sourceLocation)
    }

    /// Feeds `event` and checks that it is dropped as stale, for `reason`, with no action.
    mutating func ignores(_ event: ExchangeEvent, as reason: StaleEvent, sourceLocation: SourceLocation = #_sourceLocation) {
        on(event, [], .ignored(reason), sourceLocation: sourceLocation)
    }

    private func check(
        _ event: String, _ returned: ExchangeOutcome, _ outcome: ExchangeOutcome, _ expected: [Expect],
        _ location: SourceLocation
    ) {
        let problems = Playbook.problems(effects.actions, expected, timeouts: timeouts)
        if !problems.isEmpty {
            let actual = effects.actions.map { "    \(describe($0))" }.joined(separator: "\n")
            Issue.record("after \(event):\n  \(problems.joined(separator: "\n  "))\n  returned:\n\(actual)", sourceLocation: location)
        }
        #expect(returned == outcome, "after \(event)", sourceLocation: location)
    }
}

private let found = response("HTTP/1.1 302 Found", "Location: https://b.example/next", "Content-Length: 0")
private let ok = response("HTTP/1.1 200 OK", "Content-Length: 2")

@Suite("Exchange machine")
struct ExchangeMachineTests {
    @Test("a followed redirect starts a new HopState: hop 1's retry does not keep hop 2 off the pool or from its own retry")
    func followReplacesTheHopWhole() throws {
        var x = ExchangeBook(Configs.follow, "GET", a, "/start")
        x.start([.arm(.connect), .connect(hop(1), a, .tls, reusePooled: true)])
        // Hop 1 takes a pooled connection the origin had closed: retried once, off the pool.
        x.on(.upstreamConnected(hop(1), reused: true), [.send(hop(1), startingWith: "GET /start "), .arm(.responseHead)])
        x.on(
            .upstreamClosed(hop(1), sawResponseBytes: false),
            [.release(hop(1), reuse: false), .arm(.connect), .connect(hop(2), a, .tls, reusePooled: false)])
        #expect(x.exchange.hopState?.retried == true)
        x.on(.upstreamConnected(hop(2), reused: false), [.send(hop(2), startingWith: "GET /start "), .arm(.responseHead)])
        x.on(
            .responseHead(hop(2), found),
            [
                .release(hop(2), reuse: false), .emit(.status(302), .redirect(.follow)), .arm(.connect),
                .connect(hop(3), b, .tls, reusePooled: true),
            ])
        let next = try #require(x.exchange.hopState)
        #expect(next.id == hop(3))
        #expect(!next.retried && !next.connected && !next.reused && !next.upstreamClosed)
        #expect(next.requestPayload == 0 && next.requestConsumed == 0 && next.response == .awaiting(interims: 0))
        // Hop 3 is a fresh hop: its own stale pooled connection is retried too.
        x.on(.upstreamConnected(hop(3), reused: true), [.send(hop(3), startingWith: "GET /next "), .arm(.responseHead)])
        x.on(
            .upstreamClosed(hop(3), sawResponseBytes: false),
            [.release(hop(3), reuse: false), .arm(.connect), .connect(hop(4), b, .tls, reusePooled: false)])
    }

    @Test("a retry starts a new HopState: the hang-up of the stale connection does not keep the fresh one out of the pool")
    func retryReplacesTheHopWhole() throws {
        var x = ExchangeBook(Configs.pass, "GET", a, "/r")
        x.start([.arm(.connect), .connect(hop(1), a, .tls, reusePooled: true)])
        x.on(.upstreamConnected(hop(1), reused: true), [.send(hop(1), startingWith: "GET /r "), .arm(.responseHead)])
        x.on(
            .upstreamClosed(hop(1), sawResponseBytes: false),
            [.release(hop(1), reuse: false), .arm(.connect), .connect(hop(2), a, .tls, reusePooled: false)])
        let retry = try #require(x.exchange.hopState)
        #expect(retry.retried && !retry.connected && !retry.reused && !retry.upstreamClosed)
        #expect(!x.exchange.expectsResponseHead(from: hop(2)), "nothing was sent on the fresh connection yet")
        x.on(.upstreamConnected(hop(2), reused: false), [.send(hop(2), startingWith: "GET /r "), .arm(.responseHead)])
        x.on(.responseHead(hop(2), ok), [], .response(ok, framing: .contentLength(2)))
        var clientHead = ok
        guard case .scrub(let scrub) = x.exchange.bodyScrub(for: clientHead, &x.effects) else { Issue.record("refused"); return }
        x.exchange.scrub(&clientHead)
        x.exchange.relay(
            ok, clientHead: clientHead, bytes: 40, inbound: .contentLength(2), outbound: .contentLength(2),
            keepClient: true, scrub: scrub, &x.effects)
        x.on(
            .responseBody(hop(2), .complete(payload: 2, consumed: 2, captured: nil, observed: nil)),
            [.cancelTimer, .release(hop(2), reuse: true), .emit(.status(200), .bytesOut(42))], .finished(keepClient: true))
    }

    @Test("stale events are dropped, each with its reason, and change nothing")
    func staleEventsSayWhy() {
        var x = ExchangeBook(Configs.follow, "GET", a, "/start")
        x.start([.arm(.connect), .connect(hop(1), a, .tls, reusePooled: true)])
        x.ignores(.responseHead(hop(1), ok), as: .notAwaited)  // nothing was sent yet
        x.on(.upstreamConnected(hop(1), reused: false), [.send(hop(1), startingWith: "GET /start "), .arm(.responseHead)])
        x.ignores(.upstreamConnected(hop(1), reused: false), as: .notAwaited)
        x.ignores(.upstreamConnectFailed(hop(1), .connectTimeout(a)), as: .notAwaited)
        x.on(
            .responseHead(hop(1), found),
            [
                .release(hop(1), reuse: false), .emit(.status(302), .redirect(.follow)), .arm(.connect),
                .connect(hop(2), b, .tls, reusePooled: true),
            ])
        // Hop 1 was released: nothing of it reaches the client.
        x.ignores(.responseHead(hop(1), ok), as: .staleHop)
        x.ignores(.responseBody(hop(1), .complete(payload: 2, consumed: 2, captured: nil, observed: nil)), as: .staleHop)
        x.ignores(.upstreamClosed(hop(1), sawResponseBytes: true), as: .staleHop)
        x.ignores(.upstreamConnected(hop(7), reused: false), as: .staleHop)  // never started
        #expect(x.exchange.currentHop == hop(2))
    }

    @Test("an access token nobody asked for is impossible, not stale")
    func unrequestedTokenIsImpossible() {
        var x = ExchangeBook(Configs.pass, "GET", a, "/t")
        x.start([.arm(.connect), .connect(hop(1), a, .tls, reusePooled: true)])
        let token = AccessToken(value: SecretValue("T"), generation: 1, validUntil: 0)
        x.on(.tokenReady(secret: "a_token", token), [], .impossible(.unrequestedToken))
        x.on(.collectedBody(.progressed), [], .impossible(.uncollectedBody))
    }
}

@Suite("Connection machine: stale and impossible events")
struct StaleAndImpossibleEventTests {
    @Test("the connection counts what a correct engine cannot send, and names what it drops")
    func countsImpossibleEvents() {
        var p = Playbook(Configs.pass)
        p.start([.arm(.clientHead)])
        let token = AccessToken(value: SecretValue("T"), generation: 1, validUntil: 0)
        p.impossible(.tokenReady(secret: "a_token", token), .unrequestedToken)
        p.impossible(.collectedBody(.complete([])), .uncollectedBody)
        p.impossible(.clientTLSEstablished, .clientTLSWithoutInterception)
        p.ignores(.timerFired(.responseHead), as: .timerOfAnotherPurpose)
        p.ignores(.upstreamConnected(hop(1), reused: false), as: .staleHop)
        #expect(p.machine.impossibleEvents == 3)
    }

    @Test("during an exchange: a body report no pump makes is impossible; a head out of turn and events after the close are stale")
    func duringAnExchange() {
        var p = Playbook(Configs.pass)
        p.relaying(length: 2)
        let token = AccessToken(value: SecretValue("T"), generation: 1, validUntil: 0)
        p.impossible(
            .responseBody(hop(1), .blocked(SecretFinding(secret: "a_token", encoding: .raw, isPlaceholder: false), bytesSent: true)),
            .impossibleBodyReport)
        p.ignores(.requestHead(requestHead(get), headBytes: 10, Arrival(now: 1, scope: Configs.pass.scope)), as: .outOfTurn)
        p.on(.clientFailed, [.close(.now)])
        p.on(.connectionClosed, [.cancelTimer, .release(hop(1), reuse: false), .emit(.failure(.clientClosed))])
        p.ignores(.tokenReady(secret: "a_token", token), as: .afterClose)
        #expect(p.machine.impossibleEvents == 1)
    }
}
