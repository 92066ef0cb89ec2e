import HTTP1Codec
import ScopePolicy
import Testing

@testable import ScopeConfig

private func load(_ yaml: String) throws(ConfigError) -> ProxyConfiguration {
    try ConfigLoader.parse(yaml, file: "c.yaml", home: "/home/tester")
}

private func loadError(_ yaml: String) -> String {
    do {
        _ = try load(yaml)
        return "loaded"
    } catch {
        return error.description
    }
}

/// The credential sources of docs/credentials.md: each example reads as documented, and each
/// mistake is refused at its FILE:LINE:COLUMN with the fix.
@Suite("Config: command, github_app, jwt_bearer, private_key_jwt and SigV4 credentials")
struct CredentialSourceConfigTests {
    @Test("a command secret: argv, ttl, timeout, env; defaults 5m and 10s")
    func command() throws {
        let config = try load(
            """
            secrets:
              gh_token: { command: ["gh", "auth", "token"], ttl: 10m, timeout: 3s, env: [GH_HOST] }
              plain: { command: [op, read, "op://vault/item/token"] }
            """)
        #expect(
            config.computed["gh_token"]
                == .command(CommandSecretSpec(argv: ["gh", "auth", "token"], ttlSeconds: 600, timeoutMilliseconds: 3000, environment: ["GH_HOST"])))
        #expect(config.computed["plain"] == .command(CommandSecretSpec(argv: ["op", "read", "op://vault/item/token"])))
        #expect(config.secrets.isEmpty)
    }

    @Test("a GitHub App: defaults to api.github.com; GHES keeps its /api/v3 prefix; permissions sorted")
    func githubApp() throws {
        let config = try load(
            """
            secrets:
              key: { file: /k.pem }
              app:
                github_app: { app_id: "12345", installation_id: "678", private_key: key }
              ghes:
                github_app: { app_id: Iv1.abc, installation_id: 9, private_key: key, api_url: "https://ghe.example/api/v3/",
                              permissions: { pull_requests: write, contents: read }, repositories: [scopeproxy] }
            """)
        guard case .githubApp(let app) = config.computed["app"], case .githubApp(let ghes) = config.computed["ghes"] else {
            Issue.record("not github_app secrets")
            return
        }
        #expect(app.api.description == "https://api.github.com" && app.pathPrefix.isEmpty && app.privateKey == "key")
        #expect(ghes.api.description == "https://ghe.example" && ghes.pathPrefix == "/api/v3")
        #expect(ghes.permissions.map(\.name) == ["contents", "pull_requests"] && ghes.repositories == ["scopeproxy"])
        #expect(config.privateKeySecrets == ["key"])
    }

    @Test("jwt_bearer (RFC 7523 §2.1) and private_key_jwt (§2.2)")
    func jwtGrants() throws {
        let config = try load(
            """
            secrets:
              sa_key: { file: /sa.pem }
              cs: { env: CS }
              sa_token:
                oauth2: { grant: jwt_bearer, token_url: "https://oauth2.example/token", private_key: sa_key, issuer: "sa@x.iam", scope: "s" }
              partner:
                oauth2: { grant: client_credentials, token_url: "https://auth.example/t", client_id: c1, client_auth: private_key_jwt,
                          private_key: sa_key, key_id: k1, alg: ES256 }
              both:
                oauth2: { grant: jwt_bearer, token_url: "https://oauth2.example/token", private_key: sa_key, issuer: i,
                          client_id: c2, client_secret: cs }
            """)
        guard case .oauth2(let bearer) = config.computed["sa_token"], case .oauth2(let partner) = config.computed["partner"],
            case .oauth2(let both) = config.computed["both"]
        else {
            Issue.record("not oauth2 secrets")
            return
        }
        #expect(bearer.grant == .jwtBearer(.init(key: JWTKeySpec(privateKey: "sa_key"), issuer: "sa@x.iam")))
        #expect(bearer.clientAuthentication == .none && bearer.clientID == nil && bearer.scope == "s")
        #expect(partner.clientAuthentication == .privateKeyJWT(JWTKeySpec(privateKey: "sa_key", keyID: "k1", algorithm: "ES256")))
        #expect(both.clientAuthentication == .basic(secret: "cs"))
        #expect(partner.inputSecrets == ["sa_key"])
    }

    @Test("SigV4 credentials: default, a profile; one computed secret per chain, shared by the scopes using it")
    func awsCredentials() throws {
        let config = try load(
            """
            scopes:
              - { name: a, origins: ["https://s3.eu-west-1.amazonaws.com"], sign: { aws_sigv4: { service: s3, region: eu-west-1, credentials: default } } }
              - { name: b, origins: ["https://sqs.eu-west-1.amazonaws.com"], sign: { aws_sigv4: { service: sqs, region: eu-west-1, credentials: default } } }
              - { name: c, origins: ["https://s3.us-east-1.amazonaws.com"], sign: { aws_sigv4: { service: s3, region: us-east-1, credentials: { profile: dev } } } }
            """)
        #expect(config.computed == ["aws:default": .awsChain(.defaultChain), "aws:profile:dev": .awsChain(.profile("dev"))])
        #expect(config.policy.scopes[0].signingChain == .defaultChain)
        #expect(config.policy.scopes[0].secretNames == ["aws:default:access_key_id", "aws:default:session_token"])
    }

    @Test(
        "each mistake is said at its line and column, with the fix",
        arguments: [
            ("secrets:\n  t: { command: \"gh auth token\" }\n", "c.yaml:2:17: command of secret 't' is a list (argv, never run by a shell)"),
            (
                "secrets:\n  t: { command: [\"gh auth token\"] }\n",
                "c.yaml:2:17: command is argv, not a shell line: split it, command: [\"gh\", \"auth\", \"token\"]"
            ),
            ("secrets:\n  t: { command: [] }\n", "c.yaml:2:17: command of secret 't' needs a program"),
            ("secrets:\n  t: { command: [gh], ttl: 500ms }\n", "c.yaml:2:28: ttl is at least 1s"),
            ("secrets:\n  t: { command: [gh], timeout: 10m }\n", "c.yaml:2:32: timeout is at most 5m"),
            ("secrets:\n  t: { command: [gh], env: GH_HOST }\n", "c.yaml:2:28: env of a command secret lists the variables"),
            ("secrets:\n  t: { env: T, ttl: 1m }\n", "c.yaml:2:21: ttl applies to a command secret only"),
            ("secrets:\n  t: { command: [gh], placeholder: true }\n", "c.yaml:2:36: placeholder does not apply to a command secret"),
            (
                "secrets:\n  k: { env: K }\n  a: { github_app: { app_id: '1', installation_id: '2', private_key: k } }\n",
                "c.yaml:3:70: private key 'k' is an env secret: a private key is a file or store secret holding the PEM"
            ),
            (
                "secrets:\n  k: { file: /k }\n  a: { github_app: { app_id: '1', installation_id: abc, private_key: k } }\n",
                "c.yaml:3:52: installation_id is a number"
            ),
            (
                "secrets:\n  k: { file: /k }\n  a: { github_app: { app_id: '1', installation_id: '2', private_key: k, api_url: 'http://ghe.example' } }\n",
                "c.yaml:3:82: api_url must be https (http only to a loopback address)"
            ),
            (
                "secrets:\n  k: { file: /k }\n  a: { github_app: { app_id: '1', installation_id: '2', private_key: k, permissions: { contents: reed } } }\n",
                "c.yaml:3:98: permission 'contents' is read, write or admin, did you mean 'read'?"
            ),
            (
                "secrets:\n  k: { file: /k }\n  t: { oauth2: { grant: jwt_bearer, token_url: 'https://a/t', issuer: i } }\n",
                "c.yaml:3:16: grant: jwt_bearer needs 'private_key'"
            ),
            (
                "secrets:\n  k: { file: /k }\n  t: { oauth2: { grant: jwt_bearer, token_url: 'https://a/t', private_key: k, issuer: i, alg: HS256 } }\n",
                "c.yaml:3:95: unknown alg 'HS256': RS256 (an RSA key) or ES256 (a P-256 key)"
            ),
            (
                "secrets:\n  k: { file: /k }\n  t: { oauth2: { grant: client_credentials, token_url: 'https://a/t', client_id: c, client_auth: private_key_jwt } }\n",
                "c.yaml:3:16: client_auth: private_key_jwt needs 'private_key'"
            ),
            (
                "secrets:\n  k: { file: /k }\n  t: { oauth2: { grant: client_credentials, token_url: 'https://a/t', client_id: c, issuer: i } }\n",
                "c.yaml:3:93: issuer is a claim of the jwt_bearer grant's assertion: grant: jwt_bearer"
            ),
            (
                "secrets:\n  k: { file: /k }\n  t: { oauth2: { grant: jwt_bearer, token_url: 'https://a/t', private_key: k, issuer: i } }\n"
                    + "scopes:\n  - { name: s, origins: ['https://x.example'], inject: { X-K: '${k}' } }\n",
                "c.yaml:5:63: '${k}' is a private key the proxy signs with: it never goes into a header"
            ),
            (
                "scopes:\n  - { name: s, origins: ['https://s3.example'], sign: { aws_sigv4: { service: s3, region: r, credentials: env } } }\n",
                "c.yaml:2:107: credentials is default (the AWS credential chain) or { profile: NAME }, not 'env'"
            ),
            (
                "secrets:\n  a: { env: A }\n"
                    + "scopes:\n  - { name: s, origins: ['https://s3.example'], sign: { aws_sigv4: { service: s3, region: r, credentials: default, access_key_id: a } } }\n",
                "c.yaml:4:131: access_key_id and credentials are two ways to give the keys: keep one"
            ),
        ])
    func mistakes(_ yaml: String, _ expected: String) {
        let message = loadError(yaml)
        #expect(message.hasPrefix(expected), "\(message)")
    }
}
