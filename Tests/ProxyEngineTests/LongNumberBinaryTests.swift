import Foundation
import TestSupport
import Testing

/// Numbers from outside are bounded before arithmetic (docs/security-model.md, "Strict parsing"):
/// through the built binary, one request, one redirect or one config with a long number used to
/// end the process for every client. Now each is refused, and the proxy keeps serving.
@Suite("The built binary: long numbers never end the process", .serialized)
struct LongNumberBinaryTests {
    static let longHost = "128.0.7777777777777777777777777.1"

    private func get(_ proxyPort: UInt16, _ target: String, host: String) throws -> TestResponse? {
        let socket = try TestSocket.connect(port: proxyPort)
        try socket.send("GET \(target) HTTP/1.1\r\nHost: \(host)\r\n\r\n")
        return try HTTPReader(socket).readResponse()
    }

    @Test("check exits 2 with FILE:LINE:COLUMN for a huge duration, a long dotted host and a file nested 50 000 deep")
    func check() throws {
        let scratch = ScratchDirectory()
        let duration = scratch.write("duration.yaml", "timeouts:\n  connect: 9223372036854776s\n")
        let result = try ProxyProcess.runToCompletion(["check", "--config", duration])
        #expect(result.status == 2)
        #expect(result.stderr.hasPrefix("\(duration):2:12: invalid duration '9223372036854776s'"))
        let origin = scratch.write("origin.yaml", "scopes: [{ name: a, origins: [\"http://\(Self.longHost)\"] }]\n")
        let refused = try ProxyProcess.runToCompletion(["check", "--config", origin])
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("invalid origin 'http://\(Self.longHost)'"))
        // Not a number, the same trap: a file nested 50 000 deep crashed `check` (stack overflow).
        let deep = scratch.write("deep.yaml", "deep: " + String(repeating: "[", count: 50_000) + String(repeating: "]", count: 50_000) + "\n")
        let tooDeep = try ProxyProcess.runToCompletion(["check", "--config", deep])
        #expect(tooDeep.status == 2)
        #expect(tooDeep.stderr.hasPrefix("\(deep):1:"), "FILE:LINE:COLUMN")
        #expect(tooDeep.stderr.contains("nested deeper than 32 levels"))
        let blockDeep = scratch.write("block.yaml", "deep:\n  " + String(repeating: "- ", count: 50_000) + "x\n")
        #expect(try ProxyProcess.runToCompletion(["check", "--config", blockDeep]).status == 2)
    }

    @Test(
        "a request and a redirect with a long dotted host are answered; SIGHUP with a huge duration, a long host or a deeply nested file keeps the old config; the proxy keeps serving"
    )
    func survives() throws {
        let scratch = ScratchDirectory()
        let origin = try FixtureOrigin(host: "127.0.0.1") { connection in
            while let request = connection.readRequest() {
                if request.target.hasPrefix("/redirect") {
                    connection.respond(status: 302, headers: [("Location", "http://\(Self.longHost)/x")], body: "")
                } else {
                    connection.respond(status: 200, headers: [], body: "ok")
                }
            }
        }
        defer { origin.stop() }
        func config(_ extra: String) -> String {
            """
            scopes: [{ name: a, origins: ["\(origin.url)"], require_https: false, inject: { X-Token: "fixed" } }]
            redirects: { cross_origin: follow }
            \(extra)
            """
        }
        let path = scratch.write("c.yaml", config(""))
        let proxy = try ProxyProcess(arguments: ["--config", path])
        defer { proxy.terminate() }

        #expect(try get(proxy.port, "http://\(Self.longHost)/", host: Self.longHost)?.status == 400)
        #expect(try get(proxy.port, "\(origin.url)/", host: "\(origin.authority):18446744073709551616")?.status == 400)
        let redirected = try get(proxy.port, "\(origin.url)/redirect", host: origin.authority)
        #expect(redirected?.status != nil, "a Location with a long dotted host is answered (\(redirected?.status ?? 0))")
        #expect(try get(proxy.port, "\(origin.url)/", host: origin.authority)?.status == 200)

        func reloadFailures() -> Int { proxy.standardError.components(separatedBy: "reload_failed").count - 1 }
        // The last one is no number: a config nested 50 000 deep (100 KB) overflowed the stack.
        let deep = config("deep: " + String(repeating: "[", count: 50_000) + String(repeating: "]", count: 50_000))
        for (number, bad) in [
            config("timeouts: { connect: 9223372036854776s }"),
            "scopes: [{ name: a, origins: [\"http://\(Self.longHost)\"] }]\n", deep,
        ].enumerated() {
            scratch.write("c.yaml", bad)
            proxy.signal(SIGHUP)
            var logged = false
            for _ in 0..<50 where !logged {  // bounded wait, not a timing assertion
                usleep(100_000)
                logged = reloadFailures() == number + 1
            }
            #expect(logged, "reload \(number + 1) failed and said so")
            let served = try get(proxy.port, "\(origin.url)/", host: origin.authority)
            #expect(served?.status == 200, "the old config keeps serving")
            #expect(origin.requests.last?.header("x-token") == "fixed", "with the old scope")
        }
        #expect(proxy.terminate() == 0)
    }
}
