import HTTP1Codec
import ProxyCore
import ScopeConfig
import ScopePolicy
import Testing

// The harness: a `Playbook` drives one `ConnectionMachine` with events and checks the actions each
// event returns against a list of expectations, in order, all of them and nothing else (in the style
// of mitmproxy's `playbook >> Event << Command` and async-http-client's state-machine tests).
//
//     var p = Playbook(Configs.followAB)
//     p.start([.arm(.clientHead)])
//     p.on(p.head("GET http://a.example/ HTTP/1.1", "Host: a.example"),
//          [.cancelTimer, .arm(.connect), .connect(hop(1), a, .plain, reusePooled: true)])
//
// Long byte arrays are matched by shape (`.write(startingWith: "HTTP/1.1 502", containing: [...])`),
// records by the fields a test names (`.emit(.status(200), .failure(nil))`).

// MARK: Heads from text

/// A request head parsed by the codec, from its lines (CRLFs added).
func requestHead(_ lines: [String]) -> RequestHead {
    let text = lines.joined(separator: "\r\n") + "\r\n\r\n"
    let bytes = Array(text.utf8)
    do {
        return try bytes.withUnsafeBytes { buffer throws(HTTPParseError) in try HeadParser.parseRequest(buffer) }
    } catch {
        fatalError("test request head does not parse: \(error): \(lines)")
    }
}

/// A head as sent upstream (text ending in CRLF CRLF), parsed back.
func requestHead(text: String) -> RequestHead {
    // "\r\n" is one Character in Swift.
    let lines = text.split(separator: "\r\n", omittingEmptySubsequences: false).prefix { !$0.isEmpty }
    return requestHead(lines.map(String.init))
}

/// A response head parsed by the codec, from its lines (CRLFs added).
func response(_ lines: String...) -> ResponseHead { responseHead(lines) }

func responseHead(_ lines: [String]) -> ResponseHead {
    let text = lines.joined(separator: "\r\n") + "\r\n\r\n"
    let bytes = Array(text.utf8)
    do {
        return try bytes.withUnsafeBytes { buffer throws(HTTPParseError) in try HeadParser.parseResponse(buffer) }
    } catch {
        fatalError("test response head does not parse: \(error): \(lines)")
    }
}

func hop(_ value: UInt32) -> HopID { HopID(value) }

func origin(_ text: String) -> Origin {
    do { return try Origin.parse(text) } catch { fatalError("bad test origin \(text)") }
}

/// The bytes of a request head as text (for canary checks).
func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

// MARK: Configurations from YAML

/// A scope context (and the settings the YAML implies) parsed by the real config loader, with
/// secret values from a fixed table instead of the environment.
struct Fixture: Sendable {
    let scope: ScopeContext
    let configuration: ProxyConfiguration

    init(_ yaml: String, secrets: [String: String] = Fixture.secretValues, tokens: (any AccessTokenSource)? = nil) {
        do {
            configuration = try ConfigLoader.parse(yaml, file: "playbook.yaml", home: "/home/tester")
        } catch {
            fatalError("test config does not load: \(error)")
        }
        let interceptHosts: Set<String> =
            switch configuration.tls.intercept {
            case .hosts(let hosts): Set(hosts)
            case .scoped: Set(configuration.policy.scopes.flatMap(\.origins).filter { $0.scheme == .https }.map(\.host))
            }
        // The scrub and the guard run with the configured `scrub:`/`guard:` (on by default) over
        // the canary values: every table of this suite runs with them on.
        let values = SecretValueIndex(
            placeholders: PlaceholderTable(configuration.placeholders, key: Fixture.placeholderKey),
            values: secrets.mapValues { Array($0.utf8) })
        scope = ScopeContext(
            policy: configuration.policy, redirects: configuration.redirects, secrets: StaticSecrets(secrets),
            proxyAuthSecret: configuration.proxyAuthSecret, clients: configuration.clients, interceptHosts: interceptHosts,
            protection: configuration.protection, values: values, tokens: tokens, egress: configuration.egress)
    }

    /// Values of the secrets the fixtures name: canaries, so a leak is easy to spot.
    static let secretValues = [
        "a_token": "A-INJECTED-7c1e", "b_token": "B-INJECTED-42d9", "proxy_password": "let-me-in", "m_token": "M-INJECTED-9b3f",
    ]

