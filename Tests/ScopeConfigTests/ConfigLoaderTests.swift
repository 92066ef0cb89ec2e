import Foundation
import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

@testable import ScopeConfig

private let fixtures = Bundle.module.resourceURL!.appendingPathComponent("Fixtures")
private let home = "/home/tester"

private func failingFixtures() -> [String] {
    (try? FileManager.default.contentsOfDirectory(atPath: fixtures.path))?.filter { $0.hasSuffix(".yaml") && !$0.hasSuffix(".valid.yaml") }.sorted()
        ?? []
}

@Suite("Config: one fixture per kind of error, exact FILE:LINE:COLUMN")
struct ConfigErrorTests {
    @Test("there is a fixture for every kind of error")
    func fixturesExist() {
        #expect(failingFixtures().count >= 18)
    }

    @Test("each fixture fails with the error its first line announces", arguments: failingFixtures())
    func fixture(_ name: String) throws {
        let path = fixtures.appendingPathComponent(name).path
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let firstLine = try #require(text.split(separator: "\n").first)
        let expected = String(firstLine.dropFirst("# expect: ".count))
        do {
            _ = try ConfigLoader.load(path: path, home: home)
            Issue.record("\(name) loaded without error")
        } catch {
            #expect(error.description == "\(path):\(expected)")
        }
    }
}

@Suite("Config: valid files")
struct ConfigValidTests {
    @Test("the full example config is valid and means what it says")
    func fullExample() throws {
        let path = fixtures.appendingPathComponent("full-example.valid.yaml").path
        let config = try ConfigLoader.load(path: path, home: home)
        #expect(config.listen == HostPort(host: "127.0.0.1", port: 8080))
        #expect(config.proxyAuthSecret == "proxy_password")
        #expect(config.admin == HostPort(host: "127.0.0.1", port: 9090))
        #expect(config.storeDirectory == "/home/tester/.local/share/scopeproxy/secrets")
        #expect(config.secrets["library_key"] == .file(path: fixtures.path + "/secrets/library_key", allowGroupRead: false))
        #expect(config.secrets["cdn_token"] == .file(path: "/run/secrets/cdn_token", allowGroupRead: true))
        #expect(config.secrets["github_token"] == .store("github"))
        #expect(config.policy.isSensitive("x-session-token"))
        #expect(config.policy.isSensitive("Authorization"))
        let scope = try #require(config.policy.scopes.first)
        #expect(scope.origins == [try Origin.parse("https://api.library.example"), try Origin.parse("http://127.0.0.1:8765")])
        #expect(scope.inject.map(\.header) == ["Authorization", "X-API-Key"])
        #expect(scope.pass == ["cookie"])
        #expect(scope.methods == ["GET", "POST"])
        #expect(scope.paths == ["/v1/"])
        #expect(config.routes == [Route(listen: HostPort(host: "127.0.0.1", port: 8081), upstream: try Origin.parse("https://api.library.example"))])
        #expect(config.redirects == RedirectPolicy(mode: .pass, allow: [try Origin.parse("https://cdn.library.example")], maxHops: 5))
        #expect(config.tls.intercept == .hosts(["api.library.example"]))
        #expect(config.tls.tunnel == .deny)
        #expect(config.tls.upstreamCA == nil)
        #expect(
            config.timeouts.connect == 5_000 && config.timeouts.upstream == 30_000 && config.timeouts.idle == 60_000
                && config.timeouts.clientHeader == 10_000)
        #expect(config.log.format == .json && config.log.output == .standardOutput && !config.log.bodies)
    }

    @Test("limits.h2_max_concurrent_streams: 100 unless set, read within 1...1000")
    func h2MaxConcurrentStreams() throws {
        #expect(try ConfigLoader.parse("", file: "t.yaml", home: home).limits.h2MaxConcurrentStreams == 100)
        for count in [1, 250, 1000] {
            let config = try ConfigLoader.parse("limits: { h2_max_concurrent_streams: \(count) }\n", file: "t.yaml", home: home)
            #expect(config.limits.h2MaxConcurrentStreams == count)
        }
        for count in ["0", "-1", "1001", "99999999999999999999999"] {
            #expect(throws: (any Error).self) {
                try ConfigLoader.parse("limits: { h2_max_concurrent_streams: \(count) }\n", file: "t.yaml", home: home)
            }
        }
    }

    @Test("the worked example in config/ is valid")
    func workedExample() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let config = try ConfigLoader.load(path: root.appendingPathComponent("config/scopeproxy.example.yaml").path, home: home)
        #expect(config.policy.scopes.map(\.name) == ["library", "cdn", "local-dev"])
        #expect(config.redirects.mode == .block)
        #expect(config.summary.hasPrefix("valid: listen 127.0.0.1:8080, 3 scope(s), 3 injected header(s), 2 secret(s)"))
    }

    @Test("an empty file is the embedded default: no scopes, strip everything")
    func emptyFile() throws {
        let config = try ConfigLoader.parse("", file: "empty.yaml", home: home)
        #expect(config.policy.scopes.isEmpty)
        #expect(config.listen == HostPort(host: "127.0.0.1", port: 8080))
        #expect(config.redirects.mode == .pass)
    }

    @Test("tls.client_listen: an address like listen, localhost and IPv6 included; absent by default; the CA hook starts empty")
    func clientListen() throws {
        let config = try ConfigLoader.parse("tls: { intercept: scoped, client_listen: \"[::1]:8443\" }", file: "t.yaml", home: home)
        #expect(config.clientListen == ListenAddress(host: "::1", port: 8443))
        #expect(config.tls.clientListen == config.clientListen)
        #expect(config.clientCAFiles.isEmpty)
        let named = try ConfigLoader.parse("tls:\n  intercept: [api.example]\n  client_listen: localhost:0\n", file: "t.yaml", home: home)
        #expect(named.clientListen == ListenAddress(host: "localhost", port: 0))
        #expect(try ConfigLoader.parse("tls: { intercept: scoped }", file: "t.yaml", home: home).clientListen == nil)
        #expect(try ConfigLoader.parse("tls: { intercept: scoped, client_listen: null }", file: "t.yaml", home: home).clientListen == nil)
    }

    @Test("transparent.listen: an address like listen, IPv6 included; absent (or null) means no transparent listener")
    func transparentListen() throws {
        let config = try ConfigLoader.parse("transparent: { listen: \"[::1]:15001\" }", file: "t.yaml", home: home)
        #expect(config.transparentListen == ListenAddress(host: "::1", port: 15001))
        #expect(
            try ConfigLoader.parse("transparent:\n  listen: 127.0.0.1:0\n", file: "t.yaml", home: home).transparentListen
                == ListenAddress(host: "127.0.0.1", port: 0))
        #expect(try ConfigLoader.parse("listen: 127.0.0.1:8080", file: "t.yaml", home: home).transparentListen == nil)
        #expect(try ConfigLoader.parse("transparent: null", file: "t.yaml", home: home).transparentListen == nil)
    }

    @Test("relative paths are read next to the config file, whatever the working directory: secrets, store_dir, ca_dir, upstream_ca, log output")
    func relativePaths() throws {
        let yaml = """
            store_dir: store
            secrets: { k: { file: keys/k } }
            tls: { ca_dir: ca, upstream_ca: roots.pem }
            log: { output: logs/access.log }
            """
        let config = try ConfigLoader.parse(yaml, file: "/etc/scopeproxy/scopeproxy.yaml", home: home)
        #expect(config.storeDirectory == "/etc/scopeproxy/store")
        #expect(config.secrets["k"] == .file(path: "/etc/scopeproxy/keys/k", allowGroupRead: false))
        #expect(config.tls.caDirectory == "/etc/scopeproxy/ca")
        #expect(config.tls.upstreamCA == "/etc/scopeproxy/roots.pem")
        #expect(config.log.output == .file("/etc/scopeproxy/logs/access.log"))
        let home = try ConfigLoader.parse("store_dir: ~/s\nlisten: localhost:0\nadmin: '[::1]:9090'", file: "/etc/x.yaml", home: "/home/t")
        #expect(home.storeDirectory == "/home/t/s")
        #expect(home.listen == HostPort(host: "localhost", port: 0))
        #expect(home.admin == HostPort(host: "::1", port: 9090))
    }

    @Test("durations and the did-you-mean distance")
    func helpers() throws {
        let config = try ConfigLoader.parse("timeouts: { connect: 250ms, upstream: 2s, idle: 1m, client_header: 1h }", file: "t.yaml", home: home)
        #expect(
            config.timeouts.connect == 250 && config.timeouts.upstream == 2000 && config.timeouts.idle == 60_000
                && config.timeouts.clientHeader == 3_600_000)
        #expect(Decoder.editDistance("listn", "listen") == 1)
        #expect(Decoder.editDistance("", "ab") == 2)
    }
}

