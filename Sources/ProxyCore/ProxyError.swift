import HTTP1Codec
import JSONText
import ScopePolicy

/// Every way an exchange can fail before its response started, mapped to HTTP in one place.
/// Messages are fixed text plus, at most, an origin and names from the configuration (scopes,
/// clients, secrets): never a path, query, header or userinfo, because those may hold credentials.
public enum ProxyError: Error, Equatable, Sendable {
    case malformedRequest(String)
    /// The client opened with a TLS ClientHello on the plain listener (an `https://` proxy URL).
    /// Its answer is a TLS alert, not HTTP text the client would not read.
    case tlsToPlainListener
    case notProxyRequest
    case hostMismatch
    case unsupportedTarget(String)
    case targetTooLong
    case headTooLarge
    case tooManyFields
    case unsupportedTransferCoding
    case unsupportedVersion
    case tunnelDenied(Origin)
    case requestHeadTimeout
    /// The request body stopped arriving for `timeouts.idle` before it was complete.
    case requestBodyTimeout
    /// A body the scope decision depends on is larger than the proxy reads to decide.
    case bodyTooLargeToInspect(limit: Int)
    /// A body a non-s3 SigV4 scope must hash is over the limit (it is buffered to be hashed).
    case bodyTooLargeToSign(scope: String, limit: Int)
    /// An access token could not be had from its endpoint (502 credential_unavailable naming the
    /// scope and the endpoint's origin, never what the endpoint said).
    case tokenUnavailable(scope: String, secret: String, provider: TokenProvider?, reason: TokenFailure.Reason)
    /// A signing credential's value is not one the signature can use (the reason names no value).
    case signingFailed(scope: String, reason: String)
    case dnsFailure(Origin)
    case upstreamRefused(Origin)
    case connectTimeout(Origin)
    case responseTimeout(Origin)
    case upstreamClosed(Origin)
    case badUpstreamResponse(Origin, String)
    /// No configured client recognised the request (or its Proxy-Authorization was wrong).
    case proxyAuthenticationRequired(ClientRefusal)
    /// The client's `rate` is used up.
    case rateLimited(client: String, retryAfterSeconds: Int)
    /// A secret an injection needs has no value: the request is not sent (fail closed).
    case credentialUnavailable(scope: String, secret: String)
    /// Block mode: a redirect to an origin that is not allowed. Names the origin only; nil when
    /// the Location names no http(s) origin the proxy can read.
    case redirectBlocked(Origin?)
    case redirectLoop
    /// A response with two Location fields that differ: which one a client follows depends on the
    /// client, so neither is relayed nor followed (docs/security-model.md, "Strict parsing").
    case ambiguousLocation(Origin)
    /// Upstream certificate verification failed; nothing of the request was sent.
    case upstreamTLSVerification(Origin, String)
    case upstreamTLSHandshake(Origin)
    /// The client's TLS handshake inside an intercepted CONNECT did not complete (after the 200:
    /// nothing is answered, the line in the log says why).
    case interceptionFailed(Origin, ClientTLSFailure)
    /// Inside an intercepted tunnel: a target for another origin than the tunnel's.
    case tunnelOriginMismatch
    /// A placeholder of `secret` in a request to an origin no scope substitutes it for (`where`:
    /// "target", a header name, or "body"). Nothing of the request was sent (a body: nothing
    /// from the placeholder on).
    case placeholderOutOfScope(secret: String, where: String, Origin, PlaceholderRefusal)
    /// The value of a secret (in the finding's encoding) in a request to an origin outside its scopes.
    case secretEgressBlocked(SecretFinding, where: String, Origin)
    /// The proxy never connects to its own listening sockets (docs/security-model.md, "Clients"):
    /// the origin's resolved address and port reach one of them, and nothing was connected. Nil:
    /// the refused connection is itself one the proxy opened, arriving back as a client.
    case loopRefused(Origin?)
    /// An HTTP/2 stream inside an intercepted tunnel whose `:authority` names another origin than
    /// the tunnel's (RFC 9113 §9.1.2): this connection cannot serve it; nothing was sent.
    case misdirectedRequest(tunnel: Origin)
    /// CONNECT on an HTTP/2 stream that is not served: a tunnel (RFC 9113 §8.5) or, `extended`, an
    /// RFC 8441 `:protocol` other than `websocket` (which is served). Nothing was sent.
    case connectOverHTTP2(extended: Bool)
    /// The egress policy (docs/egress.md) does not let this client reach the destination: by name
    /// (`default deny`) before anything was resolved, or by the address it resolved to
    /// (`deny_ips`) before anything was connected.
    case egressDenied(EgressRefusal)

