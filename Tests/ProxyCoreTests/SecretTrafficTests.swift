import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

/// Secrets that cannot leave (docs/security-model.md), in the exchange core: placeholders replaced only where a scope substitutes them, the
/// egress guard reading the head and in-memory bodies before anything is sent, and the response
/// scrub of what an exchange sent. Canaries: `GH-REAL-VALUE-5e1d` (the value behind the
/// placeholder), `A-INJECTED-7c1e` (what scope a injects).
@Suite("Machine: placeholders, the egress guard and the response scrub")
struct SecretTrafficTests {
    static let ghValue = "GH-REAL-VALUE-5e1d"
    static let yaml = """
        secrets:
          a_token: { env: A_TOKEN }
          gh_token: { env: GH_TOKEN, placeholder: true }
        scopes:
          - name: a
            origins: ["https://a.example"]
            inject: { X-A-Key: "${a_token}" }
          - name: gh
            origins: ["https://gh.example"]
            substitute: [gh_token]

        """
    static let secrets = ["a_token": "A-INJECTED-7c1e", "gh_token": ghValue]
    static let fixture = Fixture(yaml, secrets: secrets)
    static let placeholder = Placeholder.text(secret: "gh_token", key: Fixture.placeholderKey)
    static let gh = origin("https://gh.example")

    /// The request, connected: returns what went upstream on hop 1.
    func sentUpstream(_ lines: [String], to target: Origin, fixture: Fixture = Self.fixture) -> String? {
        var p = Playbook(fixture)
        p.requested(lines, to: target)
        _ = p.feed(.upstreamConnected(hop(1), reused: false))
        return p.sent(to: hop(1))
    }

