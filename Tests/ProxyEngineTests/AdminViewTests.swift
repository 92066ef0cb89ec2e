import Foundation
import HTTP1Codec
import PosixSupport
import ScopePolicy
import TestSupport
import Testing

@testable import ProxyEngine

/// The admin token every test here uses: a canary that must never come back in a response, a
/// header, the metrics or a test failure message.
private let canaryToken = "view-canary-Zq81xT"

/// An admin server in this process with its own feed, on a free loopback port.
private final class AdminFixture: @unchecked Sendable {
    let server: AdminServer
    let feed: ViewFeed
    let metrics = Metrics()
    var port: UInt16 { server.port }

    init(token: Bool = false, host: String = "127.0.0.1", limits: AdminServer.Limits = AdminServer.Limits()) throws {
        let warmUp = try ProxyHarness(threads: 1)  // configures libevent's pthread locking, as run does first
        warmUp.stop()
        feed = ViewFeed(metrics: metrics)
        let access = token ? ViewAccess(tokenSecret: "view_token", secrets: StaticSecrets(["view_token": canaryToken])) : ViewAccess()
        server = try AdminServer(address: ListenAddress(host: host, port: 0), metrics: metrics, feed: feed, access: access, limits: limits)
        server.start()
    }

    func stop() { server.stop() }

    /// One request on a fresh connection; the whole response.
    func get(_ target: String, method: String = "GET", headers: [String] = ["Host: 127.0.0.1"]) throws -> TestResponse {
        let socket = try TestSocket.connect(port: port)
        defer { socket.close() }
        socket.setReceiveTimeout(milliseconds: 10_000)
        try socket.send("\(method) \(target) HTTP/1.1\r\n" + headers.map { $0 + "\r\n" }.joined() + "Connection: close\r\n\r\n")
        return try #require(try HTTPReader(socket).readResponse(requestMethod: method))
    }

    func publish(_ index: Int, padding: Int = 0, client: String? = nil, origin: String = "api.example:443") {
        let pad = padding > 0 ? ",\"pad\":\"\(String(repeating: "p", count: padding))\"" : ""
        feed.publish(
            ViewEntry(json: Array("{\"n\":\(index)\(pad)}".utf8), clientID: client, clientAddress: "127.0.0.1:5000", origin: origin))
    }
}

/// A `/view/events` client: reads the head, then SSE events as they come.
private final class Viewer: @unchecked Sendable {
    let socket: TestSocket
    let head: String
    private var buffer: [UInt8] = []
    /// The newest id `ids(through:)` has read (another thread paces a publisher on it).
    let progress = Locked<UInt64>(0)

