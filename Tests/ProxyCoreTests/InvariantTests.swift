import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

/// SplitMix64: a fixed sequence per seed, so a failing walk can be replayed.
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Random walks of events, plausible and not, checked against the machine's documented invariants.
@Suite("Machine: invariants over seeded random event sequences")
struct InvariantTests {
    /// Follow mode where scope a's credential is an OAuth2 token: requests to a.example wait for it.
    static let tokens = Fixture(
        Configs.scopes.replacing(
            "a_token: { env: A_TOKEN }",
            with: #"a_token: { oauth2: { token_url: "https://auth.example/t", grant: client_credentials, client_id: me, client_secret: b_token } }"#)
            + Configs.redirects("follow"), tokens: NamesOnlyTokenSource(["a_token"], endpoint: "https://auth.example"))
    static let fixtures = [Configs.follow, Configs.block, Configs.pass, Configs.tunnelAllowed, Configs.intercept, Configs.followOneHop, tokens]

    static let requests: [[String]] = [
        get,
        ["GET https://a.example/v1 HTTP/1.1", "Host: a.example", clientAuthorization],
        ["POST https://a.example/form HTTP/1.1", "Host: a.example", "Content-Length: 5"],
        ["PUT http://plain.example/f HTTP/1.1", "Host: plain.example", "Transfer-Encoding: chunked"],
        ["GET http://plain.example/ HTTP/1.0"],
        ["GET http://plain.example/ HTTP/1.1", "Host: plain.example", "Connection: close"],
        ["GET http://plain.example/ws HTTP/1.1", "Host: plain.example", "Connection: Upgrade", "Upgrade: websocket"],
        ["CONNECT unscoped.example:443 HTTP/1.1"],
        ["CONNECT a.example:443 HTTP/1.1"],
        ["GET / HTTP/1.1", "Host: a.example"],
        ["GET https://broken.example/ HTTP/1.1", "Host: broken.example"],
    ]

    static let responses: [ResponseHead] = [
        response("HTTP/1.1 200 OK", "Content-Length: 5"),
        response("HTTP/1.1 200 OK", "Transfer-Encoding: chunked"),
        response("HTTP/1.1 200 OK"),
        response("HTTP/1.1 204 No Content"),
        response("HTTP/1.1 100 Continue"),
        response("HTTP/1.1 101 Switching Protocols", "Connection: Upgrade", "Upgrade: websocket"),
        response("HTTP/1.1 302 Found", "Location: https://b.example/x"),
        response("HTTP/1.1 307 Temporary Redirect", "Location: https://a.example/again"),
        response("HTTP/1.1 303 See Other", "Location: https://unscoped.example/"),
        response("HTTP/1.1 301 Moved Permanently", "Location: https://broken.example/"),
        response("HTTP/1.1 200 OK", "Content-Length: 1", "Transfer-Encoding: chunked"),
    ]

    static let progress: [BodyProgress] = [
        .moved(payload: 2, consumed: 2), .moved(payload: 0, consumed: 3),
        .complete(payload: 3, consumed: 3, captured: Array("hello".utf8), observed: nil),
        .complete(payload: 3, consumed: 3, captured: nil, observed: nil),
        .invalid, .cut,
        .scrubbed([SecretFinding(secret: "a_token", encoding: .raw, isPlaceholder: false)]),
        .blocked(SecretFinding(secret: "a_token", encoding: .raw, isPlaceholder: false), bytesSent: true),
    ]

    static func randomEvent(_ rng: inout SeededRandom, hops: UInt32, scope: ScopeContext) -> ConnectionEvent {
        // Mostly the newest hop, sometimes an older or a future one.
        let id = hop(UInt32.random(in: 0...3, using: &rng) == 0 ? UInt32.random(in: 0...(hops + 1), using: &rng) : hops)
        switch Int.random(in: 0..<20, using: &rng) {
        case 0: return .headStarted
        case 1, 2: return .requestHead(requestHead(requests.randomElement(using: &rng)!), headBytes: 50, Arrival(now: 1, scope: scope))
        case 3: return .requestHeadInvalid(.headTooLarge, Arrival(now: 1, scope: scope))
        case 4: return .clientInputClosed(bufferedBytes: Int.random(in: 0...1, using: &rng) * 10)
        case 5: return .upstreamConnected(id, reused: Bool.random(using: &rng))
        case 6: return .upstreamConnectFailed(id, .upstreamRefused(plain))
        case 7, 8: return .requestBody(id, progress.randomElement(using: &rng)!)
        case 9, 10, 11: return .responseHead(id, responses.randomElement(using: &rng)!)
        case 12: return .responseHeadInvalid(id, reason: "bad")
        case 13, 14: return .responseBody(id, progress.randomElement(using: &rng)!)
        case 15: return .upstreamClosed(id, sawResponseBytes: Bool.random(using: &rng))
        case 16: return .tunnelBytes(id, fromClient: 1, fromUpstream: 2)
        case 17: return .timerFired([TimerPurpose.clientHead, .idle, .connect, .responseHead, .stall].randomElement(using: &rng)!)
        case 18: return [ConnectionEvent.clientFailed, .drain, .drain, .clientTLSEstablished, .clientTLSFailed(.notTLS)].randomElement(using: &rng)!
        default: return Int.random(in: 0..<6, using: &rng) == 0 ? .connectionClosed : .headStarted
        }
    }

    /// The hop an upstream-side event is about.
    static func hopNamed(by event: ConnectionEvent) -> HopID? {
        switch event {
        case .upstreamConnected(let id, _, _), .upstreamConnectFailed(let id, _), .requestBody(let id, _), .responseHead(let id, _, _),
            .responseHeadInvalid(let id, _), .responseBody(let id, _), .upstreamClosed(let id, _), .tunnelBytes(let id, _, _),
            .webSocketStopped(let id, _, _), .webSocketScrubbed(let id, _):
            id
        default:
            nil
        }
    }

    /// An event the engine could deliver now, judged from the machine's public state and what the
    /// walk saw; 15% of the time any event at all (the machine must shrug those off too).
    static func plausibleEvent(_ rng: inout SeededRandom, _ machine: ConnectionMachine, _ seen: Observer, scope: ScopeContext) -> ConnectionEvent {
        if Int.random(in: 0..<100, using: &rng) < 15 { return randomEvent(&rng, hops: seen.newest, scope: scope) }
        if Int.random(in: 0..<100, using: &rng) < 2 { return .connectionClosed }
        func pick(_ events: [ConnectionEvent]) -> ConnectionEvent { events.randomElement(using: &rng)! }
        let head = ConnectionEvent.requestHead(requestHead(requests.randomElement(using: &rng)!), headBytes: 50, Arrival(now: 1, scope: scope))
        let someResponse = responses.randomElement(using: &rng)!
        switch machine.phase {
        case .handshaking:
            return pick([
                .clientTLSEstablished, .clientTLSEstablished, .clientTLSEstablished, .clientTLSFailed(.clientRejectedCertificate),
                .clientInputClosed(bufferedBytes: 0), .clientFailed, .timerFired(.clientHead), .drain,
            ])
        case .awaitingHead(let wait):
            // The engine hands a connection to HTTP/2 only before its first head.
            let http2: [ConnectionEvent] = wait == .fresh ? [.switchedToHTTP2] : []
            return pick(
                [
                    .headStarted, head, head, head, head, .timerFired(.idle), .timerFired(.clientHead), .clientInputClosed(bufferedBytes: 0), .drain,
                ] + http2)
        case .multiplexed:
            // The streams are the HTTP/2 connection's: only the connection's end reaches this machine.
            return pick([.connectionClosed, .drain, .clientInputClosed(bufferedBytes: 0), .clientFailed, .timerFired(.idle)])
        case .awaitingToken:
            let token = AccessToken(value: SecretValue("T"), generation: 1, validUntil: 0)
            let secret = machine.awaitedToken ?? "none"
            return pick([
                .tokenReady(secret: secret, token), .tokenReady(secret: "other", token),
                .tokenFailed(secret: secret, provider: nil, reason: .refused),
                .clientInputClosed(bufferedBytes: 0), .drain, .timerFired(.stall),
            ])
        case .collecting:
            return pick([
                .collectedBody(.progressed), .collectedBody(.complete(Array("a=1".utf8))), .collectedBody(.complete(Array("_method=DELETE".utf8))),
                .collectedBody(.tooLarge), .collectedBody(.invalid), .timerFired(.stall), .clientInputClosed(bufferedBytes: 0),
            ])
        case .tunnel:
            guard let id = machine.currentHop else { return .connectionClosed }
            return pick([
                .tunnelBytes(id, fromClient: 5, fromUpstream: 7), .tunnelBytes(id, fromClient: 0, fromUpstream: 3),
                .clientInputClosed(bufferedBytes: 0), .upstreamClosed(id, sawResponseBytes: true), .timerFired(.stall),
            ])
        case .exchange:
            guard let id = machine.currentHop else { return .connectionClosed }
            if !seen.upstreamConnected.contains(id) {
                return pick([
                    .upstreamConnected(id, reused: true), .upstreamConnected(id, reused: false), .upstreamConnected(id, reused: false),
                    .upstreamConnectFailed(id, .upstreamRefused(plain)), .timerFired(.connect),
                ])
            }
            if seen.relaying.contains(id) {
                return pick([
                    .responseBody(id, .moved(payload: 2, consumed: 2)),
                    .responseBody(id, .complete(payload: 1, consumed: 1, captured: nil, observed: nil)),
                    .responseBody(id, .complete(payload: 1, consumed: 1, captured: nil, observed: nil)), .responseBody(id, .cut),
                    .responseBody(id, .scrubbed([SecretFinding(secret: "a_token", encoding: .raw, isPlaceholder: false)])),
                    .upstreamClosed(id, sawResponseBytes: true), .timerFired(.stall), .clientFailed,
                ])
            }
            var events: [ConnectionEvent] = [
                .responseHead(id, someResponse), .responseHead(id, someResponse), .responseHead(id, someResponse),
                .responseHeadInvalid(id, reason: "bad"), .upstreamClosed(id, sawResponseBytes: false), .timerFired(.responseHead),
            ]
            if seen.pumping.contains(id) {
                events += [
                    .requestBody(id, .moved(payload: 2, consumed: 2)),
                    .requestBody(id, .complete(payload: 3, consumed: 3, captured: Array("hello".utf8), observed: nil)),
                    .requestBody(id, .complete(payload: 3, consumed: 3, captured: Array("hello".utf8), observed: nil)),
                    .requestBody(id, .blocked(SecretFinding(secret: "a_token", encoding: .raw, isPlaceholder: false), bytesSent: true)),
                    .clientInputClosed(bufferedBytes: 0), .timerFired(.stall),
                ]
            }
            return pick(events)
        case .closing, .closed:
            return pick([.clientInputClosed(bufferedBytes: 0), .clientFailed, .connectionClosed])
        }
    }

    /// What the walk has seen, and what it found wrong.
    struct Observer {
        var issues: [String] = []
        var connected: [HopID] = []
        var origins: [HopID: Origin] = [:]
        var released: Set<HopID> = []
        var newest: UInt32 = 0
        var upstreamConnected: Set<HopID> = []
        var pumping: Set<HopID> = []
        var relaying: Set<HopID> = []
        var clientClosing = false
        var closeNow = false
        var closed = false
        // Since the last request head the machine took: final responses written, lines, hops.
        var headTaken = false
        var finals = 0
        var emits = 0
        var hopsSinceHead = 0

        /// A head (or a refused or timed-out one) the machine takes starts a new request.
        mutating func headTaken(_ taken: Bool) {
            guard taken else { return }
            if headTaken, emits == 0 { issues.append("a request without a line") }
            (finals, emits, hopsSinceHead, headTaken) = (0, 0, 0, true)
        }

        mutating func connectionClosed() {
            let unreleased = connected.filter { !released.contains($0) }
            if !closed, !unreleased.isEmpty { issues.append("connectionClosed left \(unreleased) unreleased") }
            if !closed, headTaken, emits == 0 { issues.append("a request without a line") }
            closed = true
        }

        mutating func observe(_ action: ConnectionAction) {
            if closed { issues.append("\(describe(action)) after connectionClosed") }
            switch action {
            case .connect(let id, let target, _, _, _):
                if connected.contains(id) { issues.append("\(id) connected twice") }
                if id.value != newest + 1 { issues.append("\(id) is not a new hop id (newest \(newest))") }
                newest = max(newest, id.value)
                connected.append(id)
                origins[id] = target
                hopsSinceHead += 1
            case .releaseUpstream(let id, _):
                if !connected.contains(id) { issues.append("\(id) released but never connected") }
                if !released.insert(id).inserted { issues.append("\(id) released twice") }
            case .sendToUpstream(let id, let bytes):
                if text(bytes).contains("CLIENT-AUTH-CANARY"), origins[id] != a {
                    issues.append("the client's Authorization went to \(origins[id].map(String.init(describing:)) ?? "?")")
                }
                checkCurrent(action, id)
            case .pumpRequestBody(let id, _, _, _, _):
                pumping.insert(id)
                checkCurrent(action, id)
            case .relayResponseBody(let id, _, _, _, _):
                relaying.insert(id)
                checkCurrent(action, id)
            case .splice(let id), .relayWebSocket(let id, _):
                checkCurrent(action, id)
            case .emit:
                emits += 1
                if emits > hopsSinceHead + 1 { issues.append("\(emits) lines for \(hopsSinceHead) hops") }
            case .writeToClient(let bytes):
                if clientClosing { issues.append("write after closeClient") }
                let status = Int(text(Array(bytes.prefix(12))).dropFirst(9)) ?? 0
                if status >= 200 {
                    finals += 1
                    if finals > 1 { issues.append("a second final response for one request") }
                }
            case .closeClient(let how):
                clientClosing = true
                if how == .now { closeNow = true }
            default:
                break
            }
        }

        private mutating func checkCurrent(_ action: ConnectionAction, _ id: HopID) {
            if released.contains(id) { issues.append("\(describe(action)) to released \(id)") }
            if id.value != newest { issues.append("\(describe(action)) to \(id), not the newest hop") }
        }
    }

    /// Events of any hop but the current one do nothing; hops connected and released once, nothing to a released hop, one final response and at least
    /// one line per request, no write after a close, nothing after connectionClosed, the client's
    /// Authorization only to the origin it addressed.
    @Test("2000 seeded walks of 60 events keep the machine's invariants", arguments: Array(0..<16))
    func randomWalks(_ batch: Int) {
        for walk in 0..<125 {
            let seed = UInt64(batch * 1000 + walk)
            var rng = SeededRandom(state: seed)
            let fixture = Self.fixtures[Int(seed % UInt64(Self.fixtures.count))]
            var p = Playbook(fixture)
            var seen = Observer()
            var trace: [String] = []
            for action in p.start([.arm(.clientHead)]) { seen.observe(action) }
            for _ in 0..<60 {
                // As the engine does: after closeClient(.now) the transport is freed and the next event
                // is connectionClosed; while it flushes and lingers (.afterFlush) it reads nothing more.
                let event: ConnectionEvent
                if seen.closeNow && !seen.closed {
                    event = .connectionClosed
                } else if seen.clientClosing && !seen.closed {
                    event = [
                        ConnectionEvent.clientInputClosed(bufferedBytes: 0), .clientFailed, .drain, .timerFired(.stall),
                        .timerFired(.idle), .connectionClosed,
                    ].randomElement(using: &rng)!
                } else {
                    event = Self.plausibleEvent(&rng, p.machine, seen, scope: fixture.scope)
                }
                if case .upstreamConnected(let id, _, _) = event, p.machine.currentHop == id { seen.upstreamConnected.insert(id) }
                trace.append(String("\(event)".prefix(140)))
                switch event {
                case .requestHead, .requestHeadInvalid: seen.headTaken(p.machine.isAwaitingHead)
                case .timerFired(.clientHead):
                    // Only a head that started becomes a 408; a silent connection just closes.
                    if case .awaitingHead(.started) = p.machine.phase { seen.headTaken(true) }
                default: break
                }
                let current = p.machine.currentHop
                let actions = p.feed(event)
                if let named = Self.hopNamed(by: event), named != current, !actions.isEmpty {
                    seen.issues.append("an event of \(named) acted while the current hop is \(current.map(String.init(describing:)) ?? "none")")
                }
                for action in actions {
                    trace.append("  -> \(describe(action))")
                    seen.observe(action)
                }
                if case .connectionClosed = event { seen.connectionClosed() }
            }
            if !seen.issues.isEmpty {
                Issue.record("seed \(seed): \(seen.issues.joined(separator: "; "))\n\(trace.suffix(60).joined(separator: "\n"))")
                return
            }
        }
    }
}
