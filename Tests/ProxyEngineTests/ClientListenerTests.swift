import Foundation
import HTTP1Codec
import ProxyCore
import ProxyEngine
import TestSupport
import Testing

private final class ResultBox: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: (status: Int32, body: String)?
    func set(_ value: (status: Int32, body: String)?) { lock.withLock { stored = value } }
    var value: (status: Int32, body: String)? { lock.withLock { stored } }
}

/// Every ConnectionFacts the engine started a machine with.
private final class FactsLog: @unchecked Sendable {
    private let lock = NSLock()
    private var facts: [ConnectionFacts] = []
    func append(_ item: ConnectionFacts) { lock.withLock { facts.append(item) } }
    var all: [ConnectionFacts] { lock.withLock { facts } }
}

/// An in-process proxy with the local CA (in a scratch dir), interception of `localhost`, and a TLS
/// client listener trusting the tools CA and the other CA of `ClientPKI`.
private final class ClientListenerProxy {
    let scratch = ScratchDirectory()
    let harness: ProxyHarness
    let facts = FactsLog()
    let clientPort: UInt16
    var caPath: String { scratch.path + "/ca/scopeproxy-ca.pem" }
    var proxyURL: String { "https://127.0.0.1:\(clientPort)" }
    var metrics: Metrics { harness.server.configuration.metrics }

    init(
        pki: ClientPKI, originCA: String? = nil, yaml: String = "scopes: []", secrets: [String: String] = [:],
        tunnel: TunnelPolicy = .deny, clientHeaderMilliseconds: Int? = nil, maxConnections: Int? = nil,
        caFiles: [ClientCAFile]? = nil
    ) throws {
        let authority = try CertificateAuthority.loadOrCreate(directory: scratch.path + "/ca")
        let tls = try TLSContexts(authority: authority, upstreamCA: originCA)
        let base = try ProxyHarness.context(yaml: yaml, secrets: secrets)
        let context = ScopeContext(policy: base.policy, redirects: base.redirects, secrets: base.secrets, interceptHosts: ["localhost"])
        let facts = self.facts
        let files =
            caFiles ?? [
                ClientCAFile(name: "tools-ca.pem", path: pki.caPath("tools-ca")),
                ClientCAFile(name: "other-ca.pem", path: pki.caPath("other-ca")),
            ]
        harness = try ProxyHarness { engine in
            engine.tls = tls
            engine.scope = ScopeContextHolder(context)
            engine.tunnel = tunnel
            if let clientHeaderMilliseconds { engine.timeouts.clientHeader = clientHeaderMilliseconds }
            if let maxConnections { engine.limits.maxClientConnections = maxConnections }
            engine.clientListener = ClientListener(listen: ListenAddress(host: "127.0.0.1", port: 0), caFiles: files)
            engine.connectionObserver = { facts.append($0) }
        }
        clientPort = try #require(harness.server.clientListenAddress?.port)
    }

    /// curl arguments for the TLS proxy with `client`'s certificate (nil: none).
    func proxyArguments(_ client: (cert: String, key: String)?) -> [String] {
        ["--proxy", proxyURL, "--proxy-cacert", caPath] + (client.map { ["--proxy-cert", $0.cert, "--proxy-key", $0.key] } ?? [])
    }

    func failures(_ reason: ClientTLSFailure) -> UInt64 {
        metrics.value("scopeproxy_client_tls_failures_total", [("reason", reason.rawValue)])
    }

    /// Waits (bounded) until every client connection has closed: nothing held by a failed handshake.
    func openConnectionsSettle() -> Int {
        for _ in 0..<100 {
            if metrics.clientConnections.load(ordering: .relaxed) == 0 { return 0 }
            usleep(20_000)
        }
        return metrics.clientConnections.load(ordering: .relaxed)
    }

    deinit { harness.stop() }
}

