import ScopePolicy
import Testing

@testable import ScopeConfig

/// `sign:` of a scope, decoded alone: the secrets section first (as the loader does), then the node.
private func decodeSigning(_ sign: String) throws(ConfigError) -> SigningSpec {
    let text = """
        secrets:
          aws_key_id: { env: AWS_ACCESS_KEY_ID }
          aws_secret: { env: AWS_SECRET_ACCESS_KEY }
          aws_session: { env: AWS_SESSION_TOKEN }
        sign:
        \(sign)
        """
    let root = try YAMLDocument.parse(text, file: "test.yaml")
    guard case .mapping(let pairs) = root.value else { fatalError("not a mapping") }
    var decoder = Decoder(file: "test.yaml", home: "/home/tester")
    _ = try decoder.secrets(pairs[0].value)
    return try decoder.signing(pairs[1].value, scope: "aws")
}

@Suite("Config: sign.aws_sigv4 of a scope")
struct SigningConfigTests {
    @Test("the documented example, with and without a session token")
    func valid() throws {
        let full = try decodeSigning(
            """
              aws_sigv4: { service: s3, region: eu-west-1, access_key_id: aws_key_id,
                           secret_access_key: aws_secret, session_token: aws_session }
            """)
        let spec = AWSSigV4Spec(
            service: "s3", region: "eu-west-1", accessKeyIDSecret: "aws_key_id",
            secretAccessKeySecret: "aws_secret", sessionTokenSecret: "aws_session")
        #expect(full == .awsSigV4(spec))
        #expect(full.secretNames == ["aws_key_id", "aws_secret", "aws_session"])
        #expect(spec.payloadHashing == .unsignedPayload)

        let noToken = try decodeSigning(
            """
              aws_sigv4:
                service: execute-api
                region: us-east-1
                access_key_id: aws_key_id
                secret_access_key: aws_secret
            """)
        guard case .awsSigV4(let plain) = noToken else { return }
        #expect(plain.sessionTokenSecret == nil)
        #expect(plain.payloadHashing == .hashBody(limit: 1 << 20))
    }

    @Test(
        "each mistake is named at its line and column",
        arguments: [
            ("  aws_sig4: { service: s3 }", "test.yaml:6:3: unknown key 'aws_sig4' in sign of scope 'aws', did you mean 'aws_sigv4'?"),
            ("  {}", "test.yaml:6:3: sign of scope 'aws' needs a kind of signature: aws_sigv4"),
            (
                "  aws_sigv4: s3",
                "test.yaml:6:14: sign.aws_sigv4 of scope 'aws' must be a mapping: { service, region, credentials: default } or { service, region, access_key_id, secret_access_key }"
            ),
            (
                "  aws_sigv4: { service: s3, region: eu-west-1, access_key_id: aws_key_id }",
                "test.yaml:6:14: sign.aws_sigv4 of scope 'aws' needs 'secret_access_key' (a secret name), or credentials: default (the AWS credential chain)"
            ),
            (
                "  aws_sigv4: { service: s3, region: eu-west-1, access_key_id: aws_key_id, secret_access_key: aws_secert }",
                "test.yaml:6:94: 'aws_secert' names no secret in 'secrets', did you mean 'aws_secret'?"
            ),
            (
                "  aws_sigv4: { service: s3, region: EU-West-1, access_key_id: aws_key_id, secret_access_key: aws_secret }",
                "test.yaml:6:37: invalid AWS region 'EU-West-1': lowercase letters, digits and '-', like eu-west-1, did you mean 'eu-west-1'?"
            ),
            (
                "  aws_sigv4: { service: \"s3/x\", region: eu-west-1, access_key_id: aws_key_id, secret_access_key: aws_secret }",
                "test.yaml:6:25: invalid AWS service 's3/x': lowercase letters, digits and '-', like s3, execute-api or sts"
            ),
            (
                "  aws_sigv4: { service: s3, region: eu-west-1, access_key_id: aws_secret, secret_access_key: aws_secret }",
                "test.yaml:6:94: access_key_id and secret_access_key name the same secret 'aws_secret': they are two values"
            ),
            (
                "  aws_sigv4: { service: s3, region: eu-west-1, access_key_id: aws_key_id, secret_access_key: aws_secret, session_token: aws_secret }",
                "test.yaml:6:121: session_token names the same secret 'aws_secret' as secret_access_key"
            ),
            (
                "  aws_sigv4: { service: s3, region: eu-west-1, access_key_id: aws_key_id, secret_access_key: aws_secret, token: aws_session }",
                "test.yaml:6:106: unknown key 'token' in sign.aws_sigv4 of scope 'aws'"
            ),
        ])
    func invalid(_ sign: String, _ expected: String) {
        do {
            let spec = try decodeSigning(sign)
            Issue.record("decoded \(spec)")
        } catch {
            #expect(error.description == expected)
        }
    }
}
