import Foundation
import Testing
import TestSupport

/// Regression tests for what an outside re-run found (docs/testing.md, "Hardening journal") after the exchange core was
/// rewritten: a 101 taking over the client's proxy connection, `_method` riding a `methods:` limit,
/// and curl's reading of a Location in block mode.
@Suite("Review re-run: upgrades, method overrides in parameters, curl's Location reading", .serialized)
struct ReviewRerunTests {
    // MARK: Upgrade hijack

    @Test("Upgrade: h2c is not relayed: the origin gets a plain request, and a 101 it answers anyway is a 502, never a pipe")
    func h2cNotRelayed() throws {
        let origin = try Findings.scripted { request in
            if request.header("upgrade") != nil {
                return Array("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n".utf8)
            }
            return Array("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\nHIJACKED".utf8)
        }
        defer { origin.stop() }
        let proxy = try ProxyHarness()
        defer { proxy.stop() }
        let socket = try proxy.connect()
        // What curl --http2 sends through a proxy for an http:// URL.
        try socket.send("GET \(origin.url)/ HTTP/1.1\r\nHost: \(origin.authority)\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                        + "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n")
        let response = try #require(LenientResponse.read(HTTPReader(socket)))
        #expect(response.status == 502, "a 101 to a request the proxy did not upgrade is refused")
        #expect(origin.requests.first?.header("upgrade") == nil, "Upgrade: h2c never reached the origin")
        #expect(origin.requests.first?.header("http2-settings") == nil)
        #expect(!response.text.contains("HIJACKED"))
    }

    @Test("a WebSocket upgrade with a request pipelined behind it: the 101 is refused, the pipelined request never reaches that origin")
    func pipelinedBehindUpgrade() throws {
        let origin = try Findings.scripted { request in
            request.header("upgrade") == "websocket"
                ? Array("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n".utf8)
                : Array("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".utf8)
        }
        let other = try FixtureOrigin(host: "127.0.0.2")
        defer { origin.stop(); other.stop() }
        let key = Findings.canary("key")
        let proxy = try ProxyHarness()
        defer { proxy.stop() }
        let socket = try proxy.connect()
        try socket.send("GET \(origin.url)/chat HTTP/1.1\r\nHost: \(origin.authority)\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                        + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
                        + "GET \(other.url)/next HTTP/1.1\r\nHost: \(other.authority)\r\nX-Note: \(key)\r\n\r\n")
        let response = try #require(LenientResponse.read(HTTPReader(socket)))
        #expect(response.status == 502)
        let rest = String(decoding: socket.receiveUntilClose(), as: UTF8.self)
        #expect(!rest.contains("101"), "no 101 follows")
        #expect(!Findings.received(origin).contains(key), "the pipelined request reached the origin that answered 101")
        #expect(origin.requests.count == 1)
    }

    @Test("a WebSocket upgrade alone still becomes a tunnel (control)")
    func websocketStillWorks() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1") { connection in
            guard connection.readRequest() != nil else { return }
            connection.send("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
            while let chunk = try? connection.socket.receive(), !chunk.isEmpty { connection.send(chunk) }
        }
        defer { origin.stop() }
        let proxy = try ProxyHarness()
        defer { proxy.stop() }
        let socket = try proxy.connect()
        try socket.send("GET \(origin.url)/chat HTTP/1.1\r\nHost: \(origin.authority)\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
        let response = try #require(LenientResponse.read(HTTPReader(socket)))
        #expect(response.status == 101)
        try socket.send("frame-bytes")
        #expect(String(decoding: try socket.receive(), as: UTF8.self).contains("frame-bytes"))
    }

    // MARK: `_method` overrides

    static func methodsLimitedProxy(_ origin: FixtureOrigin, token: String) throws -> ProxyHarness {
        try ProxyHarness(yaml: """
            secrets: { token: { env: T } }
            scopes: [{ name: api, origins: ["\(origin.url)"], require_https: false, inject: { Authorization: "Bearer ${token}" }, methods: [GET, POST] }]
            """, secrets: ["token": token])
    }

    @Test("with methods: [GET, POST], a POST whose query or form body says _method=DELETE carries no credential",
          arguments: ["query", "form", "chunked form"])
    func methodParameter(_ where_: String) throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let token = Findings.canary("token")
        let proxy = try Self.methodsLimitedProxy(origin, token: token)
        defer { proxy.stop() }
        let request: String
        switch where_ {
        case "query":
            request = Findings.request("\(origin.url)/v1/users/7?_method=DELETE", host: origin.authority, method: "POST", body: "")
        case "form":
            request = Findings.request("\(origin.url)/v1/users/7", host: origin.authority,
                                       [("Content-Type", "application/x-www-form-urlencoded")], method: "POST", body: "name=x&_method=DELETE")
        default:
            request = "POST \(origin.url)/v1/users/7 HTTP/1.1\r\nHost: \(origin.authority)\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                + "Transfer-Encoding: chunked\r\n\r\n7\r\nname=x&\r\ne\r\n_method=DELETE\r\n0\r\n\r\n"
        }
        let response = try #require(try proxy.exchange(request, method: "POST"))
        #expect(response.status == 200)
        #expect(Findings.canaries(in: origin, among: [token]).isEmpty, "_method=DELETE rode the POST-only credential (\(where_))")
        #expect(origin.requests.first.map { String(decoding: $0.body, as: UTF8.self) }?.contains("_method=DELETE") == (where_ != "query"),
                "the body arrives as sent")
    }

    @Test("a plain form POST to the same scope still gets its credential, body intact (control)")
    func formPostControl() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let token = Findings.canary("token")
        let proxy = try Self.methodsLimitedProxy(origin, token: token)
        defer { proxy.stop() }
        _ = try proxy.exchange(Findings.request("\(origin.url)/v1/users", host: origin.authority,
                                                [("Content-Type", "application/x-www-form-urlencoded")], method: "POST", body: "name=x"), method: "POST")
        #expect(Findings.canaries(in: origin, among: [token]) == [token])
        #expect(origin.requests.first.map { String(decoding: $0.body, as: UTF8.self) } == "name=x")
    }

    @Test("a form body larger than the proxy reads to check it is refused with 413; the origin receives nothing")
    func formTooLarge() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let proxy = try Self.methodsLimitedProxy(origin, token: Findings.canary("token"))
        defer { proxy.stop() }
        let body = String(repeating: "a", count: 70 * 1024)
        let response = try #require(try proxy.exchange(Findings.request("\(origin.url)/v1/users", host: origin.authority,
                                                                       [("Content-Type", "application/x-www-form-urlencoded")], method: "POST", body: body),
                                                      method: "POST"))
        #expect(response.status == 413)
        #expect(response.bodyText.contains("body_too_large_to_inspect"))
        #expect(origin.requests.isEmpty)
    }

    // MARK: Block mode and curl's reading of a Location

    @Test("block mode refuses a Location that a browser reads as the same origin and curl as another (a backslash before @)")
    func curlBackslashUserinfo() throws {
        let evil = try FixtureOrigin(host: "127.0.0.3")
        let api = try Findings.scripted { _ in Array("HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1\\@\(evil.authority)/x\r\nContent-Length: 0\r\n\r\n".utf8) }
        defer { api.stop(); evil.stop() }
        let proxy = try ProxyHarness(yaml: "redirects: { cross_origin: block }", secrets: [:])
        defer { proxy.stop() }
        let response = try #require(try proxy.exchange(Findings.request("\(api.url)/start", host: api.authority)))
        #expect(response.status == 502)
        #expect(response.bodyText.contains("redirect_blocked"))
        #expect(response.header("location") == nil)
        #expect(evil.requests.isEmpty)
    }
}
