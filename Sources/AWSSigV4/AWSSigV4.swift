import Digests
import HTTP1Codec

/// AWS Signature Version 4 for requests the proxy forwards: pure functions, no clock, no I/O.
///
/// The proxy holds the AWS credentials; the client holds none. For a request to a signing scope's
/// origin the caller (1) removes the client's own signing fields with `removeClientSigningFields`,
/// (2) hashes the body (`payloadHash(body:)`) or uses `unsignedPayload`, (3) calls
/// `AWSSigV4Signer.sign` with the fields it will send and the current time, and (4) appends the
/// fields the signature returns. Nothing may change a signed field (or the path or query) after
/// that, or the origin rejects the request.
///
/// **Which headers are signed** (`HeaderSelection.awsRequired`, the default), and why:
/// - `host`, `x-amz-date`, and `x-amz-security-token` / `x-amz-content-sha256` when they are sent:
///   AWS requires host and every `x-amz-*` header that is sent to be signed.
/// - every other `x-amz-*` field the client sent (`x-amz-meta-*`, `x-amz-acl`, `x-amz-target`, ...):
///   same rule; these carry the request's meaning (S3 metadata, the JSON API's operation name).
/// - `content-type` and `content-md5` when present: S3 requires content-type to be signed when it
///   is sent, and content-md5 is the body digest S3 checks, so signing it binds the body's
///   integrity claim to the signature. botocore signs both too.
/// - nothing else. botocore signs every header but a short list (user-agent, hop-by-hop fields,
///   x-amzn-trace-id); a proxy should not: the client's other fields (accept, user-agent, custom
///   headers) carry no authority at AWS, and signing them would only make the signature break when
///   anything between here and the origin adjusts them. `HeaderSelection.allButBotocoreExclusions`
///   reproduces botocore's choice (the AWS test suite's vectors sign every header).
///
/// **The canonical request** (AWS "Create a canonical request"; botocore `SigV4Auth`):
/// - URI, every service but S3: the path as sent, dot segments and empty segments removed
///   (RFC 3986 §5.2.4, plus AWS's collapsing of `//`), then every byte but the RFC 3986 unreserved
///   set and `/` percent-encoded, including the `%` of escapes already there: the documented
///   "encode twice", since the path on the wire is already encoded once (botocore:
///   `quote(normalize_url_path(path), safe='/~')`).
/// - URI, S3 (`s3`): the object key's single URI encoding: the path percent-decoded (`+` as a
///   space, as S3 reads a path) and encoded once, `/` kept, nothing normalized (keys may hold `//`
///   and `.` segments). For a path an SDK serialized (everything but the unreserved set and `/`
///   escaped) this is the path as sent, which botocore's `S3SigV4Auth` and the CRT signer sign;
///   for a raw `(` or `=` from a plain HTTP client it is what S3 computes from the key.
/// - Query: each `name=value` pair percent-decoded (`+` as a space, as AWS's query APIs and the Go
///   SDK read it) and re-encoded with the unreserved set (`%20` for a space), sorted by encoded name
///   then value; a pair without `=` gets an empty value. `AWSSigV4Signature.canonicalQuery` is that
///   query: a caller that sends it instead of the client's spelling removes any doubt about how
///   the origin decodes the client's (the Go SDK, and awslabs' aws-sigv4-proxy with it, do so).
/// - Headers: lowercase names, sorted; values with leading/trailing whitespace removed and runs of
///   whitespace collapsed to one space; fields of one name joined with `,` in the order sent.
///   Values are hashed as the bytes that go on the wire.
///
/// **Verified against** (AWSSigV4Tests): all 34 cases of the AWS SigV4 test suite (canonical
/// request, string to sign and Authorization byte for byte), and botocore's `SigV4Auth` /
/// `S3SigV4Auth` (Debian bookworm's python3-botocore 1.29.27, and PyPI's 1.43.11 where a python3 on
/// PATH has it) over GET/PUT/POST requests to s3, execute-api, sts and dynamodb, with and without a
/// session token, in both header selections.
public enum AWSSigV4 {
    /// The payload hash S3 accepts instead of a body digest (the body is then not signed; TLS
    /// protects it in transit).
    public static let unsignedPayload = "UNSIGNED-PAYLOAD"

    /// The algorithm name in the string to sign and the Authorization header.
    static let algorithm = "AWS4-HMAC-SHA256"

