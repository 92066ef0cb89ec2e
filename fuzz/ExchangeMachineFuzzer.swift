// Fuzz target (fuzz/FuzzMain.swift dispatches): the connection state machine (ProxyCore) driven by
// random event sequences. The input decodes to one of a few fixed scope configurations, then to a
// sequence of events (request heads from a menu, upstream and client happenings, timers), each aimed
// at the current hop most of the time and at a stale or future HopID otherwise. The harness keeps
// its own account of what the actions said and checks, after every event:
//  1. at most one final response per request head (a non-1xx head written to the client, an error
//     response, `200 Connection Established`; a 101 ends the exchange too, so it counts as final);
//  2. a released hop is never mentioned again, no action mentions a hop that was never
//     `connect`ed (or connects one twice), at most one hop is live at a time, and an event of a
//     released or never connected hop has no effect at all;
//  3. client credentials (canaries) reach only the origin the client addressed, and only one a
//     scope covers; an injected secret reaches only its scope's origins; the proxy password no origin;
//  4. after `connectionClosed` every connected hop was released exactly once;
//  5. after `connectionClosed` no event produces any action; every request head got exactly one
//     final record (plus one per followed hop), none twice;
//  6. no configured secret shows in an emitted record (records carry header names, not values);
//  7. after answering a request that asked to close (`Connection: close`, HTTP/1.0), no further
//     request is read (RFC 9112 §9.6).
// The machine is never looked into: the harness reads only `currentHop`, `expectsResponseHead` and
// `isAwaitingHead`, which the engine reads too.
//
// Input bytes: the first picks the configuration (bits 0-2) and, when it has a route, the route's
// listener instead of the forward proxy (bit 3). Then each operation byte (mod 25) is an event,
// followed by its operands (mod 27): 0 request head (kind, target, credentials, extras[, malformations,
// long numbers in the target and Host]),
// 1 invalid head, 2 headStarted, 3 upstreamConnected, 4 upstreamConnectFailed, 5 requestBody,
// 6 responseHead (< 96: plain menu, else a 3xx and a Location from the next byte), 7 invalid
// response head, 8 responseBody, 9 upstreamClosed, 10 tunnelBytes (or webSocketStopped), 11 timerFired (< 192: the armed
// timer), 12 clientInputClosed, 13 clientFailed, 14 drain, 15 connectionClosed, 16 collectedBody,
// 17-24 what the engine would most likely report next, 25 clientTLSEstablished, 26 clientTLSFailed, 27 switchedToHTTP2
// (on a fresh connection only, as the engine does). A hop operand < 192 is the current hop; otherwise a stale, future
// or never used one. SCOPEPROXY_FUZZ_TRACE=1 prints each event with the actions it produced.

/// SCOPEPROXY_FUZZ_TRACE=1: print every event and its actions (to read what an input decodes to).
private let tracing = getenv("SCOPEPROXY_FUZZ_TRACE") != nil

#if canImport(Glibc)
    import Glibc
#endif

// MARK: Canaries

/// Client-sent credentials: the marker plus the request's number, so a credential of one request
/// found on another request's hop is told apart too.
private let clientMarker = Array("CLIENT".utf8)
private let apiSecret = "SECRETAPI7f3k"
private let cdnSecret = "SECRETCDN2m9x"
private let proxySecret = "SECRETPROXY5q1z"
/// A client's wrong proxy password: goes to no origin either.
private let wrongProxyPassword = "WRONGPROXY8d4w"

// MARK: Origins and configurations

private func origin(_ text: String) -> Origin {
    do { return try Origin.parse(text) } catch { fatalError("fixture origin \(text): \(error)") }
}

private let apiOrigin = origin("https://api.scoped.test")
private let cdnOrigin = origin("https://cdn.scoped.test")
private let localOrigin = origin("http://127.0.0.1:8765")
private let otherOrigin = origin("http://other.test")
/// Absolute-form targets of the request menu: the origin, its authority as written, userinfo or not.
private let targetOrigins: [(origin: Origin, scheme: String, authority: String)] = [
    (apiOrigin, "https", "api.scoped.test"), (cdnOrigin, "https", "cdn.scoped.test"),
    (localOrigin, "http", "127.0.0.1:8765"), (otherOrigin, "http", "other.test"),
]

/// Which origins each injected secret may reach (the same in every configuration below).
private let secretOrigins: [(value: [UInt8], origins: Set<Origin>)] = [
    (Array(apiSecret.utf8), [apiOrigin, localOrigin]),
    (Array(cdnSecret.utf8), [cdnOrigin]),
    (Array(proxySecret.utf8), []),
    (Array(proxyBasic.dropFirst(6).utf8), []),  // the same, as Basic credentials
    (Array(wrongProxyPassword.utf8), []),
]

private let scopesYAML = """
    scopes:
      - name: api
        origins: ["https://api.scoped.test", "http://127.0.0.1:8765"]
        require_https: false
        inject: { Authorization: "Bearer ${api_token}" }
        pass: [Cookie, X-API-Key]
      - name: cdn
        origins: ["https://cdn.scoped.test"]
        inject: { X-CDN-Token: "${cdn_token}" }
        pass: [Authorization]
    """

struct MachineFixture {
    let scope: ScopeContext
    let settings: ConnectionMachine.Settings
    /// The route's listener mode, when the configuration has one.
    let route: ConnectionMode?
    /// Origins a scope covers: client credentials may go nowhere else.
    let covered: Set<Origin>
}

