import Foundation
import TestSupport
import Testing

private func get(_ proxyPort: UInt16, _ origin: FixtureOrigin, _ path: String = "/") throws -> TestResponse? {
    let socket = try TestSocket.connect(port: proxyPort)
    try socket.send("GET \(origin.url)\(path) HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
    return try HTTPReader(socket).readResponse()
}

@Suite("The built binary: CLI, reload, rotation", .serialized)
struct BinaryTests {
    @Test("check: exit 0 with a one-line summary; exit 2 with FILE:LINE:COLUMN on stderr")
    func check() throws {
        let scratch = ScratchDirectory()
        let good = scratch.write(
            "good.yaml", "secrets: { t: { env: T } }\nscopes: [{ name: a, origins: [\"https://a.example\"], inject: { X-T: \"${t}\" } }]\n")
        let result = try ProxyProcess.runToCompletion(["check", "--config", good])
        #expect(result.status == 0)
        #expect(result.stdout.hasPrefix("valid: listen 127.0.0.1:8080, 1 scope(s), 1 injected header(s), 1 secret(s)"))
        #expect(result.stdout.split(separator: "\n").count == 1)
        let bad = scratch.write("bad.yaml", "scopes:\n  - name: a\n    origin: []\n")
        let failure = try ProxyProcess.runToCompletion(["check", "--config", bad])
        #expect(failure.status == 2)
        #expect(failure.stderr == "\(bad):3:5: unknown key 'origin' in a scope, did you mean 'origins'?\n")
        let viaEnvironment = try ProxyProcess.runToCompletion(["check"], environment: ["SCOPEPROXY_CONFIG": bad])
        #expect(viaEnvironment.status == 2, "SCOPEPROXY_CONFIG is the fallback for --config")
    }

    @Test("run refuses an invalid config and an unsafe secret file, naming the secret, never its value")
    func runRefuses() throws {
        let scratch = ScratchDirectory()
        let bad = scratch.write("bad.yaml", "listen: nowhere\n")
        let refused = try ProxyProcess.runToCompletion(["run", "--config", bad])
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("\(bad):1:9: expected HOST:PORT"))
        #expect(!refused.stderr.contains("listening on"))

        let canary = "CANARY-world-readable-4e1d"
        scratch.write("token", canary, mode: 0o644)
        let config = scratch.write("c.yaml", "secrets: { token: { file: token } }\n")
        let unsafe = try ProxyProcess.runToCompletion(["run", "--config", config, "--listen", "127.0.0.1:0"])
        #expect(unsafe.status == 1)
        #expect(unsafe.stderr.contains("secret 'token'"))
        #expect(unsafe.stderr.contains("world-accessible"))
        #expect(!unsafe.stderr.contains(canary))
    }

    @Test("secret set (stdin) / list / rm, and run injects a store secret")
    func secretStore() throws {
        let scratch = ScratchDirectory()
        let canary = "CANARY-store-8c07"
        let config = scratch.write(
            "c.yaml",
            """
            store_dir: \(scratch.path)/store
            secrets: { gh: { store: github } }
            """)
        #expect(try ProxyProcess.runToCompletion(["secret", "set", "github", "--config", config], stdin: canary + "\n").status == 0)
        let listed = try ProxyProcess.runToCompletion(["secret", "list", "--config", config])
        #expect(listed.stdout == "github\n")
        #expect(!listed.stdout.contains(canary))
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let withScope = scratch.write(
            "scoped.yaml",
            """
            store_dir: \(scratch.path)/store
            secrets: { gh: { store: github } }
            scopes: [{ name: gh, origins: ["\(origin.url)"], require_https: false, inject: { Authorization: "token ${gh}" } }]
            """)
        let proxy = try ProxyProcess(arguments: ["--config", withScope])
        _ = try get(proxy.port, origin)
        #expect(origin.requests.first?.header("authorization") == "token \(canary)")
        #expect(!proxy.standardError.contains(canary))
        proxy.terminate()
        #expect(try ProxyProcess.runToCompletion(["secret", "rm", "github", "--config", config]).status == 0)
        #expect(try ProxyProcess.runToCompletion(["secret", "list", "--config", config]).stdout.isEmpty)
    }

    @Test("a rotated secret file is picked up without a restart; SIGHUP reloads; a bad reload keeps the old config")
    func rotationAndReload() throws {
        let scratch = ScratchDirectory()
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let first = "CANARY-first-\(UInt32.random(in: 0...UInt32.max))", second = "CANARY-second-\(UInt32.random(in: 0...UInt32.max))"
        scratch.write("token", first + "\n")
        func config(_ header: String) -> String {
            """
            secrets: { token: { file: token } }
            scopes: [{ name: a, origins: ["\(origin.url)"], require_https: false, inject: { \(header): "${token}" } }]
            """
        }
        let path = scratch.write("c.yaml", config("X-Token"))
        let proxy = try ProxyProcess(arguments: ["--config", path])
        defer { proxy.terminate() }
        _ = try get(proxy.port, origin)
        #expect(origin.requests.last?.header("x-token") == first)

        scratch.write("token", second + "\n")
        var rotated = false
        for _ in 0..<50 where !rotated {  // bounded wait, not a timing assertion
            usleep(100_000)
            _ = try get(proxy.port, origin)
            rotated = origin.requests.last?.header("x-token") == second
        }
        #expect(rotated, "the new value arrived without a restart")

        scratch.write("c.yaml", config("X-Other-Token"))
        proxy.signal(SIGHUP)
        var reloaded = false
        for _ in 0..<50 where !reloaded {
            usleep(100_000)
            _ = try get(proxy.port, origin)
            reloaded = origin.requests.last?.header("x-other-token") == second
        }
        #expect(reloaded, "SIGHUP applied the new config")

        scratch.write("c.yaml", "scopes: [ { name: broken\n")
        proxy.signal(SIGHUP)
        var logged = false
        for _ in 0..<50 where !logged {
            usleep(100_000)
            logged = proxy.standardError.contains("reload_failed")
        }
        #expect(logged)
        _ = try get(proxy.port, origin)
        #expect(origin.requests.last?.header("x-other-token") == second, "the old config keeps serving")
        #expect(!proxy.standardError.contains(first) && !proxy.standardError.contains(second))
        #expect(proxy.terminate() == 0)
    }
}