    @Test("a placeholder in a header is replaced by the value for the substituting origin (the header is kept though not passed)")
    func headerSubstitution() throws {
        let sent = try #require(
            sentUpstream(
                [
                    "GET https://gh.example/user HTTP/1.1", "Host: gh.example",
                    "Authorization: token \(Self.placeholder)",
                ], to: Self.gh))
        #expect(sent.contains("Authorization: token \(Self.ghValue)\r\n"))
        #expect(!sent.contains("scopeproxy-ph-"))
    }

    @Test("a placeholder inside Basic credentials (git's x-access-token) is replaced and re-encoded")
    func basicSubstitution() throws {
        let credentials = Base64.encode(Array("x-access-token:\(Self.placeholder)".utf8))
        let sent = try #require(
            sentUpstream(
                [
                    "GET https://gh.example/repo.git/info/refs HTTP/1.1", "Host: gh.example",
                    "Authorization: Basic \(credentials)",
                ], to: Self.gh))
        #expect(sent.contains("Authorization: Basic \(Base64.encode(Array("x-access-token:\(Self.ghValue)".utf8)))\r\n"))
    }

    @Test("a placeholder in the query is replaced, percent-encoded")
    func querySubstitution() throws {
        let fixture = Fixture(Self.yaml, secrets: ["a_token": "A-INJECTED-7c1e", "gh_token": "v a&l"])
        let sent = try #require(
            sentUpstream(
                ["GET https://gh.example/search?key=\(Self.placeholder)&q=1 HTTP/1.1", "Host: gh.example"],
                to: Self.gh, fixture: fixture))
        #expect(sent.hasPrefix("GET /search?key=v%20a%26l&q=1 HTTP/1.1\r\n"))
    }

    @Test("a JSON body to a substituting origin is read whole, the placeholder replaced (JSON-escaped), the length fixed")
    func jsonBodySubstitution() throws {
        let fixture = Fixture(Self.yaml, secrets: ["a_token": "A-INJECTED-7c1e", "gh_token": "q\"uote\\"])
        let body = "{\"token\":\"\(Self.placeholder)\"}"
        var p = Playbook(fixture)
        p.start([.arm(.clientHead)])
        p.on(
            p.head(
                "POST https://gh.example/graphql HTTP/1.1", "Host: gh.example", "Content-Type: application/json",
                "Content-Length: \(body.utf8.count)"),
            [
                .cancelTimer, .exactly(.collectRequestBody(.contentLength(UInt64(body.utf8.count)), limit: p.settings.limits.maxSubstitutedBody)),
                .arm(.stall),
            ])
        #expect(p.connected.isEmpty)
        p.on(.collectedBody(.complete(Array(body.utf8))), [.cancelTimer, .arm(.connect), .connect(hop(1), Self.gh, .tls, reusePooled: true)])
        let expected = "{\"token\":\"q\\\"uote\\\\\"}"
        p.on(
            .upstreamConnected(hop(1), reused: false),
            [
                .send(
                    hop(1), startingWith: "POST /graphql HTTP/1.1\r\n",
                    containing: ["Content-Length: \(expected.utf8.count)\r\n", "\r\n\r\n" + expected],
                    excluding: ["scopeproxy-ph-"]),
                .arm(.responseHead),
            ])
    }

    @Test(
        "the same placeholder toward any other origin: 403 placeholder_out_of_scope, nothing connected",
        arguments: [
            ["GET https://a.example/ HTTP/1.1", "Host: a.example", "Authorization: token \(placeholder)"],
            ["GET https://unscoped.example/?k=\(placeholder) HTTP/1.1", "Host: unscoped.example"],
            ["GET http://plain.example/ HTTP/1.1", "Host: plain.example", "X-Anything: \(placeholder)"],
            [
                "GET http://plain.example/ HTTP/1.1", "Host: plain.example",
                "Authorization: Basic \(Base64.encode(Array("u:\(placeholder)".utf8)))",
            ],
        ])
    func placeholderOutOfScope(_ lines: [String]) {
        var p = Playbook(Self.fixture)
        p.start([.arm(.clientHead)])
        let returned = p.feed(p.head(lines))
        #expect(p.connected.isEmpty, "nothing may be sent")
        let written = returned.compactMap { if case .writeToClient(let bytes) = $0 { text(bytes) } else { nil } }.joined()
        #expect(written.hasPrefix("HTTP/1.1 403 "))
        #expect(written.contains("placeholder_out_of_scope") && written.contains("gh_token"))
        #expect(p.emitted.first?.failure?.code == "placeholder_out_of_scope")
    }

    @Test("a streamed body to another origin is guarded for the placeholder (and for every value that origin may not receive)")
    func streamedBodyGuard() {
        var p = Playbook(Self.fixture)
        p.requested(["POST http://plain.example/upload HTTP/1.1", "Host: plain.example", "Content-Type: text/plain", "Content-Length: 100"])
        p.on(
            .upstreamConnected(hop(1), reused: false),
            [
                .send(hop(1), startingWith: "POST /upload"),
                .pump(hop(1), .contentLength(100), capture: nil, observe: nil, guards: ["a_token", "gh_token", "gh_token"]),
                .arm(.stall),
            ])
        p.on(
            .requestBody(hop(1), .blocked(SecretFinding(secret: "a_token", encoding: .raw, isPlaceholder: false), bytesSent: true)),
            [
                .release(hop(1), reuse: false), .cancelTimer,
                .write(startingWith: "HTTP/1.1 403 ", containing: ["secret_egress_blocked", "a_token"]),
                .emit(.status(403)), .close(.afterFlush),
            ])
    }

    @Test(
        "a body refused before any byte left lists nothing as injected; refused after the head left, the injected header stays listed",
        arguments: [(false, [String]()), (true, ["X-A-Key"])])
    func injectedOnlyWhenTheHeadLeft(_ bytesSent: Bool, _ injected: [String]) {
        var p = Playbook(Self.fixture)
        p.requested(
            ["POST https://a.example/upload HTTP/1.1", "Host: a.example", "Content-Type: text/plain", "Content-Length: 100"],
            to: try! Origin.parse("https://a.example"))
        p.on(
            .upstreamConnected(hop(1), reused: false),
            [
                .send(hop(1), startingWith: "POST /upload"),
                .pump(hop(1), .contentLength(100), capture: nil, observe: nil, guards: ["gh_token", "gh_token"]),
                .arm(.stall),
            ])
        p.on(
            .requestBody(hop(1), .blocked(SecretFinding(secret: "gh_token", encoding: .raw, isPlaceholder: true), bytesSent: bytesSent)),
            [
                .release(hop(1), reuse: false), .cancelTimer,
                .write(startingWith: "HTTP/1.1 403 ", containing: ["placeholder_out_of_scope", "gh_token"]),
                .emit(.status(403)), .close(.afterFlush),
            ])
        #expect(p.emitted.last?.injected == injected)
        #expect(p.emitted.last?.failure?.code == "placeholder_out_of_scope")
    }

    @Test(
        "a secret's value in the head toward an origin outside its scopes: 403 secret_egress_blocked, nothing connected",
        arguments: [
            ["GET https://unscoped.example/?x=A-INJECTED-7c1e HTTP/1.1", "Host: unscoped.example"],
            ["GET https://gh.example/ HTTP/1.1", "Host: gh.example", "X-Debug: A-INJECTED-7c1e"],
            ["GET http://plain.example/ HTTP/1.1", "Host: plain.example", "X-B64: \(Base64.encode(Array("A-INJECTED-7c1e".utf8)))"],
            ["GET http://plain.example/ HTTP/1.1", "Host: plain.example", "X-Note: t=GH-REAL-VALUE-5e1d"],
        ])
    func headGuard(_ lines: [String]) {
        var p = Playbook(Self.fixture)
        p.start([.arm(.clientHead)])
        let returned = p.feed(p.head(lines))
        #expect(p.connected.isEmpty, "nothing may be sent")
        let written = returned.compactMap { if case .writeToClient(let bytes) = $0 { text(bytes) } else { nil } }.joined()
        #expect(written.hasPrefix("HTTP/1.1 403 "))
        #expect(written.contains("secret_egress_blocked"))
        #expect(!written.contains("A-INJECTED") && !written.contains("GH-REAL"), "the answer names the secret, never its value")
        #expect(p.emitted.first?.guardFinding != nil)
    }

    @Test("a secret's value in a sensitive header toward another origin is stripped by the scope rules: nothing to block")
    func strippedNotBlocked() throws {
        let sent = try #require(
            sentUpstream(
                ["GET http://plain.example/ HTTP/1.1", "Host: plain.example", "Cookie: t=GH-REAL-VALUE-5e1d"],
                to: plain))
        #expect(!sent.contains("GH-REAL-VALUE") && !sent.contains("Cookie"))
    }

    @Test("a secret's own value toward its own scope's origin passes the guard")
    func ownScopePasses() throws {
        let sent = try #require(
            sentUpstream(
                ["GET https://a.example/ HTTP/1.1", "Host: a.example", "X-Echo: A-INJECTED-7c1e"],
                to: origin("https://a.example")))
        #expect(sent.contains("X-A-Key: A-INJECTED-7c1e"))
    }

    @Test("the response head is scrubbed of what the exchange injected; the body relay gets the scrub watch")
    func responseScrub() {
        var p = Playbook(Self.fixture)
        p.sent(["GET https://a.example/headers HTTP/1.1", "Host: a.example"], to: origin("https://a.example"))
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "X-Echo: key=A-INJECTED-7c1e", "Content-Length: 10")),
            [
                .write(startingWith: "HTTP/1.1 200 OK\r\n", containing: ["X-Echo: key=***************\r\n"], excluding: ["A-INJECTED"]),
                .relay(hop(1), .contentLength(10), .contentLength(10), scrubs: ["a_token"]),
                .arm(.stall),
            ])
        p.on(.responseBody(hop(1), .scrubbed([SecretFinding(secret: "a_token", encoding: .base64(alignment: 0), isPlaceholder: false)])), [])
        p.on(
            .responseBody(hop(1), .complete(payload: 10, consumed: 10, captured: nil, observed: nil)),
            [.cancelTimer, .release(hop(1), reuse: true), .emit(.status(200)), .arm(.idle), .readNextRequest])
        #expect(p.emitted.last?.scrubbed.map(\.secret) == ["a_token", "a_token"])
    }

    @Test("a compressed response body passes unscanned, and the record says so")
    func compressedBodySaid() {
        var p = Playbook(Self.fixture)
        p.sent(["GET https://a.example/ HTTP/1.1", "Host: a.example"], to: origin("https://a.example"))
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Encoding: gzip", "Content-Length: 10")),
            [
                .write(startingWith: "HTTP/1.1 200 OK\r\n"), .relay(hop(1), .contentLength(10), .contentLength(10), scrubs: []), .arm(.stall),
            ])
        p.on(
            .responseBody(hop(1), .complete(payload: 10, consumed: 10, captured: nil, observed: nil)),
            [.cancelTimer, .release(hop(1), reuse: true), .emit(.status(200)), .arm(.idle), .readNextRequest])
        #expect(p.emitted.last?.scrubSkipped == "gzip")
    }

    @Test("scrub: strict asks scoped origins for identity bodies; unscoped ones keep the client's Accept-Encoding")
    func strictScrub() throws {
        let strict = Fixture(Self.yaml + "scrub: strict\n", secrets: Self.secrets)
        let scoped = try #require(
            sentUpstream(
                ["GET https://a.example/ HTTP/1.1", "Host: a.example", "Accept-Encoding: gzip"],
                to: origin("https://a.example"), fixture: strict))
        #expect(scoped.contains("Accept-Encoding: identity\r\n") && !scoped.contains("gzip"))
        let other = try #require(
            sentUpstream(
                ["GET http://plain.example/ HTTP/1.1", "Host: plain.example", "Accept-Encoding: gzip"],
                to: plain, fixture: strict))
        #expect(other.contains("Accept-Encoding: gzip\r\n"))
    }

    @Test("scrub: strict refuses a compressed body from a scoped origin (it asked for identity): 502, nothing of it relayed")
    func strictRefusesCompressed() {
        var p = Playbook(Fixture(Self.yaml + "scrub: strict\n", secrets: Self.secrets))
        p.sent(["GET https://a.example/ HTTP/1.1", "Host: a.example"], to: origin("https://a.example"))
        let returned = p.feed(.responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Encoding: gzip", "Content-Length: 10")))
        #expect(!returned.contains { if case .relayResponseBody = $0 { true } else { false } })
        #expect(p.emitted.last?.status == 502)
    }

    @Test("guard: off lets a value through (placeholders are still refused); scrub: off hands the relay no watch")
    func switchedOff() throws {
        let off = Fixture(Self.yaml + "guard: off\nscrub: off\n", secrets: Self.secrets)
        let sent = try #require(
            sentUpstream(
                ["GET http://plain.example/ HTTP/1.1", "Host: plain.example", "X-Debug: A-INJECTED-7c1e"],
                to: plain, fixture: off))
        #expect(sent.contains("X-Debug: A-INJECTED-7c1e"))
        var p = Playbook(off)
        p.start([.arm(.clientHead)])
        _ = p.feed(p.head("GET http://plain.example/?k=\(Self.placeholder) HTTP/1.1", "Host: plain.example"))
        #expect(p.connected.isEmpty)
        #expect(p.emitted.first?.status == 403)
        var q = Playbook(off)
        q.sent(["GET https://a.example/ HTTP/1.1", "Host: a.example"], to: origin("https://a.example"))
        q.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "X-Echo: A-INJECTED-7c1e", "Content-Length: 1")),
            [
                .write(startingWith: "HTTP/1.1 200 OK\r\n", containing: ["X-Echo: A-INJECTED-7c1e"]),
                .relay(hop(1), .contentLength(1), .contentLength(1), scrubs: []), .arm(.stall),
            ])
    }
}

