import CLibevent
import HTTP1Codec
import ProxyCore
import SecretScan
import Testing

@testable import ProxyEngine

// BodyPump with a filter, over real evbuffers: the response scrubber and the request egress guard,
// with values planted at every offset and the body split at every point. The values are canaries;
// assertions compare in Swift and report offsets and split points, never body bytes.

/// A made-up value with bytes that percent-encoding changes (`/`, `:`), so its forms differ.
private let canary: [UInt8] = Array("h15canary/Zq7:wXv3Lp9Rt".utf8)
private let otherCanary: [UInt8] = Array("h15other:Kd84nB2".utf8)
/// Filler no form of the canaries contains: a match can only be a planted one.
private let filler = UInt8(ascii: ".")

private func watch(_ values: [[UInt8]] = [canary], names: [String] = ["canary_token"], placeholders: [Bool]? = nil) -> SecretWatch {
    SecretWatch(
        scanner: SecretScanner(secrets: values), secrets: names,
        placeholders: placeholders ?? names.map { _ in false })
}

/// Every form the scanner looks for, once per encoding.
private let forms: [SecretPattern] = SecretScanner(secrets: [canary]).patterns

/// `count` filler bytes with `pattern` at `offset`.
private func planted(_ pattern: [UInt8], at offset: Int, total: Int) -> [UInt8] {
    var body = [UInt8](repeating: filler, count: total)
    body.replaceSubrange(offset..<(offset + pattern.count), with: pattern)
    return body
}

/// The reference scrub: every byte of every occurrence of every pattern masked (naive search).
private func naiveScrub(_ body: [UInt8], patterns: [[UInt8]]) -> [UInt8] {
    var output = body
    for pattern in patterns where !pattern.isEmpty && pattern.count <= body.count {
        for start in 0...(body.count - pattern.count) where Array(body[start..<(start + pattern.count)]) == pattern {
            for index in start..<(start + pattern.count) { output[index] = SecretScrubber.mask }
        }
    }
    return output
}

private func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
    guard !needle.isEmpty, needle.count <= haystack.count else { return needle.isEmpty }
    return (0...(haystack.count - needle.count)).contains { Array(haystack[$0..<($0 + needle.count)]) == needle }
}

/// The body as a chunked message: chunks of `chunkSize` (an extension on the first), a trailer.
private func chunkedWire(_ body: [UInt8], chunkSize: Int) -> [UInt8] {
    var wire: [UInt8] = []
    var start = 0
    while start < body.count {
        let end = min(start + chunkSize, body.count)
        wire += Array((String(end - start, radix: 16) + (start == 0 ? ";ext=1" : "") + "\r\n").utf8)
        wire += body[start..<end]
        wire += [13, 10]
        start = end
    }
    return wire + Array("0\r\nX-Trailer: t\r\n\r\n".utf8)
}

/// Decodes a chunked body the pump wrote: nil when its framing is wrong, or when it has a
/// zero-size chunk before the last (that would end the body early at the client).
private func dechunk(_ wire: [UInt8]) -> [UInt8]? {
    var body: [UInt8] = []
    var index = 0
    while true {
        guard let lineEnd = (index..<max(index, wire.count - 1)).first(where: { wire[$0] == 13 && wire[$0 + 1] == 10 }),
            let size = Int(String(decoding: wire[index..<lineEnd], as: UTF8.self), radix: 16)
        else { return nil }
        index = lineEnd + 2
        if size == 0 { return wire.count == index + 2 && wire[index] == 13 && wire[index + 1] == 10 ? body : nil }
        guard index + size + 2 <= wire.count, wire[index + size] == 13, wire[index + size + 1] == 10 else { return nil }
        body += wire[index..<(index + size)]
        index += size + 2
    }
}

