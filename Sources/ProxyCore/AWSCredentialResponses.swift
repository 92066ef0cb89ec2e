import AWSSigV4

/// Readers for what AWS credential sources answer: STS's XML (AssumeRole,
/// AssumeRoleWithWebIdentity), the container and instance metadata endpoints' JSON, and a
/// `credential_process`'s JSON. Strict and bounded; every error is the proxy's own words (never a
/// byte of the input but a known AWS error code), and no input can trap.
public enum AWSCredentialResponse {
    /// The most any of these bodies may be (STS answers ~1.5 KiB; a process's output a few hundred bytes).
    public static let maxBodyBytes = 64 * 1024

    /// Why a response gave no credentials.
    public enum Problem: Error, Sendable, Equatable, CustomStringConvertible {
        /// STS answered with an error: its HTTP status and `Code`, the code only when AWS documents it.
        case rejected(status: Int, code: AWSErrorCode?)
        case unexpectedStatus(Int)
        case tooLarge(limit: Int)
        /// Unreadable, or a member missing or malformed: the proxy's words.
        case malformed(String)

        /// A short fixed text for a log field or metric label.
        public var code: String {
            switch self {
            case .rejected: "rejected"
            case .unexpectedStatus: "unexpected_status"
            case .tooLarge: "response_too_large"
            case .malformed: "malformed_response"
            }
        }

        public var description: String {
            switch self {
            case .rejected(let status, let code): "refused (\(status)\(code.map { " \($0.rawValue)" } ?? ""))"
            case .unexpectedStatus(let status): "answered \(status)"
            case .tooLarge(let limit): "the response is larger than \(limit) bytes"
            case .malformed(let detail): "invalid response: \(detail)"
            }
        }
    }

    /// Which STS action answered (their results are named after them).
    public enum STSAction: String, Sendable {
        case assumeRole = "AssumeRole"
        case assumeRoleWithWebIdentity = "AssumeRoleWithWebIdentity"
    }

    // MARK: STS

    /// `<ActionResponse><ActionResult><Credentials>` with AccessKeyId, SecretAccessKey,
    /// SessionToken and Expiration (all required: STS always sends them). An error response
    /// (`<ErrorResponse><Error><Code>`) gives its code when it is a documented one; never Message.
    public static func sts(_ action: STSAction, status: Int, body: [UInt8]) -> Result<AWSTemporaryCredentials, Problem> {
        guard body.count <= maxBodyBytes else { return .failure(.tooLarge(limit: maxBodyBytes)) }
        guard status == 200 else {
            guard (400...599).contains(status) else { return .failure(.unexpectedStatus(status)) }
            var code: AWSErrorCode?
            if let root = try? AWSXML.parse(body), root.name == "ErrorResponse",
                let text = root.child("Error")?.child("Code")?.text
            {
                code = AWSErrorCode(rawValue: text)
            }
            return .failure(.rejected(status: status, code: code))
        }
        let root: AWSXML.Element
        do { root = try AWSXML.parse(body) } catch { return .failure(.malformed(error.reason)) }
        guard root.name == action.rawValue + "Response" else { return .failure(.malformed("not an \(action.rawValue) response")) }
        guard let credentials = root.child(action.rawValue + "Result")?.child("Credentials") else {
            return .failure(.malformed("no Credentials element"))
        }
        guard let keyID = credentials.child("AccessKeyId")?.text, let secret = credentials.child("SecretAccessKey")?.text,
            let token = credentials.child("SessionToken")?.text, let expirationText = credentials.child("Expiration")?.text
        else { return .failure(.malformed("Credentials lacks AccessKeyId, SecretAccessKey, SessionToken or Expiration")) }
        guard let expiration = RFC3339.secondsSinceEpoch(expirationText) else { return .failure(.malformed("Expiration is not an RFC 3339 time")) }
        guard
            let result = AWSTemporaryCredentials(
                accessKeyID: Array(keyID.utf8), secretAccessKey: Array(secret.utf8), sessionToken: Array(token.utf8), expiration: expiration)
        else { return .failure(.malformed("a credential value is empty, too long or holds characters a header cannot carry")) }
        return .success(result)
    }

