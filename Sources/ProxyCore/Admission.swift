import HTTP1Codec

/// Who a client is, as far as the scope rules care. Established once per request, or once per
/// CONNECT and then inherited by every request inside the tunnel.
public struct ClientIdentity: Sendable, Hashable {
    /// The configured client's name; nil when the proxy does not tell clients apart.
    public var name: String?

    public init(name: String?) {
        self.name = name
    }

    /// Every client, when no client identities are configured.
    public static let unnamed = ClientIdentity(name: nil)
}

/// What a client connection is for; it decides which request targets make sense on it.
public enum ConnectionMode: Sendable, Equatable {
    /// The forward proxy: absolute-form targets and CONNECT.
    case forwardProxy
    /// A route's listener: origin-form requests for one upstream. `publicOrigin` is the address the
    /// listener is bound to (its port is what a client's Host may name).
    case route(upstream: Origin, publicOrigin: Origin)
    /// Inside a CONNECT whose TLS the proxy terminated: origin-form requests for that one origin,
    /// from the client the CONNECT identified.
    case intercepted(Origin, client: ClientIdentity)
    /// Plain HTTP on the transparent listener: origin-form requests for the origin the first
    /// request's Host fixed (docs/transparent.md); every hop to it connects to the original destination.
    case transparent(TransparentTarget)

    /// The one origin every request on this connection is for, if the connection fixes it.
    var fixedOrigin: Origin? {
        switch self {
        case .forwardProxy: nil
        case .route(let upstream, _): upstream
        case .intercepted(let origin, _): origin
        case .transparent(let target): target.origin
        }
    }
}

/// A request the proxy accepted for forwarding, as the client sent it.
public struct ClientRequest: Sendable, Equatable {
    public let head: RequestHead
    /// The origin the client addressed: the only one its own credentials may ever reach.
    public let origin: Origin
    public let pathAndQuery: String
    /// `user:password` from an absolute-form target (percent-encoded, as sent).
    public let userinfo: String?
    public let framing: BodyFraming
    public let client: ClientIdentity
    /// Arrived on a route's listener: its `origin` is the route's configured upstream, which the
    /// egress policy does not govern (docs/egress.md); a redirect away from it is governed.
    public let viaRoute: Bool

    public init(
        head: RequestHead, origin: Origin, pathAndQuery: String, userinfo: String?, framing: BodyFraming,
        client: ClientIdentity, viaRoute: Bool = false
    ) {
        self.viaRoute = viaRoute
        self.head = head
        self.origin = origin
        self.pathAndQuery = pathAndQuery
        self.userinfo = userinfo
        self.framing = framing
        self.client = client
    }

    /// `Connection: upgrade` without a body: becomes a tunnel after a 101.
    public var isUpgrade: Bool { framing == .none && Forwarding.isUpgradeRequest(head) }
}

/// The admission decision for one request head.
public enum Admission: Sendable, Equatable {
    /// Answer with this error and close: nothing was forwarded, and the request's body (if any)
    /// was not read, so the byte stream cannot carry another request.
    case reject(ProxyError)
    /// CONNECT to a host that is not intercepted, where tunnels are allowed: splice bytes.
    case tunnel(Origin, client: ClientIdentity, egress: EgressClearance)
    /// CONNECT to an intercepted host: terminate TLS with the local CA (each request inside is
    /// checked against the egress policy again, as a hop).
    case intercept(Origin, client: ClientIdentity, egress: EgressClearance)
    case forward(ClientRequest)
}

/// Request admission: proxy authentication, the target's form for this kind of connection, the
/// Host rules of RFC 9112 §3.2, body framing, and the tunnel/intercept decision for CONNECT.
public enum RequestAdmission {
    public struct Policy: Sendable {
        public var tunnel: TunnelPolicy
        /// A local CA is loaded, so CONNECTs to intercepted hosts can be terminated.
        public var canIntercept: Bool

        public init(tunnel: TunnelPolicy, canIntercept: Bool) {
            self.tunnel = tunnel
            self.canIntercept = canIntercept
        }
    }

