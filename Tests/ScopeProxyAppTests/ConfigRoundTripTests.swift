import Foundation
import HTTP1Codec
import ProxyCore
import ScopeConfig
import ScopePolicy
import Testing

@testable import ScopeProxyApp

/// A fixed-seed generator (SplitMix64): a failing seed is printed and reproduces.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Valid configs over the schema's features: scopes with https, loopback http and other http
/// origins, require_https written or not, inject, pass, methods, paths, clients, substitute, sign,
/// oauth2 secrets, placeholders, tls, routes, redirects, timeouts, limits, log, scrub, guard.
struct ConfigGenerator {
    var random: SeededGenerator

    mutating func chance(_ percent: Int) -> Bool { Int.random(in: 0..<100, using: &random) < percent }
    mutating func pick<T>(_ items: [T]) -> T { items.randomElement(using: &random)! }

    mutating func yaml() -> String {
        var out = ""
        if chance(50) {
            out += "listen: \"\(pick(["127.0.0.1", "[::1]", "0.0.0.0", "localhost"])):\(Int.random(in: 1024...65000, using: &random))\"\n"
        }
        if chance(30) { out += "admin: \"127.0.0.1:\(Int.random(in: 1024...65000, using: &random))\"\n" }
        if chance(30) { out += "store_dir: \(pick(["/var/lib/store a", "\"/var/lib/store: b\"", "\"/var/lib/#x\"", "relative/store"]))\n" }

        // Secrets: plain ones (env, file, store), placeholders, one oauth2 secret now and then.
        let plain = (0..<Int.random(in: 2...5, using: &random)).map { "s\($0)" }
        var placeholders: [String] = []
        out += "secrets:\n"
        for (index, name) in plain.enumerated() {
            var source = pick(["{ env: \"VAR_\(index)\"", "{ file: /run/secrets/\(name)", "{ store: \(name)-store"])
            if source.contains("file:") && chance(30) { source += ", allow_group_read: true" }
            if index > 0 && chance(35) {
                source += ", placeholder: true"
                if chance(50) { source += ", env_var: TOKEN_\(index)" }
                placeholders.append(name)
            }
            out += "  \(name): \(source) }\n"
        }
        var tokenSecrets: [String] = []
        if chance(40) {
            let grant = chance(50) ? "grant: client_credentials" : "grant: refresh_token, refresh_token: s1"
            out +=
                "  minted: { oauth2: { token_url: \"\(pick(["https://auth.example/oauth/token", "http://127.0.0.1:18769/t?x=1"]))\", "
                + "\(grant), client_id: \"id \(Int.random(in: 0...9, using: &random))\", client_secret: s0"
                + (chance(50) ? ", scope: \"read write\"" : "") + (chance(50) ? ", audience: \"https://api.example\"" : "")
                + (chance(50) ? ", client_auth: body" : "") + " } }\n"
            tokenSecrets.append("minted")
        }
        let injectable = plain + tokenSecrets

        // Clients, sometimes.
        var clients: [String] = []
        if chance(40) {
            out += "clients:\n"
            for index in 0..<Int.random(in: 1...3, using: &random) {
                let name = "c\(index)"
                clients.append(name)
                let how = pick([
                    "uid: \(1000 + index)", "source: [\"10.\(index).0.0/16\"]", "auth: { bearer: s0 }",
                    "auth: { basic: { user: u\(index), password: s1 } }", "tls_client: { ca: /etc/ca\(index).pem, subject: \"CN=c\(index)\" }",
                ])
                let egress =
                    chance(30)
                    ? ", egress: { default: \(pick(["allow", "deny"])), allow: [\"https://*.c\(index).example\", \"c\(index).example:*\"]"
                        + (chance(50) ? ", mode: report" : "") + (chance(50) ? ", deny_ips: [private, 198.51.100.0/24]" : "") + " }" : ""
                out += "  - { name: \(name), \(how)" + (chance(30) ? ", rate: \"\(Int.random(in: 1...99, using: &random))/m\"" : "") + egress + " }\n"
            }
            // One kind of credential per client: a second bearer or basic user for the same secret is fine,
            // but the same Basic user twice is not, and each index gives its own.
        }
        if chance(30) { out += "sensitive_headers: [X-Session-Token\(chance(50) ? ", X-Other" : "")]\n" }

        // Scopes: each with its own origins, so no two inject the same header at one origin.
        out += "scopes:\n"
        var httpsHosts: [String] = []
        for index in 0..<Int.random(in: 0...4, using: &random) {
            var origins: [String] = []
            for _ in 0..<Int.random(in: 1...3, using: &random) {
                let port = 8000 + index * 10 + origins.count
                let origin = pick([
                    "https://h\(index)-\(origins.count).example", "https://h\(index)-\(origins.count).example:\(port)",
                    "http://127.0.0.1:\(port)", "http://localhost:\(port)", "http://[::1]:\(port)", "http://10.1.\(index).\(origins.count)",
                ])
                if origin.hasPrefix("https://") { httpsHosts.append(String(origin.dropFirst(8).split(separator: ":")[0])) }
                origins.append(origin)
            }
            var fields = ["name: \"scope \(index)\"", "origins: [" + origins.map { "\"\($0)\"" }.joined(separator: ", ") + "]"]
            let hasHTTP = origins.contains { $0.hasPrefix("http://") }
            let hasRemoteHTTP = origins.contains { $0.hasPrefix("http://10.") }
            var gives = false
            var headers: [String] = []
            if chance(70) {
                headers = Array(["Authorization", "X-Token", "X-Key"].shuffled(using: &random).prefix(Int.random(in: 1...2, using: &random)))
                let templates = headers.map { "\($0): \"\(pick(["Bearer ", "", "k=$$5 "]))${\(pick(injectable))}\"" }
                fields.append("inject: { " + templates.joined(separator: ", ") + " }")
                gives = true
            }
            if chance(30) { fields.append("pass: [Cookie\(chance(50) ? ", X-Session" : "")]"); gives = true }
            if chance(30) { fields.append("methods: [\(pick(["GET", "GET, POST", "PUT"]))]") }
            if chance(30) { fields.append("paths: [\(pick(["\"/v1/\"", "\"/a\", \"/b c\""]))]") }
            if !clients.isEmpty && chance(50) { fields.append("clients: [\(pick(clients))]") }
            if !placeholders.isEmpty && chance(50) { fields.append("substitute: [\(pick(placeholders))]"); gives = true }
            if plain.count >= 2 && !headers.contains("Authorization") && chance(25) {
                fields.append(
                    "sign: { aws_sigv4: { service: s3, region: eu-west-1, access_key_id: s0, secret_access_key: s1"
                        + (plain.count >= 3 && chance(50) ? ", session_token: s2" : "") + " } }")
                gives = true
            }
            // require_https: required false for credentials to a non-loopback http origin; refused
            // true beside any http origin; otherwise written or not, either way.
            if hasRemoteHTTP && gives {
                fields.append("require_https: false")
            } else if hasHTTP {
                if chance(50) { fields.append("require_https: false") }
            } else if chance(50) {
                fields.append("require_https: \(chance(50))")
            }
            out += "  - { " + fields.shuffled(using: &random).joined(separator: ", ") + " }\n"
        }

        if chance(30) {
            out +=
                "routes:\n  - { listen: \"127.0.0.1:\(Int.random(in: 9000...9100, using: &random))\", upstream: \"\(pick(["https://r.example", "http://127.0.0.1:9999"]))\" }\n"
        }
        if chance(50) {
            out +=
                "redirects: { cross_origin: \(pick(["pass", "follow", "block"])), allow: [\"https://cdn.example\"\(chance(50) ? ", \"http://127.0.0.1:81\"" : "")]"
                + ", max_hops: \(Int.random(in: 1...20, using: &random)) }\n"
        }
        var tls: [String] = []
        let intercepting: Bool
        switch Int.random(in: 0..<3, using: &random) {
        case 0: tls.append("intercept: scoped"); intercepting = !httpsHosts.isEmpty
        case 1: tls.append("intercept: [a.example\(httpsHosts.first.map { ", \($0)" } ?? "")]"); intercepting = true
        default: intercepting = false
        }
        if chance(50) { tls.append("tunnel: \(pick(["allow", "deny"]))") }
        if chance(50) { tls.append("ca_dir: /var/lib/ca") }
        if chance(30) { tls.append("upstream_ca: /etc/ssl/extra.pem") }
        if intercepting && chance(30) { tls.append("client_listen: \"127.0.0.1:8443\"") }
        if !tls.isEmpty { out += "tls: { " + tls.joined(separator: ", ") + " }\n" }
        if chance(40) {
            out +=
                "egress: { default: deny, mode: \(pick(["enforce", "report"])), allow: [\"https://*.github.com\", \"api.openai.com:443\", \"http://localhost:*\"]"
                + ", deny_ips: \(pick(["[]", "[link_local, metadata]", "[loopback, private, \"fd00::/8\"]"])) }\n"
        }
        if chance(50) { out += "timeouts: { connect: \(pick(["250ms", "5s", "2m"])), idle: \(pick(["1h", "90s", "1500ms"])) }\n" }
        if chance(30) { out += "limits: { max_connections: \(Int.random(in: 1...100_000, using: &random)) }\n" }
        if chance(50) {
            var log = ["output: \(pick(["stdout", "stderr", "/var/log/scopeproxy.log"]))"]
            if chance(50) { log.append("format: \(pick(["json", "text"]))") }
            if chance(30) { log.append("bodies: true") }
            if chance(30) { log.append("safe_headers: [X-Request-Id]") }
            if chance(30) { log.append("safe_query: [page, \"yes\"]") }
            if chance(30) { log.append("safe_json_keys: [id]") }
            out += "log: { " + log.joined(separator: ", ") + " }\n"
        }
        if chance(30) { out += "scrub: \(pick(["on", "strict", "off"]))\n" }
        if chance(30) { out += "guard: \(pick(["on", "off"]))\n" }
        if chance(30) { out += "transparent: { listen: \(pick(["\"127.0.0.1:15001\"", "\"[::1]:15001\"", "localhost:0"])) }\n" }
        return out
    }
}

