import Testing

@testable import ScopeConfig

private let home = "/home/tester"

private func load(_ text: String) throws -> ProxyConfiguration {
    try ConfigLoader.parse(text, file: "c.yaml", home: home)
}

private func error(_ text: String) -> String? {
    do {
        _ = try ConfigLoader.parse(text, file: "c.yaml", home: home)
        return nil
    } catch {
        return error.description
    }
}

@Suite("Config: a key indented into a mapping of names is an error, never data")
struct MisindentedKeyTests {
    @Test(
        "every key a scope accepts, written one level deep under inject, is refused at its position with the fix",
        arguments: Decoder.scopeKeys)
    func scopeKeyUnderInject(_ key: String) {
        let text = """
            secrets: { token: { env: TOKEN } }
            scopes:
              - name: api
                origins: ["https://api.example"]
                inject:
                  Authorization: "Bearer ${token}"
                  \(key): "x"
            """
        #expect(
            error(text) == "c.yaml:7:7: inject header '\(key)' is a scope key: indent it to the scope's level, like 'inject:' "
                + "(two spaces less), or it becomes a header and the scope loses its \(key)")
    }

    @Test(
        "every top-level key, written under inject, is refused with the fix (a scope key of the same name is said as such)",
        arguments: Decoder.topLevelKeys)
    func topLevelKeyUnderInject(_ key: String) {
        let text = """
            secrets: { token: { env: TOKEN } }
            scopes:
              - name: api
                origins: ["https://api.example"]
                inject:
                  Authorization: "Bearer ${token}"
                  \(key): "x"
            """
        let expected =
            Decoder.scopeKeys.contains(key)
            ? "inject header '\(key)' is a scope key: indent it to the scope's level, like 'inject:' (two spaces less), or it becomes a header and the scope loses its \(key)"
            : "inject header '\(key)' is a top-level key: unindent it to the start of the line, like 'scopes:', or it becomes a header and the config loses its \(key)"
        #expect(error(text) == "c.yaml:7:7: " + expected)
    }

    @Test(
        "every top-level key, written under secrets with a value that is not a source, is refused with the fix",
        arguments: Decoder.topLevelKeys)
    func topLevelKeyUnderSecrets(_ key: String) {
        let text = "secrets:\n  gh: { env: GH }\n  \(key): [x]\n"
        #expect(error(text) == "c.yaml:3:3: '\(key)' is a top-level key, not a secret: unindent it to the start of the line, like 'secrets:'")
    }

    @Test("a header that merely contains a scope key's name is still a header")
    func headerLikeAKey() throws {
        let config = try load(
            """
            secrets: { token: { env: TOKEN } }
            scopes: [{ name: api, origins: ["https://api.example"], inject: { X-Paths: "${token}", Name-Hint: "${token}" } }]
            """)
        #expect(config.policy.scopes[0].inject.map(\.header) == ["X-Paths", "Name-Hint"])
    }

    @Test(
        "every option of a secret, written one level too shallow (a secret of its own with a plain value), is refused",
        arguments: Decoder.secretKeys)
    func secretOptionAsSecret(_ key: String) {
        let text = "secrets:\n  gh:\n    env: GH\n  \(key): x\n"
        #expect(
            error(text) == "c.yaml:4:3: '\(key)' is an option of a secret, not a secret: indent it under the secret it belongs to "
                + "(at the level of its env, file, store, command, oauth2 or github_app)")
    }

    @Test("a secret may still be named like an option when its value is a source")
    func secretNamedLikeAnOption() throws {
        let config = try load("secrets: { file: { env: FILE_TOKEN } }\n")
        #expect(config.secrets["file"] == .env("FILE_TOKEN"))
    }
}

@Suite("Config: warnings for what is valid but cannot work")
struct ConfigWarningTests {
    @Test(
        "an https scope origin nothing intercepts is warned about at its position; intercepted, routed or http ones are not",
        arguments: [
            // (tls and routes sections, the origins warned about)
            ("", ["c.yaml:3:28"]),
            ("tls: { tunnel: allow }\n", ["c.yaml:3:28"]),
            ("tls: { intercept: scoped }\n", []),
            ("tls: { intercept: [api.example] }\n", []),
            ("tls: { intercept: [other.example] }\n", ["c.yaml:3:28"]),
            ("routes: [{ listen: \"127.0.0.1:9000\", upstream: \"https://api.example\" }]\n", []),
        ])
    func unintercepted(_ extra: String, _ expected: [String]) throws {
        let config = try load(
            """
            secrets: { token: { env: TOKEN } }
            scopes:
              - { name: api, origins: ["https://api.example", "http://127.0.0.1:8765"], inject: { X-Token: "${token}" } }
            \(extra)
            """)
        #expect(config.warnings.map { "\($0.file):\($0.mark.line):\($0.mark.column)" } == expected)
        if let warning = config.warnings.first {
            #expect(
                warning.message.hasPrefix(
                    "https origin https://api.example of scope 'api' is not intercepted: a client using HTTPS_PROXY "
                        + "reaches it through CONNECT, which is"))
            #expect(warning.message.contains(extra.contains("allow") ? "tunnelled unseen (tls.tunnel: allow)" : "denied (403, tls.tunnel: deny)"))
            #expect(
                warning.message.hasSuffix("add `tls: { intercept: scoped }` (and trust the proxy's CA: scopeproxy ca) or reach it through a route"))
        }
    }
}