@Suite("TLS client listener: https:// proxy URL, client certificates as connection facts", .serialized)
struct ClientListenerTests {
    @Test(
        "curl with a client certificate through an https:// proxy URL to an http origin: answered; CN, SANs and the verifying CA file reach the machine"
    )
    func forwardWithCertificate() throws {
        let pki = try ClientPKI()
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let proxy = try ClientListenerProxy(pki: pki)
        let (status, body) = try curl(proxy.proxyArguments(pki.client("tool")) + ["\(origin.url)/first"])
        #expect(status == 0)
        #expect(body.contains("target=/first"))
        // localhost is in the listener's certificate too (loopback).
        let (byName, _) = try curl([
            "--proxy", "https://localhost:\(proxy.clientPort)", "--proxy-cacert", proxy.caPath,
            "--proxy-cert", pki.client("tool").cert, "--proxy-key", pki.client("tool").key, "\(origin.url)/second",
        ])
        #expect(byName == 0)
        let seen = proxy.facts.all
        #expect(seen.count == 2)
        for facts in seen {
            let certificate = try #require(facts.certificate)
            #expect(certificate.commonNames == ["tool"])
            #expect(certificate.subjectAltNames == ClientPKI.toolSANs)
            #expect(certificate.verifiedBy == ["tools-ca.pem"])
            #expect(facts.peer.hasPrefix("127.0.0.1:"))
        }
        #expect(origin.requests.count == 2)
        #expect(proxy.openConnectionsSettle() == 0)
    }

    @Test("a certificate from the other configured CA is verified by that CA file only; a CA file listed twice names both entries")
    func verifiedByEachFile() throws {
        let pki = try ClientPKI()
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let proxy = try ClientListenerProxy(
            pki: pki,
            caFiles: [
                ClientCAFile(name: "tools-ca.pem", path: pki.caPath("tools-ca")),
                ClientCAFile(name: "other-ca.pem", path: pki.caPath("other-ca")),
                ClientCAFile(name: "./other-ca.pem", path: pki.directory + "/./other-ca.pem"),
            ])
        let (status, _) = try curl(proxy.proxyArguments(pki.client("other")) + ["\(origin.url)/other"])
        #expect(status == 0)
        let certificate = try #require(proxy.facts.all.first?.certificate)
        #expect(certificate.commonNames == ["other-tool"])
        #expect(certificate.subjectAltNames == ["DNS:other.internal"])
        #expect(certificate.verifiedBy == ["other-ca.pem", "./other-ca.pem"])
    }

    @Test("no client certificate: the handshake succeeds and the machine hears certificate nil")
    func noCertificate() throws {
        let pki = try ClientPKI()
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let proxy = try ClientListenerProxy(pki: pki)
        let (status, body) = try curl(proxy.proxyArguments(nil) + ["\(origin.url)/anonymous"])
        #expect(status == 0)
        #expect(body.contains("target=/anonymous"))
        let seen = proxy.facts.all
        #expect(seen.count == 1)
        #expect(seen.first.map { $0.certificate == nil } == true)
    }

    @Test(
        "a certificate from a CA the listener does not trust, or one for servers only, fails the handshake (fail closed); nothing reaches the origin or the machine"
    )
    func rogueCertificateRefused() throws {
        let pki = try ClientPKI()
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let proxy = try ClientListenerProxy(pki: pki)
        let (status, _) = try curl(proxy.proxyArguments(pki.client("rogue")) + ["\(origin.url)/rogue"])
        #expect(status != 0)
        #expect(origin.requests.isEmpty)
        #expect(proxy.facts.all.isEmpty)
        #expect(proxy.failures(.clientCertificateRejected) == 1)
        // The right CA, but a certificate for TLS servers only (extendedKeyUsage serverAuth).
        let (serverOnly, _) = try curl(proxy.proxyArguments(pki.client("server-only")) + ["\(origin.url)/server-only"])
        #expect(serverOnly != 0)
        #expect(proxy.failures(.clientCertificateRejected) == 2)
        #expect(origin.requests.isEmpty)
        // And with no client CA at all (the hook empty): any certificate is refused, none is fine.
        let bare = try ClientListenerProxy(pki: pki, caFiles: [])
        let (refused, _) = try curl(bare.proxyArguments(pki.client("tool")) + ["\(origin.url)/tool"])
        #expect(refused != 0)
        #expect(bare.failures(.clientCertificateRejected) == 1)
        let (anonymous, _) = try curl(bare.proxyArguments(nil) + ["\(origin.url)/anonymous"])
        #expect(anonymous == 0)
        #expect(origin.requests.map(\.target) == ["/anonymous"])
        #expect(proxy.openConnectionsSettle() == 0)
        #expect(bare.openConnectionsSettle() == 0)
    }

