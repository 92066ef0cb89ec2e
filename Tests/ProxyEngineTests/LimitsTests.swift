import Foundation
import TestSupport
import Testing

/// The binary with an admin endpoint and `yaml`, two threads, no access log.
private func proxyWithAdmin(_ yaml: String) throws -> ConfiguredProxy {
    try ConfiguredProxy(arguments: ["--threads", "2", "--no-access-log"]) { _ in yaml }
}

/// Polls /metrics (bounded, 5 s) until `name` satisfies `done`; returns the last value read.
private func waitForMetric(_ adminPort: UInt16, _ name: String, until done: (Double) -> Bool) throws -> Double {
    var value = -1.0
    for _ in 0..<100 {
        value = metricValue(try #require(try adminGet(adminPort, "/metrics")).bodyText, name) ?? -1
        if done(value) { break }
        usleep(50_000)
    }
    return value
}

@Suite("Limits: descriptors, connection count, idle connections", .serialized)
struct LimitsTests {
    @Test("EMFILE pauses accepting instead of spinning, logs at most once a second, and the proxy serves again afterwards")
    func descriptorExhaustion() throws {
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let proxy = try ProxyProcess(arguments: ["--threads", "1", "--no-access-log"], fileLimit: 48)
        defer { proxy.terminate() }
        var clients: [TestSocket] = []
        for _ in 0..<80 {
            if let socket = try? TestSocket.connect(port: proxy.port) { clients.append(socket) }
        }
        #expect(clients.count == 80, "connections beyond the limit wait in the listen backlog")
        usleep(1_500_000)
        let failures = proxy.standardError.components(separatedBy: "accept_failed").count - 1
        #expect(failures >= 1, "the limit was actually hit")
        #expect(failures <= 4, "rate-limited: a busy accept loop would log thousands of lines (\(failures))")
        clients.forEach { $0.close() }
        clients.removeAll()
        var served = false
        for _ in 0..<30 where !served {
            usleep(100_000)
            if let socket = try? TestSocket.connect(port: proxy.port) {
                socket.setReceiveTimeout(milliseconds: 2_000)
                try? socket.send("GET \(origin.url)/after HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
                served = (try? HTTPReader(socket).readResponse())??.status == 200
            }
        }
        #expect(served, "once descriptors are free again, the proxy serves; stderr: \(proxy.standardError.suffix(600))")
        #expect(proxy.terminate() == 0)
    }

    @Test("limits.max_connections: connections past it wait unserved (not reset) and are served, in order, as slots free up")
    func connectionLimit() throws {
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let configured = try proxyWithAdmin("limits: { max_connections: 20 }\n")
        let (proxy, adminPort) = (configured.process, configured.adminPort)
        defer { proxy.terminate() }
        let request = "GET \(origin.url)/limited HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n"
        var holders: [TestSocket] = []
        for _ in 0..<20 {
            let socket = try TestSocket.connect(port: proxy.port)
            try socket.send(request)
            #expect(try HTTPReader(socket).readResponse()?.status == 200)
            holders.append(socket)
        }
        // The 21st connects (it waits in the backlog or parked) but is not served while 20 are open.
        let waiting = try TestSocket.connect(port: proxy.port)
        try waiting.send(request)
        waiting.setReceiveTimeout(milliseconds: 1_000)
        #expect((try? waiting.receive()) == nil, "no answer while every slot is taken")
        waiting.setReceiveTimeout(milliseconds: 10_000)
        holders.removeFirst().close()
        let served = try HTTPReader(waiting).readResponse()
        #expect(served?.status == 200, "served once a slot is free")
        let metrics = try #require(try adminGet(adminPort, "/metrics")).bodyText
        #expect((metricValue(metrics, "scopeproxy_connection_limit_waits_total") ?? 0) >= 1)
        #expect(metricValue(metrics, "scopeproxy_client_connections") == 20)
        #expect(proxy.standardError.contains("connection_limit_reached"))
        holders.forEach { $0.close() }
        #expect(proxy.terminate() == 0)
    }

    @Test("10,000 idle client connections: held at a few KiB each, the proxy keeps serving, and all are released")
    func tenThousandIdle() throws {
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        // 10 000 client sockets here and as many in the proxy: both need the soft limit raised.
        var files = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &files)
        files.rlim_cur = files.rlim_max
        setrlimit(Int32(RLIMIT_NOFILE.rawValue), &files)
        try #require(files.rlim_max >= 10_500, "this test needs a hard descriptor limit of at least 10 500 (ulimit -Hn is \(files.rlim_max))")
        let configured = try proxyWithAdmin("timeouts: { idle: 5m, client_header: 5m }\nlimits: { max_connections: 10100 }\n")
        let (proxy, adminPort) = (configured.process, configured.adminPort)
        defer { proxy.terminate() }
        #expect(try adminGet(adminPort, "/healthz")?.status == 200)
        let before = proxy.residentKiB() ?? 0
        var idle: [TestSocket] = []
        idle.reserveCapacity(10_000)
        for _ in 0..<10_000 { idle.append(try TestSocket.connect(port: proxy.port)) }
        var open = try waitForMetric(adminPort, "scopeproxy_client_connections") { $0 >= 10_000 }
        #expect(open >= 10_000, "every idle connection was accepted (\(open))")
        let during = proxy.residentKiB() ?? 0
        let socket = try TestSocket.connect(port: proxy.port)
        try socket.send("GET \(origin.url)/busy HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        #expect(try HTTPReader(socket).readResponse()?.status == 200, "a new client is served next to 10,000 idle ones")
        let perConnection = Double(during - before) / 10_000
        print("10k idle: RSS \(before) KiB -> \(during) KiB, \(String(format: "%.1f", perConnection)) KiB per idle connection")
        if ProcessInfo.processInfo.environment["SCOPEPROXY_SANITIZED"] == nil {
            #expect(perConnection < 16, "an idle connection holds no large buffers (\(perConnection) KiB)")
        }
        idle.forEach { $0.close() }
        socket.close()
        open = try waitForMetric(adminPort, "scopeproxy_client_connections") { $0 <= 1 }
        #expect(open >= 0 && open <= 1, "closed connections are released (\(open) left; the /metrics request itself may count)")
        #expect(proxy.terminate() == 0)
    }
}