    /// No scope: every sensitive header stripped everywhere.
    static let stripEverything = Fixture("")

    /// The per-install key of the tables (fixed: placeholders are the same in every run).
    static let placeholderKey = [UInt8](repeating: 7, count: 32)
}

// MARK: Expectations

/// One field of an emitted `ExchangeRecord` a test cares about, named by the access log's field it
/// shows in (`LogField`, the log's one table). `field` checks any field of the table as the table
/// reads it, so a field added there can be checked here without a case of its own; the typed cases
/// check a part of one (the origin of `url`, the total of `req_body`).
enum RecordField: CustomStringConvertible {
    case field(LogField, LogFact?)
    case id(String)
    case method(String?)
    case origin(Origin?)
    case path(String?)
    case status(Int?)
    case clientID(String?)
    case failure(ExchangeFailure?)
    case scopes([String])
    case injected([String])
    case stripped([String])
    case redirect(RedirectDecision?)
    case redirectOrigin(Origin?)
    case tunnel(TunnelDecision?)
    case bytesIn(UInt64)
    case bytesOut(UInt64)
    case requestBodyTotal(UInt64?)
    case responseBodyTotal(UInt64?)

    /// The log field this checks, and which part of it (nil: all of it).
    var logField: (field: LogField, part: String?) {
        switch self {
        case .field(let field, _): (field, nil)
        case .id: (.id, nil)
        case .method: (.method, nil)
        case .origin: (.url, "origin")
        case .path: (.url, "path")
        case .status: (.status, nil)
        case .clientID: (.clientID, nil)
        case .failure: (.error, "failure")
        case .scopes: (.scope, nil)
        case .injected: (.injected, nil)
        case .stripped: (.stripped, nil)
        case .redirect: (.redirect, "decision")
        case .redirectOrigin: (.redirect, "origin")
        case .tunnel: (.decision, nil)
        case .bytesIn: (.bytesIn, nil)
        case .bytesOut: (.bytesOut, nil)
        case .requestBodyTotal: (.requestBody, "total")
        case .responseBodyTotal: (.responseBody, "total")
        }
    }

    var name: String { logField.field.name + (logField.part.map { "." + $0 } ?? "") }

    /// nil when `record` has this value; otherwise what it has instead.
    func mismatch(_ record: ExchangeRecord) -> String? {
        func compare<T: Equatable>(_ expected: T, _ actual: T) -> String? {
            expected == actual ? nil : "\(name) is \(actual), expected \(expected)"
        }
        return switch self {
        case .field(let field, let value): compare(value, field.row.read(record))
        case .id(let value): compare(value, record.id)
        case .method(let value): compare(value, record.method)
        case .origin(let value): compare(value, record.origin)
        case .path(let value): compare(value, record.pathAndQuery)
        case .status(let value): compare(value, record.status)
        case .clientID(let value): compare(value, record.clientID)
        case .failure(let value): compare(value, record.failure)
        case .scopes(let value): compare(value, record.scopes)
        case .injected(let value): compare(value, record.injected)
        case .stripped(let value): compare(value, record.stripped)
        case .redirect(let value): compare(value, record.redirect?.decision)
        case .redirectOrigin(let value): compare(value, record.redirect?.origin)
        case .tunnel(let value): compare(value, record.tunnel)
        case .bytesIn(let value): compare(value, record.bytesIn)
        case .bytesOut(let value): compare(value, record.bytesOut)
        case .requestBodyTotal(let value): compare(value, record.requestBody?.total)
        case .responseBodyTotal(let value): compare(value, record.responseBody?.total)
        }
    }

