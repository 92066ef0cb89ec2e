import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

/// OAuth2 tokens in the exchange core: a request whose injection needs a token waits (nothing sent,
/// no timer), then goes with it; a failure is 502 naming the endpoint; a 401 marks the token stale.
@Suite("Machine: a request waits for its access token")
struct AccessTokenMachineTests {
    static let yaml = """
        secrets:
          cs: { env: CS }
          partner_token:
            oauth2: { token_url: "https://auth.example/oauth/token", grant: client_credentials, client_id: me, client_secret: cs }
        scopes:
          - name: partner
            origins: ["https://api.example"]
            inject: { Authorization: "Bearer ${partner_token}" }

        """
    static let source = NamesOnlyTokenSource(["partner_token"], endpoint: "https://auth.example")
    static let fixture = Fixture(yaml, secrets: ["cs": "CLIENT-SECRET-CANARY"], tokens: source)
    static let api = origin("https://api.example")
    static let token = AccessToken(value: SecretValue("ACCESS-TOKEN-CANARY-1"), generation: 1, validUntil: 0)

    @Test("the hop waits for the token, then is planned with it; nothing connects before")
    func waitsThenGoes() throws {
        var p = Playbook(Self.fixture)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("GET https://api.example/v1 HTTP/1.1", "Host: api.example"),
            [.cancelTimer, .exactly(.acquireToken(secret: "partner_token", from: Self.fixture.scope))])
        #expect(p.connected.isEmpty)
        p.impossible(.tokenReady(secret: "other_token", Self.token), .unrequestedToken)  // the engine answers only what was asked
        p.on(.tokenReady(secret: "partner_token", Self.token), [.arm(.connect), .connect(hop(1), Self.api, .tls, reusePooled: true)])
        p.on(
            .upstreamConnected(hop(1), reused: false),
            [
                .send(hop(1), startingWith: "GET /v1 HTTP/1.1\r\n", containing: ["Authorization: Bearer ACCESS-TOKEN-CANARY-1\r\n"]),
                .arm(.responseHead),
            ])
    }

    @Test("a failed fetch: 502 credential_unavailable naming the scope and the endpoint's origin, never its words; nothing sent")
    func failure() {
        var p = Playbook(Self.fixture)
        p.start([.arm(.clientHead)])
        _ = p.feed(p.head("GET https://api.example/v1 HTTP/1.1", "Host: api.example"))
        let returned = p.feed(
            .tokenFailed(
                secret: "partner_token", provider: .endpoint(origin("https://auth.example")), reason: .rejected(status: 400, error: .invalidClient)))
        let written = returned.compactMap { if case .writeToClient(let bytes) = $0 { text(bytes) } else { nil } }.joined()
        #expect(written.hasPrefix("HTTP/1.1 502 "))
        #expect(written.contains("credential_unavailable") && written.contains("https://auth.example") && written.contains("partner"))
        #expect(!written.contains("CLIENT-SECRET-CANARY"))
        #expect(p.connected.isEmpty)
        #expect(returned.contains(.readNextRequest), "the request was read whole: the connection stays")
    }

    /// One failure of each kind, its words the endpoint's (a canary) wherever a kind carries words;
    /// the switch makes a new kind fail to compile here until it has a row.
    static let everyReason: [TokenFailure.Reason] = {
        let words = "ENDPOINT-WORDS-CANARY"
        let reasons: [TokenFailure.Reason] = [
            .secretUnavailable("cs"), .dnsFailure, .refused, .connectTimeout, .responseTimeout, .tlsVerification(words),
            .tlsHandshake, .closedEarly, .responseTooLarge(limit: 65_536), .malformedResponse(words),
            .rejected(status: 400, error: .invalidClient), .unexpectedStatus(503), .noTokenSource, .keyUnusable(words),
            .commandNotStarted(words), .commandFailed(status: 3), .commandFailed(status: -9), .commandTimedOut(milliseconds: 10_000),
            .invalidOutput(words), .awsChain(words),
        ]
        for reason in reasons {
            switch reason {
            case .secretUnavailable, .dnsFailure, .refused, .connectTimeout, .responseTimeout, .tlsVerification, .tlsHandshake,
                .closedEarly, .responseTooLarge, .malformedResponse, .rejected, .unexpectedStatus, .noTokenSource, .keyUnusable,
                .commandNotStarted, .commandFailed, .commandTimedOut, .invalidOutput, .awsChain:
                break
            }
        }
        return reasons
    }()

    @Test(
        "every token failure reaches the 502 and the record's reason as its code, typed all the way; never with its words",
        arguments: everyReason)
    func typedFailure(_ reason: TokenFailure.Reason) {
        var p = Playbook(Self.fixture)
        p.start([.arm(.clientHead)])
        _ = p.feed(p.head("GET https://api.example/v1 HTTP/1.1", "Host: api.example"))
        let returned = p.feed(.tokenFailed(secret: "partner_token", provider: .endpoint(origin("https://auth.example")), reason: reason))
        let written = returned.compactMap { if case .writeToClient(let bytes) = $0 { text(bytes) } else { nil } }.joined()
        #expect(written.contains("credential_unavailable") && written.contains("(\(reason.code))"))
        #expect(
            p.emitted.first?.failure
                == .proxy(
                    .tokenUnavailable(
                        scope: "partner", secret: "partner_token",
                        provider: .endpoint(origin("https://auth.example")), reason: reason)))
        #expect(p.emitted.first?.failure?.reason == reason.code)
        #expect(!written.contains("ENDPOINT-WORDS-CANARY"))
    }

    @Test("a 401 from the origin the token went to marks that token stale")
    func unauthorizedMarksStale() {
        var p = Playbook(Self.fixture)
        p.start([.arm(.clientHead)])
        _ = p.feed(p.head("GET https://api.example/v1 HTTP/1.1", "Host: api.example"))
        _ = p.feed(.tokenReady(secret: "partner_token", Self.token))
        _ = p.feed(.upstreamConnected(hop(1), reused: false))
        let returned = p.feed(.responseHead(hop(1), response("HTTP/1.1 401 Unauthorized", "Content-Length: 0")))
        #expect(returned.first == .markTokenStale(secret: "partner_token", Self.token, from: Self.fixture.scope))
    }

    @Test("a request no token goes to waits for nothing; a client that leaves while waiting gets one record")
    func noWaitAndLeaving() {
        var p = Playbook(Self.fixture)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("GET http://plain.example/ HTTP/1.1", "Host: plain.example"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        var q = Playbook(Self.fixture)
        q.start([.arm(.clientHead)])
        _ = q.feed(q.head("GET https://api.example/v1 HTTP/1.1", "Host: api.example"))
        _ = q.feed(.connectionClosed)
        #expect(q.emitted.count == 1)
        #expect(q.emitted.first?.failure == .clientClosed)
        q.ignores(.tokenReady(secret: "partner_token", Self.token))
    }
}