extension Playbook {
    func head(_ lines: [String]) -> ConnectionEvent {
        .requestHead(requestHead(lines), headBytes: lines.joined(separator: "\r\n").utf8.count + 4, Arrival(now: now, scope: fixture.scope))
    }
}

/// Placeholders, the scrub and the guard against a client holding only a placeholder and a hostile
/// origin: across followed hops, in a redirect's host, interim heads and reason phrases, JSON
/// escapes, head growth by substitution, per-field vouching and 100 Continue.
@Suite("Machine: placeholders, scrub and guard against a hostile origin and a client holding only a placeholder")
struct SecretTrafficHostilePeerTests {
    static let follow = Fixture(SecretTrafficTests.yaml + "redirects: { cross_origin: follow }\n", secrets: SecretTrafficTests.secrets)
    static let gh = SecretTrafficTests.gh
    static let placeholder = SecretTrafficTests.placeholder
    static let value = SecretTrafficTests.ghValue

    func relayedScrub(_ returned: [ConnectionAction]) -> [String]? {
        for action in returned { if case .relayResponseBody(_, _, _, _, let watch) = action { return watch?.secrets } }
        return nil
    }

    @Test("a followed hop's scrub also masks what earlier hops substituted (with guard: off the value can reach another scope's origin)")
    func followedChainScrubbed() {
        var p = Playbook(Fixture(SecretTrafficTests.yaml + "redirects: { cross_origin: follow }\nguard: off\n", secrets: SecretTrafficTests.secrets))
        p.start([.arm(.clientHead)])
        _ = p.feed(p.head("GET https://gh.example/redir?to=\(Self.placeholder) HTTP/1.1", "Host: gh.example"))
        _ = p.feed(.upstreamConnected(hop(1), reused: false))
        _ = p.feed(.responseHead(hop(1), response("HTTP/1.1 302 Found", "Location: https://a.example/echo?v=\(Self.value)", "Content-Length: 0")))
        _ = p.feed(.upstreamConnected(hop(2), reused: false))
        let returned = p.feed(.responseHead(hop(2), response("HTTP/1.1 200 OK", "X-Echo: v=\(Self.value)", "Content-Length: 9")))
        let written = returned.compactMap { if case .writeToClient(let bytes) = $0 { text(bytes) } else { nil } }.joined()
        #expect(!written.contains(Self.value))
        #expect(Set(relayedScrub(returned) ?? []) == ["a_token", "gh_token"], "the body relay masks gh_token too")
    }

