import Digests
import HTTP1Codec

/// WebSocket over HTTP/2 (RFC 8441, extended CONNECT): a stream with `:method CONNECT` and
/// `:protocol websocket` becomes the very request an HTTP/1.1 client sends for a WebSocket upgrade
/// (GET, `Upgrade: websocket`, `Connection: Upgrade`, `Sec-WebSocket-Version`, and a
/// `Sec-WebSocket-Key` of the proxy's own, since HTTP/2 carries neither key nor accept, RFC 8441 §5),
/// so every rule reads it unchanged; the upstream leg speaks HTTP/1.1 (an upgrade cannot ride
/// HTTP/2). The origin's 101 is checked against that key and becomes `:status 200` on the stream.
public enum ExtendedConnect {
    /// RFC 6455 §1.3: the GUID the accept value is derived with.
    static let webSocketGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    /// The only `:protocol` served (compared case-insensitively, as an upgrade token, RFC 9110 §7.8).
    public static let webSocketProtocol = "websocket"

    /// RFC 6455 §4.1: 16 random bytes, base64 (a fresh one per stream: the accept proves the origin
    /// answered this handshake, not a replayed one).
    public static func freshKey() -> String { Base64.encode(RandomBytes.generate(16)) }

    /// RFC 6455 §4.2.2 step 5.4: base64(SHA-1(key + GUID)).
    public static func accept(forKey key: String) -> String {
        Base64.encode(SHA1.hash(Array((key + webSocketGUID).utf8)))
    }

    /// Whether the origin's 101 completes the handshake the proxy started with `key`: exactly one
    /// Sec-WebSocket-Accept, equal to the one the key gives (RFC 6455 §4.1, the client's checks).
    public static func originAccepted(_ head: ResponseHead, key: String) -> Bool {
        let accepts = head.fields.values("sec-websocket-accept")
        return accepts.count == 1 && accepts[0] == accept(forKey: key)
    }

    /// The fields the mapping adds to the client's (the log's `req_headers` shows the client's only).
    static let addedToRequest: [String] = ["sec-websocket-key", "upgrade", "connection"]

    /// The fields of the 101 the client must not see on HTTP/2: the accept belongs to the proxy's
    /// handshake with the origin (RFC 8441 §5: none on HTTP/2), Upgrade and Connection to HTTP/1.1.
    static let removedFromSuccess: [String] = ["sec-websocket-accept", "upgrade", "connection"]
}

extension ExchangeRecord {
    /// The frame relay stopped a WebSocket (HTTP/1.1 upgrade or RFC 8441 stream alike): the line
    /// names the rule and the secret, never a value.
    mutating func noteWebSocketStop(_ stop: WebSocketFrameFilter.Stop, _ plan: WebSocketFramePlan, sender: WebSocketSender) {
        let origin = plan.origin
        switch stop {
        case .secret(let finding):
            guardFinding = finding
            failure = .proxy(
                finding.isPlaceholder
                    ? .placeholderOutOfScope(
                        secret: finding.secret, where: "websocket", origin, plan.refusals[finding.secret] ?? .notListed)
                    : .secretEgressBlocked(finding, where: "websocket", origin))
        case .protocolError(let error):
            failure = .proxy(
                sender == .client
                    ? .malformedRequest("WebSocket: " + error.reason) : .badUpstreamResponse(origin, "WebSocket: " + error.reason))
        }
    }
}
