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
        let moved = TunnelSplice.pump(client: transport, upstream: leg, highWatermark: highWatermark)
        unreportedTunnelBytes.fromClient += moved.fromClient
        unreportedTunnelBytes.fromUpstream += moved.fromUpstream
        if unreportedTunnelBytes.fromClient + unreportedTunnelBytes.fromUpstream > 0, progressDue() {
            deliver(.tunnelBytes(leg.hop, fromClient: unreportedTunnelBytes.fromClient, fromUpstream: unreportedTunnelBytes.fromUpstream))
            unreportedTunnelBytes = (0, 0)
        }
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
            let moved = TunnelSplice.handOver(from: transport.input, to: upstreamOutput)
            deliver(.tunnelBytes(hop, fromClient: pending.fromClient + moved, fromUpstream: pending.fromUpstream))
            leg.flush()
            if EventBuffer.length(upstreamOutput) == 0 {
                close()
            } else {
                // Give the upstream a moment to take the last bytes, bounded.
                leg.closingAfterDrain = true
                transport.waitForUpstream(milliseconds: 2_000)
            }
        case .upstream:
            let moved = TunnelSplice.handOver(from: upstreamInput, to: transport.output)
            deliver(.tunnelBytes(hop, fromClient: pending.fromClient, fromUpstream: pending.fromUpstream + moved))
            release(hop, reuse: false)
            transport.closeAfterFlush()
        }
    }
}
