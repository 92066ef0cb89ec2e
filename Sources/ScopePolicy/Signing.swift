/// How a scope signs the requests it covers (`sign:` in the config), instead of or besides
/// injecting headers. One kind today; the enum leaves room for others without a flag.
public enum SigningSpec: Sendable, Equatable {
    case awsSigV4(AWSSigV4Spec)

    /// The secrets the signature is computed from (for `secretNames`, preflight and the tripwire).
    public var secretNames: [String] {
        switch self {
        case .awsSigV4(let spec): spec.secretNames
        }
    }

    /// The secrets whose values go on the wire with a signature (the access key id in
    /// `Authorization`, the session token in `X-Amz-Security-Token`), never the secret key.
    public var sentSecretNames: [String] {
        switch self {
        case .awsSigV4(let spec): [spec.accessKeyIDSecret] + (spec.sessionTokenSecret.map { [$0] } ?? [])
        }
    }

    /// For the log's `signed` field and metrics: `aws_sigv4`.
    public var kind: String {
        switch self {
        case .awsSigV4: "aws_sigv4"
        }
    }
}

/// AWS Signature Version 4 for one service in one region. The credentials are secret *names*;
/// their values are looked up for every request (a rotated file takes effect on the next one).
public struct AWSSigV4Spec: Sendable, Equatable {
    /// The signing name: `s3`, `execute-api`, `sts`, `dynamodb`, ... (lowercase letters, digits, `-`).
    public let service: String
    /// `eu-west-1`, `us-east-1`, ... (lowercase letters, digits, `-`).
    public let region: String
    public let accessKeyIDSecret: String
    public let secretAccessKeySecret: String
    /// Temporary credentials (STS) come with a session token, sent as X-Amz-Security-Token.
    public let sessionTokenSecret: String?

    /// Credentials the proxy obtains (`credentials: default | {profile: NAME}`), nil when they are
    /// named secrets. The three names above are then the parts of that one computed value, as the
    /// scrub, the guard and the log tripwire know them (`AWSCredentialSelection.partNames`).
    public let chain: AWSCredentialSelection?

    public init(service: String, region: String, accessKeyIDSecret: String, secretAccessKeySecret: String, sessionTokenSecret: String?) {
        self.service = service
        self.region = region
        self.accessKeyIDSecret = accessKeyIDSecret
        self.secretAccessKeySecret = secretAccessKeySecret
        self.sessionTokenSecret = sessionTokenSecret
        chain = nil
    }

    /// Signs with credentials from the AWS chain or a profile.
    public init(service: String, region: String, credentials: AWSCredentialSelection) {
        self.service = service
        self.region = region
        let parts = credentials.partNames
        accessKeyIDSecret = parts.accessKeyID
        secretAccessKeySecret = parts.secretAccessKey
        sessionTokenSecret = parts.sessionToken
        chain = credentials
    }

    public var secretNames: [String] { [accessKeyIDSecret, secretAccessKeySecret] + (sessionTokenSecret.map { [$0] } ?? []) }

    /// What the body contributes to the signature (docs/security-model.md, "Credentials the proxy computes").
    public enum PayloadHashing: Sendable, Equatable {
        /// S3 accepts `UNSIGNED-PAYLOAD`: the body streams through unbuffered.
        case unsignedPayload
        /// Other services need the body's SHA-256, so it is buffered up to `limit` bytes to hash it;
        /// a larger body is refused (413 `body_too_large_to_sign`).
        case hashBody(limit: Int)
    }

    /// Bodies up to 1 MiB are buffered to be hashed (docs/configuration.md, AWS SigV4).
    public static let maxHashedBodyBytes = 1 << 20

    public var payloadHashing: PayloadHashing {
        service == "s3" ? .unsignedPayload : .hashBody(limit: Self.maxHashedBodyBytes)
    }

    /// Region and service names: lowercase letters, digits and `-`, at most 64 (they go into the
    /// credential scope, `DATE/REGION/SERVICE/aws4_request`). The signer checks the same rule.
    public static func isValidScopeComponent(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 64
            && text.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D }
    }
}