@Suite("Config: the keys a reload cannot apply")
struct RestartOnlySettingTests {
    /// For each restart-only key: a config the proxy started with, and one that changes only that key.
    static let changes: [(key: String, started: String, reloaded: String)] = [
        ("listen", "listen: \"127.0.0.1:8080\"\n", "listen: \"127.0.0.1:8081\"\n"),
        ("admin", "", "admin: \"127.0.0.1:9090\"\n"),
        ("routes", "", "routes: [{ listen: \"127.0.0.1:9000\", upstream: \"http://127.0.0.1:9001\" }]\n"),
        ("transparent.listen", "", "transparent: { listen: \"127.0.0.1:15001\" }\n"),
        ("tls.intercept", "", "tls: { intercept: [api.example] }\n"),
        ("tls.tunnel", "", "tls: { tunnel: allow }\n"),
        ("tls.ca_dir", "tls: { intercept: [a.example] }\n", "tls: { intercept: [a.example], ca_dir: /elsewhere }\n"),
        ("tls.upstream_ca", "", "tls: { upstream_ca: /etc/ssl/extra.pem }\n"),
        ("tls.client_listen", "tls: { intercept: [a.example] }\n", "tls: { intercept: [a.example], client_listen: \"127.0.0.1:8443\" }\n"),
        (
            "clients[].tls_client.ca",
            "tls: { intercept: [a.example], client_listen: \"127.0.0.1:8443\" }\nclients: [{ name: c, tls_client: { ca: /a.pem, subject: CN=c } }]\n",
            "tls: { intercept: [a.example], client_listen: \"127.0.0.1:8443\" }\nclients: [{ name: c, tls_client: { ca: /b.pem, subject: CN=c } }]\n"
        ),
        ("timeouts", "", "timeouts: { idle: 5s }\n"),
        ("limits.max_connections", "", "limits: { max_connections: 5 }\n"),
        ("limits.h2_max_concurrent_streams", "", "limits: { h2_max_concurrent_streams: 5 }\n"),
        ("log.format", "", "log: { format: json }\n"),
        ("log.output", "", "log: { output: stderr }\n"),
        ("log.bodies", "", "log: { bodies: true }\n"),
        ("log.safe_headers", "", "log: { safe_headers: [X-Request-Id] }\n"),
        ("log.safe_query", "", "log: { safe_query: [page] }\n"),
        ("log.safe_json_keys", "", "log: { safe_json_keys: [id] }\n"),
    ]

    @Test("each restart-only key, changed alone, is the one key a reload names; each has a case here")
    func eachKey() throws {
        #expect(Self.changes.map(\.key) == RestartOnlySetting.all.map(\.key), "a new restart-only key needs its case in this table")
        for change in Self.changes {
            let started = try load(change.started), reloaded = try load(change.reloaded)
            #expect(RestartOnlySetting.ignoredByReload(started: started, reloaded: reloaded) == [change.key], "\(change.key)")
            #expect(RestartOnlySetting.ignoredByReload(started: started, reloaded: started).isEmpty, "\(change.key): unchanged")
        }
    }

    @Test("what a reload applies is named by none: scopes, secrets, clients, redirects, scrub, guard, sensitive headers, intercepted hosts")
    func reloadable() throws {
        let started = try load(
            """
            secrets: { token: { env: TOKEN } }
            scopes: [{ name: a, origins: ["https://a.example"], inject: { X-Token: "${token}" } }]
            tls: { intercept: [a.example] }
            """)
        let reloaded = try load(
            """
            secrets: { token: { env: TOKEN }, other: { env: OTHER }, pw: { env: PW } }
            clients: [{ name: me, auth: { bearer: pw } }]
            sensitive_headers: [X-Session]
            scopes: [{ name: b, origins: ["https://b.example"], inject: { X-Other: "${other}" }, clients: [me] }]
            redirects: { cross_origin: block }
            tls: { intercept: [b.example] }
            scrub: strict
            guard: off
            """)
        #expect(RestartOnlySetting.ignoredByReload(started: started, reloaded: reloaded).isEmpty)
        // Interception off at start and still off: nothing to restart for, whatever ca_dir says.
        #expect(RestartOnlySetting.ignoredByReload(started: try load(""), reloaded: try load("tls: { ca_dir: /x }\n")).isEmpty)
        // Placeholders derive from the key in the start directory: a moved ca_dir is named then.
        let placeholderSecrets = "secrets: { gh: { env: GH, placeholder: true } }\n"
        #expect(
            RestartOnlySetting.ignoredByReload(
                started: try load(placeholderSecrets),
                reloaded: try load(placeholderSecrets + "tls: { ca_dir: /x }\n")) == ["tls.ca_dir"])
    }
}