    var description: String {
        let value =
            switch self {
            case .field(_, let value): value.map(String.init(describing:)) ?? "nil"
            case .id(let value): value
            case .method(let value): value ?? "nil"
            case .origin(let value): value.map(String.init(describing:)) ?? "nil"
            case .path(let value): value ?? "nil"
            case .status(let value): value.map(String.init) ?? "nil"
            case .clientID(let value): value ?? "nil"
            case .failure(let value): value?.code ?? "nil"
            case .scopes(let value): "\(value)"
            case .injected(let value): "\(value)"
            case .stripped(let value): "\(value)"
            case .redirect(let value): value?.rawValue ?? "nil"
            case .redirectOrigin(let value): value.map(String.init(describing:)) ?? "nil"
            case .tunnel(let value): value?.rawValue ?? "nil"
            case .bytesIn(let value): "\(value)"
            case .bytesOut(let value): "\(value)"
            case .requestBodyTotal(let value): value.map(String.init) ?? "nil"
            case .responseBodyTotal(let value): value.map(String.init) ?? "nil"
            }
        return "\(name)=\(value)"
    }
}

/// What one returned action must be: exactly an action, or an action of a shape.
enum Expect: CustomStringConvertible {
    /// Exactly this action.
    case exactly(ConnectionAction)
    /// `armTimer` for this purpose, with the configured milliseconds.
    case arm(TimerPurpose)
    /// `writeToClient` whose bytes start with `prefix` and contain (or not) these strings.
    case write(startingWith: String, containing: [String] = [], excluding: [String] = [])
    /// `sendToUpstream` to this hop, its bytes starting with `prefix`, containing (or not) these strings.
    case send(HopID, startingWith: String, containing: [String] = [], excluding: [String] = [])
    /// `emit` of a record with these fields.
    case emit([RecordField])
    /// `pumpRequestBody`; `guards`: the secrets its egress guard watch looks for (nil: not checked).
    case pumpBody(HopID, BodyFraming, capture: Int?, observe: Int?, guards: [String]?)
    /// `relayResponseBody`; `scrubs`: the secrets its scrub watch masks (nil: not checked).
    case relayBody(HopID, BodyFraming, BodyFraming, observe: Int?, scrubs: [String]?)
    /// `relayWebSocket`: frames read both ways; `guards`/`scrubs`: the secrets its watches name (nil: not checked).
    case relayFrames(HopID, guards: [String]?, scrubs: [String]?)
    /// `connect` for this hop; its egress clearance is checked by the egress tables, not here.
    case connecting(HopID, Origin, UpstreamTransport, reusePooled: Bool)

    static func emit(_ fields: RecordField...) -> Expect { .emit(fields) }
    static var cancelTimer: Expect { .exactly(.cancelTimer) }
    static var readNextRequest: Expect { .exactly(.readNextRequest) }
    static func close(_ how: ClientClose) -> Expect { .exactly(.closeClient(how)) }
    static func connect(_ hop: HopID, _ origin: Origin, _ transport: UpstreamTransport, reusePooled: Bool) -> Expect {
        .connecting(hop, origin, transport, reusePooled: reusePooled)
    }
    static func release(_ hop: HopID, reuse: Bool) -> Expect { .exactly(.releaseUpstream(hop, reuse: reuse)) }
    static func pump(_ hop: HopID, _ framing: BodyFraming, capture: Int?, observe: Int?, guards: [String]? = nil) -> Expect {
        .pumpBody(hop, framing, capture: capture, observe: observe, guards: guards)
    }
    static func relay(_ hop: HopID, _ inbound: BodyFraming, _ outbound: BodyFraming, observe: Int? = nil, scrubs: [String]? = nil) -> Expect {
        .relayBody(hop, inbound, outbound, observe: observe, scrubs: scrubs)
    }
    static func splice(_ hop: HopID) -> Expect { .exactly(.splice(hop)) }
    static func finishTunnel(_ hop: HopID, _ side: TunnelSide) -> Expect { .exactly(.finishTunnel(hop, closedSide: side)) }
    static func startClientTLS(_ origin: Origin) -> Expect { .exactly(.startClientTLS(origin)) }
    static func writeExactly(_ text: String) -> Expect { .exactly(.writeToClient(Array(text.utf8))) }

