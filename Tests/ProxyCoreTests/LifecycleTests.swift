import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

@Suite("Machine: the plain lifecycle of an exchange")
struct LifecycleTests {
    @Test("a GET goes head → pooled connect → send → response head → body → release for reuse → one log line → next request")
    func plainLifecycle() {
        var p = Playbook()
        let id = Playbook.generatedID(1)
        p.start([.arm(.clientHead)])
        p.ignores(.headStarted)
        let head = p.head("GET http://plain.example/x?q=1 HTTP/1.1", "Host: plain.example", "Accept: */*")
        p.on(head, [.cancelTimer, .arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        #expect(!p.machine.expectsResponseHead(from: hop(1)), "nothing was sent yet")
        #expect(p.machine.currentHop == hop(1))

        p.on(
            .upstreamConnected(hop(1), reused: true),
            [
                .exactly(
                    .sendToUpstream(hop(1), Array("GET /x?q=1 HTTP/1.1\r\nHost: plain.example\r\nAccept: */*\r\nX-Request-ID: \(id)\r\n\r\n".utf8))),
                .arm(.responseHead),
            ])
        #expect(p.machine.expectsResponseHead(from: hop(1)))

        let clientHead = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nX-Request-ID: \(id)\r\n\r\n"
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Type: text/plain", "Content-Length: 5")),
            [
                .writeExactly(clientHead),
                .relay(hop(1), .contentLength(5), .contentLength(5)),
                .arm(.stall),
            ])
        #expect(!p.machine.expectsResponseHead(from: hop(1)), "the final head was handled")
        p.on(.responseBody(hop(1), .moved(payload: 3, consumed: 3)), [.arm(.stall)])
        p.on(
            .responseBody(hop(1), .complete(payload: 2, consumed: 2, captured: nil, observed: nil)),
            [
                .cancelTimer,
                .release(hop(1), reuse: true),
                .emit(
                    .id(id), .method("GET"), .origin(plain), .path("/x?q=1"), .status(200), .failure(nil),
                    .bytesIn(UInt64("GET http://plain.example/x?q=1 HTTP/1.1\r\nHost: plain.example\r\nAccept: */*\r\n\r\n".utf8.count)),
                    .bytesOut(UInt64(clientHead.utf8.count + 5))),
                .arm(.idle),
                .readNextRequest,
            ])
        #expect(p.machine.isAwaitingHead)

        // The next request on the same connection: the idle wait becomes a head wait.
        p.on(.headStarted, [.arm(.clientHead)])
        p.on(
            p.head("GET http://plain.example/y HTTP/1.1", "Host: plain.example"),
            [.cancelTimer, .arm(.connect), .connect(hop(2), plain, .plain, reusePooled: true)])
        #expect(p.emitted.count == 1)
    }

    @Test("the upstream Host comes from the target, never from the client's Host; hop-by-hop fields stay behind")
    func upstreamHead() {
        var p = Playbook()
        p.requested([
            "GET http://plain.example/p HTTP/1.1", "Host: 127.0.0.1:8080", "Proxy-Connection: keep-alive", "Keep-Alive: timeout=5",
            "TE: trailers", "Connection: X-Private", "X-Private: hop", "Accept: text/html",
        ])
        p.on(
            .upstreamConnected(hop(1), reused: true),
            [
                .send(
                    hop(1), startingWith: "GET /p HTTP/1.1\r\nHost: plain.example\r\nAccept: text/html\r\nX-Request-ID: ",
                    excluding: ["127.0.0.1:8080", "Proxy-Connection", "Keep-Alive", "TE:", "Connection", "X-Private"]),
                .arm(.responseHead),
            ])
    }

    struct KeepAliveRow: Sendable, CustomTestStringConvertible {
        let name: String
        let request: [String]
        let response: [String]
        let inbound: BodyFraming
        let outbound: BodyFraming
        /// In the head the client gets.
        let clientHeadHas: [String]
        let clientHeadLacks: [String]
        let reuseUpstream: Bool
        let keepClient: Bool
        var testDescription: String { name }
    }

    static let keepAliveRows: [KeepAliveRow] = [
        KeepAliveRow(
            name: "HTTP/1.1 keeps the client connection by default",
            request: ["GET http://plain.example/ HTTP/1.1", "Host: plain.example"],
            response: ["HTTP/1.1 200 OK", "Content-Length: 2"], inbound: .contentLength(2), outbound: .contentLength(2),
            clientHeadHas: [], clientHeadLacks: ["Connection"], reuseUpstream: true, keepClient: true),
        KeepAliveRow(
            name: "Connection: close from the client closes after the response",
            request: ["GET http://plain.example/ HTTP/1.1", "Host: plain.example", "Connection: close"],
            response: ["HTTP/1.1 200 OK", "Content-Length: 2"], inbound: .contentLength(2), outbound: .contentLength(2),
            clientHeadHas: ["Connection: close"], clientHeadLacks: [], reuseUpstream: true, keepClient: false),
        KeepAliveRow(
            name: "HTTP/1.0 without keep-alive closes",
            request: ["GET http://plain.example/ HTTP/1.0"],
            response: ["HTTP/1.1 200 OK", "Content-Length: 2"], inbound: .contentLength(2), outbound: .contentLength(2),
            clientHeadHas: ["Connection: close"], clientHeadLacks: [], reuseUpstream: true, keepClient: false),
        KeepAliveRow(
            name: "HTTP/1.0 with Connection: keep-alive is kept and told so",
            request: ["GET http://plain.example/ HTTP/1.0", "Connection: keep-alive"],
            response: ["HTTP/1.1 200 OK", "Content-Length: 2"], inbound: .contentLength(2), outbound: .contentLength(2),
            clientHeadHas: ["Connection: keep-alive"], clientHeadLacks: ["close"], reuseUpstream: true, keepClient: true),
        KeepAliveRow(
            name: "an HTTP/1.0 origin's connection is not reused; the client's is kept",
            request: ["GET http://plain.example/ HTTP/1.1", "Host: plain.example"],
            response: ["HTTP/1.0 200 OK", "Content-Length: 2"], inbound: .contentLength(2), outbound: .contentLength(2),
            clientHeadHas: [], clientHeadLacks: ["Connection"], reuseUpstream: false, keepClient: true),
        KeepAliveRow(
            name: "an origin's Connection: close is not passed on and its connection not reused",
            request: ["GET http://plain.example/ HTTP/1.1", "Host: plain.example"],
            response: ["HTTP/1.1 200 OK", "Connection: close", "Content-Length: 2"], inbound: .contentLength(2), outbound: .contentLength(2),
            clientHeadHas: [], clientHeadLacks: ["Connection"], reuseUpstream: false, keepClient: true),
        KeepAliveRow(
            name: "a body delimited by close ends both connections",
            request: ["GET http://plain.example/ HTTP/1.1", "Host: plain.example"],
            response: ["HTTP/1.1 200 OK"], inbound: .untilClose, outbound: .untilClose,
            clientHeadHas: ["Connection: close"], clientHeadLacks: [], reuseUpstream: false, keepClient: false),
        KeepAliveRow(
            name: "a chunked body goes to an HTTP/1.0 client delimited by close",
            request: ["GET http://plain.example/ HTTP/1.0", "Connection: keep-alive"],
            response: ["HTTP/1.1 200 OK", "Transfer-Encoding: chunked"], inbound: .chunked, outbound: .untilClose,
            clientHeadHas: ["Connection: close"], clientHeadLacks: ["Transfer-Encoding"], reuseUpstream: true, keepClient: false),
    ]

    @Test("keep-alive on each side follows the versions and Connection fields", arguments: keepAliveRows)
    func keepAlive(_ row: KeepAliveRow) {
        var p = Playbook()
        p.start([.arm(.clientHead)])
        p.on(
            .requestHead(requestHead(row.request), headBytes: 60, Arrival(now: p.now, scope: p.fixture.scope)),
            [.cancelTimer, .arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        p.on(
            .upstreamConnected(hop(1), reused: false),
            [.send(hop(1), startingWith: "GET / HTTP/1.1\r\nHost: plain.example\r\n", excluding: ["Connection", "keep-alive"]), .arm(.responseHead)])
        p.on(
            .responseHead(hop(1), responseHead(row.response)),
            [
                .write(startingWith: "HTTP/1.1 200 OK\r\n", containing: row.clientHeadHas, excluding: row.clientHeadLacks),
                .relay(hop(1), row.inbound, row.outbound),
                .arm(.stall),
            ])
        let ending: [Expect] = row.keepClient ? [.arm(.idle), .readNextRequest] : [.close(.afterFlush)]
        p.on(
            .responseBody(hop(1), .complete(payload: 2, consumed: 2, captured: nil, observed: nil)),
            [.cancelTimer, .release(hop(1), reuse: row.reuseUpstream), .emit(.status(200), .failure(nil))] + ending)
        #expect(p.machine.isAwaitingHead == row.keepClient)
    }

    struct BodyRow: Sendable, CustomTestStringConvertible {
        let follow: Bool
        let logBodies: Bool
        var testDescription: String { "\(follow ? "follow" : "pass") mode, log.bodies \(logBodies)" }
    }

    @Test(
        "a request body is streamed; kept for a replay only in follow mode, observed only with log.bodies",
        arguments: [
            BodyRow(follow: false, logBodies: false), BodyRow(follow: true, logBodies: false),
            BodyRow(follow: false, logBodies: true), BodyRow(follow: true, logBodies: true),
        ])
    func streamedBody(_ row: BodyRow) {
        var p = Playbook(row.follow ? Configs.follow : Configs.pass, logBodies: row.logBodies)
        let limits = p.settings.limits
        p.start([.arm(.clientHead)])
        p.on(
            p.head("POST http://plain.example/upload HTTP/1.1", "Host: plain.example", "Content-Type: text/plain", "Content-Length: 11"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        p.on(
            .upstreamConnected(hop(1), reused: true),
            [
                .send(
                    hop(1), startingWith: "POST /upload HTTP/1.1\r\nHost: plain.example\r\nContent-Type: text/plain\r\n",
                    containing: ["Content-Length: 11\r\n"]),
                .pump(
                    hop(1), .contentLength(11), capture: row.follow ? limits.maxReplayBody : nil,
                    observe: row.logBodies ? limits.maxObservedBody : nil),
                .arm(.stall),
            ])
        #expect(p.machine.expectsResponseHead(from: hop(1)), "an early response may come while the body streams")
        p.on(.requestBody(hop(1), .moved(payload: 5, consumed: 5)), [.arm(.stall)])
        p.ignores(.requestBody(hop(2), .moved(payload: 5, consumed: 5)))
        let body = Array("hello world".utf8)
        let observed = row.logBodies ? ExchangeRecord.ObservedBody(bytes: body, total: 11, truncated: false, contentType: nil) : nil
        p.on(
            .requestBody(hop(1), .complete(payload: 6, consumed: 6, captured: row.follow ? body : nil, observed: observed)),
            [.arm(.responseHead)])
        p.ignores(.requestBody(hop(1), .moved(payload: 1, consumed: 1)))
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 204 No Content")),
            [
                .write(startingWith: "HTTP/1.1 204 No Content\r\n"),
                .relay(hop(1), .none, .none, observe: row.logBodies ? limits.maxObservedBody : nil), .arm(.stall),
            ])
        p.on(
            .responseBody(hop(1), .complete(payload: 0, consumed: 0, captured: nil, observed: nil)),
            [
                .cancelTimer, .release(hop(1), reuse: true),
                .emit(
                    .status(204), .requestBodyTotal(row.logBodies ? 11 : nil),
                    .bytesIn(
                        UInt64(
                            "POST http://plain.example/upload HTTP/1.1\r\nHost: plain.example\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\n"
                                .utf8.count + 11))),
                .arm(.idle), .readNextRequest,
            ])
    }

    @Test("a chunked request body is pumped as chunked")
    func chunkedBody() {
        var p = Playbook()
        p.start([.arm(.clientHead)])
        p.on(
            p.head("PUT http://plain.example/f HTTP/1.1", "Host: plain.example", "Transfer-Encoding: chunked"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        p.on(
            .upstreamConnected(hop(1), reused: false),
            [
                .send(hop(1), startingWith: "PUT /f HTTP/1.1\r\n", containing: ["Transfer-Encoding: chunked\r\n"], excluding: ["Content-Length"]),
                .pump(hop(1), .chunked, capture: nil, observe: nil),
                .arm(.stall),
            ])
    }

    struct NoBodyRow: Sendable, CustomTestStringConvertible {
        let method: String
        let response: [String]
        let clientHeadHas: [String]
        var testDescription: String { "\(method) → \(response[0])" }
    }

    @Test(
        "responses that have no body whatever their fields say are relayed with framing none",
        arguments: [
            NoBodyRow(method: "HEAD", response: ["HTTP/1.1 200 OK", "Content-Length: 1234"], clientHeadHas: ["Content-Length: 1234"]),
            NoBodyRow(method: "HEAD", response: ["HTTP/1.1 200 OK", "Transfer-Encoding: chunked"], clientHeadHas: []),
            NoBodyRow(method: "GET", response: ["HTTP/1.1 304 Not Modified", "Content-Length: 99"], clientHeadHas: ["Content-Length: 99"]),
            NoBodyRow(method: "GET", response: ["HTTP/1.1 204 No Content"], clientHeadHas: []),
        ])
    func noBody(_ row: NoBodyRow) {
        var p = Playbook()
        p.sent(["\(row.method) http://plain.example/ HTTP/1.1", "Host: plain.example"])
        p.on(
            .responseHead(hop(1), responseHead(row.response)),
            [
                .write(startingWith: row.response[0] + "\r\n", containing: row.clientHeadHas, excluding: ["Transfer-Encoding"]),
                .relay(hop(1), .none, .none), .arm(.stall),
            ])
        p.on(
            .responseBody(hop(1), .complete(payload: 0, consumed: 0, captured: nil, observed: nil)),
            [.cancelTimer, .release(hop(1), reuse: true), .emit(.method(row.method)), .arm(.idle), .readNextRequest])
    }

    @Test("interim 1xx heads go to an HTTP/1.1 client as they come, then the final one")
    func interimToHTTP11() {
        var p = Playbook()
        p.start([.arm(.clientHead)])
        p.on(
            p.head("GET http://plain.example/ HTTP/1.1", "Host: plain.example"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        p.on(.upstreamConnected(hop(1), reused: true), [.send(hop(1), startingWith: "GET / HTTP/1.1\r\n"), .arm(.responseHead)])
        p.on(.responseHead(hop(1), response("HTTP/1.1 100 Continue")), [.writeExactly("HTTP/1.1 100 Continue\r\n\r\n")])
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 103 Early Hints", "Link: </style.css>; rel=preload")),
            [.writeExactly("HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")])
        #expect(p.machine.expectsResponseHead(from: hop(1)), "still waiting for the final head")
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 0")),
            [.write(startingWith: "HTTP/1.1 200 OK\r\n"), .relay(hop(1), .contentLength(0), .contentLength(0)), .arm(.stall)])
    }

    @Test("interim 1xx heads never go to an HTTP/1.0 client")
    func interimToHTTP10() {
        var p = Playbook()
        p.start([.arm(.clientHead)])
        p.on(p.head("GET http://plain.example/ HTTP/1.0"), [.cancelTimer, .arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        p.on(.upstreamConnected(hop(1), reused: true), [.send(hop(1), startingWith: "GET / HTTP/1.1\r\n"), .arm(.responseHead)])
        p.ignores(.responseHead(hop(1), response("HTTP/1.1 100 Continue")))
        p.ignores(.responseHead(hop(1), response("HTTP/1.1 103 Early Hints")))
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 0")),
            [
                .write(startingWith: "HTTP/1.1 200 OK\r\n", containing: ["Connection: close"]),
                .relay(hop(1), .contentLength(0), .contentLength(0)), .arm(.stall),
            ])
    }

    @Test("past the interim limit the origin's response is refused with 502")
    func interimLimit() {
        var limits = Limits()
        limits.maxInformationalResponses = 2
        var p = Playbook(limits: limits)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("GET http://plain.example/ HTTP/1.1", "Host: plain.example"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        p.on(.upstreamConnected(hop(1), reused: true), [.send(hop(1), startingWith: "GET / HTTP/1.1\r\n"), .arm(.responseHead)])
        p.on(.responseHead(hop(1), response("HTTP/1.1 102 Processing")), [.write(startingWith: "HTTP/1.1 102 Processing\r\n")])
        p.on(.responseHead(hop(1), response("HTTP/1.1 102 Processing")), [.write(startingWith: "HTTP/1.1 102 Processing\r\n")])
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 102 Processing")),
            [
                .release(hop(1), reuse: false), .cancelTimer,
                .write(startingWith: "HTTP/1.1 502 Bad Gateway\r\n", containing: ["bad_upstream_response", "too many interim responses"]),
                .emit(.status(502), .failure(.proxy(.badUpstreamResponse(plain, "too many interim responses")))),
                .arm(.idle), .readNextRequest,
            ])
        p.ignores(.responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 0")))
    }

    @Test("a 101 to an upgrade request turns the exchange into a tunnel (frames read: the guard is on); its line is written when it closes")
    func upgrade() {
        var p = Playbook()
        p.start([.arm(.clientHead)])
        p.on(
            p.head("GET http://plain.example/ws HTTP/1.1", "Host: plain.example", "Connection: Upgrade", "Upgrade: websocket"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        p.on(
            .upstreamConnected(hop(1), reused: true),
            [.send(hop(1), startingWith: "GET /ws HTTP/1.1\r\n", containing: ["Connection: upgrade\r\nUpgrade: websocket\r\n"]), .arm(.responseHead)])
        p.on(
            .responseHead(
                hop(1), response("HTTP/1.1 101 Switching Protocols", "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Accept: xyz")),
            [
                .writeExactly("HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: xyz\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n"),
                .relayFrames(hop(1), guards: nil, scrubs: nil),
                .arm(.stall),
            ])
        #expect(p.machine.currentHop == hop(1))
        #expect(!p.machine.expectsResponseHead(from: hop(1)))
        p.on(.tunnelBytes(hop(1), fromClient: 10, fromUpstream: 20), [.arm(.stall)])
        p.ignores(.tunnelBytes(hop(1), fromClient: 0, fromUpstream: 0))
        p.on(.upstreamClosed(hop(1), sawResponseBytes: true), [.finishTunnel(hop(1), .upstream)])
        p.ignores(.upstreamClosed(hop(1), sawResponseBytes: true))
        p.on(.connectionClosed, [.cancelTimer, .release(hop(1), reuse: false), .emit(.status(101), .failure(nil))])
        #expect(p.emitted.count == 1)
    }

    @Test("a 101 behind which the client pipelined a request is refused, naming the origin of the hop that sent it")
    func upgradeWithPipelinedRequest() {
        var p = Playbook(Configs.follow)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("GET https://a.example/ws HTTP/1.1", "Host: a.example", "Connection: Upgrade", "Upgrade: websocket"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), a, .tls, reusePooled: true)])
        p.on(.upstreamConnected(hop(1), reused: false), [.send(hop(1), startingWith: "GET /ws HTTP/1.1\r\n"), .arm(.responseHead)])
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 307 Temporary Redirect", "Location: https://b.example/ws", "Content-Length: 0")),
            [
                .release(hop(1), reuse: false), .emit(.status(307), .redirect(.follow)), .arm(.connect),
                .connect(hop(2), b, .tls, reusePooled: true),
            ])
        p.on(
            .upstreamConnected(hop(2), reused: false),
            [.send(hop(2), startingWith: "GET /ws HTTP/1.1\r\n", containing: ["Upgrade: websocket\r\n"]), .arm(.responseHead)])
        p.on(
            .responseHead(hop(2), response("HTTP/1.1 101 Switching Protocols", "Connection: Upgrade", "Upgrade: websocket"), clientPipelined: true),
            [
                .release(hop(2), reuse: false), .cancelTimer,
                .write(
                    startingWith: "HTTP/1.1 502 Bad Gateway\r\n", containing: ["https://b.example", "101 on a connection with pipelined requests"]),
                .emit(.status(502), .origin(b)), .close(.afterFlush),
            ])
    }

    @Test("a 101 to a request that asked for no upgrade is refused with 502")
    func unaskedUpgrade() {
        var p = Playbook()
        p.start([.arm(.clientHead)])
        p.on(
            p.head("GET http://plain.example/ HTTP/1.1", "Host: plain.example"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        p.on(.upstreamConnected(hop(1), reused: true), [.send(hop(1), startingWith: "GET / HTTP/1.1\r\n"), .arm(.responseHead)])
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 101 Switching Protocols", "Upgrade: websocket")),
            [
                .release(hop(1), reuse: false), .cancelTimer,
                .write(startingWith: "HTTP/1.1 502 Bad Gateway\r\n", containing: ["101 without an upgrade request"]),
                .emit(.status(502)), .arm(.idle), .readNextRequest,
            ])
    }
}

@Suite("Machine: CONNECT tunnels and interception")
struct ConnectTests {
    @Test("an allowed CONNECT opens a raw connection, answers 200 and splices; its line counts the spliced bytes")
    func tunnel() {
        var p = Playbook(Configs.tunnelAllowed)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("CONNECT unscoped.example:443 HTTP/1.1", "Host: unscoped.example:443"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), unscoped, .raw, reusePooled: false)])
        p.on(.upstreamConnected(hop(1), reused: false), [.writeExactly(established), .splice(hop(1)), .arm(.stall)])
        #expect(p.machine.currentHop == hop(1))
        p.on(.tunnelBytes(hop(1), fromClient: 517, fromUpstream: 0), [.arm(.stall)])
        p.on(.tunnelBytes(hop(1), fromClient: 0, fromUpstream: 4000), [.arm(.stall)])
        p.ignores(.tunnelBytes(hop(2), fromClient: 1, fromUpstream: 1))
        p.on(.clientInputClosed(bufferedBytes: 0), [.finishTunnel(hop(1), .client)])
        p.ignores(.clientInputClosed(bufferedBytes: 0))
        p.ignores(.upstreamClosed(hop(1), sawResponseBytes: true))
        p.on(
            .connectionClosed,
            [
                .cancelTimer, .release(hop(1), reuse: false),
                .emit(.method("CONNECT"), .origin(unscoped), .status(200), .tunnel(.tunnel), .bytesIn(517), .bytesOut(4000), .failure(nil)),
            ])
    }

    @Test("a tunnel whose origin hangs up is finished from the upstream side")
    func tunnelUpstreamCloses() {
        var p = Playbook(Configs.tunnelAllowed)
        p.start([.arm(.clientHead)])
        p.on(p.head("CONNECT unscoped.example:443 HTTP/1.1"), [.cancelTimer, .arm(.connect), .connect(hop(1), unscoped, .raw, reusePooled: false)])
        p.on(.upstreamConnected(hop(1), reused: false), [.writeExactly(established), .splice(hop(1)), .arm(.stall)])
        p.on(.upstreamClosed(hop(1), sawResponseBytes: true), [.finishTunnel(hop(1), .upstream)])
        p.ignores(.clientInputClosed(bufferedBytes: 0))
    }

    @Test("a CONNECT where tunnels are denied gets 403 and the connection closes")
    func tunnelDenied() {
        var p = Playbook(Configs.intercept)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("CONNECT unscoped.example:443 HTTP/1.1", "Host: unscoped.example:443"),
            [
                .cancelTimer,
                .write(startingWith: "HTTP/1.1 403 Forbidden\r\n", containing: ["tunnel_denied", "Connection: close"]),
                .emit(.status(403), .tunnel(.deny), .failure(.proxy(.tunnelDenied(unscoped)))),
                .close(.afterFlush),
            ])
        #expect(p.connected.isEmpty)
    }

    @Test("an intercepted CONNECT: 200, client TLS, then origin-form requests for that origin over verified TLS")
    func intercept() {
        var p = Playbook(Configs.intercept)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("CONNECT a.example:443 HTTP/1.1", "Host: a.example:443"),
            [
                .cancelTimer,
                .writeExactly(established),
                .startClientTLS(a),
                .arm(.clientHead),
            ])
        #expect(p.machine.mode == .intercepted(a, client: .unnamed))
        #expect(p.machine.isHandshaking && !p.machine.isAwaitingHead)
        // The CONNECT's line waits for the handshake's outcome.
        p.on(.clientTLSEstablished, [.emit(.method("CONNECT"), .origin(a), .status(200), .tunnel(.intercept), .failure(nil)), .arm(.clientHead)])
        #expect(p.machine.isAwaitingHead)
        p.ignores(.clientTLSEstablished)
        #expect(p.connected.isEmpty, "nothing is connected until a request arrives inside")

        p.on(.headStarted, [])
        p.on(
            p.head("GET /v1/books HTTP/1.1", "Host: a.example", clientAuthorization),
            [.cancelTimer, .arm(.connect), .connect(hop(1), a, .tls, reusePooled: true)])
        p.on(
            .upstreamConnected(hop(1), reused: false),
            [
                .send(hop(1), startingWith: "GET /v1/books HTTP/1.1\r\nHost: a.example\r\n", containing: [clientAuthorization, aToken]),
                .arm(.responseHead),
            ])
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 0")),
            [.write(startingWith: "HTTP/1.1 200 OK\r\n"), .relay(hop(1), .contentLength(0), .contentLength(0)), .arm(.stall)])
        p.on(
            .responseBody(hop(1), .complete(payload: 0, consumed: 0, captured: nil, observed: nil)),
            [
                .cancelTimer, .release(hop(1), reuse: true),
                .emit(.origin(a), .path("/v1/books"), .status(200), .scopes(["a"]), .injected(["X-A-Key"]), .tunnel(nil)),
                .arm(.idle), .readNextRequest,
            ])
        #expect(p.machine.mode == .intercepted(a, client: .unnamed), "the mode stays for the tunnel's life")
    }

    struct HandshakeRow: Sendable, CustomTestStringConvertible {
        let name: String
        let event: ConnectionEvent
        let why: ClientTLSFailure
        var testDescription: String { name }
    }

    @Test(
        "an intercepted CONNECT whose client TLS never completes: one line saying why, and the connection closes",
        arguments: [
            HandshakeRow(
                name: "the client refuses the local CA's certificate", event: .clientTLSFailed(.clientRejectedCertificate),
                why: .clientRejectedCertificate),
            HandshakeRow(name: "the client speaks plain HTTP in the tunnel", event: .clientTLSFailed(.notTLS), why: .notTLS),
            HandshakeRow(name: "no shared TLS version", event: .clientTLSFailed(.noCommonProtocol), why: .noCommonProtocol),
            HandshakeRow(name: "the CA cannot mint the leaf", event: .clientTLSFailed(.certificateUnavailable), why: .certificateUnavailable),
            HandshakeRow(name: "the client half-closes mid-handshake", event: .clientInputClosed(bufferedBytes: 0), why: .closedDuringHandshake),
            HandshakeRow(name: "the client connection fails without a TLS reason", event: .clientFailed, why: .tlsError),
            HandshakeRow(name: "the handshake outlasts client_header", event: .timerFired(.clientHead), why: .handshakeTimeout),
        ])
    func handshakeFails(_ row: HandshakeRow) {
        var p = Playbook(Configs.intercept)
        p.start([.arm(.clientHead)])
        p.on(p.head("CONNECT a.example:443 HTTP/1.1"), [.cancelTimer, .writeExactly(established), .startClientTLS(a), .arm(.clientHead)])
        let line = Expect.emit(.method("CONNECT"), .origin(a), .status(200), .tunnel(.intercept), .failure(.proxy(.interceptionFailed(a, row.why))))
        // The timer that fired is gone already; any other outcome cancels it.
        p.on(row.event, row.why == .handshakeTimeout ? [line, .close(.now)] : [line, .cancelTimer, .close(.now)])
        #expect(p.emitted.first?.failure?.reason == row.why.rawValue)
        p.ignores(.clientTLSEstablished)
        p.on(.connectionClosed, [])
        #expect(p.emitted.count == 1, "one line for the CONNECT, not a second at close")
        #expect(p.connected.isEmpty, "nothing went upstream")
    }

    @Test("a connection gone mid-handshake (no event before the close) still writes the CONNECT's line")
    func handshakeCutByClose() {
        var p = Playbook(Configs.intercept)
        p.start([.arm(.clientHead)])
        p.on(p.head("CONNECT a.example:443 HTTP/1.1"), [.cancelTimer, .writeExactly(established), .startClientTLS(a), .arm(.clientHead)])
        p.on(.connectionClosed, [.cancelTimer, .emit(.status(200), .failure(.proxy(.interceptionFailed(a, .closedDuringHandshake))))])
    }

    @Test("a drain during the handshake lets it finish, writes the line, and closes instead of waiting for a request")
    func handshakeThenDrain() {
        var p = Playbook(Configs.intercept)
        p.start([.arm(.clientHead)])
        p.on(p.head("CONNECT a.example:443 HTTP/1.1"), [.cancelTimer, .writeExactly(established), .startClientTLS(a), .arm(.clientHead)])
        p.on(.drain, [])
        p.on(.clientTLSEstablished, [.emit(.status(200), .failure(nil)), .cancelTimer, .close(.afterFlush)])
    }

    struct InsideRow: Sendable, CustomTestStringConvertible {
        let name: String
        let request: [String]
        /// nil: forwarded; otherwise the error code of the refusal.
        let refusal: String?
        var testDescription: String { name }
    }

    @Test(
        "Host rules inside an intercepted tunnel",
        arguments: [
            InsideRow(name: "Host naming the tunnel's host is forwarded", request: ["GET / HTTP/1.1", "Host: a.example"], refusal: nil),
            InsideRow(name: "Host with the explicit default port is forwarded", request: ["GET / HTTP/1.1", "Host: A.EXAMPLE:443"], refusal: nil),
            InsideRow(
                name: "absolute-form for the tunnel's origin is forwarded", request: ["GET https://a.example/ HTTP/1.1", "Host: whatever.example"],
                refusal: nil),
            InsideRow(name: "Host naming another host is refused", request: ["GET / HTTP/1.1", "Host: b.example"], refusal: "host_mismatch"),
            InsideRow(name: "Host naming another port is refused", request: ["GET / HTTP/1.1", "Host: a.example:8443"], refusal: "host_mismatch"),
            InsideRow(
                name: "absolute-form for another origin is refused", request: ["GET https://b.example/ HTTP/1.1", "Host: b.example"],
                refusal: "tunnel_origin_mismatch"),
            InsideRow(name: "a missing Host is refused", request: ["GET / HTTP/1.1"], refusal: "malformed_request"),
            InsideRow(
                name: "a CONNECT inside the tunnel is refused", request: ["CONNECT b.example:443 HTTP/1.1", "Host: b.example:443"],
                refusal: "malformed_request"),
        ])
    func insideTunnel(_ row: InsideRow) {
        var p = Playbook(Configs.intercept)
        p.start([.arm(.clientHead)])
        p.on(p.head("CONNECT a.example:443 HTTP/1.1"), [.cancelTimer, .writeExactly(established), .startClientTLS(a), .arm(.clientHead)])
        p.on(.clientTLSEstablished, [.emit(.tunnel(.intercept)), .arm(.clientHead)])
        let event = ConnectionEvent.requestHead(requestHead(row.request), headBytes: 40, Arrival(now: p.now, scope: p.fixture.scope))
        if let refusal = row.refusal {
            p.on(
                event,
                [.cancelTimer, .write(startingWith: "HTTP/1.1 400 Bad Request\r\n", containing: [refusal]), .emit(.status(400)), .close(.afterFlush)])
        } else {
            p.on(event, [.cancelTimer, .arm(.connect), .connect(hop(1), a, .tls, reusePooled: true)])
        }
    }

    @Test("proxy authentication is asked of the CONNECT, and inherited by every request inside")
    func proxyAuthInherited() {
        var p = Playbook(Configs.proxyAuth)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("CONNECT a.example:443 HTTP/1.1", "Proxy-Authorization: Bearer let-me-in"),
            [.cancelTimer, .writeExactly(established), .startClientTLS(a), .arm(.clientHead)])
        p.on(.clientTLSEstablished, [.emit(.tunnel(.intercept)), .arm(.clientHead)])
        p.on(p.head("GET / HTTP/1.1", "Host: a.example"), [.cancelTimer, .arm(.connect), .connect(hop(1), a, .tls, reusePooled: true)])
        p.on(.upstreamConnected(hop(1), reused: true), [.send(hop(1), startingWith: "GET / HTTP/1.1\r\n"), .arm(.responseHead)])
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 0")),
            [.write(startingWith: "HTTP/1.1 200 OK\r\n"), .relay(hop(1), .contentLength(0), .contentLength(0)), .arm(.stall)])
        p.on(
            .responseBody(hop(1), .complete(payload: 0, consumed: 0, captured: nil, observed: nil)),
            [.cancelTimer, .release(hop(1), reuse: true), .emit(.status(200)), .arm(.idle), .readNextRequest])
        // A client that sends it again inside anyway: it never goes upstream.
        p.on(
            p.head("GET /2 HTTP/1.1", "Host: a.example", "Proxy-Authorization: Bearer let-me-in"),
            [.cancelTimer, .arm(.connect), .connect(hop(2), a, .tls, reusePooled: true)])
        p.on(
            .upstreamConnected(hop(2), reused: true),
            [.send(hop(2), startingWith: "GET /2 HTTP/1.1\r\n", excluding: ["let-me-in", "Proxy-Authorization"]), .arm(.responseHead)])
    }

    @Test("a CONNECT without proxy authentication gets 407 and no tunnel")
    func proxyAuthMissing() {
        var p = Playbook(Configs.proxyAuth)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("CONNECT a.example:443 HTTP/1.1", "Proxy-Authorization: Bearer wrong"),
            [
                .cancelTimer,
                .write(
                    startingWith: "HTTP/1.1 407 Proxy Authentication Required\r\n", containing: ["Proxy-Authenticate: Basic", "Connection: close"]),
                .emit(
                    .status(407),
                    .failure(.proxy(.proxyAuthenticationRequired(.init(reason: .proxyAuthorizationNotRecognised, schemes: [.basic, .bearer]))))),
                .close(.afterFlush),
            ])
        #expect(p.machine.mode == .forwardProxy)
    }
}
