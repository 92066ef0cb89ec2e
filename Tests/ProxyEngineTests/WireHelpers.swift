import Foundation
import TestSupport
import Testing

/// Helpers for tests that judge the proxy by the bytes on the wire (the redirect, scope-rule, upgrade
/// and Host tests, among others). They rely only on TestSupport's public helpers and on bytes on the wire, never on engine internals.
enum Wire {
    /// The binary intercepting `https://localhost:ORIGINPORT` (its CA under the scratch directory,
    /// `ca/scopeproxy-ca.pem`), injecting `token` there as a Bearer Authorization, logging JSON to
    /// its log path, verifying the origin with `upstreamCA`.
    static func interceptingProxy(originPort: UInt16, upstreamCA: String, token: String) throws -> ConfiguredProxy {
        try ConfiguredProxy(environment: ["TOKEN": token]) { logPath in
            let directory = (logPath as NSString).deletingLastPathComponent
            return """
                log: { output: \(logPath) }
                secrets: { token: { env: TOKEN } }
                scopes: [{ name: api, origins: ["https://localhost:\(originPort)"], inject: { Authorization: "Bearer ${token}" } }]
                tls: { intercept: scoped, tunnel: deny, ca_dir: \(directory)/ca, upstream_ca: \(upstreamCA) }
                """
        }
    }

    /// Runs the Python fixture `script` (Tests/Fixtures) with `plan` written as JSON to a file, and
    /// returns the JSON object of the last line it printed (a failed run is an issue of its own).
    static func runFixture(_ script: String, plan: [String: Any]) throws -> [String: Any] {
        let scratch = ScratchDirectory()
        let data = try JSONSerialization.data(withJSONObject: plan)
        let planPath = scratch.write("plan.json", String(decoding: data, as: UTF8.self))
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/\(script)").path
        let (status, output) = try runProgram(["/usr/bin/env", "python3", path, planPath])
        #expect(status == 0, "\(script): \(output.suffix(400))")
        let line = output.split(separator: "\n").last.map(String.init) ?? ""
        return (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]) ?? [:]
    }

    /// Runs Tests/Fixtures/h2_client.py with `plan` (see the script) and returns its JSON answer.
    static func h2Client(_ plan: [String: Any]) throws -> [String: Any] { try runFixture("h2_client.py", plan: plan) }

    /// The proxy's JSON access-log lines once there are at least `count` (waiting up to 5 s; none
    /// if they never come, so a count check then fails).
    static func jsonLogLines(_ proxy: ConfiguredProxy, waitingFor count: Int) -> [[String: Any]] {
        for _ in 0..<100 {
            let lines = ((try? String(contentsOfFile: proxy.logPath, encoding: .utf8)) ?? "").split(separator: "\n")
                .compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            if lines.count >= count { return lines }
            usleep(50_000)
        }
        return []
    }

    /// The per-stream answers of an h2_client.py run, in the order the plan listed them.
    static func streams(_ answer: [String: Any]) -> [[String: Any]] { answer["streams"] as? [[String: Any]] ?? [] }

    /// A unique credential stand-in. Letters only after the label: a digit run could make the log
    /// redactor classify it as `:number` and hide a leak the test is looking for.
    static func canary(_ label: String) -> String {
        let letters = Array("abcdefghijklmnopqrstuvwxyz")
        return "CANARY-\(label)-" + String((0..<12).map { _ in letters.randomElement()! })
    }

    /// Everything an origin received: raw heads and bodies, in order.
    static func received(_ origin: FixtureOrigin) -> String {
        origin.requests.map { $0.rawHeadText + String(decoding: $0.body, as: UTF8.self) }.joined()
    }

    /// The canaries among `all` that reached `origin` (anywhere in a head or body).
    static func canaries(in origin: FixtureOrigin, among all: [String]) -> Set<String> {
        let text = received(origin)
        return Set(all.filter { text.contains($0) })
    }

    static func request(
        _ target: String, host: String?, _ headers: [(String, String)] = [], method: String = "GET",
        body: String? = nil
    ) -> String {
        var text = "\(method) \(target) HTTP/1.1\r\n"
        if let host { text += "Host: \(host)\r\n" }
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        if let body { text += "Content-Length: \(body.utf8.count)\r\n" }
        return text + "\r\n" + (body ?? "")
    }

    /// An origin that answers each request on a connection with `reply(request)` written in one
    /// send, then keeps the connection open until the proxy hangs up.
    static func scripted(host: String = "127.0.0.1", _ reply: @escaping @Sendable (TestRequest) -> [UInt8]) throws -> FixtureOrigin {
        try FixtureOrigin(host: host) { connection in
            while let request = connection.readRequest() {
                connection.send(reply(request))
            }
        }
    }

    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, haystack.count >= needle.count else { return needle.isEmpty }
        for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
            if haystack[start..<(start + needle.count)].elementsEqual(needle) { return true }
        }
        return false
    }
}

/// A response read leniently: unlike `HTTPReader.readResponse` it never traps on a malformed
/// head, because a desynchronized stream is exactly what some of these tests provoke.
struct LenientResponse {
    var status: Int?
    var head: String
    var body: [UInt8]

    var bodyText: String { String(decoding: body, as: UTF8.self) }
    /// Head and body as text, for "did this marker reach the client" checks.
    var text: String { head + bodyText }

    func header(_ name: String) -> String? {
        for line in head.components(separatedBy: "\r\n").dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            if line[..<colon].lowercased() == name.lowercased() {
                return line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
        }
        return nil
    }

    /// Nil at EOF, on a timeout, or inside a head. A body is read by Content-Length (0 if absent).
    static func read(_ reader: HTTPReader, requestMethod: String = "GET") -> LenientResponse? {
        guard let headBytes = try? reader.readHeadBytes() else { return nil }
        let head = String(decoding: headBytes, as: UTF8.self)
        let startLine = head.prefix { $0 != "\r" }
        let parts = startLine.split(separator: " ")
        var response = LenientResponse(status: parts.count > 1 ? Int(parts[1]) : nil, head: head, body: [])
        if requestMethod == "HEAD" || [204, 304].contains(response.status ?? 0) { return response }
        let length = response.header("content-length").flatMap { Int($0) } ?? 0
        response.body = (try? reader.readExactly(length)) ?? reader.takeBuffered()
        return response
    }
}
