import Foundation
import Synchronization
import TestSupport
import Testing

// `scopeproxy tail` through the built binary against a scripted admin address (FixtureOrigin on
// loopback): what it asks for, what it prints, how it reconnects, and how it ends. Each fake stream
// ends its test by answering 401 on a later connection, so no test waits on a clock.

/// A view record as the feed publishes it (docs/view.md): every JSON access log field, then `view`.
private func record(seq: Int, id: String, status: Int = 200, decision: String = "injected", extra: String = "") -> String {
    #"{"seq":\#(seq),"ts":"2026-12-02T13:00:0\#(seq % 10).000Z","id":"\#(id)","client":"127.0.0.1:5000","client_id":"ci","method":"GET","proto":"http/1.1","url":"https://api.example:443/user","status":\#(status),"bytes_in":10,"bytes_out":20,"duration_ms":1.250,"scope":"github","injected":["Authorization"],"stripped":[]\#(extra),"view":{"decision":"\#(decision)","origin":"api.example:443","path":"/user","hop":1},"detail":null,"explain":null}"#
}

private func event(_ seq: Int, _ data: String) -> String { "id: \(seq)\ndata: \(data)\n\n" }

private let streamHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n\r\n"
private let unauthorized = "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: 25\r\n\r\n{\"error\":\"unauthorized\"}\n"

/// A fake admin address: connection N (0-based) is answered by `answers[N]` (the last one for the
/// rest), each after reading the request.
private func fakeAdmin(_ answers: [String]) throws -> FixtureOrigin {
    let served = Mutex(0)
    return try FixtureOrigin { connection in
        guard connection.readRequest() != nil else { return }
        let index = served.withLock { count in
            defer { count += 1 }
            return count
        }
        connection.send(answers[min(index, answers.count - 1)])
    }
}

private func config(_ scratch: ScratchDirectory, port: UInt16) -> String {
    scratch.write("c.yaml", "admin: \"127.0.0.1:\(port)\"\n")
}

