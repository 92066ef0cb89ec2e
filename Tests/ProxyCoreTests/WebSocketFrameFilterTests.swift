import HTTP1Codec
import ScopePolicy
import SecretScan
import Testing

@testable import ProxyCore

/// The WebSocket frame filter alone (docs/security-model.md): client frames through the guard and
/// placeholder substitution, origin frames through the scrub, each message's payload one stream.
/// Assertions compare messages and findings; a failing one names offsets, never a payload.
@Suite("WebSocket frame filter: guard, placeholders and scrub over messages")
struct WebSocketFrameFilterTests {
    static let value = Array("VAL-0123456789abcdef-xyz".utf8)
    static let other = Array("VAL-fedcba9876543210-xyz".utf8)  // same length, another value
    static let placeholder = Array("scopeproxy-ph-0123456789abcdef".utf8)
    static let substituted = Array("SUBSTITUTED-VALUE".utf8)

    /// A watch as the index builds one: every encoding of each value, placeholders plain.
    static func watch(values: [String: [UInt8]], placeholders: [String: [UInt8]] = [:]) -> SecretWatch {
        var names: [String] = []
        var bytes: [[UInt8]] = []
        var isPlaceholder: [Bool] = []
        for (name, value) in values.sorted(by: { $0.key < $1.key }) {
            for variant in SecretValueIndex.variants(of: value) { names.append(name); bytes.append(variant); isPlaceholder.append(false) }
        }
        for (name, text) in placeholders.sorted(by: { $0.key < $1.key }) {
            names.append(name); bytes.append(text); isPlaceholder.append(true)
        }
        let longest = bytes.map(\.count).max() ?? 0
        return SecretWatch(scanner: SecretScanner(secrets: bytes), secrets: names, placeholders: isPlaceholder, holdBack: longest + 7)
    }

    static let origin = try! Origin.parse("http://ws.test")

    /// Built once each: a scanner per split point made these tests slow.
    static let guarding = makePlan(value: value, substitute: false)
    static let guardingOther = makePlan(value: other, substitute: false)
    static let substituting = makePlan(value: value, substitute: true)

    static func plan(value: [UInt8] = value, substitute: Bool = false) -> WebSocketFramePlan {
        substitute ? substituting : value == Self.value ? guarding : guardingOther
    }

    static func makePlan(value: [UInt8], substitute: Bool) -> WebSocketFramePlan {
        let egress = watch(values: ["api": value], placeholders: ["gh": placeholder])
        return WebSocketFramePlan(
            egress: egress,
            substitutions: substitute ? ["gh": .init(placeholder: placeholder, value: substituted)] : [:],
            scrub: watch(values: ["api": value]), origin: origin)
    }

    /// A fixed key sequence: outputs are comparable byte for byte.
    static func keys() -> () -> UInt32 {
        var next: UInt32 = 0x1234_5678
        return {
            next = next &* 1_664_525 &+ 1_013_904_223
            return next
        }
    }

    static func clientFrame(_ opcode: WebSocketOpcode, _ payload: [UInt8], fin: Bool = true) -> [UInt8] {
        WebSocketFrameEncoder.frame(fin: fin, opcode: opcode, payload: payload, maskingKey: 0xA1B2_C3D4)
    }

    static func originFrame(_ opcode: WebSocketOpcode, _ payload: [UInt8], fin: Bool = true) -> [UInt8] {
        WebSocketFrameEncoder.frame(fin: fin, opcode: opcode, payload: payload, maskingKey: nil)
    }

    /// What the other side reads from the filter's output: whole messages (fragments joined) and
    /// control frames, in order.
    static func messages(_ output: [UInt8], from sender: WebSocketSender) -> [(WebSocketOpcode, [UInt8])] {
        var decoder = WebSocketFrameDecoder(sender: sender)
        var result: [(WebSocketOpcode, [UInt8])] = []
        var message: (WebSocketOpcode, [UInt8])?
        var frame: WebSocketFrameHeader?
        var control: [UInt8] = []
        for event in decoder.feed(output) {
            switch event {
            case .header(let header):
                frame = header
                if header.opcode.isControl { control = [] } else if header.opcode != .continuation { message = (header.opcode, []) }
            case .payload(let bytes):
                if frame!.opcode.isControl { control += bytes } else { message!.1 += bytes }
            case .frameEnd:
                if frame!.opcode.isControl {
                    result.append((frame!.opcode, control))
                } else if frame!.fin {
                    result.append(message!)
                    message = nil
                }
            case .protocolError(let error):
                Issue.record("the filter wrote frames that are not RFC 6455: \(error)")
            }
        }
        return result
    }

