import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

/// Random walks of events for one stream, plausible and not, checked against the stream machine's
/// invariants (those of `ConnectionMachine`, rendered for HTTP/2).
@Suite("HTTP/2: stream invariants over seeded random event sequences")
struct StreamInvariantTests {
    static let blocks: [(fields: [H2HeaderField], endStream: Bool)] = [
        (block("GET", "http://plain.example/"), true),
        (block("GET", "https://a.example/v1", "authorization: Bearer CLIENT-AUTH-CANARY"), true),
        (block("POST", "https://a.example/form", "content-length: 5", "content-type: application/x-www-form-urlencoded"), false),
        (block("PUT", "http://plain.example/f"), false),
        (block("GET", "https://b.example/", "authorization: Bearer CLIENT-AUTH-CANARY"), true),
        (block("GET", "https://broken.example/"), true),
        (block("GET", "https://unscoped.example/", "x-leak: A-INJECTED-7c1e"), true),
        (block("CONNECT", "https://a.example/"), false),
        (block("GET", "http://plain.example/", "Upper: 1"), true),
        (block("GET", "http://plain.example/", "connection: close"), true),
        // RFC 8441 WebSockets: scoped, unscoped, with a client credential, and another protocol (501).
        (ExtendedConnectTests.connect("https://a.example/ws", "authorization: Bearer CLIENT-AUTH-CANARY"), false),
        (ExtendedConnectTests.connect("http://plain.example/ws"), false),
        (ExtendedConnectTests.connect("https://a.example/ws", protocol: "foo"), false),
    ]

    /// The origin's answers a walk draws from: the HTTP/1.1 machine's, and a 101 that completes the
    /// proxy's WebSocket handshake (the other 101 there does not).
    static let responses = InvariantTests.responses + [ExtendedConnectTests.switched()]

    /// What a walk saw of one stream, and what it found wrong.
    struct Observer {
        /// The origin the client's block named: the only one its Authorization may reach.
        let addressed: Origin?
        var issues: [String] = []
        var connected: [HopID] = []
        var origins: [HopID: Origin] = [:]
        var released: Set<HopID> = []
        var upstreamConnected: Set<HopID> = []
        var pumping: Set<HopID> = []
        var relaying: Set<HopID> = []
        var finals = 0
        var emits = 0
        /// END_STREAM or RST_STREAM went out (or the HEADERS carried END_STREAM).
        var ended = false
        var relayed = false
        /// The hop whose frames are relayed (an RFC 8441 WebSocket after its 200).
        var webSocket: HopID?

        mutating func observe(_ action: StreamAction) {
            switch action {
            case .respond(let status, _, let body):
                if ended { issues.append("HEADERS \(status) after the stream ended") }
                finals += 1
                if finals > 1 { issues.append("a second final response") }
                switch body {
                case .none, .bytes: ended = true
                case .relayed: relayed = true
                }
            case .interim:
                if ended || finals > 0 { issues.append("an interim response after the final one") }
            case .endStream:
                if ended { issues.append("END_STREAM twice") }
                if !relayed { issues.append("END_STREAM without a relayed body") }
                ended = true
            case .reset:
                if ended { issues.append("RST_STREAM after the stream ended") }
                ended = true
            case .exchange(let action):
                observe(action)
            case .relayWebSocket(let id, _):
                if webSocket != nil { issues.append("frames relayed twice") }
                if ended || !relayed { issues.append("frames relayed without an open 200 before them") }
                if released.contains(id) || !connected.contains(id) { issues.append("frames relayed from \(id), not a live hop") }
                webSocket = id
            }
        }