/// Every part of two configurations that the proxy acts on.
func expectSameMeaning(_ a: ProxyConfiguration, _ b: ProxyConfiguration, _ label: String) {
    #expect(a.listen == b.listen, "\(label): listen")
    #expect(a.admin == b.admin, "\(label): admin")
    #expect(a.proxyAuthSecret == b.proxyAuthSecret, "\(label): proxy_auth")
    #expect(a.clients == b.clients, "\(label): clients")
    #expect(a.storeDirectory == b.storeDirectory, "\(label): store_dir")
    #expect(a.secrets == b.secrets, "\(label): secrets")
    #expect(a.computed == b.computed, "\(label): computed secrets")
    #expect(a.placeholders == b.placeholders, "\(label): placeholders")
    #expect(a.protection == b.protection, "\(label): scrub and guard")
    #expect(a.policy.sensitiveHeaders == b.policy.sensitiveHeaders, "\(label): sensitive_headers")
    #expect(a.policy.scopes == b.policy.scopes, "\(label): scopes")
    #expect(a.routes == b.routes, "\(label): routes")
    #expect(a.transparentListen == b.transparentListen, "\(label): transparent.listen")
    #expect(a.redirects == b.redirects, "\(label): redirects")
    #expect(a.tls == b.tls, "\(label): tls")
    #expect(a.timeouts == b.timeouts, "\(label): timeouts")
    #expect(a.limits == b.limits, "\(label): limits")
    #expect(a.log == b.log, "\(label): log")
    #expect(a.warnings.map(\.message) == b.warnings.map(\.message), "\(label): warnings")
}