/// The access token the fuzzer hands out: the api secret itself, so the usual checks (where it may
/// go, never in a record) cover tokens too.
private let fuzzToken = AccessToken(value: SecretValue(apiSecret), generation: 1, validUntil: 0)

private func fixture(_ yaml: String, secrets: [String: String], tokens: (any AccessTokenSource)? = nil) -> MachineFixture {
    let config: ProxyConfiguration
    do {
        config = try ConfigLoader.parse(yaml, file: "machine.yaml", home: "/home/fuzz")
    } catch {
        fatalError("fixture config: \(error)")
    }
    let intercept: Set<String> =
        switch config.tls.intercept {
        case .hosts(let hosts): Set(hosts)
        case .scoped: Set(config.policy.scopes.flatMap(\.origins).filter { $0.scheme == .https }.map(\.host))
        }
    // The guard and the scrub run over the canaries (on, as by default): their paths are walked too.
    let values = SecretValueIndex(
        placeholders: PlaceholderTable(config.placeholders, key: [UInt8](repeating: 1, count: 32)),
        values: secrets.mapValues { Array($0.utf8) })
    let scope = ScopeContext(
        policy: config.policy, redirects: config.redirects, secrets: StaticSecrets(secrets),
        proxyAuthSecret: config.proxyAuthSecret, interceptHosts: intercept,
        protection: config.protection, values: values, tokens: tokens, egress: config.egress)
    var limits = config.limits
    limits.maxInformationalResponses = 3
    let settings = ConnectionMachine.Settings(
        timeouts: config.timeouts, limits: limits,
        admission: .init(tunnel: config.tls.tunnel, canIntercept: !intercept.isEmpty), logBodies: config.log.bodies)
    let route = config.routes.first.map { route in
        ConnectionMode.route(upstream: route.upstream, publicOrigin: origin("http://\(route.listen)"))
    }
    return MachineFixture(
        scope: scope, settings: settings, route: route,
        covered: Set(config.policy.scopes.flatMap(\.origins)))
}

private let allSecrets = ["api_token": apiSecret, "cdn_token": cdnSecret, "proxy_password": proxySecret]

let machineFixtures: [MachineFixture] = [
    // 0: pass mode, open proxy, tunnels allowed, nothing intercepted.
    fixture(
        """
        secrets:
          api_token: { env: API_TOKEN }
          cdn_token: { env: CDN_TOKEN }
        \(scopesYAML)
        redirects: { cross_origin: pass }
        tls: { tunnel: allow }
        """, secrets: allSecrets),
    // 1: follow mode, proxy authentication, one intercepted host, bodies logged, egress default deny.
    fixture(
        """
        secrets:
          api_token: { env: API_TOKEN }
          cdn_token: { env: CDN_TOKEN }
          proxy_password: { env: PROXY_PASSWORD }
        proxy_auth: { secret: proxy_password }
        \(scopesYAML)
        redirects: { cross_origin: follow, max_hops: 3 }
        tls: { intercept: ["api.scoped.test"], tunnel: deny }
        log: { bodies: true }
        egress: { default: deny, allow: ["https://cdn.scoped.test", "http://127.0.0.1:*"] }
        """, secrets: allSecrets),
    // 2: block mode with one allowed origin, a route to the api.
    fixture(
        """
        secrets:
          api_token: { env: API_TOKEN }
          cdn_token: { env: CDN_TOKEN }
        \(scopesYAML)
        routes:
          - { listen: "127.0.0.1:8081", upstream: "https://api.scoped.test" }
        redirects: { cross_origin: block, allow: ["https://cdn.scoped.test"] }
        tls: { tunnel: deny }
        """, secrets: allSecrets),
    // 3: follow mode, a route to the loopback origin, every scoped host intercepted, injection
    //    limited by method and path, and the cdn secret missing (credential_unavailable).
    fixture(
        """
        secrets:
          api_token: { env: API_TOKEN }
          cdn_token: { env: CDN_TOKEN }
        scopes:
          - name: api
            origins: ["https://api.scoped.test", "http://127.0.0.1:8765"]
            require_https: false
            inject: { Authorization: "Bearer ${api_token}" }
            pass: [Cookie]
            methods: [GET, POST]
            paths: ["/v1/"]
          - name: cdn
            origins: ["https://cdn.scoped.test"]
            inject: { X-CDN-Token: "${cdn_token}" }
            pass: [Authorization, X-API-Key]
        routes:
          - { listen: "127.0.0.1:8082", upstream: "http://127.0.0.1:8765" }
        redirects: { cross_origin: follow, max_hops: 2 }
        tls: { intercept: scoped, tunnel: allow }
        log: { bodies: true }
        """, secrets: ["api_token": apiSecret]),
    // 4: no scopes (every sensitive header stripped everywhere), follow mode, proxy authentication,
    //    egress default deny in report mode (every hop logged as report_deny, none refused).
    fixture(
        """
        secrets:
          proxy_password: { env: PROXY_PASSWORD }
        proxy_auth: { secret: proxy_password }
        redirects: { cross_origin: follow }
        tls: { tunnel: allow }
        egress: { default: deny, mode: report }
        """, secrets: allSecrets),
    // 5: the api's credential is an OAuth2 token: requests to it wait for the token (follow mode).
    fixture(
        """
        secrets:
          api_token: { oauth2: { token_url: "https://auth.test/token", grant: client_credentials, client_id: c, client_secret: proxy_password } }
          cdn_token: { env: CDN_TOKEN }
          proxy_password: { env: PROXY_PASSWORD }
        \(scopesYAML)
        redirects: { cross_origin: follow, max_hops: 3 }
        tls: { tunnel: allow }
        """, secrets: allSecrets.filter { $0.key != "api_token" }, tokens: NamesOnlyTokenSource(["api_token"], endpoint: "https://auth.test")),
]

