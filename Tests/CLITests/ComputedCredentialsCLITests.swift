import Foundation
import TestSupport
import Testing

@Suite("CLI: explain and check with credentials the proxy computes (OAuth2, SigV4)")
struct ComputedCredentialsCLITests {
    @Test("explain names the OAuth2 token's endpoint and the SigV4 signer's secrets; no value, no token request")
    func explainComputed() throws {
        let scratch = ScratchDirectory()
        let clientSecret = "CANARY-cs-\(UInt32.random(in: 0...UInt32.max))"
        let awsSecret = "CANARY-aws-\(UInt32.random(in: 0...UInt32.max))"
        let config = scratch.write(
            "c.yaml",
            """
            secrets:
              cs: { env: CC_CS }
              kid: { env: CC_KID }
              skey: { env: CC_SKEY }
              partner_token:
                oauth2: { token_url: "https://auth.partner.example/oauth/token", grant: client_credentials, client_id: me, client_secret: cs }
            scopes:
              - { name: partner, origins: ["https://api.partner.example"], inject: { Authorization: "Bearer ${partner_token}" } }
              - name: aws
                origins: ["https://s3.eu-west-1.amazonaws.com"]
                sign: { aws_sigv4: { service: s3, region: eu-west-1, access_key_id: kid, secret_access_key: skey } }
            tls: { intercept: scoped, ca_dir: \(scratch.path)/ca }
            """)
        let environment = ["CC_CS": clientSecret, "CC_KID": "AKIDEXAMPLE", "CC_SKEY": awsSecret]
        let token = try runBinary(["explain", "--config", config, "https://api.partner.example/v1"], environment: environment)
        #expect(token.status == 0, "\(token.stderr)")
        #expect(token.stdout.contains("partner_token is an OAuth2 access token from https://auth.partner.example/oauth/token"))
        let signed = try runBinary(
            ["explain", "--config", config, "-X", "PUT", "https://s3.eu-west-1.amazonaws.com/b/k"],
            environment: environment)
        #expect(signed.status == 0, "\(signed.stderr)")
        #expect(signed.stdout.contains("AWS SigV4 by scope aws: service s3, region eu-west-1"))
        #expect(signed.stdout.contains("X-Amz-Content-Sha256: UNSIGNED-PAYLOAD"))
        for output in [token.stdout + token.stderr, signed.stdout + signed.stderr] {
            #expect(!output.contains(clientSecret) && !output.contains(awsSecret) && !output.contains("AKIDEXAMPLE"))
        }
        let check = try runBinary(["check", "--config", config], environment: environment)
        #expect(check.status == 0, "\(check.stderr)")
    }

    @Test("config errors: sign with an injected Authorization, an oauth2 secret with a placeholder, an unknown grant")
    func computedConfigErrors() throws {
        let scratch = ScratchDirectory()
        let both = scratch.write(
            "both.yaml",
            """
            secrets: { kid: { env: A }, skey: { env: B } }
            scopes:
              - name: aws
                origins: ["https://s3.example"]
                inject: { Authorization: "x ${kid}" }
                sign: { aws_sigv4: { service: s3, region: eu-west-1, access_key_id: kid, secret_access_key: skey } }
            """)
        let bothOutcome = try runBinary(["check", "--config", both])
        #expect(bothOutcome.status == 2)
        #expect(bothOutcome.stderr.contains("both.yaml:6:") && bothOutcome.stderr.contains("both signs and injects Authorization"))
        let placeholder = scratch.write(
            "ph.yaml",
            """
            secrets:
              cs: { env: A }
              tok: { oauth2: { token_url: "https://a.example/t", grant: client_credentials, client_id: c, client_secret: cs }, placeholder: true }
            """)
        let placeholderOutcome = try runBinary(["check", "--config", placeholder])
        #expect(placeholderOutcome.status == 2)
        #expect(placeholderOutcome.stderr.contains("placeholder does not apply to an oauth2 secret"))
    }
}
