import HTTP1Codec
import ScopePolicy
import Testing

@testable import ProxyCore

private let endpoint = try! Origin.parse("https://auth.example")
private func spec(
    _ grant: OAuth2Spec.Grant = .clientCredentials, auth: OAuth2Spec.ClientAuthentication = .basic(secret: "client_secret"),
    scope: String? = nil, audience: String? = nil, clientID: String = "my-client"
) -> OAuth2Spec {
    OAuth2Spec(
        endpoint: endpoint, path: "/oauth/token?tenant=1", grant: grant, clientID: clientID,
        scope: scope, audience: audience, clientAuthentication: auth)
}
private func utf8Text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

@Suite("OAuth2 token request (RFC 6749 §4.4.2, §6, §2.3.1)")
struct OAuth2TokenRequestTests {
    @Test("client_credentials with HTTP Basic: grant_type, scope, audience in the form; id and secret form-encoded before base64")
    func clientCredentialsBasic() {
        let request = OAuth2TokenRequest.make(
            spec(scope: "read write", audience: "https://api.example", clientID: "id:with space"),
            clientSecret: SecretValue("s3cr:t/+"), refreshToken: nil)
        #expect(request.head.method == "POST")
        #expect(request.head.target == "/oauth/token?tenant=1")
        #expect(request.head.fields.singleValue(of: "host").only == "auth.example")
        #expect(request.head.fields.singleValue(of: "content-type").only == "application/x-www-form-urlencoded")
        #expect(request.head.fields.singleValue(of: "content-length").only == String(request.body.count))
        #expect(utf8Text(request.body) == "grant_type=client_credentials&scope=read+write&audience=https%3A%2F%2Fapi.example")
        // §2.3.1 + Appendix B: "id:with space" -> "id%3Awith+space", "s3cr:t/+" -> "s3cr%3At%2F%2B".
        #expect(request.head.fields.first("authorization") == "Basic " + Base64.encode(Array("id%3Awith+space:s3cr%3At%2F%2B".utf8)))
        #expect(!utf8Text(request.body).contains("client_secret"))
    }

    @Test("client_secret in the body (client_auth: body): no Authorization header")
    func clientCredentialsBody() {
        let request = OAuth2TokenRequest.make(spec(auth: .body(secret: "client_secret")), clientSecret: SecretValue("a&b=c"), refreshToken: nil)
        #expect(request.head.fields.first("authorization") == nil)
        #expect(utf8Text(request.body) == "grant_type=client_credentials&client_id=my-client&client_secret=a%26b%3Dc")
    }

    @Test("refresh_token grant (§6) carries the refresh token")
    func refreshGrant() {
        let request = OAuth2TokenRequest.make(
            spec(.refreshToken(secret: "refresh")), clientSecret: SecretValue("cs"), refreshToken: SecretValue("rt 1"))
        #expect(utf8Text(request.body) == "grant_type=refresh_token&refresh_token=rt+1")
        let wire = utf8Text(request.wireBytes)
        #expect(wire.hasPrefix("POST /oauth/token?tenant=1 HTTP/1.1\r\n"))
        #expect(wire.hasSuffix("\r\n\r\ngrant_type=refresh_token&refresh_token=rt+1"))
    }

    @Test("form encoding: alphanumerics and *-._ kept, space as +, the rest %XX")
    func formEncoding() {
        #expect(FormEncoding.encode(Array("aZ09*-._ ~!é".utf8)) == "aZ09*-._+%7E%21%C3%A9")
    }
}

@Suite("OAuth2 token response (RFC 6749 §5.1, §5.2)")
struct OAuth2TokenResponseTests {
    private func parse(_ status: Int, _ body: String) -> Result<TokenGrant, TokenFailure.Reason> {
        OAuth2TokenResponse.parse(status: status, body: Array(body.utf8))
    }