    /// Lowercase hex of SHA-256 of the body (an empty body hashes to `e3b0c442...b855`).
    public static func payloadHash(body: [UInt8]) -> String {
        Hex.lowercase(SHA256.hash(body))
    }

    /// The fields a client may send to sign its own request. The proxy signs instead, so they are
    /// removed before signing (a client's `Authorization` must never reach the origin next to or
    /// instead of the proxy's). The client's other `x-amz-*` fields are kept and signed.
    public static let clientSigningFieldNames = ["authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"]

    /// Removes the client's signing fields; returns the lowercase names it removed (for the log),
    /// each once, in `clientSigningFieldNames` order.
    @discardableResult
    public static func removeClientSigningFields(from fields: inout HTTPFields) -> [String] {
        var removed: [String] = []
        for name in clientSigningFieldNames where fields.contains(name) {
            fields.removeAll(name)
            removed.append(name)
        }
        return removed
    }
}

/// What the signer needs to know about one request, as it will go on the wire.
public struct AWSSigV4Request: Sendable {
    public var method: String
    /// `host[:port]` exactly as the Host field carries it (the origin's authority).
    public var authority: String
    /// The path as sent (percent-encoding and all), starting with `/`; empty means `/`.
    public var path: String
    /// The query as sent, without the `?`; empty when there is none.
    public var query: String
    /// The fields that will be sent, after `AWSSigV4.removeClientSigningFields`. A Host field
    /// among them is ignored: `authority` is what is signed.
    public var fields: HTTPFields
    /// `AWSSigV4.payloadHash(body:)` or `AWSSigV4.unsignedPayload`.
    public var payloadHash: String

    public init(method: String, authority: String, path: String, query: String, fields: HTTPFields, payloadHash: String) {
        self.method = method
        self.authority = authority
        self.path = path
        self.query = query
        self.fields = fields
        self.payloadHash = payloadHash
    }
}

/// AWS credentials as the signer uses them. The secret key and the session token are secrets and
/// the access key id is kept with them, so nothing of this value is ever printed.
public struct AWSCredentials: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    let accessKeyID: String
    let secretAccessKey: [UInt8]
    let sessionToken: String?

    /// Validates the values (fails closed: an error names the part, never a value).
    /// - accessKeyID: IAM's pattern for access key ids is `[\w]+` (letters, digits, `_`); anything
    ///   else could not be a key id and could break the `Credential=` syntax.
    /// - sessionToken: goes out as a header field, so visible ASCII only (no CR/LF: no header
    ///   injection from a secret file).
    public init(accessKeyID: [UInt8], secretAccessKey: [UInt8], sessionToken: [UInt8]?) throws(AWSSigV4Error) {
        guard !accessKeyID.isEmpty, accessKeyID.count <= 128, accessKeyID.allSatisfy(Self.isKeyIDByte) else {
            throw .invalidAccessKeyID
        }
        guard !secretAccessKey.isEmpty else { throw .emptySecretAccessKey }
        if let token = sessionToken {
            guard !token.isEmpty, token.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { throw .invalidSessionToken }
        }
        self.accessKeyID = String(decoding: accessKeyID, as: UTF8.self)
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken.map { String(decoding: $0, as: UTF8.self) }
    }

    public var hasSessionToken: Bool { sessionToken != nil }

    static func isKeyIDByte(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x5F
    }

    public var description: String { "AWSCredentials(<redacted>)" }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: [:]) }
}

/// Why a request could not be signed. The messages name what is wrong, never a value.
public enum AWSSigV4Error: Error, Equatable, Sendable, CustomStringConvertible {
    case invalidAccessKeyID
    case emptySecretAccessKey
    case invalidSessionToken
    case invalidRegion
    case invalidService
    case invalidPayloadHash

    public var description: String {
        switch self {
        case .invalidAccessKeyID: "the AWS access key id is not one (letters, digits and '_', at most 128)"
        case .emptySecretAccessKey: "the AWS secret access key is empty"
        case .invalidSessionToken: "the AWS session token is empty or holds characters a header value cannot carry"
        case .invalidRegion: "the AWS region is not a region name (lowercase letters, digits and '-')"
        case .invalidService: "the AWS service is not a service name (lowercase letters, digits and '-')"
        case .invalidPayloadHash: "the payload hash is neither 64 lowercase hex digits nor UNSIGNED-PAYLOAD"
        }
    }
}

