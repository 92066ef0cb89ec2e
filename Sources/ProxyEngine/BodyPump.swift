import CLibevent
import HTTP1Codec
import ProxyCore
import SecretScan

/// Moves one message body from a source evbuffer to a destination evbuffer: decodes the inbound
/// framing, re-frames it for the outbound side, and stops when the destination holds
/// `highWatermark` bytes (backpressure: the rest stays in the source, whose bufferevent stops
/// reading at its own watermark).
///
/// Without a filter, body bytes are handed over chain by chain, never copied into Swift. With one
/// (response scrub, request egress guard) every body byte is looked at before it is written: the
/// pump peeks at the source a piece at a time, runs the filter, writes what the filter lets out
/// and drains the source. The filter holds back the body's last `SecretWatch.holdBack` bytes
/// (whatever they are: a value the next piece completes must still be unsent) and releases them
/// when more come, when the body ends (before the pump says it is complete), or when the leg's
/// idle timer calls `releaseHeld` (docs/security-model.md, "No oracle").
struct BodyPump {
    private enum Mode {
        case complete
        case remaining(UInt64)
        case chunked
        case untilClose
        /// The egress guard found a value: what came before it went out, nothing else ever will.
        case blocked
    }

    /// The most a filtered pump takes from the source at once: bounds the scrub output buffer
    /// (reused for every piece) whatever the size of the source's chains.
    static let filterPiece = 16 * 1024

    private var mode: Mode
    private var decoder = ChunkedDecoder()
    /// Re-frame as chunked (chunked in, chunked out); otherwise data passes as it is.
    private let reframeChunked: Bool
    /// nil: the zero-copy path.
    private let filter: BodyFilter?
    /// Body bytes taken from the source (with a filter, some may still be held back).
    private(set) var bodyBytes: UInt64 = 0
    /// Bytes taken from the source: the body and its framing (chunk sizes, extensions, trailers).
    private(set) var consumedBytes: UInt64 = 0
    /// What the last `progress()` reported, so each report is a delta.
    private var reportedBody: UInt64 = 0
    private var reportedConsumed: UInt64 = 0
    /// A copy of the body as it passes, kept only while it stays under `captureLimit` (follow mode
    /// replays it on a 307/308); nil once it grew past the limit, or when not capturing.
    private(set) var captured: [UInt8]?
    private var captureLimit = 0
    /// The guard's finding was handed to the machine (`takeBlock`).
    private var blockReported = false
    /// A chunked body's trailer section once it ended (gRPC's `grpc-status`), cleaned and scrubbed
    /// like a head (`relayableTrailers`); nil before the end and for other framings. Only an
    /// HTTP/2 client is given them (H2Stream); an HTTP/1.1 client's last chunk carries none.
    private(set) var trailers: HTTPFields?

    /// The first bytes of the body for a log summary (`log.bodies`), never more than the limit.
    /// With a filter these are the bytes as written to the destination (scrubbed, or only what
    /// the guard let through): the log never sees a value the filter exists to keep out.
    private(set) var observed: [UInt8]?
    private var observeLimit = 0

    mutating func startObserving(limit: Int) {
        observed = []
        observeLimit = limit
    }

    var observedTruncated: Bool { bodyBytes > UInt64(observed?.count ?? 0) }

    private mutating func observe(_ source: OpaquePointer, _ count: Int) {
        guard let current = observed?.count, current < observeLimit, count > 0 else { return }
        let take = min(count, observeLimit - current)
        observed!.append(contentsOf: repeatElement(0, count: take))
        observed!.withUnsafeMutableBytes { _ = evbuffer_copyout(source, $0.baseAddress! + current, take) }
    }

    private mutating func observe(_ bytes: UnsafeRawBufferPointer) {
        guard let current = observed?.count, current < observeLimit, bytes.count > 0 else { return }
        observed!.append(contentsOf: bytes.prefix(observeLimit - current))
    }

    mutating func startCapture(limit: Int) {
        captured = []
        captureLimit = limit
    }

    private mutating func capture(_ source: OpaquePointer, _ count: Int) {
        guard captured != nil, count > 0 else { return }
        guard captured!.count + count <= captureLimit else {
            captured = nil
            return
        }
        let start = captured!.count
        captured!.append(contentsOf: repeatElement(0, count: count))
        captured!.withUnsafeMutableBytes { _ = evbuffer_copyout(source, $0.baseAddress! + start, count) }
    }

