import CLibevent
import HTTP1Codec

/// One request/response exchange on a client connection, from the parsed request head to the last
/// response byte. Owned by its `ClientConnection`; touched only on its worker's thread.
final class Exchange {
    enum Kind {
        case forward
        /// `Connection: upgrade`; becomes a tunnel after a 101.
        case upgrade
        /// CONNECT: becomes a tunnel once the upstream connection is up.
        case connect
    }

    let request: RequestHead
    let origin: Origin
    let kind: Kind
    /// The serialized head sent upstream, kept so a stale pooled connection can be retried.
    let upstreamHead: [UInt8]
    var requestPump: BodyPump

    var connector: UpstreamConnector?
    var upstream: OpaquePointer?
    var upstreamReused = false
    var retried = false
    var upstreamClosed = false

    var responseScanner = HeadScanner(limits: .response)
    /// Any byte of a response (interim or final) arrived: retrying is no longer safe.
    var receivedResponseBytes = false
    var informationalResponses = 0
    var response: ResponseHead?
    var responsePump = BodyPump(inbound: .none, outbound: .none)
    /// The client connection stays open after this exchange (decided when the head is written).
    var keepAlive = false

    init(request: RequestHead, origin: Origin, kind: Kind, upstreamHead: [UInt8], requestFraming: BodyFraming) {
        self.request = request
        self.origin = origin
        self.kind = kind
        self.upstreamHead = upstreamHead
        requestPump = BodyPump(inbound: requestFraming, outbound: requestFraming)
    }

    var responseStarted: Bool { response != nil }
}
