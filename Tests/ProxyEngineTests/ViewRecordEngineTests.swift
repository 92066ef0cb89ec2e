import Foundation
import HTTP1Codec
import ProxyCore
import ProxyEngine
import RecordRendering
import Redaction
import ScopePolicy
import TestSupport
import Testing

// The live view's records through the real engine: what each exchange publishes, with canaries
// wherever a secret can be (the client's own cookie, a secret in a safe header, in a URL query, its
// base64 and percent forms, a token the origin echoes in a response header): never a value, and
// every record valid JSON.

/// The entries the engine published (the recorder's observer), waited for by count.
final class ViewEntries: @unchecked Sendable {
    private let condition = NSCondition()
    private var entries: [ViewEntry] = []

    func add(_ entry: ViewEntry) {
        condition.lock()
        entries.append(entry)
        condition.broadcast()
        condition.unlock()
    }

    /// The first `count` entries once published (a record is written as its exchange ends, which
    /// may be just after the client read its response); fewer if they do not come within 10 s.
    func wait(for count: Int) -> [ViewEntry] {
        condition.lock()
        defer { condition.unlock() }
        let deadline = Date().addingTimeInterval(10)
        while entries.count < count, condition.wait(until: deadline) {}
        return entries
    }

    /// Each entry's record, parsed (every one must be one JSON object on one line).
    func records(_ count: Int) throws -> [[String: Any]] {
        try wait(for: count).map { entry in
            #expect(!entry.json.contains(0x0A))
            return try #require(try JSONSerialization.jsonObject(with: Data(entry.json)) as? [String: Any])
        }
    }
}

private func canary(_ label: String) -> String { "CANARY\(label)\(String(UInt64.random(in: 1...UInt64.max), radix: 16))x" }

/// A proxy running `yaml` whose view records go to `entries` (with an access log that writes
/// nothing: the view is redacted by its rules and tripwire).
private func viewProxy(yaml: String, secrets: [String: String], entries: ViewEntries) throws -> ProxyHarness {
    try ProxyHarness(yaml: yaml, secrets: secrets) { engine in
        engine.accessLog = try? AccessLog(
            format: .json, output: .discard, rules: RedactionRules(), logBodies: false,
            secretValues: secrets.values.map { SecretValue($0) }, metrics: engine.metrics)
        engine.viewFeed = ViewFeed()
        engine.viewRecorder = ViewRecorder(configPath: nil, observer: { entries.add($0) })
    }
}

private func member(_ record: [String: Any], _ path: String...) -> Any? {
    var current: Any? = record
    for key in path { current = (current as? [String: Any])?[key] }
    return current
}

