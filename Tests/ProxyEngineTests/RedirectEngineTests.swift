import Foundation
import TestSupport
import Testing

/// Redirects through the in-process engine, as a black box: a scripted origin answers with a 3xx,
/// and each test checks what the client and every origin got (docs/security-model.md, "Redirects").
/// Two 3xx in one write, against the built binary: BackToBackRedirectBinaryTests.swift.
@Suite("Redirects: nothing an origin sends after a followed or blocked 3xx reaches the client", .serialized)
struct RedirectStaleHopTests {
    @Test(
        "bytes an origin sends after a followed or blocked 3xx never reach the client; each request on the connection gets its own origin's answer",
        arguments: ["follow", "block"], [false, true])
    func noDesyncAfterRedirect(mode: String, pipelined: Bool) throws {
        let marker = Wire.canary("forged")
        let landing = try FixtureOrigin(host: "127.0.0.2")  // echo; where the 3xx points
        let second = try FixtureOrigin(host: "127.0.0.1")  // echo; the client's next request goes here
        let forgedBody = "\(marker)-body"
        let redirecting = try Wire.scripted { _ in
            // The 3xx and, in the same write, a second complete response the proxy must never parse.
            Array(
                ("HTTP/1.1 302 Found\r\nLocation: \(landing.url)/landing\r\nContent-Length: 0\r\n\r\n"
                    + "HTTP/1.1 200 OK\r\nX-Forged: \(marker)\r\nContent-Length: \(forgedBody.utf8.count)\r\n\r\n\(forgedBody)").utf8)
        }
        defer { [landing, second, redirecting].forEach { $0.stop() } }
        let proxy = try ProxyHarness(yaml: "redirects: { cross_origin: \(mode), max_hops: 5 }", secrets: [:])
        defer { proxy.stop() }

        let socket = try proxy.connect()
        let reader = HTTPReader(socket)
        let first = Wire.request("\(redirecting.url)/start", host: redirecting.authority, [("X-Test-Id", "first")])
        let next = Wire.request("\(second.url)/second", host: second.authority, [("X-Test-Id", "second")])
        var answers: [LenientResponse?] = []
        if pipelined {
            try socket.send(first + next)
            answers.append(LenientResponse.read(reader))
            answers.append(LenientResponse.read(reader))
        } else {
            try socket.send(first)
            answers.append(LenientResponse.read(reader))
            try socket.send(next)
            answers.append(LenientResponse.read(reader))
        }
        let one = try #require(answers[0], "an answer to the first request")
        #expect(!one.text.contains(marker), "the forged response reached the client as the answer to the first request")
        if mode == "follow" {
            #expect(one.status == 200)
            #expect(one.bodyText.hasPrefix("target=/landing"), "the first answer is the followed hop's: \(one.head.prefix(80))")
        } else {
            #expect(one.status == 502)
            #expect(one.bodyText.contains("\"error\":\"redirect_blocked\""))
        }
        let two = try #require(answers[1], "an answer to the second request")
        #expect(!two.text.contains(marker), "the forged response reached the client as the answer to the second request")
        #expect(two.status == 200)
        #expect(two.header("x-echo-id") == "second", "the second answer is the second origin's: \(two.head.prefix(80))")
        #expect(two.bodyText.hasPrefix("target=/second"))
    }
}

