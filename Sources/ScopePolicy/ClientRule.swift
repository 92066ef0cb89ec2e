/// One entry of `clients:`: a name, and how the proxy recognises a connection or a request as that
/// client. Plain values: the recognition itself (`ClientRecognizer` in ProxyCore) decides on them
/// and on the facts the engine gathered, and is table-tested without sockets.
public struct ClientRule: Sendable, Equatable {
    public let name: String
    /// Proxy-Authorization credentials that select this client.
    public let auth: ClientAuth?
    /// The uid that owns the client's socket (loopback TCP, Linux only).
    public let uid: UInt32?
    /// Client addresses in these networks.
    public let sources: [CIDR]
    /// A client certificate the TLS client listener verified.
    public let tlsClient: TLSClientMatch?
    /// Requests per period; nil: unlimited.
    public let rate: RateLimit?

    public init(
        name: String, auth: ClientAuth? = nil, uid: UInt32? = nil, sources: [CIDR] = [],
        tlsClient: TLSClientMatch? = nil, rate: RateLimit? = nil
    ) {
        self.name = name
        self.auth = auth
        self.uid = uid
        self.sources = sources
        self.tlsClient = tlsClient
        self.rate = rate
    }

    /// The client that applies when nothing else recognises a request.
    public static let anonymousName = "anonymous"

    /// Whether the rule names any way to recognise a client (`anonymous` needs none).
    public var hasRecognitionMethod: Bool { auth != nil || uid != nil || !sources.isEmpty || tlsClient != nil }

    /// Names of the secrets the rule reads (for `check` and the banner; never their values).
    public var secretNames: [String] {
        switch auth {
        case .basic(_, let password)?: [password]
        case .bearer(let token)?: [token]
        case .anyUserOrBearer(let secret)?: [secret]
        case nil: []
        }
    }
}

/// `auth:` of a client: what it sends in Proxy-Authorization. Secret names, never values.
public enum ClientAuth: Sendable, Equatable {
    /// `Basic base64(user:password)`: the user name selects the client, the password is a secret.
    case basic(user: String, passwordSecret: String)
    /// `Bearer token`: the token is a secret.
    case bearer(tokenSecret: String)
    /// The `proxy_auth: { secret: NAME }` shorthand: `Basic any-user:secret` or `Bearer secret`.
    case anyUserOrBearer(secret: String)

    public var schemes: Set<ProxyAuthScheme> {
        switch self {
        case .basic: [.basic]
        case .bearer: [.bearer]
        case .anyUserOrBearer: [.basic, .bearer]
        }
    }
}

/// Schemes a 407's Proxy-Authenticate offers.
public enum ProxyAuthScheme: String, Sendable, CaseIterable, Comparable {
    case basic = "Basic"
    case bearer = "Bearer"

    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// `tls_client: { ca: FILE, subject: "CN=tool" }`.
public struct TLSClientMatch: Sendable, Equatable {
    /// The CA file, resolved relative to the config file: `ClientCertificate.verifiedBy` holds the
    /// CA files that verified a certificate, spelled the same way.
    public let caFile: String
    public let subject: SubjectMatch

    public init(caFile: String, subject: SubjectMatch) {
        self.caFile = caFile
        self.subject = subject
    }
}

/// What a client certificate must name.
public enum SubjectMatch: Sendable, Equatable, CustomStringConvertible {
    /// `CN=x`: one of the subject's common names.
    case commonName(String)
    /// `DNS:x`, `email:x`, `URI:x`, `IP:x`: one of the subject alternative names, as
    /// `ClientCertificate.subjectAltNames` spells them.
    case subjectAltName(String)

    /// Parses the config's spelling; nil when it is none of the forms above.
    public static func parse(_ text: String) -> SubjectMatch? {
        if text.hasPrefix("CN="), text.count > 3 { return .commonName(String(text.dropFirst(3))) }
        for prefix in ["DNS:", "email:", "URI:", "IP:"] where text.hasPrefix(prefix) && text.count > prefix.count {
            return .subjectAltName(text)
        }
        return nil
    }

    public func matches(commonNames: [String], subjectAltNames: [String]) -> Bool {
        switch self {
        case .commonName(let name): commonNames.contains(name)
        case .subjectAltName(let san):
            // DNS names compare without case (RFC 4343); the other kinds exactly.
            san.hasPrefix("DNS:") ? subjectAltNames.contains { $0.lowercased() == san.lowercased() } : subjectAltNames.contains(san)
        }
    }

    public var description: String {
        switch self {
        case .commonName(let name): "CN=\(name)"
        case .subjectAltName(let san): san
        }
    }
}
