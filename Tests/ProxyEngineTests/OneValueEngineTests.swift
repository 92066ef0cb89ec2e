import Foundation
import TestSupport
import Testing

/// One value or refuse, through the engine: an origin answering with two different Locations.
/// Clients disagree on which one they follow (curl and Node the first, OkHttp and Java's
/// HttpURLConnection the last), so neither may reach the client, and the proxy follows neither.
@Suite("One value or refuse: two different Locations from an origin, through the engine", .serialized)
struct OneValueEngineTests {
    @Test(
        "an origin's 302 with two different Locations: 502 ambiguous_location, the client sees neither, neither target gets a request",
        arguments: ["block", "follow", "pass"], [false, true])
    func differingLocations(mode: String, allowedFirst: Bool) throws {
        let allowed = try FixtureOrigin(host: "127.0.0.2"), elsewhere = try FixtureOrigin(host: "127.0.0.1")
        let allowedPath = Wire.canary("allowed"), elsewherePath = Wire.canary("elsewhere")
        let locations = [("Location", "\(allowed.url)/\(allowedPath)"), ("Location", "\(elsewhere.url)/\(elsewherePath)")]
        let ordered = allowedFirst ? locations : locations.reversed()
        let redirecting = try Wire.scripted { _ in
            Array(("HTTP/1.1 302 Found\r\n" + ordered.map { "\($0.0): \($0.1)\r\n" }.joined() + "Content-Length: 0\r\n\r\n").utf8)
        }
        defer { [allowed, elsewhere, redirecting].forEach { $0.stop() } }
        let proxy = try ProxyHarness(yaml: "redirects: { cross_origin: \(mode), allow: [\"\(allowed.url)\"], max_hops: 5 }", secrets: [:])
        defer { proxy.stop() }

        let socket = try proxy.connect()
        try socket.send(Wire.request("\(redirecting.url)/start", host: redirecting.authority))
        let answer = try #require(LenientResponse.read(HTTPReader(socket)), "an answer")
        #expect(answer.status == 502, "\(answer.head)")
        #expect(answer.bodyText.contains(#""error":"ambiguous_location""#), "\(answer.bodyText)")
        #expect(answer.header("location") == nil)
        for canary in [allowedPath, elsewherePath] {
            #expect(!answer.text.contains(canary), "the client saw a Location")
        }
        #expect(allowed.requests.isEmpty && elsewhere.requests.isEmpty, "a Location was followed")

        // The connection carries on: the refusal is the origin's fault, not the client's.
        try socket.send(Wire.request("\(allowed.url)/after", host: allowed.authority))
        let next = try #require(LenientResponse.read(HTTPReader(socket)), "an answer to the next request")
        #expect(next.status == 200)
    }

    @Test(
        "the same Location twice is one: block passes or refuses it as it would alone, follow follows it once, the client gets it once",
        arguments: ["block", "follow", "pass"])
    func repeatedLocation(mode: String) throws {
        let landing = try FixtureOrigin(host: "127.0.0.2")
        let location = "\(landing.url)/landing"
        let redirecting = try Wire.scripted { _ in
            Array("HTTP/1.1 302 Found\r\nLocation: \(location)\r\nLocation: \(location)\r\nContent-Length: 0\r\n\r\n".utf8)
        }
        defer { [landing, redirecting].forEach { $0.stop() } }
        let proxy = try ProxyHarness(yaml: "redirects: { cross_origin: \(mode), allow: [\"\(landing.url)\"], max_hops: 5 }", secrets: [:])
        defer { proxy.stop() }
        let answer = try #require(
            LenientResponse.read(
                HTTPReader(
                    try {
                        let socket = try proxy.connect()
                        try socket.send(Wire.request("\(redirecting.url)/start", host: redirecting.authority))
                        return socket
                    }())))
        if mode == "follow" {
            #expect(answer.status == 200, "\(answer.head)")
            #expect(landing.requests.count == 1, "followed once")
        } else {
            #expect(answer.status == 302, "\(answer.head)")
            #expect(answer.head.components(separatedBy: "\r\n").filter { $0.lowercased().hasPrefix("location:") } == ["Location: \(location)"])
            #expect(landing.requests.isEmpty)
        }
    }
}
