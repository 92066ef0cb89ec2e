import HTTP1Codec
import ScopePolicy
import SecretScan

/// What a WebSocket's frames are read with, fixed when its upgrade request's hop is planned
/// (`HopPlanner`, step "WebSocket frames"): client frames pass the egress guard and have the
/// placeholders this origin's scopes substitute replaced; origin frames pass the response scrub.
public struct WebSocketFramePlan: Sendable, Equatable {
    /// A placeholder replaced by its secret's value in client frames (its plain form only, as in a header).
    public struct Substitution: Sendable, Equatable {
        public let placeholder: [UInt8]
        public let value: [UInt8]

        public init(placeholder: [UInt8], value: [UInt8]) {
            self.placeholder = placeholder
            self.value = value
        }
    }

    /// Client frames: values this origin may not receive, and every placeholder (nil: nothing watched).
    public let egress: SecretWatch?
    /// By secret name: the placeholders of this watch that are replaced rather than refused.
    public let substitutions: [String: Substitution]
    /// Origin frames: the values masked with `*` (nil: nothing to mask).
    public let scrub: SecretWatch?
    /// The origin the frames go to, and why each placeholder not replaced for it is refused (the
    /// line's `placeholder_out_of_scope` message), decided with the upgrade request's facts.
    public let origin: Origin
    public let refusals: [String: PlaceholderRefusal]

    public init(
        egress: SecretWatch?, substitutions: [String: Substitution], scrub: SecretWatch?, origin: Origin,
        refusals: [String: PlaceholderRefusal] = [:]
    ) {
        self.egress = egress
        self.substitutions = substitutions
        self.scrub = scrub
        self.origin = origin
        self.refusals = refusals
    }
}

/// One direction of a WebSocket read frame by frame: decodes what arrives (any split), filters each
/// message's payload as one stream, and re-frames what may leave.
///
/// Re-framing: a message goes out as fragments (RFC 6455 §5.4 lets an intermediary change the
/// fragmentation when no extension was negotiated, and the proxy lets none through): each run of
/// payload bytes the filter releases becomes one frame, and the message's end is a FIN frame with
/// what was still held. A frame is never held whole, whatever its length: memory is the hold-back
/// plus one piece. Control frames (at most 125 bytes, §5.5) are filtered whole and pass between
/// fragments as they came. Frames towards an origin are masked with a fresh key (§5.3).
///
/// No oracle (docs/security-model.md, "No oracle"): the filter holds back the message's last
/// `holdBack` bytes (the watch's, fixed by the configuration), released when more bytes come, when
/// the message ends, or when the caller's idle timer calls `releaseHeld`, never because of what they
/// are. The guard stops at a value (or a placeholder this origin may not receive): nothing more
/// leaves, the value's bytes never.
public struct WebSocketFrameFilter {
    public enum Stop: Sendable, Equatable {
        case secret(SecretFinding)
        case protocolError(WebSocketFrameError)
    }

    private enum Inspection {
        /// Client → origin: the egress guard, with placeholder substitution.
        case egress(SecretWatch, [String: WebSocketFramePlan.Substitution])
        /// Origin → client: the scrub.
        case scrub(SecretWatch)
        case none
    }

    /// The guard holds a data frame up to this long whole until it is complete, so that nothing of
    /// a frame that carries a value reaches the origin; a longer frame is streamed (memory stays
    /// bounded) and only its last hold-back bytes wait. Frame lengths are the client's, not the
    /// secrets': what leaves still depends on no value.
    public static let wholeFrameLimit = 64 * 1024

    public let sender: WebSocketSender
    private var decoder: WebSocketFrameDecoder
    private let inspection: Inspection
    private let maskingKey: () -> UInt32
    private let holdBack: Int