    public init(_ error: HTTPParseError) {
        switch error {
        case .headTooLarge: self = .headTooLarge
        case .tooManyFields: self = .tooManyFields
        case .targetTooLong: self = .targetTooLong
        case .unsupportedVersion: self = .unsupportedVersion
        case .unsupportedTransferCoding: self = .unsupportedTransferCoding
        case .malformed(let reason): self = .malformedRequest(reason)
        case .tlsHandshake: self = .tlsToPlainListener
        }
    }

    public var status: Int {
        switch self {
        case .malformedRequest, .notProxyRequest, .hostMismatch, .unsupportedTarget, .tlsToPlainListener: 400
        case .tunnelDenied, .placeholderOutOfScope, .secretEgressBlocked, .loopRefused, .egressDenied: 403
        case .misdirectedRequest: 421
        case .connectOverHTTP2: 501
        case .proxyAuthenticationRequired: 407
        case .rateLimited: 429
        case .credentialUnavailable, .redirectBlocked, .ambiguousLocation, .signingFailed, .tokenUnavailable: 502
        case .redirectLoop: 508
        case .upstreamTLSVerification, .upstreamTLSHandshake, .interceptionFailed: 502
        case .tunnelOriginMismatch: 400
        case .requestHeadTimeout, .requestBodyTimeout: 408
        case .bodyTooLargeToInspect, .bodyTooLargeToSign: 413
        case .targetTooLong: 414
        case .headTooLarge, .tooManyFields: 431
        case .unsupportedTransferCoding: 501
        case .unsupportedVersion: 505
        case .dnsFailure, .upstreamRefused, .connectTimeout, .upstreamClosed, .badUpstreamResponse: 502
        case .responseTimeout: 504
        }
    }

    /// A stable, machine-readable name for the error (JSON `error`, the log, metrics labels).
    public var code: String {
        switch self {
        case .malformedRequest: "malformed_request"
        case .tlsToPlainListener: "tls_to_plain_listener"
        case .notProxyRequest: "not_a_proxy_request"
        case .hostMismatch: "host_mismatch"
        case .unsupportedTarget: "unsupported_target"
        case .targetTooLong: "target_too_long"
        case .headTooLarge: "head_too_large"
        case .tooManyFields: "too_many_headers"
        case .unsupportedTransferCoding: "unsupported_transfer_coding"
        case .unsupportedVersion: "http_version_not_supported"
        case .tunnelDenied: "tunnel_denied"
        case .requestHeadTimeout: "request_head_timeout"
        case .requestBodyTimeout: "request_body_timeout"
        case .bodyTooLargeToInspect: "body_too_large_to_inspect"
        case .bodyTooLargeToSign: "body_too_large_to_sign"
        case .signingFailed, .tokenUnavailable: "credential_unavailable"
        case .dnsFailure: "dns_failure"
        case .upstreamRefused: "upstream_refused"
        case .connectTimeout: "connect_timeout"
        case .responseTimeout: "upstream_timeout"
        case .upstreamClosed: "upstream_closed"
        case .badUpstreamResponse: "bad_upstream_response"
        case .proxyAuthenticationRequired: "proxy_authentication_required"
        case .rateLimited: "rate_limited"
        case .credentialUnavailable: "credential_unavailable"
        case .redirectBlocked: "redirect_blocked"
        case .redirectLoop: "redirect_loop"
        case .ambiguousLocation: "ambiguous_location"
        case .upstreamTLSVerification: "upstream_tls_verification"
        case .upstreamTLSHandshake: "upstream_tls_handshake"
        case .interceptionFailed: "interception_failed"
        case .tunnelOriginMismatch: "tunnel_origin_mismatch"
        case .placeholderOutOfScope: "placeholder_out_of_scope"
        case .secretEgressBlocked: "secret_egress_blocked"
        case .loopRefused: "loop_refused"
        case .misdirectedRequest: "misdirected_request"
        case .connectOverHTTP2: "connect_over_http2_unsupported"
        case .egressDenied: "egress_denied"
        }
    }