    /// `capture`: keep up to that many body bytes (for a replay); `observe`: keep the first bytes (log).
    /// `scrub` (responses): mask these values; `guard` (requests): never forward these values.
    init(
        inbound: BodyFraming, outbound: BodyFraming, capture: Int? = nil, observe: Int? = nil,
        scrub: SecretWatch? = nil, guard egress: SecretWatch? = nil
    ) {
        defer {
            if let capture { startCapture(limit: capture) }
            if let observe { startObserving(limit: observe) }
        }
        switch inbound {
        case .none: mode = .complete
        case .contentLength(let length): mode = length == 0 ? .complete : .remaining(length)
        case .chunked: mode = .chunked
        case .untilClose: mode = .untilClose
        }
        reframeChunked = inbound == .chunked && outbound == .chunked
        // No body (HEAD, 204, Content-Length: 0), or a watch with no patterns (no value known):
        // nothing to look at, so no filter and the zero-copy path.
        if case .complete = mode {
            filter = nil
        } else if let egress, !egress.scanner.patterns.isEmpty {
            filter = BodyFilter(.guardEgress, watch: egress)
        } else if let scrub, !scrub.scanner.patterns.isEmpty {
            filter = BodyFilter(.scrub, watch: scrub)
        } else {
            filter = nil
        }
    }

    var isComplete: Bool { if case .complete = mode { true } else { false } }
    var isDelimitedByClose: Bool { if case .untilClose = mode { true } else { false } }
    /// The guard stopped the body: no more bytes are taken or forwarded.
    var isBlocked: Bool { if case .blocked = mode { true } else { false } }
    /// More body bytes are expected from the source.
    var expectsMore: Bool {
        switch mode {
        case .complete, .blocked: false
        case .remaining, .chunked, .untilClose: true
        }
    }

    /// The source closed: a close-delimited body is now complete (what the scrubber held back is
    /// written to `destination` first); any other body was cut short, and what a filter held back
    /// is dropped with it (it could be the start of a value).
    mutating func sourceClosed(destination: OpaquePointer) {
        if case .untilClose = mode {
            finishFilter(to: destination)
            mode = .complete
        }
    }

    /// Returns true once the whole body has been moved. A run takes at most the room left under
    /// `highWatermark` in `destination` (framing and what a filter held back may pass it by a few
    /// bytes), never whatever the source holds: the destination's size is bounded by the mark,
    /// not by the mark plus a read.
    mutating func pump(
        from source: OpaquePointer, to destination: OpaquePointer, highWatermark: Int
    ) throws(HTTPParseError) -> Bool {
        while EventBuffer.length(destination) < highWatermark {
            switch mode {
            case .complete:
                return true

            case .blocked:
                return false

            case .remaining(let remaining):
                let available = EventBuffer.length(source)
                guard available > 0 else { return false }
                let room = highWatermark - EventBuffer.length(destination)
                let moved = transfer(from: source, to: destination, count: min(Int(clamping: min(remaining, UInt64(available))), room))
                bodyBytes += UInt64(moved)
                consumedBytes += UInt64(moved)
                // Nothing taken (nothing the filter could look at yet): wait for the next read, never spin.
                if isBlocked || moved == 0 { return false }
                let left = remaining - UInt64(moved)
                if left == 0 {
                    finishFilter(to: destination)
                    mode = .complete
                } else {
                    mode = .remaining(left)
                }

            case .untilClose:
                let available = EventBuffer.length(source)
                guard available > 0 else { return false }
                let room = highWatermark - EventBuffer.length(destination)
                let moved = UInt64(transfer(from: source, to: destination, count: min(available, room)))
                bodyBytes += moved
                consumedBytes += moved
                if isBlocked || moved == 0 { return false }

            case .chunked:
                guard let extent = EventBuffer.firstExtent(source) else { return false }
                let (consumed, next) = try decoder.advance(extent)
                if consumed > 0 {
                    evbuffer_drain(source, consumed)
                    consumedBytes += UInt64(consumed)
                }
                switch next {
                case .needMore:
                    continue  // the extent was all framing; look at the next one, if any
                case .data(let size):
                    let available = EventBuffer.length(source)
                    guard available > 0 else { return false }
                    let room = highWatermark - EventBuffer.length(destination)
                    let moved = transfer(from: source, to: destination, count: min(size, available, room))
                    bodyBytes += UInt64(moved)
                    consumedBytes += UInt64(moved)
                    if isBlocked || moved == 0 { return false }
                    decoder.didConsumeData(moved)
                case .done:
                    // Trailers are kept aside, cleaned and scrubbed, for a host that can relay them
                    // (an HTTP/2 client); the HTTP/1.1 re-framing drops them, as RFC 9110 §6.5.1
                    // lets a proxy do. What a filter held back is the body's last bytes: they go
                    // before the last chunk.
                    finishFilter(to: destination)
                    trailers = relayableTrailers(decoder.trailers)
                    if reframeChunked { EventBuffer.append(destination, ChunkedEncoder.lastChunk) }
                    mode = .complete
                }
            }
        }
        return isComplete
    }

