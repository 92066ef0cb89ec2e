import Foundation
import ScopeConfig
import TestSupport
import Testing

/// What a new user gets wrong, said by the binary with the fix (docs/configuration.md): nothing is
/// silently wrong, and no message carries a secret's value.
@Suite("CLI: mistakes said with their fix", .serialized)
struct FixHintCLITests {
    @Test("config print of a config named by a relative path, saved in another directory, means the same: every path absolute")
    func printedElsewhereMeansTheSame() throws {
        let scratch = ScratchDirectory()
        try FileManager.default.createDirectory(atPath: scratch.path + "/mine", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: scratch.path + "/other", withIntermediateDirectories: true)
        scratch.write("mine/tok.txt", "CANARY-printed-token\n")
        scratch.write(
            "mine/my.yaml",
            """
            store_dir: store
            secrets: { t: { file: tok.txt } }
            clients: [{ name: tool, tls_client: { ca: clients.pem, subject: "CN=tool" } }]
            tls: { ca_dir: ca, upstream_ca: roots.pem }
            log: { output: access.log }
            """)
        let printed = try runBinary(["config", "print", "--config", "mine/my.yaml"], workingDirectory: scratch.path)
        #expect(printed.status == 0, "\(printed.stderr)")
        for resolved in [
            "store_dir: \(scratch.path)/mine/store", "file: \(scratch.path)/mine/tok.txt", "ca: \(scratch.path)/mine/clients.pem",
            "ca_dir: \(scratch.path)/mine/ca", "upstream_ca: \(scratch.path)/mine/roots.pem", "output: \(scratch.path)/mine/access.log",
        ] {
            #expect(printed.stdout.contains(resolved), "\(resolved) in:\n\(printed.stdout)")
        }
        #expect(!printed.stdout.contains("CANARY"))
        let saved = scratch.write("other/printed.yaml", printed.stdout)
        let original = try ConfigLoader.load(path: scratch.path + "/mine/my.yaml", home: "/home/t")
        let reread = try ConfigLoader.load(path: saved, home: "/home/t")
        #expect(reread.secrets == original.secrets)
        #expect(reread.log.output == original.log.output)
        #expect(reread.tls == original.tls)
        #expect(reread.clients == original.clients)
        #expect(reread.storeDirectory == original.storeDirectory)
    }

