import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

// A refused placeholder's reason is the rule that decided, one row per rule, and its message is
// derived from that reason (never the generic methods/paths text for a body the proxy does not
// rewrite).

private func refusalOrigin(_ text: String) -> Origin { try! Origin.parse(text) }
private let api = refusalOrigin("https://api.example")
private let loopbackHTTP = refusalOrigin("http://127.0.0.1:8080")
private let plainHTTP = refusalOrigin("http://plain.example")

private let policy = ScopePolicy(scopes: [
    Scope(name: "open", origins: [loopbackHTTP], substitute: ["gh"]),
    Scope(name: "limited", origins: [api], methods: ["GET"], paths: ["/v1"], substitute: ["gh"]),
    Scope(name: "agents", origins: [refusalOrigin("https://agents.example")], clients: ["agent"], substitute: ["gh"]),
    Scope(name: "insecure", origins: [plainHTTP], substitute: ["gh"]),
])

struct PlaceholderRefusalRow: Sendable, CustomStringConvertible {
    let name: String
    let origin: Origin
    let request: PlaceholderRequest
    let inBody: Bool
    var encodedAs: String? = nil
    let expected: PlaceholderRefusal
    let message: String
    var description: String { name }
}

private func downgraded() -> ChainContext {
    var chain = ChainContext()
    chain.downgraded = true
    return chain
}

private let rows: [PlaceholderRefusalRow] = [
    .init(
        name: "no scope lists it", origin: refusalOrigin("https://other.example"), request: .init(method: "GET", pathAndQuery: "/"),
        inBody: false, expected: .notListed, message: "no scope lists it in `substitute` for this origin"),
    .init(
        name: "the scope does not serve this client", origin: refusalOrigin("https://agents.example"),
        request: .init(method: "GET", pathAndQuery: "/"),
        inBody: false, expected: .clientNotServed(scopes: ["agents"], client: nil), message: "scope 'agents' substitutes it here but does not serve"),
    .init(
        name: "method not in methods", origin: api, request: .init(method: "POST", pathAndQuery: "/v1/x"), inBody: false,
        expected: .requestNotCovered([SkippedInjection(scope: "limited", why: .method)]), message: "the method is not in its methods"),
    .init(
        name: "_method override not in methods", origin: api,
        request: .init(method: "GET", pathAndQuery: "/v1/x", methodOverride: .method("DELETE")), inBody: false,
        expected: .requestNotCovered([SkippedInjection(scope: "limited", why: .methodOverride)]),
        message: "the _method override is not in its methods"),
    .init(
        name: "path not under paths", origin: api, request: .init(method: "GET", pathAndQuery: "/v2/x"), inBody: false,
        expected: .requestNotCovered([SkippedInjection(scope: "limited", why: .path)]), message: "the path is not under its paths"),
    .init(
        name: "https rule", origin: plainHTTP, request: .init(method: "GET", pathAndQuery: "/"), inBody: false,
        expected: .requestNotCovered([SkippedInjection(scope: "insecure", why: .httpOrigin)]), message: "require_https: false"),
    .init(
        name: "TRACE", origin: loopbackHTTP, request: .init(method: "TRACE", pathAndQuery: "/"), inBody: false,
        expected: .requestNotCovered([SkippedInjection(scope: "open", why: .trace)]), message: "TRACE never carries credentials"),
    .init(
        name: "https -> http redirect", origin: loopbackHTTP, request: .init(method: "GET", pathAndQuery: "/", chain: downgraded()), inBody: false,
        expected: .requestNotCovered([SkippedInjection(scope: "open", why: .httpsDowngrade)]), message: "a redirect went from https to http"),
    .init(
        name: "a body type the proxy does not rewrite", origin: loopbackHTTP,
        request: .init(method: "POST", pathAndQuery: "/plain", contentType: "text/plain; charset=utf-8"), inBody: true,
        expected: .bodyNotRewritten(scopes: ["open"], contentType: "text/plain; charset=utf-8"),
        message:
            "scope 'open' substitutes it here, but not in a text/plain body: placeholders are replaced in headers, the query, JSON and form bodies only"
    ),
    .init(
        name: "a body without Content-Type", origin: loopbackHTTP, request: .init(method: "POST", pathAndQuery: "/"), inBody: true,
        expected: .bodyNotRewritten(scopes: ["open"], contentType: nil), message: "but not in a body without Content-Type"),
    .init(
        name: "an encoded body", origin: loopbackHTTP,
        request: .init(method: "POST", pathAndQuery: "/", contentType: "application/json", contentEncoding: "gzip"), inBody: true,
        expected: .bodyEncoded(scopes: ["open"], contentEncoding: "gzip"),
        message: "Content-Encoding gzip: an encoded body's placeholders cannot be replaced"),
    .init(
        name: "a placeholder sent base64-encoded", origin: loopbackHTTP, request: .init(method: "GET", pathAndQuery: "/"), inBody: false,
        encodedAs: "base64+0", expected: .placeholderEncoded(scopes: ["open"], encoding: "base64+0"),
        message: "scope 'open' substitutes it here, but it was sent base64+0-encoded"),
]

@Suite("Placeholder refusals: the reason is the rule that failed")
struct PlaceholderRefusalTests {
    @Test("each rule gives its own reason, and the 403 message says that rule", arguments: rows)
    func reasonPerRule(_ row: PlaceholderRefusalRow) {
        let refusal = policy.placeholderRefusal(
            secret: "gh", origin: row.origin, client: nil, request: row.request, inBody: row.inBody,
            encodedAs: row.encodedAs)
        #expect(refusal == row.expected)
        let message = ProxyError.placeholderOutOfScope(secret: "gh", where: row.inBody ? "body" : "target", row.origin, refusal).message
        #expect(message.contains(row.message), "\(message)")
        if case .bodyNotRewritten = refusal { #expect(!message.contains("methods, paths")) }
    }
}