@Suite("The built binary: what a reload cannot apply, what a config cannot do", .serialized)
struct ReloadWarningBinaryTests {
    @Test("SIGHUP after listen changed in the file: a warning names listen and says restart to apply; the old port keeps answering")
    func changedListen() throws {
        let scratch = ScratchDirectory()
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let started = try TestListener.freePort(), changed = try TestListener.freePort()
        func config(_ port: UInt16) -> String {
            "listen: \"127.0.0.1:\(port)\"\nscopes: [{ name: a, origins: [\"\(origin.url)\"] }]\n"
        }
        let path = scratch.write("c.yaml", config(started))
        let proxy = try ProxyProcess(arguments: ["--config", path, "--listen", "127.0.0.1:\(started)"])
        defer { proxy.terminate() }
        #expect(try get(proxy.port, origin)?.status == 200)

        scratch.write("c.yaml", config(changed))
        proxy.signal(SIGHUP)
        var reloaded = false
        for _ in 0..<50 where !reloaded {  // bounded wait, not a timing assertion
            usleep(100_000)
            reloaded = proxy.standardError.contains("\"event\":\"reloaded\"")
        }
        #expect(reloaded)
        let lines = proxy.standardError.split(separator: "\n")
        let warning = try #require(lines.first { $0.contains("\"event\":\"reload_ignored_key\"") }, "\(proxy.standardError)")
        #expect(warning.contains("\"level\":\"warning\""))
        #expect(warning.contains("\"key\":\"listen\""))
        #expect(warning.contains("restart to apply"))
        #expect(lines.firstIndex(of: warning)! < lines.firstIndex { $0.contains("\"event\":\"reloaded\"") }!, "said before `reloaded`")
        #expect(lines.filter { $0.contains("reload_ignored_key") }.count == 1, "only listen changed")
        #expect(proxy.port == started)
        #expect(try get(started, origin)?.status == 200, "the old port still answers")

        // Interception turned on by a reload, when the start intercepted nothing: named too.
        scratch.write("c.yaml", config(changed) + "tls: { intercept: [api.example], ca_dir: \(scratch.path)/ca }\n")
        proxy.signal(SIGHUP)
        var second = false
        for _ in 0..<50 where !second {
            usleep(100_000)
            second = proxy.standardError.components(separatedBy: "\"event\":\"reloaded\"").count == 3
        }
        #expect(second)
        let interception = proxy.standardError.split(separator: "\n").filter { $0.contains("reload_ignored_key") }
        #expect(interception.contains { $0.contains("\"key\":\"tls.intercept\"") && $0.contains("restart to apply") }, "\(interception)")
        #expect(proxy.terminate() == 0)
    }

