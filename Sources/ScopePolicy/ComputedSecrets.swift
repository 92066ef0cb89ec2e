import HTTP1Codec

/// A secret whose value the proxy obtains when a request first needs it, caches, and obtains again
/// before it expires (docs/credentials.md): from a token endpoint, a command, a GitHub App, or the
/// AWS credential chain. Every field is a name or a public parameter; the inputs (client secrets,
/// private keys) are themselves secrets, named here.
public enum ComputedSecret: Sendable, Equatable {
    case oauth2(OAuth2Spec)
    case command(CommandSecretSpec)
    case githubApp(GitHubAppSpec)
    /// A scope's `credentials: default` or `{profile: NAME}`: one value holding an access key id,
    /// a secret key and a session token (`AWSCredentialSelection.secretName`).
    case awsChain(AWSCredentialSelection)

    /// The ordinary secrets this one is computed from (they must exist; a private key is one).
    public var inputSecrets: [String] {
        switch self {
        case .oauth2(let spec): spec.inputSecrets
        case .command: []
        case .githubApp(let spec): [spec.privateKey]
        case .awsChain: []
        }
    }

    /// The private keys (PEM secrets) it signs with: never put in a header, so they may span lines.
    public var privateKeys: [String] {
        switch self {
        case .oauth2(let spec): spec.privateKeys
        case .githubApp(let spec): [spec.privateKey]
        case .command, .awsChain: []
        }
    }

    /// What the 502, `explain` and the logs name as where the value comes from (never a value).
    public var sourceKind: String {
        switch self {
        case .oauth2: "oauth2"
        case .command: "command"
        case .githubApp: "github_app"
        case .awsChain: "aws"
        }
    }
}

/// `command:` (docs/credentials.md, "A command"): the program prints the value, like a git credential
/// helper or AWS `credential_process`. Never run through a shell.
public struct CommandSecretSpec: Sendable, Equatable {
    /// argv[0] is looked up in PATH when it has no `/`.
    public let argv: [String]
    /// How long a value without a stated expiry is used.
    public let ttlSeconds: Int
    public let timeoutMilliseconds: Int
    /// Environment variables passed through beyond the minimal set (`env:`).
    public let environment: [String]

    public static let defaultTTLSeconds = 300
    public static let defaultTimeoutMilliseconds = 10_000

    public init(
        argv: [String], ttlSeconds: Int = CommandSecretSpec.defaultTTLSeconds,
        timeoutMilliseconds: Int = CommandSecretSpec.defaultTimeoutMilliseconds, environment: [String] = []
    ) {
        self.argv = argv
        self.ttlSeconds = ttlSeconds
        self.timeoutMilliseconds = timeoutMilliseconds
        self.environment = environment
    }

    /// The program's name as logs and errors say it (never its arguments: they may hold a path or a flag worth hiding).
    public var programName: String { argv.first.map { String($0.split(separator: "/").last ?? Substring($0)) } ?? "?" }
}

/// `github_app:` (docs/credentials.md, "A GitHub App"): an installation access token, obtained with a
/// JWT the proxy signs with the app's private key.
public struct GitHubAppSpec: Sendable, Equatable {
    public let appID: String
    public let installationID: String
    /// The secret holding the app's private key (PEM).
    public let privateKey: String
    /// `https://api.github.com`, or a GitHub Enterprise Server's `https://HOST` with `pathPrefix` `/api/v3`.
    public let api: Origin
    /// The API's path prefix without a trailing `/` (empty for api.github.com).
    public let pathPrefix: String
    /// Narrows the token (`permissions: { contents: read }`), in name order.
    public let permissions: [Permission]
    public let repositories: [String]

    public struct Permission: Sendable, Equatable {
        public let name: String
        public let access: String
        public init(name: String, access: String) {
            self.name = name
            self.access = access
        }
    }

    public init(
        appID: String, installationID: String, privateKey: String, api: Origin, pathPrefix: String,
        permissions: [Permission] = [], repositories: [String] = []
    ) {
        self.appID = appID
        self.installationID = installationID
        self.privateKey = privateKey
        self.api = api
        self.pathPrefix = pathPrefix
        self.permissions = permissions
        self.repositories = repositories
    }

    /// GitHub's default API origin.
    public static let publicAPI = try! Origin.parse("https://api.github.com")
}

/// A private key a JWT is signed with (`private_key`, `key_id`, `alg` of `jwt_bearer` and
/// `private_key_jwt`): RFC 7518 §3.3 RS256 or §3.4 ES256.
public struct JWTKeySpec: Sendable, Equatable {
    /// The secret holding the PEM private key.
    public let privateKey: String
    /// The JWS `kid` header (RFC 7515 §4.1.4), when the server needs it to pick the key.
    public let keyID: String?
    /// `RS256` or `ES256`; nil: the key's own (RSA → RS256, P-256 → ES256).
    public let algorithm: String?

    public static let algorithms = ["RS256", "ES256"]

    public init(privateKey: String, keyID: String? = nil, algorithm: String? = nil) {
        self.privateKey = privateKey
        self.keyID = keyID
        self.algorithm = algorithm
    }
}

/// Which AWS credentials a SigV4 scope signs with when they are not named secrets.
public enum AWSCredentialSelection: Sendable, Hashable, CustomStringConvertible {
    /// The SDKs' default chain: environment, web identity, shared files, container, instance metadata.
    case defaultChain
    /// One profile of the shared files (its keys, `credential_process` or `role_arn`).
    case profile(String)

    /// The computed secret's name. A `:` is never in a configured secret's name, so it cannot clash.
    public var secretName: String {
        switch self {
        case .defaultChain: "aws:default"
        case .profile(let name): "aws:profile:" + name
        }
    }

    /// The names the scrub, the guard and the log tripwire know each part by.
    public var partNames: (accessKeyID: String, secretAccessKey: String, sessionToken: String) {
        (secretName + ":access_key_id", secretName + ":secret_access_key", secretName + ":session_token")
    }

    public var description: String {
        switch self {
        case .defaultChain: "the AWS credential chain"
        case .profile(let name): "AWS profile '\(name)'"
        }
    }
}
