import HTTP1Codec

/// A secret whose value is an OAuth2 access token the proxy obtains from a token endpoint
/// (RFC 6749 §4.4 client credentials, §6 refresh token). Every field is a name or a public
/// parameter: the client secret and the refresh token are themselves secrets, named here.
public struct OAuth2Spec: Sendable, Equatable {
    /// How the client proves itself to the token endpoint.
    public enum ClientAuthentication: Sendable, Equatable {
        /// RFC 6749 §2.3.1 HTTP Basic with the secret named here (the default servers must support).
        case basic(secret: String)
        /// RFC 6749 §2.3.1 `client_id`/`client_secret` in the form body.
        case body(secret: String)
        /// RFC 7523 §2.2: a JWT signed with the client's private key (`client_auth: private_key_jwt`).
        case privateKeyJWT(JWTKeySpec)
        /// No client authentication: the `jwt_bearer` grant's assertion is the proof (RFC 7523 §2.1).
        case none

        /// The `client_auth:` word.
        public var name: String {
            switch self {
            case .basic: "basic"
            case .body: "body"
            case .privateKeyJWT: "private_key_jwt"
            case .none: "none"
            }
        }
    }

    public enum Grant: Sendable, Equatable {
        /// RFC 6749 §4.4.2.
        case clientCredentials
        /// RFC 6749 §6: the refresh token is the secret named here (a `store:` secret is rewritten
        /// when the endpoint rotates it).
        case refreshToken(secret: String)
        /// RFC 7523 §2.1: a JWT the proxy signs is the grant (Google service accounts, many IdPs).
        case jwtBearer(JWTBearerSpec)

        public var grantType: String {
            switch self {
            case .clientCredentials: "client_credentials"
            case .refreshToken: "refresh_token"
            case .jwtBearer: "urn:ietf:params:oauth:grant-type:jwt-bearer"
            }
        }

        /// The `grant:` word of the config.
        public var name: String {
            switch self {
            case .clientCredentials: "client_credentials"
            case .refreshToken: "refresh_token"
            case .jwtBearer: "jwt_bearer"
            }
        }
    }

    /// The claims of a `jwt_bearer` assertion (RFC 7523 §3) and the key that signs it.
    public struct JWTBearerSpec: Sendable, Equatable {
        public let key: JWTKeySpec
        /// `iss`: who issued the assertion (a service account's e-mail).
        public let issuer: String
        /// `sub`: whom it is about; the issuer when not given (§3 requires one).
        public let subject: String?
        /// `aud`: the assertion's audience; the token URL when not given (§3: it identifies the server).
        public let audience: String?

        public init(key: JWTKeySpec, issuer: String, subject: String? = nil, audience: String? = nil) {
            self.key = key
            self.issuer = issuer
            self.subject = subject
            self.audience = audience
        }
    }

    /// The token endpoint's origin (https, or http on loopback only): named in errors and logs.
    public let endpoint: Origin
    /// Path and query of `token_url` as written (starts with `/`).
    public let path: String
    public let grant: Grant
    /// Required by every client authentication but `none`.
    public let clientID: String?
    public let scope: String?
    /// An extra form parameter (Auth0, and others that mint tokens per API); for `jwt_bearer` the
    /// assertion's `aud` instead (`JWTBearerSpec.audience`).
    public let audience: String?
    public let clientAuthentication: ClientAuthentication

    public init(
        endpoint: Origin, path: String, grant: Grant, clientID: String?, scope: String? = nil, audience: String? = nil,
        clientAuthentication: ClientAuthentication
    ) {
        self.endpoint = endpoint
        self.path = path
        self.grant = grant
        self.clientID = clientID
        self.scope = scope
        self.audience = audience
        self.clientAuthentication = clientAuthentication
    }

    /// The token URL as configured (the `aud` of a `private_key_jwt` assertion, RFC 7523 §3).
    public var tokenURL: String { endpoint.description + path }

    /// The name of the secret holding the client secret (basic and body authentication).
    public var clientSecret: String? {
        switch clientAuthentication {
        case .basic(let secret), .body(let secret): secret
        case .privateKeyJWT, .none: nil
        }
    }

    /// The private keys this token's requests are signed with.
    public var privateKeys: [String] {
        var keys: [String] = []
        if case .privateKeyJWT(let key) = clientAuthentication { keys.append(key.privateKey) }
        if case .jwtBearer(let bearer) = grant { keys.append(bearer.key.privateKey) }
        return keys
    }

    /// The secrets this token is computed from (a config check: they must exist and not be
    /// computed secrets themselves).
    public var inputSecrets: [String] {
        var names = clientSecret.map { [$0] } ?? []
        if case .refreshToken(let refresh) = grant { names.append(refresh) }
        return names + privateKeys
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