    /// nil when `action` is what this expects; otherwise why not.
    func mismatch(_ action: ConnectionAction, timeouts: Timeouts) -> String? {
        switch self {
        case .exactly(let expected):
            return expected == action ? nil : "expected \(describe(expected))"
        case .connecting(let hop, let origin, let transport, let reusePooled):
            guard case .connect(hop, origin, transport, reusePooled, _) = action else {
                return "expected connect(\(hop), \(origin), \(transport), reusePooled: \(reusePooled))"
            }
            return nil
        case .arm(let purpose):
            let milliseconds = Playbook.milliseconds(purpose, timeouts)
            return action == .armTimer(purpose, milliseconds: milliseconds) ? nil : "expected armTimer(\(purpose), \(milliseconds) ms)"
        case .write(let prefix, let containing, let excluding):
            guard case .writeToClient(let bytes) = action else { return "expected \(self)" }
            return shapeMismatch(text(bytes), prefix: prefix, containing: containing, excluding: excluding)
        case .send(let hop, let prefix, let containing, let excluding):
            guard case .sendToUpstream(let actualHop, let bytes) = action else { return "expected \(self)" }
            guard actualHop == hop else { return "sent to \(actualHop), expected \(hop)" }
            return shapeMismatch(text(bytes), prefix: prefix, containing: containing, excluding: excluding)
        case .emit(let fields):
            guard case .emit(let record) = action else { return "expected \(self)" }
            let wrong = fields.compactMap { $0.mismatch(record) }
            return wrong.isEmpty ? nil : "record: " + wrong.joined(separator: "; ")
        case .pumpBody(let hop, let framing, let capture, let observe, let guards):
            guard case .pumpRequestBody(hop, framing, capture, observe, let watch) = action else { return "expected \(self)" }
            if let guards, Set(guards) != Set(watch?.secrets ?? []) { return "guard watches \(watch?.secrets ?? []), expected \(guards)" }
            return nil
        case .relayBody(let hop, let inbound, let outbound, let observe, let scrubs):
            guard case .relayResponseBody(hop, inbound, outbound, observe, let watch) = action else { return "expected \(self)" }
            if let scrubs, Set(scrubs) != Set(watch?.secrets ?? []) { return "scrub masks \(watch?.secrets ?? []), expected \(scrubs)" }
            return nil
        case .relayFrames(let hop, let guards, let scrubs):
            guard case .relayWebSocket(hop, let plan) = action else { return "expected \(self)" }
            if let guards, Set(guards) != Set(plan.egress?.secrets ?? []) {
                return "frame guard watches \(plan.egress?.secrets ?? []), expected \(guards)"
            }
            if let scrubs, Set(scrubs) != Set(plan.scrub?.secrets ?? []) {
                return "frame scrub masks \(plan.scrub?.secrets ?? []), expected \(scrubs)"
            }
            return nil
        }
    }

    private func shapeMismatch(_ text: String, prefix: String, containing: [String], excluding: [String]) -> String? {
        var wrong: [String] = []
        if !text.hasPrefix(prefix) { wrong.append("does not start with \(quoted(prefix))") }
        for needle in containing where !text.contains(needle) { wrong.append("does not contain \(quoted(needle))") }
        for needle in excluding where text.contains(needle) { wrong.append("contains \(quoted(needle))") }
        return wrong.isEmpty ? nil : wrong.joined(separator: ", ")
    }

    var description: String {
        switch self {
        case .exactly(let action): describe(action)
        case .connecting(let hop, let origin, let transport, let reusePooled): "connect(\(hop), \(origin), \(transport), reusePooled: \(reusePooled))"
        case .arm(let purpose): "armTimer(\(purpose))"
        case .write(let prefix, let containing, let excluding):
            "writeToClient(\(quoted(prefix))…" + shape(containing, excluding) + ")"
        case .send(let hop, let prefix, let containing, let excluding):
            "sendToUpstream(\(hop), \(quoted(prefix))…" + shape(containing, excluding) + ")"
        case .pumpBody(let hop, let framing, let capture, let observe, let guards):
            "pumpRequestBody(\(hop), \(framing), capture: \(capture.map(String.init) ?? "nil"), observe: \(observe.map(String.init) ?? "nil"), guards: \(guards.map { "\($0)" } ?? "any"))"
        case .relayFrames(let hop, let guards, let scrubs):
            "relayWebSocket(\(hop), guards: \(guards.map { "\($0)" } ?? "any"), scrubs: \(scrubs.map { "\($0)" } ?? "any"))"
        case .relayBody(let hop, let inbound, let outbound, let observe, let scrubs):
            "relayResponseBody(\(hop), \(inbound) -> \(outbound), observe: \(observe.map(String.init) ?? "nil"), scrubs: \(scrubs.map { "\($0)" } ?? "any"))"
        case .emit(let fields): "emit(\(fields.map(\.description).joined(separator: ", ")))"
        }
    }

