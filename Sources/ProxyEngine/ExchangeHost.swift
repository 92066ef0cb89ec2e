import CLibevent
import HTTP1Codec
import PosixSupport
import ProxyCore

/// What carries out one exchange's actions on sockets: a client connection speaking HTTP/1.1
/// (`ClientConnection`, one exchange after another) or one HTTP/2 stream (`H2Stream`). The
/// exchange's side of the work is the same for both and lives here once: the hop's leg (connect,
/// release, response heads), the request body (collected whole or pumped upstream), the response
/// body (pumped into the client's output), token waits and the log line. What differs is where the
/// client's bytes are: a socket's buffers, or a stream's.
///
/// Everything runs on the worker's loop thread.
protocol ExchangeHost: UpstreamLegOwner {
    var worker: Worker { get }
    /// The current hop's upstream, if any (at most one at a time).
    var leg: UpstreamLeg? { get set }
    /// A request body being read whole before its hop is planned.
    var collector: BodyCollector? { get set }
    /// The token fetch this exchange waits for, withdrawn from if it ends first.
    var awaitedToken: (tokens: any AccessTokenSource, secret: String, waiterID: UInt64)? { get set }
    var isClosed: Bool { get }
    /// An event is being handled (events raised meanwhile wait their turn).
    var dispatching: Bool { get }
    /// Bulk progress goes to the machine at most this often (microseconds).
    var progressInterval: UInt64 { get }
    var lastProgressReport: UInt64 { get set }
    /// The exchange's one timer (its purpose while armed).
    var timer: OpaquePointer! { get }
    var armedTimer: TimerPurpose? { get set }
    /// Where the request body comes from: the client socket's input, or the stream's request buffer.
    var requestSource: OpaquePointer { get }
    /// The client sent all it will: no byte will be added to `requestSource`.
    var requestSourceEnded: Bool { get }
    /// Where the response body goes: the client socket's output, or the stream's response buffer.
    var responseSink: OpaquePointer { get }
    /// Bytes the client sent after this request that wait unread (a pipelined request; HTTP/1.1 only).
    var clientPipelined: Bool { get }
    /// The client speaks h2c with prior knowledge to the proxy (its plain-http origins get h2c too).
    var clientSpokeH2c: Bool { get }
    /// A transparent connection's origin and the address its hops connect to (docs/transparent.md).
    var pinnedUpstream: PinnedUpstream? { get }
    /// The current hop asks the origin for an HTTP/1.1 upgrade (which cannot ride HTTP/2).
    var currentHopIsUpgrade: Bool { get }
    /// The most response bytes one buffer of this exchange holds on the proxy's side: what the
    /// response pump puts in its destination and what the hop's leg reads ahead from the origin
    /// (`bufferHighWatermark` for a connection of its own; less for an HTTP/2 stream, one of many
    /// on its connection).
    var bodyBufferLimit: Int { get }

    func deliver(_ event: ConnectionEvent)
    /// Writes pending output on every side (and resumes pumps a drained output was holding back).
    func flushOutputs()
    /// Whether the machine waits for a response head from this hop.
    func expectsResponseHead(from hop: HopID) -> Bool
    /// After request bytes were taken from `requestSource` (HTTP/2: credit the flow-control window).
    func requestSourceDrained()
    /// After bytes were written to `responseSink` (HTTP/2: wake the stream's data provider).
    func responseSinkFilled()
}

extension ExchangeHost {
    var configuration: EngineConfiguration { worker.configuration }
    var highWatermark: Int { configuration.limits.bufferHighWatermark }
    var bodyBufferLimit: Int { highWatermark }

    // MARK: The exchange's own actions

    /// Carries out one of the exchange's own actions, the same for every host (the hop, the bodies,
    /// the timer, tokens, the line). False for an action about the client's protocol (what to write
    /// to the client, a tunnel, the close), which the host carries out itself.
    func executeExchangeAction(_ action: ConnectionAction) -> Bool {
        switch action {
        case .connect(let hop, let origin, let upstreamTransport, let reusePooled, let egress):
            connect(hop, origin, upstreamTransport, reusePooled: reusePooled, egress: egress)
        case .sendToUpstream(let hop, let bytes):
            if let leg, leg.hop == hop { leg.write(bytes) }
        case .collectRequestBody(let framing, let limit):
            collector = BodyCollector(framing: framing, limit: limit)
            collectRequestBody()
        case .pumpRequestBody(let hop, let framing, let capture, let observe, let egressGuard):
            guard let leg, leg.hop == hop else { return true }
            leg.requestPump = BodyPump(inbound: framing, outbound: framing, capture: capture, observe: observe, guard: egressGuard)
            pumpRequestBody()
        case .relayResponseBody(let hop, let inbound, let outbound, let observe, let scrub):
            guard let leg, leg.hop == hop else { return true }
            leg.responsePump = BodyPump(inbound: inbound, outbound: outbound, observe: observe, scrub: scrub)
            pumpResponseBody()
        case .releaseUpstream(let hop, let reuse):
            release(hop, reuse: reuse)
        case .armTimer(let purpose, let milliseconds):
            armedTimer = purpose
            sp_event_add_ms(timer, milliseconds)
        case .cancelTimer:
            armedTimer = nil
            event_del(timer)
        case .emit(let record):
            emit(record)
        case .acquireToken(let secret, let scope):
            acquireToken(secret, from: scope)
        case .markTokenStale(let secret, let token, let scope):
            markTokenStale(secret, token, from: scope)
        case .writeToClient, .startClientTLS, .readNextRequest, .closeClient, .splice, .relayWebSocket, .finishTunnel:
            return false
        }
        return true
    }

