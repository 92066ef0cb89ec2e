import HTTP1Codec
import ScopePolicy

/// How a hop's request body gets upstream.
public enum HopBody: Sendable, Equatable {
    case none
    /// Read from the client as it arrives, decoded and re-framed.
    case streamed(BodyFraming)
    /// A followed 307/308 (or 301/302 of a non-POST): the body the client sent, kept in memory.
    case replayed([UInt8])

    var framing: BodyFraming {
        switch self {
        case .none: .none
        case .streamed(let framing): framing
        case .replayed(let bytes): bytes.isEmpty ? .none : .contentLength(UInt64(bytes.count))
        }
    }
}

/// Where a hop goes: the client's own target, or a redirect's.
public struct HopTarget: Sendable, Equatable {
    public var origin: Origin
    public var method: String
    public var pathAndQuery: String

    public init(origin: Origin, method: String, pathAndQuery: String) {
        self.origin = origin
        self.method = method
        self.pathAndQuery = pathAndQuery
    }
}

/// The redirects the proxy followed for one client request so far.
public struct RedirectChain: Sendable, Equatable {
    public var hops = 0
    /// What the scope rules must remember across hops (stripped names, downgrade, whose credentials).
    public var context = ChainContext()

    public init() {}
}

/// One upstream request of an exchange, complete: where it goes, what the scope rules did, and the
/// exact head that goes on the wire.
public struct Hop: Sendable, Equatable {
    public let target: HopTarget
    public let decision: ScopeDecision
    /// The serialized head sent upstream (kept whole so a stale pooled connection can be retried).
    public let head: [UInt8]
    public let body: HopBody
    /// `Connection: upgrade` request: a 101 turns the exchange into a tunnel.
    public let isUpgrade: Bool

    public var origin: Origin { target.origin }
}

/// Hop planning: the scope decision and the upstream head, for the client's request or for one hop
/// of a redirect chain the proxy follows. The step where credentials are stripped or injected.
public enum HopPlanner {
    public static func plan(
        _ request: ClientRequest, to target: HopTarget, body: HopBody, chain: RedirectChain, scope: ScopeContext,
        requestID: String
    ) -> Result<Hop, ProxyError> {
        var chainContext = chain.context
        // Finding 3 of the review: a client's credentials were meant for the origin it addressed.
        if target.origin != request.origin { chainContext.clientCredentialsAllowed = false }
        let scoped: ScopedRequest
        var replayed: [UInt8]?
        if case .replayed(let bytes) = body { replayed = bytes }
        let override = MethodOverride.detect(pathAndQuery: target.pathAndQuery, body: replayed,
                                             contentType: request.head.fields.first("content-type"))
        switch scope.policy.apply(method: target.method, origin: target.origin, pathAndQuery: target.pathAndQuery,
                                  fields: request.head.fields, hasUserinfo: request.userinfo != nil,
                                  secrets: scope.secrets, chain: chainContext, methodOverride: override,
                                  client: request.client.name) {
        case .failure(.secretUnavailable(let scopeName, let secret)):
            return .failure(.credentialUnavailable(scope: scopeName, secret: secret))
        case .success(let result):
            scoped = result
        }
        var outgoing = request.head
        outgoing.method = target.method
        outgoing.fields = scoped.fields
        if case .replayed(let bytes) = body, bytes.isEmpty, target.method != request.head.method {
            // A 303 (or a POST's 301/302) turned the request into a bodiless GET: its body's type goes too.
            outgoing.fields.removeAll("content-type")
            outgoing.fields.removeAll("content-length")
        }
        outgoing.fields.set(name: "X-Request-ID", value: requestID)
        if scoped.keepUserinfo, let userinfo = request.userinfo, !outgoing.fields.contains("authorization") {
            // Userinfo cannot travel in an origin-form target; a scope that passes Authorization gets
            // it the way clients send it.
            outgoing.fields.append(name: "Authorization",
                                   value: "Basic " + Base64.encode(PercentEncoding.decode(Substring(userinfo))))
        }
        let head = Forwarding.upstreamRequest(from: outgoing, origin: target.origin, pathAndQuery: target.pathAndQuery,
                                              framing: body.framing, upgrade: request.isUpgrade)
        return .success(Hop(target: target, decision: scoped.decision, head: head.serialized(), body: body,
                            isUpgrade: request.isUpgrade))
    }
}
