import CLibevent
import HTTP1Codec
import PosixSupport
import ProxyCore

// The action executor: each `ConnectionAction` the machine returns, carried out on the sockets, the
// pool, the timer and the log. Changes when the machine gains an action.
extension ClientConnection {
    func execute(_ action: ConnectionAction) {
        if isClosed {
            // Only bookkeeping is left once the transport is gone.
            switch action {
            case .emit(let record): emit(record)
            case .releaseUpstream(let hop, _): release(hop, reuse: false)
            default: break
            }
            return
        }
        switch action {
        case .writeToClient(let bytes):
            transport.write(bytes)
        case .startClientTLS(let origin):
            startClientTLS(origin)
        case .readNextRequest:
            readRequestHead()
            if !isClosed, machine.isAwaitingHead, transport.inputClosed {
                deliver(.clientInputClosed(bufferedBytes: EventBuffer.length(transport.input)))
            }
        case .closeClient(.afterFlush):
            transport.closeAfterFlush()
        case .closeClient(.now):
            close()
        case .connect(let hop, let origin, let upstreamTransport, let reusePooled):
            connect(hop, origin, upstreamTransport, reusePooled: reusePooled)
        case .sendToUpstream(let hop, let bytes):
            if let leg, leg.hop == hop { leg.write(bytes) }
        case .collectRequestBody(let framing, let limit):
            collector = BodyCollector(framing: framing, limit: limit)
            collectRequestBody()
        case .pumpRequestBody(let hop, let framing, let capture, let observe, let egressGuard):
            guard let leg, leg.hop == hop else { return }
            leg.requestPump = BodyPump(
                inbound: framing, outbound: framing, capture: capture, observe: observe,
                guard: egressGuard)
            pumpRequestBody()
        case .relayResponseBody(let hop, let inbound, let outbound, let observe, let scrub):
            guard let leg, leg.hop == hop else { return }
            leg.responsePump = BodyPump(inbound: inbound, outbound: outbound, observe: observe, scrub: scrub)
            pumpResponseBody()
        case .splice(let hop):
            guard let leg, leg.hop == hop else { return }
            leg.splicing = true
            pumpTunnel()
        case .relayWebSocket(let hop, let plan):
            guard let leg, leg.hop == hop else { return }
            leg.webSocket = WebSocketRelay(plan: plan)
            leg.splicing = true
            pumpTunnel()
        case .finishTunnel(let hop, let side):
            finishTunnel(hop, closedSide: side)
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
        }
    }
}
