import Foundation
import TestSupport
import Testing

@Suite("Engine: CONNECT tunnels and upgrades", .serialized)
struct TunnelEngineTests {
    @Test("CONNECT with tunnel: allow splices bytes both ways, including bytes sent with the CONNECT head")
    func connectAllowed() throws {
        let echo = try EchoServer()
        let proxy = try ProxyHarness { $0.tunnel = .allow }
        defer { proxy.stop() }
        let socket = try proxy.connect()
        try socket.send("CONNECT 127.0.0.1:\(echo.port) HTTP/1.1\r\nHost: 127.0.0.1:\(echo.port)\r\n\r\nearly-bytes|")
        let reader = HTTPReader(socket)
        let head = try #require(try reader.readHeadBytes())
        #expect(String(decoding: head, as: UTF8.self).hasPrefix("HTTP/1.1 200 "))
        #expect(String(decoding: try reader.readExactly(12), as: UTF8.self) == "early-bytes|")
        let payload = pseudoRandomBlock(count: 300_000, seed: 7)
        try socket.send(payload)
        #expect(try reader.readExactly(payload.count) == payload)
        socket.shutdownWrite()
        #expect(reader.readUntilClose().isEmpty, "the tunnel closes once the client hung up")
    }

    @Test("CONNECT with tunnel: deny is 403 JSON naming the origin, and nothing is connected")
    func connectDenied() throws {
        let listener = try TestListener()
        let proxy = try ProxyHarness()  // deny is the default
        defer { proxy.stop(); listener.close() }
        let response = try #require(try proxy.exchange("CONNECT 127.0.0.1:\(listener.port) HTTP/1.1\r\nHost: 127.0.0.1:\(listener.port)\r\n\r\n"))
        #expect(response.status == 403)
        #expect(response.bodyText.contains("\"error\":\"tunnel_denied\""))
        #expect(response.bodyText.contains("https://127.0.0.1:\(listener.port)"))
    }

    @Test("CONNECT without a port is 400")
    func connectWithoutPort() throws {
        let proxy = try ProxyHarness { $0.tunnel = .allow }
        defer { proxy.stop() }
        #expect(try proxy.exchange("CONNECT 127.0.0.1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")?.status == 400)
    }

    @Test("WebSocket: Upgrade is forwarded, and after 101 the connection is a two-way tunnel (guard off, no scope: spliced unread)")
    func websocketUpgrade() throws {
        let origin = try FixtureOrigin { connection in
            guard let request = connection.readRequest() else { return }
            guard request.header("upgrade") == "websocket", request.header("connection")?.lowercased() == "upgrade" else {
                return connection.respond(status: 400, body: "no upgrade")
            }
            connection.send("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n")
            while let chunk = try? connection.socket.receive(), !chunk.isEmpty {
                connection.send(Array("echo:".utf8) + chunk)
            }
        }
        let proxy = try ProxyHarness(yaml: "guard: off", secrets: [:])
        defer { proxy.stop(); origin.stop() }
        let socket = try proxy.connect()
        try socket.send(
            "GET \(origin.url)/ws HTTP/1.1\r\nHost: \(origin.authority)\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        let reader = HTTPReader(socket)
        let head = String(decoding: try #require(try reader.readHeadBytes()), as: UTF8.self)
        #expect(head.hasPrefix("HTTP/1.1 101 "))
        #expect(head.contains("Upgrade: websocket"))
        #expect(head.contains("Sec-WebSocket-Accept: x"))
        try socket.send("frame-1")
        #expect(String(decoding: try reader.readExactly(12), as: UTF8.self) == "echo:frame-1")
        let arrived = try #require(origin.requests.first)
        #expect(arrived.header("sec-websocket-key") == "dGhlIHNhbXBsZSBub25jZQ==")
    }
}

@Suite("Engine: concurrency and shutdown", .serialized)
struct ConcurrencyEngineTests {
    @Test("200 concurrent clients x 20 keep-alive requests: every response is the client's own")
    func noCrossTalk() async throws {
        let origin = try FixtureOrigin()
        let proxy = try ProxyHarness(threads: 2)
        defer { proxy.stop(); origin.stop() }
        let clients = 200, requestsPerClient = 20
        let failures = try await withThrowingTaskGroup(of: Int.self) { group in
            for client in 0..<clients {
                group.addTask {
                    let socket = try proxy.connect()
                    let reader = HTTPReader(socket)
                    var failures = 0
                    for index in 0..<requestsPerClient {
                        let id = "c\(client)-r\(index)"
                        let body = String(repeating: "b", count: (client + index) % 7)
                        try socket.send(
                            "POST \(origin.url)/\(id) HTTP/1.1\r\nHost: \(origin.authority)\r\nX-Test-Id: \(id)\r\n"
                                + "Content-Length: \(body.count)\r\n\r\n\(body)")
                        let response = try reader.readResponse()
                        if response?.bodyText != "target=/\(id) id=\(id) body=\(body.count)" || response?.header("x-echo-id") != id {
                            failures += 1
                        }
                    }
                    socket.close()
                    return failures
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(failures == 0)
        #expect(origin.requests.count == clients * requestsPerClient)
        #expect(origin.acceptedConnections <= clients, "upstream connections are reused")
    }

    @Test("graceful shutdown: new connections are refused, the in-flight exchange completes")
    func gracefulShutdown() throws {
        let requestArrived = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let origin = try FixtureOrigin { connection in
            guard connection.readRequest() != nil else { return }
            requestArrived.signal()
            _ = release.wait(timeout: .now() + 10)
            connection.respond(body: "finished")
        }
        let proxy = try ProxyHarness()
        defer { origin.stop() }
        let socket = try proxy.connect()
        try socket.send("GET \(origin.url)/slow HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        #expect(requestArrived.wait(timeout: .now() + 10) == .success)
        let stopped = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            proxy.server.shutdown(graceMilliseconds: 10_000)
            stopped.signal()
        }
        // Once draining, the port no longer accepts.
        var refused = false
        for _ in 0..<200 where !refused {
            if (try? TestSocket.connect(port: proxy.port)) == nil { refused = true } else { usleep(10_000) }
        }
        #expect(refused)
        release.signal()
        let response = try #require(try HTTPReader(socket).readResponse())
        #expect(response.status == 200)
        #expect(response.bodyText == "finished")
        #expect(response.header("connection") == "close")
        #expect(stopped.wait(timeout: .now() + 10) == .success)
    }
}
