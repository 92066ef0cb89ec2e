import Foundation
import TestSupport
import Testing

/// An origin's 101 turns the client's proxy connection into a pipe, so only a WebSocket upgrade that
/// the proxy relayed, with nothing pipelined behind it, may become one (docs/security-model.md).
@Suite("Engine: only a WebSocket upgrade, alone on its connection, becomes a tunnel", .serialized)
struct UpgradeEngineTests {
    @Test("Upgrade: h2c is not relayed: the origin gets a plain request, and a 101 it answers anyway is a 502, never a pipe")
    func h2cNotRelayed() throws {
        let origin = try Wire.scripted { request in
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
        try socket.send(
            "GET \(origin.url)/ HTTP/1.1\r\nHost: \(origin.authority)\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                + "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n")
        let response = try #require(LenientResponse.read(HTTPReader(socket)))
        #expect(response.status == 502, "a 101 to a request the proxy did not upgrade is refused")
        #expect(origin.requests.first?.header("upgrade") == nil, "Upgrade: h2c never reached the origin")
        #expect(origin.requests.first?.header("http2-settings") == nil)
        #expect(!response.text.contains("HIJACKED"))
    }

    @Test("a WebSocket upgrade with a request pipelined behind it: the 101 is refused, the pipelined request never reaches that origin")
    func pipelinedBehindUpgrade() throws {
        let origin = try Wire.scripted { request in
            request.header("upgrade") == "websocket"
                ? Array("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n".utf8)
                : Array("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".utf8)
        }
        let other = try FixtureOrigin(host: "127.0.0.2")
        defer { origin.stop(); other.stop() }
        let key = Wire.canary("key")
        let proxy = try ProxyHarness()
        defer { proxy.stop() }
        let socket = try proxy.connect()
        try socket.send(
            "GET \(origin.url)/chat HTTP/1.1\r\nHost: \(origin.authority)\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
                + "GET \(other.url)/next HTTP/1.1\r\nHost: \(other.authority)\r\nX-Note: \(key)\r\n\r\n")
        let response = try #require(LenientResponse.read(HTTPReader(socket)))
        #expect(response.status == 502)
        let rest = String(decoding: socket.receiveUntilClose(), as: UTF8.self)
        #expect(!rest.contains("101"), "no 101 follows")
        #expect(!Wire.received(origin).contains(key), "the pipelined request reached the origin that answered 101")
        #expect(origin.requests.count == 1)
    }

    @Test("a WebSocket upgrade alone still becomes a tunnel (control; with the guard off and no scope, its bytes are spliced unread)")
    func websocketStillWorks() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1") { connection in
            guard connection.readRequest() != nil else { return }
            connection.send("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
            while let chunk = try? connection.socket.receive(), !chunk.isEmpty { connection.send(chunk) }
        }
        defer { origin.stop() }
        let proxy = try ProxyHarness(yaml: "guard: off", secrets: [:])
        defer { proxy.stop() }
        let socket = try proxy.connect()
        try socket.send("GET \(origin.url)/chat HTTP/1.1\r\nHost: \(origin.authority)\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
        let response = try #require(LenientResponse.read(HTTPReader(socket)))
        #expect(response.status == 101)
        try socket.send("frame-bytes")
        #expect(String(decoding: try socket.receive(), as: UTF8.self).contains("frame-bytes"))
    }
}
