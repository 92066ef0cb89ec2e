import HTTP1Codec
import ProxyCore
import Redaction
import ScopePolicy

/// What the live view asks `scopeproxy explain` about one exchange: the request as the log shows
/// it (method, origin, redacted path, the configured client, the client's header names), never a
/// value. Equal queries get the same text, so the answer is cached under it.
public struct ExplainQuery: Hashable, Sendable {
    public var method: String
    public var origin: Origin
    /// The path and query as the log shows them (`/users/:email?token=:redacted`).
    public var pathAndQuery: String
    /// The configured client's name, or nil.
    public var client: String?
    /// The client's header names, lowercased, in order: what explain says each rule does to.
    public var headerNames: [String]

    public init(method: String, origin: Origin, pathAndQuery: String, client: String?, headerNames: [String]) {
        self.method = method
        self.origin = origin
        self.pathAndQuery = pathAndQuery
        self.client = client
        self.headerNames = headerNames
    }

    /// The URL explain is given (the RFC 6454 origin, as explain prints origins).
    public var url: String { origin.description + pathAndQuery }

    /// Headers explain leaves out: the Host it makes from the URL, the proxy's own, and the framing
    /// of a body it does not have (a redacted length would be a malformed request).
    static let leftOut: Set<String> = ["host", "proxy-authorization", "proxy-connection", "content-length", "transfer-encoding"]

    /// The query of a record: nil where explain has nothing to say (a CONNECT line, a request whose
    /// target could not be read).
    public init?(_ record: ExchangeRecord, redactor: Redactor) {
        guard record.tunnel == nil, let method = record.method, method != "CONNECT", let origin = record.origin else { return nil }
        var names: [String] = []
        for field in record.requestFields ?? HTTPFields() {
            let name = field.lowercasedName
            if !Self.leftOut.contains(name) { names.append(name) }
        }
        self.init(
            method: method, origin: origin, pathAndQuery: redactor.pathAndQuery(record.pathAndQuery ?? "/"), client: record.clientID,
            headerNames: names)
    }
}

extension InjectionSkip {
    /// Why a covering scope injected nothing, in `scopeproxy explain`'s words (the live view's
    /// `skip` rules say the same).
    public var explanation: String {
        switch self {
        case .httpOrigin: "an http:// origin that is not loopback; set require_https: false on the scope if clear text is really meant"
        case .method: "the method is not in the scope's methods"
        case .methodOverride: "a _method parameter names a method the scope's methods do not allow"
        case .path: "the path is not under the scope's paths (or has . or .. segments)"
        case .trace: "TRACE never carries credentials (the origin would echo them back)"
        case .httpsDowngrade: "an https -> http redirect hop carries no credential"
        case .clientNotServed: "the scope's clients do not include this client: for it the scope covers nothing"
        }
    }
}