    @Test("a redirect that puts the value (lowercased) into a host: blocked, and the 403 does not echo it")
    func valueInRedirectHost() {
        let fixture = Fixture(
            SecretTrafficTests.yaml + "redirects: { cross_origin: follow }\n",
            secrets: ["a_token": "A-INJECTED-7c1e", "gh_token": "MiXeDcAsEvAlUe77"])
        var p = Playbook(fixture)
        p.start([.arm(.clientHead)])
        _ = p.feed(p.head("GET https://gh.example/redir?to=\(Self.placeholder) HTTP/1.1", "Host: gh.example"))
        _ = p.feed(.upstreamConnected(hop(1), reused: false))
        let returned = p.feed(
            .responseHead(hop(1), response("HTTP/1.1 302 Found", "Location: http://MiXeDcAsEvAlUe77.invalid/", "Content-Length: 0")))
        #expect(p.connected == [hop(1)], "the value's host is never connected to (nor resolved)")
        let written = returned.compactMap { if case .writeToClient(let bytes) = $0 { text(bytes) } else { nil } }.joined()
        #expect(written.hasPrefix("HTTP/1.1 403 ") && written.contains("secret_egress_blocked"))
        #expect(!written.lowercased().contains("mixedcasevalue77"), "the proxy's own answer is scrubbed")
    }

