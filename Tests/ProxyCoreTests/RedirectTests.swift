import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

/// Every event an engine could still deliver for a hop the machine let go of.
func lateEvents(for id: HopID) -> [ConnectionEvent] {
    [
        .responseHead(id, response("HTTP/1.1 200 OK", "Content-Length: 5")),
        .responseHead(id, response("HTTP/1.1 302 Found", "Location: https://unscoped.example/")),
        .responseHead(id, response("HTTP/1.1 100 Continue")),
        .responseHeadInvalid(id, reason: "garbage"),
        .responseBody(id, .moved(payload: 3, consumed: 3)),
        .responseBody(id, .complete(payload: 5, consumed: 5, captured: nil, observed: nil)),
        .responseBody(id, .cut),
        .responseBody(id, .invalid),
        .requestBody(id, .moved(payload: 1, consumed: 1)),
        .requestBody(id, .complete(payload: 1, consumed: 1, captured: nil, observed: nil)),
        .upstreamConnected(id, reused: false),
        .upstreamConnectFailed(id, .upstreamRefused(a)),
        .upstreamClosed(id, sawResponseBytes: true),
        .upstreamClosed(id, sawResponseBytes: false),
        .tunnelBytes(id, fromClient: 1, fromUpstream: 1),
    ]
}

/// Redirects as event sequences: the old hop stays silent, client credentials stay with the origin
/// the client addressed, and an origin no scope covers cannot redirect into a scoped one
/// (docs/security-model.md, "Redirects"). The same on the wire: ProxyEngineTests/RedirectEngineTests.swift.
@Suite("Machine: redirects hop by hop: old hops silent, client credentials kept to their origin, no redirect into scope")
struct RedirectSequenceTests {
    enum Outcome: String, Sendable, CaseIterable { case followed, blocked }

    @Test("after a followed or blocked 3xx, nothing of the old hop reaches the client", arguments: Outcome.allCases)
    func oldHopSilenced(_ outcome: Outcome) {
        var p = Playbook(outcome == .followed ? Configs.follow : Configs.block)
        p.sent(["GET https://a.example/start HTTP/1.1", "Host: a.example"], to: a)
        let redirect = response("HTTP/1.1 302 Found", "Location: https://unscoped.example/next", "Content-Length: 3")
        switch outcome {
        case .followed:
            p.on(
                .responseHead(hop(1), redirect),
                [
                    .release(hop(1), reuse: false),
                    .emit(.origin(a), .status(302), .redirect(.follow), .redirectOrigin(unscoped), .failure(nil)),
                    .arm(.connect),
                    .connect(hop(2), unscoped, .tls, reusePooled: true),
                ])
            #expect(p.machine.currentHop == hop(2))
        case .blocked:
            p.on(
                .responseHead(hop(1), redirect),
                [
                    .release(hop(1), reuse: false), .cancelTimer,
                    .write(startingWith: "HTTP/1.1 502 Bad Gateway\r\n", containing: ["redirect_blocked"], excluding: ["/next"]),
                    .emit(.status(502), .redirect(.block), .redirectOrigin(unscoped), .failure(.proxy(.redirectBlocked(unscoped)))),
                    .arm(.idle), .readNextRequest,
                ])
        }
        #expect(!p.machine.expectsResponseHead(from: hop(1)), "the engine must not parse the old hop's bytes as a response")
        for event in lateEvents(for: hop(1)) { p.ignores(event) }
        #expect(p.released == [hop(1)], "released exactly once")
    }

