import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

// The stream harness: a `StreamBook` drives one `StreamMachine` (one HTTP/2 stream) with its header
// block and events, and checks the `StreamAction`s each returns against a list of expectations, in
// order, all of them and nothing else (the Playbook's style; its `Expect` checks the exchange's own
// actions).
//
//     var s = StreamBook(Configs.pass)
//     s.start(block("GET", "http://plain.example/"), [.arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])

/// An HTTP/2 request header block: the pseudo-header fields from `url`, then `fields` (`name: value`).
func block(_ method: String, _ url: String, _ fields: String...) -> [H2HeaderField] {
    block(method, url, fields: fields)
}

func block(_ method: String, _ url: String, fields: [String]) -> [H2HeaderField] {
    let schemeEnd = url.range(of: "://")!
    let rest = url[schemeEnd.upperBound...]
    let pathStart = rest.firstIndex(of: "/") ?? rest.endIndex
    let path = rest[pathStart...].isEmpty ? "/" : String(rest[pathStart...])
    return [
        H2HeaderField(name: ":method", value: method), H2HeaderField(name: ":scheme", value: String(url[..<schemeEnd.lowerBound])),
        H2HeaderField(name: ":authority", value: String(rest[..<pathStart])), H2HeaderField(name: ":path", value: path),
    ] + fields.map(field)
}

/// `name: value` as a header field (the name as written: a test of upper case writes upper case).
func field(_ line: String) -> H2HeaderField {
    let colon = line.dropFirst().firstIndex(of: ":")!
    return H2HeaderField(name: String(line[..<colon]), value: String(line[line.index(after: colon)...].drop { $0 == " " }))
}

/// What one returned `StreamAction` must be.
enum StreamExpect: CustomStringConvertible {
    /// One of the exchange's own actions.
    case x(Expect)
    /// The final HEADERS: this status, this body, and the fields named (`has`: name to value; `lacks`: names).
    case respond(Int, Body, has: [String: String] = [:], lacks: [String] = [])
    case interim(Int)
    case endStream
    case reset(H2ErrorCode)
    /// An RFC 8441 WebSocket's frames relayed: checked as the HTTP/1.1 upgrade's action would be
    /// (`.relayFrames` for frames read under a plan, `.splice` for frames moved unread).
    case frames(Expect)

    enum Body: Equatable {
        case none
        case relayed
        /// The proxy's JSON error with this `error` code.
        case error(String)
    }

    static func arm(_ purpose: TimerPurpose) -> StreamExpect { .x(.arm(purpose)) }
    static var cancelTimer: StreamExpect { .x(.cancelTimer) }
    static func connect(_ hop: HopID, _ origin: Origin, _ transport: UpstreamTransport, reusePooled: Bool) -> StreamExpect {
        .x(.connect(hop, origin, transport, reusePooled: reusePooled))
    }
    static func release(_ hop: HopID, reuse: Bool) -> StreamExpect { .x(.release(hop, reuse: reuse)) }
    static func send(_ hop: HopID, startingWith prefix: String, containing: [String] = [], excluding: [String] = []) -> StreamExpect {
        .x(.send(hop, startingWith: prefix, containing: containing, excluding: excluding))
    }
    static func emit(_ fields: RecordField...) -> StreamExpect { .x(.emit(fields)) }
    static func relay(_ hop: HopID, _ inbound: BodyFraming, _ outbound: BodyFraming, scrubs: [String]? = nil) -> StreamExpect {
        .x(.relay(hop, inbound, outbound, scrubs: scrubs))
    }
    static func pump(_ hop: HopID, _ framing: BodyFraming, capture: Int? = nil, observe: Int? = nil) -> StreamExpect {
        .x(.pump(hop, framing, capture: capture, observe: observe))
    }