/// The printed text without its first line (which names the file it came from).
func body(_ text: String) -> Substring { text[text.index(after: text.firstIndex(of: "\n")!)...] }

@Suite("config print: what it writes, the loader reads back to the same meaning, and printing that gives the same text")
struct ConfigRoundTripTests {
    static let home = "/home/tester"

    func roundTrip(_ yaml: String, label: String) {
        let original: ProxyConfiguration
        do {
            original = try ConfigLoader.parse(yaml, file: "/etc/scopeproxy/generated.yaml", home: Self.home)
        } catch {
            Issue.record("\(label): the generator made an invalid config: \(error)\n\(yaml)")
            return
        }
        let printed = ConfigPrinter.yaml(original, formatIsExplicit: original.log.formatIsExplicit)
        do {
            let reloaded = try ConfigLoader.parse(printed, file: "/elsewhere/printed.yaml", home: Self.home)
            expectSameMeaning(original, reloaded, label)
            let again = ConfigPrinter.yaml(reloaded, formatIsExplicit: reloaded.log.formatIsExplicit)
            #expect(body(again) == body(printed), "\(label): printing the printed config changed it")
        } catch {
            Issue.record("\(label): config print wrote what the loader refuses: \(error)\n--- config:\n\(yaml)\n--- printed:\n\(printed)")
        }
    }

    @Test("300 generated configs", arguments: [1, 2, 3])
    func generated(_ seed: UInt64) {
        var generator = ConfigGenerator(random: SeededGenerator(state: seed))
        for index in 0..<100 { roundTrip(generator.yaml(), label: "seed \(seed) config \(index)") }
    }