// MARK: Response heads

private func parseHead<T>(_ text: String, _ parse: (UnsafeRawBufferPointer) throws -> T) -> T? {
    let bytes = Array(text.utf8)
    return bytes.withUnsafeBytes { buffer -> T? in
        var scanner = HeadScanner(limits: .response)
        guard let boundary = try? scanner.scan(buffer) else { return nil }
        return try? parse(UnsafeRawBufferPointer(rebasing: buffer[boundary.start..<boundary.end]))
    }
}

private func response(_ text: String) -> ResponseHead {
    guard let head = parseHead(text, { buffer in try HeadParser.parseResponse(buffer) }) else {
        fatalError("fixture response does not parse: \(text)")
    }
    return head
}

private let plainResponses: [ResponseHead] = [
    "HTTP/1.1 100 Continue\r\n\r\n",
    "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n",
    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: application/json\r\n\r\n",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n",
    "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n",
    "HTTP/1.1 204 No Content\r\n\r\n",
    "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n",
    "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nSet-Cookie: s=1\r\n\r\n",
    // Framing the proxy refuses (502).
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
].map(response)

private let redirectStatuses = [301, 302, 303, 307, 308, 300]
private let locations: [String?] = [
    "/v1/next", "https://api.scoped.test/v1/r", "https://cdn.scoped.test/x", "http://127.0.0.1:8765/v1/l",
    "http://other.test/x", "//other.test/y", "next", "?q=2", "http://[::1", "http://%61pi.scoped.test/", "mailto:x@y",
    "http:/other.test/z", "https://api.scoped.test:8443/", "http://api.scoped.test/v1/", nil,
]
/// Every redirect status with every Location, with a Content-Length: 0 body or chunked.
private let redirectResponses: [ResponseHead] = redirectStatuses.flatMap { status in
    locations.flatMap { location in
        ["Content-Length: 0", "Transfer-Encoding: chunked"].map { framing in
            response("HTTP/1.1 \(status) Redirect\r\n" + (location.map { "Location: \($0)\r\n" } ?? "") + framing + "\r\n\r\n")
        }
    }
}

// MARK: The harness

private struct Harness {
    let fixture: MachineFixture
    var machine: ConnectionMachine
    /// The origin origin-form requests are for: the route's upstream, or the intercepted host.
    var fixedOrigin: Origin?

    // Requests: one unit per request head (or invalid head, or head timeout) the machine took.
    struct Unit {
        /// A request head (must end with exactly one final record) or a head timeout (at most one).
        let needsRecord: Bool
        /// The origin the client addressed; nil: none (the request must not be forwarded at all).
        let origin: Origin?
        /// The request asked for the connection to close after it (`Connection: close`, or HTTP/1.0).
        var closes = false
        var finals = 0
        var terminalRecords = 0
        var followRecords = 0
    }
    var units: [Unit] = []

    // Hops, as the actions told them.
    struct HopState {
        let origin: Origin
        let unit: Int
        var released = false
        var connectedEvent = false
        var pumping = false
        var requestComplete = false
        var relaying = false
        var splicing = false
    }
    var hops: [UInt32: HopState] = [:]
    var hopOrder: [UInt32] = []
    var armed: TimerPurpose?
    var closed = false
    /// The events so far, shown when an invariant fails.
    var events: [ConnectionEvent] = []

    init(fixture: MachineFixture, mode: ConnectionMode) {
        self.fixture = fixture
        machine = ConnectionMachine(settings: fixture.settings, mode: mode, peer: "127.0.0.1:5000", ids: RequestIDGenerator(seed: 7))
        // The harness sends events no correct engine would (a token nobody asked for): the machine
        // counts them (`impossibleEvents`) instead of asserting, and must still do nothing with them.
        machine.toleratesImpossibleEvents = true
        if case .route(let upstream, _) = mode { fixedOrigin = upstream }
        let actions = machine.start()
        check(actions)
    }

    func fail(_ message: String) -> Never {
        let shown = events.suffix(40).map(describe)
        fatalError("ExchangeMachine invariant: \(message)\nevents (last 40 of \(events.count)):\n" + shown.joined(separator: "\n"))
    }

    // MARK: Delivering

    mutating func deliver(_ event: ConnectionEvent, unit opening: Unit? = nil) {
        let awaiting = machine.isAwaitingHead
        events.append(event)
        if let opening, awaiting, !closed { units.append(opening) }
        if case .timerFired(let purpose) = event, armed == purpose { armed = nil }
        let actions = machine.handle(event)
        if tracing { printTrace(event, actions) }
        switch event {
        case .upstreamConnected(let hop, _, _): hops[hop.value]?.connectedEvent = true
        case .requestBody(let hop, .complete), .requestBody(let hop, .invalid), .requestBody(let hop, .cut), .requestBody(let hop, .blocked):
            hops[hop.value]?.requestComplete = true
        default: break
        }
        if closed {
            if !actions.isEmpty { fail("event after connectionClosed produced " + actions.map(describe).joined(separator: "; ")) }
            return
        }
        // Nothing of a hop the machine let go of (or never opened) may have any effect: its bytes
        // would reach the client, or its failure end another hop's exchange.
        if let about = hopOf(event), hops[about.value]?.released ?? true, !actions.isEmpty {
            fail(
                "an event of \(about) (\(hops[about.value] == nil ? "never connected" : "released")) produced "
                    + actions.map(describe).joined(separator: "; "))
        }
        check(actions)
        // A 101 on a connection whose client already sent more would hand those pipelined requests
        // (for other origins, with their credentials) to this origin.
        if case .responseHead(_, _, clientPipelined: true) = event,
            actions.contains(where: {
                switch $0 {
                case .splice, .relayWebSocket: true
                default: false
                }
            })
        {
            fail("a 101 was spliced although the client had pipelined requests behind the upgrade")
        }
        if case .connectionClosed = event { closeChecks() }
    }

