import CLibevent
import HTTP1Codec
import ProxyCore

/// Moves one message body from a source evbuffer to a destination evbuffer: decodes the inbound
/// framing, re-frames it for the outbound side, and stops when the destination holds
/// `highWatermark` bytes (backpressure: the rest stays in the source, whose bufferevent stops
/// reading at its own watermark). Body bytes are handed over chain by chain, never copied into Swift.
struct BodyPump {
    private enum Mode {
        case complete
        case remaining(UInt64)
        case chunked
        case untilClose
    }

    private var mode: Mode
    private var decoder = ChunkedDecoder()
    /// Re-frame as chunked (chunked in, chunked out); otherwise data passes as it is.
    private let reframeChunked: Bool
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

    /// The first bytes of the body for a log summary (`log.bodies`), never more than the limit.
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
    init(inbound: BodyFraming, outbound: BodyFraming, capture: Int? = nil, observe: Int? = nil) {
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
    }

    var isComplete: Bool { if case .complete = mode { true } else { false } }
    var isDelimitedByClose: Bool { if case .untilClose = mode { true } else { false } }

    /// The source closed: a close-delimited body is now complete; any other body was cut short.
    mutating func sourceClosed() {
        if case .untilClose = mode { mode = .complete }
    }

    /// Returns true once the whole body has been moved.
    mutating func pump(
        from source: OpaquePointer, to destination: OpaquePointer, highWatermark: Int
    ) throws(HTTPParseError) -> Bool {
        while EventBuffer.length(destination) < highWatermark {
            switch mode {
            case .complete:
                return true

            case .remaining(let remaining):
                let available = EventBuffer.length(source)
                guard available > 0 else { return false }
                capture(source, Int(min(remaining, UInt64(available))))
                observe(source, Int(min(remaining, UInt64(available))))
                let moved = EventBuffer.move(from: source, to: destination, count: Int(min(remaining, UInt64(available))))
                bodyBytes += UInt64(moved)
                consumedBytes += UInt64(moved)
                let left = remaining - UInt64(moved)
                mode = left == 0 ? .complete : .remaining(left)

            case .untilClose:
                let available = EventBuffer.length(source)
                guard available > 0 else { return false }
                observe(source, available)
                let moved = UInt64(EventBuffer.move(from: source, to: destination, count: available))
                bodyBytes += moved
                consumedBytes += moved

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
                    let take = min(size, available)
                    capture(source, take)
                    observe(source, take)
                    if reframeChunked { EventBuffer.append(destination, ChunkedEncoder.chunkHeader(size: take)) }
                    let moved = EventBuffer.move(from: source, to: destination, count: take)
                    if reframeChunked { EventBuffer.append(destination, ChunkedEncoder.chunkTrailer) }
                    decoder.didConsumeData(moved)
                    bodyBytes += UInt64(moved)
                    consumedBytes += UInt64(moved)
                case .done:
                    // Trailers were parsed and are dropped: a trailer is a place a credential could
                    // ride past the scope rules, and RFC 9110 §6.5.1 lets a proxy discard them.
                    if reframeChunked { EventBuffer.append(destination, ChunkedEncoder.lastChunk) }
                    mode = .complete
                }
            }
        }
        return isComplete
    }

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
            summary = ExchangeRecord.ObservedBody(bytes: observed, total: bodyBytes, truncated: observedTruncated,
                                                  contentType: nil)
        }
        return .complete(payload: payload, consumed: consumed, captured: captured, observed: summary)
    }
}