    @Test("a redirect answered by another: each hop new, each released once, older hops ignored")
    func chainOfRedirects() {
        var p = Playbook(Configs.follow)
        p.sent(["GET https://a.example/1 HTTP/1.1", "Host: a.example"], to: a)
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 307 Temporary Redirect", "Location: https://b.example/2")),
            [
                .release(hop(1), reuse: false), .emit(.status(307), .redirect(.follow), .scopes(["a"])),
                .arm(.connect), .connect(hop(2), b, .tls, reusePooled: true),
            ])
        p.on(.upstreamConnected(hop(2), reused: false), [.send(hop(2), startingWith: "GET /2 HTTP/1.1\r\nHost: b.example\r\n"), .arm(.responseHead)])
        p.on(
            .responseHead(hop(2), response("HTTP/1.1 302 Found", "Location: /3")),
            [
                .release(hop(2), reuse: false), .emit(.status(302), .redirect(.follow), .redirectOrigin(b), .scopes(["b"])),
                .arm(.connect), .connect(hop(3), b, .tls, reusePooled: true),
            ])
        p.on(.responseHead(hop(2), response("HTTP/1.1 302 Found", "Location: https://unscoped.example/")), [])
        for event in lateEvents(for: hop(1)) + lateEvents(for: hop(2)) { p.ignores(event) }
        p.on(.upstreamConnected(hop(3), reused: true), [.send(hop(3), startingWith: "GET /3 HTTP/1.1\r\nHost: b.example\r\n"), .arm(.responseHead)])
        p.on(
            .responseHead(hop(3), response("HTTP/1.1 200 OK", "Content-Length: 2")),
            [.write(startingWith: "HTTP/1.1 200 OK\r\n"), .relay(hop(3), .contentLength(2), .contentLength(2)), .arm(.stall)])
        p.on(
            .responseBody(hop(3), .complete(payload: 2, consumed: 2, captured: nil, observed: nil)),
            [
                .cancelTimer, .release(hop(3), reuse: true), .emit(.status(200), .redirect(nil), .path("/3")), .arm(.idle), .readNextRequest,
            ])
        #expect(p.connected == [hop(1), hop(2), hop(3)])
        #expect(p.released == [hop(1), hop(2), hop(3)])
        #expect(p.emitted.count == 3, "one line per hop")
        #expect(Set(p.emitted.map(\.id)).count == 1, "all with the request's id")
    }

    struct CanaryRow: Sendable, CustomTestStringConvertible {
        let name: String
        let locations: [String]
        /// The origins of the hops after the first.
        let origins: [Origin]
        let lastKeepsClientCredentials: Bool
        let lastToken: String
        let lastStripped: [String]
        var testDescription: String { name }
    }

    @Test(
        "the client's Authorization and Cookie go only to the origin it addressed, whatever the scopes pass",
        arguments: [
            CanaryRow(
                name: "A → B: B gets its own token and none of the client's values", locations: ["https://b.example/b"], origins: [b],
                lastKeepsClientCredentials: false, lastToken: bToken, lastStripped: ["Authorization", "Cookie"]),
            CanaryRow(
                name: "A → A: a same-origin follow keeps them", locations: ["/again"], origins: [a],
                lastKeepsClientCredentials: true, lastToken: aToken, lastStripped: []),
            CanaryRow(
                name: "A → B → A: coming back does not restore them", locations: ["https://b.example/b", "https://a.example/back"], origins: [b, a],
                lastKeepsClientCredentials: false, lastToken: aToken, lastStripped: ["Authorization", "Cookie"]),
        ])
    func clientCredentialsStayHome(_ row: CanaryRow) {
        var p = Playbook(Configs.follow)
        p.requested(["GET https://a.example/start HTTP/1.1", "Host: a.example", clientAuthorization, clientCookie], to: a)
        p.on(
            .upstreamConnected(hop(1), reused: true),
            [
                .send(hop(1), startingWith: "GET /start HTTP/1.1\r\nHost: a.example\r\n", containing: [clientAuthorization, clientCookie, aToken]),
                .arm(.responseHead),
            ])
        var current = hop(1)
        for (index, location) in row.locations.enumerated() {
            let next = hop(current.value + 1)
            let target = row.origins[index]
            p.on(
                .responseHead(current, response("HTTP/1.1 307 Temporary Redirect", "Location: \(location)")),
                [
                    .release(current, reuse: false), .emit(.status(307), .redirect(.follow)),
                    .arm(.connect), .connect(next, target, .tls, reusePooled: true),
                ])
            p.on(.upstreamConnected(next, reused: true), [.send(next, startingWith: "GET /"), .arm(.responseHead)])
            current = next
        }
        let last = p.sent(to: current) ?? ""
        for canary in ["CLIENT-AUTH-CANARY", "CLIENT-COOKIE-CANARY"] {
            #expect(last.contains(canary) == row.lastKeepsClientCredentials, "\(canary) in \(quoted(last))")
        }
        #expect(last.contains(row.lastToken), "the last hop's own token")
        #expect(!last.contains(row.lastToken == aToken ? bToken : aToken), "no other scope's token")
        p.on(
            .responseHead(current, response("HTTP/1.1 204 No Content")),
            [.write(startingWith: "HTTP/1.1 204 "), .relay(current, .none, .none), .arm(.stall)])
        p.on(
            .responseBody(current, .complete(payload: 0, consumed: 0, captured: nil, observed: nil)),
            [
                .cancelTimer, .release(current, reuse: true),
                .emit(.origin(row.origins.last), .injected([row.lastToken == aToken ? "X-A-Key" : "X-B-Key"]), .stripped(row.lastStripped)),
                .arm(.idle), .readNextRequest,
            ])
    }

    @Test("userinfo in the target becomes Authorization for the origin it names, and for no other")
    func userinfoStaysHome() {
        var p = Playbook(Configs.follow)
        p.requested(["GET https://me:secret-pw@a.example/ HTTP/1.1", "Host: a.example"], to: a)
        let basic = "Authorization: Basic \(Base64.encode(Array("me:secret-pw".utf8)))"
        p.on(
            .upstreamConnected(hop(1), reused: true),
            [.send(hop(1), startingWith: "GET / HTTP/1.1\r\n", containing: [basic], excluding: ["secret-pw"]), .arm(.responseHead)])
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 307 Temporary Redirect", "Location: https://b.example/")),
            [.release(hop(1), reuse: false), .emit(.redirect(.follow)), .arm(.connect), .connect(hop(2), b, .tls, reusePooled: true)])
        p.on(
            .upstreamConnected(hop(2), reused: true),
            [.send(hop(2), startingWith: "GET / HTTP/1.1\r\nHost: b.example\r\n", excluding: ["Authorization"]), .arm(.responseHead)])
    }

    @Test("a followed hop on a stale pooled connection is retried on a fresh one, with the body it replays (PUT: idempotent)")
    func followedHopRetried() {
        var p = Playbook(Configs.follow)
        FollowBodyTests.posted(&p, method: "PUT")
        FollowBodyTests.followed(&p, "307 Temporary Redirect")
        p.on(
            .upstreamConnected(hop(2), reused: true),
            [.send(hop(2), startingWith: "PUT /next HTTP/1.1\r\n", containing: ["\r\n\r\nhello"]), .arm(.responseHead)])
        p.on(
            .upstreamClosed(hop(2), sawResponseBytes: false),
            [.release(hop(2), reuse: false), .arm(.connect), .connect(hop(3), a, .tls, reusePooled: false)])
        p.on(
            .upstreamConnected(hop(3), reused: false),
            [.send(hop(3), startingWith: "PUT /next HTTP/1.1\r\n", containing: ["\r\n\r\nhello"]), .arm(.responseHead)])
        for event in lateEvents(for: hop(1)) + lateEvents(for: hop(2)) { p.ignores(event) }
        #expect(p.released == [hop(1), hop(2)])
    }

    @Test("an unscoped origin's redirect into a scoped origin goes back to the client; nothing is connected")
    func unscopedIssuerRelayed() {
        var p = Playbook(Configs.follow)
        p.sent(["GET https://unscoped.example/ HTTP/1.1", "Host: unscoped.example"], to: unscoped)
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 307 Temporary Redirect", "Location: https://a.example/v1/admin", "Content-Length: 0")),
            [
                .write(startingWith: "HTTP/1.1 307 Temporary Redirect\r\n", containing: ["Location: https://a.example/v1/admin"]),
                .relay(hop(1), .contentLength(0), .contentLength(0)),
                .arm(.stall),
            ])
        p.on(
            .responseBody(hop(1), .complete(payload: 0, consumed: 0, captured: nil, observed: nil)),
            [
                .cancelTimer, .release(hop(1), reuse: true),
                .emit(.status(307), .redirect(.pass), .redirectOrigin(a), .scopes([])),
                .arm(.idle), .readNextRequest,
            ])
        #expect(p.connected == [hop(1)], "the proxy never connects to the scoped origin on the unscoped one's word")
    }

    struct DecisionRow: Sendable, CustomTestStringConvertible {
        enum Result: Sendable {
            case follow(Origin)
            case relay
            case refuse(status: String, code: String)
        }
        let name: String
        let fixture: Fixture
        let from: Origin
        let status: String
        let location: String
        let result: Result
        var testDescription: String { name }
    }

    @Test(
        "who may make the proxy follow, per mode",
        arguments: [
            DecisionRow(
                name: "follow: a scoped issuer's redirect into another scope is followed", fixture: Configs.follow, from: a,
                status: "307 Temporary Redirect", location: "https://b.example/x", result: .follow(b)),
            DecisionRow(
                name: "follow: a scoped issuer's redirect to an unscoped origin is followed", fixture: Configs.follow, from: a,
                status: "302 Found", location: "https://unscoped.example/x", result: .follow(unscoped)),
            DecisionRow(
                name: "follow: an unscoped issuer's redirect to an unscoped origin is followed", fixture: Configs.follow, from: unscoped,
                status: "301 Moved Permanently", location: "https://other.example/x", result: .follow(origin("https://other.example"))),
            DecisionRow(
                name: "follow: an unscoped issuer's redirect into a scope is relayed", fixture: Configs.follow, from: unscoped,
                status: "308 Permanent Redirect", location: "https://b.example/x", result: .relay),
            DecisionRow(
                name: "follow: a 300 is not followed", fixture: Configs.follow, from: a,
                status: "300 Multiple Choices", location: "https://b.example/x", result: .relay),
            DecisionRow(
                name: "follow: a Location of another scheme is relayed", fixture: Configs.follow, from: a,
                status: "302 Found", location: "mailto:someone@example.com", result: .relay),
            DecisionRow(
                name: "pass: every redirect is relayed", fixture: Configs.pass, from: a,
                status: "302 Found", location: "https://unscoped.example/x", result: .relay),
            DecisionRow(
                name: "block: a redirect to an origin not allowed is refused", fixture: Configs.block, from: a,
                status: "302 Found", location: "https://unscoped.example/x", result: .refuse(status: "502 Bad Gateway", code: "redirect_blocked")),
            DecisionRow(
                name: "block: an unreadable Location is refused", fixture: Configs.block, from: a,
                status: "302 Found", location: "http://[::1", result: .refuse(status: "502 Bad Gateway", code: "redirect_blocked")),
            DecisionRow(
                name: "block: an allowed origin is relayed", fixture: Configs.block, from: a,
                status: "302 Found", location: "https://b.example/x", result: .relay),
            DecisionRow(
                name: "block: a same-origin redirect is relayed", fixture: Configs.block, from: a,
                status: "302 Found", location: "/elsewhere", result: .relay),
        ])
    func decisions(_ row: DecisionRow) {
        var p = Playbook(row.fixture)
        p.sent(["GET \(row.from.scheme.rawValue)://\(row.from.authority)/ HTTP/1.1", "Host: \(row.from.authority)"], to: row.from)
        let head = response("HTTP/1.1 \(row.status)", "Location: \(row.location)", "Content-Length: 0")
        switch row.result {
        case .follow(let target):
            p.on(
                .responseHead(hop(1), head),
                [
                    .release(hop(1), reuse: false), .emit(.redirect(.follow), .redirectOrigin(target)),
                    .arm(.connect), .connect(hop(2), target, .tls, reusePooled: true),
                ])
        case .relay:
            p.on(
                .responseHead(hop(1), head),
                [
                    .write(startingWith: "HTTP/1.1 \(row.status)\r\n", containing: ["Location: "]),
                    .relay(hop(1), .contentLength(0), .contentLength(0)), .arm(.stall),
                ])
        case .refuse(let status, let code):
            p.on(
                .responseHead(hop(1), head),
                [
                    .release(hop(1), reuse: false), .cancelTimer,
                    .write(startingWith: "HTTP/1.1 \(status)\r\n", containing: [code]),
                    .emit(.redirect(.block), .failure(.proxy(.redirectBlocked(row.location.hasPrefix("https://unscoped") ? unscoped : nil)))),
                    .arm(.idle), .readNextRequest,
                ])
        }
    }

    @Test("too many hops: 508 redirect_loop, and the last hop is released")
    func tooManyHops() {
        var p = Playbook(Configs.followOneHop)
        p.sent(["GET https://a.example/ HTTP/1.1", "Host: a.example"], to: a)
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 302 Found", "Location: https://b.example/")),
            [.release(hop(1), reuse: false), .emit(.redirect(.follow)), .arm(.connect), .connect(hop(2), b, .tls, reusePooled: true)])
        p.on(.upstreamConnected(hop(2), reused: true), [.send(hop(2), startingWith: "GET / HTTP/1.1\r\nHost: b.example\r\n"), .arm(.responseHead)])
        p.on(
            .responseHead(hop(2), response("HTTP/1.1 302 Found", "Location: https://a.example/")),
            [
                .release(hop(2), reuse: false), .cancelTimer,
                .write(startingWith: "HTTP/1.1 508 Loop Detected\r\n", containing: ["redirect_loop"]),
                .emit(.status(508), .failure(.proxy(.redirectLoop))),
                .arm(.idle), .readNextRequest,
            ])
        #expect(p.released == [hop(1), hop(2)])
        for event in lateEvents(for: hop(2)) { p.ignores(event) }
    }
}

