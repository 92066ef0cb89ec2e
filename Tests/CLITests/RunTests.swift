import Foundation
import ProxyCore
import ScopeProxyApp
import TestSupport
import Testing

@Suite("CLI: start-up banner, health, access log presentation", .serialized)
struct RunTests {
    /// The stderr lines before (and including) `listening on`.
    func banner(_ proxy: ProxyProcess) -> [String] {
        let lines = proxy.standardError.split(separator: "\n").map(String.init)
        guard let end = lines.firstIndex(where: { $0.hasPrefix("listening on ") }) else { return lines }
        return Array(lines[...end])
    }

    @Test(
        "the banner names the config, scopes with origins, injected and passed header names, admin, log, CA and how to use it; never a secret value")
    func bannerContent() throws {
        let scratch = ScratchDirectory()
        let canary = "CANARY-banner-\(UInt32.random(in: 0...UInt32.max))"
        let fileCanary = "CANARY-banner-file-\(UInt32.random(in: 0...UInt32.max))"
        let tokenFile = scratch.write("cdn-token", fileCanary + "\n")
        let configured = try ConfiguredProxy(environment: ["SCOPEPROXY_TEST_LIBRARY_TOKEN": canary]) { _ in
            """
            secrets: { library_token: { env: SCOPEPROXY_TEST_LIBRARY_TOKEN }, cdn_token: { file: \(tokenFile) } }
            scopes:
              - name: library
                origins: ["https://api.library.example", "https://api2.library.example:8443"]
                inject: { Authorization: "Bearer ${library_token}" }
                pass: [Cookie]
                methods: [GET]
              - name: cdn
                origins: ["https://cdn.library.example"]
                inject: { X-CDN-Token: "${cdn_token}" }
            tls: { intercept: [api.library.example], ca_dir: \(scratch.path)/ca }
            """
        }
        defer { configured.process.terminate() }
        let lines = banner(configured.process)
        let text = lines.joined(separator: "\n")
        #expect(lines.first == "scopeproxy \(Version.current): config \(configured.configPath)", "\(lines)")
        #expect(lines.last == "listening on 127.0.0.1:\(configured.port)", "the exact line stays, and comes last")
        #expect(lines.contains("  scope library: https://api.library.example, https://api2.library.example:8443"), "\(text)")
        #expect(lines.contains("    injects Authorization (secret library_token); passes Cookie; GET only"), "\(text)")
        #expect(lines.contains("  scope cdn: https://cdn.library.example"))
        #expect(lines.contains("    injects X-CDN-Token (secret cdn_token); passes no client credential"))
        #expect(lines.contains("  admin: http://127.0.0.1:\(configured.adminPort)/healthz and /metrics"))
        #expect(lines.contains { $0.hasPrefix("  live view: http://127.0.0.1:\(configured.adminPort)/view (no admin_token") })
        #expect(lines.contains("  access log: json to stdout"), "stdout is not a terminal here: \(text)")
        #expect(
            lines.contains(
                "  TLS interception: api.library.example; clients must trust \(scratch.path)/ca/scopeproxy-ca.pem (scopeproxy ca prints it)"))
        #expect(lines.contains("  CONNECT tunnels: denied (403) unless intercepted"))
        #expect(lines.contains("  use it: export http_proxy=http://127.0.0.1:\(configured.port) https_proxy=http://127.0.0.1:\(configured.port)"))
        #expect(!configured.process.standardError.contains(canary) && !configured.process.standardError.contains(fileCanary))
    }

    @Test("the embedded default's banner says so, and that everything sensitive is stripped")
    func embeddedBanner() throws {
        let proxy = try ProxyProcess(arguments: ["--no-access-log", "--tunnel", "allow"], environment: ["SCOPEPROXY_CONFIG": ""])
        defer { proxy.terminate() }
        let lines = banner(proxy)
        #expect(lines.first?.hasSuffix("config embedded default (no --config, no SCOPEPROXY_CONFIG)") == true, "\(lines)")
        #expect(lines.contains { $0.hasPrefix("  scopes: none; every sensitive header") })
        #expect(lines.contains("  access log: off (--no-access-log)"))
        #expect(lines.contains("  TLS interception: off (HTTPS goes through CONNECT, unseen)"))
        #expect(lines.contains("  CONNECT tunnels: allowed (bytes spliced, nothing scoped inside)"), "--tunnel is reflected")
        #expect(lines.last == "listening on 127.0.0.1:\(proxy.port)")
    }

    @Test("the banner shows where a proxy password goes (never the password) and warns about a wildcard address without proxy_auth")
    func bannerAuthAndExposure() throws {
        let scratch = ScratchDirectory()
        let password = "CANARY-password-\(UInt32.random(in: 0...UInt32.max))"
        let config = scratch.write("c.yaml", "secrets: { pw: { env: SCOPEPROXY_TEST_PASSWORD } }\nproxy_auth: { secret: pw }\n")
        // Each runs until the deadline (a proxy does), then stops on SIGTERM.
        let authenticated = try runBinary(
            ["run", "--config", config, "--listen", "127.0.0.1:0", "--no-access-log"],
            environment: ["SCOPEPROXY_TEST_PASSWORD": password], seconds: 2)
        #expect(authenticated.stderr.contains("  proxy auth: required (password from secret 'pw')"))
        #expect(
            authenticated.stderr.contains("use it (PASSWORD: the value of secret 'pw'): export http_proxy=http://user:PASSWORD@127.0.0.1:"),
            "\(authenticated.stderr)")
        #expect(!authenticated.stderr.contains(password))
        #expect(!authenticated.stderr.contains("warning:"))
        let exposed = try runBinary(["run", "--listen", "0.0.0.0:0", "--no-access-log"], removing: ["SCOPEPROXY_CONFIG"], seconds: 2)
        #expect(exposed.stderr.contains("is reachable beyond this machine and proxy_auth is off"), "\(exposed.stderr)")
        #expect(exposed.stderr.contains("export http_proxy=http://127.0.0.1:"), "a wildcard bind is reached on loopback from here")
    }

    @Test("health: 'healthy (admin HOST:PORT)' on stdout while running; after it stops, exit 1 and why on stderr")
    func health() throws {
        let configured = try ConfiguredProxy(arguments: ["--no-access-log"]) { _ in "" }
        let address = "127.0.0.1:\(configured.adminPort)"
        let healthy = try runBinary(["health", "--config", configured.configPath])
        #expect(healthy.status == 0)
        #expect(healthy.stdout == "healthy (admin \(address))\n")
        #expect(healthy.stderr.isEmpty)
        #expect(configured.process.terminate() == 0)
        let stopped = try runBinary(["health", "--config", configured.configPath])
        #expect(stopped.status == 1)
        #expect(stopped.stdout.isEmpty)
        #expect(
            stopped.stderr.hasPrefix("scopeproxy: unhealthy: nothing answers on admin address \(address) (Connection refused)"), "\(stopped.stderr)")

        let scratch = ScratchDirectory()
        let noAdmin = try runBinary(["health", "--config", scratch.write("c.yaml", "listen: \"127.0.0.1:0\"\n")])
        #expect(noAdmin.status == 2)
        #expect(noAdmin.stderr.contains("health needs an 'admin' address"))
        // An admin on port 0 is reachable only at the port the running proxy chose: said, not probed.
        let freePort = try runBinary(["health", "--config", scratch.write("p.yaml", "admin: \"127.0.0.1:0\"\n")])
        #expect(freePort.status == 2)
        #expect(freePort.stderr.contains("listens on a free port chosen at start"), "\(freePort.stderr)")
        #expect(freePort.stderr.contains("give admin a fixed port"))
    }

    @Test("health names a non-200 answer with its status and body")
    func unhealthyAnswer() throws {
        let origin = try FixtureOrigin { connection in
            while connection.readRequest() != nil { connection.respond(status: 503, body: "draining\n") }
        }
        defer { origin.stop() }
        let scratch = ScratchDirectory()
        let config = scratch.write("c.yaml", "admin: \"127.0.0.1:\(origin.port)\"\n")
        let outcome = try runBinary(["health", "--config", config])
        #expect(outcome.status == 1)
        #expect(outcome.stderr == "scopeproxy: unhealthy: admin 127.0.0.1:\(origin.port) answered 503 (draining)\n", "\(outcome.stderr)")
    }

    @Test(
        "log presentation: text on a terminal unless the config sets the format; JSON to files and pipes; colour only on a terminal without NO_COLOR")
    func presentationChoice() {
        func choose(_ format: LogFormat, explicit: Bool, terminal: Bool, noColor: Bool = false) -> LogPresentation {
            LogPresentation.choose(format: format, formatIsExplicit: explicit, outputIsTerminal: terminal, noColor: noColor)
        }
        #expect(choose(.json, explicit: false, terminal: true) == LogPresentation(format: .text, colour: true))
        #expect(choose(.json, explicit: false, terminal: true, noColor: true) == LogPresentation(format: .text, colour: false))
        #expect(choose(.json, explicit: false, terminal: false) == LogPresentation(format: .json, colour: false))
        #expect(choose(.json, explicit: true, terminal: true) == LogPresentation(format: .json, colour: false))
        #expect(choose(.text, explicit: true, terminal: false) == LogPresentation(format: .text, colour: false))
        #expect(choose(.text, explicit: true, terminal: true) == LogPresentation(format: .text, colour: true))
        #expect(choose(.text, explicit: true, terminal: true, noColor: true) == LogPresentation(format: .text, colour: false))
    }

    /// The proxy with its stdout on a pseudo-terminal; returns what the terminal shows after one request.
    func logOnTerminal(_ environment: [String: String], config: String? = nil, stderrSeen: ((String) -> Void)? = nil) throws -> String {
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let terminal = try PseudoTerminal()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: ProxyProcess.binaryPath)
        process.arguments = ["run", "--listen", "127.0.0.1:0"] + (config.map { ["--config", $0] } ?? [])
        // NO_COLOR only as the test sets it (the test runner's own environment may carry one).
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
            .filter { $0.key != "SCOPEPROXY_CONFIG" && ($0.key != "NO_COLOR" || environment["NO_COLOR"] != nil) }
        process.standardOutput = terminal.followerHandle
        let errors = Pipe()
        process.standardError = errors
        let stderr = PipeReader(errors)
        try process.run()
        defer { process.terminate(); process.waitUntilExit() }
        #expect(stderr.wait(for: "listening on "))
        stderrSeen?(stderr.contents)
        let line = stderr.contents.split(separator: "\n").first { $0.hasPrefix("listening on ") } ?? ""
        let port = try #require(UInt16(line.split(separator: ":").last ?? ""))
        let socket = try TestSocket.connect(port: port)
        try socket.send("GET \(origin.url)/colour HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        _ = try HTTPReader(socket).readResponse()
        return terminal.read(until: "id=")
    }

    @Test("stdout a terminal, no log.format: text lines with colour; with NO_COLOR: text without")
    func colourOnTerminal() throws {
        let coloured = try logOnTerminal([:])
        #expect(coloured.contains("GET http://127.0.0.1:"), "\(coloured)")
        #expect(coloured.contains("\u{1B}[32m200\u{1B}[0m"), "2xx in green: \(coloured.debugDescription)")
        #expect(coloured.contains("\u{1B}[2mid="), "a dim id")
        #expect(!coloured.contains("{\"ts\""), "not JSON on a terminal")
        let plain = try logOnTerminal(["NO_COLOR": "1"])
        #expect(plain.contains(" 200 "), "\(plain.debugDescription)")
        #expect(!plain.contains("\u{1B}["), "NO_COLOR: no escape sequences")
    }

    @Test("stdout a terminal, no log.format, log.bodies: true: run says the text log it chose carries no bodies")
    func bodiesOnTerminal() throws {
        let scratch = ScratchDirectory()
        let config = scratch.write("b.yaml", "log:\n  bodies: true\n")
        var seen = ""
        _ = try logOnTerminal([:], config: config) { seen = $0 }
        #expect(seen.contains(#""event":"config_warning""#), "\(seen)")
        #expect(seen.contains("log.bodies: true has no effect on the text log"), "\(seen)")
        #expect(seen.contains("text was chosen because stdout is a terminal"))
    }
}
