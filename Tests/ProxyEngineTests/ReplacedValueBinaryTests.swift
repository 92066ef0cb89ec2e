import Foundation
import PosixSupport
import TestSupport
import Testing

/// A value the proxy stops sending is still a credential where it was sent: the scrub keeps masking
/// it, through the built binary (docs/security-model.md, "No oracle"). The origin keeps every
/// Authorization and key it received and hands them all back at `/history`, as a debug page or a
/// stored record would; the client must never read one in clear.
@Suite("Replaced values stay scrubbed: a rotated access token, a rotated file secret", .serialized)
struct ReplacedValueBinaryTests {
    /// An origin that answers 401 at `/refuse`, and at `/history` everything credential-like it got.
    static func recordingOrigin() throws -> FixtureOrigin {
        let seen = Locked<[String]>([])
        return try FixtureOrigin { connection in
            while let request = connection.readRequest() {
                let credentials = [request.header("authorization"), request.header("x-key")].compactMap { $0 }
                seen.withLock { $0 += credentials }
                if request.target.hasPrefix("/refuse") {
                    connection.respond(status: 401, body: "expired")
                } else if request.target.hasPrefix("/history") {
                    connection.respond(body: seen.withLock { $0 }.joined(separator: "\n"))
                } else {
                    connection.respond(body: "ok")
                }
            }
        }
    }

    static func get(_ proxy: ConfiguredProxy, _ origin: FixtureOrigin, _ path: String) throws -> TestResponse? {
        let socket = try TestSocket.connect(port: proxy.port)
        defer { socket.close() }
        socket.setReceiveTimeout(milliseconds: 10_000)
        try socket.send("GET \(origin.url)\(path) HTTP/1.1\r\nHost: \(origin.authority)\r\nConnection: close\r\n\r\n")
        return try HTTPReader(socket).readResponse()
    }

    @Test("an access token replaced after a 401 is still masked when the origin hands it back")
    func rotatedAccessTokenStaysMasked() throws {
        let pki = try TestPKI()
        let endpoint = try TokenEndpointFixture(pki: pki)
        defer { endpoint.stop() }
        let origin = try Self.recordingOrigin()
        defer { origin.stop() }
        let proxy = try ConfiguredProxy(environment: ["CS": "client-secret-\(UInt32.random(in: 0...UInt32.max))"]) { log in
            """
            log: { output: "\(log)" }
            tls: { upstream_ca: "\(pki.caPath)" }
            secrets:
              cs: { env: CS }
              partner_token:
                oauth2: { token_url: "\(endpoint.url)", grant: client_credentials, client_id: scopeproxy-test, client_secret: cs }
            scopes:
              - { name: partner, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${partner_token}" } }

            """
        }
        defer { _ = proxy.process.terminate() }
        #expect(try Self.get(proxy, origin, "/v1/first")?.status == 200)
        // A 401 drops a token only once it is a second old (the proxy's own floor).
        Thread.sleep(forTimeInterval: 1.2)
        #expect(try Self.get(proxy, origin, "/refuse")?.status == 401)
        #expect(try Self.get(proxy, origin, "/v1/second")?.status == 200)
        let authorizations = origin.requests.compactMap { $0.header("authorization") }
        #expect(Set(authorizations) == ["Bearer CANARY-at-1", "Bearer CANARY-at-2"], "the token was replaced")
        let history = try #require(try Self.get(proxy, origin, "/history"))
        // Checked as booleans: a failure must not print the values it looks for.
        let oldShown = history.bodyText.contains("CANARY-at-1"), newShown = history.bodyText.contains("CANARY-at-2")
        #expect(!oldShown, "the replaced token, still valid, is masked")
        #expect(!newShown)
        #expect(history.bodyText.contains("Bearer **********"))
    }

    @Test("a file secret's old value is still masked after the file changes")
    func rotatedFileSecretStaysMasked() throws {
        let origin = try Self.recordingOrigin()
        defer { origin.stop() }
        let scratch = ScratchDirectory()
        let old = "FILE-OLD-\(UInt32.random(in: 0...UInt32.max))-aaaa"
        let new = "FILE-NEW-\(UInt32.random(in: 0...UInt32.max))-bbbb"
        let secretPath = scratch.write("key", old + "\n")
        let proxy = try ConfiguredProxy { log in
            """
            log: { output: "\(log)" }
            secrets:
              key: { file: "\(secretPath)" }
            scopes:
              - { name: keyed, origins: ["\(origin.url)"], inject: { X-Key: "${key}" } }

            """
        }
        defer { _ = proxy.process.terminate() }
        #expect(try Self.get(proxy, origin, "/v1/first")?.status == 200)
        let replacement = scratch.write("key.new", new + "\n")
        rename(replacement, secretPath)
        // The proxy re-reads the file every second: ask until the new value is the one sent (bounded).
        var rotated = false
        for _ in 0..<50 where !rotated {
            Thread.sleep(forTimeInterval: 0.2)
            _ = try Self.get(proxy, origin, "/v1/poll")
            rotated = origin.requests.last?.header("x-key") == new
        }
        try #require(rotated, "the proxy did not take the file's new value")
        let history = try #require(try Self.get(proxy, origin, "/history"))
        let oldShown = history.bodyText.contains(old), newShown = history.bodyText.contains(new)
        #expect(!oldShown, "the old value is masked for ten minutes after the change")
        #expect(!newShown)
    }
}