/// Drives a pump the way the upstream leg does: bytes arrive piece by piece (each its own chain
/// in the source), the pump runs after each, and the destination is read out after every run.
private final class PumpDriver {
    let source = evbuffer_new()!
    let destination = evbuffer_new()!
    var pump: BodyPump
    var written: [UInt8] = []
    var findings: [SecretFinding] = []
    var blocked: SecretFinding?
    var completed = false
    /// Checked against everything written so far, after every run of the pump.
    var afterEachRun: (([UInt8]) -> Void)?
    /// The order of reports: "scrubbed" before "complete", nothing after "blocked".
    var reports: [String] = []
    var repeats: [String: UInt64] = [:]

    init(_ pump: BodyPump) { self.pump = pump }

    deinit {
        evbuffer_free(source)
        evbuffer_free(destination)
    }

    func feed(_ piece: ArraySlice<UInt8>, highWatermark: Int = .max) throws {
        if !piece.isEmpty {
            // A chain of its own, as a socket read makes: the pump must cross extent boundaries.
            let chain = evbuffer_new()!
            defer { evbuffer_free(chain) }
            _ = Array(piece).withUnsafeBytes { evbuffer_add(chain, $0.baseAddress, $0.count) }
            evbuffer_add_buffer(source, chain)
        }
        try run(highWatermark: highWatermark)
    }

    /// Runs the pump until it stops making headway (with a small watermark, one piece per run).
    func run(highWatermark: Int = .max) throws {
        while true {
            let before = (evbuffer_get_length(source), written.count)
            _ = try pump.pump(from: source, to: destination, highWatermark: highWatermark)
            collect()
            if (evbuffer_get_length(source), written.count) == before || completed || blocked != nil { return }
        }
    }

    /// The leg's idle timer ran out: what the filter holds goes now.
    func idleRelease() {
        pump.releaseHeld(to: destination)
        collect()
    }

    /// The origin closed (close-delimited bodies).
    func close() {
        pump.sourceClosed(destination: destination)
        collect()
    }

    private func collect() {
        let count = evbuffer_get_length(destination)
        if count > 0 {
            var bytes = [UInt8](repeating: 0, count: count)
            _ = bytes.withUnsafeMutableBytes { evbuffer_remove(destination, $0.baseAddress, count) }
            written += bytes
        }
        afterEachRun?(written)
        if let found = pump.takeFindings() {
            findings += found
            reports.append("scrubbed")
        }
        pump.takeRepeats { repeats[$0, default: 0] += $1 }
        if let leak = pump.takeBlock() {
            blocked = leak
            reports.append("blocked")
        }
        // The leg is released once the machine hears `complete`: a driver never reports it twice.
        if !completed, case .complete = pump.progress() {
            completed = true
            reports.append("complete")
        }
    }
}

/// Every way of cutting `wire` into pieces the tests use: two pieces at every split point, and
/// runs of equal small pieces (a value then spans three or more pieces).
private func splits(of wire: [UInt8]) -> [[ArraySlice<UInt8>]] {
    var result: [[ArraySlice<UInt8>]] = []
    for split in 0...wire.count { result.append([wire[..<split], wire[split...]]) }
    for size in 1...7 {
        result.append(stride(from: 0, to: wire.count, by: size).map { wire[$0..<min($0 + size, wire.count)] })
    }
    return result
}

@Suite("BodyPump filters: response scrub and egress guard over evbuffers")
struct BodyFilterPumpTests {
    enum Framing: CaseIterable {
        case contentLength
        case chunkedToChunked
        case chunkedToPlain
        case untilClose

        var inbound: BodyFraming {
            switch self {
            case .contentLength: .contentLength(0)  // replaced with the body's length
            case .chunkedToChunked, .chunkedToPlain: .chunked
            case .untilClose: .untilClose
            }
        }

