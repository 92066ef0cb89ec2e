import HTTP1Codec
import ScopePolicy

/// One exchange as the access log sees it: raw facts from the data path, built by the exchange
/// state machine. Redaction happens when the line is formatted, in one place (`AccessLog`), so no
/// caller can forget it.
public struct ExchangeRecord: Sendable, Equatable {
    public var id: String
    /// The client's address (`127.0.0.1:5000`).
    public var client: String
    /// The configured client (`clients:`) the request came from: the log's `client_id`; nil when
    /// the proxy does not tell clients apart, or did not recognise this one.
    public var clientID: String?
    /// Transparent capture: where the client's connection was going (`10.0.0.1:443`), the log's `original_dst`.
    public var originalDestination: String?
    public var method: String?
    /// The protocol the client spoke for this exchange (the log's `proto`); nil when no head was read.
    public var proto: ClientProtocol?
    public var origin: Origin?
    public var pathAndQuery: String?
    public var status: Int?
    public var bytesIn: UInt64 = 0
    public var bytesOut: UInt64 = 0
    /// Monotonic microseconds when the request head was read.
    public var startedAt: UInt64
    public var scopes: [String] = []
    public var injected: [String] = []
    public var stripped: [String] = []
    /// Covering scopes that injected nothing here, and why (the log's `reason`).
    public var skipped: [SkippedInjection] = []
    public var redirect: RedirectRecord?
    public var requestFields: HTTPFields?
    public var responseFields: HTTPFields?
    public var failure: ExchangeFailure?
    /// CONNECT requests: what became of the tunnel.
    public var tunnel: TunnelDecision?
    public var requestBody: ObservedBody?
    public var responseBody: ObservedBody?
    /// Secrets whose placeholders were replaced by their values in this request (the log's `substituted`).
    public var substituted: [String] = []
    /// Injected or substituted values found in the response and masked (the log's `scrubbed`).
    public var scrubbed: [SecretFinding] = []
    /// The signature the proxy made for this request (`aws_sigv4`), if any (the log's `signed`).
    public var signed: String?
    /// A response body the scrub could not read, by its Content-Encoding (`gzip`): it passed as it was.
    public var scrubSkipped: String?
    /// What the egress guard stopped (a value or a placeholder that may not go to this origin).
    public var guardFinding: SecretFinding?
    /// `mode: report`: an egress rule would have denied this exchange's destination (a refusal is
    /// the failure `egress_denied`; `egressNote` reads both).
    public var egressReported: EgressNote?
    /// The address and port the upstream connection went to (`93.184.216.34:443`), once connected.
    public var upstreamAddress: String?
    /// The head this hop sent to the origin, as built (after substitution, injection and signing:
    /// it carries secret values, shown only by name in the live view); nil when nothing was sent.
    public var upstreamRequest: RequestHead?
    /// The origin's final response head (or its 101) as it arrived, before the proxy changed it
    /// (framing, hop-by-hop fields, the scrub, a route's Location); nil when none came.
    public var originResponse: ResponseHead?
    /// 1 for the client's request, 2... for each redirect the proxy followed (the view's `hop`).
    public var hop = 1
    /// How the request reached the proxy (the live view's curl goes the same way); nil when no
    /// head was read.
    public var mode: ConnectionMode?

    /// What the egress policy said about this exchange, when it denied or would have denied it.
    public var egressNote: EgressNote? {
        if case .proxy(.egressDenied(let refusal)) = failure {
            return EgressNote(decision: .deny, rule: refusal.rule, destination: refusal.destination.hostAndPort, address: refusal.address)
        }
        return egressReported
    }

    /// What the client spoke (the log's `proto`): the HTTP/1 version of its request line, HTTP/2 over
    /// TLS (`h2`) or with prior knowledge on the plain listener (`h2c`), or WebSocket after an upgrade.
    public enum ClientProtocol: String, Sendable, Equatable {
        case http1_0 = "http/1.0"
        case http1_1 = "http/1.1"
        case h2
        case h2c
        case websocket

        /// The protocol of an HTTP/1 request head (any other version is refused before a line says it).
        public init(http1 version: HTTPVersion) {
            self = version == .http1_0 ? .http1_0 : .http1_1
        }
    }

    public init(id: String, client: String, method: String?, startedAt: UInt64) {
        self.id = id
        self.client = client
        self.method = method
        self.startedAt = startedAt
    }