    func hopOf(_ event: ConnectionEvent) -> HopID? {
        switch event {
        case .upstreamConnected(let hop, _, _), .upstreamConnectFailed(let hop, _), .requestBody(let hop, _),
            .responseHead(let hop, _, _), .responseHeadInvalid(let hop, _), .responseBody(let hop, _),
            .upstreamClosed(let hop, _), .tunnelBytes(let hop, _, _), .webSocketStopped(let hop, _, _),
            .webSocketScrubbed(let hop, _):
            hop
        case .headStarted, .requestHead, .requestHeadInvalid, .clientInputClosed, .clientFailed, .timerFired, .drain,
            .connectionClosed, .collectedBody, .clientTLSEstablished, .clientTLSFailed, .tokenReady, .tokenFailed, .switchedToHTTP2:
            nil
        }
    }

    // MARK: Invariants

    mutating func check(_ actions: [ConnectionAction]) {
        for action in actions {
            switch action {
            case .writeToClient(let bytes):
                // A TLS client on the plain listener is answered with a TLS alert, its final answer (400 in the log).
                let status = bytes == ProxyError.protocolVersionAlert ? 400 : statusCode(bytes)
                guard let status else { fail("writeToClient without a status line: \(String(decoding: bytes.prefix(60), as: UTF8.self))") }
                guard let unit = units.indices.last else { fail("response \(status) with no request") }
                if status < 200 && status != 101 {
                    if units[unit].finals > 0 { fail("interim \(status) after the final response") }
                } else {
                    units[unit].finals += 1
                    if units[unit].finals > 1 { fail("second final response (\(status)) to one request") }
                }
            case .startClientTLS(let origin):
                fixedOrigin = origin
            case .connect(let hop, let origin, _, _, _):
                if hops[hop.value] != nil { fail("\(hop) connected twice") }
                if let live = hops.first(where: { !$0.value.released }) { fail("\(hop) connected while hop\(live.key) is live") }
                guard let unit = units.indices.last else { fail("connect with no request") }
                hops[hop.value] = HopState(origin: origin, unit: unit)
                hopOrder.append(hop.value)
            case .sendToUpstream(let hop, let bytes):
                let state = liveHop(hop, "sendToUpstream")
                checkCredentials(bytes, to: state)
            case .collectRequestBody:
                if hops.contains(where: { !$0.value.released }) { fail("a body is read for scoping while a hop is live") }
            case .pumpRequestBody(let hop, _, _, _, _):
                _ = liveHop(hop, "pumpRequestBody")
                hops[hop.value]!.pumping = true
            case .relayResponseBody(let hop, _, _, _, _):
                _ = liveHop(hop, "relayResponseBody")
                hops[hop.value]!.relaying = true
            case .splice(let hop), .relayWebSocket(let hop, _):
                _ = liveHop(hop, "splice")
                hops[hop.value]!.splicing = true
            case .finishTunnel(let hop, _):
                _ = liveHop(hop, "finishTunnel")
            case .releaseUpstream(let hop, _):
                _ = liveHop(hop, "releaseUpstream")
                hops[hop.value]!.released = true
            case .armTimer(let purpose, _):
                armed = purpose
            case .cancelTimer:
                armed = nil
            case .emit(let record):
                guard let unit = units.indices.last else { fail("record with no request: " + describe(.emit(record))) }
                if record.redirect?.decision == .follow {
                    units[unit].followRecords += 1
                    if units[unit].followRecords > 20 { fail("more followed hops than max_hops allows") }
                } else {
                    units[unit].terminalRecords += 1
                    if units[unit].terminalRecords > 1 { fail("second record for one request: " + describe(.emit(record))) }
                }
                checkRecord(record)
            case .acquireToken(let secret, let scope):
                // Only for a secret the source hands out, and only while a request waits for it.
                if !scope.tokenSecrets.contains(secret) { fail("acquireToken for \(secret), which is no token") }
                if machine.awaitedToken != secret { fail("acquireToken for \(secret) while not waiting for it") }
            case .markTokenStale(let secret, _, let scope):
                if !scope.tokenSecrets.contains(secret) { fail("markTokenStale for \(secret), which is no token") }
            case .readNextRequest:
                // RFC 9112 §9.6: after the response to a request with `close`, no further request is read.
                if let unit = units.last, unit.closes, unit.finals > 0 {
                    fail("next request read after answering a request that asked to close")
                }
            case .closeClient:
                break
            }
        }
    }

    func liveHop(_ hop: HopID, _ what: String) -> HopState {
        guard let state = hops[hop.value] else { fail("\(what) of \(hop), never connected") }
        if state.released { fail("\(what) of \(hop) after its release") }
        return state
    }