        private mutating func observe(_ action: ConnectionAction) {
            switch action {
            case .writeToClient, .closeClient, .readNextRequest, .startClientTLS, .splice, .finishTunnel:
                issues.append("\(describe(action)) is not a stream's to ask")
            case .connect(let id, let target, _, _, _):
                if connected.contains(id) { issues.append("\(id) connected twice") }
                connected.append(id)
                origins[id] = target
            case .releaseUpstream(let id, _):
                if !connected.contains(id) { issues.append("\(id) released but never connected") }
                if !released.insert(id).inserted { issues.append("\(id) released twice") }
            case .sendToUpstream(let id, let bytes):
                if text(bytes).contains("CLIENT-AUTH-CANARY"), origins[id] != addressed {
                    issues.append("the client's Authorization went to \(origins[id].map(String.init(describing:)) ?? "?")")
                }
                checkLive(action, id)
            case .pumpRequestBody(let id, _, _, _, _):
                pumping.insert(id)
                checkLive(action, id)
            case .relayResponseBody(let id, _, let outbound, _, _):
                relaying.insert(id)
                if outbound != .untilClose, outbound != .none { issues.append("relay re-framed as \(outbound): HTTP/2 takes raw payload") }
                checkLive(action, id)
            case .emit:
                emits += 1
            default:
                break
            }
        }

        private mutating func checkLive(_ action: ConnectionAction, _ id: HopID) {
            if released.contains(id) { issues.append("\(describe(action)) to released \(id)") }
        }
    }

    static func event(_ rng: inout SeededRandom, _ machine: StreamMachine, _ seen: Observer, scope: ScopeContext) -> ConnectionEvent {
        if Int.random(in: 0..<100, using: &rng) < 15 {
            return InvariantTests.randomEvent(&rng, hops: UInt32(seen.connected.count), scope: scope)
        }
        func pick(_ events: [ConnectionEvent]) -> ConnectionEvent { events.randomElement(using: &rng)! }
        if let secret = machine.awaitedToken {
            let token = AccessToken(value: SecretValue("T"), generation: 1, validUntil: 0)
            return pick([.tokenReady(secret: secret, token), .tokenFailed(secret: secret, provider: nil, reason: .refused), .clientFailed])
        }
        if machine.isCollecting {
            return pick([
                .collectedBody(.progressed), .collectedBody(.complete(Array("a=1".utf8))), .collectedBody(.tooLarge),
                .collectedBody(.invalid), .timerFired(.stall), .clientInputClosed(bufferedBytes: 0),
            ])
        }
        if machine.isWebSocket, let id = seen.webSocket {
            let finding = SecretFinding(secret: "a_token", encoding: .raw, isPlaceholder: false)
            return pick([
                .tunnelBytes(id, fromClient: 3, fromUpstream: 4), .tunnelBytes(id, fromClient: 0, fromUpstream: 0),
                .webSocketScrubbed(id, [finding]), .webSocketStopped(id, .secret(finding), sender: .client),
                .webSocketStopped(id, .protocolError(.maskMissing), sender: .server), .upstreamClosed(id, sawResponseBytes: true),
                .clientInputClosed(bufferedBytes: 0), .clientFailed, .timerFired(.stall), .drain,
            ])
        }
        guard let id = machine.currentHop else { return pick([.connectionClosed, .clientFailed, .drain]) }
        if !seen.upstreamConnected.contains(id) {
            return pick([
                .upstreamConnected(id, reused: true), .upstreamConnected(id, reused: false), .upstreamConnectFailed(id, .upstreamRefused(plain)),
                .timerFired(.connect),
            ])
        }
        if seen.relaying.contains(id) {
            return pick([
                .responseBody(id, .moved(payload: 2, consumed: 2)),
                .responseBody(id, .complete(payload: 1, consumed: 1, captured: nil, observed: nil)),
                .responseBody(id, .cut), .upstreamClosed(id, sawResponseBytes: true), .timerFired(.stall), .clientFailed,
            ])
        }
        var events: [ConnectionEvent] = [
            .responseHead(id, Self.responses.randomElement(using: &rng)!),
            .responseHead(id, Self.responses.randomElement(using: &rng)!),
            .responseHeadInvalid(id, reason: "bad"), .upstreamClosed(id, sawResponseBytes: false), .timerFired(.responseHead),
        ]
        // An RFC 8441 stream's origin mostly completes the handshake, so walks reach its frames.
        if machine.request?.isWebSocket == true { events += Array(repeating: .responseHead(id, ExtendedConnectTests.switched()), count: 4) }
        if seen.pumping.contains(id) {
            events += [
                .requestBody(id, .moved(payload: 2, consumed: 2)), .requestBody(id, .complete(payload: 3, consumed: 3, captured: nil, observed: nil)),
                .requestBody(id, .blocked(SecretFinding(secret: "a_token", encoding: .raw, isPlaceholder: false), bytesSent: true)),
                .clientInputClosed(bufferedBytes: 0), .clientFailed,
            ]
        }
        return pick(events)
    }