    func mismatch(_ action: StreamAction, timeouts: Timeouts) -> String? {
        switch (self, action) {
        case (.x(let expected), .exchange(let actual)):
            return expected.mismatch(actual, timeouts: timeouts)
        case (.respond(let status, let body, let has, let lacks), .respond(let actualStatus, let fields, let actualBody)):
            var wrong: [String] = []
            if status != actualStatus { wrong.append("status \(actualStatus), expected \(status)") }
            switch (body, actualBody) {
            case (.none, .none), (.relayed, .relayed): break
            case (.error(let code), .bytes(let bytes)):
                if !text(bytes).hasPrefix("{\"error\":\"\(code)\"") { wrong.append("body \(quoted(text(bytes))), expected error \(code)") }
            default: wrong.append("body \(actualBody), expected \(body)")
            }
            for (name, value) in has where fields.values(name) != [value] {
                wrong.append("\(name) is \(fields.values(name)), expected \(value)")
            }
            for name in lacks where fields.contains(name) { wrong.append("has \(name)") }
            if let upper = fields.first(where: { $0.name != $0.name.lowercased() }) { wrong.append("field name \(upper.name) not in lower case") }
            return wrong.isEmpty ? nil : wrong.joined(separator: ", ")
        case (.interim(let status), .interim(let actual, _)):
            return status == actual ? nil : "interim \(actual), expected \(status)"
        case (.endStream, .endStream):
            return nil
        case (.reset(let code), .reset(let actual)):
            return code == actual ? nil : "reset \(actual), expected \(code)"
        case (.frames(let expected), .relayWebSocket(let hop, let plan)):
            return expected.mismatch(plan.map { .relayWebSocket(hop, $0) } ?? .splice(hop), timeouts: timeouts)
        default:
            return "expected \(self)"
        }
    }

    var description: String {
        switch self {
        case .x(let expected): "\(expected)"
        case .respond(let status, let body, let has, let lacks): "respond(\(status), \(body), has: \(has), lacks: \(lacks))"
        case .interim(let status): "interim(\(status))"
        case .endStream: "endStream"
        case .reset(let code): "reset(\(code))"
        case .frames(let expected): "frames(\(expected))"
        }
    }
}

func describe(_ action: StreamAction) -> String {
    switch action {
    case .exchange(let action): describe(action)
    case .respond(let status, let fields, .bytes(let bytes)):
        "respond(\(status), \(fields.map { "\($0.name): \($0.value)" }), \(quoted(text(bytes))))"
    default: "\(action)"
    }
}

/// One stream's machine, what was fed to it and what it returned.
struct StreamBook {
    private(set) var machine: StreamMachine
    let fixture: Fixture
    let settings: ConnectionMachine.Settings
    var ids = RequestIDGenerator(seed: Playbook.seed)
    var now: UInt64 = 1_000_000
    /// Every action returned so far, in order.
    private(set) var actions: [StreamAction] = []

    init(
        _ fixture: Fixture = .stripEverything, mode: ConnectionMode = .forwardProxy, proto: ExchangeRecord.ClientProtocol = .h2c,
        facts: ConnectionFacts? = nil
    ) {
        self.fixture = fixture
        let configuration = fixture.configuration
        settings = ConnectionMachine.Settings(
            timeouts: configuration.timeouts, limits: configuration.limits,
            admission: .init(tunnel: configuration.tls.tunnel, canIntercept: !fixture.scope.interceptHosts.isEmpty))
        machine = StreamMachine(settings: settings, mode: mode, facts: facts ?? ConnectionFacts(peer: Playbook.peer), proto: proto)
        machine.toleratesImpossibleEvents = true
        machine.makeWebSocketKey = { StreamBook.webSocketKey }
    }

    /// The Sec-WebSocket-Key an RFC 8441 stream's upgrade request carries here, and the accept
    /// that answers it (RFC 6455 §1.3's sample).
    static let webSocketKey = "dGhlIHNhbXBsZSBub25jZQ=="
    static let webSocketAccept = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="