    /// A filter holds body bytes back and the body goes on: the leg arms its idle timer
    /// (`SecretHoldBack.idleReleaseMilliseconds`), and `releaseHeld` lets them go if nothing came.
    var holdsBack: Bool {
        guard let filter, expectsMore else { return false }
        switch filter.kind {
        case .scrub: return filter.scrubber!.held > 0
        case .guardEgress: return !filter.held.isEmpty
        }
    }

    /// The idle time ran out: the held bytes go to `destination` now. The filter keeps scanning
    /// where it was, so a value completed by later bytes is still masked (scrub) or stopped
    /// (guard) from there on. What leaves, and when, depends only on the time and the byte count.
    mutating func releaseHeld(to destination: OpaquePointer) {
        guard expectsMore else { return }
        finishFilter(to: destination)  // the filters' release is their finish: the scan state is kept
    }

    // MARK: Moving body bytes

    /// Takes `count` body bytes from the head of `source` (it holds at least that many) and writes
    /// them, or what the filter makes of them, to `destination`, each run of bytes as one chunk
    /// when re-framing. Returns how many were taken (fewer only when the guard stops the body).
    private mutating func transfer(from source: OpaquePointer, to destination: OpaquePointer, count: Int) -> Int {
        guard let filter else {
            capture(source, count)
            observe(source, count)
            if reframeChunked { EventBuffer.append(destination, ChunkedEncoder.chunkHeader(size: count)) }
            let moved = EventBuffer.move(from: source, to: destination, count: count)
            if reframeChunked { EventBuffer.append(destination, ChunkedEncoder.chunkTrailer) }
            return moved
        }
        var taken = 0
        while taken < count, !isBlocked {
            // One contiguous piece, looked at where libevent keeps it (no copy to scan it). Should
            // the first chain ever be empty (libevent keeps data first; this is defensive), the
            // bytes are pulled up instead of waiting forever on a peek that shows nothing.
            let extent =
                EventBuffer.firstExtent(source)
                ?? EventBuffer.contiguousPrefix(source, min(count - taken, Self.filterPiece))
            guard extent.count > 0 else { break }
            let length = min(extent.count, count - taken, Self.filterPiece)
            let piece = UnsafeBufferPointer(start: extent.baseAddress!.assumingMemoryBound(to: UInt8.self), count: length)
            // A replay sends the request as the client wrote it (its next hop is guarded on its own).
            capture(source, length)
            switch filter.kind {
            case .scrub: scrubPiece(piece, filter, from: source, to: destination)
            case .guardEgress: guardPiece(piece, filter, from: source, to: destination)
            }
            taken += length
        }
        return taken
    }

    /// Masks the values in `piece` (the first bytes of `source`) and writes what the scrubber lets
    /// out: same length overall, but the last bytes of a piece may wait for the next.
    private mutating func scrubPiece(
        _ piece: UnsafeBufferPointer<UInt8>, _ filter: BodyFilter,
        from source: OpaquePointer, to destination: OpaquePointer
    ) {
        filter.scratch.removeAll(keepingCapacity: true)
        filter.scrubber!.scrub(piece, into: &filter.scratch) { filter.masked($0) }
        evbuffer_drain(source, piece.count)  // only now: `piece` points into the source
        filter.scratch.withUnsafeBytes { write($0, to: destination) }
    }

    /// Asks the guard how much of what it has seen may leave, forwards that (the bytes held from
    /// earlier pieces first, then this piece's, moved chain to chain), and holds the rest. On a
    /// value, forwards only what lies before it and stops for good: the value's bytes never reach
    /// the destination.
    private mutating func guardPiece(
        _ piece: UnsafeBufferPointer<UInt8>, _ filter: BodyFilter,
        from source: OpaquePointer, to destination: OpaquePointer
    ) {
        let verdict = filter.egressGuard!.inspect(piece)
        // `piece`'s bytes are not read after this: moving bytes out of the source may free them.
        let fromHeld = min(verdict.forwardable, filter.held.count)
        let fromPiece = verdict.forwardable - fromHeld
        if verdict.forwardable > 0 {
            if reframeChunked { EventBuffer.append(destination, ChunkedEncoder.chunkHeader(size: verdict.forwardable)) }
            if fromHeld > 0 {
                filter.held.withUnsafeBytes { held in
                    observe(UnsafeRawBufferPointer(rebasing: held.prefix(fromHeld)))
                    _ = evbuffer_add(destination, held.baseAddress, fromHeld)
                }
                filter.held.removeFirst(fromHeld)
            }
            if fromPiece > 0 {
                observe(source, fromPiece)
                EventBuffer.move(from: source, to: destination, count: fromPiece)
            }
            if reframeChunked { EventBuffer.append(destination, ChunkedEncoder.chunkTrailer) }
        }
        let rest = piece.count - fromPiece
        if let leak = verdict.leak {
            filter.leak = filter.watch.finding(leak)
            evbuffer_drain(source, rest)
            mode = .blocked
            return
        }
        // Not yet known safe: keep it here, out of both buffers, until a later piece decides.
        let start = filter.held.count
        filter.held.append(contentsOf: repeatElement(0, count: rest))
        filter.held.withUnsafeMutableBytes { _ = evbuffer_copyout(source, $0.baseAddress! + start, rest) }
        evbuffer_drain(source, rest)
    }