@Suite("scopeproxy tail: the view's stream in the terminal")
struct TailCLITests {
    @Test("filters go into the query; lines as the access log's text, uncoloured into a pipe; a drop reconnects with Last-Event-ID")
    func streamAndReconnect() throws {
        let admin = try fakeAdmin([
            streamHead + event(1, record(seq: 1, id: "r-1")) + ": keep-alive\n\n"
                + event(2, record(seq: 2, id: "r-2", status: 403, decision: "refused")),
            streamHead + event(3, record(seq: 3, id: "r-3", status: 502, decision: "failed")),
            unauthorized,
        ])
        defer { admin.stop() }
        let scratch = ScratchDirectory()
        let outcome = try runBinary(
            ["tail", "--config", config(scratch, port: admin.port), "--client", "ci", "--origin", "https://api.example:443"], removing: ["NO_COLOR"])
        #expect(!outcome.timedOut)
        let requests = admin.requests
        try #require(requests.count == 3, "\(requests.map(\.target))")
        for request in requests {
            #expect(request.method == "GET")
            #expect(request.target == "/view/events?client=ci&origin=https://api.example:443")
            #expect(request.header("authorization") == nil, "no admin_token in this config: no token sent")
            #expect(request.header("host") == "127.0.0.1:\(admin.port)")
        }
        #expect(requests[0].header("last-event-id") == nil)
        #expect(requests[1].header("last-event-id") == "2")
        #expect(requests[2].header("last-event-id") == "3")
        #expect(
            outcome.stdout == """
                2026-12-02T13:00:01.000Z GET https://api.example:443/user 200 1.250ms client=ci proto=http/1.1 scope=github injected=Authorization id=r-1
                  -> injected
                2026-12-02T13:00:02.000Z GET https://api.example:443/user 403 1.250ms client=ci proto=http/1.1 scope=github injected=Authorization id=r-2
                  -> refused
                2026-12-02T13:00:03.000Z GET https://api.example:443/user 502 1.250ms client=ci proto=http/1.1 scope=github injected=Authorization id=r-3
                  -> failed

                """, "\(outcome.stdout)")
        #expect(!outcome.stdout.contains("\u{1B}"), "no colour into a pipe")
        #expect(outcome.stderr.contains("streaming the view of admin 127.0.0.1:\(admin.port) (client=ci, origin=https://api.example:443)"))
        #expect(outcome.stderr.contains("reconnecting after event 2"), "\(outcome.stderr)")
        #expect(outcome.stderr.contains("reconnected to admin"), "\(outcome.stderr)")
        #expect(outcome.status == 1, "the 401 ends it")
        #expect(
            outcome.stderr.hasSuffix(
                "answered 401: the view needs a token: set top-level admin_token: NAME in \(scratch.path)/c.yaml to the secret the proxy uses\n"),
            "\(outcome.stderr)")
    }

    @Test("401 at once: exit 1 naming admin_token; nothing on stdout")
    func unauthorizedAtOnce() throws {
        let admin = try fakeAdmin([unauthorized])
        defer { admin.stop() }
        let scratch = ScratchDirectory()
        let outcome = try runBinary(["tail", "--config", config(scratch, port: admin.port)])
        #expect(outcome.status == 1)
        #expect(outcome.stdout.isEmpty)
        #expect(outcome.stderr.contains("admin 127.0.0.1:\(admin.port) answered 401"), "\(outcome.stderr)")
        #expect(outcome.stderr.contains("admin_token"))
    }

    @Test("nothing listening: exit 1, which address, and whether the proxy runs")
    func connectionRefused() throws {
        let listener = try TestListener()
        let port = listener.port
        listener.close()
        let scratch = ScratchDirectory()
        let path = config(scratch, port: port)
        let outcome = try runBinary(["tail", "--config", path])
        #expect(outcome.status == 1)
        #expect(
            outcome.stderr == "scopeproxy: nothing answers on admin address 127.0.0.1:\(port) (Connection refused); is the proxy running with "
                + "this config (\(path))?\n", "\(outcome.stderr)")
    }

    @Test(
        "an answer that is not the view's stream ends it with exit 1",
        arguments: [
            ("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 2\r\n\r\nhi", "not with an event stream (Content-Type: text/html)"),
            ("SSH-2.0-OpenSSH_9.6\r\n", "did not answer with HTTP"),
            ("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", "has no /view/events (404)"),
            (
                "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: 30\r\n\r\n{\"error\":\"unknown query key\"}\n",
                #"answered 400 ({"error":"unknown query key"})"#
            ),
        ])
    func notAStream(answer: String, message: String) throws {
        let admin = try fakeAdmin([answer])
        defer { admin.stop() }
        let scratch = ScratchDirectory()
        let outcome = try runBinary(["tail", "--config", config(scratch, port: admin.port)])
        #expect(!outcome.timedOut)
        #expect(outcome.status == 1)
        #expect(outcome.stdout.isEmpty)
        #expect(outcome.stderr.contains(message), "\(outcome.stderr)")
    }

    @Test("hostile records are skipped with a word on stderr, never a crash or an escape sequence on the terminal")
    func hostileRecords() throws {
        let deep = String(repeating: "[", count: 100_000)
        let hostile = [
            #"{"ts":"#,  // cut short
            deep,  // nested past any bound
            #"{"seq":1,"seq":2}"#,  // a duplicate member
            #"{"ts":"x","status":99999999999999999999999999999,"duration_ms":1e999999,"id":"i"}"#,
            #"{"ts":"\u001b[2J\u001b]0;owned\u0007","id":"esc","status":200,"injected":["\u009b31m"]}"#,
            #"{"injected":"not a list","id":"x"}"#,
            #"{"guard":{"secret":1},"id":"x"}"#,
            "[1,2,3]",
            "\u{FF}\u{FE}",
        ]
        var events = streamHead
        for (index, data) in hostile.enumerated() { events += event(index + 1, data) }
        let stream = events + event(99, record(seq: 99, id: "after"))
        let invalidUTF8: [UInt8] = Array("id: 100\ndata: {\"id\":\"".utf8) + [0xC3, 0x28] + Array("\"}\n\n".utf8)
        let served = Mutex(0)
        let admin = try FixtureOrigin { connection in
            guard connection.readRequest() != nil else { return }
            let first = served.withLock { count in
                defer { count += 1 }
                return count == 0
            }
            if first {
                connection.send(stream)
                connection.send(invalidUTF8)
            } else {
                connection.send(unauthorized)
            }
        }
        defer { admin.stop() }
        let scratch = ScratchDirectory()
        let outcome = try runBinary(["tail", "--config", config(scratch, port: admin.port)])
        #expect(!outcome.timedOut)
        #expect(outcome.status == 1, "ended by the 401, not by a signal: \(outcome.stderr)")
        #expect(!outcome.stdout.contains("\u{1B}"), "\(outcome.stdout)")
        #expect(!outcome.stdout.contains("\u{9B}"))
        #expect(!outcome.stdout.contains("\u{07}"))
        #expect(outcome.stdout.contains("id=after"), "a good record after bad ones is printed")
        #expect(outcome.stdout.contains("?[2J?]0;owned?"), "control characters shown as ?: \(outcome.stdout)")
        for seq in [1, 2, 3, 6, 7, 8, 9, 100] {
            #expect(outcome.stderr.contains("scopeproxy: record \(seq) skipped: "), "record \(seq): \(outcome.stderr)")
        }
    }

    @Test("an event line over 1 MiB ends the stream (exit 1) instead of growing without bound")
    func endlessLine() throws {
        let admin = try FixtureOrigin { connection in
            guard connection.readRequest() != nil else { return }
            connection.send(streamHead + "data: ")
            let chunk = [UInt8](repeating: UInt8(ascii: "a"), count: 64 * 1024)
            for _ in 0..<40 { connection.send(chunk) }
        }
        defer { admin.stop() }
        let scratch = ScratchDirectory()
        let outcome = try runBinary(["tail", "--config", config(scratch, port: admin.port)])
        #expect(outcome.status == 1)
        #expect(outcome.stderr.contains("an event line longer than 1 MiB"), "\(outcome.stderr)")
    }

    @Test("SIGTERM while streaming: exit 0")
    func stopsOnSignal() throws {
        let admin = try FixtureOrigin { connection in
            guard connection.readRequest() != nil else { return }
            connection.send(streamHead + event(1, record(seq: 1, id: "r-1")))
            // Held open until tail goes away.
            _ = try? connection.socket.receive()
        }
        defer { admin.stop() }
        let scratch = ScratchDirectory()
        // The deadline is only when the test sends SIGTERM; nothing is asserted about time.
        let outcome = try runBinary(["tail", "--config", config(scratch, port: admin.port)], seconds: 3)
        #expect(outcome.timedOut)
        #expect(outcome.status == 0)
        #expect(outcome.stdout.contains("id=r-1"))
    }

    @Test("on a terminal the line is coloured like the access log's (status by class, id dim, the decision line dim)")
    func colourOnATerminal() throws {
        let admin = try fakeAdmin([streamHead + event(1, record(seq: 1, id: "r-1")), unauthorized])
        defer { admin.stop() }
        let scratch = ScratchDirectory()
        let terminal = try PseudoTerminal()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: ProxyProcess.binaryPath)
        process.arguments = ["tail", "--config", config(scratch, port: admin.port)]
        var environment = ProcessInfo.processInfo.environment
        environment["NO_COLOR"] = nil
        process.environment = environment
        process.standardOutput = terminal.followerHandle
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let shown = terminal.read(until: "-> injected", seconds: 10)
        process.waitUntilExit()
        #expect(shown.contains(" \u{1B}[32m200\u{1B}[0m 1.250ms"), "\(shown.debugDescription)")
        #expect(shown.contains("\u{1B}[2mid=r-1\u{1B}[0m"))
        #expect(shown.contains("\u{1B}[2m  -> injected\u{1B}[0m"))
    }

    @Test("no admin address, or one on port 0: exit 2 with the hint health gives")
    func noAdmin() throws {
        let scratch = ScratchDirectory()
        let none = try runBinary(["tail", "--config", scratch.write("n.yaml", "listen: \"127.0.0.1:0\"\n")])
        #expect(none.status == 2)
        #expect(none.stderr.contains("tail needs an 'admin' address"))
        let free = try runBinary(["tail", "--config", scratch.write("p.yaml", "admin: \"127.0.0.1:0\"\n")])
        #expect(free.status == 2)
        #expect(free.stderr.contains("give admin a fixed port"), "\(free.stderr)")
        let empty = try runBinary(["tail", "--client", ""])
        #expect(empty.status == 2, "an empty filter is refused")
    }
}

