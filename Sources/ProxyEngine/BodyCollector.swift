import CLibevent
import HTTP1Codec
import ProxyCore

/// Reads a request body whole, up to a limit, before anything goes upstream (the scope decision
/// depends on it). The body's framing is decoded as it arrives; the bytes are kept, nothing is
/// forwarded.
final class BodyCollector {
    private var pump: BodyPump
    /// Where the pump writes; emptied after every round (the captured copy is what is kept).
    private let sink: OpaquePointer

    init(framing: BodyFraming, limit: Int) {
        pump = BodyPump(inbound: framing, outbound: .contentLength(0), capture: limit)
        sink = evbuffer_new()
    }

    deinit {
        evbuffer_free(sink)
    }

    /// Takes what the client sent so far; nil when nothing changed.
    func collect(from input: OpaquePointer, highWatermark: Int) -> CollectedBody? {
        let before = pump.consumedBytes
        do {
            _ = try pump.pump(from: input, to: sink, highWatermark: highWatermark)
        } catch {
            return .invalid
        }
        evbuffer_drain(sink, EventBuffer.length(sink))
        guard let captured = pump.captured else { return .tooLarge }
        if pump.isComplete { return .complete(captured) }
        return pump.consumedBytes == before ? nil : .progressed
    }
}