    init(port: UInt16, query: String = "", headers: [String] = ["Host: 127.0.0.1"]) throws {
        socket = try TestSocket.connect(port: port)
        socket.setReceiveTimeout(milliseconds: 20_000)
        try socket.send("GET /view/events\(query) HTTP/1.1\r\n" + headers.map { $0 + "\r\n" }.joined() + "\r\n")
        let reader = HTTPReader(socket)
        head = String(decoding: try #require(try reader.readHeadBytes()), as: UTF8.self)
        buffer = reader.takeBuffered()
    }

    /// The next event or comment block (without its blank line), nil at EOF.
    func next() throws -> String? {
        while true {
            if let end = buffer.indices.dropLast().first(where: { buffer[$0] == 0x0A && buffer[$0 + 1] == 0x0A }) {
                let block = String(decoding: buffer[..<end], as: UTF8.self)
                buffer.removeFirst(end + 2)
                return block
            }
            let chunk = try socket.receive()
            if chunk.isEmpty { return nil }
            buffer += chunk
        }
    }

    /// Events' ids until (and including) `seq`.
    func ids(through seq: UInt64) throws -> [UInt64] {
        var ids: [UInt64] = []
        while ids.last ?? 0 < seq, let block = try next() {
            guard block.hasPrefix("id: ") else { continue }
            ids.append(UInt64(block.dropFirst(4).prefix { $0 != "\n" }) ?? 0)
            progress.withLock { $0 = ids.last ?? 0 }
        }
        return ids
    }
}

@Suite("Admin listener: the live view's stream", .serialized)
struct AdminViewStreamTests {
    @Test("/view/events: SSE head, the ring replayed, then each record as `id: SEQ` and one `data:` line with seq first")
    func streamFraming() throws {
        let admin = try AdminFixture()
        defer { admin.stop() }
        admin.publish(1)
        admin.publish(2)
        let viewer = try Viewer(port: admin.port)
        #expect(viewer.head.hasPrefix("HTTP/1.1 200 OK\r\n"))
        for header in ["Content-Type: text/event-stream", "Cache-Control: no-store", "X-Accel-Buffering: no", "Connection: close"] {
            #expect(viewer.head.contains(header + "\r\n"), "\(header)")
        }
        #expect(!viewer.head.lowercased().contains("content-length"))
        #expect(try viewer.next() == "id: 1\ndata: {\"seq\":1,\"n\":1}")
        #expect(try viewer.next() == "id: 2\ndata: {\"seq\":2,\"n\":2}")
        admin.publish(3)
        #expect(try viewer.next() == "id: 3\ndata: {\"seq\":3,\"n\":3}")
        #expect(admin.metrics.viewViewers.load(ordering: .relaxed) == 1)
        let reconnected = try Viewer(port: admin.port, headers: ["Host: 127.0.0.1", "Last-Event-ID: 2"])
        #expect(try reconnected.next() == "id: 3\ndata: {\"seq\":3,\"n\":3}")
        admin.publish(4)
        #expect(try viewer.ids(through: 4) == [4])
        #expect(try reconnected.ids(through: 4) == [4])
    }

    @Test("client= and origin= filters: each viewer gets only its records, the replay filtered too")
    func filters() throws {
        let admin = try AdminFixture()
        defer { admin.stop() }
        admin.publish(1, client: "ci", origin: "api.github.com:443")
        admin.publish(2, client: "laptop", origin: "api.example:443")
        let byClient = try Viewer(port: admin.port, query: "?client=ci")
        let byOrigin = try Viewer(port: admin.port, query: "?origin=https://api.example")
        admin.publish(3, client: "ci", origin: "api.example:443")
        admin.publish(4, client: "laptop", origin: "api.github.com:443")
        admin.publish(5, client: "ci", origin: "api.github.com:443")
        #expect(try byClient.ids(through: 5) == [1, 3, 5])
        #expect(try byOrigin.ids(through: 3) == [2, 3])
        let refused = try admin.get("/view/events?cleint=ci")
        #expect(refused.status == 400 && refused.bodyText.contains("view_bad_query") && refused.bodyText.contains("known: client, origin"))
        #expect(try admin.get("/view/events?origin=not%20a%20host").status == 400)
    }

