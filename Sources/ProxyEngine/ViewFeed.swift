/// One exchange's record for the live decision view (docs/view.md): a complete JSON object,
/// already redacted and tripwire-scrubbed by whoever built it, and the keys the `/view/events`
/// filters match on.
public struct ViewEntry: Sendable {
    /// The record: a JSON object (`{...}`) without the feed's `seq`, which the feed adds.
    public var json: [UInt8]
    /// The configured client's name (`client_id`), or nil.
    public var clientID: String?
    /// The client's address (`127.0.0.1:5000`).
    public var clientAddress: String
    /// `host:port` of the origin, or nil when the request named none readable.
    public var origin: String?

    public init(json: [UInt8], clientID: String?, clientAddress: String, origin: String?) {
        self.json = json
        self.clientID = clientID
        self.clientAddress = clientAddress
        self.origin = origin
    }
}

/// The records the admin listener streams to viewers (`/view/events`). Workers publish; the admin
/// thread fans out. Stub: the feed itself is being built.
public final class ViewFeed: Sendable {
    public init() {}

    /// Called on a worker thread as each exchange's line is written. Never blocks on a viewer.
    public func publish(_ entry: ViewEntry) {}
}
