import HTTP1Codec
import ProxyCore
import Testing

@Suite("Machine: failures")
struct FailureTests {
    struct ConnectFailureRow: Sendable, CustomTestStringConvertible {
        let error: ProxyError
        let status: String
        var testDescription: String { error.code }
    }

    @Test(
        "a failed connect answers with its error and keeps the connection when the request was read whole",
        arguments: [
            ConnectFailureRow(error: .dnsFailure(plain), status: "502 Bad Gateway"),
            ConnectFailureRow(error: .upstreamRefused(plain), status: "502 Bad Gateway"),
            ConnectFailureRow(error: .upstreamTLSVerification(plain, "self-signed certificate"), status: "502 Bad Gateway"),
            ConnectFailureRow(error: .upstreamTLSHandshake(plain), status: "502 Bad Gateway"),
        ])
    func connectFailedKeepAlive(_ row: ConnectFailureRow) {
        var p = Playbook()
        p.requested()
        p.ignores(.upstreamConnectFailed(hop(2), row.error))
        p.on(
            .upstreamConnectFailed(hop(1), row.error),
            [
                .release(hop(1), reuse: false),
                .cancelTimer,
                .write(startingWith: "HTTP/1.1 \(row.status)\r\n", containing: [row.error.code], excluding: ["Connection: close"]),
                .emit(.status(502), .failure(.proxy(row.error))),
                .arm(.idle), .readNextRequest,
            ])
    }