    public var message: String {
        switch self {
        case .malformedRequest(let reason): "malformed request: \(reason)"
        case .tlsToPlainListener:
            "client spoke TLS to the plain proxy listener; use http:// for the proxy URL (HTTPS_PROXY=http://HOST:PORT, https_proxy=http://HOST:PORT)"
        case .notProxyRequest:
            // curl reads only the lower-case http_proxy for http:// URLs (the upper-case one is
            // ignored, httpoxy), so the hint names the spelling every client reads, and curl -x.
            "scopeproxy is a forward proxy: send absolute-form requests through it (curl -x http://HOST:PORT URL, or export http_proxy=http://HOST:PORT in lower case, with HOST:PORT this proxy's address)"
        case .hostMismatch: "the Host header does not match the request target"
        case .unsupportedTarget(let reason): "unsupported request target: \(reason)"
        case .targetTooLong: "request target longer than 8 KiB"
        case .headTooLarge: "request head larger than 64 KiB"
        case .tooManyFields: "more than 100 header fields"
        case .unsupportedTransferCoding: "only the chunked transfer coding is supported"
        case .unsupportedVersion: "only HTTP/1.0 and HTTP/1.1 are supported"
        case .tunnelDenied(let origin): "CONNECT tunnels are denied by configuration: \(origin)"
        case .requestHeadTimeout: "the request head did not arrive in time"
        case .requestBodyTimeout: "the request body stopped arriving before it was complete"
        case .bodyTooLargeToInspect(let limit):
            "a form body to a scope that limits methods is read to check for _method; this one is larger than \(limit / 1024) KiB"
        case .dnsFailure(let origin): "could not resolve \(origin)"
        case .upstreamRefused(let origin): "could not connect to \(origin)"
        case .connectTimeout(let origin): "connecting to \(origin) timed out"
        case .responseTimeout(let origin): "\(origin) did not send a response head in time"
        case .upstreamClosed(let origin): "\(origin) closed the connection before responding"
        case .badUpstreamResponse(let origin, let reason): "invalid response from \(origin): \(reason)"
        case .proxyAuthenticationRequired(let refusal):
            switch refusal.reason {
            case .proxyAuthorizationInvalid: "the Proxy-Authorization header could not be read (use Basic user:password or Bearer token)"
            case .proxyAuthorizationNotRecognised: "the Proxy-Authorization header names no client of this proxy"
            case .proxyAuthorizationSchemeNotConfigured: Self.schemeHint(refusal.schemes)
            case .clientNotRecognised: Self.recognitionHint(refusal)
            }
        case .rateLimited(let client, _): "client '\(client)' is over its rate limit"
        case .credentialUnavailable(let scope, let secret): "scope '\(scope)' needs secret '\(secret)', which has no value"
        case .bodyTooLargeToSign(let scope, let limit):
            "scope '\(scope)' signs the request body's SHA-256, which needs the body whole: it is over \(limit / 1024) KiB"
        case .signingFailed(let scope, let reason): "scope '\(scope)' cannot sign the request: \(reason)"
        case .tokenUnavailable(let scope, let secret, let provider, let reason):
            "scope '\(scope)' needs '\(secret)', which could not be obtained from "
                + (provider.map { "\($0)" } ?? "its source") + " (\(reason.code)); the next request tries again (at most once a second)"
        case .redirectBlocked(let origin?): "redirect to \(origin) blocked by the redirect policy"
        case .redirectBlocked(nil): "redirect to an unreadable Location blocked by the redirect policy"
        case .redirectLoop: "too many redirects"
        case .ambiguousLocation(let origin): "\(origin) answered with two different Location headers; neither is relayed or followed"
        case .upstreamTLSVerification(let origin, let reason): "TLS verification of \(origin) failed: \(reason)"
        case .upstreamTLSHandshake(let origin): "TLS handshake with \(origin) failed"
        case .interceptionFailed(let origin, let why): "cannot intercept TLS for \(origin): \(why.hint(at: .interception))"
        case .tunnelOriginMismatch: "requests inside a tunnel must target the tunnel's origin"
        case .placeholderOutOfScope(let secret, let place, let origin, let refusal):
            "the placeholder of secret '\(secret)' (in the \(place)) is not substituted for \(origin): " + Self.why(refusal)
                // A streamed body is refused where the placeholder starts: the head and the bytes
                // before it may have left, so only the placeholder is said not to have been sent.
                + (place == "body" ? "; the placeholder was not sent (the request stops before it)" : "; nothing was sent")
        case .secretEgressBlocked(let finding, let place, let origin):
            "the value of secret '\(finding.secret)' (in the \(place)) may not leave for \(origin), which is outside its scopes; the request was stopped before the value was sent"
        case .loopRefused(let origin?):
            "\(origin) resolves to this proxy's own listening port on this machine (or a listener on that port takes every address, 0.0.0.0 or ::): the proxy never connects to itself; nothing was sent; bind that listener to one address to reach this port on other hosts"
        case .loopRefused(nil):
            "this connection was opened by the proxy itself: it is never served as a client"
        case .misdirectedRequest(let tunnel):
            "this HTTP/2 connection is for \(tunnel) only: a request for another origin needs a connection (a CONNECT) of its own; nothing was sent"
        case .connectOverHTTP2(extended: false):
            "CONNECT on an HTTP/2 stream is not supported yet: open the tunnel with an HTTP/1.1 CONNECT to the proxy"
        case .connectOverHTTP2(extended: true):
            "extended CONNECT (RFC 8441) is served for :protocol websocket only; for another protocol use an HTTP/1.1 Upgrade or CONNECT"
        case .egressDenied(let refusal):
            "the egress policy does not allow "
                + (refusal.client.map { "client '\($0)'" } ?? "this client")
                + " to reach \(refusal.destination.hostAndPort) (\(refusal.rule)); nothing was sent"
        }
    }

