import CLibevent
import HTTP1Codec
import ScopePolicy

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
    /// The scope context this exchange started with (a reload does not change it mid-flight).
    var context: ScopeContext = .stripEverything
    /// What the scope rules did (names only), for the log and for the next hop of a chain.
    var decision = ScopeDecision()
    var chain = ChainContext()
    /// Redirects already followed by the proxy to get here.
    var hops = 0
    var pathAndQuery = ""
    /// The method sent upstream (a followed 303 turns POST into GET).
    var method = ""
    /// A body replayed from memory on a followed 307/308 instead of read from the client.
    var replayBody: [UInt8]?
    var requestFraming: BodyFraming = .none

    /// The serialized head sent upstream, kept so a stale pooled connection can be retried.
    let upstreamHead: [UInt8]
    var requestPump: BodyPump

    var connector: UpstreamConnector?
    var upstream: OpaquePointer?
    var upstreamReused = false
    /// The upstream bufferevent encrypts (https): it is flushed by libevent, never written directly.
    var upstreamTLS = false
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
        self.requestFraming = requestFraming
    }

    /// The request body as it can be replayed: empty when there was none, nil when it was not kept.
    var replayableBody: [UInt8]? {
        if let replayBody { return replayBody }
        return requestFraming == .none ? [] : requestPump.captured
    }

    var responseStarted: Bool { response != nil }
}