@Suite("Config: clients")
struct ClientConfigTests {
    @Test("every kind of client, scope clients, CA files resolved next to the config")
    func validClients() throws {
        let path = fixtures.appendingPathComponent("clients.valid.yaml").path
        let config = try ConfigLoader.load(path: path, home: home)
        #expect(config.clients.map(\.name) == ["me", "agent", "ci", "lan", "tool", "anonymous"])
        #expect(config.clients[0].auth == .basic(user: "me", passwordSecret: "me_password"))
        #expect(config.clients[1].auth == .bearer(tokenSecret: "agent_key"))
        #expect(config.clients[1].rate == RateLimit(count: 100, periodSeconds: 60))
        #expect(config.clients[2].uid == 1001)
        #expect(config.clients[3].sources.map(\.text) == ["10.0.0.0/8", "fd00::/8"])
        let directory = (path as NSString).deletingLastPathComponent
        #expect(config.clients[4].tlsClient == TLSClientMatch(caFile: directory + "/clients-ca.pem", subject: .commonName("tool")))
        #expect(config.clientCAFiles == [directory + "/clients-ca.pem"])
        #expect(config.policy.scopes[0].clients == ["me", "ci"])
        #expect(config.policy.scopes[1].clients == nil)
        #expect(config.summary.contains("6 client(s)"))
    }

    @Test("scope clients with no clients defined: an error that says so")
    func scopeClientsWithoutClients() {
        #expect(throws: ConfigError.self) {
            try ConfigLoader.parse("scopes: [{ name: a, origins: [\"https://a.example\"], clients: [me] }]", file: "t.yaml", home: home)
        }
    }
}