    /// What can make this proxy recognise a client, from the kinds of rule configured: never
    /// Proxy-Authorization when no client uses `auth` (it could not succeed, whatever the 407's
    /// Basic challenge, which RFC 9110 §11.7.1 requires), and never a name, uid or network.
    static func recognitionHint(_ refusal: ClientRefusal) -> String {
        let kinds = refusal.recognizers
        var ways: [String] = []
        if kinds.proxyAuthorization { ways.append("send Proxy-Authorization (\(refusal.schemes.map(\.rawValue).joined(separator: " or ")))") }
        if kinds.clientCertificate {
            ways.append(
                "present a client certificate on the TLS client listener (tls.client_listen"
                    + (kinds.clientCertificateListen.map { " \($0)" } ?? "") + ")")
        }
        if kinds.uid { ways.append("connect over loopback as a configured uid") }
        if kinds.source { ways.append("connect from a configured source network") }
        guard !ways.isEmpty else { return "this proxy does not recognise this client" }
        return "this proxy does not recognise this client: " + ways.joined(separator: ", or ")
    }

    /// A credential in a scheme no client uses: the way the configured scheme is sent. Names only
    /// the schemes, which Proxy-Authenticate already offers, never a client or whether a key exists.
    private static func schemeHint(_ configured: [ProxyAuthScheme]) -> String {
        if configured == [.bearer] {
            // A password in the proxy URL is sent as Basic: Bearer goes in a header of its own.
            return "this proxy's clients authenticate with Bearer: send Proxy-Authorization: Bearer KEY "
                + "(curl --proxy-header 'Proxy-Authorization: Bearer KEY'); Basic (a password in the proxy URL) names no client"
        }
        return "this proxy's clients authenticate with Basic: put NAME:PASSWORD in the proxy URL "
            + "(curl -x http://NAME:PASSWORD@HOST:PORT); Bearer names no client"
    }