@Suite("scopeproxy tail against a running proxy")
struct TailProxyTests {
    @Test("with admin_token: tail sends the secret's value and prints the proxy's records; a wrong value is a 401 naming the secret")
    func realFeed() throws {
        let token = "CANARY-view-token-0123456789"
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let configured = try ConfiguredProxy(environment: ["VIEW_TOKEN": token]) { log in
            "admin_token: view_token\nsecrets:\n  view_token: { env: VIEW_TOKEN }\nlog: { output: \(log), format: json }\n"
        }
        defer { _ = configured.process.terminate() }
        // Records are made only while someone watches (docs/view.md): a viewer first, left open.
        let watcher = try TestSocket.connect(port: configured.adminPort)
        defer { watcher.close() }
        try watcher.send("GET /view/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(token)\r\n\r\n")
        let watcherHead = try HTTPReader(watcher).readHeadBytes().map { String(decoding: $0, as: UTF8.self) } ?? ""
        #expect(watcherHead.hasPrefix("HTTP/1.1 200"), "\(watcherHead.prefix(40))")
        let socket = try TestSocket.connect(port: configured.port)
        try socket.send("GET \(origin.url)/tail-probe?q=1 HTTP/1.1\r\nHost: \(origin.authority)\r\nConnection: close\r\n\r\n")
        #expect(try HTTPReader(socket).readResponse()?.status == 200)
        socket.close()
        // The deadline is when the test stops tail (SIGTERM): the record is replayed to a new viewer at once.
        let outcome = try runBinary(
            ["tail", "--config", configured.configPath, "--origin", origin.authority], environment: ["VIEW_TOKEN": token], seconds: 3)
        #expect(outcome.status == 0, "\(outcome.stderr)")
        #expect(outcome.stdout.contains(" GET \(origin.url)/tail-probe?q=:redacted 200 "), "\(outcome.stdout)")
        #expect(outcome.stdout.contains("\n  -> passed\n"), "\(outcome.stdout)")
        let wrong = try runBinary(["tail", "--config", configured.configPath], environment: ["VIEW_TOKEN": "CANARY-wrong-token-0000000"])
        #expect(wrong.status == 1)
        #expect(wrong.stderr.contains("answered 401: the token of secret 'view_token' (admin_token) was refused"), "\(wrong.stderr)")
        for text in [outcome.stdout, outcome.stderr, wrong.stdout, wrong.stderr] {
            #expect(!text.contains("CANARY"), "a token value in tail's output")
        }
    }
}