    @Test("a viewer that never reads is dropped once 1 MiB behind (counted) while the others receive every record")
    func slowViewerDropped() throws {
        let admin = try AdminFixture()
        defer { admin.stop() }
        let slow = try Viewer(port: admin.port)
        var small: Int32 = 16 * 1024
        setsockopt(slow.socket.fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        let fast = try (0..<3).map { _ in try Viewer(port: admin.port) }
        let total = 1500  // records of ~2 KiB: 3 MiB, well past what the slow one's buffers hold
        let received = Locked<[[UInt64]]>(Array(repeating: [], count: fast.count))
        let done = DispatchGroup()
        for (index, viewer) in fast.enumerated() {
            done.enter()
            Thread.detachNewThread {
                let ids = (try? viewer.ids(through: UInt64(total))) ?? []
                received.withLock { $0[index] = ids }
                done.leave()
            }
        }
        for index in 1...total {
            admin.publish(index, padding: 2000)
            if index % 100 == 0 { waitForReaders(fast, seq: UInt64(index - 100)) }
        }
        #expect(done.wait(timeout: .now() + 60) == .success)
        for ids in received.withLock({ $0 }) {
            #expect(ids == Array(1...UInt64(total)), "a reading viewer got \(ids.count) of \(total) records, in order")
        }
        #expect(admin.metrics.viewViewersDropped.load(ordering: .relaxed) == 1)
        // The slow one's connection was closed: whatever it had been sent, then the end.
        var slowIDs: [UInt64] = []
        while let block = try? slow.next() {
            if block.hasPrefix("id: ") { slowIDs.append(UInt64(block.dropFirst(4).prefix { $0 != "\n" }) ?? 0) }
        }
        #expect(slowIDs.count < total, "the slow viewer was cut off after \(slowIDs.count) records")
        #expect(admin.metrics.viewViewers.load(ordering: .relaxed) == 3)
    }

    @Test("a viewer with nothing to receive gets a keep-alive comment each interval")
    func keepAliveComment() throws {
        var limits = AdminServer.Limits()
        limits.keepAliveMilliseconds = 100
        let admin = try AdminFixture(limits: limits)
        defer { admin.stop() }
        let viewer = try Viewer(port: admin.port)
        #expect(try viewer.next() == ": keep-alive")
        admin.publish(1)
        #expect(try viewer.ids(through: 1) == [1])
    }

    @Test("stopping while viewers read and a worker keeps publishing returns, 20 times; publishing after the stop is harmless")
    func stopWhilePublishing() throws {
        for _ in 0..<20 {
            let admin = try AdminFixture()
            let viewers = try (0..<3).map { _ in try Viewer(port: admin.port) }
            let publishing = Locked(true)
            let finished = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                var index = 0
                while publishing.withLock({ $0 }) {
                    index += 1
                    admin.publish(index, padding: 100)
                }
                for extra in 0..<100 { admin.publish(extra) }  // after the stop: the feed no longer wakes anything
                finished.signal()
            }
            _ = try viewers[0].next()
            admin.stop()
            publishing.withLock { $0 = false }
            #expect(finished.wait(timeout: .now() + 10) == .success)
            for viewer in viewers { viewer.socket.close() }
        }
    }

    @Test("past the viewer cap a new viewer gets 503 JSON; HEAD /view/events is the head alone")
    func viewerCap() throws {
        var limits = AdminServer.Limits()
        limits.maxViewers = 2
        let admin = try AdminFixture(limits: limits)
        defer { admin.stop() }
        let first = try Viewer(port: admin.port)
        let second = try Viewer(port: admin.port)
        let third = try admin.get("/view/events")
        #expect(third.status == 503 && third.bodyText.contains("\"error\":\"view_viewers_full\""))
        #expect(first.head.contains("200 OK") && second.head.contains("200 OK"))
        let head = try admin.get("/view/events", method: "HEAD")
        #expect(head.status == 503)  // still full: HEAD counts as a request for the stream
        first.socket.close()
        second.socket.close()
    }

