import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

/// The installation token request as bytes, and the response read by table: what is granted, what
/// is refused, and that nothing from the body (canaries) reaches a reason.
@Suite struct GitHubInstallationTokenTests {
    @Test func requestBytesWithoutNarrowing() throws {
        let api = try Origin.parse("https://api.github.com")
        let bytes = GitHubInstallationTokenRequest.make(
            api: api, pathPrefix: "", installationID: "42", jwt: "h.p.s", permissions: [], repositories: [])
        #expect(
            String(decoding: bytes, as: UTF8.self)
                == "POST /app/installations/42/access_tokens HTTP/1.1\r\n" + "Host: api.github.com\r\n" + "Authorization: Bearer h.p.s\r\n"
                + "Accept: application/vnd.github+json\r\n" + "X-GitHub-Api-Version: 2022-11-28\r\n" + "User-Agent: scopeproxy\r\n"
                + "Content-Type: application/json\r\n" + "Content-Length: 2\r\n" + "Connection: close\r\n" + "\r\n" + "{}")
    }

    @Test func requestBytesNarrowedOnAnEnterpriseServer() throws {
        let api = try Origin.parse("https://github.example.com:8443")
        let bytes = GitHubInstallationTokenRequest.make(
            api: api, pathPrefix: "/api/v3/", installationID: "7", jwt: "h.p.s", permissions: [("contents", "read"), ("issues", "write")],
            repositories: ["octo-repo", "quote\"d"])
        let text = String(decoding: bytes, as: UTF8.self)
        let body = #"{"repositories":["octo-repo","quote\"d"],"permissions":{"contents":"read","issues":"write"}}"#
        #expect(text.hasPrefix("POST /api/v3/app/installations/7/access_tokens HTTP/1.1\r\nHost: github.example.com:8443\r\n"))
        #expect(text.contains("\r\nContent-Length: \(body.utf8.count)\r\n"))
        #expect(text.hasSuffix("\r\n\r\n" + body))
    }

    /// An installation ID is config text: whatever it holds stays one path segment.
    @Test func installationIDStaysOneSegment() throws {
        let api = try Origin.parse("https://api.github.com")
        let bytes = GitHubInstallationTokenRequest.make(
            api: api, pathPrefix: "api", installationID: "1/../x y\r\n", jwt: "j", permissions: [], repositories: [])
        #expect(String(decoding: bytes, as: UTF8.self).hasPrefix("POST /api/app/installations/1%2F..%2Fx%20y%0D%0A/access_tokens HTTP/1.1\r\n"))
    }

    @Test(arguments: [
        (201, #"{"token":"ghs_16C7e42F292c6912E7710c838347Ae178B4a","expires_at":"2016-07-11T22:14:10Z","permissions":{"issues":"write"}}"#),
        (200, #"{"expires_at":"2016-07-11T22:14:10Z","token":"ghs_16C7e42F292c6912E7710c838347Ae178B4a"}"#),
    ])
    func grants(status: Int, body: String) throws {
        let result = GitHubInstallationTokenResponse.parse(status: status, body: Array(body.utf8))
        let granted = try result.get()
        #expect(granted.token == SecretValue("ghs_16C7e42F292c6912E7710c838347Ae178B4a"))
        #expect(granted.expiresAt == 1_468_275_250)
    }

    static let canary = "CANARY-gh-7f3a"

    @Test(arguments: [
        (401, #"{"message":"A JSON web token could not be decoded CANARY-gh-7f3a"}"#, TokenFailure.Reason.rejected(status: 401, error: nil)),
        (403, "CANARY-gh-7f3a", .rejected(status: 403, error: nil)),
        (404, #"{"message":"Not Found"}"#, .rejected(status: 404, error: nil)),
        (422, #"{"message":"CANARY-gh-7f3a"}"#, .rejected(status: 422, error: nil)),
        (500, #"{"token":"CANARY-gh-7f3a","expires_at":"2016-07-11T22:14:10Z"}"#, .unexpectedStatus(500)),
        (302, "", .unexpectedStatus(302)),
        (201, "CANARY-gh-7f3a", .malformedResponse("invalid JSON value")),
        (201, #"["CANARY-gh-7f3a"]"#, .malformedResponse("not a JSON object")),
        (201, #"{"expires_at":"2016-07-11T22:14:10Z"}"#, .malformedResponse("no token string")),
        (201, #"{"token":42,"expires_at":"CANARY-gh-7f3a"}"#, .malformedResponse("no token string")),
        (201, #"{"token":"","expires_at":"2016-07-11T22:14:10Z"}"#, .malformedResponse("token is not visible ASCII")),
        (201, #"{"token":"CANARY-gh-7f3a\r\nX: y","expires_at":"2016-07-11T22:14:10Z"}"#, .malformedResponse("token is not visible ASCII")),
        (201, #"{"token":"CANARY gh","expires_at":"2016-07-11T22:14:10Z"}"#, .malformedResponse("token is not visible ASCII")),
        (201, #"{"token":"CANARY-gh-7f3a"}"#, .malformedResponse("no expires_at string")),
        (201, #"{"token":"CANARY-gh-7f3a","expires_at":1468275250}"#, .malformedResponse("no expires_at string")),
        (201, #"{"token":"CANARY-gh-7f3a","expires_at":"CANARY-gh-7f3a"}"#, .malformedResponse("expires_at is not an RFC 3339 timestamp")),
        (201, #"{"token":"CANARY-gh-7f3a","expires_at":"2016-07-11"}"#, .malformedResponse("expires_at is not an RFC 3339 timestamp")),
        (
            201, #"{"token":"CANARY-gh-7f3a","token":"ghs_x","expires_at":"2016-07-11T22:14:10Z"}"#,
            .malformedResponse("duplicate member name")
        ),
    ])
    func refuses(status: Int, body: String, reason: TokenFailure.Reason) throws {
        let result = GitHubInstallationTokenResponse.parse(status: status, body: Array(body.utf8))
        #expect(throws: reason) { try result.get() }
        let failure = TokenFailure(secret: "gh", endpoint: try Origin.parse("https://api.github.com"), reason: reason)
        #expect(!failure.description.contains("CANARY"))
        #expect(!"\(reason)".contains("CANARY"))
    }

    @Test func oversizedTokenIsRefused() {
        let token = String(repeating: "a", count: GitHubInstallationTokenResponse.maxTokenBytes + 1)
        let body = #"{"token":"\#(token)","expires_at":"2016-07-11T22:14:10Z"}"#
        #expect(throws: TokenFailure.Reason.malformedResponse("token is not visible ASCII")) {
            try GitHubInstallationTokenResponse.parse(status: 201, body: Array(body.utf8)).get()
        }
    }
}