    // MARK: The hop's leg

    func connect(_ hop: HopID, _ origin: Origin, _ upstreamTransport: UpstreamTransport, reusePooled: Bool, egress: EgressClearance) {
        if let old = leg { old.release(reuse: false) }  // the machine releases first; never two legs
        // A hop to a transparent connection's own origin goes to the address the client was going
        // to, never to what its name resolves to now; such legs are never pooled (`PinnedUpstream`).
        if let pin = pinnedUpstream, pin.origin == origin {
            let leg = UpstreamLeg(
                hop: hop, origin: origin, transport: upstreamTransport, http2: .never, egress: egress, worker: worker, owner: self,
                inputLimit: bodyBufferLimit, pinnedAddress: pin.address)
            self.leg = leg
            leg.connect()
            return
        }
        var http2 = UpstreamHTTP2.choose(transport: upstreamTransport, clientSpokeH2c: clientSpokeH2c, isUpgrade: currentHopIsUpgrade)
        if http2 == .priorKnowledge, worker.pool.speaksOnlyHTTP1(origin) { http2 = .never }
        let leg = UpstreamLeg(
            hop: hop, origin: origin, transport: upstreamTransport, http2: http2, egress: egress, worker: worker, owner: self,
            inputLimit: bodyBufferLimit)
        self.leg = leg
        if reusePooled, leg.joinSharedHTTP2() {
            return  // connected (a stream on a live HTTP/2 connection)
        } else if reusePooled, let pooled = worker.pool.checkout(origin, admitting: egress) {
            leg.attach(pooled: pooled)
            deliver(.upstreamConnected(hop, reused: true, peer: leg.upstreamPeer))
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
        deliver(.upstreamConnected(leg.hop, reused: leg.joinedSharedConnection, peer: leg.upstreamPeer))
        flushOutputs()
    }

    func legConnectFailed(_ leg: UpstreamLeg, _ error: ProxyError) {
        guard leg === self.leg else { return }
        deliver(.upstreamConnectFailed(leg.hop, error))
        flushOutputs()
    }

    func legHoldBackExpired(_ leg: UpstreamLeg) {
        guard leg === self.leg, !isClosed else { return }
        leg.releaseHeldBytes(clientOutput: responseSink)
        responseSinkFilled()
        flushOutputs()
    }

    /// Parses heads for as long as the machine expects one from this hop: interim responses keep
    /// it waiting; once the final head is handled (relayed, followed, blocked) the loop ends, and
    /// the hop's remaining bytes are never read as another response (a desync otherwise;
    /// docs/security-model.md, "Redirects").
    func readResponseHeads(_ leg: UpstreamLeg) {
        while leg === self.leg, expectsResponseHead(from: leg.hop), let input = leg.input, EventBuffer.length(input) > 0 {
            leg.sawResponseBytes = true
            do {
                guard let (head, _) = try leg.responseReader.next(from: input, HeadParser.parseResponse) else { return }
                let pipelined = !leg.awaitsRequestBytes && clientPipelined
                deliver(.responseHead(leg.hop, head, clientPipelined: pipelined))
            } catch {
                deliver(.responseHeadInvalid(leg.hop, reason: error.responseProblem))
                return
            }
        }
    }

    // MARK: Bodies (the pumps move bytes; the machine hears what moved, throttled)

    /// Bytes moved since the last (throttled) report, so the record of an exchange that ends now
    /// counts every byte.
    func reportPendingBodyProgress() {
        guard let leg else { return }
        if leg.requestPump?.isComplete == false, let progress = leg.requestProgress() { deliver(.requestBody(leg.hop, progress)) }
        if leg.responsePump?.isComplete == false, let progress = leg.responseProgress() { deliver(.responseBody(leg.hop, progress)) }
    }

    func progressDue() -> Bool {
        let now = monotonicMicroseconds()
        guard now - lastProgressReport >= progressInterval else { return false }
        lastProgressReport = now
        return true
    }

    func collectRequestBody() {
        guard let collector, let progress = collector.collect(from: requestSource, highWatermark: highWatermark) else { return }
        requestSourceDrained()
        if case .progressed = progress {} else { self.collector = nil }
        deliver(.collectedBody(progress))
    }

    func pumpRequestBody() {
        guard let leg else { return }
        let reports = leg.pumpRequestBody(from: requestSource, highWatermark: highWatermark, reportProgress: progressDue())
        requestSourceDrained()
        leg.scheduleHoldBackRelease()
        if let progress = reports.progress { deliver(.requestBody(leg.hop, progress)) }
        // After the bytes forwarded before it: the machine cuts the hop and answers 403 if it can.
        if let finding = reports.blocked { deliver(.requestBody(leg.hop, .blocked(finding, bytesSent: reports.blockedAfterBytesSent))) }
        if leg === self.leg, leg.awaitsRequestBytes, requestSourceEnded, EventBuffer.length(requestSource) == 0 {
            deliver(.clientInputClosed(bufferedBytes: 0))  // gone mid-body: the machine aborts
        }
    }

    func pumpResponseBody() {
        guard let leg else { return }
        let reports = leg.pumpResponseBody(to: responseSink, highWatermark: bodyBufferLimit, reportProgress: progressDue())
        responseSinkFilled()
        leg.scheduleHoldBackRelease()
        // The findings first: a `complete` ends the exchange, and its record must already name them.
        if let findings = reports.scrubbed { deliver(.responseBody(leg.hop, .scrubbed(findings))) }
        if let progress = reports.progress { deliver(.responseBody(leg.hop, progress)) }
    }

    // MARK: The log line

    /// One finished exchange (or hop, or tunnel): its metrics and its access-log line.
    func emit(_ record: ExchangeRecord) {
        ExchangeLine.emit(record, configuration)
    }

    // MARK: Access tokens (through the context's `AccessTokenSource`, whatever kind it is)

    /// The token comes back as an event on this loop (at once when cached, else from the worker's
    /// mailbox once the one fetch in flight ends); an exchange gone by then ignores it.
    func acquireToken(_ secret: String, from scope: ScopeContext) {
        let requested = scope.tokens?.acquire(secret: secret, mailbox: worker.tokenMailbox) { [weak self] result in
            guard let self, !self.isClosed else { return }
            self.awaitedToken = nil
            // From the mailbox this is a loop callback of its own: it flushes what it wrote, as the
            // socket callbacks do (at once, inside `execute`, the running callback does).
            let fromMailbox = !self.dispatching
            switch result {
            case .success(let token): self.deliver(.tokenReady(secret: secret, token))
            case .failure(let failure): self.deliver(.tokenFailed(secret: secret, provider: failure.provider, reason: failure.reason))
            }
            if fromMailbox, !self.isClosed { self.flushOutputs() }
        }
        switch requested {
        case .answered:
            break
        case .waiting(let waiterID):
            if let tokens = scope.tokens { awaitedToken = (tokens, secret, waiterID) }
        case nil:
            // The context's source does not know the secret (a reload removed it): fail closed.
            deliver(.tokenFailed(secret: secret, provider: scope.tokens?.provider(of: secret), reason: .noTokenSource))
        }
    }

    /// A 401 came back from an origin `token` went to: the source drops it if it is still current.
    func markTokenStale(_ secret: String, _ token: AccessToken, from scope: ScopeContext) {
        scope.tokens?.markStale(secret: secret, token: token)
    }

    /// The exchange ends while it waits for a token: the fetch drops its answer (and this host,
    /// which the answer's closure holds).
    func withdrawFromTokenWait() {
        guard let (tokens, secret, waiterID) = awaitedToken else { return }
        awaitedToken = nil
        tokens.withdraw(secret: secret, waiterID: waiterID)
    }
}

/// What every exchange's log line shares, whichever host wrote it.
enum ExchangeLine {
    /// The line of `record` and its metrics.
    static func emit(_ record: ExchangeRecord, _ configuration: EngineConfiguration) {
        hintOnStderrOnce(record.failure, client: record.client)
        configuration.metrics.count(record, policy: configuration.scope.context.policy)
        let logLine = configuration.accessLog?.record(record)
        // The view's record is made only while someone watches (ViewFeed.isRecording), or for a
        // test's observer; it starts with the log line's fields, made once for both.
        if let feed = configuration.viewFeed, feed.isRecording || configuration.viewRecorder?.observer != nil {
            publishView(record, to: feed, configuration, logLine: logLine)
        }
    }

    /// The events already hinted on stderr in this process (ExchangeFailure.stderrHint): each the
    /// first time only, so a client retrying in a loop does not flood it.
    private static let hintedOnStderr = Locked<Set<String>>([])

    static func hintOnStderrOnce(_ failure: ExchangeFailure?, client: String) {
        guard let (event, hint) = failure?.stderrHint,
            hintedOnStderr.withLock({ $0.insert(event).inserted })
        else { return }
        Diagnostics.error(event, [("client", client), ("hint", hint + "; said once, the access log has every case")])
    }
}