    @Test("CONNECT inside the TLS proxy connection: an intercepted https origin (TLS inside TLS) gets the token injected; a spliced tunnel works too")
    func connectInsideTLS() throws {
        let pki = try ClientPKI()
        let originPKI = try TestPKI()
        let httpsOrigin = try HTTPSOrigin(certificate: originPKI.certificate("valid"))
        defer { httpsOrigin.stop() }
        let plainOrigin = try FixtureOrigin()
        defer { plainOrigin.stop() }
        let token = "CANARY-client-listener-\(UInt32.random(in: 0...UInt32.max))"
        let proxy = try ClientListenerProxy(
            pki: pki, originCA: originPKI.caPath,
            yaml: """
                secrets: { token: { env: TOKEN } }
                scopes: [{ name: api, origins: ["https://localhost:\(httpsOrigin.port)"], inject: { Authorization: "Bearer ${token}" } }]
                """, secrets: ["token": token], tunnel: .allow)
        // Intercepted: curl verifies the origin's minted certificate with the same local CA.
        for round in 0..<2 {
            let (status, body) = try curl(
                proxy.proxyArguments(pki.client("tool"))
                    + ["--cacert", proxy.caPath, "-H", "X-API-Key: client-key", "https://localhost:\(httpsOrigin.port)/v1/items/\(round)"])
            #expect(status == 0)
            #expect(body.contains("\"Authorization\": \"Bearer \(token)\""))
            #expect(!body.contains("client-key"))
        }
        // Two requests on one connection inside the intercepted tunnel, then a close inside it.
        let (both, bodies) = try curl(
            proxy.proxyArguments(pki.client("tool"))
                + [
                    "--cacert", proxy.caPath, "https://localhost:\(httpsOrigin.port)/a", "-H", "Connection: close",
                    "https://localhost:\(httpsOrigin.port)/big/1",
                ])
        #expect(both == 0)
        #expect(bodies.contains("\"path\": \"/a\""))
        #expect(bodies.utf8.count > 4 * 1024 * 1024, "the whole 4 MiB body arrived before the close")
        // Spliced (not intercepted): CONNECT to an http origin, plain HTTP inside the tunnel.
        let (tunnelled, body) = try curl(proxy.proxyArguments(pki.client("tool")) + ["--proxytunnel", "\(plainOrigin.url)/tunnelled"])
        #expect(tunnelled == 0)
        #expect(body.contains("target=/tunnelled"))
        #expect(httpsOrigin.received.count == 4)
        #expect(proxy.facts.all.allSatisfy { $0.certificate?.commonNames == ["tool"] })
        #expect(proxy.openConnectionsSettle() == 0)
    }

