import CLibevent
import HTTP1Codec
import PosixSupport
import ProxyCore

// The action executor: each `ConnectionAction` the machine returns. The exchange's own (the hop,
// bodies, timer, tokens, the line) are ExchangeHost's; what is about HTTP/1.1 (writing to the
// client, tunnels, the close) is carried out here. Changes when the machine gains an action.
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
        if executeExchangeAction(action) { return }
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
        default:
            break  // the exchange's own, carried out above (ExchangeHost.executeExchangeAction)
        }
    }
}
