import ProxyCore
import ScopePolicy
import Testing

@testable import ScopeConfig

/// The keys of secrets that cannot leave (docs/configuration.md): `placeholder` and `env_var` on a secret, `substitute` on a scope, `scrub` and
/// `guard` at the top. Every error has its fixture in Fixtures/ (exact FILE:LINE:COLUMN); these
/// are the valid readings.
@Suite("Config: placeholders, substitute, scrub and guard")
struct PlaceholderConfigTests {
    static let yaml = """
        secrets:
          zeta_token: { env: ZETA_TOKEN, placeholder: true }
          github_token: { store: github, placeholder: true, env_var: GITHUB_TOKEN }
          plain_key: { env: PLAIN_KEY, placeholder: false }
          openai_key:
            file: keys/openai
            placeholder: true
            env_var: OPENAI_API_KEY
        scopes:
          - name: github
            origins: ["https://api.github.com"]
            substitute: [github_token]
          - name: ai
            origins: ["https://api.openai.com", "http://127.0.0.1:9000"]
            substitute: [openai_key, zeta_token]
            inject: { X-Plain: "${plain_key}" }

        """

    func load(_ text: String) throws -> ProxyConfiguration {
        try ConfigLoader.parse(text, file: "/etc/scopeproxy/p.yaml", home: "/home/tester")
    }

    @Test("placeholder secrets in name order with their env_var; placeholder: false is none")
    func placeholders() throws {
        let config = try load(Self.yaml)
        #expect(
            config.placeholders == [
                PlaceholderSecret(secret: "github_token", environmentVariable: "GITHUB_TOKEN"),
                PlaceholderSecret(secret: "openai_key", environmentVariable: "OPENAI_API_KEY"),
                PlaceholderSecret(secret: "zeta_token"),
            ])
        // The sources are read as before: the new keys change nothing about where a value comes from.
        #expect(config.secrets["openai_key"] == .file(path: "/etc/scopeproxy/keys/openai", allowGroupRead: false))
        #expect(config.secrets["plain_key"] == .env("PLAIN_KEY"))
    }

    @Test("substitute: the scope's set, and the guard lets those secrets reach its origins")
    func substitute() throws {
        let config = try load(Self.yaml)
        let scopes = Dictionary(uniqueKeysWithValues: config.policy.scopes.map { ($0.name, $0) })
        #expect(scopes["github"]?.substitute == ["github_token"])
        #expect(scopes["ai"]?.substitute == ["openai_key", "zeta_token"])
        #expect(scopes["ai"]?.secretNames == ["openai_key", "zeta_token", "plain_key"])
        #expect(scopes["github"]?.inject.isEmpty == true)
    }

    @Test(
        "scrub and guard: on by default; every word read as a word (YAML 1.1 would make on/off booleans)",
        arguments: [
            ("", ScrubMode.on, GuardMode.on),
            ("scrub: on\nguard: on\n", .on, .on),
            ("scrub: strict\nguard: off\n", .strict, .off),
            ("scrub: off\n", .off, .on),
            ("guard: off\n", .on, .off),
            ("scrub: \"off\"\nguard: 'on'\n", .off, .on),
        ])
    func protection(_ text: String, _ scrub: ScrubMode, _ guardMode: GuardMode) throws {
        let config = try load(text)
        #expect(config.protection == SecretProtection(scrub: scrub, guardMode: guardMode))
    }

    @Test("a misspelt new top-level key is an unknown key with a suggestion")
    func unknownKeys() {
        #expect(
            throws: ConfigError(
                file: "/etc/scopeproxy/p.yaml", mark: Mark(line: 1, column: 1),
                message: "unknown key 'gaurd' in the config, did you mean 'guard'?")
        ) {
            try load("gaurd: on\n")
        }
        #expect(
            throws: ConfigError(
                file: "/etc/scopeproxy/p.yaml", mark: Mark(line: 2, column: 34),
                message: "unknown key 'env_vars' in secret 'github_token', did you mean 'env_var'?")
        ) {
            try load("secrets:\n  github_token: { store: github, env_vars: X }\n")
        }
        #expect(
            throws: ConfigError(
                file: "/etc/scopeproxy/p.yaml", mark: Mark(line: 2, column: 48),
                message: "unknown key 'substitue' in a scope, did you mean 'substitute'?")
        ) {
            try load("scopes:\n  - { name: a, origins: [\"https://a.example\"], substitue: [] }\n")
        }
    }

    @Test("a placeholder no scope substitutes is valid (check warns about it); an empty substitute list is none")
    func unusedPlaceholder() throws {
        let config = try load(
            """
            secrets: { lonely: { env: LONELY, placeholder: true, env_var: LONELY_TOKEN } }
            scopes: [{ name: a, origins: ["https://a.example"], substitute: [] }]
            """)
        #expect(config.placeholders == [PlaceholderSecret(secret: "lonely", environmentVariable: "LONELY_TOKEN")])
        #expect(config.policy.scopes.first?.substitute == [])
    }

    @Test(
        "shell variable names",
        arguments: [
            ("GITHUB_TOKEN", true), ("_x", true), ("a1", true), ("A", true),
            ("1A", false), ("", false), ("GH-TOKEN", false), ("GH.TOKEN", false), ("GH TOKEN", false), ("ÄPI", false), ("X=1", false),
        ])
    func shellNames(_ name: String, _ valid: Bool) {
        #expect(Decoder.isShellVariableName(name) == valid)
    }
}