        func pump(_ body: [UInt8], scrub: SecretWatch? = nil, guard egress: SecretWatch? = nil, observe: Int? = nil) -> BodyPump {
            switch self {
            case .contentLength:
                BodyPump(
                    inbound: .contentLength(UInt64(body.count)), outbound: .contentLength(UInt64(body.count)),
                    observe: observe, scrub: scrub, guard: egress)
            case .chunkedToChunked: BodyPump(inbound: .chunked, outbound: .chunked, observe: observe, scrub: scrub, guard: egress)
            case .chunkedToPlain: BodyPump(inbound: .chunked, outbound: .untilClose, observe: observe, scrub: scrub, guard: egress)
            case .untilClose: BodyPump(inbound: .untilClose, outbound: .untilClose, observe: observe, scrub: scrub, guard: egress)
            }
        }

        func wire(_ body: [UInt8]) -> [UInt8] {
            switch self {
            case .contentLength, .untilClose: body
            case .chunkedToChunked, .chunkedToPlain: chunkedWire(body, chunkSize: 7)
            }
        }

        /// The body the destination carries, or nil when its framing is wrong.
        func body(_ written: [UInt8]) -> [UInt8]? {
            self == .chunkedToChunked ? dechunk(written) : written
        }
    }

    // MARK: Scrub

    @Test("scrub: a value planted at every offset, split at every point, is masked, same length, reported", arguments: Framing.allCases)
    func scrubEveryOffsetEverySplit(_ framing: Framing) throws {
        let watch = watch()
        // Every form for the framings that matter most; the raw and a base64 form for the others.
        let patterns =
            framing == .contentLength || framing == .chunkedToChunked
            ? forms : forms.filter { $0.encoding == .raw || $0.encoding == .base64(alignment: 1) }
        var failures = 0
        for form in patterns {
            let total = form.bytes.count + 12
            for offset in 0...(total - form.bytes.count) {
                let body = planted(form.bytes, at: offset, total: total)
                let expected = naiveScrub(body, patterns: forms.map(\.bytes))
                let wire = framing.wire(body)
                for pieces in splits(of: wire) {
                    let driver = PumpDriver(framing.pump(body, scrub: watch))
                    for piece in pieces { try driver.feed(piece) }
                    if framing == .untilClose { driver.close() }
                    let output = framing.body(driver.written)
                    let masked = output == expected
                    let reported = driver.findings.contains { $0.secret == "canary_token" && $0.encoding == form.encoding }
                    let ordered = driver.reports.last == "complete" && driver.reports.filter { $0 == "complete" }.count == 1
                    if !(masked && reported && ordered && driver.completed) {
                        failures += 1
                        if failures <= 5 {
                            Issue.record(
                                "\(framing) \(form.encoding) offset \(offset) pieces \(pieces.map(\.count)): masked \(masked), reported \(reported), ordered \(ordered)"
                            )
                        }
                    }
                }
            }
        }
        #expect(failures == 0)
    }

    @Test("scrub: nothing else changes; a body without a value passes byte for byte with no finding", arguments: Framing.allCases)
    func scrubLeavesOtherBytes(_ framing: Framing) throws {
        // Near misses: the value less its last byte, and its first half at the very end.
        var body = Array("{\"token\":\"".utf8) + canary.dropLast() + Array("\",\"x\":\"".utf8) + canary.prefix(canary.count / 2)
        body += [UInt8(ascii: "\"")]
        for pieces in splits(of: framing.wire(body)) {
            let driver = PumpDriver(framing.pump(body, scrub: watch()))
            for piece in pieces { try driver.feed(piece) }
            if framing == .untilClose { driver.close() }
            let same = framing.body(driver.written) == body
            #expect(same, "\(framing) pieces \(pieces.map(\.count))")
            #expect(driver.findings.isEmpty && driver.completed)
        }
    }

