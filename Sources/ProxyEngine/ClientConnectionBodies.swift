import CLibevent
import ProxyCore

// Tunnels: the splice moves the bytes, and the machine hears what moved (throttled); the bodies'
// pumps are the exchange's (ExchangeHost.swift). Changes when tunnel handling does.
extension ClientConnection {
    /// Bytes moved since the last (throttled) report, so the records of a connection that ends
    /// now count every byte (the body's, and the tunnel's).
    func reportPendingProgress() {
        reportPendingBodyProgress()
        guard let leg, unreportedTunnelBytes.fromClient + unreportedTunnelBytes.fromUpstream > 0 else { return }
        deliver(.tunnelBytes(leg.hop, fromClient: unreportedTunnelBytes.fromClient, fromUpstream: unreportedTunnelBytes.fromUpstream))
        unreportedTunnelBytes = (0, 0)
    }

    func pumpTunnel() {
        guard let leg, leg.splicing else { return }
        let moved =
            leg.webSocket?.pump(client: transport, upstream: leg, highWatermark: highWatermark)
            ?? TunnelSplice.pump(client: transport, upstream: leg, highWatermark: highWatermark)
        unreportedTunnelBytes.fromClient += moved.fromClient
        unreportedTunnelBytes.fromUpstream += moved.fromUpstream
        if let relay = leg.webSocket {
            reportWebSocket(relay, leg)
            if leg !== self.leg || isClosed { return }
        }
        if unreportedTunnelBytes.fromClient + unreportedTunnelBytes.fromUpstream > 0, progressDue() {
            deliver(.tunnelBytes(leg.hop, fromClient: unreportedTunnelBytes.fromClient, fromUpstream: unreportedTunnelBytes.fromUpstream))
            unreportedTunnelBytes = (0, 0)
        }
    }

    /// What a WebSocket's frame relay found: scrubbed values for the metric, the hold-back's idle
    /// timer, and a stop (the close frames are written: the machine ends the tunnel and its line).
    private func reportWebSocket(_ relay: WebSocketRelay, _ leg: UpstreamLeg) {
        // In the record, counted in scopeproxy_scrubbed_total when the line is written.
        if let findings = relay.takeFindings() { deliver(.webSocketScrubbed(leg.hop, findings)) }
        // Repeats are counted here, as a body's are: the line names each form once.
        relay.takeRepeats { secret, count in configuration.metrics.countScrubbed(secret: secret, matches: count) }
        leg.scheduleHoldBackRelease()
        guard let (stop, sender) = relay.takeStop() else { return }
        leg.flush()  // the origin's close frame, before the machine lets the leg go
        reportPendingProgress()
        deliver(.webSocketStopped(leg.hop, stop, sender: sender))
    }

    /// One side of a tunnel hung up: hand over what it sent, then close once the other side has it.
    func finishTunnel(_ hop: HopID, closedSide: TunnelSide) {
        guard let leg, leg.hop == hop, let upstreamOutput = leg.output, let upstreamInput = leg.input else {
            close()
            return
        }
        let pending = unreportedTunnelBytes
        unreportedTunnelBytes = (0, 0)
        switch closedSide {
        case .client:
            let moved =
                leg.webSocket?.handOver(from: transport.input, to: upstreamOutput, fromClient: true)
                ?? TunnelSplice.handOver(from: transport.input, to: upstreamOutput)
            deliver(.tunnelBytes(hop, fromClient: pending.fromClient + moved, fromUpstream: pending.fromUpstream))
            // The client's last frames carried a value: the line says so (the machine lets the leg go).
            if let (stop, sender) = leg.webSocket?.takeStop() { return deliver(.webSocketStopped(hop, stop, sender: sender)) }
            leg.flush()
            if EventBuffer.length(upstreamOutput) == 0 {
                close()
            } else {
                // Give the upstream a moment to take the last bytes, bounded.
                leg.closingAfterDrain = true
                transport.waitForUpstream(milliseconds: 2_000)
            }
        case .upstream:
            let moved =
                leg.webSocket?.handOver(from: upstreamInput, to: transport.output, fromClient: false)
                ?? TunnelSplice.handOver(from: upstreamInput, to: transport.output)
            deliver(.tunnelBytes(hop, fromClient: pending.fromClient, fromUpstream: pending.fromUpstream + moved))
            if let findings = leg.webSocket?.takeFindings() { deliver(.webSocketScrubbed(hop, findings)) }
            if let (stop, sender) = leg.webSocket?.takeStop() { return deliver(.webSocketStopped(hop, stop, sender: sender)) }
            release(hop, reuse: false)
            transport.closeAfterFlush()
        }
    }
}
