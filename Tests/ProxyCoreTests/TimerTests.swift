import HTTP1Codec
import ProxyCore
import Testing

@Suite("Machine: timers")
struct TimerTests {
    @Test("a connection that sends nothing within client_header is closed without an answer or a line")
    func freshHeadTimeout() {
        var p = Playbook()
        p.start([.arm(.clientHead)])
        p.on(.timerFired(.clientHead), [.close(.now)])
        p.ignores(.connectionClosed)
        #expect(p.emitted.isEmpty)
    }

    @Test("a head that started but did not finish within client_header gets 408 and the connection closes")
    func startedHeadTimeout() {
        var p = Playbook()
        p.start([.arm(.clientHead)])
        p.ignores(.headStarted)
        p.on(
            .timerFired(.clientHead),
            [
                .write(startingWith: "HTTP/1.1 408 Request Timeout\r\n", containing: ["request_head_timeout", "Connection: close"]),
                .emit(.status(408), .method(nil), .failure(.proxy(.requestHeadTimeout))),
                .close(.afterFlush),
            ])
    }

    @Test("a keep-alive connection with no next request is closed when idle runs out")
    func idleTimeout() {
        var p = Playbook()
        p.relaying(length: 1)
        p.on(
            .responseBody(hop(1), .complete(payload: 1, consumed: 1, captured: nil, observed: nil)),
            [.cancelTimer, .release(hop(1), reuse: true), .emit(.status(200)), .arm(.idle), .readNextRequest])
        p.on(.timerFired(.idle), [.close(.now)])
        #expect(p.emitted.count == 1)
    }

    @Test("a head that starts after an idle wait gets client_header, and 408 when it runs out")
    func headAfterIdle() {
        var p = Playbook()
        p.relaying(length: 1)
        p.on(
            .responseBody(hop(1), .complete(payload: 1, consumed: 1, captured: nil, observed: nil)),
            [.cancelTimer, .release(hop(1), reuse: true), .emit(.status(200)), .arm(.idle), .readNextRequest])
        p.on(.headStarted, [.arm(.clientHead)])
        p.ignores(.timerFired(.idle))
        p.on(.timerFired(.clientHead), [.write(startingWith: "HTTP/1.1 408 "), .emit(.status(408)), .close(.afterFlush)])
    }

    @Test("connect timeout: 502 connect_timeout, the hop released, the connection kept (the request was read whole)")
    func connectTimeout() {
        var p = Playbook()
        p.requested()
        p.on(
            .timerFired(.connect),
            [
                .release(hop(1), reuse: false),
                .write(startingWith: "HTTP/1.1 502 Bad Gateway\r\n", containing: ["connect_timeout"], excluding: ["Connection: close"]),
                .emit(.status(502), .failure(.proxy(.connectTimeout(plain)))),
                .arm(.idle), .readNextRequest,
            ])
        p.ignores(.upstreamConnected(hop(1), reused: false))
        p.ignores(.upstreamConnectFailed(hop(1), .upstreamRefused(plain)))
    }

    @Test("response head timeout: 504 upstream_timeout")
    func responseHeadTimeout() {
        var p = Playbook()
        p.sent()
        p.on(
            .timerFired(.responseHead),
            [
                .release(hop(1), reuse: false),
                .write(startingWith: "HTTP/1.1 504 Gateway Timeout\r\n", containing: ["upstream_timeout"], excluding: ["Connection: close"]),
                .emit(.status(504), .failure(.proxy(.responseTimeout(plain)))),
                .arm(.idle), .readNextRequest,
            ])
        p.ignores(.responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 0")))
        #expect(!p.machine.expectsResponseHead(from: hop(1)))
    }

    @Test("a stall during the response cuts it: no completion, the connection closes, the line says response_cut")
    func stallDuringResponse() {
        var p = Playbook()
        p.relaying(length: 10)
        p.on(.responseBody(hop(1), .moved(payload: 4, consumed: 4)), [.arm(.stall)])
        p.ignores(.responseBody(hop(1), .moved(payload: 0, consumed: 0)))
        p.on(
            .timerFired(.stall),
            [
                .release(hop(1), reuse: false),
                .emit(.status(200), .failure(.responseCut)),
                .close(.afterFlush),
            ])
        p.ignores(.responseBody(hop(1), .complete(payload: 6, consumed: 6, captured: nil, observed: nil)))
    }

    @Test("a stall while the request body streams, before any response: the hop is let go, the client gets 408 and is closed")
    func stallBeforeResponse() {
        var p = Playbook()
        p.pumping(length: 100)
        p.on(.requestBody(hop(1), .moved(payload: 10, consumed: 10)), [.arm(.stall)])
        p.on(
            .timerFired(.stall),
            [
                .release(hop(1), reuse: false),
                .write(startingWith: "HTTP/1.1 408 ", containing: ["request_body_timeout", "Connection: close"]),
                .emit(.status(408), .failure(.proxy(.requestBodyTimeout))),
                .close(.afterFlush),
            ])
    }

    @Test("a tunnel that stalls is closed")
    func tunnelStall() {
        var p = Playbook(Configs.tunnelAllowed)
        p.start([.arm(.clientHead)])
        p.on(p.head("CONNECT unscoped.example:443 HTTP/1.1"), [.cancelTimer, .arm(.connect), .connect(hop(1), unscoped, .raw, reusePooled: false)])
        p.on(.upstreamConnected(hop(1), reused: false), [.writeExactly(established), .splice(hop(1)), .arm(.stall)])
        p.on(.timerFired(.stall), [.close(.now)])
        p.on(.connectionClosed, [.release(hop(1), reuse: false), .emit(.tunnel(.tunnel))])
    }

    enum Stage: String, Sendable, CaseIterable {
        case waitingForHead, connecting, waitingForResponse, relaying, idle
    }

    struct StaleRow: Sendable, CustomTestStringConvertible {
        let stage: Stage
        let stale: [TimerPurpose]
        var testDescription: String { "\(stage.rawValue): \(stale)" }
    }

    @Test(
        "a timer purpose other than the one last armed is stale and does nothing",
        arguments: [
            StaleRow(stage: .waitingForHead, stale: [.idle, .connect, .responseHead, .stall]),
            StaleRow(stage: .connecting, stale: [.clientHead, .idle, .responseHead, .stall]),
            StaleRow(stage: .waitingForResponse, stale: [.clientHead, .idle, .connect, .stall]),
            StaleRow(stage: .relaying, stale: [.clientHead, .idle, .connect, .responseHead]),
            StaleRow(stage: .idle, stale: [.clientHead, .connect, .responseHead, .stall]),
        ])
    func staleTimers(_ row: StaleRow) {
        var p = Playbook()
        let live: TimerPurpose
        switch row.stage {
        case .waitingForHead:
            p.start([.arm(.clientHead)])
            live = .clientHead
        case .connecting:
            p.requested()
            live = .connect
        case .waitingForResponse:
            p.sent()
            live = .responseHead
        case .relaying:
            p.relaying()
            live = .stall
        case .idle:
            p.relaying(length: 1)
            p.on(
                .responseBody(hop(1), .complete(payload: 1, consumed: 1, captured: nil, observed: nil)),
                [.cancelTimer, .release(hop(1), reuse: true), .emit(.status(200)), .arm(.idle), .readNextRequest])
            live = .idle
        }
        for purpose in row.stale { p.ignores(.timerFired(purpose)) }
        // The live one still works, once.
        let fired = p.feed(.timerFired(live))
        #expect(!fired.isEmpty, "the armed timer (\(live)) acts")
        p.ignores(.timerFired(live))
    }
}
