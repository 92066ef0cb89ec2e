import HTTP1Codec
import ScopePolicy

/// A value a credential source obtained: an OAuth2 token response's grant (RFC 6749 §5.1), a
/// command's output, a GitHub installation token, AWS credentials (packed as one value).
public struct TokenGrant: Sendable, Equatable {
    public let value: SecretValue
    /// Seconds it stays valid, as the source said (nil: it did not say).
    public let expiresIn: Int?
    /// A new refresh token (rotation): the proxy keeps it in place of the old one.
    public let refreshToken: SecretValue?

    public init(value: SecretValue, expiresIn: Int?, refreshToken: SecretValue? = nil) {
        self.value = value
        self.expiresIn = expiresIn
        self.refreshToken = refreshToken
    }
}

/// Where a computed secret's value comes from, as errors and logs name it (never a value, never a
/// command's arguments).
public enum TokenProvider: Sendable, Equatable, CustomStringConvertible {
    /// A token endpoint or API: OAuth2, a GitHub App's installation tokens.
    case endpoint(Origin)
    /// A `command:` secret's program (argv[0]'s last component).
    case command(String)
    /// `credentials: default` or `{profile: NAME}` of an AWS SigV4 scope.
    case awsChain(AWSCredentialSelection)

    public var description: String {
        switch self {
        case .endpoint(let origin): "\(origin)"
        case .command(let program): "command '\(program)'"
        case .awsChain(let selection): "\(selection)"
        }
    }

    /// The endpoint's origin, when the provider is one (the proxy's own requests go there).
    public var endpoint: Origin? {
        if case .endpoint(let origin) = self { return origin }
        return nil
    }
}

/// Why a token could not be obtained. Every text here is the proxy's own: nothing from the
/// response body or a command's output but a registered error code, and never a secret.
public struct TokenFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// Typed as far as the access log: the machine's `tokenFailed` event, the 502
    /// `credential_unavailable` and the log line's `reason` carry it, and only its `code` is said
    /// (never what the endpoint answered). A token source of another kind adds its own cases here.
    public enum Reason: Error, Sendable, Equatable {
        /// An input secret (the client secret, the refresh token, a private key) has no value.
        case secretUnavailable(String)
        case dnsFailure
        case refused
        case connectTimeout
        case responseTimeout
        case tlsVerification(String)
        case tlsHandshake
        /// The connection ended before the response did.
        case closedEarly
        case responseTooLarge(limit: Int)
        /// Unreadable HTTP or JSON, or a §5.1 member missing or malformed: the proxy's words.
        case malformedResponse(String)
        /// RFC 6749 §5.2: an error response; the code only when it is one the RFC registers.
        case rejected(status: Int, error: OAuth2ErrorCode?)
        /// Anything else but 200.
        case unexpectedStatus(Int)
        /// The scope's token source does not know the secret (a reload removed it): fail closed.
        case noTokenSource
        /// A private key that cannot sign (not a PEM key, wrong type or size): the proxy's words.
        case keyUnusable(String)
        /// A command could not be started (no such program in PATH, not executable).
        case commandNotStarted(String)
        /// A command exited with a status other than 0, or was killed by a signal (negative: its number).
        case commandFailed(status: Int32)
        case commandTimedOut(milliseconds: Int)
        /// A command's output is not a value (fixed words, never a byte of it).
        case invalidOutput(String)
        /// The AWS chain found no credentials, or a link of it failed (fixed words: what was looked at).
        case awsChain(String)

        /// A short fixed text: the log's `reason`, the 502's message, the metrics label
        /// (`token_fetches_total{result=...}`).
        public var code: String {
            switch self {
            case .secretUnavailable: "secret_unavailable"
            case .dnsFailure: "dns_failure"
            case .refused: "refused"
            case .connectTimeout: "connect_timeout"
            case .responseTimeout: "response_timeout"
            case .tlsVerification: "tls_verification"
            case .tlsHandshake: "tls_handshake"
            case .closedEarly: "closed_early"
            case .responseTooLarge: "response_too_large"
            case .malformedResponse: "malformed_response"
            case .rejected: "rejected"
            case .unexpectedStatus: "unexpected_status"
            case .noTokenSource: "no_token_source"
            case .keyUnusable: "key_unusable"
            case .commandNotStarted: "command_not_started"
            case .commandFailed: "command_failed"
            case .commandTimedOut: "command_timeout"
            case .invalidOutput: "invalid_output"
            case .awsChain: "aws_chain"
            }
        }

        /// What went wrong (the description puts the secret and its provider before it).
        public var explanation: String {
            switch self {
            case .secretUnavailable(let name): "secret '\(name)' has no value"
            case .dnsFailure: "cannot resolve its host"
            case .refused: "cannot connect"
            case .connectTimeout: "connecting timed out"
            case .responseTimeout: "no answer in time"
            case .tlsVerification(let detail): "its certificate failed verification: \(detail)"
            case .tlsHandshake: "the TLS handshake failed"
            case .closedEarly: "the connection closed before the response ended"
            case .responseTooLarge(let limit): "the response is larger than \(limit) bytes"
            case .malformedResponse(let detail): "invalid response: \(detail)"
            case .rejected(let status, let code): "refused (\(status)\(code.map { " \($0.rawValue)" } ?? ""))"
            case .unexpectedStatus(let status): "answered \(status)"
            case .noTokenSource: "no token source knows the secret"
            case .keyUnusable(let why): "the private key cannot sign: \(why)"
            case .commandNotStarted(let why): "did not start: \(why)"
            case .commandFailed(let status) where status < 0: "killed by signal \(-status)"
            case .commandFailed(let status): "exited with status \(status)"
            case .commandTimedOut(let milliseconds): "did not finish within \(milliseconds) ms and was killed"
            case .invalidOutput(let why): "its output is not a value: \(why)"
            case .awsChain(let why): why
            }
        }
    }

    /// The computed secret the value is for.
    public let secret: String
    /// Where the value comes from (errors name it; the 502 `credential_unavailable` does too).
    public let provider: TokenProvider
    public let reason: Reason

    public init(secret: String, provider: TokenProvider, reason: Reason) {
        self.secret = secret
        self.provider = provider
        self.reason = reason
    }

    /// A token endpoint's failure (OAuth2).
    public init(secret: String, endpoint: Origin, reason: Reason) {
        self.init(secret: secret, provider: .endpoint(endpoint), reason: reason)
    }

    /// The token endpoint, when the provider is one.
    public var endpoint: Origin? { provider.endpoint }

    public var description: String { "'\(secret)' from \(provider): \(reason.explanation)" }
}