@Suite("Machine: following with a request body")
struct FollowBodyTests {
    /// A POST to a with a 5-byte body, read whole (and captured, when `captured`).
    static func posted(_ p: inout Playbook, method: String = "POST", captured: Bool = true, sourceLocation: SourceLocation = #_sourceLocation) {
        p.start([.arm(.clientHead)], sourceLocation: sourceLocation)
        p.on(
            p.head("\(method) https://a.example/form HTTP/1.1", "Host: a.example", "Content-Type: text/plain", "Content-Length: 5", clientCookie),
            [.cancelTimer, .arm(.connect), .connect(hop(1), a, .tls, reusePooled: true)], sourceLocation: sourceLocation)
        p.on(
            .upstreamConnected(hop(1), reused: true),
            [
                .send(hop(1), startingWith: "\(method) /form HTTP/1.1\r\n", containing: ["Content-Length: 5"]),
                .pump(hop(1), .contentLength(5), capture: p.settings.limits.maxReplayBody, observe: nil), .arm(.stall),
            ], sourceLocation: sourceLocation)
        p.on(
            .requestBody(hop(1), .complete(payload: 5, consumed: 5, captured: captured ? Array("hello".utf8) : nil, observed: nil)),
            [.arm(.responseHead)], sourceLocation: sourceLocation)
    }

