import Foundation
import Testing

@testable import ScopeConfig

private func loadError(_ yaml: String) -> String? {
    do {
        _ = try ConfigLoader.parse(yaml, file: "t.yaml", home: "/home/tester")
        return nil
    } catch {
        return error.description
    }
}

@Suite("Config: a misplaced key or mistyped value says where it belongs")
struct ConfigFixHintTests {
    @Test(
        "every key of a section, written at the top level, points to its section",
        arguments: Decoder.sectionKeys.flatMap { section in section.keys.map { (section.section, $0) } }.filter {
            Decoder.section(owning: $0.1) != nil
        })
    func sectionKeyAtTopLevel(_ section: String, _ key: String) {
        let message = loadError("\(key): x\n")
        #expect(
            message?.hasSuffix("unknown key '\(key)' in the config: '\(key)' belongs under '\(section):', did you mean \(section): { \(key): ... }?")
                == true,
            "\(message ?? "loaded")")
    }

    /// Each mapping section, as YAML with KEY in it (one level down).
    static let nestedSections: [(context: String, yaml: String)] = [
        ("a scope", "scopes:\n  - name: a\n    origins: [\"https://a.example\"]\n    KEY: x\n"),
        ("tls", "tls:\n  KEY: x\n"), ("log", "log:\n  KEY: x\n"), ("timeouts", "timeouts:\n  KEY: x\n"), ("limits", "limits:\n  KEY: x\n"),
        ("redirects", "redirects:\n  KEY: x\n"), ("proxy_auth", "proxy_auth:\n  KEY: x\n"), ("a client", "clients:\n  - name: c\n    KEY: x\n"),
        ("a route", "routes:\n  - KEY: x\n"), ("secret 's'", "secrets:\n  s:\n    KEY: x\n"),
    ]

    @Test(
        "every top-level key, indented inside any section, says to unindent it",
        arguments: Decoder.topLevelKeys.filter { !["listen"].contains($0) })
    func topLevelKeyIndented(_ key: String) {
        for (context, yaml) in Self.nestedSections
        where !(context == "a scope" && key == "clients") && !(context == "proxy_auth" && key == "secrets")
            && !(context == "a client" && key == "egress")
            // One edit from a command secret's `timeout`: read as that misspelling (did you mean 'timeout'?).
            && !(context == "secret 's'" && key == "timeouts")
        {
            let message = loadError(yaml.replacingOccurrences(of: "KEY", with: key))
            #expect(
                message?.contains("unknown key '\(key)' in \(context): '\(key)' is a top-level key: unindent it to the start of the line") == true,
                "\(context): \(message ?? "loaded")")
        }
    }

    @Test(
        "a header written at a scope's level says it goes under inject:",
        arguments: ["Authorization", "authorization", "X-Api-Key", "x-api-key", "Private-Token", "Cookie", "user-agent"])
    func headerAtScopeLevel(_ header: String) {
        let message = loadError("scopes:\n  - name: a\n    origins: [\"https://a.example\"]\n    inject:\n    \(header): v\n")
        #expect(message?.hasSuffix("headers go under inject: (indent it under 'inject:')") == true, "\(message ?? "loaded")")
    }

    @Test(
        "a misspelt key still gets its suggestion, not a placement hint",
        arguments: [
            ("scopes:\n  - name: a\n    origins: [\"https://a.example\"]\n    pahts: x\n", "unknown key 'pahts' in a scope, did you mean 'paths'?"),
            ("scopes:\n  - name: a\n    origins: [\"https://a.example\"]\n    Paths: x\n", "unknown key 'Paths' in a scope, did you mean 'paths'?"),
            ("proxy_auth: { secrets: t }\n", "unknown key 'secrets' in proxy_auth, did you mean 'secret'?"),
        ])
    func misspellingNotPlacement(_ yaml: String, _ expected: String) {
        let message = loadError(yaml)
        #expect(message?.hasSuffix(expected) == true, "\(message ?? "loaded")")
    }

    struct NameCase: Sendable, CustomStringConvertible {
        let written: String
        let message: String?
        var description: String { written }
    }

    static let environmentNames: [NameCase] = [
        NameCase(written: "MY_TOKEN", message: nil), NameCase(written: "_x1", message: nil),
        NameCase(written: "$MY_TOKEN", message: "'$MY_TOKEN' is not a variable name: write KEY: MY_TOKEN, the variable's name without '$'"),
        NameCase(written: "${MY_TOKEN}", message: "'${MY_TOKEN}' is not a variable name: write KEY: MY_TOKEN, the variable's name without '$'"),
        NameCase(written: "1TOKEN", message: "'1TOKEN' is not NOUN: use letters, digits and '_', not starting with a digit"),
        NameCase(written: "MY-TOKEN", message: "'MY-TOKEN' is not NOUN: use letters, digits and '_', not starting with a digit"),
        NameCase(written: "$", message: "'$' is not NOUN: use letters, digits and '_', not starting with a digit"),
        NameCase(written: "${}", message: "'${}' is not NOUN: use letters, digits and '_', not starting with a digit"),
    ]

    @Test("env: and env_var: take a variable's name, at its position with the fix", arguments: environmentNames)
    func environmentName(_ name: NameCase) {
        let env = loadError("secrets:\n  s: { env: \"\(name.written)\" }\n")
        let envVar = loadError("secrets:\n  s: { env: S, placeholder: true, env_var: \"\(name.written)\" }\n")
        if let expected = name.message {
            #expect(
                env == "t.yaml:2:13: env "
                    + expected.replacingOccurrences(of: "KEY", with: "env")
                    .replacingOccurrences(of: "NOUN", with: "an environment variable name"))
            #expect(
                envVar == "t.yaml:2:44: env_var "
                    + expected.replacingOccurrences(of: "KEY", with: "env_var")
                    .replacingOccurrences(of: "NOUN", with: "a shell variable name"))
        } else {
            #expect(env == nil)
            #expect(envVar == nil)
        }
    }

    @Test(
        "an origin's port out of range, its query and its fragment are each named; a path keeps the paths hint",
        arguments: [
            (
                "http://127.0.0.1:99999",
                "invalid origin 'http://127.0.0.1:99999': port 99999 is out of range: use 1-65535 (expected scheme://host[:port])"
            ),
            ("http://127.0.0.1:0", "invalid origin 'http://127.0.0.1:0': port 0 is out of range: use 1-65535 (expected scheme://host[:port])"),
            (
                "https://[::1]:123456/x",
                "invalid origin 'https://[::1]:123456/x': port 123456 is out of range: use 1-65535 (expected scheme://host[:port])"
            ),
            ("https://localhost:18444?x=1", "invalid origin 'https://localhost:18444?x=1': an origin has no query; write 'https://localhost:18444'"),
            (
                "https://localhost:18444/?x=1",
                "invalid origin 'https://localhost:18444/?x=1': an origin has no query; write 'https://localhost:18444'"
            ),
            ("https://a.example#top", "invalid origin 'https://a.example#top': an origin has no fragment; write 'https://a.example'"),
            (
                "https://a.example/v1",
                "invalid origin 'https://a.example/v1': an origin has no path; write 'https://a.example' in origins and add paths: [\"/v1/\"] to the scope"
            ),
        ])
    func originProblems(_ text: String, _ expected: String) {
        #expect(Decoder.originProblem(text) == expected)
    }

    @Test("a secret written as a bare value says how a secret names its source")
    func bareSecretValue() {
        #expect(
            loadError("secrets:\n  api_token: MY_API_TOKEN\n")
                == "t.yaml:2:14: secret 'api_token' must be a mapping: a secret names its source: api_token: { env: MY_API_TOKEN } (or file:, store:, command:, oauth2:, github_app:)"
        )
    }
}
