import CLibevent
import ProxyCore

// Bodies and tunnels: the leg's pumps and the splice move the bytes, and the machine hears what
// moved (throttled). Changes when body or tunnel handling does.
extension ClientConnection {
    /// Bytes moved since the last (throttled) report, so the records of a connection that ends
    /// now count every byte.
    func reportPendingProgress() {
        guard let leg else { return }
        if leg.requestPump?.isComplete == false, let progress = leg.requestProgress() { deliver(.requestBody(leg.hop, progress)) }
        if leg.responsePump?.isComplete == false, let progress = leg.responseProgress() { deliver(.responseBody(leg.hop, progress)) }
        if unreportedTunnelBytes.fromClient + unreportedTunnelBytes.fromUpstream > 0 {
            deliver(.tunnelBytes(leg.hop, fromClient: unreportedTunnelBytes.fromClient, fromUpstream: unreportedTunnelBytes.fromUpstream))
            unreportedTunnelBytes = (0, 0)
        }
    }

    func progressDue() -> Bool {
        let now = monotonicMicroseconds()
        guard now - lastProgressReport >= progressInterval else { return false }
        lastProgressReport = now
        return true
    }

    func collectRequestBody() {
        guard let collector, let progress = collector.collect(from: transport.input, highWatermark: highWatermark) else { return }
        if case .progressed = progress {} else { self.collector = nil }
        deliver(.collectedBody(progress))
    }

    func pumpRequestBody() {
        guard let leg else { return }
        let reports = leg.pumpRequestBody(from: transport.input, highWatermark: highWatermark, reportProgress: progressDue())
        leg.scheduleHoldBackRelease()
        if let progress = reports.progress { deliver(.requestBody(leg.hop, progress)) }
        // After the bytes forwarded before it: the machine cuts the hop and answers 403 if it can.
        if let finding = reports.blocked { deliver(.requestBody(leg.hop, .blocked(finding, bytesSent: reports.blockedAfterBytesSent))) }
        if leg === self.leg, leg.awaitsRequestBytes, transport.inputClosed, EventBuffer.length(transport.input) == 0 {
            deliver(.clientInputClosed(bufferedBytes: 0))  // gone mid-body: the machine aborts
        }
    }

    func pumpResponseBody() {
        guard let leg else { return }
        let reports = leg.pumpResponseBody(to: transport.output, highWatermark: highWatermark, reportProgress: progressDue())
        leg.scheduleHoldBackRelease()
        // The findings first: a `complete` ends the exchange, and its record must already name them.
        if let findings = reports.scrubbed { deliver(.responseBody(leg.hop, .scrubbed(findings))) }
        if let progress = reports.progress { deliver(.responseBody(leg.hop, progress)) }
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