    /// The data message under way: its opcode, and whether a fragment of it went out already.
    private var messageOpcode: WebSocketOpcode?
    private var emittedInMessage = false
    /// The frame being read, and a control frame's payload so far (≤ 125 bytes).
    private var frame: WebSocketFrameHeader?
    /// Guard: the stream offset where the current data frame's payload starts, and whether it is
    /// held until it is complete (a frame no longer than `wholeFrameLimit`).
    private var frameStart = 0
    private var frameHeldWhole = false
    private var control: [UInt8] = []

    // The current message's filter state.
    private var stream: SecretScanStream?
    /// Guard: message bytes taken but not released (the stream's last `held.count` bytes).
    private var held: [UInt8] = []
    /// Guard: substitutable placeholders found in what is held (stream ranges), oldest first.
    private var replacements: [(range: Range<Int>, value: [UInt8])] = []
    private var scrubber: SecretScrubber?

    public private(set) var stopped: Stop?
    /// Scrub findings not yet taken; each pattern is reported once per connection direction.
    private var unreported: [SecretFinding] = []
    private var reportedPatterns: Set<Int> = []
    /// Matches masked, all of them, and those of forms already reported, per secret.
    public private(set) var maskedMatches: UInt64 = 0
    private var repeats: [String: UInt64] = [:]

    /// `plan`: what to inspect with (nil: frames are checked and re-framed, nothing is inspected).
    /// `maskingKey`: a fresh unpredictable key per frame sent to an origin (§5.3).
    public init(sender: WebSocketSender, plan: WebSocketFramePlan?, maskingKey: @escaping () -> UInt32) {
        self.sender = sender
        decoder = WebSocketFrameDecoder(sender: sender)
        self.maskingKey = maskingKey
        switch sender {
        case .client:
            if let watch = plan?.egress, !watch.scanner.patterns.isEmpty {
                inspection = .egress(watch, plan?.substitutions ?? [:])
            } else {
                inspection = .none
            }
        case .server:
            if let watch = plan?.scrub, !watch.scanner.patterns.isEmpty { inspection = .scrub(watch) } else { inspection = .none }
        }
        switch inspection {
        case .egress(let watch, _), .scrub(let watch): holdBack = watch.holdBack
        case .none: holdBack = 0
        }
    }

    /// Bytes held for the filter now (the caller arms its idle timer while this is positive).
    public var heldBytes: Int { held.count + (scrubber?.held ?? 0) }

    /// Decodes `piece` and appends to `output` the frames that may leave now. After a stop, nothing
    /// more is read or written.
    public mutating func feed(_ piece: UnsafeBufferPointer<UInt8>, into output: inout [UInt8]) {
        guard stopped == nil else { return }
        for event in decoder.feed(piece) {
            switch event {
            case .protocolError(let error):
                stopped = .protocolError(error)
            case .header(let header):
                frame = header
                if header.opcode.isControl {
                    control.removeAll(keepingCapacity: true)
                } else {
                    if header.opcode != .continuation { startMessage(header.opcode) }
                    // The guard keeps a frame up to `wholeFrameLimit` until it is complete.
                    frameStart = stream?.offset ?? 0
                    frameHeldWhole = header.payloadLength <= UInt64(Self.wholeFrameLimit)
                }
            case .payload(let bytes):
                guard let frame else { continue }
                if frame.opcode.isControl {
                    control += bytes
                } else {
                    let released = filterData(bytes)
                    if stopped == nil { emitFragment(released, fin: false, into: &output) }
                }
            case .frameEnd:
                guard let header = frame else { continue }
                frame = nil
                if header.opcode.isControl {
                    emitControl(header.opcode, into: &output)
                } else if header.fin {
                    let rest = finishMessage()
                    emitFragment(rest, fin: true, into: &output)
                    messageOpcode = nil
                } else {
                    // A whole frame held by the guard may go now, all but the hold-back.
                    frameHeldWhole = false
                    emitFragment(releaseGuarded(), fin: false, into: &output)
                }
            }
            if stopped != nil { return }
        }
    }

