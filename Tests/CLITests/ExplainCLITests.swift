import Foundation
import TestSupport
import Testing

@Suite("CLI: explain prints the decision without sending anything")
struct ExplainCLITests {
    @Test(
        "explain -X -H --location on a config: the scope, the injection by secret name, the stripped header and the redirect's fate; no value printed"
    )
    func explainsFromTheCommandLine() throws {
        let scratch = ScratchDirectory()
        let token = "CANARY-explain-\(UInt32.random(in: 0...UInt32.max))"
        let config = scratch.write(
            "c.yaml",
            """
            secrets: { token: { env: EXPLAIN_TOKEN } }
            scopes: [{ name: api, origins: ["https://api.example"], inject: { Authorization: "Bearer ${token}" } }]
            tls: { intercept: scoped }
            """)
        let outcome = try runBinary(
            [
                "explain", "--config", config, "-X", "POST", "-H", "Cookie: sid=\(token)",
                "--location", "https://elsewhere.example/x", "https://api.example/v1/items",
            ],
            environment: ["EXPLAIN_TOKEN": token])
        #expect(outcome.status == 0, "\(outcome.stderr)")
        #expect(outcome.stdout.contains("api"))
        #expect(outcome.stdout.contains("Authorization"))
        #expect(outcome.stdout.contains("Bearer ${token}"), "the secret is shown by name")
        #expect(outcome.stdout.lowercased().contains("cookie"))
        #expect(outcome.stdout.contains("https://elsewhere.example"))
        #expect(!(outcome.stdout + outcome.stderr).contains(token), "explain never prints a value")

        let refused = try runBinary(["explain", "--config", config, "ftp://api.example/"])
        #expect(refused.status == 2)
    }

    @Test("explain for a scope whose env secret is unset says run refuses to start, and run does exit 1")
    func unsetSecretAgreesWithRun() throws {
        let scratch = ScratchDirectory()
        let config = scratch.write(
            "c.yaml",
            """
            secrets: { token: { env: EXPLAIN_CLI_UNSET_TOKEN } }
            scopes: [{ name: api, origins: ["https://api.example"], inject: { Authorization: "Bearer ${token}" } }]
            tls: { intercept: scoped, ca_dir: \(scratch.path)/ca }
            """)
        let explained = try runBinary(["explain", "--config", config, "https://api.example/v1"], removing: ["EXPLAIN_CLI_UNSET_TOKEN"])
        #expect(explained.status == 0)
        #expect(
            explained.stdout.contains("secret 'token': environment variable EXPLAIN_CLI_UNSET_TOKEN is not set; run would refuse to start (exit 1)"),
            "\(explained.stdout)")
        #expect(!explained.stdout.contains("credential_unavailable"))
        let run = try runBinary(["run", "--config", config, "--listen", "127.0.0.1:0"], removing: ["EXPLAIN_CLI_UNSET_TOKEN"])
        #expect(!run.timedOut)
        #expect(run.status == 1, "what explain said: \(run.stderr)")
        #expect(run.stderr.contains("secret 'token': environment variable EXPLAIN_CLI_UNSET_TOKEN is not set"))
    }

    @Test("explain --client: the scopes that serve that client; an unknown name exits 2 with a did-you-mean")
    func explainForClient() throws {
        let scratch = ScratchDirectory()
        let config = scratch.write(
            "c.yaml",
            """
            secrets: { token: { env: EXPLAIN_TOKEN }, key: { env: AGENT_KEY } }
            clients:
              - { name: agent, auth: { bearer: key } }
              - { name: ci, uid: 1001 }
            scopes: [{ name: api, origins: ["https://api.example"], inject: { Authorization: "Bearer ${token}" }, clients: [agent] }]
            tls: { intercept: scoped }
            """)
        let served = try runBinary(["explain", "--config", config, "--client", "agent", "https://api.example/v1"])
        #expect(served.status == 0, "\(served.stderr)")
        #expect(served.stdout.contains("Authorization: Bearer ${token}"))
        let other = try runBinary(["explain", "--config", config, "--client", "ci", "-H", "X-API-Key: k", "https://api.example/v1"])
        #expect(other.status == 0)
        #expect(other.stdout.contains("scope api: the scope's clients do not include this client"))
        #expect(other.stdout.contains("injected      nothing"))
        let unknown = try runBinary(["explain", "--config", config, "--client", "agnet", "https://api.example/v1"])
        #expect(unknown.status == 2)
        #expect(unknown.stdout.contains("no client named 'agnet', did you mean 'agent'?"))
    }
}