    @Test("scrub: the last W bytes are held, whatever they are, and come out before complete in a chunk before the last")
    func scrubReleasesTailBeforeComplete() throws {
        // The body ends with the value's first bytes; ten bytes more than the hold-back arrived.
        let watch = watch()
        let body = [UInt8](repeating: filler, count: watch.holdBack + 2) + canary.prefix(8)
        let driver = PumpDriver(Framing.chunkedToChunked.pump(body, scrub: watch))
        try driver.feed(chunkedWire(body, chunkSize: 1000)[...])
        #expect(driver.completed)
        let decoded = dechunk(driver.written)
        #expect(decoded == .some(body))
        // Two data chunks: the 10 bytes before the last W at once, the W held ones at the end.
        let text = String(decoding: driver.written.filter { $0 < 0x80 && $0 != filler }, as: UTF8.self)
        #expect(text.hasPrefix("a\r\n\r\n" + String(watch.holdBack, radix: 16) + "\r\n"))
    }

    @Test(
        "scrub and guard: the idle release lets the held bytes out before the body ends, and only them",
        arguments: [Framing.contentLength, .chunkedToChunked])
    func idleReleaseMidBody(_ framing: Framing) throws {
        let event = Array("data: {\"n\":1}\n\n".utf8)
        let body = event + event
        for kind in ["scrub", "guard"] {
            let driver = PumpDriver(kind == "scrub" ? framing.pump(body, scrub: watch()) : framing.pump(body, guard: watch()))
            let wire = framing == .contentLength ? body : chunkedWire(body, chunkSize: event.count)
            // The first event and its framing, then a pause: nothing of it is out before the timer.
            let firstPart = framing == .contentLength ? event.count : (String(event.count, radix: 16) + ";ext=1\r\n").utf8.count + event.count + 2
            try driver.feed(wire[..<firstPart])
            #expect(driver.written.isEmpty, "\(kind) \(framing): held, shorter than W")
            #expect(driver.pump.holdsBack)
            driver.idleRelease()
            #expect(
                framing.body(driver.written + (framing == .chunkedToChunked ? Array("0\r\n\r\n".utf8) : [])) == event,
                "\(kind) \(framing): the first event left on the timer")
            #expect(!driver.pump.holdsBack && !driver.completed)
            try driver.feed(wire[firstPart...])
            #expect(framing.body(driver.written) == body && driver.completed, "\(kind) \(framing)")
        }
    }

    /// The pump-level noninterference property (docs/security-model.md, "No oracle"): two watches
    /// whose values differ only in their bytes, and traffic ending in prefixes of the first one's
    /// value; with idle releases at random points, every run writes the same bytes for both.
    @Test("scrub and guard: watches differing only in value write identical bytes for traffic carrying neither")
    func pumpNoninterference() throws {
        let first = Array("nonint-A-7Qx/9k:Zp".utf8)
        let second = Array("nonint-B-3Wm_1r.Yc".utf8)
        let holdBack = 8 * first.count + 8 - 1
        func lengthsOnly(_ value: [UInt8]) -> SecretWatch {
            SecretWatch(scanner: SecretScanner(secrets: [value]), secrets: ["token"], placeholders: [false], holdBack: holdBack)
        }
        var random = SplitMix(seed: 22)
        for round in 0..<60 {
            var pieces: [[UInt8]] = []
            var releases: Set<Int> = []
            for index in 0..<Int.random(in: 1...8, using: &random) {
                let prefix = Array(first.prefix(Int.random(in: 1..<first.count, using: &random)))
                let noise = (0..<Int.random(in: 0...90, using: &random)).map { _ in UInt8.random(in: 0x61...0x7A, using: &random) }
                pieces.append(Bool.random(using: &random) ? noise + prefix : prefix + noise)
                if Bool.random(using: &random) { releases.insert(index) }
            }
            let body = pieces.flatMap { $0 }
            for kind in ["scrub", "guard"] {
                var outputs: [[[UInt8]]] = []
                for value in [first, second] {
                    let watch = lengthsOnly(value)
                    let driver = PumpDriver(
                        kind == "scrub"
                            ? Framing.contentLength.pump(body, scrub: watch)
                            : Framing.contentLength.pump(body, guard: watch))
                    var steps: [[UInt8]] = []
                    for (index, piece) in pieces.enumerated() {
                        try driver.feed(piece[...])
                        steps.append(driver.written)
                        if releases.contains(index) { driver.idleRelease(); steps.append(driver.written) }
                    }
                    #expect(driver.completed && driver.blocked == nil && driver.written == body, "round \(round) \(kind)")
                    outputs.append(steps)
                }
                #expect(outputs[0] == outputs[1], "round \(round) \(kind): what left differs between the two values")
            }
        }
    }

    @Test("scrub: several values and repeats: each form named once, every match counted")
    func scrubRepeatsAreCounted() throws {
        let watch = watch([canary, otherCanary], names: ["canary_token", "other_token"])
        let separator = Array(" .. ".utf8)
        let body = canary + separator + otherCanary + separator + canary + separator + canary + separator + otherCanary
        let driver = PumpDriver(Framing.contentLength.pump(body, scrub: watch))
        for piece in splits(of: body)[5] { try driver.feed(piece) }
        #expect(driver.completed)
        #expect(driver.findings.map(\.secret).sorted() == ["canary_token", "other_token"])
        #expect(driver.repeats == ["canary_token": 2, "other_token": 1])
        let masked = driver.written.filter { $0 == SecretScrubber.mask }.count
        #expect(masked == 3 * canary.count + 2 * otherCanary.count)
    }

    @Test("scrub: a body larger than one filtered piece, values across the 16 KiB piece edges")
    func scrubLargePieces() throws {
        let total = 3 * BodyPump.filterPiece + 100
        var body = [UInt8](repeating: filler, count: total)
        let offsets = [0, BodyPump.filterPiece - 5, 2 * BodyPump.filterPiece - canary.count, 2 * BodyPump.filterPiece + 1, total - canary.count]
        for offset in offsets { body.replaceSubrange(offset..<(offset + canary.count), with: canary) }
        for framing in [Framing.contentLength, .chunkedToChunked] {
            // One big chain (a large socket read), and with a small watermark (backpressure).
            for highWatermark in [Int.max, 1000] {
                let wire = framing == .chunkedToChunked ? chunkedWire(body, chunkSize: 20_000) : body
                let driver = PumpDriver(framing.pump(body, scrub: watch()))
                try driver.feed(wire[...], highWatermark: highWatermark)
                let output = framing.body(driver.written)
                #expect(output?.count == body.count && driver.completed, "\(framing) watermark \(highWatermark)")
                let expected = naiveScrub(body, patterns: forms.map(\.bytes))
                let masked = output == expected
                #expect(masked, "\(framing) watermark \(highWatermark)")
                #expect(driver.repeats["canary_token"] == UInt64(offsets.count - 1))
            }
        }
    }

    @Test("scrub: the log's observed bytes are the scrubbed ones")
    func scrubObservesMaskedBytes() throws {
        let body = Array("token=".utf8) + canary + Array("&end".utf8)
        let driver = PumpDriver(Framing.contentLength.pump(body, scrub: watch(), observe: 1024))
        for piece in splits(of: body)[3] { try driver.feed(piece) }
        let observed = driver.pump.observed ?? []
        #expect(observed.count == body.count)
        #expect(!contains(observed, canary))
        #expect(observed == driver.written)
    }

    // MARK: Guard

    @Test(
        "guard: a value at every offset never reaches the destination; exactly the prefix before it goes; blocked, never complete",
        arguments: [Framing.contentLength, .chunkedToChunked])
    func guardEveryOffset(_ framing: Framing) throws {
        let watch = watch()
        var failures = 0
        for form in forms {
            let total = form.bytes.count + 12
            for offset in 0...(total - form.bytes.count) {
                let body = planted(form.bytes, at: offset, total: total)
                for pieces in splits(of: framing.wire(body)) {
                    let driver = PumpDriver(framing.pump(body, guard: watch))
                    var leaked = false
                    driver.afterEachRun = { written in
                        // Checked on the raw bytes written, framing included, after every run.
                        if forms.contains(where: { contains(written, $0.bytes) }) { leaked = true }
                    }
                    for piece in pieces where driver.blocked == nil { try driver.feed(piece) }
                    let forwarded = framing.body(driver.written + (framing == .chunkedToChunked ? Array("0\r\n\r\n".utf8) : []))
                    // What lay W or more bytes before the value's end went; nothing of the value did.
                    let released = max(0, min(offset, offset + form.bytes.count - watch.holdBack))
                    let prefix = forwarded == Array(body[..<released])
                    let blocked = driver.blocked == SecretFinding(secret: "canary_token", encoding: form.encoding, isPlaceholder: false)
                    let neverComplete = !driver.completed && driver.reports == ["blocked"] && driver.pump.isBlocked
                    if leaked || !prefix || !blocked || !neverComplete {
                        failures += 1
                        if failures <= 5 {
                            Issue.record(
                                "\(framing) \(form.encoding) offset \(offset) pieces \(pieces.map(\.count)): leaked \(leaked), prefix \(prefix), blocked \(blocked), never complete \(neverComplete)"
                            )
                        }
                    }
                }
            }
        }
        #expect(failures == 0)
    }

    @Test("guard: a blocked pump takes and forwards nothing more")
    func guardStaysBlocked() throws {
        let body = Array("a=".utf8) + canary + [UInt8](repeating: filler, count: 40)
        let driver = PumpDriver(Framing.contentLength.pump(body, guard: watch()))
        try driver.feed(body[..<(2 + canary.count + 5)])
        #expect(driver.blocked != nil)
        let written = driver.written
        try driver.feed(body[(2 + canary.count + 5)...])
        #expect(driver.written == written && !driver.completed && !driver.pump.expectsMore)
        #expect(driver.reports == ["blocked"])
    }

    @Test("guard: a placeholder is reported as one")
    func guardPlaceholder() throws {
        let placeholder = Array("scopeproxy-ph-canary-0123456789abcdef".utf8)
        let watch = watch([canary, placeholder], names: ["canary_token", "canary_token"], placeholders: [false, true])
        let body = Array("{\"auth\":\"".utf8) + placeholder + Array("\"}".utf8)
        let driver = PumpDriver(Framing.contentLength.pump(body, guard: watch))
        for piece in splits(of: body)[body.count + 3] { try driver.feed(piece) }
        #expect(driver.blocked == SecretFinding(secret: "canary_token", encoding: .raw, isPlaceholder: true))
        let end = 9 + placeholder.count
        #expect(driver.written == Array(body[..<max(0, end - watch.holdBack)]))
    }

    @Test("guard: a body with near misses passes whole, held bytes released before complete", arguments: [Framing.contentLength, .chunkedToChunked])
    func guardPassesCleanBody(_ framing: Framing) throws {
        let body = Array("x=".utf8) + canary.dropLast() + Array("&y=".utf8) + canary.prefix(canary.count - 3)
        for pieces in splits(of: framing.wire(body)) {
            let driver = PumpDriver(framing.pump(body, guard: watch(), observe: 4096))
            for piece in pieces { try driver.feed(piece) }
            let same = framing.body(driver.written) == body
            #expect(same && driver.completed && driver.blocked == nil, "\(framing) pieces \(pieces.map(\.count))")
            #expect(driver.pump.observed == body)
        }
    }

    /// libevent hands the bytes over ahead of the reserved chain, so the pump's fallback for an
    /// empty first extent (a pullup) is not reached here; this pins the outcome either way.
    @Test("scrub: a source with reserved, uncommitted space (as a socket read leaves it) still moves")
    func emptyFirstChain() throws {
        let body = Array("x=".utf8) + canary + Array("&y=1".utf8)
        let driver = PumpDriver(Framing.contentLength.pump(body, scrub: watch()))
        var reserved = iovec()
        #expect(evbuffer_reserve_space(driver.source, 4096, &reserved, 1) == 1)
        let chain = evbuffer_new()!
        defer { evbuffer_free(chain) }
        _ = body.withUnsafeBytes { evbuffer_add(chain, $0.baseAddress, $0.count) }
        evbuffer_add_buffer(driver.source, chain)
        try driver.run()
        #expect(driver.completed && driver.written.count == body.count && !contains(driver.written, canary))
    }

    @Test("guard: a large body under backpressure: values past the 16 KiB piece edges still stop it before they leave")
    func guardLargeBodyBackpressure() throws {
        for offset in [BodyPump.filterPiece - 3, 2 * BodyPump.filterPiece - canary.count, 2 * BodyPump.filterPiece + 7] {
            var body = [UInt8](repeating: filler, count: 3 * BodyPump.filterPiece)
            body.replaceSubrange(offset..<(offset + canary.count), with: canary)
            for highWatermark in [Int.max, 1000] {
                let watch = watch()
                let driver = PumpDriver(Framing.contentLength.pump(body, guard: watch))
                try driver.feed(body[...], highWatermark: highWatermark)
                let prefix = driver.written == Array(body[..<(offset + canary.count - watch.holdBack)])
                #expect(prefix && driver.blocked != nil && !driver.completed, "offset \(offset) watermark \(highWatermark)")
            }
        }
    }

    // MARK: No filter

    @Test("no filter: body chains are handed over, not copied (the destination holds the source's memory)")
    func unfilteredIsZeroCopy() throws {
        let body = [UInt8](repeating: filler, count: 64 * 1024)
        try body.withUnsafeBytes { memory in
            let source = evbuffer_new()!, destination = evbuffer_new()!
            defer { evbuffer_free(source); evbuffer_free(destination) }
            // A reference chain: libevent points at `memory` instead of copying it in.
            _ = evbuffer_add_reference(source, memory.baseAddress, memory.count, nil, nil)
            var pump = BodyPump(
                inbound: .contentLength(UInt64(body.count)), outbound: .contentLength(UInt64(body.count)),
                scrub: SecretWatch(scanner: SecretScanner(secrets: []), secrets: [], placeholders: []))
            let complete = try pump.pump(from: source, to: destination, highWatermark: .max)
            #expect(complete && evbuffer_get_length(destination) == body.count)
            var vector = iovec()
            #expect(evbuffer_peek(destination, -1, nil, &vector, 1) == 1)
            #expect(UnsafeRawPointer(vector.iov_base) == memory.baseAddress)
        }
    }

    @Test("no body (Content-Length: 0, HEAD): a watch changes nothing and the pump is complete at once")
    func emptyBodyWithWatch() throws {
        let pump = BodyPump(inbound: .contentLength(0), outbound: .contentLength(0), scrub: watch())
        #expect(pump.isComplete)
        let driver = PumpDriver(pump)
        try driver.feed([][...])
        #expect(driver.written.isEmpty && driver.completed)
    }

    @Test("no watch, or a watch with nothing in it: the pump moves bytes as before")
    func unfilteredPump() throws {
        let body = Array("plain body, no values".utf8) + canary
        for scrub in [nil, SecretWatch(scanner: SecretScanner(secrets: []), secrets: [], placeholders: [])] {
            for framing in Framing.allCases {
                let driver = PumpDriver(framing.pump(body, scrub: scrub))
                for piece in splits(of: framing.wire(body))[4] { try driver.feed(piece) }
                if framing == .untilClose { driver.close() }
                let same = framing.body(driver.written) == body
                #expect(same && driver.completed && driver.findings.isEmpty, "\(framing)")
            }
        }
    }
}
