import Foundation
import TestSupport
import Testing

/// The access log written by the built binary: what it must never show, what it must say, and a
/// log output that cannot be written (docs/logging.md).
@Suite("Access log: a query value hidden behind `;` under a safe name never reaches it", .serialized)
struct LogQueryRedactionTests {
    @Test("a query value hidden behind `;` under a safe name (limit=20;api_key=...) never reaches the access log")
    func semicolonQueryValue() throws {
        let secrets = (0..<5).map { Wire.canary("query\($0)") }
        let origin = try Wire.scripted { request in
            request.target.hasPrefix("/moved")  // the redirect's Location is logged too (redacted like a URL)
                ? Array("HTTP/1.1 302 Found\r\nLocation: https://cdn.example/file?limit=5;sig=\(secrets[4])\r\nContent-Length: 0\r\n\r\n".utf8)
                : Array("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".utf8)
        }
        defer { origin.stop() }
        let configured = try ConfiguredProxy { logPath in "log: { output: \(logPath), format: json }\n" }
        let proxy = configured.process
        defer { proxy.terminate() }
        let targets = [
            "/items?limit=20;api_key=\(secrets[0])",
            "/items?limit=20;api_key=\(secrets[1])&page=2",
            "/items?page=2&sort=name;token=\(secrets[2])",
            "/items?limit=20%3Bapi_key=x;password=\(secrets[3])",
            "/moved?page=1",
        ]
        for target in targets {
            let socket = try TestSocket.connect(port: proxy.port)
            try socket.send("GET \(origin.url)\(target) HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
            #expect(try HTTPReader(socket).readResponse()?.status == (target.hasPrefix("/moved") ? 302 : 200))
        }
        #expect(origin.requests.count == targets.count)
        #expect(proxy.terminate() == 0)
        let log = try String(contentsOfFile: configured.logPath, encoding: .utf8)
        #expect(log.split(separator: "\n").count == targets.count)
        for (index, secret) in secrets.enumerated() {
            #expect(!log.contains(secret), "the log shows the value hidden in \(index < 4 ? targets[index].prefix(30) : "the Location")…")
        }
        #expect(!secrets.contains { proxy.standardError.contains($0) })
    }
}

@Suite("Access log: says why nothing was injected", .serialized)
struct InjectionReasonTests {
    @Test("a covering scope that injects nothing names its rule in the log's reason; a request that got its credential has none")
    func reasonInLog() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let token = Wire.canary("token")
        let configured = try ConfiguredProxy(environment: ["T": token]) { logPath in
            """
            secrets: { token: { env: T } }
            scopes: [{ name: api, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${token}" }, methods: [GET], paths: ["/v1"] }]
            log: { output: \(logPath) }
            """
        }
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

@Suite("Access log: an output that cannot be written is said, never silently lost", .serialized)
struct UnwritableLogTests {
    @Test("a log output in a missing directory: check names the problem, run refuses to start and says why")
    func missingDirectory() throws {
        let scratch = ScratchDirectory()
        let config = scratch.write("c.yaml", "listen: 127.0.0.1:0\nlog: { output: no-such-dir/access.log }\n")
        let check = try ProxyProcess.runToCompletion(["check", "--config", config])
        #expect(check.status == 0)
        #expect(
            check.stderr.contains(
                "warning: log.output: \(scratch.path)/no-such-dir/access.log cannot be created in \(scratch.path)/no-such-dir (No such file or directory); run would refuse to start"
            ))
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
