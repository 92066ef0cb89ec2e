/// Why a message was refused. Reasons are fixed strings chosen here, never bytes from the input,
/// so an error can be logged or returned to the client without echoing anything the peer sent.
public enum HTTPParseError: Error, Equatable, Sendable {
    /// The head did not end within `HeadLimits.maxHeadBytes` (431 for requests).
    case headTooLarge
    /// More header fields than `HeadLimits.maxFields` (431 for requests).
    case tooManyFields
    /// The request target is longer than `HeadLimits.maxTargetBytes` (414).
    case targetTooLong
    /// A protocol version other than HTTP/1.0 or HTTP/1.1 (505).
    case unsupportedVersion
    /// A transfer coding the proxy does not implement (501).
    case unsupportedTransferCoding
    /// Anything else that is not strict RFC 9112 (400 for requests, 502 for responses).
    case malformed(String)
    /// The peer opened with a TLS handshake record (0x16 0x03, RFC 8446 §5.1) where an HTTP/1.1
    /// head was expected: it speaks TLS to a plain listener (an `https://` proxy URL).
    case tlsHandshake
}

public struct HeadLimits: Sendable, Equatable {
    public var maxHeadBytes: Int
    public var maxFields: Int
    public var maxTargetBytes: Int

    public init(maxHeadBytes: Int = 64 * 1024, maxFields: Int = 100, maxTargetBytes: Int = 8 * 1024) {
        self.maxHeadBytes = maxHeadBytes
        self.maxFields = maxFields
        self.maxTargetBytes = maxTargetBytes
    }

    public static let request = HeadLimits()
    /// Origins are less constrained than clients (long Set-Cookie lists), but still bounded.
    public static let response = HeadLimits(maxHeadBytes: 64 * 1024, maxFields: 200, maxTargetBytes: 0)
}
