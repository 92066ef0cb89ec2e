import CLibevent
import HTTP1Codec
import ProxyCore

// The upstream side: opening and releasing a hop's leg, the leg's callbacks, and the response
// heads read from it. Changes when the hop's lifecycle does.
extension ClientConnection {
    func connect(_ hop: HopID, _ origin: Origin, _ upstreamTransport: UpstreamTransport, reusePooled: Bool) {
        if let old = leg { old.release(reuse: false) }  // the machine releases first; never two legs
        let leg = UpstreamLeg(hop: hop, origin: origin, transport: upstreamTransport, worker: worker, owner: self)
        self.leg = leg
        if reusePooled, let pooled = worker.pool.checkout(origin) {
            leg.attach(pooled: pooled)
            deliver(.upstreamConnected(hop, reused: true))
        } else {
            leg.connect()
        }
    }

    func release(_ hop: HopID, reuse: Bool) {
        guard let leg, leg.hop == hop else { return }
        self.leg = nil
        leg.release(reuse: reuse)
    }

    func legConnected(_ leg: UpstreamLeg) {
        guard leg === self.leg else { return }
        deliver(.upstreamConnected(leg.hop, reused: false))
        flushOutputs()
    }

    func legConnectFailed(_ leg: UpstreamLeg, _ error: ProxyError) {
        guard leg === self.leg else { return }
        deliver(.upstreamConnectFailed(leg.hop, error))
        flushOutputs()
    }

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

    func legHoldBackExpired(_ leg: UpstreamLeg) {
        guard leg === self.leg, !isClosed else { return }
        leg.releaseHeldBytes(clientOutput: transport.output)
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

    // MARK: Response heads ← upstream

    /// Parses heads for as long as the machine expects one from this hop: interim responses keep
    /// it waiting; once the final head is handled (relayed, followed, blocked) the loop ends, and
    /// the hop's remaining bytes are never read as another response (a desync otherwise; docs/security-model.md, "Redirects").
    func readResponseHeads(_ leg: UpstreamLeg) {
        while leg === self.leg, machine.expectsResponseHead(from: leg.hop), let input = leg.input, EventBuffer.length(input) > 0 {
            leg.sawResponseBytes = true
            do {
                guard let (head, _) = try leg.responseReader.next(from: input, HeadParser.parseResponse) else { return }
                let pipelined = !leg.awaitsRequestBytes && EventBuffer.length(transport.input) > 0
                deliver(.responseHead(leg.hop, head, clientPipelined: pipelined))
            } catch {
                deliver(.responseHeadInvalid(leg.hop, reason: error.responseProblem))
                return
            }
        }
    }
}