    @Test("every credential source (command, github_app, jwt_bearer, private_key_jwt, the AWS chain) prints and reads back")
    func credentialSources() {
        roundTrip(
            """
            secrets:
              gh_token: { command: ["gh", "auth", "token"], ttl: 10m, timeout: 3s, env: [GH_HOST] }
              app_key: { file: /etc/scopeproxy/app.pem }
              gh_app:
                github_app: { app_id: "12345", installation_id: "678", private_key: app_key, api_url: "https://ghe.example/api/v3",
                              permissions: { issues: write, contents: read }, repositories: [scopeproxy, other] }
              sa_token:
                oauth2: { grant: jwt_bearer, token_url: "https://oauth2.example/token", private_key: app_key, key_id: k1, alg: RS256,
                          issuer: "sa@x.iam", subject: "user@x", audience: "https://oauth2.example/token", scope: "a b" }
              partner:
                oauth2: { grant: client_credentials, token_url: "https://auth.example/t", client_id: c1, client_auth: private_key_jwt,
                          private_key: app_key }
            scopes:
              - name: gh
                origins: ["https://api.github.com"]
                inject: { Authorization: "Bearer ${gh_app}", X-Cli: "${gh_token}", X-Sa: "${sa_token}", X-P: "${partner}" }
              - name: s3
                origins: ["https://s3.eu-west-1.amazonaws.com"]
                sign: { aws_sigv4: { service: s3, region: eu-west-1, credentials: default } }
              - name: s3dev
                origins: ["https://s3.us-east-1.amazonaws.com"]
                sign: { aws_sigv4: { service: s3, region: us-east-1, credentials: { profile: dev } } }
            """, label: "credential sources")
    }

    @Test("a loopback http scope prints no require_https: true (the loader refuses it there), and reads back the same")
    func loopbackHTTP() throws {
        let yaml = """
            secrets: { t: { env: T } }
            scopes: [{ name: local, origins: ["http://127.0.0.1:8765"], inject: { X-T: "${t}" } }]
            """
        let config = try ConfigLoader.parse(yaml, file: "/c.yaml", home: Self.home)
        let printed = ConfigPrinter.yaml(config, formatIsExplicit: false)
        #expect(!printed.contains("require_https: true\n"))
        roundTrip(yaml, label: "loopback http")
    }
}

@Suite("config print: every path-valued key is written resolved, so the printout means the same saved in another directory")
struct PrintedPathTests {
    /// One config per path-valued key of `ConfigLoader.pathKeys`, its value relative, and the
    /// resolved value read back from a configuration.
    static let cases: [String: (yaml: String, resolved: @Sendable (ProxyConfiguration) -> String?)] = [
        "store_dir": ("store_dir: store\n", { $0.storeDirectory }),
        "secrets.*.file": (
            "secrets: { t: { file: tok.txt } }\n",
            { config in
                if case .file(let path, _)? = config.secrets["t"] { return path } else { return nil }
            }
        ),
        "clients[].tls_client.ca": (
            "clients: [{ name: c, tls_client: { ca: clients.pem, subject: \"CN=c\" } }]\n",
            { $0.clients.first?.tlsClient?.caFile }
        ),
        "tls.ca_dir": ("tls: { ca_dir: ca }\n", { $0.tls.caDirectory }),
        "tls.upstream_ca": ("tls: { upstream_ca: roots.pem }\n", { $0.tls.upstreamCA }),
        "log.output": (
            "log: { output: access.log }\n",
            { config in
                if case .file(let path) = config.log.output { return path } else { return nil }
            }
        ),
    ]

    @Test("the table covers every path-valued key the loader resolves")
    func everyPathKey() {
        #expect(Set(Self.cases.keys) == Set(ConfigLoader.pathKeys))
    }

    @Test(
        "a relative value, in a config named relatively, is printed absolute and read back the same from another directory",
        arguments: ConfigLoader.pathKeys)
    func printedAbsolute(_ key: String) throws {
        let entry = try #require(Self.cases[key])
        for file in ["mine/my.yaml", "my.yaml", "/tmp/mine/my.yaml"] {
            let original = try ConfigLoader.parse(entry.yaml, file: file, home: "/home/t")
            let resolved = try #require(entry.resolved(original), "\(key)")
            #expect(resolved.hasPrefix("/"), "\(key) from \(file): \(resolved)")
            let printed = ConfigPrinter.yaml(original, formatIsExplicit: false)
            let elsewhere = try ConfigLoader.parse(printed, file: "/elsewhere/printed.yaml", home: "/home/t")
            #expect(entry.resolved(elsewhere) == resolved, "\(key) from \(file)")
            expectSameMeaning(original, elsewhere, "\(key) from \(file)")
        }
    }
}
