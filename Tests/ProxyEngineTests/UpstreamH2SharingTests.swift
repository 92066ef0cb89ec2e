import Foundation
import TestSupport
import Testing

/// Streams that reach the proxy together and may speak HTTP/2 to their origin wait for one connect
/// instead of each opening its own (RFC 9113 §9.1; `PendingHTTP2`). Every way that connect can end
/// is here: HTTP/2 (one connection serves them all, `GRPCEngineTests` counts it), the opener's stream
/// reset first (the next waiter carries the connect on), an HTTP/1.1-only origin (each falls back),
/// and a refused connect (every waiter hears the same failure at once).
@Suite("HTTP/2 to origins: streams that arrive together share one connect", .serialized)
struct UpstreamH2SharingTests {
    private func streamPlan(_ count: Int, authority: String) -> [[String: Any]] {
        (0..<count).map { ["scheme": "http", "authority": authority, "path": "/s\($0)"] }
    }

    @Test(
        "TLS origin: the stream that opened the connect is reset during the handshake; the next waiter carries it on and the other eleven are answered over one connection"
    )
    func openerResetHandsTheConnectOver() throws {
        let pki = try TestPKI()
        let origin = try GRPCOrigin(certificate: pki.certificate("valid"))
        defer { origin.stop() }
        let proxy = try Wire.interceptingProxy(originPort: origin.port, upstreamCA: pki.caPath, token: Wire.canary("handover-token"))
        defer { _ = proxy.process.terminate() }
        // Twelve gRPC unary calls (length-prefixed "hello"); the first is reset once all twelve
        // HEADERS are out, in the same write: the proxy reads the reset while the TLS handshake
        // its stream started is under way and eleven streams wait for it.
        let plan: [[String: Any]] = (0..<12).map { index in
            [
                "method": "POST", "scheme": "https", "authority": "localhost:\(origin.port)", "path": "/svc/Unary",
                "headers": [["content-type", "application/grpc"], ["te", "trailers"]], "body": "\u{0}\u{0}\u{0}\u{0}\u{5}hello",
                "reset_after_all_heads": index == 0,
            ]
        }
        let answer = try Wire.h2Client([
            "proxy_port": Int(proxy.port), "timeout": 15, "streams": plan,
            "tunnel": ["host": "localhost", "port": Int(origin.port), "ca": proxy.scratch.path + "/ca/scopeproxy-ca.pem"],
        ])
        let answered = Wire.streams(answer).dropFirst()
        #expect(answered.count == 11)
        #expect(answered.allSatisfy { $0["status"] as? Int == 200 && ($0["trailers"] as? [String: String])?["grpc-status"] == "0" }, "\(answered)")
        #expect(answered.allSatisfy { ($0["body"] as? String)?.contains("echo:hello") == true })
        #expect(try proxy.metrics().contains("scopeproxy_upstream_connections 1"))
    }

    @Test(
        "h2c client, HTTP/1.1-only origin: ten streams wait on one h2c probe, the origin answers it as HTTP/1.1, and each falls back and is answered")
    func probeRefusedEveryWaiterFallsBack() throws {
        let origin = try FixtureOrigin { connection in
            while let request = connection.readRequest() {
                connection.respond(body: "h1 \(request.target)")
            }
        }
        defer { origin.stop() }
        let proxy = try ConfiguredProxy { logPath in "log: { output: \(logPath) }" }
        defer { _ = proxy.process.terminate() }
        let answer = try Wire.h2Client(["proxy_port": Int(proxy.port), "timeout": 15, "streams": streamPlan(10, authority: origin.authority)])
        let answered = Wire.streams(answer)
        #expect(answered.map { $0["status"] as? Int } == Array(repeating: 200, count: 10), "\(answered)")
        #expect(answered.enumerated().allSatisfy { $0.element["body"] as? String == "h1 /s\($0.offset)" })
    }

    @Test("a refused connect fails every stream that waited for it at once, each with the same 502 upstream_refused")
    func refusedConnectFailsEveryWaiter() throws {
        let closed = try TestListener()
        let closedPort = closed.port
        closed.close()  // bound, then closed: nothing listens there
        let proxy = try ConfiguredProxy { logPath in "log: { output: \(logPath) }" }
        defer { _ = proxy.process.terminate() }
        let answer = try Wire.h2Client([
            "proxy_port": Int(proxy.port), "timeout": 15, "streams": streamPlan(10, authority: "127.0.0.1:\(closedPort)"),
        ])
        let answered = Wire.streams(answer)
        #expect(answered.map { $0["status"] as? Int } == Array(repeating: 502, count: 10), "\(answered)")
        #expect(answered.allSatisfy { ($0["body"] as? String)?.contains("\"error\":\"upstream_refused\"") == true })
    }
}