    static func followed(
        _ p: inout Playbook, _ status: String, from current: HopID = hop(1), to location: String = "https://a.example/next",
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let next = hop(current.value + 1)
        p.on(
            .responseHead(current, response("HTTP/1.1 \(status)", "Location: \(location)")),
            [
                .release(current, reuse: false), .emit(.redirect(.follow)), .arm(.connect), .connect(next, a, .tls, reusePooled: true),
            ], sourceLocation: sourceLocation)
    }

    @Test("a followed https -> http hop carries nothing injected, even into a scope that injects there; its link keeps the downgrade")
    func downgradeCarriesNothing() {
        let dev = origin("http://dev.example")
        let fixture = Fixture(
            Configs.scopes + """
                  - name: dev
                    origins: ["http://dev.example"]
                    require_https: false
                    inject: { X-Dev-Key: "${b_token}" }

                """ + Configs.redirects("follow"))
        var p = Playbook(fixture)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("GET https://a.example/x HTTP/1.1", "Host: a.example"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), a, .tls, reusePooled: true)])
        p.on(
            .upstreamConnected(hop(1), reused: false),
            [.send(hop(1), startingWith: "GET /x HTTP/1.1\r\n", containing: [aToken]), .arm(.responseHead)])
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 302 Found", "Location: http://dev.example/landing", "Content-Length: 0")),
            [
                .release(hop(1), reuse: false), .emit(.status(302), .redirect(.follow)), .arm(.connect),
                .connect(hop(2), dev, .plain, reusePooled: true),
            ])
        p.on(
            .upstreamConnected(hop(2), reused: false),
            [.send(hop(2), startingWith: "GET /landing HTTP/1.1\r\n", excluding: ["X-Dev-Key", "B-INJECTED", "A-INJECTED"]), .arm(.responseHead)])
    }

    @Test("a 307 of a request whose body was kept is followed with the same method and body")
    func replay307() {
        var p = Playbook(Configs.follow)
        Self.posted(&p)
        Self.followed(&p, "307 Temporary Redirect")
        p.on(
            .upstreamConnected(hop(2), reused: true),
            [
                .send(
                    hop(2), startingWith: "POST /next HTTP/1.1\r\nHost: a.example\r\nContent-Type: text/plain\r\n",
                    containing: ["Content-Length: 5\r\n", "\r\n\r\nhello", clientCookie]),
                .arm(.responseHead),
            ])
        #expect(p.sent(to: hop(2))?.hasSuffix("\r\n\r\nhello") == true)
    }

    @Test("a 308 of a PUT is followed with its body")
    func replay308() {
        var p = Playbook(Configs.follow)
        Self.posted(&p, method: "PUT")
        Self.followed(&p, "308 Permanent Redirect")
        p.on(
            .upstreamConnected(hop(2), reused: true),
            [.send(hop(2), startingWith: "PUT /next HTTP/1.1\r\n", containing: ["Content-Length: 5\r\n", "\r\n\r\nhello"]), .arm(.responseHead)])
    }

    @Test("a 307 of a request whose body was too large to keep goes back to the client")
    func notCaptured() {
        var p = Playbook(Configs.follow)
        Self.posted(&p, captured: false)
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 307 Temporary Redirect", "Location: https://a.example/next", "Content-Length: 0")),
            [
                .write(startingWith: "HTTP/1.1 307 Temporary Redirect\r\n"), .relay(hop(1), .contentLength(0), .contentLength(0)), .arm(.stall),
            ])
        #expect(p.connected == [hop(1)])
    }

    @Test("a 3xx that arrives while the request body still streams goes back to the client, and the connection closes after it")
    func bodyIncomplete() {
        var p = Playbook(Configs.follow)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("POST https://a.example/form HTTP/1.1", "Host: a.example", "Content-Length: 5"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), a, .tls, reusePooled: true)])
        p.on(
            .upstreamConnected(hop(1), reused: true),
            [
                .send(hop(1), startingWith: "POST /form HTTP/1.1\r\n"),
                .pump(hop(1), .contentLength(5), capture: p.settings.limits.maxReplayBody, observe: nil), .arm(.stall),
            ])
        p.on(.requestBody(hop(1), .moved(payload: 2, consumed: 2)), [.arm(.stall)])
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 303 See Other", "Location: https://a.example/next", "Content-Length: 0")),
            [
                .write(startingWith: "HTTP/1.1 303 See Other\r\n", containing: ["Connection: close"]),
                .relay(hop(1), .contentLength(0), .contentLength(0)), .arm(.stall),
            ])
        p.on(
            .responseBody(hop(1), .complete(payload: 0, consumed: 0, captured: nil, observed: nil)),
            [
                .cancelTimer, .release(hop(1), reuse: false), .emit(.status(303), .redirect(.pass)), .close(.afterFlush),
            ])
    }

    struct MethodChangeRow: Sendable, CustomTestStringConvertible {
        let method: String
        let status: String
        var testDescription: String { "\(method) + \(status)" }
    }

    @Test(
        "a 303 (and a POST's 301/302) becomes a GET without body, Content-Type or Content-Length",
        arguments: [
            MethodChangeRow(method: "POST", status: "303 See Other"),
            MethodChangeRow(method: "PUT", status: "303 See Other"),
            MethodChangeRow(method: "POST", status: "301 Moved Permanently"),
            MethodChangeRow(method: "POST", status: "302 Found"),
        ])
    func becomesGet(_ row: MethodChangeRow) {
        var p = Playbook(Configs.follow)
        Self.posted(&p, method: row.method)
        Self.followed(&p, row.status)
        p.on(
            .upstreamConnected(hop(2), reused: true),
            [
                .send(hop(2), startingWith: "GET /next HTTP/1.1\r\nHost: a.example\r\n", excluding: ["Content-Type", "Content-Length", "hello"]),
                .arm(.responseHead),
            ])
        #expect(p.sent(to: hop(2))?.hasSuffix("\r\n\r\n") == true)
    }

    @Test("a 303 followed by a 307: the GET the 303 made is repeated as it is, without the original body")
    func seeOtherThenTemporary() {
        var p = Playbook(Configs.follow)
        Self.posted(&p)
        Self.followed(&p, "303 See Other")
        p.on(
            .upstreamConnected(hop(2), reused: true),
            [.send(hop(2), startingWith: "GET /next HTTP/1.1\r\n", excluding: ["Content-Length", "hello"]), .arm(.responseHead)])
        Self.followed(&p, "307 Temporary Redirect", from: hop(2), to: "https://a.example/last")
        p.on(
            .upstreamConnected(hop(3), reused: true),
            [
                .send(hop(3), startingWith: "GET /last HTTP/1.1\r\nHost: a.example\r\n", excluding: ["Content-Type", "Content-Length", "hello"]),
                .arm(.responseHead),
            ])
    }

    @Test("a TRACE carries no credential: none of the client's, nothing injected, on the first hop or a followed one")
    func trace() {
        var p = Playbook(Configs.follow)
        p.requested(["TRACE https://a.example/ HTTP/1.1", "Host: a.example", clientAuthorization, clientCookie], to: a)
        p.on(
            .upstreamConnected(hop(1), reused: true),
            [
                .send(hop(1), startingWith: "TRACE / HTTP/1.1\r\nHost: a.example\r\n", excluding: ["CANARY", "X-A-Key", "INJECTED"]),
                .arm(.responseHead),
            ])
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 307 Temporary Redirect", "Location: https://b.example/")),
            [
                .release(hop(1), reuse: false), .emit(.redirect(.follow), .injected([]), .stripped(["Authorization", "Cookie"])),
                .arm(.connect), .connect(hop(2), b, .tls, reusePooled: true),
            ])
        p.on(
            .upstreamConnected(hop(2), reused: true),
            [
                .send(hop(2), startingWith: "TRACE / HTTP/1.1\r\nHost: b.example\r\n", excluding: ["CANARY", "X-B-Key", "INJECTED"]),
                .arm(.responseHead),
            ])
    }
}