    private static func why(_ refusal: PlaceholderRefusal) -> String {
        func quoted(_ scopes: [String]) -> String { (scopes.count == 1 ? "scope " : "scopes ") + scopes.map { "'\($0)'" }.joined(separator: ", ") }
        switch refusal {
        case .notListed:
            return "no scope lists it in `substitute` for this origin"
        case .clientNotServed(let scopes, let client):
            return "\(quoted(scopes)) \(scopes.count == 1 ? "substitutes" : "substitute") it here but \(scopes.count == 1 ? "does" : "do") not serve "
                + (client.map { "client '\($0)'" } ?? "this request, which no configured client was recognised for") + " (see the scope's clients)"
        case .requestNotCovered(let skipped):
            let scopes = skipped.map(\.scope)
            // Only when a placeholder survives in the head of a request a scope substitutes in.
            if scopes.isEmpty { return "a scope substitutes it here, but it could not be replaced where it was found" }
            let reasons = skipped.map { skip in (scopes.count == 1 ? "" : "'\(skip.scope)': ") + skipRule(skip.why) }
            return "\(quoted(scopes)) \(scopes.count == 1 ? "substitutes" : "substitute") it here, but not for this request"
                + (reasons.isEmpty ? "" : " (" + reasons.joined(separator: "; ") + ")")
        case .bodyNotRewritten(let scopes, let contentType):
            let body = contentType.map { "a \(Self.mediaType($0)) body" } ?? "a body without Content-Type"
            return "\(quoted(scopes)) \(scopes.count == 1 ? "substitutes" : "substitute") it here, but not in \(body): "
                + "placeholders are replaced in headers, the query, JSON and form bodies only"
        case .placeholderEncoded(let scopes, let encoding):
            return "\(quoted(scopes)) \(scopes.count == 1 ? "substitutes" : "substitute") it here, but it was sent \(encoding)-encoded: "
                + "only the placeholder as written is replaced (base64 only in Authorization: Basic)"
        case .bodyEncoded(let scopes, let coding):
            return "\(quoted(scopes)) \(scopes.count == 1 ? "substitutes" : "substitute") it here, but not in a body with "
                + "Content-Encoding \(Self.mediaType(coding)): an encoded body's placeholders cannot be replaced"
        }
    }

    /// The rule a scope's skip names, in the words of its configuration.
    private static func skipRule(_ why: InjectionSkip) -> String {
        switch why {
        case .httpOrigin: "its origin is http and the scope does not set require_https: false"
        case .method: "the method is not in its methods"
        case .methodOverride: "the _method override is not in its methods"
        case .path: "the path is not under its paths"
        case .trace: "TRACE never carries credentials"
        case .httpsDowngrade: "a redirect went from https to http"
        case .clientNotServed: "it does not serve this client"
        }
    }

    /// The media type alone (parameters dropped), printable and short: the message echoes what the
    /// client sent, so nothing of it but a bounded token is repeated.
    private static func mediaType(_ value: String) -> String {
        let media = (value.split(separator: ";", maxSplits: 1).first ?? "").trimmingCharacters(in: " \t").lowercased()
        let safe = media.unicodeScalars.allSatisfy { $0.value > 0x20 && $0.value < 0x7F && $0 != "\"" && $0 != "\\" }
        return safe && !media.isEmpty && media.utf8.count <= 80 ? media : "unreadable"
    }

    /// Whether the client connection can carry another request after this answer. A malformed
    /// request leaves the byte stream in an unknown state: close it.
    public var allowsKeepAlive: Bool {
        switch self {
        case .dnsFailure, .upstreamRefused, .connectTimeout, .responseTimeout, .upstreamClosed,
            .badUpstreamResponse, .notProxyRequest, .hostMismatch,
            .credentialUnavailable, .redirectBlocked, .ambiguousLocation, .redirectLoop, .upstreamTLSVerification, .upstreamTLSHandshake,
            .tokenUnavailable:
            true
        default:
            false
        }
    }