/// RFC 6749 §5.2's registered error codes. Any other `error` value is dropped: the body is the
/// endpoint's to fill, and only a closed set of words may reach a log line.
public enum OAuth2ErrorCode: String, Sendable, Equatable, CaseIterable {
    case invalidRequest = "invalid_request"
    case invalidClient = "invalid_client"
    case invalidGrant = "invalid_grant"
    case unauthorizedClient = "unauthorized_client"
    case unsupportedGrantType = "unsupported_grant_type"
    case invalidScope = "invalid_scope"
}

public enum OAuth2TokenResponse {
    /// Reads a complete token response. Only 200 grants (§5.1); §5.2 says errors come as 400 (401
    /// for a failed client authentication), and their `error` member is read when it is registered.
    public static func parse(status: Int, body: [UInt8]) -> Result<TokenGrant, TokenFailure.Reason> {
        guard status == 200 else {
            if status == 400 || status == 401 {
                var code: OAuth2ErrorCode?
                if case .object(let members)? = try? TokenJSON.parse(body), case .string(let raw)? = members["error"] {
                    code = OAuth2ErrorCode(rawValue: String(decoding: raw, as: UTF8.self))
                }
                return .failure(.rejected(status: status, error: code))
            }
            return .failure(.unexpectedStatus(status))
        }
        let json: TokenJSON
        do { json = try TokenJSON.parse(body) } catch { return .failure(.malformedResponse(error.reason)) }
        guard case .object(let members) = json else { return .failure(.malformedResponse("not a JSON object")) }
        guard case .string(let access)? = members["access_token"] else { return .failure(.malformedResponse("no access_token string")) }
        // RFC 6749 Appendix A.12: access-token = 1*VSCHAR. That also keeps CR/LF out of the header.
        guard !access.isEmpty, access.allSatisfy(isVisibleOrSpace) else { return .failure(.malformedResponse("access_token is not 1*VSCHAR")) }
        // §5.1: token_type is REQUIRED and case-insensitive; only Bearer (RFC 6750) is injectable.
        guard case .string(let type)? = members["token_type"] else { return .failure(.malformedResponse("no token_type string")) }
        guard type.map({ $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }) == Array("bearer".utf8) else {
            return .failure(.malformedResponse("token_type is not Bearer"))
        }
        var expiresIn: Int?
        switch members["expires_in"] {
        case nil, .null?: break
        // Appendix A.14: 1*DIGIT. A numeric string is accepted too (some endpoints send one).
        case .number(let text)?:
            guard let seconds = digits(Array(text.utf8)) else { return .failure(.malformedResponse("expires_in is not a whole number of seconds")) }
            expiresIn = seconds
        case .string(let text)?:
            guard let seconds = digits(text) else { return .failure(.malformedResponse("expires_in is not a whole number of seconds")) }
            expiresIn = seconds
        default:
            return .failure(.malformedResponse("expires_in is not a whole number of seconds"))
        }
        var refresh: SecretValue?
        switch members["refresh_token"] {
        case nil, .null?: break
        case .string(let raw)? where !raw.isEmpty && raw.allSatisfy(isVisibleOrSpace):  // Appendix A.17
            refresh = SecretValue(bytes: raw)
        default:
            return .failure(.malformedResponse("refresh_token is not 1*VSCHAR"))
        }
        return .success(TokenGrant(value: SecretValue(bytes: access), expiresIn: expiresIn, refreshToken: refresh))
    }

    /// VSCHAR = %x20-7E.
    private static func isVisibleOrSpace(_ byte: UInt8) -> Bool { byte >= 0x20 && byte <= 0x7E }

    /// 1*DIGIT of any length, capped at a year (a larger lifetime is read as a year), bounded
    /// while it is read: an endpoint's 30-digit `expires_in` is a year, never an overflow.
    private static func digits(_ text: [UInt8]) -> Int? {
        BoundedDecimal.parseClamped(text, maximum: TokenCachePolicy.maxExpiresInSeconds)
    }
}