    static func run(_ sender: WebSocketSender, _ plan: WebSocketFramePlan, _ pieces: [[UInt8]]) -> (output: [UInt8], filter: WebSocketFrameFilter) {
        var filter = WebSocketFrameFilter(sender: sender, plan: plan, maskingKey: keys())
        var output: [UInt8] = []
        for piece in pieces { filter.feed(piece, into: &output) }
        return (output, filter)
    }

    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard haystack.count >= needle.count else { return false }
        return (0...(haystack.count - needle.count)).contains { haystack[$0..<($0 + needle.count)].elementsEqual(needle) }
    }

    @Test("a value in a client text frame: stopped, nothing of that frame or after it is written")
    func valueInClientFrameStops() {
        let stream =
            Self.clientFrame(.text, Array("hello".utf8)) + Self.clientFrame(.text, Array("token=".utf8) + Self.value + [0x3B])
            + Self.clientFrame(.text, Array("after".utf8))
        for pieces in splits(of: stream) {
            let (output, filter) = Self.run(.client, Self.plan(), pieces)
            guard case .secret(let finding) = filter.stopped else {
                Issue.record("not stopped, split \(pieces.map(\.count))")
                continue
            }
            #expect(finding.secret == "api" && !finding.isPlaceholder)
            let forwarded = Self.messages(output, from: .client)
            #expect(forwarded.count <= 1, "at most the message before it, split \(pieces.map(\.count))")
            #expect(forwarded.allSatisfy { $0.1 == Array("hello".utf8) })
        }
    }

    @Test("a value split across two fragments of one message (a ping between them) is found")
    func valueSplitAcrossFragments() {
        let half = Self.value.count / 2
        let stream =
            Self.clientFrame(.binary, Array("x=".utf8) + Self.value[..<half], fin: false) + Self.clientFrame(.ping, [1])
            + Self.clientFrame(.continuation, Array(Self.value[half...]))
        for pieces in splits(of: stream) {
            let (output, filter) = Self.run(.client, Self.plan(), pieces)
            #expect(filter.stopped == .secret(SecretFinding(secret: "api", encoding: .raw, isPlaceholder: false)))
            #expect(Self.messages(output, from: .client).allSatisfy { $0.0 == .ping }, "only the ping went out")
        }
    }

    @Test("a placeholder in a client frame is replaced for a plan that substitutes it, at every split point; the frames are re-framed")
    func placeholderSubstituted() {
        let payload = Array("{\"auth\":\"".utf8) + Self.placeholder + Array("\"}".utf8)
        let stream = Self.clientFrame(.text, payload)
        let expected = Array("{\"auth\":\"".utf8) + Self.substituted + Array("\"}".utf8)
        for pieces in splits(of: stream) {
            let (output, filter) = Self.run(.client, Self.plan(substitute: true), pieces)
            #expect(filter.stopped == nil)
            let forwarded = Self.messages(output, from: .client)
            #expect(forwarded.count == 1 && forwarded.first?.0 == .text && forwarded.first?.1 == expected, "split \(pieces.map(\.count))")
        }
    }

    @Test("a placeholder the plan does not substitute is refused: stopped, named as a placeholder")
    func placeholderRefused() {
        let (output, filter) = Self.run(.client, Self.plan(), [Self.clientFrame(.text, Array("a ".utf8) + Self.placeholder)])
        #expect(filter.stopped == .secret(SecretFinding(secret: "gh", encoding: .raw, isPlaceholder: true)))
        #expect(output.isEmpty)
    }

    @Test("an origin frame with a value is masked with `*`, same length, at every split point; control frames too")
    func originFrameScrubbed() {
        let payload = Array("leak ".utf8) + Self.value + Array(" end".utf8)
        let stream = Self.originFrame(.text, payload) + Self.originFrame(.ping, Self.value) + Self.originFrame(.close, [0x03, 0xE8])
        let masked = Array("leak ".utf8) + [UInt8](repeating: 0x2A, count: Self.value.count) + Array(" end".utf8)
        for pieces in splits(of: stream) {
            var (output, filter) = Self.run(.server, Self.plan(), pieces)
            let forwarded = Self.messages(output, from: .server)
            #expect(forwarded.map(\.0) == [.text, .ping, .close])
            #expect(forwarded.first?.1 == masked)
            #expect(forwarded.dropFirst().first?.1 == [UInt8](repeating: 0x2A, count: Self.value.count))
            #expect(forwarded.last?.1 == [0x03, 0xE8])
            #expect(filter.takeFindings()?.map(\.secret) == ["api"], "each form named once")
            var repeated: [String: UInt64] = [:]
            filter.takeRepeats { repeated[$0] = $1 }
            #expect(repeated == ["api": 1], "the ping's match of the same form is counted, not named again")
            #expect(filter.maskedMatches == 2)
        }
    }

    @Test("ping, pong and close from the client pass, masked with a fresh key towards the origin")
    func controlFramesPass() {
        let stream = Self.clientFrame(.ping, [1, 2]) + Self.clientFrame(.pong, []) + Self.clientFrame(.close, [0x03, 0xE8, 0x62, 0x79])
        let (output, filter) = Self.run(.client, Self.plan(), [stream])
        #expect(filter.stopped == nil)
        let forwarded = Self.messages(output, from: .client)  // decodes only if every frame is masked
        #expect(forwarded.map(\.0) == [.ping, .pong, .close])
        #expect(forwarded.map(\.1) == [[1, 2], [], [0x03, 0xE8, 0x62, 0x79]])
    }

    @Test("frames from the wrong side: an unmasked client frame or a masked origin frame stops the filter (RFC 6455 §5.1)")
    func maskingRules() {
        let unmasked = Self.run(.client, Self.plan(), [Self.originFrame(.text, [0x61])])
        #expect(unmasked.filter.stopped == .protocolError(.maskMissing))
        #expect(unmasked.output.isEmpty)
        let masked = Self.run(.server, Self.plan(), [Self.clientFrame(.text, [0x61])])
        #expect(masked.filter.stopped == .protocolError(.maskUnexpected))
    }

    @Test("a value at the end of a frame fed in small pieces: nothing of that frame reaches the origin, the idle release included")
    func frameCarryingValueHeldWhole() {
        var filter = WebSocketFrameFilter(sender: .client, plan: Self.plan(), maskingKey: Self.keys())
        var output: [UInt8] = []
        let frame = Self.clientFrame(.text, [UInt8](repeating: 0x61, count: 1000) + Self.value)
        for start in stride(from: 0, to: frame.count, by: 50) {
            filter.feed(Array(frame[start..<min(frame.count, start + 50)]), into: &output)
            filter.releaseHeld(into: &output)  // the idle time may run out between any two pieces
        }
        #expect(filter.stopped == .secret(SecretFinding(secret: "api", encoding: .raw, isPlaceholder: false)))
        #expect(output.isEmpty, "\(output.count) bytes of the frame went out")
    }

    @Test("a frame over the whole-frame limit streams: all but the hold-back leaves before the frame ends")
    func longFrameStreams() {
        var filter = WebSocketFrameFilter(sender: .client, plan: Self.plan(), maskingKey: Self.keys())
        var output: [UInt8] = []
        let length = WebSocketFrameFilter.wholeFrameLimit + 1000
        let frame = Self.clientFrame(.binary, [UInt8](repeating: 0x62, count: length))
        filter.feed(Array(frame.dropLast(10)), into: &output)
        let holdBack = Self.plan().egress!.holdBack
        #expect(filter.heldBytes == holdBack)
        #expect(output.count > length - 10 - holdBack)
        filter.feed(Array(frame.suffix(10)), into: &output)
        #expect(Self.messages(output, from: .client).first?.1.count == length)
    }

    @Test("hold-back: the last bytes of an unfinished message wait, and the idle release lets them out as a fragment")
    func idleRelease() {
        var filter = WebSocketFrameFilter(sender: .client, plan: Self.plan(), maskingKey: Self.keys())
        var output: [UInt8] = []
        let payload = [UInt8](repeating: 0x61, count: 100)
        filter.feed(Self.clientFrame(.text, payload, fin: false), into: &output)
        let holdBack = Self.plan().egress!.holdBack
        #expect(filter.heldBytes == holdBack, "a whole frame went, all but the hold-back")
        filter.releaseHeld(into: &output)
        #expect(filter.heldBytes == 0)
        filter.feed(Self.clientFrame(.continuation, []), into: &output)
        let forwarded = Self.messages(output, from: .client)
        #expect(forwarded.count == 1 && forwarded.first?.1 == payload)
    }

    /// No oracle: for traffic that carries neither, two configurations whose values differ only in
    /// value (equal lengths) write the same bytes, at every split point.
    @Test("no oracle: the same frames out whichever value (of the same length) is watched")
    func noOracle() {
        let stream =
            Self.clientFrame(.text, Array("VAL-0123456789abcdef-xy".utf8), fin: false) + Self.clientFrame(.continuation, Array("Q".utf8))
            + Self.clientFrame(.binary, Array("VAL-fedcba".utf8))
        for pieces in splits(of: stream) {
            let one = Self.run(.client, Self.plan(value: Self.value), pieces).output
            let two = Self.run(.client, Self.plan(value: Self.other), pieces).output
            #expect(one == two, "split \(pieces.map(\.count))")
        }
    }
}

/// Every way to cut `input` in two, plus one byte at a time and whole.
private func splits(of input: [UInt8]) -> [[[UInt8]]] {
    var result: [[[UInt8]]] = [[input], input.map { [$0] }]
    for cut in 1..<max(1, input.count) { result.append([Array(input[..<cut]), Array(input[cut...])]) }
    return result
}
