import HTTP1Codec

// The vocabulary HTTP/2 adds to the core: header fields as HPACK delivers them, what a stream's
// connection is for, the mapped request, the error codes of RFC 9113 §7, and what a stream's
// machine asks of the engine. Nothing here touches a socket or a frame.

/// One header field of an HTTP/2 header block, as HPACK decoded it (names as sent: a valid
/// request has them in lower case, RFC 9113 §8.2.1; pseudo-header names start with `:`). Values
/// hold one Unicode scalar per byte, like HTTP/1 field values (`HTTPField.value(wireBytes:)`).
public struct H2HeaderField: Sendable, Equatable {
    public var name: String
    public var value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }
}

/// What the HTTP/2 connection a stream arrived on is for: it decides how `:scheme`,
/// `:authority` and `:path` become a request target.
public enum H2Connection: Sendable, Equatable {
    /// h2c with prior knowledge on the plain listener: a forward proxy. Each stream names its
    /// origin (`:scheme` + `:authority`) and becomes an absolute-form request.
    case cleartext
    /// Inside an intercepted CONNECT (ALPN h2): every stream is for the tunnel's origin; `:path`
    /// is the origin-form target and `:authority` its Host.
    case intercepted(Origin)
    /// On a route's listener: origin-form requests for the route's upstream, `:authority` its Host
    /// (checked by admission like an HTTP/1.1 Host).
    case routed

    /// The connection a stream of a client connection in `mode` arrived on.
    public init(_ mode: ConnectionMode) {
        switch mode {
        case .forwardProxy: self = .cleartext
        case .intercepted(let origin, _): self = .intercepted(origin)
        case .route, .transparent: self = .routed
        }
    }
}

/// A request stream's header block mapped to the HTTP/1-shaped head every rule reads.
public struct H2Request: Sendable, Equatable {
    /// Version `.http2`; `Host` from `:authority`; the target absolute-form (cleartext) or
    /// origin-form (intercepted, routed); cookie crumbs joined.
    public var head: RequestHead
    /// The stream's DATA is a body of unknown length (no content-length, no END_STREAM on the
    /// HEADERS): the head says `Transfer-Encoding: chunked`, and the engine writes each DATA
    /// payload into the request buffer as a chunk (and the last chunk at END_STREAM), so the
    /// body is read like an HTTP/1.1 chunked one.
    public var reframedAsChunked: Bool
    /// An RFC 8441 extended CONNECT for a WebSocket: the head is the HTTP/1.1 upgrade request
    /// (GET, `Upgrade: websocket`) carrying this key, which the proxy made; the origin's 101 must
    /// answer it (`ExtendedConnect.originAccepted`). Nil for every other request.
    public var webSocketKey: String?

    public init(head: RequestHead, reframedAsChunked: Bool, webSocketKey: String? = nil) {
        self.head = head
        self.reframedAsChunked = reframedAsChunked
        self.webSocketKey = webSocketKey
    }

    /// The stream is a WebSocket (RFC 8441): after the 200 its DATA are frames, not a body.
    public var isWebSocket: Bool { webSocketKey != nil }
}

/// RFC 9113 §7: the codes of RST_STREAM and GOAWAY.
public enum H2ErrorCode: UInt32, Sendable, Equatable, CaseIterable {
    case noError = 0x0
    case protocolError = 0x1
    case internalError = 0x2
    case flowControlError = 0x3
    case settingsTimeout = 0x4
    case streamClosed = 0x5
    case frameSizeError = 0x6
    case refusedStream = 0x7
    case cancel = 0x8
    case compressionError = 0x9
    case connectError = 0xa
    case enhanceYourCalm = 0xb
    case inadequateSecurity = 0xc
    case http11Required = 0xd
}

/// How a stream's response body is sent.
public enum StreamBody: Sendable, Equatable {
    /// No body: END_STREAM on the HEADERS frame.
    case none
    /// The proxy's own answer (an error's JSON), then END_STREAM.
    case bytes([UInt8])
    /// The origin's body, relayed (`relayResponseBody` writes its payload into the stream's
    /// response buffer); `.endStream` says when it is complete.
    case relayed
}

/// What a stream's machine asks of the engine, in order.
public enum StreamAction: Sendable, Equatable {
    /// One of the exchange's own actions (connect, send, pump, relay, release, timers, tokens,
    /// the log line), carried out for this stream exactly as for an HTTP/1.1 exchange. Never
    /// `writeToClient`, `closeClient`, `readNextRequest`, `startClientTLS`, `splice` or
    /// `finishTunnel`: what concerns the client is rendered as the cases below.
    case exchange(ConnectionAction)
    /// An RFC 8441 WebSocket was accepted (its `:status 200` is the `respond` before this): from
    /// now on the stream's DATA payloads and the hop's bytes are WebSocket frames, moved both ways
    /// under this plan (client frames: guard and placeholders; origin frames: scrub) by the same
    /// `WebSocketFrameFilter` as an HTTP/1.1 upgrade, or unread when nil (no rule reads them).
    case relayWebSocket(HopID, WebSocketFramePlan?)
    /// The final response's HEADERS (`:status` from `status`; `fields` lower-case, without
    /// connection-specific fields, scrubbed, with `x-request-id`) and how its body follows.
    case respond(status: Int, fields: HTTPFields, body: StreamBody)
    /// An interim (1xx, never 101) response's HEADERS.
    case interim(status: Int, fields: HTTPFields)
    /// The relayed body is complete: END_STREAM (an empty DATA frame if nothing else carries it).
    case endStream
    /// RST_STREAM with this code: a cut response (INTERNAL_ERROR), a request that cannot complete.
    case reset(H2ErrorCode)
}
