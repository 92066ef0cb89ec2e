import Foundation
import ProxyCore
import ScopeConfig
import TestSupport
import Testing

@Suite("CLI: config print", .serialized)
struct ConfigPrintTests {
    /// Every part of two configurations that the proxy acts on.
    func expectEquivalent(_ a: ProxyConfiguration, _ b: ProxyConfiguration, _ label: String) {
        #expect(a.listen == b.listen, "\(label): listen")
        #expect(a.admin == b.admin, "\(label): admin")
        #expect(a.proxyAuthSecret == b.proxyAuthSecret, "\(label): proxy_auth")
        #expect(a.clients == b.clients, "\(label): clients")
        #expect(a.storeDirectory == b.storeDirectory, "\(label): store_dir")
        #expect(a.secrets == b.secrets, "\(label): secrets")
        #expect(a.policy.sensitiveHeaders == b.policy.sensitiveHeaders, "\(label): sensitive_headers")
        #expect(a.policy.scopes == b.policy.scopes, "\(label): scopes")
        #expect(a.routes == b.routes, "\(label): routes")
        #expect(a.redirects == b.redirects, "\(label): redirects")
        #expect(a.tls == b.tls, "\(label): tls")
        #expect(a.timeouts == b.timeouts, "\(label): timeouts")
        #expect(a.limits == b.limits, "\(label): limits")
        #expect(a.log == b.log, "\(label): log")
    }

    /// `config print` through the binary (HOME pinned so the defaults are known), parsed back.
    func roundTrip(_ path: String?, home: String, label: String) throws -> String {
        let arguments = ["config", "print"] + (path.map { ["--config", $0] } ?? [])
        let printed = try runBinary(arguments, environment: ["HOME": home], removing: ["SCOPEPROXY_CONFIG"])
        #expect(printed.status == 0, "\(label): \(printed.stderr)")
        #expect(printed.stderr.isEmpty)
        let original = try path.map { try ConfigLoader.load(path: $0, home: home) } ?? .embeddedDefault(home: home)
        // Parsed as if it lived elsewhere: every path in the output is absolute.
        let reparsed = try ConfigLoader.parse(printed.stdout, file: "/elsewhere/printed.yaml", home: home)
        expectEquivalent(original, reparsed, label)
        for key in [
            "listen:", "admin:", "proxy_auth:", "store_dir:", "secrets:", "sensitive_headers:", "scopes:", "routes:",
            "redirects:", "  cross_origin:", "  max_hops:", "tls:", "  intercept:", "  tunnel:", "  ca_dir:", "  upstream_ca:",
            "timeouts:", "  connect:", "  client_header:", "limits:", "  max_connections:", "log:", "  output:", "  bodies:",
            "  safe_headers:", "  safe_query:", "  safe_json_keys:",
        ] {
            #expect(printed.stdout.contains("\n" + key), "\(label): no \(key)")
        }
        return printed.stdout
    }

    @Test("the embedded default prints every key and parses back to itself")
    func embeddedDefault() throws {
        let scratch = ScratchDirectory()
        let text = try roundTrip(nil, home: scratch.path, label: "embedded")
        #expect(text.hasPrefix("# scopeproxy effective configuration (the embedded default)"))
        #expect(text.contains("store_dir: \(scratch.path)/.local/share/scopeproxy/secrets\n"))
        #expect(text.contains("listen: \"127.0.0.1:8080\"\n"))
        #expect(text.contains("scopes: []\n"))
    }

    @Test("clients print by secret name and parse back to the same clients")
    func clients() throws {
        let scratch = ScratchDirectory()
        let path = scratch.write(
            "c.yaml",
            """
            secrets: { me_pw: { env: ME_PW }, agent_key: { env: AGENT_KEY } }
            clients:
              - { name: me, auth: { basic: { user: me, password: me_pw } } }
              - { name: agent, auth: { bearer: agent_key }, rate: "5/s" }
              - { name: ci, uid: 1001 }
              - { name: lan, source: ["10.0.0.0/8", "fd00::/8"] }
              - { name: tool, tls_client: { ca: certs/ca.pem, subject: "DNS:tool.example" } }
              - { name: anonymous }
            scopes: [{ name: api, origins: ["https://api.example"], clients: [me, ci] }]
            """)
        let text = try roundTrip(path, home: scratch.path, label: "clients")
        #expect(text.contains("password: me_pw"))
        #expect(text.contains("ca: \(scratch.path)/certs/ca.pem"))
        #expect(text.contains("clients: [ci, me]"))
        let banner = try runBinary(["check", "--config", path], environment: ["ME_PW": "CANARY-pw", "AGENT_KEY": "CANARY-key"])
        #expect(banner.status == 0)
        #expect(banner.stdout.contains("6 client(s)"))
        #expect(!(banner.stdout + banner.stderr + text).contains("CANARY"))
    }