extension ReplacedValueBinaryTests {
    /// Waits (bounded) until the proxy's stderr says `reloaded` `count` times.
    static func waitForReload(_ proxy: ConfiguredProxy, count: Int) -> Bool {
        for _ in 0..<100 {
            if proxy.process.standardError.components(separatedBy: "reloaded").count - 1 >= count { return true }
            usleep(50_000)
        }
        return false
    }

    @Test("after a reload that moves the scope away or removes the secret, the old origin's responses are still scrubbed of it")
    func reloadKeepsFormerOriginScrubbed() throws {
        let origin = try Self.recordingOrigin()
        defer { origin.stop() }
        let elsewhere = try FixtureOrigin()
        defer { elsewhere.stop() }
        let scratch = ScratchDirectory()
        let value = "FILE-KEPT-\(UInt32.random(in: 0...UInt32.max))-cccc"
        let secretPath = scratch.write("key", value + "\n")
        func config(_ scopeOrigin: String, withSecret: Bool) -> String {
            withSecret
                ? """
                secrets:
                  key: { file: "\(secretPath)" }
                scopes:
                  - { name: keyed, origins: ["\(scopeOrigin)"], inject: { X-Key: "${key}" } }

                """ : "scopes: []\n"
        }
        let proxy = try ConfiguredProxy { log in "log: { output: \"\(log)\" }\n" + config(origin.url, withSecret: true) }
        defer { _ = proxy.process.terminate() }
        #expect(try Self.get(proxy, origin, "/v1/store")?.status == 200)
        #expect(origin.requests.last?.header("x-key") == value)
        let admin = "admin: \"127.0.0.1:\(proxy.adminPort)\"\n"

        // The scope moves to another origin: the first one got the value and may hand it back.
        _ = proxy.scratch.write("c.yaml", admin + "log: { output: \"\(proxy.logPath)\" }\n" + config(elsewhere.url, withSecret: true))
        proxy.process.signal(SIGHUP)
        try #require(Self.waitForReload(proxy, count: 1))
        let moved = try #require(try Self.get(proxy, origin, "/history"))
        let shownAfterMove = moved.bodyText.contains(value)
        #expect(!shownAfterMove, "masked after the scope moved away")
        #expect(moved.bodyText.contains("X-Key") == false && moved.bodyText.contains("****"))

        // The secret leaves the configuration: still masked there while it may be valid.
        _ = proxy.scratch.write("c.yaml", admin + "log: { output: \"\(proxy.logPath)\" }\n" + config(elsewhere.url, withSecret: false))
        proxy.process.signal(SIGHUP)
        try #require(Self.waitForReload(proxy, count: 2))
        let removed = try #require(try Self.get(proxy, origin, "/history"))
        let shownAfterRemoval = removed.bodyText.contains(value)
        #expect(!shownAfterRemoval, "masked after the secret left the configuration")
    }