@Suite("Redirects: a followed hop to another origin carries none of the client's credentials", .serialized)
struct RedirectClientCredentialTests {
    @Test(
        "a followed cross-origin hop carries none of the client's credentials, even where both scopes pass them; it gets only what the proxy injects there",
        arguments: [false, true])
    func followedHopCarriesNoClientCredentials(oneScopeForBoth: Bool) throws {
        let b = try FixtureOrigin(host: "127.0.0.2")
        let a = try Wire.scripted { _ in
            Array("HTTP/1.1 307 Temporary Redirect\r\nLocation: \(b.url)/next\r\nContent-Length: 0\r\n\r\n".utf8)
        }
        defer { a.stop(); b.stop() }
        let aToken = Wire.canary("a-token"), bToken = Wire.canary("b-token")
        let clientAuth = Wire.canary("client-auth"), cookie = Wire.canary("cookie"), key = Wire.canary("client-key")
        let password = Wire.canary("userinfo")
        let all = [aToken, bToken, clientAuth, cookie, key, password]
        let scopes =
            oneScopeForBoth
            ? """
            - { name: both, origins: ["\(a.url)", "\(b.url)"], require_https: false, inject: { X-Service-Token: "${b}" },
                pass: [Authorization, Cookie, X-API-Key] }
            """
            : """
            - { name: a, origins: ["\(a.url)"], require_https: false, inject: { X-A-Token: "${a}" }, pass: [Authorization, Cookie, X-API-Key] }
            - { name: b, origins: ["\(b.url)"], require_https: false, inject: { X-B-Token: "${b}" }, pass: [Authorization, Cookie, X-API-Key] }
            """
        let proxy = try ProxyHarness(
            yaml: """
                secrets: { a: { env: A }, b: { env: B } }
                scopes:
                \(scopes)
                redirects: { cross_origin: follow }
                """, secrets: ["a": aToken, "b": bToken])
        defer { proxy.stop() }

        let headers = [("Authorization", "Bearer \(clientAuth)"), ("Cookie", "sid=\(cookie)"), ("X-API-Key", key)]
        let withHeaders = try #require(
            try proxy.exchange(Wire.request("\(a.url)/start", host: a.authority, headers, method: "POST", body: "replayed")))
        #expect(withHeaders.status == 200, "the proxy followed the 307")
        let withUserinfo = try #require(try proxy.exchange(Wire.request("http://alice:\(password)@\(a.authority)/start", host: a.authority)))
        #expect(withUserinfo.status == 200)

        // Control: the origin the client addressed gets what its scope passes.
        let atA = Wire.canaries(in: a, among: all)
        #expect([clientAuth, cookie, key].allSatisfy(atA.contains), "the addressed origin gets the client's passed credentials")
        #expect(a.requests.last?.header("authorization") == "Basic " + Data("alice:\(password)".utf8).base64EncodedString())

        let atB = Wire.canaries(in: b, among: all)
        #expect(
            atB == [bToken], "B received client credentials meant for A: \(atB.subtracting([bToken]).map { $0.split(separator: "-")[1] }.sorted())")
        #expect(b.requests.count == 2)
        let hop = try #require(b.requests.first)
        #expect(hop.header("authorization") == nil)
        #expect(hop.header("cookie") == nil)
        #expect(hop.header("x-api-key") == nil)
        #expect(String(decoding: hop.body, as: UTF8.self) == "replayed", "the 307 hop still replays the body")
        #expect(b.requests.last?.header("authorization") == nil, "userinfo sent to A never becomes Authorization at B")
    }

    @Test("a followed same-origin hop keeps the client's passed credentials (control for the cross-origin rule)")
    func sameOriginHopKeepsClientCredentials() throws {
        let cookie = Wire.canary("cookie")
        let a = try Wire.scripted { request in
            request.target == "/start"
                ? Array("HTTP/1.1 302 Found\r\nLocation: /done\r\nContent-Length: 0\r\n\r\n".utf8)
                : Array("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone".utf8)
        }
        defer { a.stop() }
        let proxy = try ProxyHarness(
            yaml: """
                scopes: [{ name: a, origins: ["\(a.url)"], require_https: false, pass: [Cookie] }]
                redirects: { cross_origin: follow }
                """, secrets: [:])
        defer { proxy.stop() }
        let response = try #require(try proxy.exchange(Wire.request("\(a.url)/start", host: a.authority, [("Cookie", cookie)])))
        #expect(response.status == 200)
        #expect(a.requests.map { $0.header("cookie") } == [cookie, cookie])
    }
}