    @Test("the example config parses back to the same configuration")
    func example() throws {
        let scratch = ScratchDirectory()
        let text = try roundTrip(repositoryRoot + "/config/scopeproxy.example.yaml", home: scratch.path, label: "example")
        #expect(text.contains("library_token: { env: LIBRARY_TOKEN }"))
        #expect(text.contains("cdn_token: { store: cdn }"))
        #expect(text.contains("Authorization: \"Bearer ${library_token}\""))
    }

    @Test("every key set, awkward values quoted, secrets as sources only; printing the printed config changes nothing")
    func everything() throws {
        let scratch = ScratchDirectory()
        let canary = "CANARY-print-\(UInt32.random(in: 0...UInt32.max))"
        scratch.write("token", canary, mode: 0o600)
        let config = scratch.write(
            "c.yaml",
            #"""
            listen: "[::1]:8081"
            admin: "127.0.0.1:9099"
            proxy_auth: { secret: proxy_password }
            store_dir: /var/lib/x store
            secrets:
              proxy_password: { env: PROXY_PASSWORD }
              "true": { file: token, allow_group_read: true }
              gh: { store: github }
            sensitive_headers: [X-Session-Token, X_Other_Token]
            scopes:
              - name: "odd: name"
                origins: ["https://API.Example:443", "http://localhost:8765"]
                require_https: false
                inject: { X-Key: "k=\"${true}\" $$5 \\ ${gh}", Authorization: "Bearer ${gh}" }
                pass: [Cookie, X-Session-Token]
                methods: [POST, GET]
                paths: ["/v1/", "/v2/items"]
              - name: empty
                origins: []
            routes:
              - { listen: "127.0.0.1:9000", upstream: "https://api.example" }
            redirects: { cross_origin: block, allow: ["https://cdn.example", "https://b.example:8443"], max_hops: 3 }
            tls: { intercept: [api.example, bücher.example], tunnel: allow, ca_dir: ca, upstream_ca: /etc/ssl/extra.pem, client_listen: "[::1]:8443" }
            timeouts: { connect: 250ms, upstream: 90s, idle: 2m, client_header: 1h }
            limits: { max_connections: 77 }
            log: { format: text, output: logs/access.log, bodies: true, safe_headers: [X-Request-Id], safe_query: [page, "yes"], safe_json_keys: [id] }
            """#)
        let text = try roundTrip(config, home: scratch.path, label: "everything")
        #expect(!text.contains(canary), "a value is never read, let alone printed")
        #expect(text.contains("\"true\": { file: \(scratch.path)/token, allow_group_read: true }"), "\(text)")
        #expect(text.contains("  format: text\n"))
        #expect(text.contains("  output: \(scratch.path)/logs/access.log\n"))
        #expect(text.contains("  client_listen: \"[::1]:8443\"\n"), "\(text)")
        #expect(text.contains("  intercept: [api.example, xn--bcher-kva.example]\n"))

        // The printed file is a config: printing it again gives the same text (after the source comment).
        let printedPath = scratch.write("printed.yaml", text)
        let again = try runBinary(["config", "print", "--config", printedPath], environment: ["HOME": scratch.path])
        #expect(again.stdout.split(separator: "\n").dropFirst() == text.split(separator: "\n").dropFirst())
        let check = try runBinary(["check", "--config", printedPath], environment: ["HOME": scratch.path, "PROXY_PASSWORD": "x"])
        #expect(check.status == 0, "\(check.stderr)")
    }
}