    @Test("100 viewers, 90 of which never read, through 4 MiB of records: the readers get all, the rest are dropped, memory stays bounded")
    func hundredViewersMemory() throws {
        let admin = try AdminFixture()
        defer { admin.stop() }
        let before = residentKiB()
        let stalled = try (0..<90).map { _ in try Viewer(port: admin.port) }
        let readers = try (0..<10).map { _ in try Viewer(port: admin.port) }
        let total = 2000  // ~2 KiB each
        let counts = Locked<[Int]>(Array(repeating: 0, count: readers.count))
        let done = DispatchGroup()
        for (index, viewer) in readers.enumerated() {
            done.enter()
            Thread.detachNewThread {
                let ids = (try? viewer.ids(through: UInt64(total))) ?? []
                counts.withLock { $0[index] = ids.count }
                done.leave()
            }
        }
        var peak = before
        for index in 1...total {
            admin.publish(index, padding: 2000)
            if index % 100 == 0 {
                waitForReaders(readers, seq: UInt64(index - 100))
                peak = max(peak, residentKiB())
            }
        }
        #expect(done.wait(timeout: .now() + 120) == .success)
        peak = max(peak, residentKiB())
        print("100 viewers (90 never read), \(total) records of ~2 KiB: RSS \(before) KiB before, peak \(peak) KiB (+\(peak - before) KiB)")
        #expect(counts.withLock { $0 } == Array(repeating: total, count: readers.count))
        #expect(admin.metrics.viewViewersDropped.load(ordering: .relaxed) == 90)
        // The bound: the ring (512 KiB), a pending batch (1 MiB) and up to 1 MiB of shared
        // references; what the 90 stalled viewers cost is kernel socket buffers, not this heap.
        #expect(peak - before < 48 * 1024, "RSS grew \(peak - before) KiB")
        withExtendedLifetime(stalled) {}
    }
}

/// Waits until every reader has read up to `seq` (or gives up after a minute, and the test's
/// expectations then say what was missing): a burst far faster than any proxy publishes would
/// otherwise put the admin thread itself 1 MiB behind, which drops every viewer by design.
private func waitForReaders(_ readers: [Viewer], seq: UInt64) {
    for _ in 0..<60_000 {
        if readers.allSatisfy({ $0.progress.withLock { $0 } >= seq }) { return }
        usleep(1000)
    }
}

private func residentKiB() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
        let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
    else { return 0 }
    return Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0
}

@Suite("Admin listener: who may open the live view", .serialized)
struct AdminViewAccessTests {
    @Test("/view serves the page with the security headers; its CSS and script too")
    func pageAndAssets() throws {
        let admin = try AdminFixture()
        defer { admin.stop() }
        for (path, type, body) in [
            ("/view", "text/html; charset=utf-8", ViewPage.html), ("/view/view.css", "text/css; charset=utf-8", ViewPage.css),
            ("/view/view.js", "text/javascript; charset=utf-8", ViewPage.javascript),
        ] {
            let response = try admin.get(path)
            #expect(response.status == 200 && response.header("content-type") == type && response.body == body, "\(path)")
            #expect(response.header("content-security-policy")?.hasPrefix("default-src 'none'; script-src 'self';") == true)
            #expect(response.header("x-content-type-options") == "nosniff" && response.header("referrer-policy") == "no-referrer")
            #expect(response.header("cache-control") == "no-store")
        }
        #expect(try admin.get("/view/other").status == 404)
    }

    @Test(
        "with admin_token: Bearer works, ?token= sets an HttpOnly SameSite=Strict cookie that is not the token, the cookie works, anything else is 401"
    )
    func tokenAccess() throws {
        let admin = try AdminFixture(token: true)
        defer { admin.stop() }
        let missing = try admin.get("/view")
        #expect(missing.status == 401 && missing.header("www-authenticate") == "Bearer")
        #expect(missing.bodyText.contains("\"error\":\"view_unauthorized\"") && missing.bodyText.contains("\"hint\":"))
        #expect(try admin.get("/view", headers: ["Host: 127.0.0.1", "Authorization: Bearer \(canaryToken)"]).status == 200)
        #expect(try admin.get("/view", headers: ["Host: 127.0.0.1", "Authorization: Bearer wrong-\(canaryToken)"]).status == 401)
        #expect(try admin.get("/view?token=nope").status == 401)
        let opened = try admin.get("/view?token=\(canaryToken)")
        #expect(opened.status == 200)
        let setCookie = try #require(opened.header("set-cookie"))
        let attributes = "; Path=/view; Max-Age=\(ViewAccess.cookieLifetimeSeconds); HttpOnly; SameSite=Strict"
        #expect(setCookie.hasPrefix("scopeproxy_view=") && setCookie.hasSuffix(attributes))
        let cookie = String(setCookie.prefix { $0 != ";" })
        #expect(!cookie.contains(canaryToken) && cookie.hasPrefix("scopeproxy_view=") && cookie.hasSuffix(String(cookie.suffix(64))))
        #expect(setCookie.contains("Max-Age=\(ViewAccess.cookieLifetimeSeconds)"))
        #expect(try admin.get("/view/view.js", headers: ["Host: 127.0.0.1", "Cookie: theme=dark; \(cookie)"]).status == 200)
        #expect(try admin.get("/view/view.js", headers: ["Host: 127.0.0.1", "Cookie: scopeproxy_view=\(canaryToken)"]).status == 401)
        #expect(try admin.get("/view/events?token=\(canaryToken)").status == 400, "?token= is for /view only")
        let viewer = try Viewer(port: admin.port, headers: ["Host: 127.0.0.1", "Cookie: \(cookie)"])
        #expect(viewer.head.hasPrefix("HTTP/1.1 200 OK"))
        // Health and metrics never need the token.
        #expect(try admin.get("/healthz").status == 200)
        #expect(try admin.get("/metrics").status == 200)
        viewer.socket.close()
    }