    // MARK: Container and instance metadata

    /// The container endpoint's (ECS, EKS Pod Identity) and IMDS's JSON: AccessKeyId,
    /// SecretAccessKey, Token, Expiration, all required (botocore `ContainerProvider` and
    /// `InstanceMetadataFetcher` require all four). IMDS also says `"Code": "Success"`.
    public static func metadata(status: Int, body: [UInt8], requiresSuccessCode: Bool) -> Result<AWSTemporaryCredentials, Problem> {
        guard body.count <= maxBodyBytes else { return .failure(.tooLarge(limit: maxBodyBytes)) }
        guard status == 200 else { return .failure(.unexpectedStatus(status)) }
        let members: [String: TokenJSON]
        switch object(body) {
        case .success(let object): members = object
        case .failure(let problem): return .failure(problem)
        }
        if requiresSuccessCode {
            guard case .string(let code)? = members["Code"], code == Array("Success".utf8) else {
                return .failure(.malformed("Code is not Success"))
            }
        }
        guard case .string(let keyID)? = members["AccessKeyId"], case .string(let secret)? = members["SecretAccessKey"],
            case .string(let token)? = members["Token"], case .string(let expirationText)? = members["Expiration"]
        else { return .failure(.malformed("no AccessKeyId, SecretAccessKey, Token or Expiration string")) }
        guard let expiration = RFC3339.secondsSinceEpoch(String(decoding: expirationText, as: UTF8.self)) else {
            return .failure(.malformed("Expiration is not an RFC 3339 time"))
        }
        guard let result = AWSTemporaryCredentials(accessKeyID: keyID, secretAccessKey: secret, sessionToken: token, expiration: expiration) else {
            return .failure(.malformed("a credential value is empty, too long or holds characters a header cannot carry"))
        }
        return .success(result)
    }

    /// IMDS's role list (`/latest/meta-data/iam/security-credentials/`): the first line, which must
    /// be a role name (IAM: `[\w+=,.@-]+`, at most 64), since it goes into the next request's path.
    public static func instanceRoleName(status: Int, body: [UInt8]) -> Result<String, Problem> {
        guard body.count <= maxBodyBytes else { return .failure(.tooLarge(limit: maxBodyBytes)) }
        guard status == 200 else { return .failure(.unexpectedStatus(status)) }
        let first = body.split(separator: 0x0A, maxSplits: 1, omittingEmptySubsequences: false).first ?? []
        let name = first.last == 0x0D ? first.dropLast() : first
        guard !name.isEmpty, name.count <= 64, name.allSatisfy(isRoleNameByte) else {
            return .failure(.malformed("the instance profile role name is not an IAM role name"))
        }
        return .success(String(decoding: name, as: UTF8.self))
    }