    @Test("check refuses an env name written as $NAME or ${NAME}, at its position, saying to write the bare name")
    func environmentVariableWithDollar() throws {
        let scratch = ScratchDirectory()
        for (written, column) in [("$MY_API_TOKEN", 21), ("\"${MY_API_TOKEN}\"", 21)] {
            let config = scratch.write("env.yaml", "secrets:\n  api_token: { env: \(written) }\n")
            let outcome = try runBinary(["check", "--config", config])
            #expect(outcome.status == 2, "\(written): \(outcome.stderr)")
            #expect(
                outcome.stderr.contains("env.yaml:2:\(column): env '")
                    && outcome.stderr.contains("write env: MY_API_TOKEN, the variable's name without '$'"),
                "\(written): \(outcome.stderr)")
        }
    }

    @Test("check warns about a secret too short to scrub or guard, as run logs it, naming it without its value (exit 0)")
    func shortSecretWarned() throws {
        let scratch = ScratchDirectory()
        scratch.write("short.txt", "CANARY1\n")
        let config = scratch.write(
            "c.yaml",
            """
            secrets: { short: { file: short.txt }, long: { env: SCOPEPROXY_TEST_LONG_SECRET } }
            scopes: [{ name: api, origins: ["https://api.example"], inject: { X-Key: "${short}${long}" } }]
            """)
        let outcome = try runBinary(["check", "--config", config], environment: ["SCOPEPROXY_TEST_LONG_SECRET": "CANARY-long-enough-value"])
        #expect(outcome.status == 0, "\(outcome.stderr)")
        #expect(
            outcome.stderr.contains("warning: secret 'short' (7 bytes) is too short for the response scrub and the egress guard to look for"),
            "\(outcome.stderr)")
        #expect(outcome.stderr.contains("neither scrubbed nor guarded"))
        #expect(!outcome.stderr.contains("'long'"), "\(outcome.stderr)")
        #expect(!(outcome.stdout + outcome.stderr).contains("CANARY"))
    }

    @Test("secret set with the secret's name instead of its store entry is refused with the right command, stdin unread, nothing stored")
    func secretSetWithTheSecretsName() throws {
        let scratch = ScratchDirectory()
        let config = scratch.write("github.yaml", "store_dir: \(scratch.path)/store\nsecrets: { github_token: { store: github } }\n")
        let refused = try runBinary(["secret", "set", "--config", config, "github_token"], stdin: "CANARY-typed-value\n")
        #expect(refused.status == 2)
        #expect(
            refused.stderr.contains("secret 'github_token' reads store entry 'github': scopeproxy secret set github --config \(config)"),
            "\(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: scratch.path + "/store/github_token"))
        #expect(!refused.stderr.contains("CANARY"))

        let unread = try runBinary(["secret", "set", "--config", config, "later"], stdin: "CANARY-later-value\n")
        #expect(unread.status == 0, "\(unread.stderr)")
        #expect(unread.stderr.contains("warning: no secret of \(config) reads store entry 'later'"), "\(unread.stderr)")
        #expect(FileManager.default.fileExists(atPath: scratch.path + "/store/later"), "an entry for a config not written yet is stored")
        #expect(!unread.stderr.contains("CANARY"))

        let read = try runBinary(["secret", "set", "--config", config, "github"], stdin: "CANARY-right-value\n")
        #expect(read.status == 0)
        #expect(read.stderr.isEmpty, "\(read.stderr)")

        // secret rm with the secret's name finds no entry, and says which entry the secret reads.
        let removed = try runBinary(["secret", "rm", "--config", config, "github_token"])
        #expect(removed.status == 1)
        #expect(
            removed.stderr.contains("(secret 'github_token' reads store entry 'github': scopeproxy secret rm github --config \(config))"),
            "\(removed.stderr)")
        #expect(FileManager.default.fileExists(atPath: scratch.path + "/store/github"))
    }

    @Test("check: origin errors, misplaced keys and a bare secret value are each said with the fix")
    func messagesWithTheFix() throws {
        let scratch = ScratchDirectory()
        let cases: [(yaml: String, expected: String)] = [
            ("scopes: [{ name: a, origins: [\"http://127.0.0.1:99999\"] }]", "port 99999 is out of range: use 1-65535"),
            ("scopes: [{ name: a, origins: [\"https://localhost:18444?x=1\"] }]", "an origin has no query; write 'https://localhost:18444'"),
            (
                "scopes:\n  - name: a\n    origins: [\"https://a.example\"]\n    tls: { intercept: scoped }\n",
                "4:5: unknown key 'tls' in a scope: 'tls' is a top-level key: unindent it to the start of the line"
            ),
            (
                "intercept: scoped\n",
                "1:1: unknown key 'intercept' in the config: 'intercept' belongs under 'tls:', did you mean tls: { intercept: ... }?"
            ),
            (
                "secrets: { t: { env: T } }\nscopes:\n  - name: a\n    origins: [\"https://a.example\"]\n    inject:\n    Authorization: \"Bearer ${t}\"\n",
                "headers go under inject: (indent it under 'inject:')"
            ),
            (
                "secrets:\n  api_token: MY_API_TOKEN\n",
                "a secret names its source: api_token: { env: MY_API_TOKEN } (or file:, store:, command:, oauth2:, github_app:)"
            ),
        ]
        for (yaml, expected) in cases {
            let config = scratch.write("c.yaml", yaml)
            let outcome = try runBinary(["check", "--config", config])
            #expect(outcome.status == 2, "\(yaml): \(outcome.stderr)")
            #expect(outcome.stderr.contains(expected), "\(yaml): \(outcome.stderr)")
        }
    }
}