    @Test(
        "plain HTTP, garbage, a hang-up and a stall mid-handshake on the TLS port: each closed with its reason, nothing held; the listener keeps serving"
    )
    func hostileHandshakes() throws {
        let pki = try ClientPKI()
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let proxy = try ClientListenerProxy(pki: pki, clientHeaderMilliseconds: 400)
        // 1. Plain HTTP to the TLS port.
        let plain = try TestSocket.connect(port: proxy.clientPort)
        try plain.send("GET \(origin.url)/plain HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        let answer = plain.receiveUntilClose()
        #expect(!String(decoding: answer, as: UTF8.self).contains("HTTP/1.1 200"))
        // 2. Garbage.
        let garbage = try TestSocket.connect(port: proxy.clientPort)
        try garbage.send((0..<512).map { _ in UInt8.random(in: 0...255) })
        _ = garbage.receiveUntilClose()
        // 3. The start of a ClientHello record, then a hang-up (and one with a reset).
        for reset in [false, true] {
            let quitter = try TestSocket.connect(port: proxy.clientPort)
            try quitter.send([0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
            if reset { quitter.reset() } else { quitter.close() }
        }
        // 4. The same start, then nothing: closed after timeouts.client_header.
        let staller = try TestSocket.connect(port: proxy.clientPort)
        try staller.send([0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        #expect(staller.peerClosed())
        // 5. Connect and say nothing.
        let silent = try TestSocket.connect(port: proxy.clientPort)
        #expect(silent.peerClosed())
        #expect(proxy.failures(.notTLS) >= 1)
        #expect(proxy.failures(.handshakeTimeout) == 2)
        #expect(proxy.failures(.closedDuringHandshake) == 2)
        #expect(proxy.facts.all.isEmpty)
        #expect(origin.requests.isEmpty)
        // Still serving.
        let (status, body) = try curl(proxy.proxyArguments(pki.client("tool")) + ["\(origin.url)/after"])
        #expect(status == 0)
        #expect(body.contains("target=/after"))
        #expect(proxy.openConnectionsSettle() == 0)
    }

    @Test("python-requests and Node with an https:// proxy URL and a client certificate: an http origin and an intercepted https origin")
    func pythonRequestsAndNode() throws {
        let pki = try ClientPKI()
        let originPKI = try TestPKI()
        let httpsOrigin = try HTTPSOrigin(certificate: originPKI.certificate("valid"))
        defer { httpsOrigin.stop() }
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let token = "CANARY-requests-\(UInt32.random(in: 0...UInt32.max))"
        let proxy = try ClientListenerProxy(
            pki: pki, originCA: originPKI.caPath,
            yaml: """
                secrets: { token: { env: TOKEN } }
                scopes: [{ name: api, origins: ["https://localhost:\(httpsOrigin.port)"], inject: { Authorization: "Bearer ${token}" } }]
                """, secrets: ["token": token])
        // The recipes docs/https.md shows, run as written.
        let recipes = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("docs/recipes")
        func requests(_ url: String, originCA: String? = nil, using interpreter: String = "python3") throws -> String {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            let program = recipes.appendingPathComponent(interpreter == "node" ? "node-proxy-client-cert.js" : "python-proxy-client-cert.py").path
            process.arguments =
                [interpreter, program, url, proxy.proxyURL, proxy.caPath, pki.client("tool").cert, pki.client("tool").key]
                + (originCA.map { [$0] } ?? [])
            process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.lowercased().hasSuffix("_proxy") }
            let output = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            try process.run()
            let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            return printed
        }
        #expect(try requests("\(origin.url)/py-plain") == "200 target=/py-plain id= body=0\n")
        let intercepted = try requests("https://localhost:\(httpsOrigin.port)/py-tls", originCA: proxy.caPath)
        #expect(intercepted.hasPrefix("200 "))
        #expect(intercepted.contains("\"Authorization\": \"Bearer \(token)\""))
        #expect(proxy.facts.all.count == 2)
        // Node: the same two, with its own TLS stack's client certificate.
        #expect(try requests("\(origin.url)/node-plain", using: "node") == "200 target=/node-plain id= body=0\n")
        let viaNode = try requests("https://localhost:\(httpsOrigin.port)/node-tls", originCA: proxy.caPath, using: "node")
        #expect(viaNode.hasPrefix("200 "))
        #expect(viaNode.contains("\"Authorization\": \"Bearer \(token)\""))
        #expect(proxy.facts.all.map { $0.certificate?.commonNames ?? ["none"] } == [["tool"], ["tool"], ["tool"], ["tool"]])
        #expect(proxy.facts.all.allSatisfy { $0.certificate?.verifiedBy == ["tools-ca.pem"] })
    }

    @Test(
        "the binary, clients: a tls_client is recognised by its certificate and gets its scope's token; another CA's certificate, or none, gets nothing of it"
    )
    func tlsClientIdentityThroughTheBinary() throws {
        let pki = try ClientPKI()
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let scratch = ScratchDirectory()
        let config = scratch.write(
            "c.yaml",
            """
            secrets: { tool_token: { env: TLS_CLIENT_TOOL_TOKEN }, guest_key: { env: TLS_CLIENT_GUEST_KEY } }
            clients:
              - { name: tool, tls_client: { ca: \(pki.caPath("tools-ca")), subject: "CN=tool" } }
              - { name: other, tls_client: { ca: \(pki.caPath("other-ca")), subject: "DNS:other.internal" } }
              - { name: guest, auth: { bearer: guest_key } }
            scopes:
              - { name: api, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${tool_token}" }, clients: [tool] }
              - { name: tls, origins: ["https://api.example"] }
            tls: { intercept: scoped, ca_dir: \(scratch.path)/ca, client_listen: "127.0.0.1:0" }
            log: { output: \(scratch.path)/access.log }
            """)
        let proxy = try ProxyProcess(
            arguments: ["--config", config],
            environment: ["TLS_CLIENT_TOOL_TOKEN": "CANARY-tool-token", "TLS_CLIENT_GUEST_KEY": "CANARY-guest-key"])
        defer { proxy.terminate() }
        let banner = try #require(proxy.standardError.components(separatedBy: "\n").first { $0.contains("TLS client listener: https://127.0.0.1:") })
        let url = try #require(banner.split(separator: " ").first { $0.hasPrefix("https://") }.map(String.init))
        let proxyCA = scratch.path + "/ca/scopeproxy-ca.pem"
        func through(_ client: String?, _ path: String, _ extra: [String] = []) throws -> Int32 {
            let certificate = client.map { ["--proxy-cert", pki.client($0).cert, "--proxy-key", pki.client($0).key] } ?? []
            return try curl(["--proxy", url, "--proxy-cacert", proxyCA] + certificate + extra + ["\(origin.url)\(path)"]).status
        }
        #expect(try through("tool", "/tool") == 0)
        #expect(try through("other", "/other") == 0)
        #expect(try through(nil, "/guest", ["--proxy-header", "Proxy-Authorization: Bearer CANARY-guest-key"]) == 0)
        #expect(try through(nil, "/nobody") == 0, "curl succeeds at TLS; the proxy answers 407")
        let received = Dictionary(origin.requests.map { ($0.target, $0.header("authorization")) }, uniquingKeysWith: { first, _ in first })
        #expect(received["/tool"] == .some("Bearer CANARY-tool-token"), "the certificate's client gets its token")
        #expect(received["/other"] == .some(nil), "another CA's client: the scope does not serve it")
        #expect(received["/guest"] == .some(nil), "a Bearer client the scope does not serve")
        #expect(received["/nobody"] == nil, "no certificate, no credentials: 407, nothing forwarded")
        #expect(proxy.terminate() == 0)
        let log = try String(contentsOfFile: scratch.path + "/access.log", encoding: .utf8)
        #expect(log.contains(#""client_id":"tool""#) && log.contains(#""client_id":"other""#))
        #expect(!log.contains("CANARY"), "no secret in the log")
    }

    @Test(
        "the binary, only tls_client clients: a client without certificate is told to present one on the TLS listener, not to send Proxy-Authorization"
    )
    func tlsClientOnlyRefusalSaysCertificate() throws {
        let pki = try ClientPKI()
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let scratch = ScratchDirectory()
        let config = scratch.write(
            "c.yaml",
            """
            clients:
              - { name: tool, tls_client: { ca: \(pki.caPath("tools-ca")), subject: "CN=tool" } }
            scopes:
              - { name: api, origins: ["\(origin.url)"], inject: { X-Tool: "1" }, clients: [tool] }
              - { name: tls, origins: ["https://api.example"] }
            tls: { intercept: scoped, ca_dir: \(scratch.path)/ca, client_listen: "127.0.0.1:0" }
            """)
        let proxy = try ProxyProcess(arguments: ["--config", config])
        defer { proxy.terminate() }
        let socket = try TestSocket.connect(port: proxy.port)
        try socket.send("GET \(origin.url)/x HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        let response = try #require(try HTTPReader(socket).readResponse())
        #expect(response.status == 407)
        #expect(response.bodyText.contains("present a client certificate on the TLS client listener (tls.client_listen"), "\(response.bodyText)")
        #expect(!response.bodyText.contains("Proxy-Authorization"), "\(response.bodyText)")
        #expect(!response.bodyText.contains("tool") && !response.bodyText.contains("CN="), "no client name or subject: \(response.bodyText)")
        #expect(response.header("proxy-authenticate")?.contains("Basic") == true, "the challenge RFC 9110 requires stays")
        #expect(origin.requests.isEmpty)
        #expect(proxy.terminate() == 0)
    }

    @Test(
        "the binary: tls.client_listen in the config, its https:// URL in the banner, a client without certificate served; without a CA run refuses it and check warns"
    )
    func binary() throws {
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let scratch = ScratchDirectory()
        let config = scratch.write(
            "c.yaml",
            """
            scopes: [{ name: api, origins: ["https://api.example"] }]
            tls: { intercept: scoped, ca_dir: \(scratch.path)/ca, client_listen: "127.0.0.1:0" }
            log: { output: \(scratch.path)/access.log }
            """)
        let proxy = try ProxyProcess(arguments: ["--config", config])
        defer { proxy.terminate() }
        let banner = try #require(proxy.standardError.components(separatedBy: "\n").first { $0.contains("TLS client listener: https://127.0.0.1:") })
        let url = try #require(banner.split(separator: " ").first { $0.hasPrefix("https://") }.map(String.init))
        #expect(banner.contains("no CA: clients connect without one"))
        let (status, body) = try curl(["--proxy", url, "--proxy-cacert", scratch.path + "/ca/scopeproxy-ca.pem", "\(origin.url)/via-binary"])
        #expect(status == 0)
        #expect(body.contains("target=/via-binary"))
        #expect(proxy.terminate() == 0)
        let log = try String(contentsOfFile: scratch.path + "/access.log", encoding: .utf8)
        #expect(log.contains("/via-binary"))

        // `scoped` with no https scope: nothing is intercepted, so there is no CA for the listener.
        let noCA = scratch.write(
            "no-ca.yaml",
            """
            scopes: [{ name: api, origins: ["http://api.example"], require_https: false }]
            tls: { intercept: scoped, ca_dir: \(scratch.path)/ca2, client_listen: "127.0.0.1:0" }
            """)
        let run = try ProxyProcess.runToCompletion(["run", "--config", noCA, "--listen", "127.0.0.1:0"])
        #expect(run.status == 1)
        #expect(run.stderr.contains("tls.client_listen needs the local CA"), "\(run.stderr)")
        let check = try ProxyProcess.runToCompletion(["check", "--config", noCA])
        // check: structurally valid (exit 0), and it names what run would refuse.
        #expect(check.stderr.contains("warning: tls.client_listen:") && check.stderr.contains("run would refuse to start"), "\(check.stderr)")
    }

    @Test("max_connections reached: a TLS client waits in the backlog and is served, handshake and certificate included, once a slot frees up")
    func parkedAtTheLimit() throws {
        let pki = try ClientPKI()
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let proxy = try ClientListenerProxy(pki: pki, maxConnections: 1)
        // A plain client takes the only slot (connected, silent).
        let holder = try TestSocket.connect(port: proxy.harness.port)
        usleep(100_000)
        let done = DispatchSemaphore(value: 0)
        let result = ResultBox()
        let arguments = proxy.proxyArguments(pki.client("tool")) + ["\(origin.url)/parked"]
        Thread.detachNewThread {
            result.set(try? curl(arguments))
            done.signal()
        }
        #expect(done.wait(timeout: .now() + 0.5) == .timedOut, "the TLS client waits while the slot is taken")
        #expect(proxy.facts.all.count == 1, "only the plain client's machine started")
        holder.close()
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(result.value?.status == 0)
        #expect(result.value?.body.contains("target=/parked") == true)
        #expect(proxy.facts.all.map { $0.certificate?.commonNames } == [nil, ["tool"]])
        #expect(proxy.metrics.value("scopeproxy_connection_limit_waits_total") >= 1)
    }

    @Test("shutdown with two handshakes under way (one silent, one stalled mid-ClientHello): both closed at once, no connection left counted")
    func drainWithHandshakes() throws {
        let pki = try ClientPKI()
        let proxy = try ClientListenerProxy(pki: pki)
        let silent = try TestSocket.connect(port: proxy.clientPort)
        let half = try TestSocket.connect(port: proxy.clientPort)
        try half.send([0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        usleep(100_000)
        #expect(proxy.metrics.clientConnections.load(ordering: .relaxed) == 2)
        proxy.harness.stop()
        #expect(silent.peerClosed())
        #expect(half.peerClosed())
        #expect(proxy.metrics.clientConnections.load(ordering: .relaxed) == 0)
    }

    @Test("the listener needs the local CA; an unreadable client CA file is a startup error naming it")
    func startupErrors() throws {
        var noCA = EngineConfiguration(listen: ListenAddress(host: "127.0.0.1", port: 0), threads: 1)
        noCA.clientListener = ClientListener(listen: ListenAddress(host: "127.0.0.1", port: 0), caFiles: [])
        noCA.tls = try TLSContexts(authority: nil, upstreamCA: nil)
        let server = ProxyServer(configuration: noCA)
        #expect(throws: EngineError.self) { try server.start() }
        do {
            try server.start()
        } catch {
            #expect(error.description.contains("tls.client_listen needs the local CA"))
        }
        let scratch = ScratchDirectory()
        var missing = noCA
        missing.tls = try TLSContexts(authority: try CertificateAuthority.loadOrCreate(directory: scratch.path + "/ca"), upstreamCA: nil)
        missing.clientListener?.caFiles = [ClientCAFile(name: "tools.pem", path: scratch.path + "/tools.pem")]
        do {
            try ProxyServer(configuration: missing).start()
            Issue.record("started without its client CA file")
        } catch {
            #expect(error.description.contains("client CA tools.pem: cannot read"))
        }
    }
}