    /// One final response per stream, END_STREAM only after a relayed body and nothing after the
    /// stream ended, nothing to a released hop, every connected hop released once and at least one
    /// line (at most one per hop, and one more) by the time the stream is gone, the client's Authorization only to the origin it
    /// addressed, and never an action that is the connection's.
    @Test("1600 seeded walks of 40 events keep the stream's invariants", arguments: Array(0..<8))
    func randomWalks(_ batch: Int) {
        var webSockets = 0
        defer { #expect(webSockets > 0, "no walk of the batch opened an RFC 8441 WebSocket: its state goes unwalked") }
        for walk in 0..<200 {
            let seed = UInt64(batch * 1000 + walk)
            var rng = SeededRandom(state: seed)
            let fixture = InvariantTests.fixtures[Int(seed % UInt64(InvariantTests.fixtures.count))]
            let intercepted = fixture.scope.interceptHosts.contains("a.example") && seed % 2 == 0
            var s = StreamBook(fixture, mode: intercepted ? .intercepted(a, client: .unnamed) : .forwardProxy)
            let opening = Self.blocks[Int.random(in: 0..<Self.blocks.count, using: &rng)]
            let authority = opening.fields.first { $0.name == ":authority" }?.value ?? ""
            var seen = Observer(addressed: try? Origin.parse("https://" + authority))
            var trace: [String] = []
            for action in s.feedStart(opening.fields, endStream: opening.endStream) {
                trace.append("  -> \(describe(action))")
                seen.observe(action)
            }
            for _ in 0..<40 {
                let event = Self.event(&rng, s.machine, seen, scope: fixture.scope)
                if case .upstreamConnected(let id, _, _) = event, s.machine.currentHop == id { seen.upstreamConnected.insert(id) }
                trace.append(String("\(event)".prefix(140)))
                let current = s.machine.currentHop
                let actions = s.feed(event)
                if let named = InvariantTests.hopNamed(by: event), named != current, !actions.isEmpty {
                    seen.issues.append("an event of \(named) acted while the current hop is \(current.map(String.init(describing:)) ?? "none")")
                }
                for action in actions {
                    trace.append("  -> \(describe(action))")
                    seen.observe(action)
                }
            }
            // The stream goes away (closed, or its connection): whatever was left is let go of.
            for action in s.feed(.connectionClosed) { seen.observe(action) }
            if seen.webSocket != nil { webSockets += 1 }
            let unreleased = seen.connected.filter { !seen.released.contains($0) }
            if !unreleased.isEmpty { seen.issues.append("\(unreleased) never released") }
            // One line per hop (a followed redirect writes the hop it left; a follow refused before
            // it connects, its own), at least one in all.
            if seen.emits < 1 || seen.emits > seen.connected.count + 1 { seen.issues.append("\(seen.emits) lines for \(seen.connected.count) hops") }
            if !s.machine.isFinished { seen.issues.append("not finished after connectionClosed") }
            if !seen.issues.isEmpty {
                Issue.record("seed \(seed): \(seen.issues.joined(separator: "; "))\n\(trace.suffix(60).joined(separator: "\n"))")
                return
            }
        }
    }
}