@Suite("Machine: a route's Locations")
struct RouteLocationTests {
    struct Row: Sendable, CustomTestStringConvertible {
        let name: String
        let fixture: Fixture
        let host: String
        let location: String
        /// The Location the client gets; nil: the proxy follows it.
        let relayed: String?
        var testDescription: String { name }
    }

    @Test(
        "a Location pointing at the route's upstream comes back as the address the client used",
        arguments: [
            Row(
                name: "absolute, to the upstream: rewritten to the client's Host", fixture: Configs.pass, host: "localhost:8081",
                location: "https://a.example/v1/next?x=1", relayed: "http://localhost:8081/v1/next?x=1"),
            Row(
                name: "relative: resolved against the upstream, then rewritten", fixture: Configs.pass, host: "10.0.0.7:8081",
                location: "../other", relayed: "http://10.0.0.7:8081/other"),
            Row(
                name: "to the upstream in follow mode: still rewritten and relayed, never followed", fixture: Configs.follow, host: "localhost:8081",
                location: "/v2", relayed: "http://localhost:8081/v2"),
            Row(
                name: "to another origin in pass mode: as sent", fixture: Configs.pass, host: "localhost:8081",
                location: "https://b.example/x", relayed: "https://b.example/x"),
            Row(
                name: "to another origin in follow mode: followed (the upstream is scoped)", fixture: Configs.follow, host: "localhost:8081",
                location: "https://b.example/x", relayed: nil),
        ])
    func routeLocation(_ row: Row) {
        var p = Playbook(row.fixture, mode: route)
        p.sent(["GET /v1/start HTTP/1.1", "Host: \(row.host)"], to: a)
        let head = response("HTTP/1.1 302 Found", "Location: \(row.location)", "Content-Length: 0")
        if let relayed = row.relayed {
            p.on(
                .responseHead(hop(1), head),
                [
                    .write(startingWith: "HTTP/1.1 302 Found\r\n", containing: ["Location: \(relayed)\r\n"]),
                    .relay(hop(1), .contentLength(0), .contentLength(0)), .arm(.stall),
                ])
        } else {
            p.on(
                .responseHead(hop(1), head),
                [
                    .release(hop(1), reuse: false), .emit(.redirect(.follow)), .arm(.connect), .connect(hop(2), b, .tls, reusePooled: true),
                ])
        }
    }
}
