import Foundation
import PosixSupport
import TestSupport
import Testing

/// `command:` secrets through the built binary (docs/credentials.md, "A command"): the programs are
/// `/bin/sh` scripts in a scratch directory that append a line to a counter file each run (so a
/// test counts runs exactly) and print canaries; the origins record what arrived; the access log,
/// stderr (the error log) and /metrics are read for the canaries afterwards.
@Suite("Command secrets through the binary: single flight, ttl, 401, failures, canaries, environment", .serialized)
struct CommandSecretEngineTests {
    static func canary(_ label: String) -> String { "CANARY\(label)\(String(UInt64.random(in: 0...UInt64.max), radix: 16))" }

    /// The scripts' directory: `script` writes one that first appends to `counter`, then runs `body`
    /// (with `$n` the run's number, counting from 1).
    final class Scripts: @unchecked Sendable {
        let scratch = ScratchDirectory()
        var path: String { scratch.path }

        func counter(_ name: String = "runs") -> String { scratch.path + "/" + name + ".count" }

        @discardableResult
        func script(_ name: String, counter: String? = nil, _ body: String) -> String {
            let counter = counter ?? self.counter()
            return scratch.write(
                name + ".sh", "echo run >> '\(counter)'\nn=$(( $(wc -l < '\(counter)') ))\n" + body + "\n", mode: 0o700)
        }

        /// How many times the script counting into `counter` ran (0 before the file exists).
        func runs(_ counter: String? = nil) -> Int {
            guard let text = try? String(contentsOfFile: counter ?? self.counter(), encoding: .utf8) else { return 0 }
            return text.split(separator: "\n").count
        }
    }

    /// The binary with a config of `secrets`/`scopes` (given the two origins' URLs), an access log
    /// with bodies and an admin listener. `origin` answers 401 on `/refuse*` and echoes the request's
    /// head on `/echo`, 200 otherwise; `other` is in no scope unless the config puts it there.
    final class Rig: @unchecked Sendable {
        let origin: FixtureOrigin
        let other: FixtureOrigin
        let configured: ConfiguredProxy
        var proxy: ProxyProcess { configured.process }

        init(environment: [String: String] = [:], _ config: (_ origin: String, _ other: String) -> String) throws {
            let script: FixtureOrigin.Script = { connection in
                while let request = connection.readRequest() {
                    if request.target.hasPrefix("/refuse") {
                        connection.respond(status: 401, body: "expired")
                    } else if request.target.hasPrefix("/echo") {
                        connection.respond(headers: [("X-Echo-Auth", request.header("authorization") ?? "-")], body: request.rawHead)
                    } else {
                        connection.respond(body: "ok")
                    }
                }
            }
            origin = try FixtureOrigin(script: script)
            other = try FixtureOrigin(script: script)
            let body = config(origin.url, other.url)
            configured = try ConfiguredProxy(environment: environment) { logPath in
                body + "\nlog: { output: \(logPath), bodies: true }\n"
            }
        }

        /// One request on a fresh client connection.
        func get(_ target: FixtureOrigin, _ path: String, headers: String = "") throws -> TestResponse {
            let socket = try TestSocket.connect(port: proxy.port)
            try socket.send("GET \(target.url)\(path) HTTP/1.1\r\nHost: \(target.authority)\r\n\(headers)\r\n")
            return try #require(try HTTPReader(socket).readResponse())
        }

        /// Stops the proxy (its log is complete then) and returns the access log and stderr.
        func finish() throws -> (log: String, errors: String) {
            #expect(proxy.terminate() == 0)
            let log = (try? String(contentsOfFile: configured.logPath, encoding: .utf8)) ?? ""
            return (log, proxy.standardError)
        }

        deinit {
            proxy.terminate()
            origin.stop()
            other.stop()
        }
    }

