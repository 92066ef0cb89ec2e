import Digests
import Foundation
import HTTP1Codec
import ProxyCore
import ScopePolicy
import TestSupport
import Testing

/// The loopback fixtures the engine tests will use (Tests/Fixtures/github_app_api.py,
/// jwt_token_endpoint.py), proven against the requests this code builds, sent over a plain blocking
/// socket: they accept what is right and refuse what is wrong, and their logs say so.
@Suite struct GitHubAppFixtureTests {
    let keys = TestKeys()

    func start(pathPrefix: String = "", lifetimeSeconds: Int = 3600, controlPath: String? = nil) throws -> PythonFixtureServer {
        try PythonFixtureServer.gitHubAppAPI(
            publicKeyPath: try keys.publicKey(of: .rsaPKCS1), appID: "12345", installationID: "678", pathPrefix: pathPrefix,
            lifetimeSeconds: lifetimeSeconds, controlPath: controlPath, logPath: keys.directory.path + "/github.jsonl")
    }

    func request(_ fixture: PythonFixtureServer, key: SigningKey, appID: String = "12345", installation: String = "678", now: Int64? = nil)
        throws -> TestResponseBox
    {
        let api = try Origin.parse("http://127.0.0.1:\(fixture.port)")
        let jwt = try GitHubAppJWT.make(appID: appID, key: key, now: now ?? nowSeconds())
        let bytes = GitHubInstallationTokenRequest.make(
            api: api, pathPrefix: "", installationID: installation, jwt: jwt, permissions: [("contents", "read")], repositories: ["octo-repo"])
        let response = try fixture.exchange(bytes)
        return TestResponseBox(status: response.status, body: response.body)
    }

    @Test func issuesATokenForAVerifiedJWTAndRecognizesIt() throws {
        let fixture = try start()
        defer { fixture.stop() }
        let key = try SigningKey.parsePEM(try keys.bytes(.rsaPKCS1))
        let before = nowSeconds()
        let response = try request(fixture, key: key)
        #expect(response.status == 201)
        let granted = try GitHubInstallationTokenResponse.parse(status: response.status, body: response.body).get()
        #expect(granted.token == SecretValue("CANARY-ghs-1"))
        #expect(granted.expiresAt >= before + 3600 - 5 && granted.expiresAt <= nowSeconds() + 3600 + 5)

        let entry = try #require(fixture.log.last)
        #expect(entry["verified"] as? Bool == true, "\(entry["why"] ?? "")")
        #expect(entry["alg"] as? String == "RS256")
        #expect((entry["claims"] as? [String: Any])?["iss"] as? Int == 12345)
        #expect(entry["permissions"] as? [String: String] == ["contents": "read"])
        #expect(entry["repositories"] as? [String] == ["octo-repo"])
        #expect(entry["accept"] as? String == "application/vnd.github+json")
        #expect(entry["api_version"] as? String == "2022-11-28")
        #expect(entry["user_agent"] as? String == "scopeproxy")

        // The scoped API: the issued token in either scheme is recognized; a value it did not
        // issue is not, and is not echoed.
        for (authorization, authorized) in [("Bearer CANARY-ghs-1", true), ("token CANARY-ghs-1", true), ("Bearer CANARY-not-issued", false)] {
            let answer = try fixture.exchange(
                Array("GET /repos/o/r HTTP/1.1\r\nHost: x\r\nAuthorization: \(authorization)\r\nConnection: close\r\n\r\n".utf8))
            #expect(answer.status == 200)
            let document = try #require(try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any])
            #expect(document["authorized"] as? Bool == authorized, "\(authorization)")
            #expect(!answer.bodyText.contains("not-issued"))
        }
    }

    @Test func refusesWhatGitHubRefuses() throws {
        let fixture = try start()
        defer { fixture.stop() }
        let other = try SigningKey.parsePEM(try keys.bytes(.rsaPKCS8))
        let key = try SigningKey.parsePEM(try keys.bytes(.rsaPKCS1))
        let cases: [(String, TestResponseBox, TokenFailure.Reason)] = [
            ("another key", try request(fixture, key: other), .rejected(status: 401, error: nil)),
            ("another app", try request(fixture, key: key, appID: "999"), .rejected(status: 401, error: nil)),
            ("expired", try request(fixture, key: key, now: nowSeconds() - 3600), .rejected(status: 401, error: nil)),
            ("issued in the future", try request(fixture, key: key, now: nowSeconds() + 3600), .rejected(status: 401, error: nil)),
            ("another installation", try request(fixture, key: key, installation: "679"), .rejected(status: 404, error: nil)),
        ]
        for (name, response, reason) in cases {
            #expect(throws: reason, "\(name)") { try GitHubInstallationTokenResponse.parse(status: response.status, body: response.body).get() }
        }
        let verdicts = fixture.log.map { $0["verified"] as? Bool }
        #expect(verdicts == [false, false, false, false, true])
        #expect(fixture.log.allSatisfy { $0["issued"] is NSNull })
    }

