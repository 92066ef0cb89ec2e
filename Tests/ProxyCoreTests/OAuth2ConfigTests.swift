import HTTP1Codec
import ScopePolicy
import Testing

@testable import ScopeConfig

/// Parses `text` as the value of `oauth2:` of the secret `partner_token` (nested as in a config,
/// so line and column are those of a real file).
private func parse(
    _ text: String,
    inputs: [String: SecretSource] = ["partner_client_secret": .env("CS"), "partner_refresh": .store("partner_refresh")]
) throws(ConfigError) -> OAuth2Spec {
    let document =
        "secrets:\n  partner_token:\n    oauth2:\n"
        + text.split(separator: "\n", omittingEmptySubsequences: false).map { "      " + $0 }.joined(separator: "\n")
    let root = try YAMLDocument.parse(document, file: "c.yaml")
    guard case .mapping(let top) = root.value, case .mapping(let secrets) = top[0].value.value,
        case .mapping(let fields) = secrets[0].value.value
    else { preconditionFailure("shape") }
    return try OAuth2Config.parse(fields[0].value, secret: "partner_token", file: "c.yaml", inputSecrets: inputs)
}

private func failure(_ text: String) -> String {
    do {
        _ = try parse(text)
        return "no error"
    } catch {
        return error.description
    }
}

@Suite("Config: oauth2 secrets")
struct OAuth2ConfigTests {
    @Test("the documented example")
    func documentedExample() throws {
        let spec = try parse(
            """
            token_url: "https://auth.partner.example/oauth/token"
            grant: refresh_token
            client_id: my-client
            client_secret: partner_client_secret
            refresh_token: partner_refresh
            scope: "read write"
            audience: "https://api.partner.example"
            client_auth: basic
            """)
        #expect(
            spec
                == OAuth2Spec(
                    endpoint: try Origin.parse("https://auth.partner.example"), path: "/oauth/token",
                    grant: .refreshToken(secret: "partner_refresh"), clientID: "my-client",
                    scope: "read write", audience: "https://api.partner.example",
                    clientAuthentication: .basic(secret: "partner_client_secret")))
        #expect(spec.inputSecrets == ["partner_client_secret", "partner_refresh"])
    }

    @Test("defaults: client_auth basic, no scope or audience; http to loopback; a port and query kept")
    func defaults() throws {
        let spec = try parse(
            """
            token_url: http://127.0.0.1:8443/token?x=1
            grant: client_credentials
            client_id: c
            client_secret: partner_client_secret
            """)
        #expect(spec.clientAuthentication == .basic(secret: "partner_client_secret"))
        #expect(spec.scope == nil && spec.audience == nil)
        #expect(spec.endpoint.description == "http://127.0.0.1:8443")
        #expect(spec.path == "/token?x=1")
        #expect(spec.grant == .clientCredentials)
    }

    @Test("errors point at the value: FILE:LINE:COLUMN")
    func errors() {
        let base = "grant: client_credentials\nclient_id: c\nclient_secret: partner_client_secret"
        let cases: [(String, String)] = [
            (
                "token_url: http://auth.example/token\n" + base,
                "c.yaml:4:18: token_url must be https (http only to a loopback address): credentials travel in the request"
            ),
            (
                "token_url: ftp://auth.example/token\n" + base,
                "c.yaml:4:18: token_url must be an absolute https:// URL, like https://auth.example/oauth/token"
            ),
            (
                "token_url: https://u:p@auth.example/token\n" + base,
                "c.yaml:4:18: token_url must not carry user:password@ (credentials are secrets)"
            ),
            (base, "c.yaml:4:7: the oauth2 of secret 'partner_token' needs 'token_url'"),
            (
                "token_url: https://a.example/t\ngrant: password\nclient_id: c\nclient_secret: partner_client_secret",
                "c.yaml:5:14: unknown grant 'password': use client_credentials, refresh_token or jwt_bearer"
            ),
            (
                "token_url: https://a.example/t\ngrant: refresh_token\nclient_id: c\nclient_secret: partner_client_secret",
                "c.yaml:4:7: grant: refresh_token needs 'refresh_token' (the name of the secret holding it)"
            ),
            (
                "token_url: https://a.example/t\n" + base + "\nrefresh_token: partner_refresh",
                "c.yaml:8:22: refresh_token applies to grant: refresh_token only"
            ),
            (
                "token_url: https://a.example/t\ngrant: client_credentials\nclient_id: c\nclient_secret: partner_clientsecret",
                "c.yaml:7:22: 'partner_clientsecret' names no env, file or store secret in 'secrets', did you mean 'partner_client_secret'?"
            ),
            (
                "token_url: https://a.example/t\ngrant: client_credentials\nclient_id: c\nclient_secret: partner_token",
                "c.yaml:7:22: secret 'partner_token' cannot be computed from itself"
            ),
            (
                "token_url: https://a.example/t\n" + base + "\nclient_auth: basc",
                "c.yaml:8:20: unknown client_auth 'basc': basic (RFC 6749 §2.3.1 HTTP Basic), body, or private_key_jwt (RFC 7523 §2.2), did you mean 'basic'?"
            ),
            (
                "token_url: https://a.example/t\n" + base + "\nscope: \"read  write\"",
                "c.yaml:8:14: scope must be scope tokens separated by single spaces (RFC 6749 §3.3)"
            ),
            (
                "token_url: https://a.example/t\n" + base + "\ntoken_type: x",
                "c.yaml:8:7: unknown key 'token_type' in the oauth2 of secret 'partner_token'"
            ),
        ]
        for (text, expected) in cases {
            #expect(failure(text) == expected)
        }
    }
}