@Suite("Redirects: block mode fails closed on a Location it cannot read or that some client reads as another origin", .serialized)
struct RedirectBlockModeTests {
    /// `{T}` is replaced by an address of another origin (127.0.0.2 with a live port).
    static let unparseableOrCrossOrigin: [String] = [
        "http://{T}/a b",  // a space: not a valid URL, fail closed
        "http:/{T}/x",  // WHATWG: special scheme, one slash, host {T}
        "///{T}/x",  // WHATWG: scheme-relative with an extra slash, host {T}
        "http://127.0.0.2:123456/x",  // a 6-digit port: unparseable
        "http://2130706433/x",  // decimal IPv4: WHATWG reads 127.0.0.1, port 80 (another origin)
        "http://attacker.exa\tmple/x",  // tab removed by WHATWG: attacker.example
        "http://\u{E9}vil.example/x",  // raw non-ASCII (sent as UTF-8 bytes)
        "/\\{T}/x",  // WHATWG reads `\` as `/`: //{T}/x, host {T}
        "\\\\{T}/x",  // the same, both slashes reversed
        "/\t/{T}/x",  // tab removed: //{T}/x
        "ht\ttp://{T}/x",  // tab inside the scheme
    ]

    @Test(
        "block mode answers 502 redirect_blocked for a Location it cannot parse or that WHATWG reads as another origin; the target gets nothing",
        arguments: unparseableOrCrossOrigin)
    func blockFailsClosed(_ template: String) throws {
        let target = try FixtureOrigin(host: "127.0.0.2")
        let location = template.replacingOccurrences(of: "{T}", with: target.authority)
        let origin = try Wire.scripted { _ in
            Array("HTTP/1.1 302 Found\r\nLocation: ".utf8) + Array(location.utf8) + Array("\r\nContent-Length: 5\r\n\r\nmoved".utf8)
        }
        defer { origin.stop(); target.stop() }
        let proxy = try ProxyHarness(yaml: "redirects: { cross_origin: block }", secrets: [:])
        defer { proxy.stop() }
        let response = try #require(try proxy.exchange(Wire.request("\(origin.url)/start", host: origin.authority)))
        #expect(response.status == 502, "Location \(location.debugDescription) went to the client as \(response.status)")
        #expect(response.bodyText.contains("\"error\":\"redirect_blocked\""))
        #expect(response.header("location") == nil)
        #expect(target.acceptedConnections == 0)
    }

    /// `{O}` is the redirecting origin's own authority.
    static let sameOrigin: [String] = ["/next", "next?x=1", "?page=2", "", "http://{O}/abs", "//{O}/scheme-relative", "/a\\b"]

    @Test("block mode still passes same-origin Locations, relative ones included (control)", arguments: sameOrigin)
    func blockPassesSameOrigin(_ template: String) throws {
        let holder = LocationHolder()
        let origin = try Wire.scripted { _ in
            Array("HTTP/1.1 302 Found\r\nLocation: \(holder.value)\r\nContent-Length: 0\r\n\r\n".utf8)
        }
        defer { origin.stop() }
        holder.value = template.replacingOccurrences(of: "{O}", with: origin.authority)
        let proxy = try ProxyHarness(yaml: "redirects: { cross_origin: block }", secrets: [:])
        defer { proxy.stop() }
        let response = try #require(try proxy.exchange(Wire.request("\(origin.url)/dir/start", host: origin.authority)))
        #expect(response.status == 302, "same-origin Location \(holder.value.debugDescription)")
    }

    final class LocationHolder: @unchecked Sendable {
        private let lock = NSLock()
        private var stored = ""
        var value: String {
            get { lock.withLock { stored } }
            set { lock.withLock { stored = newValue } }
        }
    }