    /// The control file makes failures on demand; a prefix puts the endpoint under /api/v3.
    @Test func controlledFailuresAndPrefix() throws {
        let control = keys.directory.path + "/control.json"
        let fixture = try start(pathPrefix: "/api/v3", lifetimeSeconds: 120, controlPath: control)
        defer { fixture.stop() }
        let key = try SigningKey.parsePEM(try keys.bytes(.rsaPKCS1))
        let api = try Origin.parse("http://127.0.0.1:\(fixture.port)")
        func send() throws -> TestResponseBox {
            let jwt = try GitHubAppJWT.make(appID: "12345", key: key, now: nowSeconds())
            let response = try fixture.exchange(
                GitHubInstallationTokenRequest.make(
                    api: api, pathPrefix: "/api/v3", installationID: "678", jwt: jwt, permissions: [], repositories: []))
            return TestResponseBox(status: response.status, body: response.body)
        }
        keys.directory.write("control.json", #"{"status": 503}"#)
        var response = try send()
        #expect(throws: TokenFailure.Reason.unexpectedStatus(503)) {
            try GitHubInstallationTokenResponse.parse(status: response.status, body: response.body).get()
        }
        keys.directory.write("control.json", #"{"malformed": true}"#)
        response = try send()
        #expect(throws: TokenFailure.Reason.malformedResponse("no token string")) {
            try GitHubInstallationTokenResponse.parse(status: response.status, body: response.body).get()
        }
        keys.directory.write("control.json", "{}")
        response = try send()
        let granted = try GitHubInstallationTokenResponse.parse(status: response.status, body: response.body).get()
        #expect(granted.token == SecretValue("CANARY-ghs-1"))
        #expect(granted.expiresAt <= nowSeconds() + 125)
        #expect(fixture.log.last?["path"] as? String == "/api/v3/app/installations/678/access_tokens")
        #expect(fixture.log.last?["permissions"] is NSNull)
    }
}

struct TestResponseBox {
    let status: Int
    let body: [UInt8]
}

@Suite struct JWTTokenEndpointFixtureTests {
    let keys = TestKeys()
    let tokenPath = "/oauth2/token"

    func start(_ kind: TestKeys.Kind) throws -> PythonFixtureServer {
        try PythonFixtureServer.jwtTokenEndpoint(
            publicKeyPath: try keys.publicKey(of: kind), issuer: "svc@example.iam", clientID: "client-7", keyID: "kid-1",
            logPath: keys.directory.path + "/endpoint.jsonl")
    }

    func post(_ fixture: PythonFixtureServer, _ form: [(String, [UInt8])]) throws -> (status: Int, body: [UInt8]) {
        let body = JWTBearer.formBody(form)
        var fields = HTTPFields()
        fields.append(name: "Host", value: "127.0.0.1:\(fixture.port)")
        fields.append(name: "Content-Type", value: "application/x-www-form-urlencoded")
        fields.append(name: "Content-Length", value: String(body.count))
        fields.append(name: "Connection", value: "close")
        let head = RequestHead(method: "POST", target: tokenPath, version: .http1_1, fields: fields)
        let response = try fixture.exchange(head.serialized() + body)
        return (response.status, response.body)
    }

    func jti() -> String { JWTBearer.jti(random: RandomBytes.generate(16)) }

    @Test(arguments: [TestKeys.Kind.ecSEC1, .rsaPKCS1])
    func verifiesGrantAndClientAssertions(kind: TestKeys.Kind) throws {
        let fixture = try start(kind)
        defer { fixture.stop() }
        let key = try SigningKey.parsePEM(try keys.bytes(kind))
        let url = "http://127.0.0.1:\(fixture.port)\(tokenPath)"

        // RFC 7523 §2.1: the grant, with a scope claim and form parameter.
        let assertion = try JWTBearer.assertion(
            issuer: "svc@example.iam", subject: nil, audience: url, scope: "read", key: key, algorithm: key.algorithm, keyID: "kid-1",
            now: nowSeconds(), jti: jti())
        let grantForm = JWTBearer.grantForm(assertion: assertion, scope: "read")
        var response = try post(fixture, grantForm)
        var grant = try OAuth2TokenResponse.parse(status: response.status, body: response.body).get()
        #expect(grant.value == SecretValue("CANARY-jwt-at-1"))
        #expect(grant.expiresIn == 3600)
        var entry = try #require(fixture.log.last)
        #expect(entry["verified"] as? Bool == true, "\(entry["why"] ?? "")")
        let claims = try #require((entry["assertion"] as? [String: Any])?["claims"] as? [String: Any])
        #expect(claims["sub"] as? String == "svc@example.iam")
        #expect(claims["scope"] as? String == "read")
        #expect(entry["scope"] as? String == "read")
        #expect((entry["assertion"] as? [String: Any])?["alg"] as? String == key.algorithm.rawValue)

        // The same assertion again: its jti was used.
        response = try post(fixture, grantForm)
        #expect(throws: TokenFailure.Reason.rejected(status: 400, error: .invalidGrant)) {
            try OAuth2TokenResponse.parse(status: response.status, body: response.body).get()
        }
        #expect((fixture.log.last?["why"] as? String)?.contains("jti reused") == true)

