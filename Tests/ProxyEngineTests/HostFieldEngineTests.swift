import Foundation
import TestSupport
import Testing

/// Host against the request target (RFC 9112 §3.2.2): the target decides, a second Host is refused,
/// and a CONNECT is judged by its target alone. Inside an intercepted tunnel: InterceptedTunnelTests.swift.
@Suite("Engine: Host and the request target (RFC 9112 §3.2.2)", .serialized)
struct HostFieldEngineTests {
    @Test("an absolute-form request whose Host names the proxy itself (Node's http.request) succeeds; the origin gets Host = the target's authority")
    func absoluteFormHostReplaced() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let proxy = try ProxyHarness(yaml: "scopes: []", secrets: [:])
        defer { proxy.stop() }
        for host in ["127.0.0.1:\(proxy.port)", "elsewhere.example", "127.0.0.2:\(origin.port)"] {
            let response = try #require(try proxy.exchange(Wire.request("\(origin.url)/node", host: host, [("X-Test-Id", host)])))
            #expect(response.status == 200, "Host: \(host)")
            let arrived = origin.requests.first { $0.header("x-test-id") == host }
            #expect(arrived?.headers("host") == [origin.authority], "Host: \(host)")
        }
    }

    @Test("two Host fields are 400 (alike or not), and the origin receives nothing", arguments: [false, true])
    func twoHostFields(_ differ: Bool) throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let proxy = try ProxyHarness(yaml: "scopes: []", secrets: [:])
        defer { proxy.stop() }
        let second = differ ? "127.0.0.1:\(proxy.port)" : origin.authority
        let response = try proxy.exchange(Wire.request("\(origin.url)/", host: origin.authority, [("Host", second)]))
        #expect(response?.status == 400)
        #expect(origin.acceptedConnections == 0)
    }

    @Test(
        "a CONNECT is judged by its target alone: a Host naming something else, or no Host, plays no part",
        arguments: ["other.example:443", nil] as [String?])
    func connectIgnoresHost(_ host: String?) throws {
        let echo = try EchoServer()
        let proxy = try ProxyHarness { $0.tunnel = .allow }
        defer { proxy.stop() }
        let socket = try proxy.connect()
        try socket.send("CONNECT 127.0.0.1:\(echo.port) HTTP/1.1\r\n" + (host.map { "Host: \($0)\r\n" } ?? "") + "\r\nping")
        let reader = HTTPReader(socket)
        let head = String(decoding: try #require(try reader.readHeadBytes()), as: UTF8.self)
        #expect(head.hasPrefix("HTTP/1.1 200 "), "Host \(host ?? "absent"): \(head.prefix(40))")
        if head.hasPrefix("HTTP/1.1 200 ") {
            #expect(try reader.readExactly(4) == Array("ping".utf8))
        }
    }
}
