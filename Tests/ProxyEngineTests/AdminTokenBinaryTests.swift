import Foundation
import TestSupport
import Testing

/// One request to the admin port with the given head lines; the whole response.
private func adminRequest(_ port: UInt16, _ target: String, _ headers: [String] = []) throws -> TestResponse? {
    let socket = try TestSocket.connect(port: port)
    defer { socket.close() }
    socket.setReceiveTimeout(milliseconds: 10_000)
    try socket.send("GET \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers.map { $0 + "\r\n" }.joined() + "Connection: close\r\n\r\n")
    return try HTTPReader(socket).readResponse()
}

@Suite("admin_token through the binary: enforced, reloaded from its file, and never written anywhere", .serialized)
struct AdminTokenBinaryTests {
    @Test("the view opens with the token (Bearer, ?token= then its cookie), a reload's new value replaces it, and the canary is in no output")
    func tokenEndToEnd() throws {
        let first = "CANARYview" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        let second = "CANARYnext" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        let scratch = ScratchDirectory()
        let tokenPath = scratch.write("view_token", first)
        let configured = try ConfiguredProxy(arguments: ["--threads", "1"]) { logPath in
            """
            admin_token: view_token
            secrets: { view_token: { file: "\(tokenPath)" } }
            log: { output: \(logPath) }
            """
        }
        let (proxy, port) = (configured.process, configured.adminPort)
        defer { proxy.terminate() }

        #expect(try adminRequest(port, "/view")?.status == 401)
        #expect(try adminRequest(port, "/view", ["Authorization: Bearer \(first)"])?.status == 200)
        let opened = try #require(try adminRequest(port, "/view?token=\(first)"))
        #expect(opened.status == 200)
        let cookie = try #require(opened.header("set-cookie")).prefix { $0 != ";" }
        #expect(try adminRequest(port, "/view/view.css", ["Cookie: \(cookie)"])?.status == 200)
        #expect(try adminRequest(port, "/healthz")?.status == 200)

        // A new value in the file: the store's rotation (about once a second) reads it; then a
        // SIGHUP reload keeps using it. The old token and its cookie stop working.
        _ = scratch.write("view_token", second)
        var rotated = false
        for _ in 0..<100 where !rotated {
            rotated = try adminRequest(port, "/view", ["Authorization: Bearer \(second)"])?.status == 200
            if !rotated { usleep(100_000) }
        }
        #expect(rotated, "the rotated token opens the view")
        proxy.signal(SIGHUP)
        var reloaded = false
        for _ in 0..<100 where !reloaded {
            reloaded = proxy.standardError.contains("\"reloaded\"")
            if !reloaded { usleep(100_000) }
        }
        #expect(try adminRequest(port, "/view", ["Authorization: Bearer \(second)"])?.status == 200)
        #expect(try adminRequest(port, "/view", ["Authorization: Bearer \(first)"])?.status == 401)
        #expect(try adminRequest(port, "/view/view.css", ["Cookie: \(cookie)"])?.status == 401)

        let metrics = try configured.metrics()
        proxy.terminate()
        let log = (try? String(contentsOfFile: configured.logPath, encoding: .utf8)) ?? ""
        for (place, text) in [("stderr", proxy.standardError), ("access log", log), ("/metrics", metrics)] {
            #expect(!text.contains(first) && !text.contains(second), "an admin token is in \(place)")
        }
    }
}
