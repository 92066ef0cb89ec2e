// Stand-in for ProxyCore's `H2HeaderField` (same shape) so the nghttp2 glue builds on its own
// branch. Delete this file when ProxyCore's type is merged: nothing else changes.

/// One HTTP/2 header field: names as HPACK gave them (lowercase on the wire), values one Unicode
/// scalar per wire byte (ISO-8859-1), as `HTTPField.value(wireBytes:)` builds them.
public struct H2HeaderField: Sendable, Equatable {
    public var name: String
    public var value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }
}