/// A UTC date-time to the second: the signer has no clock, the caller says when.
public struct AWSSigV4Timestamp: Sendable, Equatable {
    public let year: Int
    public let month: Int
    public let day: Int
    public let hour: Int
    public let minute: Int
    public let second: Int

    public init(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) {
        precondition(
            (1...9999).contains(year) && (1...12).contains(month) && (1...31).contains(day)
                && (0...23).contains(hour) && (0...59).contains(minute) && (0...60).contains(second), "invalid UTC time")
        self.year = year
        self.month = month
        self.day = day
        self.hour = hour
        self.minute = minute
        self.second = second
    }

    /// From POSIX time (seconds since 1970-01-01T00:00:00Z), e.g. `time(nil)`.
    public init(secondsSinceEpoch: Int64) {
        let days = secondsSinceEpoch >= 0 ? secondsSinceEpoch / 86_400 : (secondsSinceEpoch - 86_399) / 86_400
        let secondOfDay = Int(secondsSinceEpoch - days * 86_400)
        // Civil date from a day count (Howard Hinnant's days_from_civil, inverted).
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        self.init(
            year: Int(year), month: Int(month), day: Int(day),
            hour: secondOfDay / 3600, minute: secondOfDay / 60 % 60, second: secondOfDay % 60)
    }

    /// `YYYYMMDD`: the credential scope's date.
    public var dateStamp: String { pad(year, 4) + pad(month, 2) + pad(day, 2) }

    /// `YYYYMMDD'T'HHMMSS'Z'`: the X-Amz-Date value.
    public var amzDate: String { dateStamp + "T" + pad(hour, 2) + pad(minute, 2) + pad(second, 2) + "Z" }

    private func pad(_ number: Int, _ width: Int) -> String {
        let digits = String(number)
        return String(repeating: "0", count: max(0, width - digits.count)) + digits
    }
}

/// The fields a signature adds, and what the access log may say about it.
public struct AWSSigV4Signature: Sendable, CustomStringConvertible, CustomReflectable {
    /// To append to the request, in this order: X-Amz-Date, X-Amz-Security-Token (with a session
    /// token), X-Amz-Content-Sha256 (S3), Authorization. The token is a secret: never log these.
    public let fields: [HTTPField]
    /// The signed header names, lowercase, sorted (as in the Authorization header): for the log.
    public let signedHeaders: [String]
    /// The canonical query (see the module note): sending it instead of the client's query is safe
    /// and removes any doubt about how the origin decodes `+`.
    public let canonicalQuery: String

    public var description: String { "AWSSigV4Signature(signed: \(signedHeaders.joined(separator: ";")))" }
    /// `dump` and test-failure expansions show the signed names, never the fields (the token).
    public var customMirror: Mirror { Mirror(self, children: ["signedHeaders": signedHeaders]) }
}

/// Signs requests for one service in one region with one set of credentials.
public struct AWSSigV4Signer: Sendable {
    /// Which of the request's fields are signed (see the module note on `AWSSigV4`).
    public enum HeaderSelection: Sendable {
        /// host, x-amz-*, content-type, content-md5.
        case awsRequired
        /// Every field but botocore's `SIGNED_HEADERS_BLACKLIST` (what the AWS test suite expects).
        case allButBotocoreExclusions
    }

    public let service: String
    public let region: String
    public let credentials: AWSCredentials
    public let headerSelection: HeaderSelection

    public init(service: String, region: String, credentials: AWSCredentials, headerSelection: HeaderSelection = .awsRequired) throws(AWSSigV4Error) {
        guard Self.isScopeComponent(service) else { throw .invalidService }
        guard Self.isScopeComponent(region) else { throw .invalidRegion }
        self.service = service
        self.region = region
        self.credentials = credentials
        self.headerSelection = headerSelection
    }