    /// Invariant 3 on the bytes that go to a hop.
    func checkCredentials(_ bytes: [UInt8], to hop: HopState) {
        let unit = units[hop.unit]
        let addressed = unit.origin == hop.origin && fixture.covered.contains(hop.origin)
        var searchFrom = bytes.startIndex
        while let found = find(clientMarker, in: bytes, from: searchFrom) {
            if !addressed {
                fail(
                    "client credential sent to \(hop.origin), client addressed \(unit.origin.map { "\($0)" } ?? "nothing")"
                        + (fixture.covered.contains(hop.origin) ? "" : " (no scope covers it)") + ":\n" + String(decoding: bytes, as: UTF8.self))
            }
            let tag = Array("CLIENT\(hop.unit)-".utf8)
            if find(tag, in: bytes, from: found) != found {
                fail("another request's credential on this one's hop:\n" + String(decoding: bytes, as: UTF8.self))
            }
            searchFrom = found + 1
        }
        // Userinfo travels base64-encoded in Authorization (where a scope passes it).
        if !addressed, find(Array("Basic ".utf8), in: bytes, from: bytes.startIndex) != nil {
            for number in 0..<units.count where find(Array(userinfoBase64(number).utf8), in: bytes, from: bytes.startIndex) != nil {
                fail("client userinfo sent to \(hop.origin):\n" + String(decoding: bytes, as: UTF8.self))
            }
        }
        for secret in secretOrigins where !secret.origins.contains(hop.origin) {
            if find(secret.value, in: bytes, from: bytes.startIndex) != nil {
                fail("secret \(String(decoding: secret.value, as: UTF8.self)) sent to \(hop.origin):\n" + String(decoding: bytes, as: UTF8.self))
            }
        }
    }

    /// Invariant 6: no configured secret in a record (the client's own Proxy-Authorization aside,
    /// which the log's redaction removes when the line is formatted).
    func checkRecord(_ record: ExchangeRecord) {
        var strings = [record.id, record.client, record.method ?? "", record.pathAndQuery ?? "", record.redirect?.location ?? ""]
        strings += record.scopes + record.injected + record.stripped
        for field in record.requestFields ?? HTTPFields() where !field.hasName("proxy-authorization") {
            strings += [field.name, field.value]
        }
        for field in record.responseFields ?? HTTPFields() { strings += [field.name, field.value] }
        if case .proxy(let error) = record.failure { strings.append(error.message) }
        let bodies = [record.requestBody?.bytes ?? [], record.responseBody?.bytes ?? []]
        for secret in secretOrigins {
            for string in strings where contains(string, secret.value) {
                fail("secret in a record: \(string)")
            }
            for body in bodies where find(secret.value, in: body, from: 0) != nil { fail("secret in a record's body") }
        }
    }

    /// Invariants 4 and 5 at close.
    mutating func closeChecks() {
        closed = true
        for number in hopOrder where !hops[number]!.released { fail("hop\(number) never released") }
        for (index, unit) in units.enumerated() where unit.needsRecord && unit.terminalRecords != 1 {
            fail("request \(index) ended with \(unit.terminalRecords) records")
        }
    }

    // MARK: Choosing events

    /// The current hop most of the time; otherwise a stale one, a future one, or one never used.
    mutating func hop(_ input: inout FuzzInput) -> HopID {
        let choice = input.byte()
        let plausible = machine.currentHop ?? hopOrder.last.map(HopID.init) ?? HopID(1)
        guard choice >= 192 else { return plausible }
        let next = (hopOrder.last ?? 0) &+ 1
        switch choice % 6 {
        case 0: return HopID(0)
        case 1: return HopID(next)
        case 2: return HopID(next &+ 1)
        case 3: return HopID(UInt32.max)
        default: return hopOrder.isEmpty ? plausible : HopID(hopOrder[Int(choice) % hopOrder.count])
        }
    }