    public mutating func feed(_ piece: [UInt8], into output: inout [UInt8]) {
        piece.withUnsafeBufferPointer { feed($0, into: &output) }
    }

    /// The idle time ran out with no new byte: what is held leaves as a fragment (the scan keeps
    /// its state, so a value completed later is still stopped or masked).
    public mutating func releaseHeld(into output: inout [UInt8]) {
        guard stopped == nil, messageOpcode != nil, heldBytes > 0 else { return }
        emitFragment(finishMessage(keepScanning: true), fin: false, into: &output)
    }

    /// Scrub findings since the last call, each form once.
    public mutating func takeFindings() -> [SecretFinding]? {
        guard !unreported.isEmpty else { return nil }
        defer { unreported.removeAll() }
        return unreported
    }

    // MARK: Messages

    private mutating func startMessage(_ opcode: WebSocketOpcode) {
        messageOpcode = opcode
        emittedInMessage = false
        held.removeAll(keepingCapacity: true)
        replacements.removeAll()
        switch inspection {
        case .egress(let watch, _):
            stream = watch.scanner.makeStream()
        case .scrub(let watch):
            scrubber = SecretScrubber(scanner: watch.scanner, holdBack: holdBack)
        case .none:
            break
        }
    }

    /// The message's next payload bytes; returns what may leave now.
    private mutating func filterData(_ bytes: [UInt8]) -> [UInt8] {
        switch inspection {
        case .none:
            return bytes
        case .scrub(let watch):
            var output: [UInt8] = []
            var matches: [SecretMatch] = []
            scrubber!.scrub(bytes, into: &output) { matches.append($0) }
            for match in matches { masked(match, watch) }
            return output
        case .egress(let watch, let substitutions):
            return guardData(bytes, watch, substitutions)
        }
    }

    private mutating func guardData(
        _ bytes: [UInt8], _ watch: SecretWatch, _ substitutions: [String: WebSocketFramePlan.Substitution]
    ) -> [UInt8] {
        let start = stream!.offset - held.count  // the stream offset of held[0]
        held += bytes
        var leak: SecretMatch?
        var found = replacements
        stream!.scan(bytes) { match in
            guard leak == nil else { return }
            let secret = watch.secrets[match.pattern.secret]
            if watch.placeholders[match.pattern.secret], let substitution = substitutions[secret],
                match.pattern.bytes == substitution.placeholder
            {
                // The same text found as two forms: replaced once.
                if let last = found.last, match.range.lowerBound < last.range.upperBound { return }
                // Its first bytes left with an idle release: it can no longer be replaced.
                if match.range.lowerBound >= start {
                    found.append((match.range, substitution.value))
                    return
                }
            }
            leak = match
        }
        if let leak {
            stopped = .secret(watch.finding(leak))
            held.removeAll()
            replacements.removeAll()
            return []
        }
        replacements = found
        return releaseGuarded()
    }

    /// Guard: what may leave now: all but the last `holdBack` bytes, and nothing of a frame held
    /// whole until it ends; a placeholder the cut would split goes whole.
    private mutating func releaseGuarded() -> [UInt8] {
        guard case .egress = inspection, let stream else { return [] }
        let start = stream.offset - held.count
        var safeEnd = max(start, stream.offset - holdBack)
        if frameHeldWhole { safeEnd = min(safeEnd, max(start, frameStart)) }
        return release(upTo: keepingPlaceholdersWhole(safeEnd), from: start)
    }

    /// `end`, moved past a placeholder to be replaced that it would cut.
    private func keepingPlaceholdersWhole(_ end: Int) -> Int {
        var end = end
        for replacement in replacements where replacement.range.lowerBound < end {
            end = max(end, replacement.range.upperBound)
        }
        return end
    }