    @Test("a view cookie is accepted until the expiry it carries: a changed, expired, far-future or overlong expiry is refused")
    func cookieExpiry() {
        let token = SecretValue(canaryToken)
        let now = ViewAccess.wallClockSeconds()
        let cookie = ViewAccess.cookieValue(for: token, expires: now + 60)
        #expect(ViewAccess.cookieIsValid(cookie, for: token, now: now))
        #expect(!ViewAccess.cookieIsValid(cookie, for: token, now: now + 61), "expired")
        #expect(!ViewAccess.cookieIsValid(cookie, for: SecretValue(canaryToken + "x"), now: now), "another token")
        // The expiry is covered by the MAC: moving it later breaks the cookie.
        let mac = cookie.split(separator: UInt8(ascii: ".")).last.map(Array.init) ?? []
        #expect(!ViewAccess.cookieIsValid(Array("\(now + 120).".utf8) + mac, for: token, now: now))
        let farFuture = ViewAccess.cookieValue(for: token, expires: now + ViewAccess.cookieLifetimeSeconds + 10)
        #expect(!ViewAccess.cookieIsValid(farFuture, for: token, now: now), "beyond the lifetime this process gives")
        for hostile in ["", ".", "1.", String(repeating: "9", count: 40) + ".aa", "-1.aa", "x.y", "18446744073709551615.ab"] {
            #expect(!ViewAccess.cookieIsValid(Array(hostile.utf8), for: token, now: now), "\(hostile.prefix(20))")
        }
    }

    @Test("a reload's new token applies at once, the old one and its cookie stop working; a token without a value lets nobody in")
    func tokenReplaced() throws {
        let access = ViewAccess(tokenSecret: "view_token", secrets: StaticSecrets(["view_token": canaryToken]))
        let routes = AdminRoutes(metrics: Metrics(), access: access, adminHost: "127.0.0.1", adminIsLoopback: true, viewEnabled: true)
        let oldCookie = ViewAccess.cookieValue(
            for: SecretValue(canaryToken), expires: ViewAccess.wallClockSeconds() + ViewAccess.cookieLifetimeSeconds)
        func fields(_ pairs: [(String, String)]) -> HTTPFields { HTTPFields(pairs.map { HTTPField(name: $0.0, value: $0.1) }) }
        let bearerOld = fields([("Authorization", "Bearer \(canaryToken)")])
        let cookieOld = fields([("Cookie", "scopeproxy_view=\(String(decoding: oldCookie, as: UTF8.self))")])
        #expect(routes.authorize(bearerOld, queryToken: nil) == .allowed(setCookie: nil))
        #expect(routes.authorize(cookieOld, queryToken: nil) == .allowed(setCookie: nil))
        access.replace(tokenSecret: "next", secrets: StaticSecrets(["next": canaryToken + "-2"]))
        #expect(routes.authorize(bearerOld, queryToken: nil) != .allowed(setCookie: nil))
        #expect(routes.authorize(cookieOld, queryToken: nil) != .allowed(setCookie: nil))
        #expect(routes.authorize(fields([("authorization", "bearer \(canaryToken)-2")]), queryToken: nil) == .allowed(setCookie: nil))
        access.replace(tokenSecret: "missing", secrets: StaticSecrets([:]))
        guard case .refused(let hint) = routes.authorize(bearerOld, queryToken: Array(canaryToken.utf8)) else {
            Issue.record("a token without a value let a request in")
            return
        }
        #expect(hint.contains("no value"))
        access.replace(tokenSecret: nil, secrets: nil)
        #expect(routes.authorize(fields([]), queryToken: nil) == .allowed(setCookie: nil), "no token on loopback: open")
    }

