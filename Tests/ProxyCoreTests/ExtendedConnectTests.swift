import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

/// WebSocket over HTTP/2 (RFC 8441): an extended CONNECT is mapped to the HTTP/1.1 upgrade request
/// (so admission, scope, guard and placeholders read it unchanged), the origin's 101 is checked
/// against the proxy's key and becomes `:status 200`, and the stream then relays frames under the
/// plan an HTTP/1.1 upgrade to the same origin gets, until a side ends.
@Suite("HTTP/2: WebSocket over extended CONNECT (RFC 8441)")
struct ExtendedConnectTests {
    static let offer = "sec-websocket-extensions: permessage-deflate; client_max_window_bits"

    /// The extended CONNECT of RFC 8441 §5's example, to `url`, with `fields` after the pseudo-headers.
    static func connect(_ url: String, protocol name: String = "websocket", _ fields: String...) -> [H2HeaderField] {
        var block = block("CONNECT", url, fields: fields)
        block.insert(H2HeaderField(name: ":protocol", value: name), at: 1)
        return block
    }

    static func switched(_ fields: String...) -> ResponseHead {
        responseHead(
            ["HTTP/1.1 101 Switching Protocols", "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Accept: \(StreamBook.webSocketAccept)"]
                + fields)
    }

    /// An extended CONNECT to `url` up to its 200, on a stream whose frames are then relayed as `frames`.
    static func open(
        _ fixture: Fixture, _ url: String, _ origin: Origin, _ transport: UpstreamTransport, frames: Expect,
        sent: [String] = [], notSent: [String] = [], mode: ConnectionMode = .forwardProxy, proto: ExchangeRecord.ClientProtocol = .h2c
    ) -> StreamBook {
        var s = StreamBook(fixture, mode: mode, proto: proto)
        s.start(
            connect(url, "sec-websocket-version: 13", "sec-websocket-protocol: chat", offer), endStream: false,
            [.arm(.connect), .connect(hop(1), origin, transport, reusePooled: true)])
        #expect(s.machine.currentHopIsUpgrade, "the leg must speak HTTP/1.1: an upgrade cannot ride HTTP/2")
        s.on(
            .upstreamConnected(hop(1), reused: false),
            [
                .send(
                    hop(1), startingWith: "GET /ws HTTP/1.1\r\n",
                    containing: [
                        "Connection: upgrade\r\n", "Upgrade: websocket\r\n", "sec-websocket-version: 13\r\n",
                        "sec-websocket-key: \(StreamBook.webSocketKey)\r\n", "sec-websocket-protocol: chat\r\n",
                    ] + sent,
                    excluding: ["sec-websocket-extensions", "CONNECT"] + notSent),
                .arm(.responseHead),
            ])
        s.on(
            .responseHead(hop(1), switched("Sec-WebSocket-Protocol: chat")),
            [
                .respond(
                    200, .relayed, has: ["sec-websocket-protocol": "chat", "x-request-id": StreamMachineTests.firstID],
                    lacks: ["sec-websocket-accept", "upgrade", "connection"]),
                .frames(frames), .arm(.stall),
            ])
        #expect(s.machine.isWebSocket && !s.machine.isFinished)
        return s
    }

