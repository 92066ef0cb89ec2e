import HTTP1Codec
import ScopePolicy

// The exchange machine's response side: a head from the hop becomes an interim, a switch of
// protocols, the final response, a refusal or a followed redirect (RedirectFollowing.swift). The
// connection renders what goes to its client and hands the rendered head back here to be
// scrubbed and logged.
extension ExchangeMachine {
    func responseHead(_ head: ResponseHead, _ effects: inout MachineEffects) -> ExchangeOutcome {
        guard let current = hopState, case .awaiting(let interims) = current.response else { return .ignored(.notAwaited) }
        // What the origin said, before anything here changes it (the live view shows both heads).
        if !head.isInformational || head.status == 101 { record.originResponse = head }
        if head.isInformational {
            if head.status == 101 {
                guard current.hop.isUpgrade else {
                    return fail(.badUpstreamResponse(current.hop.origin, "101 without an upgrade request"), &effects)
                }
                // The proxy offered no extension where it reads frames; one the origin chose anyway
                // would make frames it cannot read (RFC 6455 §9.1 lets the client fail such an answer).
                if current.hop.webSocket != nil, head.fields.contains("sec-websocket-extensions") {
                    return fail(
                        .badUpstreamResponse(current.hop.origin, "101 with a WebSocket extension that was not offered"), &effects)
                }
                return .switchingProtocols(head)
            }
            guard interims < limits.maxInformationalResponses else {
                return fail(.badUpstreamResponse(current.hop.origin, "too many interim responses"), &effects)
            }
            hopState!.response = .awaiting(interims: interims + 1)
            return .interim(head)
        }

        if head.status == 401 {
            // The origin refused the token this hop carried: the next request gets a new one (the
            // source ignores this if a newer token has replaced it meanwhile).
            for (secret, token) in current.tokens.sorted(by: { $0.key < $1.key }) {
                effects.append(.markTokenStale(secret: secret, token, from: scope))
            }
        }
        let replayed: [UInt8]? = if case .replayed(let bytes) = current.hop.body { bytes } else { nil }
        let context = ResponseDirector.Context(
            request: request, hop: current.hop, chain: chain, mode: mode, scope: scope, requestComplete: requestRead,
            // A followed hop replays what it sent (a 303 made it a bodiless GET); the client's first
            // hop, what the client sent.
            replayableBody: replayed ?? (request.framing == .none ? [] : captured))
        switch ResponseDirector.direct(head, context) {
        case .relay(let head, let redirect):
            record.redirect = redirect
            do {
                return .response(head, framing: try BodyFraming.forResponse(head, requestMethod: current.hop.target.method))
            } catch {
                return fail(.badUpstreamResponse(current.hop.origin, error.responseProblem), &effects)
            }
        case .refuse(let error, let redirect):
            record.redirect = redirect
            return fail(error, &effects)  // the redirect's target receives nothing
        case .follow(let target, let body, let redirect):
            return follow(response: head, to: target, body: body, redirect: redirect, &effects)
        }
    }

    /// A head about to go to the client (interim, final or 101), as the connection rendered it:
    /// masked of what this hop's scrub covers, the findings counted in the line.
    public func scrub(_ clientHead: inout ResponseHead) {
        guard let scrub = hopState?.hop.scrub else { return }
        record.scrubbed += ResponseScrub.scrubHead(&clientHead, with: scrub)
    }

    /// What the final head's body is relayed with, once the connection rendered and scrubbed the head.
    public enum BodyScrub: Sendable, Equatable {
        /// Masked with this watch (nil: nothing to mask).
        case scrub(SecretWatch?)
        /// Not relayed: the exchange failed instead (this outcome).
        case refused(ExchangeOutcome)
    }

    /// The scrub of the final response's body. A body whose encoding cannot be scanned passes
    /// unscanned and says so in the log, or with `scrub: strict` (which asked for identity) is
    /// refused: the body never reaches the client.
    public func bodyScrub(for clientHead: ResponseHead, _ effects: inout MachineEffects) -> BodyScrub {
        guard let current = hopState, let scrub = current.hop.scrub else { return .scrub(nil) }
        guard let encoding = ResponseScrub.unscannableEncoding(clientHead.fields) else { return .scrub(scrub) }
        guard scope.protection.scrub != .strict else {
            return .refused(
                fail(
                    .badUpstreamResponse(
                        current.hop.origin,
                        "\(encoding) body despite Accept-Encoding: identity (scrub: strict cannot scan it)"),
                    &effects))
        }
        record.scrubSkipped = encoding
        return .scrub(nil)
    }

    /// The final head went to the client (`bytes` long, as rendered): its body is relayed from
    /// `inbound` framing to `outbound`. `keepClient`: the client connection may serve another
    /// request once this response is whole (the connection's decision).
    public func relay(
        _ upstream: ResponseHead, clientHead: ResponseHead, bytes: Int, inbound: BodyFraming, outbound: BodyFraming,
        keepClient: Bool, scrub: SecretWatch?, _ effects: inout MachineEffects
    ) {
        guard let current = hopState else { return }
        record.status = upstream.status
        record.responseFields = clientHead.fields
        record.bytesOut += UInt64(bytes)
        hopState!.response = .relaying(
            allowsReuse: upstream.allowsReuse, delimitedByClose: inbound == .untilClose,
            keepClient: keepClient, payload: 0)
        effects.append(
            .relayResponseBody(
                current.id, inbound: inbound, outbound: outbound,
                observe: logBodies ? limits.maxObservedBody : nil, scrub: scrub))
        effects.arm(.stall)
    }

    /// The client switched protocols (101) with `clientHead`, as rendered: from now on the hop's
    /// bytes are WebSocket frames, read under `frames` (guarded, substituted, scrubbed) or, when nil,
    /// spliced unread; under the line this returns (`proto: websocket`). The 101's head is scrubbed.
    public func upgraded(_ clientHead: inout ResponseHead) -> (hop: HopID, record: ExchangeRecord, frames: WebSocketFramePlan?)? {
        guard let current = hopState else { return nil }
        scrub(&clientHead)
        var line = current.accounted(record)
        line.status = 101
        line.responseFields = clientHead.fields
        // Every upgrade relayed is a WebSocket one (`Forwarding.isUpgradeRequest`).
        line.proto = .websocket
        phase = .done
        return (current.id, line, current.hop.webSocket)
    }
}
