import HTTP1Codec
import ScopePolicy
import Testing

@testable import ProxyCore

/// Where a WebSocket's frames are read, decided in the core (docs/security-model.md): for an
/// origin a scope covers, and for every origin while the guard is on; elsewhere the bytes are
/// spliced unread. Where frames are read, no extension is offered to the origin.
@Suite("Machine: WebSocket upgrades, frames read or spliced")
struct WebSocketMachineTests {
    static let guardOff = Fixture(Configs.scopes + "guard: off\n")

    static let offer = "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits"

    /// The upgrade request to `target` up to its 101; returns the playbook for the tunnel.
    static func upgraded(
        _ fixture: Fixture, _ target: String, host: String, _ origin: Origin, _ transport: UpstreamTransport,
        offerSent: Bool, afterSwitch: Expect
    ) -> Playbook {
        var p = Playbook(fixture)
        p.start([.arm(.clientHead)])
        p.on(
            p.head(
                "GET \(target) HTTP/1.1", "Host: \(host)", "Connection: Upgrade", "Upgrade: websocket",
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13", offer),
            [.cancelTimer, .arm(.connect), .connect(hop(1), origin, transport, reusePooled: true)])
        p.on(
            .upstreamConnected(hop(1), reused: false),
            [
                offerSent
                    ? .send(hop(1), startingWith: "GET /ws HTTP/1.1\r\n", containing: [offer, "Upgrade: websocket"])
                    : .send(
                        hop(1), startingWith: "GET /ws HTTP/1.1\r\n", containing: ["Upgrade: websocket"], excluding: ["Sec-WebSocket-Extensions"]),
                .arm(.responseHead),
            ])
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 101 Switching Protocols", "Connection: Upgrade", "Upgrade: websocket")),
            [.write(startingWith: "HTTP/1.1 101 Switching Protocols\r\n"), afterSwitch, .arm(.stall)])
        return p
    }

    @Test("guard on (the default), an origin no scope covers: the offer is removed, frames are read under the guard, the line says websocket")
    func guardOnUnscoped() {
        var p = Self.upgraded(
            Configs.pass, "http://plain.example/ws", host: "plain.example", plain, .plain, offerSent: false,
            afterSwitch: .relayFrames(hop(1), guards: ["a_token", "b_token", "m_token", "proxy_password"], scrubs: nil))
        p.on(.connectionClosed, [.cancelTimer, .release(hop(1), reuse: false), .emit(.status(101), .failure(nil))])
        #expect(p.emitted.last?.proto == .websocket)
    }

    @Test("guard off, an origin no scope covers: the offer passes and the bytes are spliced unread")
    func guardOffUnscopedSpliced() {
        var p = Self.upgraded(
            Self.guardOff, "http://plain.example/ws", host: "plain.example", plain, .plain, offerSent: true, afterSwitch: .splice(hop(1)))
        p.on(.connectionClosed, [.cancelTimer, .release(hop(1), reuse: false), .emit(.status(101))])
        #expect(p.emitted.last?.proto == .websocket)
    }

    @Test("guard off, a scoped origin: frames are still read (the scrub masks what the scope sends), the offer removed")
    func guardOffScopedRead() {
        _ = Self.upgraded(
            Self.guardOff, "https://a.example/ws", host: "a.example", a, .tls, offerSent: false,
            afterSwitch: .relayFrames(hop(1), guards: nil, scrubs: ["a_token"]))
    }

    @Test("origin frames the scrub masked: the upgrade's line names each form (names only)")
    func scrubbedNamed() {
        var p = Self.upgraded(
            Self.guardOff, "https://a.example/ws", host: "a.example", a, .tls, offerSent: false,
            afterSwitch: .relayFrames(hop(1), guards: nil, scrubs: ["a_token"]))
        let finding = SecretFinding(secret: "a_token", encoding: .raw, isPlaceholder: false)
        p.on(.webSocketScrubbed(hop(1), [finding]), [])
        p.ignores(.webSocketScrubbed(hop(2), [finding]), as: .staleHop)
        p.on(.connectionClosed, [.cancelTimer, .release(hop(1), reuse: false), .emit(.status(101))])
        #expect(p.emitted.last?.scrubbed == [finding])
    }

    @Test("where frames are read, a 101 that chose an extension anyway is a 502: frames the proxy cannot read never flow")
    func extensionNotOfferedRefused() {
        var p = Playbook(Configs.pass)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("GET http://plain.example/ws HTTP/1.1", "Host: plain.example", "Connection: Upgrade", "Upgrade: websocket", Self.offer),
            [.cancelTimer, .arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        p.on(.upstreamConnected(hop(1), reused: false), [.send(hop(1), startingWith: "GET /ws HTTP/1.1\r\n"), .arm(.responseHead)])
        p.on(
            .responseHead(
                hop(1),
                response(
                    "HTTP/1.1 101 Switching Protocols", "Connection: Upgrade", "Upgrade: websocket",
                    "Sec-WebSocket-Extensions: permessage-deflate")),
            [
                .release(hop(1), reuse: false), .cancelTimer,
                .write(startingWith: "HTTP/1.1 502 Bad Gateway\r\n", containing: ["WebSocket extension that was not offered"]),
                .emit(.status(502)), .arm(.idle), .readNextRequest,
            ])
    }

    @Test("the frame relay stopped on a value: the line says secret_egress_blocked (names only), the hop goes, the client closes")
    func stoppedOnValue() {
        var p = Self.upgraded(
            Configs.pass, "http://plain.example/ws", host: "plain.example", plain, .plain, offerSent: false,
            afterSwitch: .relayFrames(hop(1), guards: nil, scrubs: nil))
        let finding = SecretFinding(secret: "a_token", encoding: .raw, isPlaceholder: false)
        p.on(.tunnelBytes(hop(1), fromClient: 40, fromUpstream: 10), [.arm(.stall)])
        p.on(
            .webSocketStopped(hop(1), .secret(finding), sender: .client),
            [
                .release(hop(1), reuse: false),
                .emit(.status(101), .failure(.proxy(.secretEgressBlocked(finding, where: "websocket", plain)))),
                .cancelTimer, .close(.afterFlush),
            ])
        p.ignores(.webSocketStopped(hop(1), .secret(finding), sender: .client))
        #expect(p.emitted.count == 1)
        #expect(p.emitted.last?.guardFinding == finding, "the line's guard field names the secret")
    }

    @Test("frames that are not RFC 6455: from the client a malformed request, from the origin a bad upstream response")
    func stoppedOnProtocolError() {
        for (sender, failure) in [
            (WebSocketSender.client, ProxyError.malformedRequest("WebSocket: unmasked client frame")),
            (.server, .badUpstreamResponse(plain, "WebSocket: unmasked client frame")),
        ] {
            var p = Self.upgraded(
                Configs.pass, "http://plain.example/ws", host: "plain.example", plain, .plain, offerSent: false,
                afterSwitch: .relayFrames(hop(1), guards: nil, scrubs: nil))
            p.on(
                .webSocketStopped(hop(1), .protocolError(.maskMissing), sender: sender),
                [.release(hop(1), reuse: false), .emit(.failure(.proxy(failure))), .cancelTimer, .close(.afterFlush)])
        }
    }
}