    /// Held bytes up to stream offset `end`, with their placeholders replaced; the rest stays held.
    private mutating func release(upTo end: Int, from start: Int) -> [UInt8] {
        let count = end - start
        guard count > 0 else { return [] }
        var output: [UInt8] = []
        output.reserveCapacity(count)
        var copied = start
        while let first = replacements.first, first.range.upperBound <= end {
            output += held[(copied - start)..<(first.range.lowerBound - start)]
            output += first.value
            copied = first.range.upperBound
            replacements.removeFirst()
        }
        output += held[(copied - start)..<count]
        held.removeFirst(count)
        return output
    }

    /// The message ended (or the idle time ran out, `keepScanning`): everything held may go.
    private mutating func finishMessage(keepScanning: Bool = false) -> [UInt8] {
        switch inspection {
        case .none:
            return []
        case .scrub:
            var output: [UInt8] = []
            scrubber?.finish(into: &output)
            return output
        case .egress:
            guard let stream else { return [] }
            let start = stream.offset - held.count
            // An idle release lets the hold-back go, never part of a frame held whole: the origin
            // could not read a partial frame anyway.
            let end = keepScanning && frameHeldWhole ? max(start, frameStart) : stream.offset
            return release(upTo: keepingPlaceholdersWhole(end), from: start)
        }
    }

    private mutating func masked(_ match: SecretMatch, _ watch: SecretWatch) {
        maskedMatches += 1
        if reportedPatterns.insert(match.pattern.id).inserted {
            unreported.append(watch.finding(match))
        } else {
            repeats[watch.secrets[match.pattern.secret], default: 0] += 1
        }
    }

    /// Matches of forms already reported, per secret name, since the last call: the metric counts
    /// every match masked, the line names each form once.
    public mutating func takeRepeats(_ body: (_ secret: String, _ count: UInt64) -> Void) {
        guard !repeats.isEmpty else { return }
        for (secret, count) in repeats.sorted(by: { $0.key < $1.key }) { body(secret, count) }
        repeats.removeAll()
    }

    // MARK: Writing frames

    /// One fragment of the current message; nothing for an empty non-final run (it would say nothing).
    private mutating func emitFragment(_ payload: [UInt8], fin: Bool, into output: inout [UInt8]) {
        guard let opcode = messageOpcode, fin || !payload.isEmpty else { return }
        output += WebSocketFrameEncoder.frame(
            fin: fin, opcode: emittedInMessage ? .continuation : opcode, payload: payload, maskingKey: outgoingKey())
        emittedInMessage = true
    }

    /// A whole control frame: guarded (no substitution in a ping or a close reason) or scrubbed.
    private mutating func emitControl(_ opcode: WebSocketOpcode, into output: inout [UInt8]) {
        var payload = control
        switch inspection {
        case .none:
            break
        case .egress(let watch, _):
            if let match = watch.firstMatch(in: payload) {
                stopped = .secret(watch.finding(match))
                return
            }
        case .scrub(let watch):
            var scrubber = SecretScrubber(scanner: watch.scanner, holdBack: holdBack)
            var scrubbed: [UInt8] = []
            var matches: [SecretMatch] = []
            scrubber.scrub(payload, into: &scrubbed) { matches.append($0) }
            scrubber.finish(into: &scrubbed)
            for match in matches { masked(match, watch) }
            payload = scrubbed
        }
        output += WebSocketFrameEncoder.frame(fin: true, opcode: opcode, payload: payload, maskingKey: outgoingKey())
    }

    /// Frames to an origin are masked (they come from a client); frames to a client are not.
    private func outgoingKey() -> UInt32? { sender == .client ? maskingKey() : nil }

    /// The close frame the proxy sends when it ends the WebSocket: `toOrigin` masked (§5.3).
    public static func closeFrame(code: UInt16, toOrigin: Bool, maskingKey: () -> UInt32) -> [UInt8] {
        WebSocketFrameEncoder.close(code: code, maskingKey: toOrigin ? maskingKey() : nil)
    }
}