    @Test("a grant: access_token, Bearer in any case, expires_in as number or numeric string, refresh_token")
    func grants() {
        #expect(
            parse(200, #"{"access_token":"at-1","token_type":"Bearer","expires_in":3600}"#)
                == .success(TokenGrant(value: SecretValue("at-1"), expiresIn: 3600, refreshToken: nil)))
        #expect(
            parse(200, #"{"access_token":"at-1","token_type":"bEaReR","expires_in":"60","refresh_token":"rt-2","scope":"x"}"#)
                == .success(TokenGrant(value: SecretValue("at-1"), expiresIn: 60, refreshToken: SecretValue("rt-2"))))
        #expect(
            parse(200, #" {"token_type":"bearer","access_token":"a\/b\u0041","expires_in":null} "#)
                == .success(TokenGrant(value: SecretValue("a/bA"), expiresIn: nil, refreshToken: nil)))
    }

    @Test("refused grants: the reason is the proxy's words, never the body")
    func refusals() {
        let cases: [(Int, String, TokenFailure.Reason)] = [
            (200, #"{"token_type":"Bearer"}"#, .malformedResponse("no access_token string")),
            (200, #"{"access_token":"a","token_type":"mac"}"#, .malformedResponse("token_type is not Bearer")),
            (200, #"{"access_token":"a"}"#, .malformedResponse("no token_type string")),
            (200, #"{"access_token":"a\r\nX-Injected: 1","token_type":"Bearer"}"#, .malformedResponse("access_token is not 1*VSCHAR")),
            (200, #"{"access_token":"","token_type":"Bearer"}"#, .malformedResponse("access_token is not 1*VSCHAR")),
            (200, #"{"access_token":"a","token_type":"Bearer","expires_in":-5}"#, .malformedResponse("expires_in is not a whole number of seconds")),
            (200, #"{"access_token":"a","token_type":"Bearer","expires_in":1.5}"#, .malformedResponse("expires_in is not a whole number of seconds")),
            (200, #"{"access_token":"a","access_token":"b","token_type":"Bearer"}"#, .malformedResponse("duplicate member name")),
            (200, #"{"access_token":"a","token_type":"Bearer"} x"#, .malformedResponse("trailing data after the JSON value")),
            (200, #"["access_token"]"#, .malformedResponse("not a JSON object")),
            (200, "<html>secret-body</html>", .malformedResponse("invalid JSON value")),
            (400, #"{"error":"invalid_grant","error_description":"refresh token rt-9 revoked"}"#, .rejected(status: 400, error: .invalidGrant)),
            (401, #"{"error":"invalid_client"}"#, .rejected(status: 401, error: .invalidClient)),
            (400, #"{"error":"custom secret-looking code"}"#, .rejected(status: 400, error: nil)),
            (400, "not json", .rejected(status: 400, error: nil)),
            (500, #"{"error":"invalid_grant"}"#, .unexpectedStatus(500)),
        ]
        for (status, body, expected) in cases {
            #expect(parse(status, body) == .failure(expected), "\(status) \(body)")
        }
    }

    @Test("strict JSON: lone surrogates, raw controls, bad escapes, deep nesting refused")
    func strictJSON() throws {
        for bad in [
            #""\ud800""#, "\"a\u{01}\"", #""\x""#, String(repeating: "[", count: 20) + String(repeating: "]", count: 20), "01", "{\"a\":}", "tru",
        ] {
            #expect(throws: TokenJSON.Invalid.self, "\(bad)") { try TokenJSON.parse(Array(bad.utf8)) }
        }
        #expect(try TokenJSON.parse(Array(#""\ud83d\ude00""#.utf8)) == .string(Array("😀".utf8)))
        #expect(
            try TokenJSON.parse(Array(#"{"a":[1,-2.5e3,true,false,null,{}]}"#.utf8))
                == .object(["a": .array([.number("1"), .number("-2.5e3"), .bool(true), .bool(false), .null, .object([:])])]))
    }
}

@Suite("OAuth2 token response reader: framing and the size bound")
struct OAuth2TokenResponseReaderTests {
    private let body = #"{"access_token":"at","token_type":"Bearer"}"#

    @Test("Content-Length, fed one byte at a time")
    func contentLengthSplit() {
        var reader = OAuth2TokenResponseReader()
        let wire = Array("HTTP/1.1 200 OK\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)".utf8)
        for (index, byte) in wire.enumerated() {
            let outcome = reader.receive([byte])
            #expect(outcome == (index == wire.count - 1 ? .complete(status: 200, body: Array(body.utf8)) : .needMore))
        }
    }

    @Test("chunked, 100 Continue first, and a body delimited by the close")
    func otherFramings() {
        var chunked = OAuth2TokenResponseReader()
        #expect(
            chunked.receive(Array("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n".utf8))
                == .needMore)
        #expect(chunked.receive(Array("3\r\n1}\n\r\n0\r\n\r\n".utf8)) == .complete(status: 200, body: Array("{\"a\":1}\n".utf8)))
        var untilClose = OAuth2TokenResponseReader()
        #expect(untilClose.receive(Array("HTTP/1.0 200 OK\r\n\r\n{}".utf8)) == .needMore)
        #expect(untilClose.endOfInput() == .complete(status: 200, body: Array("{}".utf8)))
    }

    @Test("a response cut short, one over the bound, and a malformed head fail")
    func failures() {
        var cut = OAuth2TokenResponseReader()
        #expect(cut.receive(Array("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}".utf8)) == .needMore)
        #expect(cut.endOfInput() == .failed(.closedEarly))
        var large = OAuth2TokenResponseReader(limit: 64)
        #expect(large.receive(Array("HTTP/1.1 200 OK\r\nContent-Length: 65\r\n\r\n".utf8)) == .failed(.responseTooLarge(limit: 64)))
        var chunkedLarge = OAuth2TokenResponseReader(limit: 64)
        #expect(chunkedLarge.receive(Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".utf8)) == .needMore)
        #expect(chunkedLarge.receive([UInt8](repeating: 0x41, count: 40)) == .failed(.responseTooLarge(limit: 64)))
        var malformed = OAuth2TokenResponseReader()
        #expect(malformed.receive(Array("HTTP/1.1 200 OK\nX: y\r\n\r\n".utf8)) == .failed(.malformedResponse("invalid HTTP response head")))
    }
}

@Suite("OAuth2 failures never carry a secret")
struct OAuth2FailureTextTests {
    @Test("every reason's description names the secret and the endpoint's origin, nothing from the response")
    func descriptions() {
        let reasons: [TokenFailure.Reason] = [
            .secretUnavailable("client_secret"), .dnsFailure, .refused, .connectTimeout, .responseTimeout, .tlsVerification("unknown issuer"),
            .tlsHandshake, .closedEarly, .responseTooLarge(limit: 65536), .malformedResponse("no access_token string"),
            .rejected(status: 400, error: .invalidGrant), .rejected(status: 401, error: nil), .unexpectedStatus(503),
        ]
        for reason in reasons {
            let failure = TokenFailure(secret: "partner_token", endpoint: endpoint, reason: reason)
            #expect(failure.description == "'partner_token' from https://auth.example: " + reason.explanation)
            #expect(!failure.reason.code.isEmpty)
        }
        #expect(
            TokenFailure(secret: "p", endpoint: endpoint, reason: .rejected(status: 400, error: .invalidGrant)).description.hasSuffix(
                "(400 invalid_grant)"))
        let token = AccessToken(value: SecretValue("CANARY-access"), generation: 1, validUntil: 0)
        #expect(!"\(token)".contains("CANARY"))
        #expect(
            !String(reflecting: TokenGrant(value: SecretValue("CANARY-a"), expiresIn: 1, refreshToken: SecretValue("CANARY-r"))).contains(
                "CANARY"))
    }
}