    /// Region and service names are lowercase letters, digits and `-` (`eu-west-1`, `execute-api`);
    /// they go into the credential scope, whose separator is `/`.
    public static func isScopeComponent(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 64
            && text.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D }
    }

    /// S3's rules: the key is encoded once and not normalized, and X-Amz-Content-Sha256 is sent.
    public var usesS3Rules: Bool { service == "s3" }

    public func sign(_ request: AWSSigV4Request, at time: AWSSigV4Timestamp) throws(AWSSigV4Error) -> AWSSigV4Signature {
        guard request.payloadHash == AWSSigV4.unsignedPayload || Self.isLowercaseSHA256Hex(request.payloadHash) else {
            throw .invalidPayloadHash
        }
        let amzDate = time.amzDate
        var added: [HTTPField] = [HTTPField(name: "X-Amz-Date", value: amzDate)]
        if let token = credentials.sessionToken { added.append(HTTPField(name: "X-Amz-Security-Token", value: token)) }
        if usesS3Rules { added.append(HTTPField(name: "X-Amz-Content-Sha256", value: request.payloadHash)) }

        let canonical = canonicalRequest(request, adding: added)
        let scope = "\(time.dateStamp)/\(region)/\(service)/aws4_request"
        let stringToSign = Self.stringToSign(amzDate: amzDate, scope: scope, canonicalRequest: canonical.bytes)
        let signature = Hex.lowercase(HMAC.sha256(key: signingKey(dateStamp: time.dateStamp), message: stringToSign))
        let authorization =
            "\(AWSSigV4.algorithm) Credential=\(credentials.accessKeyID)/\(scope), "
            + "SignedHeaders=\(canonical.signedHeaders.joined(separator: ";")), Signature=\(signature)"
        added.append(HTTPField(name: "Authorization", value: authorization))
        return AWSSigV4Signature(fields: added, signedHeaders: canonical.signedHeaders, canonicalQuery: canonical.query)
    }

    // MARK: The steps, each as AWS documents it (internal: the tests check them against the vectors)

    struct CanonicalRequest {
        /// The canonical request's bytes (header values as their wire bytes).
        let bytes: [UInt8]
        let signedHeaders: [String]
        let query: String
    }

    func canonicalRequest(_ request: AWSSigV4Request, adding added: [HTTPField]) -> CanonicalRequest {
        let uri = usesS3Rules ? AWSSigV4Canonical.s3URI(request.path) : AWSSigV4Canonical.normalizedURI(request.path)
        let query = AWSSigV4Canonical.query(request.query)
        var signed: [HTTPField] = [HTTPField(name: "host", value: request.authority)]
        for field in request.fields where isSigned(field.lowercasedName) { signed.append(field) }
        signed += added
        let headers = AWSSigV4Canonical.headers(signed)
        var bytes: [UInt8] = []
        bytes += Array(request.method.utf8) + [0x0A]
        bytes += Array(uri.utf8) + [0x0A]
        bytes += Array(query.utf8) + [0x0A]
        bytes += headers.block
        bytes += [0x0A]
        bytes += Array(headers.names.joined(separator: ";").utf8) + [0x0A]
        bytes += Array(request.payloadHash.utf8)
        return CanonicalRequest(bytes: bytes, signedHeaders: headers.names, query: query)
    }

    /// Whether a request field (lowercase name) is signed. Host is always signed, from `authority`;
    /// the fields the signer adds are signed as it adds them.
    func isSigned(_ name: String) -> Bool {
        if name == "host" || AWSSigV4.clientSigningFieldNames.contains(name) { return false }
        switch headerSelection {
        case .awsRequired:
            return name.hasPrefix("x-amz-") || name == "content-type" || name == "content-md5"
        case .allButBotocoreExclusions:
            return !Self.botocoreExclusions.contains(name)
        }
    }

    /// botocore `auth.SIGNED_HEADERS_BLACKLIST`.
    static let botocoreExclusions: Set<String> = [
        "connection", "expect", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
        "transfer-encoding", "upgrade", "user-agent", "x-amzn-trace-id",
    ]

    static func stringToSign(amzDate: String, scope: String, canonicalRequest: [UInt8]) -> [UInt8] {
        Array("\(AWSSigV4.algorithm)\n\(amzDate)\n\(scope)\n\(Hex.lowercase(SHA256.hash(canonicalRequest)))".utf8)
    }

    /// kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request").
    func signingKey(dateStamp: String) -> [UInt8] {
        let dateKey = HMAC.sha256(key: Array("AWS4".utf8) + credentials.secretAccessKey, message: dateStamp)
        let regionKey = HMAC.sha256(key: dateKey, message: region)
        let serviceKey = HMAC.sha256(key: regionKey, message: service)
        return HMAC.sha256(key: serviceKey, message: "aws4_request")
    }

    static func isLowercaseSHA256Hex(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
    }
}
