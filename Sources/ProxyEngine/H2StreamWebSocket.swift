import CLibevent
import ProxyCore

// An RFC 8441 WebSocket on a stream (`StreamAction.relayWebSocket`): the stream's request buffer
// (the client's DATA payloads) and response buffer (what the data provider sends as DATA) are the
// client side of the very relay an HTTP/1.1 upgrade runs: `WebSocketRelay` (guard, placeholders,
// scrub, hold-back, close frames on a stop) where a rule reads frames, `TunnelSplice` elsewhere.
// Backpressure: DATA is credited back to the client's window only as the relay takes it
// (`requestSourceDrained`), and origin bytes wait in the leg (which stops reading at its own
// watermark) while the response buffer is above the watermark, until the provider drains it.
extension H2Stream {
    /// One round each way; what the relay found goes to the machine.
    func pumpWebSocket() {
        guard !isClosed, let leg, leg.splicing else { return }
        let moved =
            leg.webSocket?.pump(clientInput: requestSource, clientOutput: responseSink, upstream: leg, highWatermark: bodyBufferLimit)
            ?? TunnelSplice.pump(clientInput: requestSource, clientOutput: responseSink, upstream: leg, highWatermark: bodyBufferLimit)
        noteFrameBytes(fromClient: moved.fromClient, fromUpstream: moved.fromUpstream)
        requestSourceDrained()
        responseSinkFilled()
        if let relay = leg.webSocket, reportRelay(relay, leg) { return }
        if progressDue() { reportFrameBytes() }
    }

    /// The client ended the stream (its FIN, RFC 8441 §5): what it sent goes through the filter
    /// whatever the origin's backlog, then the machine lets the upstream connection go.
    func endWebSocketFromClient() {
        guard let leg, leg.splicing, let upstreamOutput = leg.output else { return deliver(.clientInputClosed(bufferedBytes: 0)) }
        let moved =
            leg.webSocket?.handOver(from: requestSource, to: upstreamOutput, fromClient: true)
            ?? TunnelSplice.handOver(from: requestSource, to: upstreamOutput)
        noteFrameBytes(fromClient: moved, fromUpstream: 0)
        requestSourceDrained()
        if let relay = leg.webSocket, reportRelay(relay, leg) { return }
        leg.flush()  // the client's last frames (its close frame), before the leg is let go
        endingWhenDrained = true
        endWebSocketWhenDrained(leg)
    }

    /// The client's last frames are written (a TLS leg takes them on its write callback, as the
    /// HTTP/1.1 relay waits for them): only then is the leg let go. Bounded by the stall timer.
    func endWebSocketWhenDrained(_ leg: UpstreamLeg) {
        guard let output = leg.output, EventBuffer.length(output) > 0 else {
            endingWhenDrained = false
            reportFrameBytes()
            return deliver(.clientInputClosed(bufferedBytes: 0))
        }
    }

    /// The origin closed its connection: what it sent before goes through the scrub to the stream,
    /// whatever the client's backlog; the machine then ends the stream (END_STREAM after it).
    func endWebSocketFromOrigin(_ leg: UpstreamLeg) {
        if let upstreamInput = leg.input {
            let moved =
                leg.webSocket?.handOver(from: upstreamInput, to: responseSink, fromClient: false)
                ?? TunnelSplice.handOver(from: upstreamInput, to: responseSink)
            noteFrameBytes(fromClient: 0, fromUpstream: moved)
            responseSinkFilled()
            if let relay = leg.webSocket, reportRelay(relay, leg) { return }
        }
        reportFrameBytes()
        deliver(.upstreamClosed(leg.hop, sawResponseBytes: true))
    }

    /// Bytes moved since the last report, so a WebSocket that ends now counts every byte.
    func reportFrameBytes() {
        guard let leg, unreportedFrameBytes.fromClient + unreportedFrameBytes.fromUpstream > 0 else { return }
        let bytes = unreportedFrameBytes
        unreportedFrameBytes = (0, 0)
        deliver(.tunnelBytes(leg.hop, fromClient: bytes.fromClient, fromUpstream: bytes.fromUpstream))
    }

    private func noteFrameBytes(fromClient: UInt64, fromUpstream: UInt64) {
        unreportedFrameBytes.fromClient += fromClient
        unreportedFrameBytes.fromUpstream += fromUpstream
    }

    /// Scrubbed values (the line and the metric), the hold-back's idle timer, and a stop: the close
    /// frames are written (`WebSocketRelay.sendCloses`), the machine ends the stream. True on a stop.
    private func reportRelay(_ relay: WebSocketRelay, _ leg: UpstreamLeg) -> Bool {
        if let findings = relay.takeFindings() { deliver(.webSocketScrubbed(leg.hop, findings)) }
        relay.takeRepeats { secret, count in configuration.metrics.countScrubbed(secret: secret, matches: count) }
        leg.scheduleHoldBackRelease()
        guard let (stop, sender) = relay.takeStop() else { return false }
        leg.flush()  // the origin's close frame, before the machine lets the leg go
        reportFrameBytes()
        deliver(.webSocketStopped(leg.hop, stop, sender: sender))
        return true
    }
}