@Suite("View record: what the engine publishes, never a value", .serialized)
struct ViewRecordEngineTests {
    @Test("canaries in every place a secret can hide stay out of the record; the heads name the injected token")
    func canaries() throws {
        // `/`, `+` and `=` make the percent form differ from the value itself.
        let token = canary("token") + "/+=", cookie = canary("cookie"), echoed = canary("echoed")
        let origin = try FixtureOrigin { connection in
            while let request = connection.readRequest() {
                // The origin echoes the token it got, in a safe header, a hidden one and base64.
                let got = request.header("x-service-token") ?? "-"
                connection.respond(
                    headers: [
                        ("Server", "echo \(got)"), ("X-Echo", got), ("X-Echo-B64", Data(got.utf8).base64EncodedString()),
                        ("X-Other", echoed),
                    ], body: "ok")
            }
        }
        defer { origin.stop() }
        let entries = ViewEntries()
        let proxy = try viewProxy(
            yaml: """
                secrets: { token: { env: TOKEN } }
                scopes: [{ name: api, origins: ["\(origin.url)"], require_https: false, inject: { X-Service-Token: "${token}" } }]
                """, secrets: ["token": token], entries: entries)
        defer { proxy.stop() }
        let percent = PercentEncoding.encode(Array(token.utf8))
        let base64 = Data(token.utf8).base64EncodedString()
        let request =
            "GET \(origin.url)/items?page=\(percent)&api_key=\(percent) HTTP/1.1\r\nHost: \(origin.authority)\r\n"
            + "Cookie: own=\(cookie)\r\nUser-Agent: agent \(token)\r\nAccept-Language: \(percent)\r\nX-B64: \(base64)\r\n\r\n"
        let response = try #require(try proxy.exchange(request))
        #expect(response.status == 200)
        let record = try #require(try entries.records(1).first)
        let text = String(decoding: try #require(entries.wait(for: 1).first).json, as: UTF8.self)
        for value in [token, cookie, percent, base64, Data(token.utf8).base64EncodedString()] {
            #expect(!text.contains(value), "the record shows a value (\(value.prefix(10))...)")
        }
        #expect(!text.contains(echoed), "a hidden response header with no known value is <redacted>")
        #expect(member(record, "view", "decision") as? String == "injected")
        #expect(member(record, "view", "origin") as? String == origin.authority)
        #expect(member(record, "view", "hop") as? Int == 1)
        let sent = try #require(member(record, "detail", "request", "origin", "headers") as? [[String]])
        #expect(sent.contains(["x-service-token", "${token}"]))
        let client = try #require(member(record, "detail", "request", "client", "headers") as? [[String]])
        #expect(client.contains(["cookie", "<redacted>"]))
        #expect(client.contains(["user-agent", "agent ${token}"]))
        #expect(client.contains { $0[0] == "x-b64" && $0[1].hasPrefix("${token}") }, "base64 of the value, named")
        #expect(client.contains(["accept-language", "${token}"]), "the percent form, named")
        let received = try #require(member(record, "detail", "response", "origin", "headers") as? [[String]])
        #expect(received.contains(["server", "echo ${token}"]))
        #expect(received.contains(["x-echo", "${token}"]))
        #expect(received.contains(["x-other", "<redacted>"]))
        #expect(member(record, "detail", "response", "client", "status") as? Int == 200)
        let rules = try #require(member(record, "detail", "rules") as? [[String: Any]])
        #expect(rules.contains { $0["rule"] as? String == "inject" && $0["secrets"] as? [String] == ["token"] })
        #expect(record["url"] as? String == "http://\(origin.authority)" + (member(record, "view", "path") as? String ?? "-"))
    }

    @Test("a followed redirect: one record per hop with the same id, hops 1 and 2; a refusal; h2c; and curl from a record reproduces its decision")
    func chainRefusalH2AndCurl() throws {
        let token = canary("chain")
        let origin = try FixtureOrigin { connection in
            while let request = connection.readRequest() {
                if request.target.hasPrefix("/start") {
                    connection.respond(status: 302, headers: [("Location", "/next")], body: "")
                } else {
                    connection.respond(body: "done")
                }
            }
        }
        defer { origin.stop() }
        let entries = ViewEntries()
        let proxy = try viewProxy(
            yaml: """
                secrets: { token: { env: TOKEN } }
                scopes: [{ name: api, origins: ["\(origin.url)"], require_https: false, inject: { Authorization: "Bearer ${token}" } }]
                redirects: { cross_origin: follow }
                """, secrets: ["token": token], entries: entries)
        defer { proxy.stop() }

        #expect(try proxy.exchange("GET \(origin.url)/start HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")?.status == 200)
        var records = try entries.records(2)
        #expect(records.map { member($0, "view", "hop") as? Int } == [1, 2])
        #expect(records[0]["id"] as? String == records[1]["id"] as? String)
        #expect(records.map { member($0, "view", "decision") as? String } == ["followed", "injected"])
        #expect(member(records[0], "detail", "response", "client") is NSNull)

        // A refusal: the proxy's own answer to a request it will not forward (origin-form to the forward proxy).
        #expect(try proxy.exchange("GET /relative HTTP/1.1\r\nHost: x\r\n\r\n")?.status == 400)
        records = try entries.records(3)
        #expect(member(records[2], "view", "decision") as? String == "refused")
        #expect(member(records[2], "detail", "request", "origin") is NSNull)

        // HTTP/2 with prior knowledge on the plain listener: the stream's record names the same facts.
        let (status, body) = try curl([
            "--http2-prior-knowledge", "--connect-to", "\(origin.authority):127.0.0.1:\(proxy.port)", "\(origin.url)/next",
        ])
        #expect(status == 0 && body == "done")
        records = try entries.records(4)
        #expect(records[3]["proto"] as? String == "h2c")
        #expect(member(records[3], "view", "decision") as? String == "injected")
        #expect((member(records[3], "detail", "request", "client", "line") as? String)?.hasSuffix(" HTTP/2") == true)
        let sent = try #require(member(records[3], "detail", "request", "origin", "headers") as? [[String]])
        #expect(sent.contains(["authorization", "Bearer ${token}"]))

        // Copy as curl, run by bash through the same proxy: the next record says the same.
        let command = try #require(member(records[1], "detail", "curl") as? String)
        #expect(command.contains("--proxy http://127.0.0.1:\(proxy.port) "))
        let (ran, output) = try runProgram(["/bin/bash", "-c", command.replacingOccurrences(of: "curl ", with: "curl -sS --max-time 10 ")])
        #expect(ran == 0 && output == "done")
        records = try entries.records(5)
        #expect(member(records[4], "view", "decision") as? String == member(records[1], "view", "decision") as? String)
        #expect(member(records[4], "view", "path") as? String == "/next")
        for record in records {
            let text = String(decoding: try JSONSerialization.data(withJSONObject: record), as: UTF8.self)
            #expect(!text.contains(token))
        }
    }
}
