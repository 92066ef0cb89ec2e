import HTTP1Codec
import ScopePolicy

/// What a successful token response granted (RFC 6749 §5.1).
public struct OAuth2TokenGrant: Sendable, Equatable {
    public let accessToken: SecretValue
    /// Seconds, as the endpoint said (nil: it did not say).
    public let expiresIn: Int?
    /// A new refresh token (rotation): the proxy keeps it in place of the old one.
    public let refreshToken: SecretValue?

    public init(accessToken: SecretValue, expiresIn: Int?, refreshToken: SecretValue?) {
        self.accessToken = accessToken
        self.expiresIn = expiresIn
        self.refreshToken = refreshToken
    }
}

/// Why a token could not be obtained. Every text here is the proxy's own: nothing from the
/// response body but a registered error code, and never a secret.
public struct TokenFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// Typed as far as the access log: the machine's `tokenFailed` event, the 502
    /// `credential_unavailable` and the log line's `reason` carry it, and only its `code` is said
    /// (never what the endpoint answered). A token source of another kind adds its own cases here.
    public enum Reason: Error, Sendable, Equatable {
        /// An input secret (the client secret, the refresh token) has no value.
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
            }
        }
    }

    /// The OAuth2 secret the token is for.
    public let secret: String
    /// The token endpoint's origin (errors name it; the 502 `credential_unavailable` does too).
    public let endpoint: Origin
    public let reason: Reason

    public init(secret: String, endpoint: Origin, reason: Reason) {
        self.secret = secret
        self.endpoint = endpoint
        self.reason = reason
    }

    public var description: String {
        let why: String
        switch reason {
        case .secretUnavailable(let name): why = "secret '\(name)' has no value"
        case .dnsFailure: why = "cannot resolve the token endpoint"
        case .refused: why = "cannot connect to the token endpoint"
        case .connectTimeout: why = "connecting to the token endpoint timed out"
        case .responseTimeout: why = "the token endpoint did not answer in time"
        case .tlsVerification(let detail): why = "the token endpoint's certificate failed verification: \(detail)"
        case .tlsHandshake: why = "the TLS handshake with the token endpoint failed"
        case .closedEarly: why = "the token endpoint closed the connection before its response ended"
        case .responseTooLarge(let limit): why = "the token response is larger than \(limit) bytes"
        case .malformedResponse(let detail): why = "invalid token response: \(detail)"
        case .rejected(let status, let code): why = "the token endpoint refused (\(status)\(code.map { " \($0.rawValue)" } ?? ""))"
        case .unexpectedStatus(let status): why = "the token endpoint answered \(status)"
        case .noTokenSource: why = "no token source knows the secret"
        }
        return "oauth2 token '\(secret)' from \(endpoint): \(why)"
    }
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
    public static func parse(status: Int, body: [UInt8]) -> Result<OAuth2TokenGrant, TokenFailure.Reason> {
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
        return .success(OAuth2TokenGrant(accessToken: SecretValue(bytes: access), expiresIn: expiresIn, refreshToken: refresh))
    }

    /// VSCHAR = %x20-7E.
    private static func isVisibleOrSpace(_ byte: UInt8) -> Bool { byte >= 0x20 && byte <= 0x7E }

    /// 1*DIGIT of any length, capped at a year (a larger lifetime is read as a year), bounded
    /// while it is read: an endpoint's 30-digit `expires_in` is a year, never an overflow.
    private static func digits(_ text: [UInt8]) -> Int? {
        BoundedDecimal.parseClamped(text, maximum: TokenCachePolicy.maxExpiresInSeconds)
    }
}