    /// The proxy's answer to this error, whatever its client speaks: the status, the fields (named
    /// as HTTP/1.1 writes them) and the JSON body `{"error":..., "message":..., "id":...}`.
    /// `response` renders it as HTTP/1.1; an HTTP/2 stream sends the same fields (lower-cased)
    /// and body, so both protocols answer with the same bytes of JSON.
    public struct Answer: Sendable, Equatable {
        public let status: Int
        public let fields: HTTPFields
        public let body: [UInt8]
    }

    public func answer(requestID: String) -> Answer {
        var json = JSONLine()
        json.string("error", code)
        json.string("message", message)
        json.string("id", requestID)
        if case .egressDenied(let refusal) = self {
            // What an agent acts on: where it was going, the rule, who it is, and what would change it.
            json.string("destination", refusal.destination.hostAndPort)
            json.string("rule", refusal.rule)
            if let client = refusal.client { json.string("client", client) } else { json.raw("client", "null") }
            // Never the resolved address: that would answer DNS questions about names the client
            // cannot resolve itself (an oracle, docs/security-model.md); the log line carries it.
            json.string("hint", refusal.hint)
        }
        let body = json.finish() + [0x0A]
        var fields = HTTPFields()
        fields.reserveCapacity(6)
        fields.append(name: "X-Request-ID", value: requestID)
        fields.append(name: "Content-Type", value: "application/json")
        fields.append(name: "Content-Length", value: String(body.count))
        fields.append(name: "Cache-Control", value: "no-store")
        if case .proxyAuthenticationRequired(let refusal) = self {
            for scheme in refusal.schemes { fields.append(name: "Proxy-Authenticate", value: "\(scheme.rawValue) realm=\"scopeproxy\"") }
        }
        if case .rateLimited(_, let seconds) = self { fields.append(name: "Retry-After", value: String(seconds)) }
        return Answer(status: status, fields: fields, body: body)
    }

    /// The whole response in HTTP/1.1: status line, `answer`'s fields and body.
    /// An HTTP/1.0 client keeps the connection only when told so (RFC 9112 §9.3).
    public func response(keepAlive: Bool, requestID: String, clientVersion: HTTPVersion = .http1_1) -> [UInt8] {
        // A TLS client reads TLS records only: HTTP text would be reported as a bad record
        // ("wrong version number"). A fatal alert ends its handshake with a reason it shows.
        if case .tlsToPlainListener = self { return Self.protocolVersionAlert }
        let answer = answer(requestID: requestID)
        var head = "HTTP/1.1 \(answer.status) \(Self.reasonPhrase(answer.status))\r\n"
        for field in answer.fields { head += "\(field.name): \(field.value)\r\n" }
        head += !keepAlive ? "Connection: close\r\n\r\n" : clientVersion == .http1_0 ? "Connection: keep-alive\r\n\r\n" : "\r\n"
        return Array(head.utf8) + answer.body
    }

    /// A TLS alert record (RFC 8446 §6; record version 0x0301, as a ClientHello's record may
    /// carry): fatal (2), protocol_version (70). OpenSSL reports it as "tlsv1 alert protocol
    /// version": the listener does not speak the protocol the client opened with.
    public static let protocolVersionAlert: [UInt8] = [0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x46]

    public static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 400: "Bad Request"
        case 403: "Forbidden"
        case 407: "Proxy Authentication Required"
        case 408: "Request Timeout"
        case 413: "Content Too Large"
        case 414: "URI Too Long"
        case 421: "Misdirected Request"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 501: "Not Implemented"
        case 502: "Bad Gateway"
        case 504: "Gateway Timeout"
        case 505: "HTTP Version Not Supported"
        case 508: "Loop Detected"
        default: "Error"
        }
    }
}

extension HTTPParseError {
    /// What was wrong with an upstream's response, for a 502's message (fixed text only).
    public var responseProblem: String {
        switch self {
        case .headTooLarge: "response head too large"
        case .tooManyFields: "too many response header fields"
        case .targetTooLong: "target too long"
        case .unsupportedVersion: "unsupported HTTP version"
        case .unsupportedTransferCoding: "unsupported transfer coding"
        case .malformed(let reason): reason
        case .tlsHandshake: "the origin answered with TLS (is it an https origin?)"
        }
    }
}
