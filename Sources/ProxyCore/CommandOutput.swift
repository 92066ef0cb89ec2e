import HTTP1Codec
import ScopePolicy

/// What a `command:` secret's program printed, read as a credential: one line, or a JSON object
/// with the value and its expiry (the shapes of git credential helpers and AWS
/// `credential_process`, reduced to one value).
public struct CommandCredential: Sendable, Equatable {
    public let value: SecretValue
    /// Seconds from the moment the output was read, from `expires_at` or `expires_in`, bounded to
    /// 0...one year (`TokenCachePolicy.maxExpiresInSeconds`); nil when the output gave no expiry
    /// (the secret's `ttl:` applies).
    public let expiresIn: Int?

    public init(value: SecretValue, expiresIn: Int?) {
        self.value = value
        self.expiresIn = expiresIn
    }
}

/// Why a command's output is not a credential. Fixed words only: never a byte of the output,
/// which may be the secret itself (a log line or a 502 may carry the description).
public enum CommandOutputProblem: Error, Sendable, Equatable, CaseIterable, CustomStringConvertible {
    /// Nothing but whitespace.
    case empty
    /// More than one line, and not a JSON object.
    case multipleLines
    /// More bytes than any credential needs (`CommandOutput.maximumOutputBytes`).
    case outputTooLarge
    /// A control character (CR, LF, NUL, DEL, ...) in the value: it goes into header fields.
    case controlCharacter
    /// The value is longer than `CommandOutput.maximumValueBytes`.
    case valueTooLarge
    /// Starts with `{` but is not one strict JSON object (RFC 8259, no duplicate members).
    case invalidJSON
    /// A JSON object without a non-empty string `value`.
    case missingValue
    /// A JSON member other than `value`, `expires_at` and `expires_in`: a typo must not silently
    /// drop an expiry.
    case unknownMember
    /// Both `expires_at` and `expires_in`: which one holds is not for the proxy to guess.
    case conflictingExpiry
    /// `expires_at` is not an RFC 3339 §5.6 timestamp string.
    case invalidExpiresAt
    /// `expires_in` is not a non-negative whole number of seconds.
    case invalidExpiresIn
    /// `expires_at` is already past.
    case expired

    /// A short fixed text for the log's `reason` and metrics labels.
    public var code: String {
        switch self {
        case .empty: "empty_output"
        case .multipleLines: "multiple_lines"
        case .outputTooLarge: "output_too_large"
        case .controlCharacter: "control_character"
        case .valueTooLarge: "value_too_large"
        case .invalidJSON: "invalid_json"
        case .missingValue: "missing_value"
        case .unknownMember: "unknown_member"
        case .conflictingExpiry: "conflicting_expiry"
        case .invalidExpiresAt: "invalid_expires_at"
        case .invalidExpiresIn: "invalid_expires_in"
        case .expired: "expired"
        }
    }

    public var description: String {
        switch self {
        case .empty: "the command printed nothing"
        case .multipleLines: "the command printed more than one line (and not a JSON object)"
        case .outputTooLarge: "the command printed more than \(CommandOutput.maximumOutputBytes) bytes"
        case .controlCharacter: "the value contains a control character"
        case .valueTooLarge: "the value is longer than \(CommandOutput.maximumValueBytes) bytes"
        case .invalidJSON: "the output starts with '{' but is not a valid JSON object"
        case .missingValue: "the JSON object has no non-empty string \"value\""
        case .unknownMember: "the JSON object has a member other than \"value\", \"expires_at\" and \"expires_in\""
        case .conflictingExpiry: "the JSON object has both \"expires_at\" and \"expires_in\""
        case .invalidExpiresAt: "\"expires_at\" is not an RFC 3339 timestamp string"
        case .invalidExpiresIn: "\"expires_in\" is not a non-negative whole number of seconds"
        case .expired: "\"expires_at\" is in the past"
        }
    }
}

/// Reads a command's standard output (pure: the runner hands it the bytes, the caller the clock).
public enum CommandOutput {
    /// A value larger than this is no credential a header should carry.
    public static let maximumValueBytes = 16 * 1024
    /// The runner's default output limit: anything longer is refused before it is parsed.
    public static let maximumOutputBytes = 64 * 1024

    /// `now` is the wall clock in seconds since the Unix epoch (for `expires_at`).
    public static func parse(_ stdout: [UInt8], now: Int64) -> Result<CommandCredential, CommandOutputProblem> {
        guard stdout.count <= maximumOutputBytes else { return .failure(.outputTooLarge) }
        guard let first = stdout.firstIndex(where: { !isSpace($0) }) else { return .failure(.empty) }
        let last = stdout.lastIndex(where: { !isSpace($0) }) ?? first
        let trimmed = Array(stdout[first...last])
        if trimmed[0] == UInt8(ascii: "{") { return parseJSON(trimmed, now: now) }
        guard !trimmed.contains(0x0A) else { return .failure(.multipleLines) }
        return checked(trimmed).map { CommandCredential(value: $0, expiresIn: nil) }
    }

    /// The value as a header field may carry it: no control character (RFC 9110 §5.5 leaves CR,
    /// LF and NUL out of field values; the rest have no business in a credential either).
    private static func checked(_ value: [UInt8]) -> Result<SecretValue, CommandOutputProblem> {
        guard value.count <= maximumValueBytes else { return .failure(.valueTooLarge) }
        guard !value.contains(where: { $0 < 0x20 || $0 == 0x7F }) else { return .failure(.controlCharacter) }
        return .success(SecretValue(bytes: value))
    }

    private static func parseJSON(_ text: [UInt8], now: Int64) -> Result<CommandCredential, CommandOutputProblem> {
        guard case .object(let members)? = try? TokenJSON.parse(text) else { return .failure(.invalidJSON) }
        guard members.keys.allSatisfy({ ["value", "expires_at", "expires_in"].contains($0) }) else {
            return .failure(.unknownMember)
        }
        guard case .string(let raw)? = members["value"], !raw.isEmpty else { return .failure(.missingValue) }
        let value: SecretValue
        switch checked(raw) {
        case .success(let checkedValue): value = checkedValue
        case .failure(let problem): return .failure(problem)
        }
        let year = TokenCachePolicy.maxExpiresInSeconds
        switch (members["expires_at"], members["expires_in"]) {
        case (nil, nil):
            return .success(CommandCredential(value: value, expiresIn: nil))
        case (.some, .some):
            return .failure(.conflictingExpiry)
        case (.string(let stamp)?, nil):
            guard let text = String(validating: stamp, as: UTF8.self), let at = RFC3339.secondsSinceEpoch(text) else {
                return .failure(.invalidExpiresAt)
            }
            guard at >= now else { return .failure(.expired) }
            // Both are bounded Int64s but `now` is the caller's: subtract without trapping.
            let (left, overflowed) = at.subtractingReportingOverflow(now)
            return .success(CommandCredential(value: value, expiresIn: overflowed || left > Int64(year) ? year : Int(left)))
        case (nil, .number(let digits)?):
            // 1*DIGIT only (no sign, fraction or exponent), clamped to a year while it is read.
            guard let seconds = BoundedDecimal.parseClamped(Array(digits.utf8), maximum: year) else {
                return .failure(.invalidExpiresIn)
            }
            return .success(CommandCredential(value: value, expiresIn: seconds))
        case (_?, nil):
            return .failure(.invalidExpiresAt)
        case (nil, _?):
            return .failure(.invalidExpiresIn)
        }
    }

    /// What is trimmed around the output: SP, HTAB, LF, VT, FF, CR.
    private static func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || (0x09...0x0D).contains(byte) }
}