    /// IMDSv2's session token (`PUT /latest/api/token`): visible ASCII, since it goes back in a
    /// header field.
    public static func instanceMetadataToken(status: Int, body: [UInt8]) -> Result<[UInt8], Problem> {
        guard body.count <= 4096 else { return .failure(.tooLarge(limit: 4096)) }
        guard status == 200 else { return .failure(.unexpectedStatus(status)) }
        guard !body.isEmpty, body.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            return .failure(.malformed("the IMDSv2 token is not a header value"))
        }
        return .success(body)
    }

    static func isRoleNameByte(_ byte: UInt8) -> Bool {
        AWSCredentials.isKeyIDByteForChain(byte)
            || [UInt8(ascii: "+"), UInt8(ascii: "="), UInt8(ascii: ","), UInt8(ascii: "."), UInt8(ascii: "@"), UInt8(ascii: "-")].contains(byte)
    }

    // MARK: credential_process

    /// A `credential_process`'s stdout (AWS SDKs "Sourcing credentials with an external process"):
    /// `Version` 1, AccessKeyId and SecretAccessKey required, SessionToken and Expiration optional.
    public static func process(output: [UInt8]) -> Result<AWSTemporaryCredentials, Problem> {
        guard output.count <= maxBodyBytes else { return .failure(.tooLarge(limit: maxBodyBytes)) }
        let members: [String: TokenJSON]
        switch object(output) {
        case .success(let object): members = object
        case .failure(let problem): return .failure(problem)
        }
        guard case .number("1")? = members["Version"] else { return .failure(.malformed("Version is not 1")) }
        guard case .string(let keyID)? = members["AccessKeyId"], case .string(let secret)? = members["SecretAccessKey"] else {
            return .failure(.malformed("no AccessKeyId or SecretAccessKey string"))
        }
        var token: [UInt8]?
        switch members["SessionToken"] {
        case nil, .null?: break
        case .string(let value)?: token = value
        default: return .failure(.malformed("SessionToken is not a string"))
        }
        var expiration: Int64?
        switch members["Expiration"] {
        case nil, .null?: break
        case .string(let value)?:
            guard let seconds = RFC3339.secondsSinceEpoch(String(decoding: value, as: UTF8.self)) else {
                return .failure(.malformed("Expiration is not an RFC 3339 time"))
            }
            expiration = seconds
        default: return .failure(.malformed("Expiration is not a string"))
        }
        guard let result = AWSTemporaryCredentials(accessKeyID: keyID, secretAccessKey: secret, sessionToken: token, expiration: expiration) else {
            return .failure(.malformed("a credential value is empty, too long or holds characters a header cannot carry"))
        }
        return .success(result)
    }

    private static func object(_ body: [UInt8]) -> Result<[String: TokenJSON], Problem> {
        let json: TokenJSON
        do { json = try TokenJSON.parse(body) } catch { return .failure(.malformed(error.reason)) }
        guard case .object(let members) = json else { return .failure(.malformed("not a JSON object")) }
        return .success(members)
    }
}

/// The error codes STS documents for AssumeRole and AssumeRoleWithWebIdentity, and the common
/// ones every AWS query API returns (AWS STS API Reference, "Errors" and "Common Errors"). Any
/// other `Code` is dropped: only this closed set of words may reach a log line.
public enum AWSErrorCode: String, Sendable, Equatable, CaseIterable {
    case accessDenied = "AccessDenied"
    case accessDeniedException = "AccessDeniedException"
    case expiredToken = "ExpiredToken"
    case expiredTokenException = "ExpiredTokenException"
    case idpCommunicationError = "IDPCommunicationError"
    case idpRejectedClaim = "IDPRejectedClaim"
    case incompleteSignature = "IncompleteSignature"
    case internalFailure = "InternalFailure"
    case invalidAction = "InvalidAction"
    case invalidClientTokenID = "InvalidClientTokenId"
    case invalidIdentityToken = "InvalidIdentityToken"
    case invalidParameterCombination = "InvalidParameterCombination"
    case invalidParameterValue = "InvalidParameterValue"
    case malformedPolicyDocument = "MalformedPolicyDocument"
    case missingAuthenticationToken = "MissingAuthenticationToken"
    case missingParameter = "MissingParameter"
    case notAuthorized = "NotAuthorized"
    case packedPolicyTooLarge = "PackedPolicyTooLarge"
    case regionDisabledException = "RegionDisabledException"
    case requestExpired = "RequestExpired"
    case serviceUnavailable = "ServiceUnavailable"
    case signatureDoesNotMatch = "SignatureDoesNotMatch"
    case throttling = "Throttling"
    case validationError = "ValidationError"
}

