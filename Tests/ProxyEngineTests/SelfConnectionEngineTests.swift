import CLibevent
import Foundation
import HTTP1Codec
import ProxyCore
import TestSupport
import Testing

@testable import ProxyEngine

#if canImport(Glibc)
    import Glibc
#endif

// The proxy is never its own client (docs/security-model.md, "Clients"). A scoped API sits behind
// a route and is served only to `me`, a client recognised by `uid` (this process's user, which is
// also the proxy's: in-process) or by `source` (loopback). `agent` is a bearer client no scope
// serves. Were the proxy to connect to its own route, its outgoing connection would arrive as
// `me` and the API would get me's token for agent's request: the API must receive nothing.

private func config(me rule: String, api: FixtureOrigin, follow: Bool = false) -> String {
    """
    secrets: { api_token: { env: API_TOKEN }, agent_key: { env: AGENT_KEY } }
    clients:
      - { name: me, \(rule) }
      - { name: agent, auth: { bearer: agent_key } }
    scopes:
      - { name: api, origins: ["\(api.url)"], require_https: false, inject: { Authorization: "Bearer ${api_token}" }, clients: [me] }
    redirects: { cross_origin: \(follow ? "follow" : "pass") }
    """
}

private let clientRules = ["uid: \(getuid())", #"source: ["127.0.0.0/8"]"#]

private struct Setup {
    let api: FixtureOrigin
    let proxy: ProxyHarness
    let routePort: UInt16
    let token = Wire.canary("apitoken")
    let agentKey = Wire.canary("agentkey")

    init(me rule: String, follow: Bool = false, admin: Bool = false) throws {
        let api = try FixtureOrigin(host: "127.0.0.1")
        self.api = api
        let upstream = try Origin.parse(api.url)
        proxy = try ProxyHarness(yaml: config(me: rule, api: api, follow: follow), secrets: ["api_token": token, "agent_key": agentKey]) { engine in
            engine.routes = [Route(listen: ListenAddress(host: "127.0.0.1", port: 0), upstream: upstream)]
            engine.tunnel = .allow
            if admin { engine.admin = ListenAddress(host: "127.0.0.1", port: 0) }
        }
        routePort = proxy.server.routeAddresses.first?.port ?? 0
    }

    func stop() {
        proxy.stop()
        api.stop()
    }

    /// One request as agent on a fresh connection to the forward proxy.
    func asAgent(_ target: String, host: String, method: String = "GET", body: String? = nil) throws -> TestResponse? {
        let socket = try proxy.connect()
        try socket.send(Wire.request(target, host: host, [("Proxy-Authorization", "Bearer \(agentKey)")], method: method, body: body))
        return try HTTPReader(socket).readResponse()
    }

    var upstreamConnections: Int { proxy.server.configuration.metrics.upstreamConnections.load(ordering: .relaxed) }
}

private func isLoopRefusal(_ response: TestResponse?) -> Bool {
    guard let response else { return false }
    return response.status == 403 && response.bodyText.contains(#""error":"loop_refused""#)
}

@Suite("Self connection: the proxy never connects to its own listeners", .serialized)
struct SelfConnectionEngineTests {
    @Test(
        "a client no scope serves cannot reach the route through the forward proxy (absolute GET, a name, CONNECT): 403 loop_refused, the API gets nothing",
        arguments: clientRules)
    func routeThroughForwardPort(_ rule: String) throws {
        let setup = try Setup(me: rule)
        defer { setup.stop() }
        let port = setup.routePort
        #expect(port != 0)
        #expect(isLoopRefusal(try setup.asAgent("http://127.0.0.1:\(port)/v1/items", host: "127.0.0.1:\(port)")))
        #expect(isLoopRefusal(try setup.asAgent("http://localhost:\(port)/v1/items", host: "localhost:\(port)")), "a name resolving to it")
        #expect(isLoopRefusal(try setup.asAgent("http://127.0.0.2:\(port)/v1/items", host: "127.0.0.2:\(port)")), "another loopback address")
        #expect(isLoopRefusal(try setup.asAgent("http://[::ffff:127.0.0.1]:\(port)/", host: "[::ffff:127.0.0.1]:\(port)")), "IPv4-mapped")

        // CONNECT to the route's address, then speaking inside: refused before any tunnel exists.
        let socket = try setup.proxy.connect()
        try socket.send(
            "CONNECT 127.0.0.1:\(port) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nProxy-Authorization: Bearer \(setup.agentKey)\r\n\r\n"
                + "GET /v1/delete-everything HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n")
        let reader = HTTPReader(socket)
        #expect(isLoopRefusal(try reader.readResponse()))
        #expect(reader.readUntilClose().isEmpty, "the connection closes after the refusal: nothing inside is ever read as a request")

        #expect(setup.api.acceptedConnections == 0, "the API behind the route was never connected to")
        #expect(setup.upstreamConnections == 0)
        let metrics = setup.proxy.server.configuration.metrics
        #expect(metrics.value("scopeproxy_loop_refused_total", [("kind", "destination")]) == 5)
    }

    @Test(
        "the real client `me` (same user as the proxy, on loopback) is still served, directly on the route and through the forward proxy",
        arguments: clientRules)
    func realClientStillServed(_ rule: String) throws {
        let setup = try Setup(me: rule)
        defer { setup.stop() }
        let direct = try TestSocket.connect(port: setup.routePort)
        try direct.send("GET /v1/items HTTP/1.1\r\nHost: 127.0.0.1:\(setup.routePort)\r\n\r\n")
        #expect(try HTTPReader(direct).readResponse()?.status == 200)
        #expect(try setup.proxy.exchange(Wire.request(setup.api.url + "/v1/other", host: setup.api.authority))?.status == 200)
        #expect(setup.api.requests.count == 2)
        #expect(setup.api.requests.allSatisfy { $0.header("authorization") == "Bearer \(setup.token)" }, "me gets the token both ways")
    }

    @Test(
        "follow mode: an unscoped origin's 307 to the route is refused, and the scoped API receives nothing (no replayed body)",
        arguments: clientRules)
    func followedRedirectToRoute(_ rule: String) throws {
        let setup = try Setup(me: rule, follow: true)
        defer { setup.stop() }
        let port = setup.routePort
        let attacker = try Wire.scripted(host: "127.0.0.2") { _ in
            Array("HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:\(port)/v1/delete-everything\r\nContent-Length: 0\r\n\r\n".utf8)
        }
        defer { attacker.stop() }
        let response = try setup.asAgent(attacker.url + "/innocent", host: attacker.authority, method: "POST", body: #"{"confirm":true}"#)
        #expect(isLoopRefusal(response))
        #expect(attacker.requests.count == 1)
        #expect(setup.api.acceptedConnections == 0)
        #expect(!Wire.received(setup.api).contains(setup.token))
    }

    @Test("requests to the proxy's own forward and admin ports through itself are refused")
    func ownForwardAndAdminPorts() throws {
        let setup = try Setup(me: clientRules[0], admin: true)
        defer { setup.stop() }
        let forward = setup.proxy.port
        let admin = try #require(setup.proxy.server.adminPort)
        let known = setup.proxy.server.configuration.ownSockets.listeners.endpoints
        #expect(Set(known.map(\.port)) == [forward, setup.routePort, admin], "read from the sockets as bound: every port 0 resolved")
        #expect(known.allSatisfy { $0.address.isLoopback })
        #expect(isLoopRefusal(try setup.asAgent("http://127.0.0.1:\(forward)/", host: "127.0.0.1:\(forward)")))
        #expect(isLoopRefusal(try setup.asAgent("http://127.0.0.1:\(admin)/metrics", host: "127.0.0.1:\(admin)")))
        #expect(
            isLoopRefusal(try setup.proxy.exchange(Wire.request("http://0.0.0.0:\(admin)/healthz", host: "0.0.0.0:\(admin)"))),
            "the unspecified address connects to this machine; also for the uid client itself")
        #expect(setup.upstreamConnections == 0)
    }

    @Test("50 nested CONNECTs to the proxy's own address in one write: one refusal, no upstream connection, and the next client is served")
    func nestedConnects() throws {
        let setup = try Setup(me: clientRules[0])
        defer { setup.stop() }
        let own = "127.0.0.1:\(setup.proxy.port)"
        let socket = try setup.proxy.connect()
        try socket.send(String(repeating: "CONNECT \(own) HTTP/1.1\r\nHost: \(own)\r\n\r\n", count: 50))
        let reader = HTTPReader(socket)
        #expect(isLoopRefusal(try reader.readResponse()))
        #expect(reader.readUntilClose().isEmpty, "the refusal closes the connection: the other 49 are never read")
        #expect(setup.upstreamConnections == 0)
        #expect(
            try setup.proxy.exchange(Wire.request(setup.api.url + "/after", host: setup.api.authority))?.status == 200,
            "another client is accepted and served")
        #expect(setup.proxy.server.configuration.metrics.value("scopeproxy_loop_refused_total", [("kind", "destination")]) == 1)
    }

    @Test(
        "a connection the proxy itself opened is never a client: refused with loop_refused at the route, though its uid and address are me's",
        arguments: clientRules)
    func ownOutgoingConnectionIsNobody(_ rule: String) throws {
        let setup = try Setup(me: rule)
        defer { setup.stop() }
        // An upstream connect made the way the engine makes them (registered in the proxy's own
        // registry), standing for any path that leads back to a listener the first check missed.
        let base = try #require(event_base_new())
        defer { event_base_free(base) }
        let bev = try #require(bufferevent_socket_new(base, -1, Int32(BEV_OPT_CLOSE_ON_FREE.rawValue)))
        defer { bufferevent_free(bev) }
        var address = try #require(SocketAddress.numeric("127.0.0.1", port: setup.routePort))
        let ownSockets = setup.proxy.server.configuration.ownSockets
        #expect(ownSockets.connect(bev, to: &address) == 0)
        let fd = bufferevent_getfd(bev)
        var ready = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        #expect(poll(&ready, 1, 10_000) == 1)
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        var timeout = timeval(tv_sec: 15, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let request = Array("GET /v1/items HTTP/1.1\r\nHost: 127.0.0.1:\(setup.routePort)\r\nConnection: close\r\n\r\n".utf8)
        #expect(send(fd, request, request.count, 0) == request.count)
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while case let count = recv(fd, &buffer, buffer.count, 0), count > 0 { answer += buffer[..<count] }
        let text = String(decoding: answer, as: UTF8.self)
        #expect(text.hasPrefix("HTTP/1.1 403 "))
        #expect(text.contains(#""error":"loop_refused""#))
        #expect(setup.api.acceptedConnections == 0)
        #expect(setup.proxy.server.configuration.metrics.value("scopeproxy_loop_refused_total", [("kind", "own_connection")]) == 1)
    }
}

@Suite("Self connection: the registry of the proxy's own outgoing sockets")
struct OwnSocketsRegistryTests {
    @Test("an accepted connection is the proxy's own exactly when its peer is a registered upstream socket that still has those ends")
    func registry() throws {
        let listener = try TestListener(host: "127.0.0.1")
        defer { listener.close() }
        let own = OwnSockets()
        let base = try #require(event_base_new())
        defer { event_base_free(base) }
        let bev = try #require(bufferevent_socket_new(base, -1, Int32(BEV_OPT_CLOSE_ON_FREE.rawValue)))
        var address = try #require(SocketAddress.numeric("127.0.0.1", port: listener.port))
        #expect(own.connect(bev, to: &address) == 0)
        let accepted = try #require(listener.accept())
        let stranger = try TestSocket.connect(port: listener.port)
        let acceptedStranger = try #require(listener.accept())
        func peer(_ fd: Int32) -> sockaddr_storage {
            var storage = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            _ = withUnsafeMutablePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) } }
            return storage
        }
        func isOwn(_ fd: Int32) -> Bool {
            var storage = peer(fd)
            return withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { own.isOwnOutgoing(acceptedDescriptor: fd, peer: $0) }
            }
        }
        #expect(isOwn(accepted.fd))
        #expect(!isOwn(acceptedStranger.fd), "another socket on this machine, same user: not the proxy's")
        #expect(own.registeredCount == 1)
        own.forget(descriptor: bufferevent_getfd(bev))
        #expect(!isOwn(accepted.fd), "forgotten when it closes")
        #expect(own.registeredCount == 0)
        bufferevent_free(bev)
        _ = stranger
    }
}
