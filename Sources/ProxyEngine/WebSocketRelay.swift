import CLibevent
import COpenSSL
import HTTP1Codec
import ProxyCore

/// A WebSocket whose frames the proxy reads (`ConnectionAction.relayWebSocket`): each direction's
/// bytes go through its `WebSocketFrameFilter` (client frames: guard and placeholders; origin
/// frames: scrub) a piece at a time, and what the filter lets out is written to the other side.
/// Backpressure as for the splice: a direction stops when its destination holds `highWatermark`
/// bytes, and the rest waits in the source (whose bufferevent stops reading at its own watermark).
/// Memory per direction: one piece, its re-framed output and the hold-back, whatever a frame's length.
final class WebSocketRelay {
    /// The most taken from a source at once (as `BodyPump.filterPiece`).
    static let piece = 16 * 1024

    private(set) var fromClient: WebSocketFrameFilter
    private(set) var fromOrigin: WebSocketFrameFilter
    /// The filter that stopped, and which side sent what stopped it; reported to the machine once.
    private(set) var stop: (WebSocketFrameFilter.Stop, WebSocketSender)?
    private var stopReported = false
    /// Bytes taken from either side (the hold-back timer restarts when this moves).
    private(set) var taken: UInt64 = 0
    private var output: [UInt8] = []

    init(plan: WebSocketFramePlan) {
        fromClient = WebSocketFrameFilter(sender: .client, plan: plan, maskingKey: Self.maskingKey)
        fromOrigin = WebSocketFrameFilter(sender: .server, plan: plan, maskingKey: Self.maskingKey)
        output.reserveCapacity(Self.piece + 64)
    }

    /// RFC 6455 §5.3: "derived from a strong source of entropy", one per frame.
    static func maskingKey() -> UInt32 {
        var key: UInt32 = 0
        let ok = withUnsafeMutableBytes(of: &key) { RAND_bytes($0.baseAddress!.assumingMemoryBound(to: UInt8.self), 4) }
        precondition(ok == 1, "RAND_bytes failed")
        return key
    }

    /// One round each way; returns the bytes taken from the client and from the origin.
    func pump(client: ClientTransport, upstream: UpstreamLeg, highWatermark: Int) -> (fromClient: UInt64, fromUpstream: UInt64) {
        pump(clientInput: client.input, clientOutput: client.output, upstream: upstream, highWatermark: highWatermark)
    }

    /// The same round for any client side: an HTTP/1.1 client's socket buffers, or an RFC 8441
    /// stream's request and response buffers (the frames are the same; only their carrier differs).
    func pump(
        clientInput: OpaquePointer, clientOutput: OpaquePointer, upstream: UpstreamLeg, highWatermark: Int
    ) -> (fromClient: UInt64, fromUpstream: UInt64) {
        guard let upstreamInput = upstream.input, let upstreamOutput = upstream.output else { return (0, 0) }
        let fromClientBytes = move(&fromClient, from: clientInput, to: upstreamOutput, highWatermark: highWatermark)
        let fromOriginBytes = move(&fromOrigin, from: upstreamInput, to: clientOutput, highWatermark: highWatermark)
        if stop != nil { sendCloses(clientOutput: clientOutput, upstreamOutput: upstreamOutput) }
        return (fromClientBytes, fromOriginBytes)
    }

    /// One side hung up: what it sent before goes through its filter, whatever the other side's backlog.
    func handOver(from input: OpaquePointer, to output: OpaquePointer, fromClient isClient: Bool) -> UInt64 {
        isClient
            ? move(&fromClient, from: input, to: output, highWatermark: .max)
            : move(&fromOrigin, from: input, to: output, highWatermark: .max)
    }

    /// The stop to report to the machine, once.
    func takeStop() -> (WebSocketFrameFilter.Stop, WebSocketSender)? {
        guard !stopReported, let stop else { return nil }
        stopReported = true
        return stop
    }

    var holdsBack: Bool { stop == nil && fromClient.heldBytes + fromOrigin.heldBytes > 0 }

    /// The idle time ran out: both directions' held bytes leave as fragments.
    func releaseHeld(clientOutput: OpaquePointer, upstreamOutput: OpaquePointer?) {
        guard stop == nil else { return }
        output.removeAll(keepingCapacity: true)
        fromOrigin.releaseHeld(into: &output)
        write(to: clientOutput)
        if let upstreamOutput {
            fromClient.releaseHeld(into: &output)
            write(to: upstreamOutput)
        }
    }

    /// Scrub findings of origin frames since the last call.
    func takeFindings() -> [SecretFinding]? { fromOrigin.takeFindings() }

    /// Scrub matches of forms already reported, per secret, since the last call.
    func takeRepeats(_ body: (_ secret: String, _ count: UInt64) -> Void) { fromOrigin.takeRepeats(body) }

    private func move(
        _ filter: inout WebSocketFrameFilter, from source: OpaquePointer, to destination: OpaquePointer, highWatermark: Int
    ) -> UInt64 {
        var moved: UInt64 = 0
        while stop == nil, EventBuffer.length(destination) < highWatermark, EventBuffer.length(source) > 0 {
            let extent =
                EventBuffer.firstExtent(source)
                ?? EventBuffer.contiguousPrefix(source, min(EventBuffer.length(source), Self.piece))
            guard extent.count > 0 else { break }
            let length = min(extent.count, Self.piece)
            let piece = UnsafeBufferPointer(start: extent.baseAddress!.assumingMemoryBound(to: UInt8.self), count: length)
            output.removeAll(keepingCapacity: true)
            filter.feed(piece, into: &output)
            evbuffer_drain(source, length)  // only now: `piece` points into the source
            moved += UInt64(length)
            taken &+= UInt64(length)
            if let stopped = filter.stopped {
                // Nothing of what the filter stopped on is written; the rest of the source is dropped.
                stop = (stopped, filter.sender)
                evbuffer_drain(source, EventBuffer.length(source))
                return moved
            }
            write(to: destination)
        }
        return moved
    }

    private func write(to destination: OpaquePointer) {
        guard !output.isEmpty else { return }
        output.withUnsafeBytes { _ = evbuffer_add(destination, $0.baseAddress, $0.count) }
        output.removeAll(keepingCapacity: true)
    }

    /// The WebSocket ends: a close frame to each side (RFC 6455 §7.4.1: 1008 policy violation for
    /// a value the origin may not receive, 1002 for frames that are not RFC 6455).
    private var closesSent = false
    private func sendCloses(clientOutput: OpaquePointer, upstreamOutput: OpaquePointer) {
        guard !closesSent, let (reason, _) = stop else { return }
        closesSent = true
        let code: UInt16 =
            switch reason {
            case .secret: WebSocketFrameEncoder.policyViolationCode
            case .protocolError: WebSocketFrameEncoder.protocolErrorCode
            }
        EventBuffer.append(clientOutput, WebSocketFrameFilter.closeFrame(code: code, toOrigin: false, maskingKey: Self.maskingKey))
        EventBuffer.append(upstreamOutput, WebSocketFrameFilter.closeFrame(code: code, toOrigin: true, maskingKey: Self.maskingKey))
    }
}