    /// The inbound body ended: what the filter held back can no longer become a value; it goes
    /// out now, before the body is reported complete (and before the last chunk).
    private mutating func finishFilter(to destination: OpaquePointer) {
        guard let filter else { return }
        switch filter.kind {
        case .scrub:
            filter.scratch.removeAll(keepingCapacity: true)
            filter.scrubber!.finish(into: &filter.scratch)
            filter.scratch.withUnsafeBytes { write($0, to: destination) }
        case .guardEgress:
            let releasable = filter.egressGuard!.finish()
            precondition(releasable == filter.held.count, "the guard and the pump disagree on the held bytes")
            filter.held.withUnsafeBytes { write($0, to: destination) }
            filter.held.removeAll(keepingCapacity: true)
        }
    }

    /// Filter output to the destination: one chunk when re-framing, sized for what is written
    /// (nothing at all for an empty run: a zero-size chunk would end the body).
    private mutating func write(_ bytes: UnsafeRawBufferPointer, to destination: OpaquePointer) {
        guard bytes.count > 0 else { return }
        observe(bytes)
        if reframeChunked { EventBuffer.append(destination, ChunkedEncoder.chunkHeader(size: bytes.count)) }
        _ = evbuffer_add(destination, bytes.baseAddress, bytes.count)
        if reframeChunked { EventBuffer.append(destination, ChunkedEncoder.chunkTrailer) }
    }

    /// Fields a trailer section may not carry onward: connection-specific ones (RFC 9113 §8.2.2)
    /// and those that frame, route or authenticate a message (RFC 9110 §6.5.1).
    static let unrelayedTrailerNames: Set<String> = [
        "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "trailer",
        "content-length", "host", "proxy-authenticate", "proxy-authorization",
    ]

    /// The trailers as they may leave: unrelayed names removed, values masked by the response
    /// scrub like the head's (its findings reported with the body's).
    private func relayableTrailers(_ parsed: HTTPFields) -> HTTPFields? {
        guard parsed.count > 0 else { return nil }
        var fields = parsed
        fields.removeAll { Self.unrelayedTrailerNames.contains($0.name.lowercased()) }
        if let filter, filter.kind == .scrub {
            filter.noteFindings(ResponseScrub.scrubFields(&fields, with: filter.watch))
        }
        return fields.count > 0 ? fields : nil
    }

    // MARK: Reports

    /// What moved since the last report, as the state machine's event (which labels the observed
    /// bytes with the message's Content-Type).
    mutating func progress() -> BodyProgress {
        let payload = bodyBytes - reportedBody
        let consumed = consumedBytes - reportedConsumed
        reportedBody = bodyBytes
        reportedConsumed = consumedBytes
        guard isComplete else { return .moved(payload: payload, consumed: consumed) }
        var summary: ExchangeRecord.ObservedBody?
        if let observed, bodyBytes > 0 {
            summary = ExchangeRecord.ObservedBody(
                bytes: observed, total: bodyBytes, truncated: observedTruncated,
                contentType: nil)
        }
        return .complete(payload: payload, consumed: consumed, captured: captured, observed: summary)
    }

    /// Scrub: the values masked since the last call (each form once per body), if any.
    mutating func takeFindings() -> [SecretFinding]? { filter?.takeFindings() }

    /// Guard: the value that stopped the body, once (nil before, and after it was taken).
    mutating func takeBlock() -> SecretFinding? {
        guard !blockReported, let leak = filter?.leak else { return nil }
        blockReported = true
        return leak
    }

    /// Scrub: matches of forms already reported, per secret (the metric counts every match).
    func takeRepeats(_ body: (_ secret: String, _ count: UInt64) -> Void) { filter?.takeRepeats(body) }
}