    /// The origin (and path) a refused request named, when its target can be read, so that its
    /// log line says where it was going (a denied CONNECT names its host:port). A target that
    /// cannot be read leaves the line's `url` absent (`-`): there is nothing trustworthy to show.
    public mutating func noteTarget(of head: RequestHead, fixedOrigin: Origin?) {
        guard origin == nil, let target = try? RequestTarget.parse(head.target, method: head.method) else { return }
        switch target {
        case .authority(let host, let port):
            origin = Origin(scheme: .https, host: host, port: port)
        case .absolute(let named, let path, _):
            origin = named
            pathAndQuery = path
        case .origin(let path):
            // Origin-form names a host only where the connection fixes it (a route, an intercepted tunnel).
            guard let fixedOrigin else { return }
            origin = fixedOrigin
            pathAndQuery = path
        case .asterisk:
            return
        }
    }

    /// The scopes that cover the origin for this client, noted as soon as both are known (the
    /// request admitted, or a followed hop's target chosen): a request refused after that (a
    /// placeholder or a secret's value where it may not go, a credential without a value, a body
    /// too large to inspect) names them like every other request, so `scope=-` in the log means
    /// only that no scope covers the origin. A planned hop's decision notes the same list.
    public mutating func noteCoveringScopes(_ policy: ScopePolicy, client: String?) {
        guard let origin else { return }
        scopes = policy.covering(origin, client: client).map(\.name)
    }

    /// What the scope rules did to the request this record describes.
    public mutating func note(_ decision: ScopeDecision) {
        scopes = decision.scopes
        injected = decision.injected
        stripped = decision.stripped
        skipped = decision.skipped
    }

    /// With `log.bodies`: the first bytes of a body, for its redacted summary.
    public struct ObservedBody: Sendable, Equatable {
        public var bytes: [UInt8]
        public var total: UInt64
        public var truncated: Bool
        public var contentType: String?

        public init(bytes: [UInt8], total: UInt64, truncated: Bool, contentType: String?) {
            self.bytes = bytes
            self.total = total
            self.truncated = truncated
            self.contentType = contentType
        }
    }
}

/// The log's `redirect` object: where a 3xx pointed and what the proxy did with it.
public struct RedirectRecord: Sendable, Equatable {
    /// The Location as sent (redacted when the line is formatted).
    public var location: String?
    /// The origin it resolves to; nil when it could not be read.
    public var origin: Origin?
    public var decision: RedirectDecision

    public init(location: String?, origin: Origin?, decision: RedirectDecision) {
        self.location = location
        self.origin = origin
        self.decision = decision
    }
}

public enum RedirectDecision: String, Sendable, Equatable {
    /// Returned to the client, which follows (or not) on its own.
    case pass
    /// Followed by the proxy, re-scoped for the new origin.
    case follow
    /// Refused with 502 `redirect_blocked`.
    case block
}

public enum TunnelDecision: String, Sendable, Equatable {
    /// Bytes spliced; the proxy sees nothing inside.
    case tunnel
    /// Refused by `tls.tunnel: deny`.
    case deny
    /// TLS terminated with the local CA; each request inside gets its own line.
    case intercept
}

/// Why an exchange did not end with a complete response.
/// An egress decision worth a line's attention (docs/egress.md, "In the log").
public struct EgressNote: Sendable, Equatable {
    public enum Decision: String, Sendable, Equatable {
        case deny
        /// `mode: report`: let through, and said.
        case reportDeny = "report_deny"
    }

    public let decision: Decision
    /// `default deny`, `deny_ips: private`, ...
    public let rule: String
    /// HOST:PORT as requested.
    public let destination: String
    /// The resolved address a `deny_ips` rule named.
    public let address: String?

    public init(decision: Decision, rule: String, destination: String, address: String?) {
        self.decision = decision
        self.rule = rule
        self.destination = destination
        self.address = address
    }

    /// `DECISION:RULE` as one word of a text line (`deny:default_deny`, `report_deny:deny_ips:private`).
    public var word: String {
        var text = decision.rawValue + ":"
        var previous: Character = " "
        for character in rule {
            if character == " " {
                if previous != ":" { text.append("_") }
            } else {
                text.append(character)
            }
            previous = character
        }
        return text
    }
}

public enum ExchangeFailure: Sendable, Equatable {
    /// The proxy answered with an error of its own.
    case proxy(ProxyError)
    /// The response was under way when the upstream failed or stalled: the client connection was
    /// closed without completing it.
    case responseCut
    /// The client went away before its exchange was finished.
    case clientClosed

    /// The log's `error` field and the metrics' `kind` label.
    public var code: String {
        switch self {
        case .proxy(let error): error.code
        case .responseCut: "response_cut"
        case .clientClosed: "client_closed"
        }
    }