    @Test("a non-loopback admin address without admin_token keeps the view closed (health and metrics answer)")
    func nonLoopbackWithoutToken() throws {
        let admin = try AdminFixture(host: "0.0.0.0")
        defer { admin.stop() }
        let refused = try admin.get("/view")
        #expect(refused.status == 401 && refused.bodyText.contains("admin_token"))
        #expect(try admin.get("/healthz").status == 200)
    }

    @Test(
        "/view* needs a Host that is an IP literal, localhost or the admin host, and no foreign Origin (DNS rebinding)",
        arguments: [
            (["Host: 127.0.0.1:9090"], 200), (["Host: localhost:9090"], 200), (["Host: [::1]:9090"], 200), (["Host: 10.1.2.3"], 200),
            (["Host: evil.example:9090"], 403), (["Host: 127.0.0.1.nip.io"], 403), ([String](), 403),
            (["Host: 127.0.0.1", "Host: 127.0.0.1"], 403), (["Host: 127.0.0.1:9090", "Origin: http://127.0.0.1:9090"], 200),
            (["Host: 127.0.0.1:9090", "Origin: https://evil.example"], 403), (["Host: 127.0.0.1:9090", "Origin: null"], 403),
        ])
    func hostAndOrigin(headers: [String], status: Int) throws {
        let admin = try AdminFixture()
        defer { admin.stop() }
        for path in ["/view", "/view/events"] {
            let socket = try TestSocket.connect(port: admin.port)
            defer { socket.close() }
            socket.setReceiveTimeout(milliseconds: 10_000)
            try socket.send("GET \(path) HTTP/1.1\r\n" + headers.map { $0 + "\r\n" }.joined() + "\r\n")
            let head = String(decoding: try #require(try HTTPReader(socket).readHeadBytes()), as: UTF8.self)
            #expect(head.hasPrefix("HTTP/1.1 \(status) "), "\(path) \(headers)")
        }
        // Health and metrics: any Host, or none.
        #expect(try admin.get("/healthz", headers: ["Host: evil.example"]).status == 200)
    }

    @Test("the admin token never comes back: not in refusals, hints, cookies, headers or /metrics")
    func canaryNeverReturned() throws {
        let admin = try AdminFixture(token: true)
        defer { admin.stop() }
        var everything = ""
        for (target, headers) in [
            ("/view?token=\(canaryToken)x", ["Host: 127.0.0.1"]), ("/view?token=\(canaryToken)", ["Host: 127.0.0.1"]),
            ("/view/events", ["Host: 127.0.0.1", "Authorization: Bearer \(canaryToken)0"]), ("/view", ["Host: evil.example"]),
            ("/metrics", ["Host: 127.0.0.1"]), ("/view/nope?token=\(canaryToken)", ["Host: 127.0.0.1"]),
        ] {
            let response = try admin.get(target, headers: headers)
            everything += String(decoding: response.rawHead, as: UTF8.self) + response.bodyText
        }
        #expect(!everything.isEmpty)
        #expect(!everything.contains(canaryToken), "the admin token came back in a response")
    }
}

@Suite("Admin listener: plain requests on the rewritten server", .serialized)
struct AdminPlainTests {
    @Test("health, metrics, 404; GET and HEAD only (405 with Allow); keep-alive answers several requests on one connection")
    func basics() throws {
        let admin = try AdminFixture()
        defer { admin.stop() }
        let health = try admin.get("/healthz")
        #expect(health.status == 200 && health.bodyText == "ok\n")
        #expect(try admin.get("/metrics").bodyText.contains("# TYPE scopeproxy_view_viewers gauge"))
        #expect(try admin.get("/nope").status == 404)
        let post = try admin.get("/healthz", method: "POST")
        #expect(post.status == 405 && post.header("allow") == "GET, HEAD")
        let head = try admin.get("/healthz", method: "HEAD")
        #expect(head.status == 200 && head.body.isEmpty && head.header("content-length") == "3")
        admin.server.draining.store(true, ordering: .relaxed)
        #expect(try admin.get("/healthz").status == 503)

        let socket = try TestSocket.connect(port: admin.port)
        defer { socket.close() }
        socket.setReceiveTimeout(milliseconds: 10_000)
        // Two pipelined requests, then a third after the answers: one connection serves them all.
        try socket.send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        let reader = HTTPReader(socket)
        #expect(try reader.readResponse()?.status == 200)
        #expect(try reader.readResponse()?.status == 404)
        try socket.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        #expect(try reader.readResponse()?.status == 503)
    }