/// Just enough XML (XML 1.0) for STS's answers: elements, text, the five predefined entities and
/// character references. No DTD, no CDATA, no comments, no processing instruction but the leading
/// declaration: STS sends none, and refusing them keeps entity expansion out. Bounded in size,
/// depth and element count; a repeated child name is refused (two `AccessKeyId`s would be
/// ambiguous). Namespace prefixes are dropped from names (`sts:Credentials` is `Credentials`).
enum AWSXML {
    struct Invalid: Error, Equatable {
        let reason: String
    }

    struct Element: Equatable {
        var name: String
        var children: [Element] = []
        var textBytes: [UInt8] = []

        func child(_ name: String) -> Element? { children.first { $0.name == name } }
        /// The text content, leading and trailing XML whitespace trimmed.
        var text: String {
            var slice = textBytes[...]
            while let first = slice.first, [0x20, 0x09, 0x0A, 0x0D].contains(first) { slice = slice.dropFirst() }
            while let last = slice.last, [0x20, 0x09, 0x0A, 0x0D].contains(last) { slice = slice.dropLast() }
            return String(decoding: slice, as: UTF8.self)
        }
    }

    static let maxDepth = 16
    static let maxElements = 256

    static func parse(_ bytes: [UInt8]) throws(Invalid) -> Element {
        guard bytes.count <= AWSCredentialResponse.maxBodyBytes else { throw Invalid(reason: "XML too large") }
        guard String(validating: bytes, as: UTF8.self) != nil else { throw Invalid(reason: "XML is not UTF-8") }
        var reader = Reader(bytes: bytes)
        reader.skipSpace()
        if reader.starts(with: "<?xml") {
            guard let end = reader.find("?>") else { throw Invalid(reason: "unterminated XML declaration") }
            reader.index = end + 2
        }
        reader.skipSpace()
        let root = try reader.element(depth: 0)
        reader.skipSpace()
        guard reader.index == bytes.count else { throw Invalid(reason: "trailing data after the XML root element") }
        return root
    }

    private struct Reader {
        let bytes: [UInt8]
        var index = 0
        var elements = 0

        init(bytes: [UInt8]) { self.bytes = bytes }

        mutating func skipSpace() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        func starts(with text: String) -> Bool {
            let expected = Array(text.utf8)
            return index + expected.count <= bytes.count && Array(bytes[index..<index + expected.count]) == expected
        }

        func find(_ text: String) -> Int? {
            let needle = Array(text.utf8)
            var position = index
            while position + needle.count <= bytes.count {
                if Array(bytes[position..<position + needle.count]) == needle { return position }
                position += 1
            }
            return nil
        }

        static func isNameByte(_ byte: UInt8) -> Bool {
            AWSCredentials.isKeyIDByteForChain(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: ":")
        }

        mutating func name() throws(Invalid) -> String {
            let start = index
            while index < bytes.count, Self.isNameByte(bytes[index]) { index += 1 }
            guard index > start, index - start <= 128 else { throw Invalid(reason: "invalid XML name") }
            let full = bytes[start..<index]
            let local = full.lastIndex(of: UInt8(ascii: ":")).map { full[($0 + 1)...] } ?? full
            guard !local.isEmpty else { throw Invalid(reason: "invalid XML name") }
            return String(decoding: local, as: UTF8.self)
        }