    @Test("block mode refuses a Location that a browser reads as the same origin and curl as another (a backslash before @)")
    func curlBackslashUserinfo() throws {
        let evil = try FixtureOrigin(host: "127.0.0.3")
        let api = try Wire.scripted { _ in
            Array("HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1\\@\(evil.authority)/x\r\nContent-Length: 0\r\n\r\n".utf8)
        }
        defer { api.stop(); evil.stop() }
        let proxy = try ProxyHarness(yaml: "redirects: { cross_origin: block }", secrets: [:])
        defer { proxy.stop() }
        let response = try #require(try proxy.exchange(Wire.request("\(api.url)/start", host: api.authority)))
        #expect(response.status == 502)
        #expect(response.bodyText.contains("redirect_blocked"))
        #expect(response.header("location") == nil)
        #expect(evil.requests.isEmpty)
    }
}

@Suite("Redirects: an origin no scope covers cannot redirect a request into a scoped origin", .serialized)
struct RedirectIntoScopeTests {
    @Test("an origin no scope covers answering 307 into a scoped origin gets its 3xx returned unchanged; the scoped origin receives nothing")
    func unscopedRedirectIntoScopedOrigin() throws {
        let scoped = try FixtureOrigin(host: "127.0.0.1")
        let unscoped = try Wire.scripted(host: "127.0.0.2") { _ in
            Array("HTTP/1.1 307 Temporary Redirect\r\nLocation: \(scoped.url)/v1/transfer?to=attacker\r\nContent-Length: 0\r\n\r\n".utf8)
        }
        defer { scoped.stop(); unscoped.stop() }
        let token = Wire.canary("token"), body = Wire.canary("body")
        let proxy = try ProxyHarness(
            yaml: """
                secrets: { token: { env: T } }
                scopes: [{ name: bank, origins: ["\(scoped.url)"], require_https: false, inject: { Authorization: "Bearer ${token}" } }]
                redirects: { cross_origin: follow }
                """, secrets: ["token": token])
        defer { proxy.stop() }
        let response = try #require(
            try proxy.exchange(Wire.request("\(unscoped.url)/innocent", host: unscoped.authority, method: "POST", body: body)))
        #expect(response.status == 307, "the proxy followed an unscoped origin's redirect into a scoped one")
        #expect(response.header("location") == "\(scoped.url)/v1/transfer?to=attacker")
        #expect(scoped.acceptedConnections == 0)
        #expect(Wire.canaries(in: scoped, among: [token, body]).isEmpty, "the scoped origin got an authenticated, replayed request")
    }

    @Test("the same on a chain: scoped A -> unscoped U -> scoped A2: U's 3xx goes to the client and A2 receives nothing")
    func unscopedHopInsideChain() throws {
        let scopedTarget = try FixtureOrigin(host: "127.0.0.1")
        let unscoped = try Wire.scripted(host: "127.0.0.2") { _ in
            Array("HTTP/1.1 307 Temporary Redirect\r\nLocation: \(scopedTarget.url)/admin\r\nContent-Length: 0\r\n\r\n".utf8)
        }
        let start = try Wire.scripted { _ in
            Array("HTTP/1.1 302 Found\r\nLocation: \(unscoped.url)/hop\r\nContent-Length: 0\r\n\r\n".utf8)
        }
        defer { [scopedTarget, unscoped, start].forEach { $0.stop() } }
        let token = Wire.canary("token")
        let proxy = try ProxyHarness(
            yaml: """
                secrets: { token: { env: T } }
                scopes: [{ name: a, origins: ["\(start.url)", "\(scopedTarget.url)"], require_https: false, inject: { Authorization: "Bearer ${token}" } }]
                redirects: { cross_origin: follow }
                """, secrets: ["token": token])
        defer { proxy.stop() }
        let response = try #require(try proxy.exchange(Wire.request("\(start.url)/begin", host: start.authority)))
        #expect(response.status == 307, "U's redirect comes back to the client")
        #expect(response.header("location") == "\(scopedTarget.url)/admin")
        #expect(unscoped.requests.count == 1, "the scoped origin's own redirect to U was followed")
        #expect(Wire.canaries(in: unscoped, among: [token]).isEmpty)
        #expect(scopedTarget.acceptedConnections == 0)
    }
}