    mutating func step(_ input: inout FuzzInput) {
        let operation = input.byte() % 28
        switch operation {
        case 0: requestHead(&input)
        case 1:
            let errors: [HTTPParseError] = [
                .headTooLarge, .tooManyFields, .targetTooLong, .unsupportedVersion,
                .unsupportedTransferCoding, .malformed("fuzz"), .tlsHandshake,
            ]
            deliver(
                .requestHeadInvalid(errors[input.pick(errors.count)], Arrival(now: 1, scope: fixture.scope)),
                unit: Unit(needsRecord: true, origin: nil))
        case 2: deliver(.headStarted)
        case 3: deliver(.upstreamConnected(hop(&input), reused: input.bool()))
        case 4:
            let target = hop(&input)
            let origin = hops[target.value]?.origin ?? otherOrigin
            let errors: [ProxyError] = [
                .dnsFailure(origin), .upstreamRefused(origin), .connectTimeout(origin),
                .upstreamTLSVerification(origin, "fuzz"), .upstreamTLSHandshake(origin),
            ]
            deliver(.upstreamConnectFailed(target, errors[input.pick(errors.count)]))
        case 5: deliver(.requestBody(hop(&input), progress(&input)))
        case 6:
            let target = hop(&input)
            let pipelined = input.byte() < 32  // mostly not: a 101 should usually get its tunnel
            deliver(.responseHead(target, responseHead(&input), clientPipelined: pipelined))
        case 7: deliver(.responseHeadInvalid(hop(&input), reason: "fuzz"))
        case 8: deliver(.responseBody(hop(&input), progress(&input)))
        case 9: deliver(.upstreamClosed(hop(&input), sawResponseBytes: input.bool()))
        case 10:
            let target = hop(&input)
            let choice = input.byte()
            if choice < 224 {
                deliver(.tunnelBytes(target, fromClient: UInt64(choice % 4), fromUpstream: UInt64(input.byte() % 4)))
            } else {
                // The WebSocket frame relay stopped (a value, a placeholder, or frames that are not RFC 6455).
                let stops: [WebSocketFrameFilter.Stop] = [
                    .secret(SecretFinding(secret: "api_token", encoding: .raw, isPlaceholder: false)),
                    .secret(SecretFinding(secret: "api_token", encoding: .raw, isPlaceholder: true)),
                    .protocolError(.maskMissing),
                ]
                deliver(.webSocketStopped(target, stops[Int(choice) % 3], sender: choice & 1 == 0 ? .client : .server))
            }
        case 11:
            let choice = input.byte()
            let purposes: [TimerPurpose] = [.clientHead, .idle, .connect, .responseHead, .stall]
            let purpose = choice < 192 ? armed ?? purposes[Int(choice) % 5] : purposes[Int(choice) % 5]
            timer(purpose)
        case 12: deliver(.clientInputClosed(bufferedBytes: input.bool() ? 0 : Int(input.byte())))
        case 13: deliver(.clientFailed)
        case 14: deliver(.drain)
        case 15: deliver(.connectionClosed)
        case 16: deliver(.collectedBody(collected(&input)))
        case 17: deliver(.tokenReady(secret: input.bool() ? "api_token" : "cdn_token", fuzzToken))
        case 18:
            deliver(
                .tokenFailed(secret: "api_token", provider: (try? Origin.parse("https://auth.test")).map(TokenProvider.endpoint), reason: .refused))
        case 25: deliver(.clientTLSEstablished)
        case 26: deliver(.clientTLSFailed(ClientTLSFailure.allCases[input.pick(ClientTLSFailure.allCases.count)]))
        case 27: if machine.phase == .awaitingHead(.fresh) { deliver(.switchedToHTTP2) } else { automatic(&input) }
        default: automatic(&input)
        }
    }

    mutating func timer(_ purpose: TimerPurpose) {
        // A head timeout may answer 408: that is a request of its own (if the timer is the armed one).
        let opens = purpose == .clientHead && armed == .clientHead
        deliver(.timerFired(purpose), unit: opens ? Unit(needsRecord: false, origin: nil) : nil)
    }

    /// What the engine would most likely report next.
    mutating func automatic(_ input: inout FuzzInput) {
        if closed {
            deliver(.drain)
        } else if let secret = machine.awaitedToken {
            deliver(
                input.byte() < 224
                    ? .tokenReady(secret: secret, fuzzToken)
                    : .tokenFailed(secret: secret, provider: nil, reason: .rejected(status: 401, error: nil)))
        } else if machine.isHandshaking {
            deliver(input.byte() < 224 ? .clientTLSEstablished : .clientTLSFailed(.clientRejectedCertificate))
        } else if machine.isAwaitingHead {
            requestHead(&input)
        } else if let current = machine.currentHop, let state = hops[current.value] {
            if !state.connectedEvent {
                deliver(.upstreamConnected(current, reused: input.bool()))
            } else if state.pumping && !state.requestComplete {
                deliver(
                    .requestBody(
                        current,
                        .complete(
                            payload: 5, consumed: 5, captured: input.bool() ? Array("hello".utf8) : nil,
                            observed: nil)))
            } else if machine.expectsResponseHead(from: current) {
                deliver(.responseHead(current, responseHead(&input)))
            } else if state.relaying {
                deliver(.responseBody(current, progress(&input)))
            } else if state.splicing {
                if input.bool() {
                    deliver(.tunnelBytes(current, fromClient: 3, fromUpstream: 4))
                } else {
                    deliver(.upstreamClosed(current, sawResponseBytes: true))
                }
            } else if let armed {
                timer(armed)
            } else {
                deliver(.connectionClosed)
            }
        } else if machine.isCollectingBody {
            deliver(.collectedBody(input.bool() ? .progressed : collected(&input)))
        } else if let armed, input.bool() {
            timer(armed)
        } else {
            deliver(.connectionClosed)
        }
    }

    /// A body read before scoping: forms with and without a `_method` override, or trouble.
    mutating func collected(_ input: inout FuzzInput) -> CollectedBody {
        switch input.byte() % 6 {
        case 0: .progressed
        case 1: .complete(Array("name=x".utf8))
        case 2: .complete(Array("name=x&_method=DELETE".utf8))
        case 3: .complete([])
        case 4: .tooLarge
        default: .invalid
        }
    }

    mutating func progress(_ input: inout FuzzInput) -> BodyProgress {
        let kind = input.byte()
        let payload = UInt64(input.byte() % 8)
        switch kind % 8 {
        case 6: return .scrubbed([SecretFinding(secret: "api_token", encoding: .raw, isPlaceholder: false)])
        case 7:
            return .blocked(
                SecretFinding(secret: "cdn_token", encoding: .percentUppercase, isPlaceholder: kind & 0x40 != 0),
                bytesSent: kind & 0x80 != 0)
        case 0, 1: return .moved(payload: payload, consumed: payload + UInt64(kind % 3))
        case 2, 3:
            let captured: [UInt8]? =
                switch kind % 3 {
                case 0: nil;
                case 1: [];
                default: Array("hello".utf8)
                }
            let observed =
                kind & 0x80 == 0
                ? nil
                : ExchangeRecord.ObservedBody(bytes: Array("{\"a\":1}".utf8), total: payload, truncated: false, contentType: nil)
            return .complete(payload: payload, consumed: payload, captured: captured, observed: observed)
        case 4: return .invalid
        default: return .cut
        }
    }

