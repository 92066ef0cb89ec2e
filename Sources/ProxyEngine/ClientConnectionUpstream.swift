import CLibevent
import HTTP1Codec
import ProxyCore

// The upstream leg's callbacks on an HTTP/1.1 connection: a tunnel's splice, or the exchange's
// response (opening, releasing and reading the leg are the exchange's: ExchangeHost.swift).
extension ClientConnection {
    func legReadable(_ leg: UpstreamLeg) {
        guard leg === self.leg else { return }
        if leg.splicing {
            pumpTunnel()
        } else if leg.responsePump != nil {
            pumpResponseBody()
        } else {
            readResponseHeads(leg)
        }
        flushOutputs()
    }

    func legWritable(_ leg: UpstreamLeg) {
        guard leg === self.leg else { return }
        if leg.closingAfterDrain {
            if let output = leg.output, EventBuffer.length(output) == 0 { close() }
        } else if leg.splicing {
            pumpTunnel()
        } else {
            pumpRequestBody()
        }
        flushOutputs()
    }

    func legClosed(_ leg: UpstreamLeg) {
        guard leg === self.leg else { return }
        deliver(.upstreamClosed(leg.hop, sawResponseBytes: leg.sawResponseBytes))
        // A body being relayed ends (close-delimited) or is cut once the bytes sent before the
        // close (held back by backpressure) are out.
        if self.leg === leg, leg.responsePump != nil { pumpResponseBody() }
        flushOutputs()
    }
}
