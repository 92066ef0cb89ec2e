import Foundation
import HTTP1Codec
import PosixSupport
import ScopePolicy
import TestSupport
import Testing

/// Secrets that cannot leave (docs/security-model.md) through the real engine: placeholders replaced for their origin only, the response
/// scrub across every chunk boundary, the egress guard at every offset of a streamed body. Each
/// test plants canaries and proves where they arrived and where they did not; assertions print
/// offsets and counts, never a body that could hold a value.
@Suite("Secrets that cannot leave: placeholders, scrub and guard through the engine", .serialized)
struct SecretTrafficEngineTests {
    /// Random, but of a fixed length (hex padded to 16 digits): a length that varied from run to
    /// run made the base64 expectations below hold on 15 runs in 16. `injected` is 23 bytes, so
    /// its base64 ends in padding, which the scrub leaves.
    static func randomHex() -> String {
        let digits = String(UInt64.random(in: 0...UInt64.max), radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
    static let value = "GHV-" + randomHex() + "-real"
    static let injected = "INJ-" + randomHex() + "-tk"
    static var placeholder: String { Placeholder.text(secret: "gh_token", key: ProxyHarness.placeholderKey) }

    /// `scoped` substitutes gh_token and injects X-Token; every other origin is outside both.
    static func yaml(scoped: FixtureOrigin, extra: String = "") -> String {
        """
        secrets:
          gh_token: { env: GH, placeholder: true, env_var: GITHUB_TOKEN }
          api_token: { env: API }
        scopes:
          - name: gh
            origins: ["\(scoped.url)"]
            require_https: false
            substitute: [gh_token]
            inject: { X-Token: "${api_token}" }
        \(extra)
        """
    }

    static let secrets = ["gh_token": value, "api_token": injected]

    /// An origin that answers every request with what it received: the head in `X-Echo-Auth` and
    /// the whole request (head and body) as the body.
    static func echoing() throws -> FixtureOrigin {
        try FixtureOrigin { connection in
            while let request = connection.readRequest() {
                connection.respond(
                    headers: [("X-Echo-Auth", request.header("authorization") ?? "-")],
                    body: request.rawHead + request.body)
            }
        }
    }

    @Test("a placeholder in a header, a query value and a JSON body: the origin gets the value, the client only stars")
    func substitutedAndScrubbed() throws {
        let origin = try Self.echoing()
        let other = try Self.echoing()
        defer { origin.stop(); other.stop() }
        let proxy = try ProxyHarness(yaml: Self.yaml(scoped: origin), secrets: Self.secrets)
        defer { proxy.stop() }
        let socket = try proxy.connect()
        let reader = HTTPReader(socket)
        let json = "{\"token\":\"\(Self.placeholder)\",\"n\":1}"
        try socket.send(
            "POST \(origin.url)/graphql?key=\(Self.placeholder) HTTP/1.1\r\nHost: \(origin.authority)\r\n"
                + "Authorization: token \(Self.placeholder)\r\nContent-Type: application/json\r\nContent-Length: \(json.utf8.count)\r\n\r\n\(json)")
        let response = try #require(try reader.readResponse(requestMethod: "POST"))
        #expect(response.status == 200)
        let received = try #require(origin.requests.last)
        #expect(received.target == "/graphql?key=\(Self.value)")
        #expect(received.header("authorization") == "token \(Self.value)")
        #expect(String(decoding: received.body, as: UTF8.self) == "{\"token\":\"\(Self.value)\",\"n\":1}")
        #expect(received.header("x-token") == Self.injected)
        // The echo carried the value back three times in the body, once in a header: all masked.
        let stars = String(repeating: "*", count: Self.value.utf8.count)
        #expect(!response.bodyText.contains(Self.value) && !response.bodyText.contains(Self.injected))
        #expect(response.bodyText.components(separatedBy: stars).count - 1 >= 3)
        #expect(response.header("x-echo-auth") == "token \(stars)")
        #expect(response.body.count == Int(response.header("content-length") ?? "") ?? -1, "same length: the framing holds")

        // The same placeholder to another origin: 403, and that origin receives nothing at all.
        let refused = try #require(try proxy.exchange("GET \(other.url)/?q=\(Self.placeholder) HTTP/1.1\r\nHost: \(other.authority)\r\n\r\n"))
        #expect(refused.status == 403)
        #expect(refused.bodyText.contains("placeholder_out_of_scope") && refused.bodyText.contains("gh_token"))
        #expect(other.acceptedConnections == 0)
    }

    @Test("an echoing origin's chunked body: the injected value is masked wherever a chunk boundary cuts it")
    func scrubAtEveryChunkOffset() throws {
        let secret = Array(Self.injected.utf8)
        let offsets = Locked(0)
        let origin = try FixtureOrigin { connection in
            // Request k: the value starts k bytes before a chunk boundary (and a second copy base64).
            while let request = connection.readRequest() {
                let split = Int(request.target.split(separator: "/").last ?? "0") ?? 0
                let body = Array("<pre>".utf8) + secret + Array(" b64=".utf8) + Array(Base64.encode(secret).utf8) + Array("</pre>".utf8)
                let cut = 5 + split
                var chunked = Array(String(cut, radix: 16).utf8) + Array("\r\n".utf8) + body[..<cut] + Array("\r\n".utf8)
                for byte in body[cut...] { chunked += Array("1\r\n".utf8) + [byte] + Array("\r\n".utf8) }
                chunked += Array("0\r\n\r\n".utf8)
                // Counted before the answer leaves: the client may read it and check the count
                // before this thread runs again.
                offsets.withLock { $0 += 1 }
                connection.send(Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".utf8) + chunked)
            }
        }
        defer { origin.stop() }
        let proxy = try ProxyHarness(yaml: Self.yaml(scoped: origin), secrets: Self.secrets)
        defer { proxy.stop() }
        let socket = try proxy.connect()
        let reader = HTTPReader(socket)
        for split in 0...secret.count {
            try socket.send("GET \(origin.url)/split/\(split) HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
            let response = try #require(try reader.readResponse())
            #expect(response.complete)
            // Every base64 character masked, the last one too (it holds the value's last bits); the
            // padding stays.
            let encoded = Base64.encode(secret)
            let padding = encoded.reversed().prefix { $0 == "=" }.count
            let expected =
                "<pre>" + String(repeating: "*", count: secret.count) + " b64="
                + String(repeating: "*", count: encoded.utf8.count - padding) + String(repeating: "=", count: padding) + "</pre>"
            #expect(response.bodyText == expected, "split \(split): the body is not the masked echo")
        }
        #expect(offsets.withLock { $0 } == secret.count + 1)
    }

    @Test("a secret value streamed toward another origin: cut before its first byte leaves, at every offset and split")
    func guardAtEveryOffset() throws {
        let secret = Array(Self.injected.utf8)
        let received = Locked<[[UInt8]]>([])
        let sink = try FixtureOrigin { connection in
            received.withLock { $0.append(connection.socket.receiveUntilClose()) }
        }
        let scoped = try Self.echoing()
        defer { sink.stop(); scoped.stop() }
        let proxy = try ProxyHarness(yaml: Self.yaml(scoped: scoped), secrets: Self.secrets)
        defer { proxy.stop() }
        let filler = Array(repeating: UInt8(ascii: "x"), count: 40)
        var answered = 0
        for offset in stride(from: 0, through: filler.count, by: 7) {
            for split in [1, secret.count / 2, secret.count - 1] {
                let body = filler[..<offset] + secret + filler[offset...]
                let socket = try proxy.connect()
                try socket.send("POST \(sink.url)/upload HTTP/1.1\r\nHost: \(sink.authority)\r\nContent-Length: \(body.count)\r\n\r\n")
                // The body in two writes, the value cut at `split`.
                try socket.send(Array(body[..<(offset + split)]))
                usleep(20_000)
                try socket.send(Array(body[(offset + split)...]))
                if let response = try HTTPReader(socket).readResponse(requestMethod: "POST") {
                    #expect(response.status == 403)
                    #expect(response.bodyText.contains("secret_egress_blocked") && !response.bodyText.contains(Self.injected))
                    answered += 1
                }
                socket.close()
            }
        }
        // Every connection the sink saw ended before the value was complete.
        for _ in 0..<100 where received.withLock({ $0.count }) < answered { usleep(10_000) }
        let arrivals = received.withLock { $0 }
        #expect(!arrivals.isEmpty)
        for (index, bytes) in arrivals.enumerated() {
            #expect(!contains(bytes, secret), "connection \(index) received the whole value")
        }
        #expect(answered > 0, "the client is told why (403) when no response had started")
    }

    @Test("a secret value in the target or a header toward another origin: 403 before anything is sent; its own origin gets it")
    func headGuard() throws {
        let sink = try Self.echoing()
        let scoped = try Self.echoing()
        defer { sink.stop(); scoped.stop() }
        let proxy = try ProxyHarness(yaml: Self.yaml(scoped: scoped), secrets: Self.secrets)
        defer { proxy.stop() }
        for request in [
            "GET \(sink.url)/?leak=\(Self.injected) HTTP/1.1\r\nHost: \(sink.authority)\r\n\r\n",
            "GET \(sink.url)/ HTTP/1.1\r\nHost: \(sink.authority)\r\nX-Debug: \(Base64.encode(Array(Self.value.utf8)))\r\n\r\n",
            "GET \(sink.url)/ HTTP/1.1\r\nHost: \(sink.authority)\r\nX-Debug: a%2B\(Self.injected)\r\n\r\n",
        ] {
            let response = try #require(try proxy.exchange(request))
            #expect(response.status == 403)
            #expect(response.bodyText.contains("secret_egress_blocked"))
        }
        #expect(sink.acceptedConnections == 0)
        let own = try #require(try proxy.exchange("GET \(scoped.url)/ HTTP/1.1\r\nHost: \(scoped.authority)\r\nX-Debug: \(Self.injected)\r\n\r\n"))
        #expect(own.status == 200)
        #expect(scoped.requests.last?.header("x-debug") == Self.injected)
    }

    private func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard haystack.count >= needle.count else { return false }
        return (0...(haystack.count - needle.count)).contains { haystack[$0..<($0 + needle.count)].elementsEqual(needle) }
    }
}

@Suite("Secrets that cannot leave: the binary's log, metrics and stderr name secrets, never values", .serialized)
struct SecretTrafficLogTests {
    @Test("substitution, scrub and guard through the binary: the log says what happened by name; no value anywhere")
    func logAndMetrics() throws {
        let value = "GHV-" + SecretTrafficEngineTests.randomHex() + "-logcanary"
        let origin = try SecretTrafficEngineTests.echoing()
        let other = try SecretTrafficEngineTests.echoing()
        defer { origin.stop(); other.stop() }
        let configured = try ConfiguredProxy(environment: ["GH": value]) { logPath in
            """
            secrets: { gh_token: { env: GH, placeholder: true } }
            scopes: [{ name: gh, origins: ["\(origin.url)"], require_https: false, substitute: [gh_token] }]
            log: { output: \(logPath), bodies: true }
            tls: { ca_dir: CADIR }
            """.replacingOccurrences(of: "CADIR", with: logPath.replacingOccurrences(of: "/access.log", with: "/ca"))
        }
        let proxy = configured.process
        defer { _ = proxy.terminate() }
        let key = try #require(FileManager.default.contents(atPath: configured.scratch.path + "/ca/placeholder.key"))
        let placeholder = Placeholder.text(secret: "gh_token", key: Array(key))

        let socket = try TestSocket.connect(port: proxy.port)
        let reader = HTTPReader(socket)
        try socket.send("GET \(origin.url)/headers HTTP/1.1\r\nHost: \(origin.authority)\r\nAuthorization: token \(placeholder)\r\n\r\n")
        let echoed = try #require(try reader.readResponse())
        #expect(echoed.status == 200 && !echoed.bodyText.contains(value))
        #expect(origin.requests.last?.header("authorization") == "token \(value)")
        try socket.send("GET \(other.url)/?leak=\(value) HTTP/1.1\r\nHost: \(other.authority)\r\n\r\n")
        #expect(try reader.readResponse()?.status == 403)
        let refused = try #require(
            try HTTPReader(
                try TestSocket.connect(port: proxy.port).sending(
                    "GET \(other.url)/ HTTP/1.1\r\nHost: \(other.authority)\r\nX-T: \(placeholder)\r\n\r\n")
            ).readResponse())
        #expect(refused.status == 403)
        #expect(other.acceptedConnections == 0)

        let metrics = try configured.metrics()
        #expect(metrics.contains("scopeproxy_scrubbed_total{secret=\"gh_token\"}"))
        #expect(metrics.contains("scopeproxy_egress_blocked_total{secret=\"gh_token\",kind=\"value\"}"))
        #expect(metrics.contains("scopeproxy_egress_blocked_total{secret=\"gh_token\",kind=\"placeholder\"}"))
        #expect(proxy.terminate() == 0)
        let log = try String(contentsOfFile: configured.logPath, encoding: .utf8)
        #expect(log.contains("\"substituted\":[\"gh_token\"]"))
        #expect(log.contains("\"scrubbed\":[\"gh_token\"]"))
        #expect(log.contains("\"error\":\"secret_egress_blocked\"") || log.contains("secret_egress_blocked"))
        for (name, text) in [("log", log), ("metrics", metrics), ("stderr", proxy.standardError)] {
            #expect(!text.contains(value), "the value reached the \(name)")
        }
    }
}

extension TestSocket {
    /// Sends `text` and returns the socket (for one-line requests).
    func sending(_ text: String) throws -> TestSocket {
        try send(text)
        return self
    }
}
