import Foundation
import TestSupport
import Testing

/// Requests inside an intercepted CONNECT tunnel (docs/https.md), through the built binary with its
/// local CA, the Python HTTPS origin and curl: they inherit the tunnel's proxy authentication and
/// are held to the origin the CONNECT named.
@Suite("TLS interception: requests inside a tunnel inherit its CONNECT's authentication and are held to its target", .serialized)
struct InterceptedTunnelTests {
    /// A binary intercepting `https://localhost:PORT`, injecting `token` there, with `proxy_auth` when given.
    private func interceptingProxy(_ pki: TestPKI, _ origin: HTTPSOrigin, token: String, proxyPassword: String?) throws
        -> (ConfiguredProxy, caPath: String)
    {
        var environment = ["TOKEN": token]
        if let proxyPassword { environment["PROXY_PW"] = proxyPassword }
        let configured = try ConfiguredProxy(environment: environment) { logPath in
            let directory = (logPath as NSString).deletingLastPathComponent
            return """
                secrets: { token: { env: TOKEN }\(proxyPassword == nil ? "" : ", pw: { env: PROXY_PW }") }
                \(proxyPassword == nil ? "" : "proxy_auth: { secret: pw }")
                scopes: [{ name: api, origins: ["https://localhost:\(origin.port)"], inject: { Authorization: "Bearer ${token}" } }]
                tls: { intercept: scoped, tunnel: deny, ca_dir: \(directory)/ca, upstream_ca: \(pki.caPath) }
                """
        }
        return (configured, configured.scratch.path + "/ca/scopeproxy-ca.pem")
    }

    @Test(
        "with proxy_auth, an authenticated CONNECT is intercepted and the requests inside the tunnel inherit it (curl sends Proxy-Authorization on CONNECT only)"
    )
    func proxyAuthInheritedInsideTunnel() throws {
        let pki = try TestPKI()
        let origin = try HTTPSOrigin(certificate: pki.certificate("valid"))
        defer { origin.stop() }
        let token = Wire.canary("token"), password = Wire.canary("proxy-pw")
        let (configured, caPath) = try interceptingProxy(pki, origin, token: token, proxyPassword: password)
        defer { configured.process.terminate() }
        let proxyURL = "http://127.0.0.1:\(configured.port)"
        let (status, body) = try curl([
            "--cacert", caPath, "-x", proxyURL, "--proxy-user", "anyone:\(password)",
            "https://localhost:\(origin.port)/v1/items",
        ])
        #expect(status == 0)
        #expect(origin.received.joined().contains("Bearer \(token)"), "inside the tunnel the token was injected")
        #expect(
            body.contains("\"Authorization\": \"Bearer \(String(repeating: "*", count: token.utf8.count))\""),
            "the echo reaches the client scrubbed")
        #expect(!body.contains("proxy_authentication_required"))
        #expect(origin.received.count == 1)
        #expect(!origin.received.joined().contains(password), "Proxy-Authorization never reaches the origin")
    }

    @Test(
        "with proxy_auth, a CONNECT without valid credentials is 407 and nothing reaches the origin",
        arguments: [nil, "Bearer wrong", "Basic " + Data("anyone:wrong".utf8).base64EncodedString()] as [String?])
    func unauthenticatedConnectRefused(_ credentials: String?) throws {
        let pki = try TestPKI()
        let origin = try HTTPSOrigin(certificate: pki.certificate("valid"))
        defer { origin.stop() }
        let (configured, _) = try interceptingProxy(pki, origin, token: Wire.canary("token"), proxyPassword: Wire.canary("proxy-pw"))
        defer { configured.process.terminate() }
        let socket = try TestSocket.connect(port: configured.port)
        try socket.send(
            "CONNECT localhost:\(origin.port) HTTP/1.1\r\nHost: localhost:\(origin.port)\r\n"
                + (credentials.map { "Proxy-Authorization: \($0)\r\n" } ?? "") + "\r\n")
        let response = try #require(LenientResponse.read(HTTPReader(socket)))
        #expect(response.status == 407)
        #expect(response.header("proxy-authenticate") != nil)
        #expect(origin.received.isEmpty)
    }

    @Test("inside an intercepted tunnel, an origin-form request whose Host names another origin is 400 and the origin receives nothing")
    func hostInsideTunnel() throws {
        let pki = try TestPKI()
        let origin = try HTTPSOrigin(certificate: pki.certificate("valid"))
        defer { origin.stop() }
        let token = Wire.canary("token")
        let (configured, caPath) = try interceptingProxy(pki, origin, token: token, proxyPassword: nil)
        defer { configured.process.terminate() }
        let proxyURL = "http://127.0.0.1:\(configured.port)"
        // HTTP/1.1 here (HTTP/2 has its own rule, 421: H2EngineTests).
        let (_, body) = try curl([
            "--http1.1", "--cacert", caPath, "-x", proxyURL, "-H", "Host: other.example:\(origin.port)", "-w", "\n%{http_code}",
            "https://localhost:\(origin.port)/v1/items",
        ])
        #expect(body.hasSuffix("\n400"), "\(body.suffix(120))")
        #expect(origin.received.isEmpty)
        // Control: the same request with the tunnel's own Host is served.
        let (_, good) = try curl(["--cacert", caPath, "-x", proxyURL, "-w", "\n%{http_code}", "https://localhost:\(origin.port)/v1/items"])
        #expect(good.hasSuffix("\n200"))
        #expect(origin.received.joined().contains("Bearer \(token)"))
        #expect(!good.contains(token), "the echo reaches the client scrubbed")
    }
}