    mutating func responseHead(_ input: inout FuzzInput) -> ResponseHead {
        let choice = Int(input.byte())
        if choice < 96 { return plainResponses[choice % plainResponses.count] }
        return redirectResponses[(choice &* 256 &+ Int(input.byte())) % redirectResponses.count]
    }

    // MARK: Request heads

    mutating func requestHead(_ input: inout FuzzInput) {
        let kind = input.pick(11)
        let targetChoice = input.pick(8)
        let credentials = input.byte()
        let extras = input.byte()
        // Malformed variants, when asked for: an invalid or second Host, an unknown transfer coding,
        // a body on a CONNECT (or any method).
        let odd = extras & 0x80 != 0 ? input.byte() : 0
        // The unit this head opens, if the machine takes it: its canaries carry that number.
        let number = units.count

        let path = extras & 4 == 0 ? "/v1/items" : "/other?q=1"
        var addressed: Origin?
        var target: String
        var hostValue: String?
        if kind == 5 {
            // CONNECT: authority-form (without a port, or origin-form, refused).
            let chosen = targetOrigins[targetChoice % targetOrigins.count].origin
            target = targetChoice == 6 ? chosen.host : targetChoice == 7 ? "/x" : "\(chosen.host):\(chosen.port)"
            addressed = Origin(scheme: .https, host: try! Host.parse(Substring(chosen.host)), port: chosen.port)
            hostValue = target
        } else if targetChoice < 4 || targetChoice == 6 {
            let chosen = targetOrigins[targetChoice == 6 ? 1 : targetChoice]
            let userinfo = targetChoice == 6 || extras & 0x40 != 0 ? "u:" + userinfoPassword(number) + "@" : ""
            target = chosen.scheme + "://" + userinfo + chosen.authority + path
            addressed = chosen.origin
            hostValue = chosen.origin.authority
        } else {
            target = targetChoice == 4 ? path : targetChoice == 5 ? "*" : "api.scoped.test:443"
            addressed = fixedOrigin
            hostValue = fixedOrigin?.authority ?? "127.0.0.1:8081"
        }
        switch extras & 3 {
        case 1: hostValue = nil
        case 2: hostValue = "evil.test"
        case 3: hostValue = "localhost:8081"
        default: break
        }
        // Long numbers where a client writes them (docs/security-model.md, "Strict parsing"): a
        // dotted host with a 25-digit label in the target and Host, a port past UInt64 in Host.
        // Either is a 400: nothing is forwarded.
        if odd & 0x10 != 0, kind != 5 {
            target = "http://128.0.7777777777777777777777777.1" + path
            hostValue = "128.0.7777777777777777777777777.1"
            addressed = nil
        }
        if odd & 0x20 != 0 {
            hostValue = (hostValue ?? "api.scoped.test") + ":18446744073709551616"
            addressed = nil
        }
        let method = ["GET", "HEAD", "POST", "POST", "PUT", "CONNECT", "GET", "TRACE", "GET", "DELETE", "OPTIONS"][kind]
        // Built as the parser would build it (the codec has fuzz targets of its own; parsing every
        // head here would cost a fifth of the run).
        var fields = HTTPFields()
        if let hostValue { fields.append(name: "Host", value: hostValue) }
        if credentials & 1 != 0 { fields.append(name: "Authorization", value: "Bearer CLIENT\(number)-auth") }
        if credentials & 2 != 0 { fields.append(name: "Cookie", value: "session=CLIENT\(number)-cookie") }
        if credentials & 4 != 0 { fields.append(name: "X-API-Key", value: "CLIENT\(number)-key") }
        if credentials & 8 != 0 { fields.append(name: "X_Api_Key", value: "CLIENT\(number)-alias") }
        switch (credentials >> 4) & 3 {
        case 1: fields.append(name: "Proxy-Authorization", value: "Bearer \(proxySecret)")
        case 2: fields.append(name: "Proxy-Authorization", value: proxyBasic)
        case 3: fields.append(name: "Proxy-Authorization", value: "Bearer \(wrongProxyPassword)")
        default: break
        }
        if credentials & 0x40 != 0 { fields.append(name: "Connection", value: "close") }
        if credentials & 0x80 != 0 { fields.append(name: "X-Request-ID", value: "req-\(number)") }
        switch kind {
        case 2, 4: fields.append(name: "Content-Length", value: "5")
        case 3: fields.append(name: "Transfer-Encoding", value: "chunked")
        case 6:
            fields.append(name: "Connection", value: "Upgrade")
            fields.append(name: "Upgrade", value: "websocket")
        default: break
        }
        if extras & 8 != 0 { fields.append(name: "Expect", value: "100-continue") }
        if extras & 0x10 != 0 { fields.append(name: "X-HTTP-Method-Override", value: "DELETE") }
        if extras & 0x20 != 0 {
            fields.append(name: "Content-Type", value: extras & 0x40 != 0 ? "application/x-www-form-urlencoded" : "application/json")
        }
        if odd & 1 != 0 { fields.append(name: "Host", value: odd & 2 != 0 ? "a b" : "other.test") }
        if odd & 4 != 0 { fields.append(name: "Transfer-Encoding", value: "gzip") }
        if odd & 8 != 0 { fields.append(name: "Content-Length", value: "7") }
        let head = RequestHead(method: method, target: target, version: kind == 8 ? .http1_0 : .http1_1, fields: fields)
        let arrival = Arrival(now: UInt64(number), scope: fixture.scope)
        let closes = kind == 8 || credentials & 0x40 != 0
        deliver(
            .requestHead(head, headBytes: 64 + fields.count * 24, arrival),
            unit: Unit(needsRecord: true, origin: addressed, closes: closes))
    }
}