    /// The header block arrives; checks what comes back (and that nothing was impossible).
    @discardableResult
    mutating func start(
        _ fields: [H2HeaderField], endStream: Bool = true, _ expected: [StreamExpect], sourceLocation: SourceLocation = #_sourceLocation
    ) -> [StreamAction] {
        var returned: [StreamAction] = []
        machine.start(
            fields, endStream: endStream, headBytes: 40, Arrival(now: now, scope: fixture.scope), ids: &ids, into: &returned)
        check("start", returned, expected, sourceLocation)
        return returned
    }

    @discardableResult
    mutating func on(_ event: ConnectionEvent, _ expected: [StreamExpect], sourceLocation: SourceLocation = #_sourceLocation) -> [StreamAction] {
        let impossibleBefore = machine.impossibleEvents
        let returned = machine.handle(event)
        check("\(event)", returned, expected, sourceLocation)
        if machine.impossibleEvents != impossibleBefore {
            Issue.record("after \(event): taken for impossible (\(machine.lastImpossible.map { "\($0)" } ?? "?"))", sourceLocation: sourceLocation)
        }
        return returned
    }

    /// Feeds `event` and checks that nothing comes back and it was dropped as stale for `reason`.
    mutating func ignores(_ event: ConnectionEvent, as reason: StaleEvent, sourceLocation: SourceLocation = #_sourceLocation) {
        on(event, [], sourceLocation: sourceLocation)
        #expect(machine.lastIgnored == reason, "dropped for another reason: \(event)", sourceLocation: sourceLocation)
    }

    /// Feeds `event` without checking what comes back.
    @discardableResult
    mutating func feed(_ event: ConnectionEvent) -> [StreamAction] {
        let returned = machine.handle(event)
        actions += returned
        return returned
    }

    /// Starts without checking what comes back.
    @discardableResult
    mutating func feedStart(_ fields: [H2HeaderField], endStream: Bool = true) -> [StreamAction] {
        var returned: [StreamAction] = []
        machine.start(
            fields, endStream: endStream, headBytes: 40, Arrival(now: now, scope: fixture.scope), ids: &ids, into: &returned)
        actions += returned
        return returned
    }

    private mutating func check(_ event: String, _ returned: [StreamAction], _ expected: [StreamExpect], _ location: SourceLocation) {
        actions += returned
        var problems: [String] = []
        if returned.count != expected.count { problems.append("\(returned.count) actions, expected \(expected.count)") }
        for index in 0..<min(returned.count, expected.count) {
            if let why = expected[index].mismatch(returned[index], timeouts: settings.timeouts) { problems.append("action \(index): \(why)") }
        }
        guard !problems.isEmpty else { return }
        let actual = returned.enumerated().map { "    \($0.offset): \(describe($0.element))" }.joined(separator: "\n")
        Issue.record("after \(event):\n  \(problems.joined(separator: "\n  "))\n  returned:\n\(actual)", sourceLocation: location)
    }

    var emitted: [ExchangeRecord] {
        actions.compactMap { if case .exchange(.emit(let record)) = $0 { record } else { nil } }
    }

    var released: [HopID] {
        actions.compactMap { if case .exchange(.releaseUpstream(let hop, _)) = $0 { hop } else { nil } }
    }

    var connected: [HopID] {
        actions.compactMap { if case .exchange(.connect(let hop, _, _, _, _)) = $0 { hop } else { nil } }
    }

    /// Final responses (HEADERS with a status >= 200) handed to the engine.
    var finalResponses: Int {
        actions.filter { if case .respond = $0 { true } else { false } }.count
    }

    func sent(to hop: HopID) -> String? {
        actions.reversed().lazy.compactMap { if case .exchange(.sendToUpstream(hop, let bytes)) = $0 { text(bytes) } else { nil } }.first
    }

    /// The proxy's own answer, if it gave one: status, fields, body.
    var answer: (status: Int, fields: HTTPFields, body: [UInt8])? {
        for case .respond(let status, let fields, .bytes(let body)) in actions { return (status, fields, body) }
        return nil
    }
}