    @Test("a failed connect closes the connection when the request body was not read")
    func connectFailedUnreadBody() {
        var p = Playbook()
        p.start([.arm(.clientHead)])
        p.on(
            p.head("POST http://plain.example/ HTTP/1.1", "Host: plain.example", "Content-Length: 5"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        p.on(
            .upstreamConnectFailed(hop(1), .upstreamRefused(plain)),
            [
                .release(hop(1), reuse: false),
                .cancelTimer,
                .write(startingWith: "HTTP/1.1 502 Bad Gateway\r\n", containing: ["upstream_refused", "Connection: close"]),
                .emit(.status(502), .failure(.proxy(.upstreamRefused(plain)))),
                .close(.afterFlush),
            ])
    }

    @Test("an HTTP/1.0 keep-alive client is told the connection stays open after an error (RFC 9112 §9.3)")
    func connectFailedHTTP10KeepAlive() {
        var p = Playbook()
        p.requested(["GET http://plain.example/ HTTP/1.0", "Host: plain.example", "Connection: keep-alive"])
        p.on(
            .upstreamConnectFailed(hop(1), .upstreamRefused(plain)),
            [
                .release(hop(1), reuse: false), .cancelTimer,
                .write(startingWith: "HTTP/1.1 502 ", containing: ["Connection: keep-alive"]),
                .emit(.status(502)), .arm(.idle), .readNextRequest,
            ])
    }

    @Test("a failed connect closes the connection when the client asked for Connection: close")
    func connectFailedClientClose() {
        var p = Playbook()
        p.requested(get + ["Connection: close"])
        p.on(
            .upstreamConnectFailed(hop(1), .upstreamRefused(plain)),
            [
                .release(hop(1), reuse: false), .cancelTimer,
                .write(startingWith: "HTTP/1.1 502 ", containing: ["Connection: close"]),
                .emit(.status(502)), .close(.afterFlush),
            ])
    }

    @Test("a followed hop whose connect fails: 502, the connection kept (the request was read whole)")
    func followedHopConnectFails() {
        var p = Playbook(Configs.follow)
        p.sent(["GET https://a.example/ HTTP/1.1", "Host: a.example"], to: a)
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 302 Found", "Location: https://b.example/")),
            [.release(hop(1), reuse: false), .emit(.status(302)), .arm(.connect), .connect(hop(2), b, .tls, reusePooled: true)])
        p.on(
            .upstreamConnectFailed(hop(2), .upstreamTLSVerification(b, "expired")),
            [
                .release(hop(2), reuse: false), .cancelTimer,
                .write(startingWith: "HTTP/1.1 502 Bad Gateway\r\n", containing: ["upstream_tls_verification"], excluding: ["Connection: close"]),
                .emit(.origin(b), .status(502), .failure(.proxy(.upstreamTLSVerification(b, "expired")))),
                .arm(.idle), .readNextRequest,
            ])
        #expect(p.released == [hop(1), hop(2)])
    }

    @Test("a CONNECT whose connect fails: 502, and no tunnel")
    func tunnelConnectFails() {
        var p = Playbook(Configs.tunnelAllowed)
        p.start([.arm(.clientHead)])
        p.on(p.head("CONNECT unscoped.example:443 HTTP/1.1"), [.cancelTimer, .arm(.connect), .connect(hop(1), unscoped, .raw, reusePooled: false)])
        p.on(
            .upstreamConnectFailed(hop(1), .dnsFailure(unscoped)),
            [
                .release(hop(1), reuse: false), .cancelTimer,
                .write(startingWith: "HTTP/1.1 502 Bad Gateway\r\n", containing: ["dns_failure"]),
                .emit(.method("CONNECT"), .status(502), .failure(.proxy(.dnsFailure(unscoped)))),
                .arm(.idle), .readNextRequest,
            ])
        #expect(p.machine.currentHop == nil)
    }

    @Test("a connect failure reported after the connection was made is ignored")
    func lateConnectFailure() {
        var p = Playbook()
        p.sent()
        p.ignores(.upstreamConnectFailed(hop(1), .upstreamRefused(plain)))
        p.ignores(.upstreamConnected(hop(1), reused: false))
    }

    struct BadHeadRow: Sendable, CustomTestStringConvertible {
        let name: String
        let event: @Sendable (HopID) -> ConnectionEvent
        let reason: String
        var testDescription: String { name }
    }

    @Test(
        "a response head that cannot be read or framed gets 502 bad_upstream_response",
        arguments: [
            BadHeadRow(name: "unparseable head", event: { .responseHeadInvalid($0, reason: "invalid status line") }, reason: "invalid status line"),
            BadHeadRow(
                name: "Content-Length and Transfer-Encoding",
                event: {
                    .responseHead($0, response("HTTP/1.1 200 OK", "Content-Length: 5", "Transfer-Encoding: chunked"))
                }, reason: "both Content-Length and Transfer-Encoding"),
            BadHeadRow(
                name: "a coding other than chunked",
                event: {
                    .responseHead($0, response("HTTP/1.1 200 OK", "Transfer-Encoding: gzip"))
                }, reason: "Transfer-Encoding does not end in chunked"),
        ])
    func badResponseHead(_ row: BadHeadRow) {
        var p = Playbook()
        p.sent()
        p.on(
            row.event(hop(1)),
            [
                .release(hop(1), reuse: false), .cancelTimer,
                .write(startingWith: "HTTP/1.1 502 Bad Gateway\r\n", containing: ["bad_upstream_response"]),
                .emit(.status(502), .failure(.proxy(.badUpstreamResponse(plain, row.reason)))),
                .arm(.idle), .readNextRequest,
            ])
        p.ignores(row.event(hop(1)))
    }

    @Test(
        "a response body the codec refuses, or cut short by the origin, is cut: no keep-alive, line says response_cut",
        arguments: [BodyProgress.invalid, .cut])
    func responseBodyCut(_ progress: BodyProgress) {
        var p = Playbook()
        p.relaying(length: 10)
        p.on(.responseBody(hop(1), .moved(payload: 3, consumed: 3)), [.arm(.stall)])
        p.on(
            .responseBody(hop(1), progress),
            [
                .release(hop(1), reuse: false),
                .emit(.status(200), .failure(.responseCut)),
                .cancelTimer,
                .close(.afterFlush),
            ])
        #expect(!p.machine.isAwaitingHead)
        p.ignores(.responseBody(hop(1), .complete(payload: 7, consumed: 7, captured: nil, observed: nil)))
        p.ignores(.connectionClosed)
        #expect(p.emitted.count == 1)
    }

    @Test("an origin closing while the body is relayed only marks it; the engine then completes or cuts it")
    func upstreamClosesDuringBody() {
        var p = Playbook()
        p.relaying(length: 10)
        p.ignores(.upstreamClosed(hop(1), sawResponseBytes: true))
        p.on(
            .responseBody(hop(1), .complete(payload: 10, consumed: 10, captured: nil, observed: nil)),
            [.cancelTimer, .release(hop(1), reuse: false), .emit(.status(200), .failure(nil)), .arm(.idle), .readNextRequest])
    }

    @Test("a stale pooled connection is retried once on a fresh hop when nothing was sent or received")
    func stalePooledRetry() {
        var p = Playbook()
        p.sent(reused: true)
        p.on(
            .upstreamClosed(hop(1), sawResponseBytes: false),
            [
                .release(hop(1), reuse: false),
                .arm(.connect),
                .connect(hop(2), plain, .plain, reusePooled: false),
            ])
        #expect(!p.machine.expectsResponseHead(from: hop(1)))
        p.ignores(.responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 0")))
        p.on(
            .upstreamConnected(hop(2), reused: false),
            [.send(hop(2), startingWith: "GET / HTTP/1.1\r\nHost: plain.example\r\n"), .arm(.responseHead)])
        #expect(p.sent(to: hop(2)) == p.sent(to: hop(1)), "the same head, byte for byte")
        // The fresh connection closing as well is a failure, not another retry.
        p.on(
            .upstreamClosed(hop(2), sawResponseBytes: false),
            [
                .release(hop(2), reuse: false), .cancelTimer,
                .write(startingWith: "HTTP/1.1 502 Bad Gateway\r\n", containing: ["upstream_closed"]),
                .emit(.status(502), .failure(.proxy(.upstreamClosed(plain)))),
                .arm(.idle), .readNextRequest,
            ])
        #expect(p.connected == [hop(1), hop(2)])
        #expect(p.released == [hop(1), hop(2)])
        #expect(p.emitted.count == 1)
    }

    @Test("a stale pooled connection retried with a pooled one closing again is not retried twice")
    func retriedOnlyOnce() {
        var p = Playbook()
        p.sent(reused: true)
        p.on(
            .upstreamClosed(hop(1), sawResponseBytes: false),
            [.release(hop(1), reuse: false), .arm(.connect), .connect(hop(2), plain, .plain, reusePooled: false)])
        // Even if the engine reported the fresh hop as reused, a second stale close is not retried.
        p.on(.upstreamConnected(hop(2), reused: true), [.send(hop(2), startingWith: "GET "), .arm(.responseHead)])
        p.on(
            .upstreamClosed(hop(2), sawResponseBytes: false),
            [
                .release(hop(2), reuse: false), .cancelTimer, .write(startingWith: "HTTP/1.1 502 "), .emit(.status(502)), .arm(.idle),
                .readNextRequest,
            ])
    }

    struct NoRetryRow: Sendable, CustomTestStringConvertible {
        let name: String
        let reused: Bool
        let sawResponseBytes: Bool
        let code: String
        var testDescription: String { name }
    }

    @Test(
        "no retry on a fresh connection, or once response bytes arrived",
        arguments: [
            NoRetryRow(name: "fresh connection closed before responding", reused: false, sawResponseBytes: false, code: "upstream_closed"),
            NoRetryRow(
                name: "pooled connection closed inside the response head", reused: true, sawResponseBytes: true, code: "bad_upstream_response"),
        ])
    func noRetry(_ row: NoRetryRow) {
        var p = Playbook()
        p.sent(reused: row.reused)
        p.on(
            .upstreamClosed(hop(1), sawResponseBytes: row.sawResponseBytes),
            [
                .release(hop(1), reuse: false), .cancelTimer,
                .write(startingWith: "HTTP/1.1 502 Bad Gateway\r\n", containing: [row.code]),
                .emit(.status(502)), .arm(.idle), .readNextRequest,
            ])
        #expect(p.connected == [hop(1)])
    }

    @Test("no retry once request body bytes were consumed: 502 and close (the body cannot be read again)")
    func noRetryAfterBody() {
        var p = Playbook()
        p.pumping(length: 100, reused: true)
        p.on(.requestBody(hop(1), .moved(payload: 4, consumed: 4)), [.arm(.stall)])
        p.on(
            .upstreamClosed(hop(1), sawResponseBytes: false),
            [
                .release(hop(1), reuse: false), .cancelTimer,
                .write(startingWith: "HTTP/1.1 502 Bad Gateway\r\n", containing: ["upstream_closed", "Connection: close"]),
                .emit(.status(502), .failure(.proxy(.upstreamClosed(plain)))),
                .close(.afterFlush),
            ])
        #expect(p.connected == [hop(1)])
    }

    @Test("a stale pooled connection is retried while the body is pumped but nothing of it was consumed yet (PUT: idempotent)")
    func retryBeforeBodyConsumed() {
        var p = Playbook()
        p.pumping(length: 100, reused: true, method: "PUT")
        p.on(
            .upstreamClosed(hop(1), sawResponseBytes: false),
            [.release(hop(1), reuse: false), .arm(.connect), .connect(hop(2), plain, .plain, reusePooled: false)])
        p.on(
            .upstreamConnected(hop(2), reused: false),
            [.send(hop(2), startingWith: "PUT /up HTTP/1.1\r\n"), .pump(hop(2), .contentLength(100), capture: nil, observe: nil), .arm(.stall)])
        p.ignores(.requestBody(hop(1), .moved(payload: 4, consumed: 4)))
    }

    @Test(
        "a POST or PATCH on a stale pooled connection is never repeated: the origin may have run it (RFC 9110 §9.2.2)",
        arguments: ["POST", "PATCH"])
    func noRetryOfNonIdempotent(_ method: String) {
        var p = Playbook()
        p.requested(["\(method) http://plain.example/charge HTTP/1.1", "Host: plain.example"])
        p.on(.upstreamConnected(hop(1), reused: true), [.send(hop(1), startingWith: "\(method) /charge HTTP/1.1\r\n"), .arm(.responseHead)])
        p.on(
            .upstreamClosed(hop(1), sawResponseBytes: false),
            [
                .release(hop(1), reuse: false), .cancelTimer,
                .write(startingWith: "HTTP/1.1 502 Bad Gateway\r\n", containing: ["upstream_closed"]),
                .emit(.status(502), .failure(.proxy(.upstreamClosed(plain)))),
                .arm(.idle), .readNextRequest,
            ])
        #expect(p.connected == [hop(1)])
    }

    @Test("a request body the codec refuses fails the exchange with 400 and closes")
    func requestBodyInvalid() {
        var p = Playbook()
        p.pumping(length: 100)
        p.on(
            .requestBody(hop(1), .invalid),
            [
                .release(hop(1), reuse: false), .cancelTimer,
                .write(startingWith: "HTTP/1.1 400 Bad Request\r\n", containing: ["Connection: close"]),
                .emit(.status(400)),
                .close(.afterFlush),
            ])
    }

    @Test("a client gone mid-body with nothing buffered is closed at once; the line says client_closed")
    func clientGoneMidBody() {
        var p = Playbook()
        p.pumping(length: 100)
        p.on(.requestBody(hop(1), .moved(payload: 40, consumed: 40)), [.arm(.stall)])
        p.on(.clientInputClosed(bufferedBytes: 0), [.close(.now)])
        p.on(
            .connectionClosed,
            [
                .cancelTimer, .release(hop(1), reuse: false),
                .emit(.status(nil), .failure(.clientClosed)),
            ])
        #expect(p.released == [hop(1)])
        #expect(p.emitted.count == 1)
    }

    @Test("a client that half-closes with body bytes still buffered is not aborted; its response closes the connection")
    func clientHalfClosedWithBuffered() {
        var p = Playbook()
        p.pumping(length: 100)
        p.ignores(.clientInputClosed(bufferedBytes: 60))
        p.on(.requestBody(hop(1), .complete(payload: 100, consumed: 100, captured: nil, observed: nil)), [.arm(.responseHead)])
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 0")),
            [
                .write(startingWith: "HTTP/1.1 200 OK\r\n", containing: ["Connection: close"]), .relay(hop(1), .contentLength(0), .contentLength(0)),
                .arm(.stall),
            ])
        p.on(
            .responseBody(hop(1), .complete(payload: 0, consumed: 0, captured: nil, observed: nil)),
            [.cancelTimer, .release(hop(1), reuse: true), .emit(.status(200), .failure(nil)), .close(.afterFlush)])
    }

    @Test("a client that half-closes after its whole request still gets the response")
    func clientHalfClosedAfterRequest() {
        var p = Playbook()
        p.sent()
        p.ignores(.clientInputClosed(bufferedBytes: 0))
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 2")),
            [
                .write(startingWith: "HTTP/1.1 200 OK\r\n", containing: ["Connection: close"]), .relay(hop(1), .contentLength(2), .contentLength(2)),
                .arm(.stall),
            ])
    }