    private func shape(_ containing: [String], _ excluding: [String]) -> String {
        (containing.isEmpty ? "" : " containing " + containing.map(quoted).joined(separator: ", "))
            + (excluding.isEmpty ? "" : " excluding " + excluding.map(quoted).joined(separator: ", "))
    }
}

/// An action as one readable line: bytes as escaped text, shortened.
func describe(_ action: ConnectionAction) -> String {
    switch action {
    case .writeToClient(let bytes): "writeToClient(\(quoted(text(bytes), limit: 160)))"
    case .sendToUpstream(let hop, let bytes): "sendToUpstream(\(hop), \(quoted(text(bytes), limit: 160)))"
    case .emit(let record):
        // Every field of the log's table the record has (the clock's aside), so a new one shows.
        "emit("
            + LogField.ordered.compactMap { field -> String? in
                guard field != .ts, field != .durationMS, let fact = field.row.read(record) else { return nil }
                return "\(field.name)=\(fact)"
            }.joined(separator: ", ") + ")"
    default: "\(action)"
    }
}

func quoted(_ text: String) -> String { quoted(text, limit: 200) }

func quoted(_ text: String, limit: Int) -> String {
    let escaped = text.replacingCRLF()
    return "\"" + (escaped.count > limit ? String(escaped.prefix(limit)) + "…" : escaped) + "\""
}