    @Test("h2c, guard on, an origin no scope covers: GET with Upgrade and the proxy's key upstream, 200 on the stream, frames read under the guard")
    func openedUnderTheGuard() {
        var s = Self.open(
            Configs.pass, "http://plain.example/ws", plain, .plain,
            frames: .relayFrames(hop(1), guards: ["a_token", "b_token", "m_token", "proxy_password"], scrubs: nil))
        s.on(.tunnelBytes(hop(1), fromClient: 40, fromUpstream: 10), [.arm(.stall)])
        s.ignores(.tunnelBytes(hop(2), fromClient: 1, fromUpstream: 1), as: .staleHop)
        s.on(
            .upstreamClosed(hop(1), sawResponseBytes: true),
            [.cancelTimer, .release(hop(1), reuse: false), .emit(.status(200), .failure(nil), .field(.proto, .text("websocket"))), .endStream])
        #expect(s.emitted.last?.bytesIn ?? 0 >= 40)
        let logged = s.emitted.last?.requestFields ?? HTTPFields()
        #expect(
            !logged.contains("sec-websocket-key") && !logged.contains("upgrade") && !logged.contains("connection")
                && logged.contains("sec-websocket-protocol"),
            "the line shows the fields the client sent, not the proxy's")
        s.ignores(.upstreamClosed(hop(1), sawResponseBytes: true), as: .afterClose)
        #expect(s.emitted.count == 1 && s.released == [hop(1)])
    }

    @Test("a scoped origin: its credential is injected into the upgrade request, the client's stripped; origin frames scrubbed")
    func scopedOrigin() {
        var s = StreamBook(Configs.pass)
        s.start(
            Self.connect("https://a.example/ws", StreamMachineTests.clientAuth), endStream: false,
            [.arm(.connect), .connect(hop(1), a, .tls, reusePooled: true)])
        s.on(
            .upstreamConnected(hop(1), reused: false),
            [.send(hop(1), startingWith: "GET /ws HTTP/1.1\r\n", containing: [aToken, "Upgrade: websocket"]), .arm(.responseHead)])
        s.on(
            .responseHead(hop(1), Self.switched()),
            [.respond(200, .relayed), .frames(.relayFrames(hop(1), guards: nil, scrubs: ["a_token"])), .arm(.stall)])
        let finding = SecretFinding(secret: "a_token", encoding: .raw, isPlaceholder: false)
        s.on(.webSocketScrubbed(hop(1), [finding]), [])
        s.on(.clientInputClosed(bufferedBytes: 0), [.cancelTimer, .release(hop(1), reuse: false), .emit(.status(200), .scopes(["a"])), .endStream])
        #expect(s.emitted.last?.scrubbed == [finding])
    }

    @Test("the guard stops a client frame: the line names the rule, the hop is let go, the stream ends with END_STREAM (after the close frame)")
    func guardStop() {
        var s = Self.open(Configs.pass, "http://plain.example/ws", plain, .plain, frames: .relayFrames(hop(1), guards: nil, scrubs: nil))
        let finding = SecretFinding(secret: "a_token", encoding: .raw, isPlaceholder: false)
        s.on(
            .webSocketStopped(hop(1), .secret(finding), sender: .client),
            [
                .cancelTimer, .release(hop(1), reuse: false),
                .emit(.status(200), .failure(.proxy(.secretEgressBlocked(finding, where: "websocket", plain)))), .endStream,
            ])
        #expect(s.emitted.last?.guardFinding == finding)
        s.ignores(.webSocketStopped(hop(1), .secret(finding), sender: .client), as: .afterClose)
    }

    @Test("the client resets the stream: the origin's connection goes, the line is written, nothing is sent on the stream")
    func clientReset() {
        var s = Self.open(Configs.pass, "http://plain.example/ws", plain, .plain, frames: .relayFrames(hop(1), guards: nil, scrubs: nil))
        s.on(.clientFailed, [.cancelTimer, .release(hop(1), reuse: false), .emit(.status(200))])
        #expect(s.machine.isFinished)
    }

    @Test("nothing moves for the stall time: the WebSocket ends as an HTTP/1.1 one does")
    func stall() {
        var s = Self.open(Configs.pass, "http://plain.example/ws", plain, .plain, frames: .relayFrames(hop(1), guards: nil, scrubs: nil))
        s.ignores(.timerFired(.responseHead), as: .timerOfAnotherPurpose)
        s.on(.timerFired(.stall), [.release(hop(1), reuse: false), .emit(.status(200)), .endStream])
    }

    @Test("guard off, an origin no scope covers: the offer passes, frames move unread")
    func unreadWhereNoRuleReads() {
        var s = StreamBook(WebSocketMachineTests.guardOff)
        s.start(
            Self.connect("http://plain.example/ws", Self.offer), endStream: false,
            [.arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        s.on(
            .upstreamConnected(hop(1), reused: false),
            [.send(hop(1), startingWith: "GET /ws HTTP/1.1\r\n", containing: ["sec-websocket-extensions: permessage-deflate"]), .arm(.responseHead)])
        s.on(.responseHead(hop(1), Self.switched()), [.respond(200, .relayed), .frames(.splice(hop(1))), .arm(.stall)])
    }

    /// What the origin answers the upgrade with, and what the stream gets instead of a WebSocket.
    static let refusals: [(String, ResponseHead, Int, String)] = [
        (
            "a 101 whose accept answers another key",
            response("HTTP/1.1 101 Switching Protocols", "Upgrade: websocket", "Sec-WebSocket-Accept: AAAA"), 502, "bad_upstream_response"
        ),
        ("a 101 without an accept", response("HTTP/1.1 101 Switching Protocols", "Upgrade: websocket"), 502, "bad_upstream_response"),
        ("a 101 with two accepts", switched("Sec-WebSocket-Accept: \(StreamBook.webSocketAccept)"), 502, "bad_upstream_response"),
        (
            "a 200 instead of a 101 (the client would read its body as frames)", response("HTTP/1.1 200 OK", "Content-Length: 2"), 502,
            "bad_upstream_response"
        ),
        ("a 204 instead of a 101", response("HTTP/1.1 204 No Content"), 502, "bad_upstream_response"),
    ]

    @Test("an origin that does not complete the handshake: 502 on the stream, no frame relayed", arguments: refusals.indices)
    func handshakeRefused(_ index: Int) {
        let (_, head, status, code) = Self.refusals[index]
        var s = StreamBook(Configs.pass)
        s.start(Self.connect("http://plain.example/ws"), endStream: false, [.arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        _ = s.feed(.upstreamConnected(hop(1), reused: false))
        s.on(.responseHead(hop(1), head), [.release(hop(1), reuse: false), .cancelTimer, .respond(status, .error(code)), .emit(.status(status))])
        #expect(!s.actions.contains { if case .relayWebSocket = $0 { true } else { false } })
    }

    @Test("any other status is relayed as the answer to the CONNECT stream")
    func otherStatusRelayed() {
        var s = StreamBook(Configs.pass)
        s.start(Self.connect("http://plain.example/ws"), endStream: false, [.arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        _ = s.feed(.upstreamConnected(hop(1), reused: false))
        s.on(
            .responseHead(hop(1), response("HTTP/1.1 403 Forbidden", "Content-Length: 2")),
            [.respond(403, .relayed), .relay(hop(1), .contentLength(2), .untilClose), .arm(.stall)])
    }

    @Test("inside an intercepted tunnel, an extended CONNECT for another origin is 421 and reaches no origin; the tunnel's own goes")
    func misdirected() {
        let mode = ConnectionMode.intercepted(a, client: .unnamed)
        var s = StreamBook(Configs.intercept, mode: mode, proto: .h2)
        s.start(
            Self.connect("https://b.example/ws"), endStream: false,
            [.respond(421, .error("misdirected_request")), .emit(.status(421), .failure(.proxy(.misdirectedRequest(tunnel: a))))])
        #expect(s.connected.isEmpty)
        var own = StreamBook(Configs.intercept, mode: mode, proto: .h2)
        own.start(Self.connect("https://a.example/ws"), endStream: false, [.arm(.connect), .connect(hop(1), a, .tls, reusePooled: true)])
    }

    @Test("a :protocol other than websocket, and a plain CONNECT: 501 with a hint, nothing connected")
    func otherProtocols() {
        for fields in [
            Self.connect("https://a.example/x", protocol: "foo"),
            [H2HeaderField(name: ":method", value: "CONNECT"), H2HeaderField(name: ":authority", value: "a.example:443")],
        ] {
            var s = StreamBook(Configs.pass)
            s.start(fields, endStream: false, [.respond(501, .error("connect_over_http2_unsupported")), .emit(.status(501))])
            #expect(s.connected.isEmpty)
        }
    }
}