    /// Polls `condition` (every 50 ms, at most `seconds`): waiting for the proxy to get somewhere,
    /// never an assertion on how long it took.
    static func eventually(seconds: Double = 15, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            usleep(50_000)
        }
        return condition()
    }

    /// The parsed JSON body of a proxy's error answer.
    static func errorBody(_ response: TestResponse) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any] ?? [:]
    }

    /// The lines of the proxy's stderr for one event.
    static func errorLines(_ errors: String, event: String) -> [String] {
        errors.split(separator: "\n").map(String.init).filter { $0.contains("\"event\":\"\(event)\"") }
    }

    // MARK: 1. Single flight

    @Test("20 concurrent requests on 20 connections: exactly one run, every origin request carries Bearer <value>")
    func singleFlight() throws {
        let scripts = Scripts()
        let value = Self.canary("cmd")
        // Slow: all 20 arrive while the one run is in flight.
        let path = scripts.script("token", "sleep 0.5\necho '\(value)'")
        let rig = try Rig { origin, _ in
            """
            secrets: { gh_token: { command: ["/bin/sh", "\(path)"], ttl: 10m } }
            scopes: [{ name: gh, origins: ["\(origin)"], require_https: false, inject: { Authorization: "Bearer ${gh_token}" } }]
            """
        }
        let statuses = Locked<[Int]>([])
        DispatchQueue.concurrentPerform(iterations: 20) { index in
            let status = (try? rig.get(rig.origin, "/v1/items/\(index)"))?.status ?? -1
            statuses.withLock { $0.append(status) }
        }
        #expect(statuses.withLock { $0 }.sorted() == Array(repeating: 200, count: 20))
        #expect(scripts.runs() == 1, "one run for all of them")
        let authorizations = rig.origin.requests.map { $0.header("authorization") }
        #expect(authorizations.count == 20 && authorizations.allSatisfy { $0 == "Bearer \(value)" })
        let (log, errors) = try rig.finish()
        #expect(!log.contains(value) && !errors.contains(value))
    }

    // MARK: 2. Expiry

    @Test("ttl: 1s: a request after it passed runs the command exactly once more; the requests before got the first value")
    func ttlExpires() throws {
        let scripts = Scripts()
        let value = Self.canary("ttl")
        let path = scripts.script("token", "echo \"\(value)-$n\"")
        let rig = try Rig { origin, _ in
            """
            secrets: { gh_token: { command: ["/bin/sh", "\(path)"], ttl: 1s } }
            scopes: [{ name: gh, origins: ["\(origin)"], require_https: false, inject: { Authorization: "Bearer ${gh_token}" } }]
            """
        }
        try Self.expectOneRenewal(rig, scripts, value: value)
    }

    @Test("JSON output with expires_in (ttl far away): a request after it passed runs the command exactly once more")
    func expiresInExpires() throws {
        let scripts = Scripts()
        let value = Self.canary("exp")
        let path = scripts.script("token", "printf '{\"value\": \"%s\", \"expires_in\": 2}\\n' \"\(value)-$n\"")
        let rig = try Rig { origin, _ in
            """
            secrets: { gh_token: { command: ["/bin/sh", "\(path)"], ttl: 10m } }
            scopes: [{ name: gh, origins: ["\(origin)"], require_https: false, inject: { Authorization: "Bearer ${gh_token}" } }]
            """
        }
        try Self.expectOneRenewal(rig, scripts, value: value)
    }

    /// Requests until the second run happened (polled): each carried value 1 until the one that
    /// caused run 2, which carried value 2; no third run.
    static func expectOneRenewal(_ rig: Rig, _ scripts: Scripts, value: String) throws {
        #expect(try rig.get(rig.origin, "/v1").status == 200)
        #expect(scripts.runs() == 1)
        var statuses: [Int] = []
        let renewed = eventually {
            statuses.append((try? rig.get(rig.origin, "/v1").status) ?? -1)
            return scripts.runs() >= 2
        }
        #expect(renewed)
        #expect(statuses.allSatisfy { $0 == 200 })
        #expect(scripts.runs() == 2)
        let authorizations = rig.origin.requests.compactMap { $0.header("authorization") }
        #expect(authorizations.count >= 3)
        #expect(authorizations.dropLast().allSatisfy { $0 == "Bearer \(value)-1" })
        #expect(authorizations.last == "Bearer \(value)-2")
        #expect(try rig.get(rig.origin, "/v1").status == 200)
        #expect(scripts.runs() == 2, "a fresh value is used, not renewed per request")
        #expect(rig.origin.requests.last?.header("authorization") == "Bearer \(value)-2")
    }

    // MARK: 3. Canaries

    @Test("the value reaches its origin only: not the access log, stderr, /metrics, another origin, nor the client when echoed")
    func valueStaysPut() throws {
        let scripts = Scripts()
        let value = Self.canary("val")
        let path = scripts.script("token", "echo '\(value)'")
        let rig = try Rig { origin, _ in
            """
            secrets: { gh_token: { command: ["/bin/sh", "\(path)"] } }
            scopes: [{ name: gh, origins: ["\(origin)"], require_https: false, inject: { Authorization: "Bearer ${gh_token}" } }]
            """
        }
        // The scoped origin echoes what it got (head and a header): the client gets stars.
        let echoed = try rig.get(rig.origin, "/echo")
        #expect(echoed.status == 200)
        #expect(rig.origin.requests.last?.header("authorization") == "Bearer \(value)")
        #expect(!echoed.bodyText.contains(value) && !String(decoding: echoed.rawHead, as: UTF8.self).contains(value))
        #expect(echoed.bodyText.contains("Bearer " + String(repeating: "*", count: value.utf8.count)))
        // A client that knows the value and sends it elsewhere: refused before anything is sent.
        let inQuery = try rig.get(rig.other, "/?leak=\(value)")
        let inHeader = try rig.get(rig.other, "/debug", headers: "X-Debug: \(value)\r\n")
        // In the client's own Authorization it is stripped like any credential header out of scope.
        let inAuthorization = try rig.get(rig.other, "/authorization", headers: "Authorization: Bearer \(value)\r\n")
        #expect(!inAuthorization.bodyText.contains(value))
        let inBody = try TestSocket.connect(port: rig.proxy.port)
        try inBody.send(
            "POST \(rig.other.url)/upload HTTP/1.1\r\nHost: \(rig.other.authority)\r\nContent-Length: \(value.utf8.count + 6)\r\n\r\ntoken=\(value)")
        // Refused mid-body: a 403 when no response had started, or the connection closed.
        let bodyRefused = try? HTTPReader(inBody).readResponse(requestMethod: "POST")
        for refused in [inQuery, inHeader] {
            #expect(refused.status == 403)
            #expect(Self.errorBody(refused)["error"] as? String == "secret_egress_blocked")
            #expect(!refused.bodyText.contains(value) && !String(decoding: refused.rawHead, as: UTF8.self).contains(value))
        }
        if let bodyRefused = bodyRefused ?? nil {
            #expect(bodyRefused.status == 403)
            #expect(!bodyRefused.bodyText.contains(value) && !String(decoding: bodyRefused.rawHead, as: UTF8.self).contains(value))
        }
        #expect(rig.other.requests.allSatisfy { !$0.rawHeadText.contains(value) && !String(decoding: $0.body, as: UTF8.self).contains(value) })
        #expect(
            rig.other.requests.filter { $0.method == "GET" }.map(\.target) == ["/authorization"],
            "the GETs carrying it never reached the other origin")
        #expect(rig.other.requests.first?.header("authorization") == nil)
        #expect(scripts.runs() == 1)

        let metrics = try rig.configured.metrics()
        #expect(metrics.contains("scopeproxy_scrubbed_total{secret=\"gh_token\"}"))
        #expect(metrics.contains("scopeproxy_egress_blocked_total{secret=\"gh_token\",kind=\"value\"}"))
        #expect(metrics.contains("scopeproxy_log_tripwire_hits_total 0"), "the design held; the tripwire never fired")
        let (log, errors) = try rig.finish()
        #expect(log.contains("\"injected\":[\"Authorization\"]"))
        #expect(log.contains("secret_egress_blocked"))
        for (name, text) in [("access log", log), ("stderr", errors), ("metrics", metrics)] {
            #expect(!text.contains(value), "the value reached the \(name)")
            #expect(!text.contains(value.lowercased()), "the value (lowercased) reached the \(name)")
        }
    }

    // MARK: 4. A failing command

    @Test("exit 3: 502 credential_unavailable naming the secret and command 'sh'; stderr's first line scrubbed in the error log; retry floor")
    func failingCommand() throws {
        let scripts = Scripts()
        let stdoutCanary = Self.canary("out"), firstLine = Self.canary("first"), secondLine = Self.canary("second")
        let known = Self.canary("known")
        let path = scripts.script(
            "token", "echo '\(stdoutCanary)'\necho \"oops \(firstLine) key=$KNOWN_SECRET end\" >&2\necho '\(secondLine)' >&2\nexit 3")
        let rig = try Rig(environment: ["KNOWN_SECRET": known]) { origin, other in
            """
            secrets:
              known: { env: KNOWN_SECRET }
              gh_token: { command: ["/bin/sh", "\(path)"], env: [KNOWN_SECRET] }
            scopes:
              - { name: gh, origins: ["\(origin)"], require_https: false, inject: { Authorization: "Bearer ${gh_token}" } }
              - { name: other, origins: ["\(other)"], require_https: false, inject: { X-Known: "${known}" } }
            """
        }
        let failed = try rig.get(rig.origin, "/v1")
        #expect(failed.status == 502)
        #expect(failed.header("content-type")?.contains("json") == true)
        let body = Self.errorBody(failed)
        #expect(body["error"] as? String == "credential_unavailable")
        let message = failed.bodyText
        #expect(message.contains("gh_token") && message.contains("command 'sh'") && message.contains("(command_failed)"))
        for canary in [stdoutCanary, firstLine, secondLine, known] {
            #expect(!message.contains(canary) && !String(decoding: failed.rawHead, as: UTF8.self).contains(canary))
        }
        #expect(rig.origin.requests.isEmpty)
        #expect(scripts.runs() == 1)

        // Within the retry floor: answered at once, not run again.
        #expect(try rig.get(rig.origin, "/v1").status == 502)
        #expect(scripts.runs() == 1, "a failing command is not run per request")
        // Past the floor (polled): run again, once per floor at most.
        var statuses: [Int] = []
        let retried = Self.eventually {
            statuses.append((try? rig.get(rig.origin, "/v1").status) ?? -1)
            return scripts.runs() >= 2
        }
        #expect(retried && scripts.runs() == 2)
        #expect(statuses.allSatisfy { $0 == 502 })
        #expect(rig.origin.requests.isEmpty)

        let metrics = try rig.configured.metrics()
        #expect(metrics.contains("scopeproxy_token_fetches_total{secret=\"gh_token\",result=\"command_failed\"} 2"))
        #expect(!metrics.contains(stdoutCanary) && !metrics.contains(firstLine) && !metrics.contains(known))
        let (log, errors) = try rig.finish()
        let lines = Self.errorLines(errors, event: "credential_command_failed")
        #expect(lines.count == 2)
        for line in lines {
            #expect(line.contains("\"secret\":\"gh_token\"") && line.contains("'sh'"))
            #expect(line.contains("\"reason\":\"exited\""))
            #expect(line.contains("oops \(firstLine) key=<tripwire> end"), "stderr's first line, the known value replaced")
        }
        #expect(log.contains("command_failed"))
        for (name, text) in [("access log", log), ("stderr", errors)] {
            #expect(!text.contains(stdoutCanary), "stdout reached the \(name)")
            #expect(!text.contains(secondLine), "stderr's second line reached the \(name)")
            #expect(!text.contains(known), "the known secret reached the \(name)")
        }
        #expect(!log.contains(firstLine), "stderr belongs in the error log only")
    }

    /// A helper that fails after a good run often names the value it gave before ("token X
    /// expired"), or another helper's: neither may reach the error log through its stderr line.
    @Test("a failing run after a good one: its stderr line naming the earlier value, or another command's value, is scrubbed")
    func failingRunScrubsEarlierValues() throws {
        let scripts = Scripts()
        let value = Self.canary("earlier"), side = Self.canary("side")
        let sideScript = scripts.script("side", counter: scripts.counter("side"), "echo '\(side)'")
        let path = scripts.script(
            "token",
            "if [ \"$n\" = 1 ]; then echo '\(value)'; exit 0; fi\necho \"oops '\(value)' expired, side '\(side)' end\" >&2\nexit 1")
        let rig = try Rig { origin, other in
            """
            secrets:
              gh_token: { command: ["/bin/sh", "\(path)"], ttl: 1s }
              side_token: { command: ["/bin/sh", "\(sideScript)"] }
            scopes:
              - { name: gh, origins: ["\(origin)"], require_https: false, inject: { Authorization: "Bearer ${gh_token}" } }
              - { name: side, origins: ["\(other)"], require_https: false, inject: { Authorization: "Bearer ${side_token}" } }
            """
        }
        #expect(try rig.get(rig.other, "/v1").status == 200)
        #expect(try rig.get(rig.origin, "/v1").status == 200)
        #expect(rig.origin.requests.last?.header("authorization") == "Bearer \(value)")
        // Past the ttl (polled) the second run fails.
        var statuses: [Int] = []
        #expect(
            Self.eventually {
                statuses.append((try? rig.get(rig.origin, "/v1").status) ?? -1); return scripts.runs() >= 2
            })
        #expect(statuses.last == 502)
        let (log, errors) = try rig.finish()
        let lines = Self.errorLines(errors, event: "credential_command_failed")
        #expect(lines.count == 1)
        #expect(lines.first?.contains("oops '<tripwire>' expired, side '<tripwire>' end") == true)
        for text in [log, errors] { #expect(!text.contains(value) && !text.contains(side)) }
    }

    @Test("a failing run after a reload: its stderr line naming the value obtained before the reload is scrubbed")
    func failingRunAfterReloadScrubsEarlierValue() throws {
        let scripts = Scripts()
        let value = Self.canary("prereload")
        let path = scripts.script("token", "if [ \"$n\" = 1 ]; then echo '\(value)'; exit 0; fi\necho \"oops '\(value)' expired\" >&2\nexit 1")
        let rig = try Rig { origin, _ in
            """
            secrets: { gh_token: { command: ["/bin/sh", "\(path)"], ttl: 10m } }
            scopes: [{ name: gh, origins: ["\(origin)"], require_https: false, inject: { Authorization: "Bearer ${gh_token}" } }]
            """
        }
        #expect(try rig.get(rig.origin, "/v1").status == 200)
        rig.proxy.signal(SIGHUP)  // the same file: a new source, which runs the command again when needed
        #expect(Self.eventually { rig.proxy.standardError.contains("\"event\":\"reloaded\"") })
        #expect(try rig.get(rig.origin, "/v1").status == 502)
        #expect(scripts.runs() == 2)
        let (log, errors) = try rig.finish()
        let lines = Self.errorLines(errors, event: "credential_command_failed")
        #expect(lines.count == 1 && lines.first?.contains("oops '<tripwire>' expired") == true)
        let leaked = [log, errors].map { $0.contains(value) }
        #expect(leaked == [false, false], "the value reached the access log or stderr")
    }

    // MARK: 5. Timeout

    @Test("timeout: 300ms on a command sleeping 30 s: 502 command_timeout, the command and what it started are killed")
    func timeoutKillsGroup() throws {
        let scripts = Scripts()
        let marker = Self.canary("marker")
        let started = scripts.path + "/started"
        // A child of its own (a shell, not exec'ed away: `; :`) carrying the marker, then a wait.
        let path = scripts.script("token", "/bin/sh -c 'sleep 30; :' \(marker)-child &\necho up > '\(started)'\nsleep 30\n:")
        let rig = try Rig { origin, _ in
            """
            secrets: { gh_token: { command: ["/bin/sh", "\(path)", "\(marker)"], timeout: 300ms } }
            scopes: [{ name: gh, origins: ["\(origin)"], require_https: false, inject: { Authorization: "Bearer ${gh_token}" } }]
            """
        }
        let failed = try rig.get(rig.origin, "/v1")
        #expect(failed.status == 502)
        #expect(Self.errorBody(failed)["error"] as? String == "credential_unavailable")
        #expect(failed.bodyText.contains("gh_token") && failed.bodyText.contains("command 'sh'") && failed.bodyText.contains("(command_timeout)"))
        #expect(scripts.runs() == 1)
        #expect(FileManager.default.fileExists(atPath: started), "the script had started its child before it was killed")
        // Within the retry floor: answered at once, nothing started.
        #expect(try rig.get(rig.origin, "/v1").status == 502)
        #expect(scripts.runs() == 1)
        // The group is killed and reaped on the proxy's loop: wait for it (a bound, not a timing check).
        #expect(Self.eventually { Self.processes(containing: marker).isEmpty })
        #expect(Self.processes(containing: marker).isEmpty, "a process of the command outlived its timeout")
        let proxyID = rig.proxy.process.processIdentifier
        #expect(Self.eventually { Self.zombies(of: proxyID).isEmpty }, "the killed command was never reaped")
        #expect(rig.origin.requests.isEmpty)
        let (log, errors) = try rig.finish()
        #expect(log.contains("command_timeout"))
        let lines = Self.errorLines(errors, event: "credential_command_failed")
        #expect(lines.count == 1 && lines.allSatisfy { $0.contains("\"reason\":\"timed_out\"") && !$0.contains(marker) })
    }

    @Test("the proxy stopped (SIGTERM) while a command runs: the command and its child do not outlive it")
    func shutdownKillsRunningCommand() throws {
        let scripts = Scripts()
        let marker = Self.canary("stop")
        let started = scripts.path + "/started"
        let path = scripts.script("token", "/bin/sh -c 'sleep 30; :' \(marker)-child &\necho up > '\(started)'\nsleep 30\n:")
        let rig = try Rig { origin, _ in
            """
            secrets: { gh_token: { command: ["/bin/sh", "\(path)", "\(marker)"], timeout: 60s } }
            scopes: [{ name: gh, origins: ["\(origin)"], require_https: false, inject: { Authorization: "Bearer ${gh_token}" } }]
            """
        }
        let waiting = try TestSocket.connect(port: rig.proxy.port)
        try waiting.send("GET \(rig.origin.url)/v1 HTTP/1.1\r\nHost: \(rig.origin.authority)\r\n\r\n")
        #expect(Self.eventually { FileManager.default.fileExists(atPath: started) })
        #expect(!Self.processes(containing: marker).isEmpty, "the command runs")
        // The client leaves (a waiting request would hold the graceful drain); the fetch goes on.
        waiting.close()
        rig.proxy.terminate()  // after the drain's grace: the waiting request holds it (docs: 10 s)
        #expect(Self.eventually { Self.processes(containing: marker).isEmpty }, "the command outlived the proxy")
        #expect(rig.origin.requests.isEmpty)
    }

    /// A reload leaves the old source to the requests waiting on it: a command it runs when the
    /// client leaves still ends (here by its timeout) and is reaped; a zombie per reload would pile
    /// up in a proxy that runs for months.
    @Test("reloads while a command runs and its only client leaves: the command still ends by its timeout and is reaped")
    func reloadThenWaiterLeavesReapsCommand() throws {
        let scripts = Scripts()
        let marker = Self.canary("reap")
        let started = scripts.path + "/started"
        let path = scripts.script("token", "echo up > '\(started)'\nsleep 30\n:")
        let rig = try Rig { origin, _ in
            """
            secrets: { gh_token: { command: ["/bin/sh", "\(path)", "\(marker)"], timeout: 2s } }
            scopes: [{ name: gh, origins: ["\(origin)"], require_https: false, inject: { Authorization: "Bearer ${gh_token}" } }]
            """
        }
        let leaving = try TestSocket.connect(port: rig.proxy.port)
        try leaving.send("POST \(rig.origin.url)/upload HTTP/1.1\r\nHost: \(rig.origin.authority)\r\nContent-Length: 100\r\n\r\n")
        #expect(Self.eventually { FileManager.default.fileExists(atPath: started) })
        let command = Self.processes(containing: marker)
        #expect(command.count == 1)
        for count in 1...2 {
            rig.proxy.signal(SIGHUP)
            #expect(Self.eventually { Self.errorLines(rig.proxy.standardError, event: "reloaded").count == count })
        }
        leaving.shutdownWrite()
        _ = leaving.receiveUntilClose()
        #expect(Self.eventually { Self.processes(containing: marker).isEmpty }, "the old source's command outlived its timeout")
        let proxyID = rig.proxy.process.processIdentifier
        #expect(Self.eventually { Self.zombies(of: proxyID).isEmpty }, "the killed command was never reaped")
        #expect(rig.origin.requests.isEmpty)
        _ = try rig.finish()
    }

    /// Zombie children of `parent` (state Z in /proc/PID/stat).
    static func zombies(of parent: Int32) -> [String] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.filter { $0.allSatisfy(\.isNumber) }.filter { pid in
            guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/stat") else { return false }
            let text = String(decoding: data, as: UTF8.self)
            // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses, so read after the last ')'.
            guard let close = text.lastIndex(of: ")") else { return false }
            let fields = text[text.index(after: close)...].split(separator: " ")
            return fields.count > 1 && fields[0] == "Z" && fields[1] == Substring(String(parent))
        }
    }

    /// Live processes whose command line contains `text` (zombies have an empty one).
    static func processes(containing text: String) -> [String] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.filter { $0.allSatisfy(\.isNumber) }.filter { pid in
            guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { return false }
            return String(decoding: data.map { $0 == 0 ? UInt8(ascii: " ") : $0 }, as: UTF8.self).contains(text)
        }
    }

    // MARK: 6. A 401 from the origin

    @Test("a 401 from the origin: the next request runs the command once more (a rotated value); a storm of 401s does not run it per request")
    func unauthorizedRotates() throws {
        let scripts = Scripts()
        let value = Self.canary("rot")
        let path = scripts.script("token", "echo \"\(value)-$n\"")
        let rig = try Rig { origin, _ in
            """
            secrets: { gh_token: { command: ["/bin/sh", "\(path)"], ttl: 10m } }
            scopes: [{ name: gh, origins: ["\(origin)"], require_https: false, inject: { Authorization: "Bearer ${gh_token}" } }]
            """
        }
        #expect(try rig.get(rig.origin, "/v1").status == 200)
        usleep(1_100_000)  // a value is dropped for a 401 only once it is a second old (a wait, not an assertion on time)
        // A 401 from an origin the value was not sent to says nothing about it.
        #expect(try rig.get(rig.other, "/refuse").status == 401)
        #expect(try rig.get(rig.origin, "/v1").status == 200)
        #expect(scripts.runs() == 1, "a 401 from another origin dropped the value")
        #expect(try rig.get(rig.origin, "/refuse").status == 401)
        #expect(scripts.runs() == 1, "the 401 itself runs nothing")
        #expect(try rig.get(rig.origin, "/v1").status == 200)
        #expect(scripts.runs() == 2)
        // The new value is under a second old: 401s for it do not run the command again.
        for _ in 0..<10 { #expect(try rig.get(rig.origin, "/refuse-all").status == 401) }
        #expect(try rig.get(rig.origin, "/v1").status == 200)
        #expect(scripts.runs() == 2, "a storm of 401s ran the command per request")
        let authorizations = rig.origin.requests.compactMap { $0.header("authorization") }
        #expect(Array(authorizations.prefix(3)) == ["Bearer \(value)-1", "Bearer \(value)-1", "Bearer \(value)-1"])
        #expect(authorizations.dropFirst(3).allSatisfy { $0 == "Bearer \(value)-2" } && authorizations.count == 15)
        #expect(rig.other.requests.allSatisfy { $0.header("authorization") == nil })
        let (log, errors) = try rig.finish()
        for text in [log, errors] { #expect(!text.contains(value)) }
    }

    // MARK: 7. Garbage output

    @Test("output that is no value (two plain lines; a control character): 502 invalid_output, the output nowhere")
    func garbageOutput() throws {
        let scripts = Scripts()
        let lineOne = Self.canary("one"), lineTwo = Self.canary("two"), control = Self.canary("ctl")
        let twoLines = scripts.script("lines", counter: scripts.counter("lines"), "echo '\(lineOne)'\necho '\(lineTwo)'")
        let withControl = scripts.script("control", counter: scripts.counter("control"), "printf '\(control)\\001tail\\n'")
        let rig = try Rig { origin, other in
            """
            secrets:
              lines_token: { command: ["/bin/sh", "\(twoLines)"] }
              control_token: { command: ["/bin/sh", "\(withControl)"] }
            scopes:
              - { name: lines, origins: ["\(origin)"], require_https: false, inject: { Authorization: "Bearer ${lines_token}" } }
              - { name: control, origins: ["\(other)"], require_https: false, inject: { Authorization: "Bearer ${control_token}" } }
            """
        }
        for (target, secret) in [(rig.origin, "lines_token"), (rig.other, "control_token")] {
            let failed = try rig.get(target, "/v1")
            #expect(failed.status == 502)
            #expect(Self.errorBody(failed)["error"] as? String == "credential_unavailable")
            #expect(failed.bodyText.contains(secret) && failed.bodyText.contains("command 'sh'") && failed.bodyText.contains("(invalid_output)"))
            for canary in [lineOne, lineTwo, control] { #expect(!failed.bodyText.contains(canary)) }
        }
        #expect(scripts.runs(scripts.counter("lines")) == 1 && scripts.runs(scripts.counter("control")) == 1)
        #expect(rig.origin.requests.isEmpty && rig.other.requests.isEmpty)
        let metrics = try rig.configured.metrics()
        let (log, errors) = try rig.finish()
        #expect(log.components(separatedBy: "invalid_output").count - 1 == 2, "each 502's log line says invalid_output")
        for (name, text) in [("access log", log), ("stderr", errors), ("metrics", metrics)] {
            for canary in [lineOne, lineTwo, control] { #expect(!text.contains(canary), "the output reached the \(name)") }
        }
    }

    @Test("a command printing without end: 502 invalid_output, killed with its group; a program not in PATH: 502 command_not_started")
    func floodAndMissingProgram() throws {
        let scripts = Scripts()
        let flood = Self.canary("flood")
        let path = scripts.script("flood", "yes '\(flood)'\n:")
        let rig = try Rig { origin, other in
            """
            secrets:
              flood_token: { command: ["/bin/sh", "\(path)", "\(flood)"], timeout: 30s }
              missing_token: { command: ["scopeproxy-no-such-program-\(flood.suffix(6))"] }
            scopes:
              - { name: flood, origins: ["\(origin)"], require_https: false, inject: { Authorization: "Bearer ${flood_token}" } }
              - { name: missing, origins: ["\(other)"], require_https: false, inject: { Authorization: "Bearer ${missing_token}" } }
            """
        }
        let flooded = try rig.get(rig.origin, "/v1")
        #expect(flooded.status == 502)
        #expect(flooded.bodyText.contains("flood_token") && flooded.bodyText.contains("(invalid_output)") && !flooded.bodyText.contains(flood))
        #expect(Self.eventually { Self.processes(containing: flood).isEmpty }, "the flooding command outlived its answer")
        let proxyID = rig.proxy.process.processIdentifier
        #expect(Self.eventually { Self.zombies(of: proxyID).isEmpty }, "the killed command was never reaped")
        let missing = try rig.get(rig.other, "/v1")
        #expect(missing.status == 502)
        #expect(missing.bodyText.contains("missing_token") && missing.bodyText.contains("(command_not_started)"))
        #expect(rig.origin.requests.isEmpty && rig.other.requests.isEmpty)
        let (log, errors) = try rig.finish()
        #expect(log.contains("invalid_output") && log.contains("command_not_started"))
        #expect(Self.errorLines(errors, event: "credential_command_failed").contains { $0.contains("\"reason\":\"output_too_large\"") })
        #expect(!log.contains(flood) && !errors.contains(flood))
    }

    @Test("a command that leaves a child holding its output open: its value is used at once, the child is killed")
    func backgroundChildDoesNotHoldTheAnswer() throws {
        let scripts = Scripts()
        let marker = Self.canary("bg"), value = Self.canary("bgvalue")
        // The child keeps stdout and stderr open for 30 s; the command itself exits at once.
        let path = scripts.script("token", "/bin/sh -c 'sleep 30; :' \(marker) &\necho '\(value)'\nexit 0")
        let rig = try Rig { origin, _ in
            """
            secrets: { gh_token: { command: ["/bin/sh", "\(path)"], timeout: 20s } }
            scopes: [{ name: gh, origins: ["\(origin)"], require_https: false, inject: { Authorization: "Bearer ${gh_token}" } }]
            """
        }
        // A 200 (not a 502 after the 20 s timeout): the exit decided, not the pipes' end.
        #expect(try rig.get(rig.origin, "/v1").status == 200)
        #expect(rig.origin.requests.last?.header("authorization") == "Bearer \(value)")
        #expect(Self.eventually { Self.processes(containing: marker).isEmpty }, "the command's child outlived it")
        _ = try rig.finish()
    }

    @Test("a command writing a megabyte to stderr before its value: read and dropped (the command is not blocked), the value used")
    func stderrFloodDoesNotBlock() throws {
        let scripts = Scripts()
        let value = Self.canary("afterflood")
        let path = scripts.script("token", "yes xxxxxxxxxxxxxxxx | head -c 1048576 >&2\necho '\(value)'")
        let rig = try Rig { origin, _ in
            """
            secrets: { gh_token: { command: ["/bin/sh", "\(path)"], timeout: 20s } }
            scopes: [{ name: gh, origins: ["\(origin)"], require_https: false, inject: { Authorization: "Bearer ${gh_token}" } }]
            """
        }
        #expect(try rig.get(rig.origin, "/v1").status == 200)
        #expect(rig.origin.requests.last?.header("authorization") == "Bearer \(value)")
        let (_, errors) = try rig.finish()
        #expect(!errors.contains("xxxxxxxx"), "a succeeding command's stderr is not logged")
    }

    @Test("a reload to another command: the new one runs when first needed, once; the old value stays guarded")
    func reloadRunsTheNewCommand() throws {
        let scripts = Scripts()
        let before = Self.canary("before"), after = Self.canary("after")
        let first = scripts.script("first", counter: scripts.counter("first"), "echo '\(before)'")
        let second = scripts.script("second", counter: scripts.counter("second"), "echo '\(after)'")
        func config(_ script: String, origin: String) -> String {
            """
            secrets: { gh_token: { command: ["/bin/sh", "\(script)"], ttl: 10m } }
            scopes: [{ name: gh, origins: ["\(origin)"], require_https: false, inject: { Authorization: "Bearer ${gh_token}" } }]
            """
        }
        let rig = try Rig { origin, _ in config(first, origin: origin) }
        #expect(try rig.get(rig.origin, "/v1").status == 200)
        #expect(rig.origin.requests.last?.header("authorization") == "Bearer \(before)")
        rig.configured.scratch.write(
            "c.yaml",
            "admin: \"127.0.0.1:\(rig.configured.adminPort)\"\n" + config(second, origin: rig.origin.url)
                + "\nlog: { output: \(rig.configured.logPath), bodies: true }\n")
        rig.proxy.signal(SIGHUP)
        #expect(Self.eventually { rig.proxy.standardError.contains("\"event\":\"reloaded\"") })
        #expect(scripts.runs(scripts.counter("second")) == 0, "a reload runs nothing")
        #expect(try rig.get(rig.origin, "/v1").status == 200)
        #expect(try rig.get(rig.origin, "/v1").status == 200)
        #expect(rig.origin.requests.suffix(2).allSatisfy { $0.header("authorization") == "Bearer \(after)" })
        #expect(scripts.runs(scripts.counter("first")) == 1 && scripts.runs(scripts.counter("second")) == 1)
        // The value handed out before the reload may still be valid: still refused elsewhere.
        let leaked = try rig.get(rig.other, "/debug", headers: "X-Debug: \(before)\r\n")
        #expect(leaked.status == 403 && !leaked.bodyText.contains(before))
        let (log, errors) = try rig.finish()
        for text in [log, errors] { #expect(!text.contains(before) && !text.contains(after)) }
    }

    // MARK: 8. The environment

    @Test("the command (found in PATH) sees PATH, HOME and its env: names; not another variable of the proxy's environment")
    func minimalEnvironment() throws {
        let scripts = Scripts()
        let proxyOnly = Self.canary("envonly"), host = Self.canary("host")
        let dump = scripts.path + "/env.txt"
        let path = scripts.script("token", "env > '\(dump)'\necho value-$n")
        let rig = try Rig(environment: ["SCOPEPROXY_TEST_PROXY_ONLY": proxyOnly, "GH_HOST": host, "HOME": "/home/cmdtest"]) { origin, _ in
            """
            secrets: { gh_token: { command: ["sh", "\(path)"], env: [GH_HOST] } }
            scopes: [{ name: gh, origins: ["\(origin)"], require_https: false, inject: { Authorization: "Bearer ${gh_token}" } }]
            """
        }
        #expect(try rig.get(rig.origin, "/v1").status == 200)
        #expect(rig.origin.requests.last?.header("authorization") == "Bearer value-1")
        let environment = try String(contentsOfFile: dump, encoding: .utf8)
        let variables = Dictionary(
            environment.split(separator: "\n").compactMap { line -> (String, String)? in
                guard let equals = line.firstIndex(of: "=") else { return nil }
                return (String(line[..<equals]), String(line[line.index(after: equals)...]))
            }, uniquingKeysWith: { first, _ in first })
        #expect(variables["PATH"] == ProcessInfo.processInfo.environment["PATH"])
        #expect(variables["HOME"] == "/home/cmdtest")
        #expect(variables["GH_HOST"] == host)
        #expect(!environment.contains(proxyOnly) && variables["SCOPEPROXY_TEST_PROXY_ONLY"] == nil)
        // Nothing beyond the minimal set but what the shell itself sets.
        let shellOwn: Set<String> = ["PWD", "OLDPWD", "SHLVL", "_"]
        let unexpected = variables.keys.filter { name in
            !CommandEnvironmentNames.base.contains(name) && !name.hasPrefix("XDG_") && name != "GH_HOST" && !shellOwn.contains(name)
        }
        #expect(unexpected.isEmpty, "the command saw \(unexpected.sorted())")
        _ = try rig.finish()
    }

    // MARK: check and explain

    @Test("scopeproxy check and explain on a command secret's config never run the command")
    func checkAndExplainDoNotRun() throws {
        let scripts = Scripts()
        let path = scripts.script("token", "echo value-$n")
        let config = scripts.scratch.write(
            "c.yaml",
            """
            secrets: { gh_token: { command: ["/bin/sh", "\(path)"], ttl: 10m, timeout: 10s, env: [GH_HOST] } }
            scopes: [{ name: gh, origins: ["https://api.github.com"], inject: { Authorization: "Bearer ${gh_token}" } }]
            """)
        let checked = try ProxyProcess.runToCompletion(["check", "--config", config])
        #expect(checked.status == 0, "\(checked.stderr)")
        let explained = try ProxyProcess.runToCompletion(["explain", "--config", config, "https://api.github.com/user"])
        #expect(explained.status == 0, "\(explained.stderr)")
        #expect(explained.stdout.contains("gh_token"))
        #expect(!FileManager.default.fileExists(atPath: scripts.counter()), "check or explain ran the command")
    }
}

/// The variables every command gets (CommandEnvironment.baseNames; ProxyCore is not imported here
/// to keep this file a black-box test of the binary).
enum CommandEnvironmentNames {
    static let base: Set<String> = ["PATH", "HOME", "USER", "LANG"]
}