/// One line per event, without the Arrival's scope context.
private func describe(_ event: ConnectionEvent) -> String {
    switch event {
    case .requestHead(let head, _, _):
        "requestHead \(head.method) \(head.target) \(head.version) \(head.fields.map { "\($0.name): \($0.value)" })"
    case .requestHeadInvalid(let error, _): "requestHeadInvalid \(error)"
    case .responseHead(let hop, let head, let pipelined):
        "responseHead(\(hop)\(pipelined ? ", pipelined" : "")) \(head.status) \(head.fields.map { "\($0.name): \($0.value)" })"
    default: "\(event)".replacingPrefix("ScopeproxyFuzz.")
    }
}

extension String {
    /// Drops the module name from type names in a description.
    fileprivate func replacingPrefix(_ module: String) -> String {
        var result = ""
        var rest = Substring(self)
        while let range = rest.firstRange(of: module) {
            result += rest[..<range.lowerBound]
            rest = rest[range.upperBound...]
        }
        return result + rest
    }
}

/// One line per action: messages as text (CRLF shown as ` | `), records by their main fields.
private func describe(_ action: ConnectionAction) -> String {
    switch action {
    case .writeToClient(let bytes), .sendToUpstream(_, let bytes):
        let text = String(decoding: bytes, as: UTF8.self).map { $0 == "\r\n" ? " | " : String($0) }.joined()
        let shown = text.count > 300 ? String(text.prefix(300)) + "…" : text
        if case .sendToUpstream(let hop, _) = action { return "sendToUpstream(\(hop)) " + shown }
        return "writeToClient " + shown
    case .emit(let record):
        return "emit \(record.method ?? "-") \(record.origin.map { "\($0)" } ?? "-") status \(record.status.map { "\($0)" } ?? "-") "
            + "redirect \(record.redirect.map { "\($0.decision)" } ?? "-") failure \(record.failure.map { $0.code } ?? "-")"
    default:
        return "\(action)".replacingPrefix("ScopeproxyFuzz.")
    }
}

private func printTrace(_ event: ConnectionEvent, _ actions: [ConnectionAction]) {
    print("> " + describe(event))
    for action in actions { print("    " + describe(action)) }
    fflush(stdout)
}

private let proxyBasic = "Basic " + Base64.encode(Array("any:\(proxySecret)".utf8))

private func userinfoPassword(_ number: Int) -> String { "CLIENT\(number)-userinfo" }
private func userinfoBase64(_ number: Int) -> String { Base64.encode(Array("u:\(userinfoPassword(number))".utf8)) }

private func statusCode(_ bytes: [UInt8]) -> Int? {
    // "HTTP/1.x NNN"
    guard bytes.count >= 12, bytes.starts(with: Array("HTTP/1.".utf8)) else { return nil }
    var status = 0
    for byte in bytes[9..<12] {
        guard byte >= 0x30 && byte <= 0x39 else { return nil }
        status = status * 10 + Int(byte - 0x30)
    }
    return status
}

/// Where `needle` first occurs in `count` bytes at `base`. With memchr and memcmp: the harness's
/// own searching should neither cost a coverage callback per byte nor count as coverage.
private func search(_ base: UnsafeRawPointer, _ count: Int, _ needle: [UInt8]) -> Int? {
    guard let first = needle.first, count >= needle.count else { return nil }
    return needle.withUnsafeBytes { pattern -> Int? in
        var offset = 0
        while count - offset >= pattern.count {
            guard let hit = memchr(base + offset, Int32(first), count - offset - pattern.count + 1) else { return nil }
            let position = UnsafeRawPointer(hit) - base
            if memcmp(hit, pattern.baseAddress!, pattern.count) == 0 { return position }
            offset = position + 1
        }
        return nil
    }
}

/// The first index of `needle` in `haystack` at or after `start`.
private func find(_ needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
    guard start >= 0, start < haystack.count else { return nil }
    return haystack.withUnsafeBytes { hay in
        search(hay.baseAddress! + start, hay.count - start, needle).map { start + $0 }
    }
}

private func contains(_ string: String, _ needle: [UInt8]) -> Bool {
    var string = string
    return string.withUTF8 { bytes in
        guard let base = bytes.baseAddress else { return false }
        return search(UnsafeRawPointer(base), bytes.count, needle) != nil
    }
}

func fuzzExchangeMachine(_ data: UnsafePointer<UInt8>, _ size: Int) {
    var input = FuzzInput(bytes: UnsafeBufferPointer(start: data, count: size))
    let setup = input.byte()
    let fixture = machineFixtures[Int(setup & 7) % machineFixtures.count]
    let mode = setup & 8 != 0 ? fixture.route ?? .forwardProxy : .forwardProxy
    var harness = Harness(fixture: fixture, mode: mode)
    var steps = 0
    while !input.isEmpty && steps < 256 {
        harness.step(&input)
        steps += 1
    }
    if !harness.closed { harness.deliver(.connectionClosed) }
    // A few events after the close: none may do anything.
    harness.deliver(.responseBody(HopID(1), .complete(payload: 1, consumed: 1, captured: nil, observed: nil)))
    harness.deliver(.timerFired(.idle))
}