extension String {
    fileprivate func replacingCRLF() -> String {
        var result = ""
        for scalar in unicodeScalars {
            switch scalar {
            case "\r": result += "\\r"
            case "\n": result += "\\n"
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }
}

// MARK: The playbook

/// One connection's machine, the events fed to it and the actions it returned.
struct Playbook {
    private(set) var machine: ConnectionMachine
    let fixture: Fixture
    let settings: ConnectionMachine.Settings
    /// Monotonic microseconds for the next `Arrival`.
    var now: UInt64 = 1_000_000
    /// Every action returned so far, in order.
    private(set) var actions: [ConnectionAction] = []
    static let peer = "127.0.0.1:50000"
    static let seed: UInt64 = 0x5C0_9E

    init(
        _ fixture: Fixture = .stripEverything, mode: ConnectionMode = .forwardProxy, logBodies: Bool = false,
        limits: Limits? = nil, facts: ConnectionFacts? = nil
    ) {
        self.fixture = fixture
        let configuration = fixture.configuration
        settings = ConnectionMachine.Settings(
            timeouts: configuration.timeouts, limits: limits ?? configuration.limits,
            admission: .init(tunnel: configuration.tls.tunnel, canIntercept: !fixture.scope.interceptHosts.isEmpty),
            logBodies: logBodies)
        machine = ConnectionMachine(
            settings: settings, mode: mode, facts: facts ?? ConnectionFacts(peer: Self.peer),
            ids: RequestIDGenerator(seed: Self.seed))
        // Counted, not asserted: `on` and `ignores` check that no event of a table was impossible,
        // `impossible` that one was, and random walks feed whatever they like.
        machine.toleratesImpossibleEvents = true
    }

    /// The request id the machine makes for the `n`th request (1-based) that brings none.
    static func generatedID(_ n: Int) -> String {
        var ids = RequestIDGenerator(seed: seed)
        var id = ""
        for _ in 0..<n { id = ids.next() }
        return id
    }

    static func milliseconds(_ purpose: TimerPurpose, _ timeouts: Timeouts) -> Int {
        switch purpose {
        case .clientHead: timeouts.clientHeader
        case .idle, .stall: timeouts.idle
        case .connect: timeouts.connect
        case .responseHead: timeouts.upstream
        }
    }

    // Events that need the playbook's scope context.

    func head(_ lines: String...) -> ConnectionEvent {
        let request = requestHead(lines)
        return .requestHead(request, headBytes: lines.joined(separator: "\r\n").utf8.count + 4, Arrival(now: now, scope: fixture.scope))
    }

    func headInvalid(_ error: HTTPParseError) -> ConnectionEvent {
        .requestHeadInvalid(error, Arrival(now: now, scope: fixture.scope))
    }

    // Feeding events.

    @discardableResult
    mutating func start(_ expected: [Expect], sourceLocation: SourceLocation = #_sourceLocation) -> [ConnectionAction] {
        let returned = machine.start()
        check("start()", returned, expected, sourceLocation)
        return returned
    }

    /// Feeds `event` and checks that the machine returns exactly the `expected` actions, in order.
    @discardableResult
    mutating func on(_ event: ConnectionEvent, _ expected: [Expect], sourceLocation: SourceLocation = #_sourceLocation) -> [ConnectionAction] {
        let impossibleBefore = machine.impossibleEvents
        let returned = machine.handle(event)
        check(describeEvent(event), returned, expected, sourceLocation)
        if machine.impossibleEvents != impossibleBefore {
            Issue.record(
                "after \(describeEvent(event)): the machine took it for impossible (\(machine.lastImpossible.map { "\($0)" } ?? "?"))",
                sourceLocation: sourceLocation)
        }
        return returned
    }

    /// Feeds `event` and checks that the machine does nothing and counts it as impossible, for `reason`
    /// (a correct engine cannot send it now).
    mutating func impossible(_ event: ConnectionEvent, _ reason: ImpossibleEvent, sourceLocation: SourceLocation = #_sourceLocation) {
        let before = machine.impossibleEvents
        let returned = machine.handle(event)
        check(describeEvent(event), returned, [], sourceLocation)
        #expect(machine.impossibleEvents == before + 1, "not counted as impossible: \(describeEvent(event))", sourceLocation: sourceLocation)
        #expect(machine.lastImpossible == reason, sourceLocation: sourceLocation)
    }

    /// Feeds `event` and checks that the machine does nothing, dropping it as stale for `reason`.
    mutating func ignores(_ event: ConnectionEvent, as reason: StaleEvent, sourceLocation: SourceLocation = #_sourceLocation) {
        on(event, [], sourceLocation: sourceLocation)
        #expect(machine.lastIgnored == reason, "dropped for another reason: \(describeEvent(event))", sourceLocation: sourceLocation)
    }

    /// Feeds `event` without checking what comes back (the caller looks at it).
    mutating func feed(_ event: ConnectionEvent) -> [ConnectionAction] {
        let returned = machine.handle(event)
        actions += returned
        return returned
    }

    /// Feeds `event` and checks that the machine does nothing at all.
    mutating func ignores(_ event: ConnectionEvent, sourceLocation: SourceLocation = #_sourceLocation) {
        on(event, [], sourceLocation: sourceLocation)
    }

    private mutating func check(_ event: String, _ returned: [ConnectionAction], _ expected: [Expect], _ location: SourceLocation) {
        actions += returned
        let problems = Self.problems(returned, expected, timeouts: settings.timeouts)
        guard !problems.isEmpty else { return }
        let actual = returned.enumerated().map { "    \($0.offset): \(describe($0.element))" }.joined(separator: "\n")
        let wanted = expected.enumerated().map { "    \($0.offset): \($0.element)" }.joined(separator: "\n")
        Issue.record(
            "after \(event):\n  \(problems.joined(separator: "\n  "))\n  returned:\n\(actual)\n  expected:\n\(wanted)",
            sourceLocation: location)
    }

    /// What does not match, action by action; empty when `returned` is exactly what `expected` describes.
    static func problems(_ returned: [ConnectionAction], _ expected: [Expect], timeouts: Timeouts) -> [String] {
        var problems: [String] = []
        if returned.count != expected.count { problems.append("\(returned.count) actions, expected \(expected.count)") }
        for index in 0..<min(returned.count, expected.count) {
            if let why = expected[index].mismatch(returned[index], timeouts: timeouts) {
                problems.append("action \(index): \(why)")
            }
        }
        return problems
    }

    /// Feeds `event` (nil: `start()`) and returns what does not match `expected`, recording no issue:
    /// for the harness's own tests.
    mutating func mismatches(_ event: ConnectionEvent?, _ expected: [Expect]) -> [String] {
        let returned = event.map { machine.handle($0) } ?? machine.start()
        actions += returned
        return Self.problems(returned, expected, timeouts: settings.timeouts)
    }

    private func describeEvent(_ event: ConnectionEvent) -> String {
        switch event {
        case .requestHead(let head, _, _): "requestHead(\(head.method) \(head.target) \(head.version))"
        case .responseHead(let hop, let head, let pipelined): "responseHead(\(hop), \(head.status)\(pipelined ? ", pipelined" : ""))"
        default: "\(event)"
        }
    }

    // What happened so far.

    /// Every record emitted so far.
    var emitted: [ExchangeRecord] {
        actions.compactMap { if case .emit(let record) = $0 { record } else { nil } }
    }

    /// Every hop released so far (one entry per release).
    var released: [HopID] {
        actions.compactMap { if case .releaseUpstream(let hop, _) = $0 { hop } else { nil } }
    }

    /// Every hop a connection was asked for.
    var connected: [HopID] {
        actions.compactMap { if case .connect(let hop, _, _, _, _) = $0 { hop } else { nil } }
    }

    /// The bytes last sent to `hop`, as text.
    func sent(to hop: HopID) -> String? {
        actions.reversed().lazy.compactMap { if case .sendToUpstream(hop, let bytes) = $0 { text(bytes) } else { nil } }.first
    }
}

// MARK: Common openings

extension Playbook {
    /// start → the request head → connect to `origin` on hop 1: the machine waits for the connection.
    mutating func requested(_ lines: [String] = get, to origin: Origin = plain, sourceLocation: SourceLocation = #_sourceLocation) {
        start([.arm(.clientHead)], sourceLocation: sourceLocation)
        on(
            .requestHead(requestHead(lines), headBytes: lines.joined(separator: "\r\n").utf8.count + 4, Arrival(now: now, scope: fixture.scope)),
            [.cancelTimer, .arm(.connect), .connect(hop(1), origin, origin.scheme == .https ? .tls : .plain, reusePooled: true)],
            sourceLocation: sourceLocation)
    }

    /// `requested` a bodiless request, then connected and sent: the machine waits for the response head.
    mutating func sent(
        _ lines: [String] = get, to origin: Origin = plain, reused: Bool = true,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        requested(lines, to: origin, sourceLocation: sourceLocation)
        let method = String(lines[0].prefix { $0 != " " })
        on(
            .upstreamConnected(hop(1), reused: reused), [.send(hop(1), startingWith: method + " "), .arm(.responseHead)],
            sourceLocation: sourceLocation)
    }

    /// `sent`, then a 200 with a body of `length` bytes: the machine relays the body.
    mutating func relaying(_ lines: [String] = get, length: UInt64 = 10, sourceLocation: SourceLocation = #_sourceLocation) {
        sent(lines, sourceLocation: sourceLocation)
        on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: \(length)")),
            [.write(startingWith: "HTTP/1.1 200 OK\r\n"), .relay(hop(1), .contentLength(length), .contentLength(length)), .arm(.stall)],
            sourceLocation: sourceLocation)
    }

    /// `requested` a POST with a Content-Length body to `plain`, connected: the body is being pumped.
    mutating func pumping(
        length: UInt64 = 100, reused: Bool = true, method: String = "POST",
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        start([.arm(.clientHead)], sourceLocation: sourceLocation)
        on(
            head("\(method) http://plain.example/up HTTP/1.1", "Host: plain.example", "Content-Length: \(length)"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)], sourceLocation: sourceLocation)
        let capture = fixture.scope.redirects.mode == .follow ? settings.limits.maxReplayBody : nil
        on(
            .upstreamConnected(hop(1), reused: reused),
            [
                .send(hop(1), startingWith: "\(method) /up HTTP/1.1\r\n"), .pump(hop(1), .contentLength(length), capture: capture, observe: nil),
                .arm(.stall),
            ],
            sourceLocation: sourceLocation)
    }
}

/// The plain GET most tests start with.
let get = ["GET http://plain.example/ HTTP/1.1", "Host: plain.example"]