    @Test("a client that half-closes between requests is closed after what is queued")
    func clientHalfClosedIdle() {
        var p = Playbook()
        p.start([.arm(.clientHead)])
        p.on(.clientInputClosed(bufferedBytes: 3), [.cancelTimer, .close(.afterFlush)])
        p.ignores(.requestHead(requestHead(get), headBytes: 40, Arrival(now: 0, scope: p.fixture.scope)))
    }

    @Test("a client connection that fails mid-exchange is closed now; the exchange's line says client_closed")
    func clientFailed() {
        var p = Playbook()
        p.relaying(length: 10)
        p.on(.clientFailed, [.close(.now)])
        p.on(.connectionClosed, [.cancelTimer, .release(hop(1), reuse: false), .emit(.status(200), .failure(.clientClosed))])
    }

    @Test("drain closes a connection waiting between requests at once")
    func drainIdle() {
        var p = Playbook()
        p.start([.arm(.clientHead)])
        p.on(.drain, [.close(.now)])
    }

    @Test("drain lets a started head and its exchange finish, then closes")
    func drainStartedHead() {
        var p = Playbook()
        p.start([.arm(.clientHead)])
        p.ignores(.headStarted)
        p.ignores(.drain)
        p.on(p.head(get[0], get[1]), [.cancelTimer, .arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
    }

    @Test("drain during an exchange: the response says Connection: close and the connection closes after it")
    func drainBusy() {
        var p = Playbook()
        p.sent()
        p.ignores(.drain)
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 1")),
            [
                .write(startingWith: "HTTP/1.1 200 OK\r\n", containing: ["Connection: close"]), .relay(hop(1), .contentLength(1), .contentLength(1)),
                .arm(.stall),
            ])
        p.on(
            .responseBody(hop(1), .complete(payload: 1, consumed: 1, captured: nil, observed: nil)),
            [.cancelTimer, .release(hop(1), reuse: true), .emit(.status(200)), .close(.afterFlush)])
    }

    @Test("drain after the response head went out with keep-alive still closes once the body is done")
    func drainDuringBody() {
        var p = Playbook()
        p.relaying(length: 1)
        p.ignores(.drain)
        p.on(
            .responseBody(hop(1), .complete(payload: 1, consumed: 1, captured: nil, observed: nil)),
            [.cancelTimer, .release(hop(1), reuse: true), .emit(.status(200)), .close(.afterFlush)])
    }

    @Test("an error answered while draining closes the connection")
    func drainError() {
        var p = Playbook()
        p.requested()
        p.ignores(.drain)
        p.on(
            .upstreamConnectFailed(hop(1), .upstreamRefused(plain)),
            [
                .release(hop(1), reuse: false), .cancelTimer,
                .write(startingWith: "HTTP/1.1 502 ", containing: ["Connection: close"]), .emit(.status(502)), .close(.afterFlush),
            ])
    }
}
