import Foundation
import HTTP1Codec
import ScopeConfig
import ScopeProxyApp
import Testing

private func config(_ yaml: String) throws -> ProxyConfiguration {
    try ConfigLoader.parse(yaml, file: "explain.yaml", home: "/home/tester")
}

private let library = """
    secrets: { library_token: { env: EXPLAIN_LIBRARY_TOKEN_UNSET }, key: { env: PATH } }
    scopes:
      - name: library
        origins: ["https://api.library.example", "http://127.0.0.1:8765"]
        inject: { Authorization: "Bearer ${library_token}" }
        pass: [Cookie]
        methods: [GET]
        paths: ["/v1"]
    tls: { intercept: ["api.library.example"] }
    redirects: { cross_origin: follow }
    """

@Suite("explain: what the proxy would do with a request, without sending it")
struct ExplainTests {
    @Test("an intercepted https request: origin, scope, the injection with the secret's name, each header's rule, the upstream head")
    func intercepted() throws {
        let (text, status) = Explanation.render(
            try config(library),
            .init(
                method: "GET", headers: [("Cookie", "sid=1"), ("X-API-Key", "k"), ("X_Auth_Token", "t"), ("Accept", "*/*")],
                url: "https://API.library.example/v1/books"))
        #expect(status == 0)
        #expect(text.contains("origin        https://api.library.example\n"), "the default port left out, as the banner prints it")
        #expect(text.contains("scopes        library"))
        #expect(text.contains("is intercepted (tls.intercept)"))
        #expect(text.contains("each HTTP/2 stream alike"), "explain says the rules hold per stream")
        #expect(text.contains("injected      Authorization: Bearer ${library_token}   (scope library)"))
        #expect(text.contains("secret 'library_token': environment variable EXPLAIN_LIBRARY_TOKEN_UNSET is not set"))
        #expect(text.contains("Cookie: passed"))
        #expect(text.contains("X-API-Key: stripped: sensitive, and no covering scope lists it in pass"))
        #expect(text.contains("X_Auth_Token: stripped: an underscore spelling"))
        #expect(text.contains("Accept: sent as it is"))
        #expect(text.contains("  Authorization: Bearer ${library_token}"), "the upstream head shows where the secret goes, by name")
    }