        // RFC 7523 §2.2: client_credentials authenticated by a client assertion.
        let clientForm =
            [("grant_type", Array("client_credentials".utf8))]
            + (try JWTBearer.clientAssertionFields(
                clientID: "client-7", tokenURL: url, key: key, algorithm: key.algorithm, keyID: "kid-1", now: nowSeconds(), jti: jti()))
        response = try post(fixture, clientForm)
        grant = try OAuth2TokenResponse.parse(status: response.status, body: response.body).get()
        #expect(grant.value == SecretValue("CANARY-jwt-at-2"))
        entry = try #require(fixture.log.last)
        #expect(entry["verified"] as? Bool == true, "\(entry["why"] ?? "")")
        #expect(((entry["client_assertion"] as? [String: Any])?["claims"] as? [String: Any])?["sub"] as? String == "client-7")
        #expect(entry["client_id"] as? String == "client-7")

        // The grant and client authentication together.
        let both =
            JWTBearer.grantForm(
                assertion: try JWTBearer.assertion(
                    issuer: "svc@example.iam", subject: nil, audience: url, scope: nil, key: key, algorithm: key.algorithm, keyID: "kid-1",
                    now: nowSeconds(), jti: jti()), scope: nil)
            + (try JWTBearer.clientAssertionFields(
                clientID: "client-7", tokenURL: url, key: key, algorithm: key.algorithm, keyID: "kid-1", now: nowSeconds(), jti: jti()))
        response = try post(fixture, both)
        #expect(try OAuth2TokenResponse.parse(status: response.status, body: response.body).get().value == SecretValue("CANARY-jwt-at-3"))
    }

    @Test func refusesWrongAssertions() throws {
        let fixture = try start(.ecSEC1)
        defer { fixture.stop() }
        let key = try SigningKey.parsePEM(try keys.bytes(.ecSEC1))
        let other = try SigningKey.parsePEM(try keys.bytes(.ecPKCS8))
        let url = "http://127.0.0.1:\(fixture.port)\(tokenPath)"
        func grant(
            key: SigningKey, issuer: String = "svc@example.iam", subject: String? = nil, audience: String? = nil, keyID: String? = "kid-1",
            now: Int64? = nil
        ) throws -> [(String, [UInt8])] {
            JWTBearer.grantForm(
                assertion: try JWTBearer.assertion(
                    issuer: issuer, subject: subject, audience: audience ?? url, scope: nil, key: key, algorithm: key.algorithm, keyID: keyID,
                    now: now ?? nowSeconds(), jti: jti()), scope: nil)
        }
        let clientCredentials = [("grant_type", Array("client_credentials".utf8))]
        let cases: [(String, [(String, [UInt8])], OAuth2ErrorCode)] = [
            ("another key", try grant(key: other), .invalidGrant),
            ("another issuer", try grant(key: key, issuer: "svc@elsewhere"), .invalidGrant),
            ("another subject", try grant(key: key, subject: "someone"), .invalidGrant),
            ("another audience", try grant(key: key, audience: "https://elsewhere.example/token"), .invalidGrant),
            ("another kid", try grant(key: key, keyID: "kid-2"), .invalidGrant),
            ("expired", try grant(key: key, now: nowSeconds() - 3600), .invalidGrant),
            ("issued in the future", try grant(key: key, now: nowSeconds() + 3600), .invalidGrant),
            ("client_credentials without an assertion", clientCredentials + [("client_id", Array("client-7".utf8))], .invalidClient),
            (
                "client assertion of another client",
                clientCredentials
                    + (try JWTBearer.clientAssertionFields(
                        clientID: "client-8", tokenURL: url, key: key, algorithm: .es256, keyID: "kid-1", now: nowSeconds(), jti: jti())),
                .invalidClient
            ),
            (
                "client assertion signed by another key",
                clientCredentials
                    + (try JWTBearer.clientAssertionFields(
                        clientID: "client-7", tokenURL: url, key: other, algorithm: .es256, keyID: "kid-1", now: nowSeconds(), jti: jti())),
                .invalidClient
            ),
        ]
        for (name, form, code) in cases {
            let response = try post(fixture, form)
            #expect(throws: TokenFailure.Reason.rejected(status: 400, error: code), "\(name)") {
                try OAuth2TokenResponse.parse(status: response.status, body: response.body).get()
            }
        }
        #expect(fixture.log.count == cases.count)
        #expect(fixture.log.allSatisfy { $0["verified"] as? Bool == false && $0["issued"] is NSNull })
    }
}