    @Test("a token endpoint's responses are scrubbed of the client secret and the token, for any client")
    func tokenEndpointScrubbed() throws {
        // A plain-http token endpoint on loopback that hands back, at /debug, the Authorization
        // it got (the client secret, in Basic) and the token it issued.
        let lastAuthorization = Locked("")
        let endpoint = try FixtureOrigin { connection in
            while let request = connection.readRequest() {
                if request.method == "POST" {
                    lastAuthorization.withLock { $0 = request.header("authorization") ?? "" }
                    connection.respond(
                        headers: [("Content-Type", "application/json")],
                        body: #"{"access_token":"CANARY-endpoint-token-1","token_type":"bearer","expires_in":3600}"#)
                } else {
                    let basic = lastAuthorization.withLock { $0 }
                    let decoded =
                        basic.hasPrefix("Basic ")
                        ? String(decoding: Data(base64Encoded: String(basic.dropFirst(6))) ?? Data(), as: UTF8.self) : ""
                    connection.respond(body: "got \(basic) = \(decoded); issued CANARY-endpoint-token-1")
                }
            }
        }
        defer { endpoint.stop() }
        let origin = try Self.recordingOrigin()
        defer { origin.stop() }
        let clientSecret = "client-secret-\(UInt32.random(in: 0...UInt32.max))-dd"
        let proxy = try ConfiguredProxy(environment: ["CS": clientSecret]) { log in
            """
            log: { output: "\(log)" }
            secrets:
              cs: { env: CS }
              partner_token:
                oauth2: { token_url: "\(endpoint.url)/oauth/token", grant: client_credentials, client_id: scopeproxy-test, client_secret: cs }
            scopes:
              - { name: partner, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${partner_token}" } }

            """
        }
        defer { _ = proxy.process.terminate() }
        #expect(try Self.get(proxy, origin, "/v1/first")?.status == 200)
        try #require(!lastAuthorization.withLock { $0 }.isEmpty, "the proxy fetched a token")
        let answer = try #require(try Self.get(proxy, endpoint, "/debug")).bodyText
        let secretShown = answer.contains(clientSecret), tokenShown = answer.contains("CANARY-endpoint-token-1")
        let basicShown = answer.contains(lastAuthorization.withLock { String($0.dropFirst(6)) })
        #expect(answer.hasPrefix("got Basic "), "the endpoint answered")
        #expect(!secretShown, "the client secret the proxy sent the endpoint is masked")
        #expect(!basicShown, "and its Basic form")
        #expect(!tokenShown, "the token the endpoint issued is masked")
    }
}

/// The hold-back never stalls a stream that pauses: what is held leaves after the idle time, so a
/// server-sent event or an interactive upload goes on (docs/security-model.md, "No oracle"). Each
/// side waits to see the first part before it sends the second, so a hold-back that waited for
/// more bytes would deadlock here; the socket timeouts only bound a failure.
@Suite("Hold-back idle release through the built binary", .serialized)
struct HoldBackReleaseBinaryTests {
    @Test("a scoped origin's streamed event reaches the client before the origin sends the next (scrub on)")
    func responseEventNotStalled() throws {
        let clientSawFirst = DispatchSemaphore(value: 0)
        let origin = try FixtureOrigin { connection in
            guard connection.readRequest() != nil else { return }
            connection.send("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            connection.send("d\r\ndata: first\n\n\r\n")
            // The next event only once the client has the first one.
            guard clientSawFirst.wait(timeout: .now() + 20) == .success else { return }
            connection.send("e\r\ndata: second\n\n\r\n0\r\n\r\n")
        }
        defer { origin.stop() }
        let proxy = try ConfiguredProxy(environment: ["HB_TOKEN": "hold-back-token-\(UInt32.random(in: 0...UInt32.max))"]) { log in
            """
            log: { output: "\(log)" }
            secrets: { hb_token: { env: HB_TOKEN } }
            scopes:
              - { name: sse, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${hb_token}" } }

            """
        }
        defer { _ = proxy.process.terminate() }
        let socket = try TestSocket.connect(port: proxy.port)
        defer { socket.close() }
        socket.setReceiveTimeout(milliseconds: 15_000)
        try socket.send("GET \(origin.url)/events HTTP/1.1\r\nHost: \(origin.authority)\r\nConnection: close\r\n\r\n")
        let reader = HTTPReader(socket)
        _ = try #require(try reader.readHeadBytes())
        let size = try reader.readLine()
        let first = String(decoding: try reader.readExactly(Int(size, radix: 16) ?? 0), as: UTF8.self)
        #expect(first == "data: first\n\n", "the first event arrived whole, before the second was sent")
        clientSawFirst.signal()
        _ = try reader.readLine()
        let rest = String(decoding: try reader.readChunked(), as: UTF8.self)
        #expect(rest == "data: second\n\n")
    }

    @Test("a client's streamed upload reaches an unscoped origin before the client sends the rest (guard on)")
    func requestBodyNotStalled() throws {
        let originSawFirst = DispatchSemaphore(value: 0)
        let received = Locked<[UInt8]>([])
        let origin = try FixtureOrigin { connection in
            // Raw bytes, head and chunk framing included: enough to see the body's parts arrive.
            var wire: [UInt8] = []
            func has(_ text: String) -> Bool { String(decoding: wire, as: UTF8.self).contains(text) }
            while !has("hello ") {
                guard let bytes = try? connection.socket.receive(), !bytes.isEmpty else { return }
                wire += bytes
            }
            originSawFirst.signal()
            while !has("0\r\n\r\n") {
                guard let bytes = try? connection.socket.receive(), !bytes.isEmpty else { return }
                wire += bytes
            }
            received.withLock { $0 = wire }
            connection.respond(body: "ok")
        }
        defer { origin.stop() }
        let proxy = try ConfiguredProxy(environment: ["G_TOKEN": "guarded-token-\(UInt32.random(in: 0...UInt32.max))"]) { log in
            """
            log: { output: "\(log)" }
            secrets: { g_token: { env: G_TOKEN } }
            scopes:
              - { name: other, origins: ["https://elsewhere.example"], inject: { Authorization: "Bearer ${g_token}" } }

            """
        }
        defer { _ = proxy.process.terminate() }
        let socket = try TestSocket.connect(port: proxy.port)
        defer { socket.close() }
        socket.setReceiveTimeout(milliseconds: 15_000)
        try socket.send(
            "POST \(origin.url)/upload HTTP/1.1\r\nHost: \(origin.authority)\r\nTransfer-Encoding: chunked\r\n"
                + "Connection: close\r\n\r\n6\r\nhello \r\n")
        let sawFirst = originSawFirst.wait(timeout: .now() + 15) == .success
        #expect(sawFirst, "the origin got the first part while the client waited")
        try socket.send("5\r\nworld\r\n0\r\n\r\n")
        let response = try HTTPReader(socket).readResponse()
        #expect(response?.status == 200)
        let wire = String(decoding: received.withLock { $0 }, as: UTF8.self)
        #expect(wire.contains("hello ") && wire.contains("world"))
    }
}