        mutating func element(depth: Int) throws(Invalid) -> Element {
            guard depth < AWSXML.maxDepth else { throw Invalid(reason: "XML nested too deeply") }
            elements += 1
            guard elements <= AWSXML.maxElements else { throw Invalid(reason: "too many XML elements") }
            guard index < bytes.count, bytes[index] == UInt8(ascii: "<") else { throw Invalid(reason: "expected an XML element") }
            index += 1
            var element = Element(name: try name())
            // Attributes (xmlns and the like): read over, checked for shape, not kept.
            while true {
                skipSpace()
                guard index < bytes.count else { throw Invalid(reason: "unterminated XML tag") }
                if bytes[index] == UInt8(ascii: "/") {
                    guard index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: ">") else { throw Invalid(reason: "invalid XML tag") }
                    index += 2
                    return element
                }
                if bytes[index] == UInt8(ascii: ">") {
                    index += 1
                    break
                }
                _ = try name()
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "=") else { throw Invalid(reason: "invalid XML attribute") }
                index += 1
                skipSpace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") || bytes[index] == UInt8(ascii: "'") else {
                    throw Invalid(reason: "invalid XML attribute")
                }
                let quote = bytes[index]
                index += 1
                guard let close = bytes[index...].firstIndex(of: quote) else { throw Invalid(reason: "unterminated XML attribute") }
                guard !bytes[index..<close].contains(UInt8(ascii: "<")) else { throw Invalid(reason: "invalid XML attribute") }
                index = close + 1
            }
            // Content: text and child elements up to the matching end tag.
            while true {
                guard index < bytes.count else { throw Invalid(reason: "unterminated XML element") }
                let byte = bytes[index]
                if byte == UInt8(ascii: "<") {
                    guard index + 1 < bytes.count else { throw Invalid(reason: "unterminated XML element") }
                    let next = bytes[index + 1]
                    if next == UInt8(ascii: "/") {
                        index += 2
                        let closing = try name()
                        skipSpace()
                        guard closing == element.name, index < bytes.count, bytes[index] == UInt8(ascii: ">") else {
                            throw Invalid(reason: "mismatched XML end tag")
                        }
                        index += 1
                        return element
                    }
                    if next == UInt8(ascii: "!") || next == UInt8(ascii: "?") {
                        throw Invalid(reason: "XML comments, CDATA, DTDs and processing instructions are not accepted")
                    }
                    let child = try self.element(depth: depth + 1)
                    guard element.child(child.name) == nil else { throw Invalid(reason: "a repeated XML element") }
                    element.children.append(child)
                } else if byte == UInt8(ascii: "&") {
                    element.textBytes += try reference()
                } else if byte == UInt8(ascii: ">") {
                    throw Invalid(reason: "a bare '>' in XML text")
                } else {
                    element.textBytes.append(byte)
                    index += 1
                }
            }
        }

        /// `&lt;` `&gt;` `&amp;` `&quot;` `&apos;` `&#N;` `&#xH;` (XML 1.0 §4.1, §4.6).
        mutating func reference() throws(Invalid) -> [UInt8] {
            index += 1
            let start = index
            while index < bytes.count, bytes[index] != UInt8(ascii: ";"), index - start < 12 { index += 1 }
            guard index < bytes.count, bytes[index] == UInt8(ascii: ";") else { throw Invalid(reason: "invalid XML reference") }
            let body = Array(bytes[start..<index])
            index += 1
            switch String(decoding: body, as: UTF8.self) {
            case "lt": return [UInt8(ascii: "<")]
            case "gt": return [UInt8(ascii: ">")]
            case "amp": return [UInt8(ascii: "&")]
            case "quot": return [UInt8(ascii: "\"")]
            case "apos": return [UInt8(ascii: "'")]
            default: break
            }
            guard body.count >= 2, body[0] == UInt8(ascii: "#") else { throw Invalid(reason: "invalid XML reference") }
            let hex = body[1] == UInt8(ascii: "x")
            let digits = body.dropFirst(hex ? 2 : 1)
            guard !digits.isEmpty, digits.count <= 6 else { throw Invalid(reason: "invalid XML reference") }
            var value: UInt32 = 0
            for digit in digits {
                let number: UInt32
                switch digit {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): number = UInt32(digit - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f") where hex: number = UInt32(digit - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F") where hex: number = UInt32(digit - UInt8(ascii: "A") + 10)
                default: throw Invalid(reason: "invalid XML reference")
                }
                value = value * (hex ? 16 : 10) + number
            }
            guard value != 0, let scalar = Unicode.Scalar(value) else { throw Invalid(reason: "invalid XML reference") }
            return Array(String(Character(scalar)).utf8)
        }
    }
}
