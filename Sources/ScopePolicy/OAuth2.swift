import HTTP1Codec

/// A secret whose value is an OAuth2 access token the proxy obtains from a token endpoint
/// (RFC 6749 §4.4 client credentials, §6 refresh token). Every field is a name or a public
/// parameter: the client secret and the refresh token are themselves secrets, named here.
public struct OAuth2Spec: Sendable, Equatable {
    /// RFC 6749 §2.3.1: HTTP Basic (the default the RFC requires servers to support), or
    /// `client_id`/`client_secret` in the form body.
    public enum ClientAuthentication: String, Sendable, Equatable, CaseIterable {
        case basic
        case body
    }

    public enum Grant: Sendable, Equatable {
        /// RFC 6749 §4.4.2.
        case clientCredentials
        /// RFC 6749 §6: the refresh token is the secret named here (a `store:` secret is rewritten
        /// when the endpoint rotates it).
        case refreshToken(secret: String)

        public var grantType: String {
            switch self {
            case .clientCredentials: "client_credentials"
            case .refreshToken: "refresh_token"
            }
        }
    }

    /// The token endpoint's origin (https, or http on loopback only): named in errors and logs.
    public let endpoint: Origin
    /// Path and query of `token_url` as written (starts with `/`).
    public let path: String
    public let grant: Grant
    public let clientID: String
    /// The name of the secret holding the client secret.
    public let clientSecret: String
    public let scope: String?
    /// An extra form parameter (Auth0, and others that mint tokens per API).
    public let audience: String?
    public let clientAuthentication: ClientAuthentication

    public init(
        endpoint: Origin, path: String, grant: Grant, clientID: String, clientSecret: String,
        scope: String? = nil, audience: String? = nil, clientAuthentication: ClientAuthentication = .basic
    ) {
        self.endpoint = endpoint
        self.path = path
        self.grant = grant
        self.clientID = clientID
        self.clientSecret = clientSecret
        self.scope = scope
        self.audience = audience
        self.clientAuthentication = clientAuthentication
    }

    /// The secrets this token is computed from (a config check: they must exist and not be
    /// OAuth2 secrets themselves).
    public var inputSecrets: [String] {
        switch grant {
        case .clientCredentials: [clientSecret]
        case .refreshToken(let refresh): [clientSecret, refresh]
        }
    }
}

/// What happened to a rotated refresh token the proxy was asked to keep.
public enum RefreshTokenPersistence: Sendable, Equatable {
    /// Written to the store (atomically, 0600); the store's next re-read picks it up.
    case persisted
    /// The secret is not a `store:` secret (env, file): the proxy keeps the new value in memory only.
    case notAStoreSecret
    /// The write failed; the reason names the file, never the value.
    case failed(String)
}

/// Where rotated refresh tokens go (the secret store; tests substitute their own).
public protocol RefreshTokenSink: Sendable {
    func storeRotatedRefreshToken(secret: String, value: SecretValue) -> RefreshTokenPersistence
}
