import AWSSigV4
import ScopePolicy

/// AWS credentials as a credential source delivered them (static keys, STS, a container or
/// instance endpoint, a `credential_process`): the three values and, for temporary ones, when they
/// expire. Every value is a `SecretValue`, so nothing of this prints.
public struct AWSTemporaryCredentials: Sendable, Equatable, CustomStringConvertible, CustomReflectable {
    public let accessKeyID: SecretValue
    public let secretAccessKey: SecretValue
    public let sessionToken: SecretValue?
    /// Seconds since the Unix epoch; nil for long-term keys, which do not expire.
    public let expiration: Int64?

    /// Nil when a value could not be sent (see `isAcceptable`): every source goes through here,
    /// so a credential that would break the signer or the packed form never leaves a parser.
    public init?(accessKeyID: [UInt8], secretAccessKey: [UInt8], sessionToken: [UInt8]?, expiration: Int64?) {
        guard Self.isAcceptableKeyID(accessKeyID), Self.isAcceptableValue(secretAccessKey) else { return nil }
        if let sessionToken, !Self.isAcceptableValue(sessionToken) { return nil }
        self.accessKeyID = SecretValue(bytes: accessKeyID)
        self.secretAccessKey = SecretValue(bytes: secretAccessKey)
        self.sessionToken = sessionToken.map { SecretValue(bytes: $0) }
        self.expiration = expiration
    }

    /// IAM access key ids are `[\w]+` (`AWSCredentials`' rule), at most 128.
    static func isAcceptableKeyID(_ bytes: [UInt8]) -> Bool {
        !bytes.isEmpty && bytes.count <= 128 && bytes.allSatisfy(AWSCredentials.isKeyIDByteForChain)
    }

    /// Secret keys and session tokens: visible ASCII (a token goes out as a header value, so no
    /// CR/LF or other control byte; AWS issues base64 text), at most 8 KiB (STS tokens are a few
    /// hundred to ~2000 bytes). This also keeps "\n" out, which `packed` relies on.
    static func isAcceptableValue(_ bytes: [UInt8]) -> Bool {
        !bytes.isEmpty && bytes.count <= 8192 && bytes.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }

    /// The credentials as the signer takes them.
    public func signingCredentials() throws(AWSSigV4Error) -> AWSCredentials {
        try AWSCredentials(
            accessKeyID: accessKeyID.exposedBytes, secretAccessKey: secretAccessKey.exposedBytes,
            sessionToken: sessionToken?.exposedBytes)
    }

    /// Whether they are past `expiration` at `now` (long-term keys never are).
    public func isExpired(at now: Int64) -> Bool {
        guard let expiration else { return false }
        return expiration <= now
    }

    /// One value holding all of it, for a token cache that keeps one secret per entry:
    /// `aws1\nKEYID\nSECRET\nTOKEN\nEXPIRATION` (TOKEN and EXPIRATION empty when absent). No
    /// field can hold "\n" (`isAcceptableValue`), so the split is unambiguous.
    public var packed: SecretValue {
        var bytes = Array(Self.packedTag.utf8) + [0x0A]
        bytes += accessKeyID.exposedBytes + [0x0A]
        bytes += secretAccessKey.exposedBytes + [0x0A]
        bytes += (sessionToken?.exposedBytes ?? []) + [0x0A]
        bytes += expiration.map { Array(String($0).utf8) } ?? []
        return SecretValue(bytes: bytes)
    }

    /// Reads `packed`; nil for anything else (the same checks as a parser's).
    public init?(packed: SecretValue) {
        let parts = packed.exposedBytes.split(separator: 0x0A, omittingEmptySubsequences: false)
        guard parts.count == 5, Array(parts[0]) == Array(Self.packedTag.utf8) else { return nil }
        var expiration: Int64?
        if !parts[4].isEmpty {
            guard parts[4].count <= 18, parts[4].allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
            expiration = parts[4].reduce(Int64(0)) { $0 * 10 + Int64($1 - 0x30) }
        }
        self.init(
            accessKeyID: Array(parts[1]), secretAccessKey: Array(parts[2]),
            sessionToken: parts[3].isEmpty ? nil : Array(parts[3]), expiration: expiration)
    }

    static let packedTag = "aws1"

    public var description: String {
        "AWSTemporaryCredentials(<redacted>\(sessionToken == nil ? "" : ", session token")\(expiration.map { ", expires \($0)" } ?? ""))"
    }
    public var customMirror: Mirror { Mirror(self, children: ["expiration": expiration as Any]) }
}

extension AWSCredentials {
    /// `isKeyIDByte` is internal to AWSSigV4; the same rule, for the chain's parsers.
    static func isKeyIDByteForChain(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x5F
    }
}