    @Test("a malformed head or one over 8 KiB is answered 400 and the connection closed")
    func badHeads() throws {
        let admin = try AdminFixture()
        defer { admin.stop() }
        for raw in [
            "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header: x\r\n\r\n",
            "GET /healthz HTTP/1.1\r\nX-Filler: \(String(repeating: "f", count: 9000))\r\n\r\n",
        ] {
            let socket = try TestSocket.connect(port: admin.port)
            defer { socket.close() }
            socket.setReceiveTimeout(milliseconds: 10_000)
            try socket.send(raw)
            #expect(try HTTPReader(socket).readResponse()?.status == 400)
            #expect(socket.peerClosed())
        }
    }

    @Test("a connection that sends nothing, or half a head, is closed after the head timeout")
    func headTimeout() throws {
        var limits = AdminServer.Limits()
        limits.headTimeoutMilliseconds = 200
        let admin = try AdminFixture(limits: limits)
        defer { admin.stop() }
        let idle = try TestSocket.connect(port: admin.port)
        let slow = try TestSocket.connect(port: admin.port)
        try slow.send("GET /healthz HTTP/1.1\r\nHost: 1")
        for socket in [idle, slow] {
            socket.setReceiveTimeout(milliseconds: 10_000)
            #expect(socket.receiveUntilClose().isEmpty, "closed without an answer")
            socket.close()
        }
    }

    @Test("at the connection cap the oldest connection waiting for a head gives way: unfinished heads cannot lock health checks out")
    func connectionCap() throws {
        var limits = AdminServer.Limits()
        limits.maxConnections = 8
        let admin = try AdminFixture(limits: limits)
        defer { admin.stop() }
        // A local process takes every slot with heads it never finishes.
        var holders: [TestSocket] = []
        for _ in 0..<limits.maxConnections {
            let holder = try TestSocket.connect(port: admin.port)
            try holder.send("G")
            holders.append(holder)
        }
        defer { for holder in holders { holder.close() } }
        // A probe still gets in: the oldest unfinished head is the one closed.
        let probe = try TestSocket.connect(port: admin.port)
        try probe.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        #expect(try HTTPReader(probe).readResponse()?.status == 200)
        probe.close()
        holders[0].setReceiveTimeout(milliseconds: 10_000)
        #expect(holders[0].receiveUntilClose().isEmpty, "the oldest holder was closed")
        // The holder takes its slots back, and more: a probe still gets in.
        for _ in 0..<3 {
            let holder = try TestSocket.connect(port: admin.port)
            try holder.send("G")
            holders.append(holder)
        }
        let again = try TestSocket.connect(port: admin.port)
        try again.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        #expect(try HTTPReader(again).readResponse()?.status == 200)
        again.close()
    }
}