    @Test("run with an https scope nothing intercepts logs a warning line naming FILE:LINE:COLUMN, and serves")
    func runWarnsAboutUninterceptedScope() throws {
        let scratch = ScratchDirectory()
        let path = scratch.write("c.yaml", "scopes:\n  - { name: api, origins: [\"https://api.example\"] }\n")
        let proxy = try ProxyProcess(arguments: ["--config", path])
        defer { proxy.terminate() }
        let warning = try #require(
            proxy.standardError.split(separator: "\n").first { $0.contains("\"event\":\"config_warning\"") },
            "\(proxy.standardError)")
        #expect(warning.contains("\"level\":\"warning\""))
        #expect(warning.contains("\(path):2:28: https origin https://api.example of scope 'api' is not intercepted"))
        #expect(proxy.terminate() == 0)
    }
}

@Suite("Real clients through the binary: curl and python-requests following redirects", .serialized)
struct RealClientTests {
    /// api (127.0.0.1) -> cdn (127.0.0.2) -> attacker: what each received, with clients that
    /// follow redirects themselves (pass mode) and carry a custom API-key header along.
    func run(_ client: (_ proxyURL: String, _ url: String, _ key: String, _ cookie: String) throws -> Int32) throws {
        let attacker = try FixtureOrigin(host: "127.0.0.1")
        let cdn = try FixtureOrigin(host: "127.0.0.2") { connection in
            while connection.readRequest() != nil {
                connection.respond(status: 302, headers: [("Location", "\(attacker.url)/steal")], body: "")
            }
        }
        let api = try FixtureOrigin(host: "127.0.0.1") { connection in
            while connection.readRequest() != nil {
                connection.respond(status: 302, headers: [("Location", "\(cdn.url)/asset")], body: "")
            }
        }
        defer { [api, cdn, attacker].forEach { $0.stop() } }
        let scratch = ScratchDirectory()
        let apiToken = "CANARY-api-\(UInt32.random(in: 0...UInt32.max))", cdnToken = "CANARY-cdn-\(UInt32.random(in: 0...UInt32.max))"
        let key = "CANARY-key-\(UInt32.random(in: 0...UInt32.max))", cookie = "CANARY-cookie-\(UInt32.random(in: 0...UInt32.max))"
        let config = scratch.write(
            "c.yaml",
            """
            secrets: { api: { env: API_TOKEN }, cdn: { env: CDN_TOKEN } }
            scopes:
              - { name: api, origins: ["\(api.url)"], require_https: false, inject: { Authorization: "Bearer ${api}" }, pass: [X-API-Key, Cookie] }
              - { name: cdn, origins: ["\(cdn.url)"], require_https: false, inject: { X-CDN-Token: "${cdn}" } }
            """)
        let proxy = try ProxyProcess(arguments: ["--config", config], environment: ["API_TOKEN": apiToken, "CDN_TOKEN": cdnToken])
        defer { proxy.terminate() }
        let status = try client("http://127.0.0.1:\(proxy.port)", "\(api.url)/v1/file", key, cookie)
        #expect(status == 0)
        func seen(_ origin: FixtureOrigin) -> Set<String> {
            let text = origin.requests.map(\.rawHeadText).joined()
            return Set([apiToken, cdnToken, key, cookie].filter { text.contains($0) })
        }
        #expect(seen(api) == [apiToken, key, cookie])
        #expect(seen(cdn) == [cdnToken])
        #expect(seen(attacker).isEmpty)
        #expect(attacker.requests.count == 1, "the client did follow all the way")
    }

    @Test("curl -L")
    func curl() throws {
        try run { proxyURL, url, key, cookie in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
            process.arguments = ["-sS", "-o", "/dev/null", "-L", "-x", proxyURL, "-H", "X-API-Key: \(key)", "-H", "Cookie: sid=\(cookie)", url]
            try process.run()
            process.waitUntilExit()
            return process.terminationStatus
        }
    }

    @Test("python-requests (allow_redirects)")
    func pythonRequests() throws {
        try run { proxyURL, url, key, cookie in
            let script = """
                import sys, requests
                r = requests.get(sys.argv[1], headers={"X-API-Key": sys.argv[2], "Cookie": "sid=" + sys.argv[3]},
                                 proxies={"http": sys.argv[4]}, timeout=10)
                sys.exit(0 if r.status_code == 200 else 1)
                """
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["python3", "-c", script, url, key, cookie, proxyURL]
            process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.lowercased().hasSuffix("_proxy") }
            try process.run()
            process.waitUntilExit()
            return process.terminationStatus
        }
    }
}