    /// `facts`: what the engine knows about the connection (`clients:` recognition); `now`:
    /// monotonic microseconds (rate limits).
    public static func admit(
        _ head: RequestHead, mode: ConnectionMode, scope: ScopeContext, policy: Policy,
        facts: ConnectionFacts = ConnectionFacts(peer: ""), now: UInt64 = 0
    ) -> Admission {
        // Before any client rule, and in every mode: the proxy's own connection must never borrow
        // an identity (`uid:` is the proxy's user, `source:` this machine's address).
        if facts.isProxyOwnConnection { return .reject(.loopRefused(nil)) }
        // A redirected connection whose original destination is one of the proxy's listeners (or
        // one that was not redirected at all): connecting there would be the proxy reaching itself.
        if let captured = facts.captured, captured.loopsBack {
            return .reject(.loopRefused(captured.destination.literalOrigin(captured.tls ? .https : .http)))
        }
        let client: ClientIdentity
        if case .intercepted(_, let established) = mode {
            // Clients are recognised on the CONNECT and never again inside the tunnel: it inherits,
            // as long as the client still exists. A reload that removed it ends what it may do:
            // the tunnel must not keep a deleted client's credentials (a config without any
            // clients makes every request the one unnamed client, as a new connection would be).
            if let name = established.name, !scope.clients.isEmpty, !scope.clients.names.contains(name) {
                return .reject(
                    .proxyAuthenticationRequired(
                        ClientRefusal(
                            reason: .clientNotRecognised, detail: "client '\(name)' was removed by a reload", schemes: scope.clients.schemes,
                            recognizers: scope.clients.recognizers)))
            }
            client = scope.clients.isEmpty ? .unnamed : established
        } else {
            // Two Proxy-Authorization fields are two claims of identity: refused like two Hosts,
            // even when they agree, rather than letting the first one silently decide.
            let proxyAuthorization: String?
            switch head.fields.singleValue(of: "proxy-authorization") {
            case .absent: proxyAuthorization = nil
            case .one(let value): proxyAuthorization = value
            case .repeated, .conflicting: return .reject(.malformedRequest("more than one Proxy-Authorization header"))
            }
            switch scope.recognize(facts, proxyAuthorization: proxyAuthorization) {
            case .refused(let refusal): return .reject(.proxyAuthenticationRequired(refusal))
            case .client(let identified): client = identified
            }
        }
        if case .limited(let seconds) = scope.clients.admit(client, now: now) {
            return .reject(.rateLimited(client: client.name ?? "", retryAfterSeconds: seconds))
        }

        let target: RequestTarget
        do {
            target = try RequestTarget.parse(head.target, method: head.method)
        } catch {
            guard case .invalid(let reason) = error else { return .reject(.unsupportedTarget("invalid target")) }
            return .reject(.unsupportedTarget(reason))
        }

        if head.method == "CONNECT" {
            return admitConnect(head, target: target, mode: mode, scope: scope, policy: policy, client: client)
        }

        let origin: Origin
        let pathAndQuery: String
        var userinfo: String?
        switch (target, mode.fixedOrigin) {
        case (.origin(let path), let fixed?):
            origin = fixed
            pathAndQuery = path
        case (.absolute(let targetOrigin, let path, let info), let fixed?):
            guard targetOrigin == fixed else { return .reject(.tunnelOriginMismatch) }
            origin = targetOrigin
            pathAndQuery = path
            userinfo = info
        case (.absolute(let targetOrigin, let path, let info), nil):
            origin = targetOrigin
            pathAndQuery = path
            userinfo = info
        case (.origin, nil), (.asterisk, _):
            return .reject(.notProxyRequest)
        case (.authority, _):
            return .reject(.malformedRequest("an authority-form target is for CONNECT only"))
        }
        if let problem = hostProblem(head, target: target, mode: mode) { return .reject(problem) }
        // The proxy reads a body by its Content-Type (a form's `_method`, placeholders in JSON or a
        // form): two different ones could be read one way here and another way at the origin.
        if case .conflicting = head.fields.singleValue(of: "content-type") {
            return .reject(.malformedRequest("two different Content-Type headers"))
        }
        // One field holding a list of media types is the same ambiguity (Rack splits it at ',' and
        // reads the first); a comma inside a quoted parameter is not a list.
        if let type = head.fields.singleValue(of: "content-type").agreed,
            type.prefix(while: { $0 != ";" }).contains(",")
        {
            return .reject(.malformedRequest("a Content-Type with more than one media type"))
        }
        // RFC 9110 §7.6.1: a connection option never names a field meant for the origin. Naming one
        // that decides how the body is read would have the proxy read it and the origin not get it.
        for option in Forwarding.connectionOptions(head.fields) where Self.decidingEndToEnd.contains(option) {
            return .reject(.malformedRequest("Connection names '\(option)', a field the origin needs"))
        }

        let framing: BodyFraming
        do {
            framing = try BodyFraming.forRequest(head)
        } catch {
            return .reject(ProxyError(error))
        }
        return .forward(
            ClientRequest(
                head: head, origin: origin, pathAndQuery: pathAndQuery, userinfo: userinfo,
                framing: framing, client: client, viaRoute: { if case .route = mode { true } else { false } }()))
    }