    /// The detail the log's `reason` field carries next to `error`, when the code alone does not
    /// tell the user what to do.
    public var reason: String? {
        switch self {
        case .proxy(.interceptionFailed(_, let why)): why.rawValue
        case .proxy(.proxyAuthenticationRequired(let refusal)): refusal.logText
        // Why the token could not be had, as its fixed code: never what the endpoint answered.
        case .proxy(.tokenUnavailable(_, _, _, let reason)): reason.code
        // The client never reads this answer (it gets a TLS alert): the log line is where the fix is said.
        case .proxy(.tlsToPlainListener): "client spoke TLS to the plain proxy listener; use http:// for the proxy URL (HTTPS_PROXY=http://HOST:PORT)"
        default: nil
        }
    }

    /// The first-hour mistakes whose fix the proxy also says on its own stderr, once per process
    /// (the access log carries every case, but may be a file nobody watches yet): the event name
    /// and the hint. Fixed text only, never request data. nil for every other failure.
    public var stderrHint: (event: String, hint: String)? {
        switch self {
        case .proxy(.interceptionFailed(_, .clientRejectedCertificate)):
            ("client_rejected_certificate", ClientTLSFailure.clientRejectedCertificate.hint(at: .interception))
        case .proxy(.tlsToPlainListener):
            (
                "client_spoke_tls_to_plain_listener",
                "a client spoke TLS to the plain proxy listener: its proxy URL says https:// "
                    + "where it should say http:// (HTTPS_PROXY=http://HOST:PORT, curl -x http://HOST:PORT)"
            )
        default:
            nil
        }
    }

    /// Failures caused by the upstream side (counted in `scopeproxy_upstream_errors_total`).
    public var isUpstreamFailure: Bool {
        switch self {
        case .responseCut: true
        case .clientClosed: false
        case .proxy(let error):
            switch error {
            case .dnsFailure, .upstreamRefused, .connectTimeout, .responseTimeout, .upstreamClosed, .badUpstreamResponse: true
            default: false
            }
        }
    }
}

/// Request ids: a client's well-formed X-Request-ID is kept; otherwise the proxy makes one.
public enum RequestID {
    /// At most 64 characters of `[A-Za-z0-9._-]`.
    public static func isWellFormed(_ value: String) -> Bool {
        !value.isEmpty && value.utf8.count <= 64
            && value.utf8.allSatisfy { byte in
                (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                    || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
            }
    }
}

/// 16 hex characters from xorshift64*, one generator per worker, seeded once from the system (no
/// syscall per request).
public struct RequestIDGenerator: Sendable {
    private var state: UInt64

    public init() {
        var seed: UInt64 = 0
        while seed == 0 { seed = UInt64.random(in: 1...UInt64.max) }
        state = seed
    }

    /// A fixed sequence (tests).
    public init(seed: UInt64) {
        state = seed == 0 ? 1 : seed
    }

    /// A generator of its own for one connection, without another system call.
    public mutating func fork() -> RequestIDGenerator {
        RequestIDGenerator(seed: nextValue())
    }

    public mutating func next() -> String {
        let value = nextValue()
        // 16 hex digits written in place: a small string, no allocation.
        return String(unsafeUninitializedCapacity: 16) { buffer in
            for index in 0..<16 {
                let digit = UInt8((value >> (60 - 4 * UInt64(index))) & 0xF)
                buffer[index] = digit < 10 ? 0x30 + digit : 0x57 + digit
            }
            return 16
        }
    }

    private mutating func nextValue() -> UInt64 {
        state ^= state >> 12
        state ^= state << 25
        state ^= state >> 27
        return state &* 2_685_821_657_736_338_717
    }
}

extension ExchangeRecord {
    /// The proxy answered with `error` (`bytes` long as sent): the line's status, failure and what
    /// the guard stopped, whatever protocol the answer went out in.
    mutating func noteAnswer(_ error: ProxyError, bytes: Int) {
        status = error.status
        failure = .proxy(error)
        bytesOut += UInt64(max(0, bytes))
        if case .tunnelDenied = error { tunnel = .deny }
        // A CONNECT the egress policy refused is a denied tunnel: its line is a CONNECT line.
        if case .egressDenied = error, method == "CONNECT" { tunnel = .deny }
        // What the guard stopped, for the log and the metrics (a body's finding is already there).
        switch error {
        case .secretEgressBlocked(let finding, _, _) where guardFinding == nil:
            guardFinding = finding
        case .placeholderOutOfScope(let secret, _, _, _) where guardFinding == nil:
            guardFinding = SecretFinding(secret: secret, encoding: .raw, isPlaceholder: true)
        default: break
        }
    }
}
