// One upstream attempt of an exchange, as a value. A followed redirect or a retry of a stale pooled
// connection starts a new `HopState` whole: nothing of the previous attempt (connected, reused,
// retried, body counts, response state, tokens) can leak into the next by a forgotten reset.

/// The hop an exchange is on now, and how far it got.
public struct HopState: Sendable {
    public let hop: Hop
    public let id: HopID
    /// The access tokens this hop carries (a 401 marks them stale).
    public let tokens: [String: AccessToken]
    /// This attempt is the retry of a stale pooled connection (there is only one).
    public let retried: Bool
    public var connected = false
    /// The connection came from the pool.
    public var reused = false
    /// Body bytes taken from the client for this hop (payload only; framing in `requestConsumed`).
    /// A body read before planning counts from the start.
    public var requestPayload: UInt64
    public var requestConsumed: UInt64 = 0
    public var response: ResponseState = .awaiting(interims: 0)
    /// The origin hung up (a body being relayed is finished or cut once drained).
    public var upstreamClosed = false

    public enum ResponseState: Sendable, Equatable {
        case awaiting(interims: Int)
        /// The final head went to the client; its body is being relayed. `keepClient`: the client
        /// connection may serve another request once the body is whole (the connection decided).
        case relaying(allowsReuse: Bool, delimitedByClose: Bool, keepClient: Bool, payload: UInt64)
    }

    public init(hop: Hop, id: HopID, tokens: [String: AccessToken], requestPayload: UInt64 = 0) {
        self.init(hop: hop, id: id, tokens: tokens, retried: false, requestPayload: requestPayload)
    }

    private init(hop: Hop, id: HopID, tokens: [String: AccessToken], retried: Bool, requestPayload: UInt64) {
        self.hop = hop
        self.id = id
        self.tokens = tokens
        self.retried = retried
        self.requestPayload = requestPayload
    }

    /// The same hop on a fresh connection, after a pooled one closed before anything of the body
    /// was taken: only what was read before planning carries over.
    public func retry(as id: HopID) -> HopState {
        HopState(hop: hop, id: id, tokens: tokens, retried: true, requestPayload: requestPayload)
    }

    public var isAwaitingHead: Bool {
        if case .awaiting = response { return true }
        return false
    }

    /// The log line of this hop with its bytes counted: the one place request and response body
    /// bytes go into a record (`bytesIn` also counts the head, `bytesOut` what the proxy wrote).
    public func accounted(_ record: ExchangeRecord) -> ExchangeRecord {
        var record = record
        record.bytesIn += requestPayload
        // The head went out once connected (a hop that never connected sent nothing).
        if connected { record.upstreamRequest = hop.upstreamHead }
        if case .relaying(_, _, _, let payload) = response { record.bytesOut += payload }
        return record
    }
}