    @Test("a scoped origin's responses are scrubbed of its secrets even when this request sent none")
    func scopedOriginAlwaysScrubbed() {
        var p = Playbook(SecretTrafficTests.fixture)
        p.sent(["GET https://gh.example/issues/1 HTTP/1.1", "Host: gh.example"], to: Self.gh)
        let returned = p.feed(.responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 4")))
        #expect(Set(relayedScrub(returned) ?? []) == ["gh_token"])
    }

    @Test("interim heads, the reason phrase and header names are scrubbed too")
    func wholeHeadScrubbed() {
        var p = Playbook(SecretTrafficTests.fixture)
        p.sent(["GET https://a.example/ HTTP/1.1", "Host: a.example"], to: origin("https://a.example"))
        let interim = p.feed(.responseHead(hop(1), response("HTTP/1.1 103 Early Hints", "Link: </x?k=A-INJECTED-7c1e>")))
        let final = p.feed(.responseHead(hop(1), response("HTTP/1.1 200 A-INJECTED-7c1e", "X-A-INJECTED-7c1e: 1", "Content-Length: 0")))
        let written = (interim + final).compactMap { if case .writeToClient(let bytes) = $0 { text(bytes) } else { nil } }.joined()
        #expect(!written.contains("A-INJECTED-7c1e"))
        #expect(written.contains("HTTP/1.1 200 ***************\r\n") && written.contains("X-***************: 1\r\n"))
    }

    @Test("the value as the proxy wrote it into JSON (escaped) is masked in an echo")
    func jsonEscapedMasked() {
        let fixture = Fixture(SecretTrafficTests.yaml, secrets: ["a_token": "A-INJECTED-7c1e", "gh_token": "q\"uo\\te-9"])
        var p = Playbook(fixture)
        p.sent(["GET https://gh.example/ HTTP/1.1", "Host: gh.example"], to: Self.gh)
        let returned = p.feed(.responseHead(hop(1), response("HTTP/1.1 200 OK", #"X-Echo: {"t":"q\"uo\\te-9"}"#, "Content-Length: 0")))
        let written = returned.compactMap { if case .writeToClient(let bytes) = $0 { text(bytes) } else { nil } }.joined()
        #expect(!written.contains(#"q\"uo\\te-9"#))
    }

    @Test("substitution cannot build a head past 64 KiB (431), nothing connected")
    func amplificationRefused() {
        let long = String(repeating: "v", count: 16 * 1024)
        let fixture = Fixture(SecretTrafficTests.yaml, secrets: ["a_token": "A-INJECTED-7c1e", "gh_token": long])
        var p = Playbook(fixture)
        p.start([.arm(.clientHead)])
        _ = p.feed(
            p.head(
                "GET https://gh.example/ HTTP/1.1", "Host: gh.example",
                "X-1: \(Self.placeholder)", "X-2: \(Self.placeholder)", "X-3: \(Self.placeholder)",
                "X-4: \(Self.placeholder)", "X-5: \(Self.placeholder)"))
        #expect(p.connected.isEmpty)
        #expect(p.emitted.last?.status == 431)
    }

    @Test("a substituted Cookie field is kept, another Cookie field of the client is still stripped")
    func vouchedPerField() throws {
        var p = Playbook(SecretTrafficTests.fixture)
        p.requested(
            ["GET https://gh.example/ HTTP/1.1", "Host: gh.example", "Cookie: t=\(Self.placeholder)", "Cookie: sid=CLIENT-SID-CANARY"],
            to: Self.gh)
        _ = p.feed(.upstreamConnected(hop(1), reused: false))
        let sent = try #require(p.sent(to: hop(1)))
        #expect(sent.contains("Cookie: t=\(Self.value)\r\n"))
        #expect(!sent.contains("CLIENT-SID-CANARY"))
    }

    @Test("a body read first for substitution gets 100 Continue when the client expects it")
    func continueForCollectedBody() {
        var p = Playbook(SecretTrafficTests.fixture)
        p.start([.arm(.clientHead)])
        p.on(
            p.head(
                "POST https://gh.example/graphql HTTP/1.1", "Host: gh.example", "Content-Type: application/json",
                "Content-Length: 10", "Expect: 100-continue"),
            [
                .cancelTimer, .writeExactly("HTTP/1.1 100 Continue\r\n\r\n"),
                .exactly(.collectRequestBody(.contentLength(10), limit: p.settings.limits.maxSubstitutedBody)), .arm(.stall),
            ])
    }
}