    @Test("why nothing is injected: path, method, TRACE, a tunnel that is not intercepted")
    func notInjected() throws {
        let loaded = try config(library)
        #expect(
            Explanation.render(loaded, .init(method: "GET", headers: [], url: "https://api.library.example/admin")).text
                .contains("not injected  scope library: the path is not under the scope's paths"))
        #expect(
            Explanation.render(loaded, .init(method: "DELETE", headers: [], url: "https://api.library.example/v1/x")).text
                .contains("not injected  scope library: the method is not in the scope's methods"))
        #expect(
            Explanation.render(loaded, .init(method: "TRACE", headers: [], url: "http://127.0.0.1:8765/v1/x")).text
                .contains("TRACE never carries credentials"))
        let tunnelled = try config("scopes: [{ name: s, origins: [\"https://api.example\"], pass: [Cookie] }]\ntls: { tunnel: allow }")
        #expect(
            Explanation.render(tunnelled, .init(method: "GET", headers: [], url: "https://api.example/")).text
                .contains("would be tunnelled, not intercepted: the proxy sees nothing inside"))
    }

    @Test("a refused CONNECT: to a scope's host the fix is interception; to a host no scope covers, a tunnel or NO_PROXY")
    func refusedConnectAdvice() throws {
        let loaded = try config("scopes: [{ name: s, origins: [\"https://api.example\"], pass: [Cookie] }]")
        let scoped = Explanation.render(loaded, .init(method: "GET", headers: [], url: "https://api.example/")).text
        #expect(scoped.contains("would be refused (tls.tunnel: deny") && scoped.contains("Add api.example to tls.intercept"), "\(scoped)")
        let unscoped = Explanation.render(loaded, .init(method: "GET", headers: [], url: "https://github.com/x")).text
        #expect(
            unscoped.contains(
                "No scope covers it: to let it through unseen, set tunnel: allow under tls: or list github.com in the client's NO_PROXY"),
            "\(unscoped)")
        #expect(!unscoped.contains("for the rules below to apply"))
    }

    @Test("a redirect to another origin: followed, and the client's own credentials do not go there")
    func redirect() throws {
        let loaded = try config(
            library.replacingOccurrences(of: "\ntls:", with: "\n  - { name: cdn, origins: [\"https://cdn.library.example\"] }\ntls:"))
        let text = Explanation.render(
            loaded,
            .init(
                method: "GET", headers: [("Cookie", "sid=1")], url: "https://api.library.example/v1/x",
                location: "https://cdn.library.example/a")
        ).text
        #expect(text.contains("scopes        library"))
        #expect(text.contains("followed by the proxy to https://cdn.library.example"))
        #expect(text.contains("the client's own credentials never go to another origin"))
        let blocked = try config("redirects: { cross_origin: block }")
        #expect(
            Explanation.render(blocked, .init(method: "GET", headers: [], url: "http://a.example/", location: "http://evil.example/")).text
                .contains("502 redirect_blocked"))
    }

    @Test("a URL the proxy would not take is an error with the reason, exit 2")
    func badURL() throws {
        let (text, status) = Explanation.render(try config(""), .init(method: "GET", headers: [], url: "ftp://x/"))
        #expect(status == 2)
        #expect(text.contains("unsupported scheme"))
    }

    @Test(
        "a secret run cannot load: explain says run refuses to start (exit 1) and what a running proxy does, per kind; never 'would answer 502' for an unset variable"
    )
    func unloadableSecrets() throws {
        let directory = NSTemporaryDirectory() + "scopeproxy-explain-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory + "/store", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        _ = FileManager.default.createFile(
            atPath: directory + "/open_key", contents: Data("CANARY-explain-file\n".utf8),
            attributes: [.posixPermissions: 0o644])
        let loaded = try ConfigLoader.parse(
            """
            store_dir: store
            secrets:
              unset: { env: EXPLAIN_UNSET_VARIABLE }
              missing: { store: missing }
              open: { file: open_key }
              unrelated: { env: EXPLAIN_UNRELATED_UNSET }
            scopes:
              - { name: a, origins: ["https://a.example"], inject: { X-Env: "${unset}", X-Store: "${missing}", X-File: "${open}" } }
            tls: { intercept: scoped }
            """, file: directory + "/explain.yaml", home: "/home/tester")
        let text = Explanation.render(loaded, .init(method: "GET", headers: [], url: "https://a.example/")).text
        #expect(
            text.contains(
                "secret 'unset': environment variable EXPLAIN_UNSET_VARIABLE is not set; run would refuse to start (exit 1). "
                    + "explain looked in its own environment: set the variable where run starts"), "\(text)")
        #expect(text.contains("secret 'missing': store entry 'missing' is missing from \(directory)/store"))
        #expect(text.contains("run would refuse to start (exit 1); a proxy already running keeps the last value it read until the file is back"))
        #expect(
            text.contains(
                "secret 'open': file \(directory)/open_key is world-accessible (chmod o-rwx); run would refuse to start (exit 1); "
                    + "a proxy already running drops the value and answers 502 credential_unavailable"), "\(text)")
        #expect(!text.contains("EXPLAIN_UNSET_VARIABLE is not set; run would answer"))
        #expect(
            text.contains(
                "run           would refuse to start (exit 1) over secrets this request does not use: "
                    + "secret 'unrelated': environment variable EXPLAIN_UNRELATED_UNSET is not set"), "\(text)")
        #expect(!text.contains("CANARY-explain-file"))
    }

    @Test("no secret value ever appears: only names")
    func noValues() throws {
        let loaded = try config(library)
        let text = Explanation.render(loaded, .init(method: "GET", headers: [], url: "https://api.library.example/v1/x")).text
        #expect(!text.contains("/usr/bin"), "the env secret 'key' (PATH) is never read into the report")
    }
}