    /// End-to-end fields that decide how the proxy reads a request: never a connection option.
    static let decidingEndToEnd: Set<String> = ["host", "content-type", "content-length", "content-encoding"]

    private static func admitConnect(
        _ head: RequestHead, target: RequestTarget, mode: ConnectionMode, scope: ScopeContext, policy: Policy,
        client: ClientIdentity
    ) -> Admission {
        guard case .forwardProxy = mode else {
            return .reject(.malformedRequest("CONNECT is for the forward proxy, not inside a tunnel, on a route or on the transparent listener"))
        }
        guard case .authority(let host, let port) = target else {
            return .reject(.unsupportedTarget("CONNECT needs host:port"))
        }
        // A CONNECT's Host field plays no part: the target alone names the tunnel (RFC 9110 §9.3.6).
        do {
            guard try BodyFraming.forRequest(head) == .none else { return .reject(.malformedRequest("CONNECT with a body")) }
        } catch {
            return .reject(ProxyError(error))
        }
        let origin = Origin(scheme: .https, host: host, port: port)
        let egress: EgressClearance
        switch EgressClearance.clear(origin, client: client, scope: scope) {
        case .success(let clearance): egress = clearance
        case .failure(let error): return .reject(error)
        }
        if policy.canIntercept, scope.interceptHosts.contains(origin.host) {
            return .intercept(origin, client: client, egress: egress)
        }
        guard policy.tunnel == .allow else { return .reject(.tunnelDenied(origin)) }
        return .tunnel(origin, client: client, egress: egress)
    }

    /// RFC 9112 §3.2: exactly one Host on HTTP/1.1, and a valid one. With an absolute-form target its
    /// value plays no part (§3.2.2: the target's authority replaces it; Node's http.request sends the
    /// proxy's own address there). Where the connection fixes the origin, a Host naming another one
    /// is refused rather than silently sent elsewhere than the client believes.
    static func hostProblem(_ head: RequestHead, target: RequestTarget, mode: ConnectionMode) -> ProxyError? {
        let value: String
        switch head.fields.singleValue(of: "host") {
        case .absent: return head.version == .http1_1 ? .malformedRequest("missing Host header") : nil
        case .one(let only): value = only
        case .repeated, .conflicting: return .malformedRequest("more than one Host header")
        }
        // The usual case, a Host that spells the target's authority, needs no second parse.
        if case .absolute(let origin, _, _) = target, origin.isSpelled(byAuthority: value) { return nil }
        guard let (host, port) = try? RequestTarget.parseAuthority(Substring(value)) else {
            return .malformedRequest("invalid Host header")
        }
        guard case .origin = target else { return nil }
        switch mode {
        case .forwardProxy:
            return nil
        case .intercepted(let origin, _):
            return Origin(scheme: origin.scheme, host: host, port: port) == origin ? nil : .hostMismatch
        case .transparent(let target):
            return target.admitsHost(host, port: port) ? nil : .hostMismatch
        case .route(let upstream, let publicOrigin):
            // A route's client reaches it by any name (localhost, a pod IP, a service name) but on
            // the listener's port; naming the upstream itself is fine too.
            if Origin(scheme: upstream.scheme, host: host, port: port) == upstream { return nil }
            return (port ?? Scheme.http.defaultPort) == publicOrigin.port ? nil : .hostMismatch
        }
    }
}
