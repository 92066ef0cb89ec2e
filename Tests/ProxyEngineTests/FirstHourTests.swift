import Foundation
import Testing
import TestSupport

/// What a new user meets first and must not be surprised by.
@Suite("First hour: defaults that do what the config says", .serialized)
struct FirstHourTests {
    @Test("a loopback http:// origin gets its credential without require_https: false (its traffic never leaves the host)")
    func loopbackInjectedByDefault() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let token = Findings.canary("token")
        let proxy = try ProxyHarness(yaml: """
            secrets: { token: { env: T } }
            scopes: [{ name: local, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${token}" } }]
            """, secrets: ["token": token])
        defer { proxy.stop() }
        _ = try proxy.exchange(Findings.request("\(origin.url)/v1/x", host: origin.authority))
        #expect(origin.requests.first?.header("authorization") == "Bearer \(token)")
    }
}

@Suite("First hour: the log says why nothing was injected", .serialized)
struct InjectionReasonTests {
    @Test("a covering scope that injects nothing names its rule in the log's reason; a request that got its credential has none")
    func reasonInLog() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let token = Findings.canary("token")
        let configured = try ConfiguredProxy(environment: ["T": token]) { logPath in """
            secrets: { token: { env: T } }
            scopes: [{ name: api, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${token}" }, methods: [GET], paths: ["/v1"] }]
            log: { output: \(logPath) }
            """ }
        let proxy = configured.process
        for (method, path) in [("GET", "/v1/ok"), ("GET", "/admin"), ("DELETE", "/v1/x"), ("TRACE", "/v1/x")] {
            let socket = try TestSocket.connect(port: proxy.port)
            try socket.send("\(method) \(origin.url)\(path) HTTP/1.1\r\nHost: \(origin.authority)\r\nConnection: close\r\n\r\n")
            _ = try HTTPReader(socket).readResponse(requestMethod: method)
        }
        #expect(proxy.terminate() == 0)
        let lines = try String(contentsOfFile: configured.logPath, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(lines.count == 4)
        #expect(lines.count == 4 && !lines[0].contains("\"reason\""))
        #expect(lines.count == 4 && lines[1].contains(#""reason":"api: path_not_in_paths""#))
        #expect(lines.count == 4 && lines[2].contains(#""reason":"api: method_not_in_methods""#))
        #expect(lines.count == 4 && lines[3].contains(#""reason":"api: trace_never_carries_credentials""#))
        #expect(!lines.joined().contains(token))
    }
}

@Suite("First hour: an access log that cannot be written is said, never silently lost", .serialized)
struct UnwritableLogTests {
    @Test("a log output in a missing directory: check names the problem, run refuses to start and says why")
    func missingDirectory() throws {
        let scratch = ScratchDirectory()
        let config = scratch.write("c.yaml", "listen: 127.0.0.1:0\nlog: { output: no-such-dir/access.log }\n")
        let check = try ProxyProcess.runToCompletion(["check", "--config", config])
        #expect(check.status == 0)
        #expect(check.stderr.contains("warning: log.output: \(scratch.path)/no-such-dir/access.log cannot be created in \(scratch.path)/no-such-dir (No such file or directory); run would refuse to start"))
        let run = try ProxyProcess.runToCompletion(["run", "--config", config])
        #expect(run.status == 1)
        #expect(run.stderr.contains("cannot open the access log \(scratch.path)/no-such-dir/access.log: No such file or directory"))
        #expect(!run.stderr.contains("listening on"))
    }

    @Test("a log output that is a directory is named by check and refused by run")
    func directory() throws {
        let scratch = ScratchDirectory()
        try FileManager.default.createDirectory(atPath: scratch.path + "/logs", withIntermediateDirectories: true)
        let config = scratch.write("c.yaml", "listen: 127.0.0.1:0\nlog: { output: logs }\n")
        let check = try ProxyProcess.runToCompletion(["check", "--config", config])
        #expect(check.stderr.contains("warning: log.output: \(scratch.path)/logs is a directory; run would refuse to start"))
        let run = try ProxyProcess.runToCompletion(["run", "--config", config])
        #expect(run.status == 1 && run.stderr.contains("cannot open the access log"))
    }
}
