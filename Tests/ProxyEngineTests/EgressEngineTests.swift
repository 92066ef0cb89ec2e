import Foundation
import TestSupport
import Testing

// The egress policy through the built binary (docs/egress.md): for every rule, a denied
// destination's listener never accepts a connection and an allowed one answers. Canary listeners
// count accepts, so "never received a byte" is checked at the socket, not inferred from a status.

@Suite("Egress: denied destinations never see a connection, allowed ones answer", .serialized)
struct EgressEngineTests {
    @Test("default deny with an allow glob: *.x.test reaches its listener; x.test itself and an unlisted name get 403 and no connection")
    func defaultDenyAllowGlob() throws {
        if let reason = Egress.namespaceUnavailable {
            print("skipped: \(reason)")
            return
        }
        let allowed = try Egress.canary("127.0.0.2"), denied = try Egress.canary("127.0.0.3")
        defer { [allowed, denied].forEach { $0.stop() } }
        let scratch = ScratchDirectory()
        let launcher = Egress.launcher(scratch, hosts: [("api.x.test", "127.0.0.2"), ("x.test", "127.0.0.3"), ("other.test", "127.0.0.3")])
        let proxy = try Egress.proxy(launcher: launcher) { _ in #"egress: { default: deny, allow: ["http://*.x.test:*"] }"# }
        defer { proxy.process.terminate() }

        let reached = try Egress.get(proxy.port, "http://api.x.test:\(allowed.port)/ok")
        #expect(reached?.status == 200 && reached?.bodyText == "reached 127.0.0.2 /ok")
        for name in ["x.test", "other.test"] {
            let refused = try Egress.get(proxy.port, "http://\(name):\(denied.port)/no")
            #expect(refused?.status == 403, "\(name)")
            let answer = Egress.json(refused)
            #expect(answer["error"] as? String == "egress_denied")
            #expect(answer["destination"] as? String == "\(name):\(denied.port)")
            #expect(answer["rule"] as? String == "default deny")
            #expect(answer["client"] is NSNull, "no client configured: null, not absent")
            #expect((answer["hint"] as? String)?.contains("\"http://\(name):\(denied.port)\"") == true, "the hint names the entry to add")
        }
        #expect(denied.acceptedConnections == 0)

        let lines = Egress.lines(proxy, 3)
        try #require(lines.count == 3)
        let allowedLine = lines[0]
        #expect(allowedLine["upstream"] as? String == "127.0.0.2:\(allowed.port)", "an allowed line names the address connected to")
        #expect(allowedLine["egress"] == nil, "nothing to say about an allowed destination")
        let note = try #require(lines[1]["egress"] as? [String: Any])
        #expect(note["decision"] as? String == "deny" && note["rule"] as? String == "default deny")
        #expect(note["destination"] as? String == "x.test:\(denied.port)")
        #expect(note["address"] == nil, "a refusal by name resolved nothing")
        #expect(lines[1]["upstream"] == nil && lines[1]["error"] as? String == "egress_denied")
    }

    @Test("default deny still reaches the origin of a scope (with its credential), and nothing else")
    func scopeOriginReachableUnderDeny() throws {
        let scoped = try Egress.canary("127.0.0.2"), other = try Egress.canary("127.0.0.3")
        defer { [scoped, other].forEach { $0.stop() } }
        let token = Wire.canary("token")
        let proxy = try Egress.proxy(environment: ["TOKEN": token]) { _ in
            """
            secrets: { token: { env: TOKEN } }
            scopes: [{ name: api, origins: ["\(scoped.url)"], inject: { Authorization: "Bearer ${token}" } }]
            egress: { default: deny }
            """
        }
        defer { proxy.process.terminate() }
        #expect(try Egress.get(proxy.port, "\(scoped.url)/v1")?.status == 200)
        #expect(scoped.requests.first?.header("authorization") == "Bearer \(token)")
        #expect(try Egress.get(proxy.port, "\(other.url)/v1")?.status == 403)
        #expect(other.acceptedConnections == 0)
    }

    @Test("a client's egress replaces default and allow: the same destination is denied to one client and reached by another")
    func perClientEgress() throws {
        let origin = try Egress.canary("127.0.0.2")
        defer { origin.stop() }
        let jailedKey = Wire.canary("jailed"), freeKey = Wire.canary("free")
        let proxy = try Egress.proxy(environment: ["JAILED": jailedKey, "FREE": freeKey]) { _ in
            """
            secrets: { jailed: { env: JAILED }, free: { env: FREE } }
            clients:
              - { name: jailed, auth: { bearer: jailed }, egress: { default: deny, allow: ["http://127.0.0.9:*"] } }
              - { name: free, auth: { bearer: free } }
            egress: { default: deny, allow: ["http://127.0.0.2:*"] }
            """
        }
        defer { proxy.process.terminate() }
        let refused = try Egress.get(proxy.port, "\(origin.url)/j", [("Proxy-Authorization", "Bearer \(jailedKey)")])
        #expect(refused?.status == 403)
        let answer = Egress.json(refused)
        #expect(answer["client"] as? String == "jailed")
        #expect((answer["hint"] as? String)?.contains("egress.allow of client 'jailed'") == true, "the hint points at the client's own list")
        #expect(!refused!.text.contains(jailedKey), "the refusal never echoes the credential")
        #expect(origin.acceptedConnections == 0, "the denied client's request opened nothing")

        #expect(try Egress.get(proxy.port, "\(origin.url)/f", [("Proxy-Authorization", "Bearer \(freeKey)")])?.status == 200)
        #expect(origin.requests.map(\.target) == ["/f"])
        let log = (try? String(contentsOfFile: proxy.logPath, encoding: .utf8)) ?? ""
        #expect(!log.contains(jailedKey) && !log.contains(freeKey), "client keys never reach the log")
    }

    @Test("mode: report lets a would-be denial through and logs decision report_deny with its rule")
    func reportModeLetsThroughAndSays() throws {
        let origin = try Egress.canary("127.0.0.3")
        defer { origin.stop() }
        let proxy = try Egress.proxy { _ in "egress: { default: deny, mode: report, deny_ips: [127.0.0.3/32] }" }
        defer { proxy.process.terminate() }
        #expect(try Egress.get(proxy.port, "\(origin.url)/r")?.status == 200)
        #expect(origin.requests.map(\.target) == ["/r"])
        let line = try #require(Egress.lines(proxy, 1).first)
        let note = try #require(line["egress"] as? [String: Any])
        #expect(note["decision"] as? String == "report_deny")
        #expect(note["rule"] as? String == "default deny", "the first rule that would have denied it: the name")
        #expect(line["upstream"] as? String == "127.0.0.3:\(origin.port)")
        #expect(line["status"] as? Int == 200)
    }

    @Test("deny_ips with a CIDR refuses the address (403 naming the rule), never connecting; the next address up is reached")
    func denyIPsCIDR() throws {
        let denied = try Egress.canary("127.0.0.3"), allowed = try Egress.canary("127.0.0.4")
        defer { [denied, allowed].forEach { $0.stop() } }
        let proxy = try Egress.proxy { _ in "egress: { deny_ips: [127.0.0.3/32] }" }
        defer { proxy.process.terminate() }
        let refused = try Egress.get(proxy.port, "\(denied.url)/x")
        #expect(refused?.status == 403)
        let answer = Egress.json(refused)
        #expect(answer["rule"] as? String == "deny_ips: 127.0.0.3/32")
        #expect(answer["destination"] as? String == denied.authority)
        #expect(denied.acceptedConnections == 0)
        #expect(try Egress.get(proxy.port, "\(allowed.url)/y")?.status == 200)
        let note = try #require(Egress.lines(proxy, 2).first?["egress"] as? [String: Any])
        #expect(note["decision"] as? String == "deny" && note["rule"] as? String == "deny_ips: 127.0.0.3/32")
        #expect(note["address"] as? String == "127.0.0.3:\(denied.port)" || note["address"] as? String == "127.0.0.3", "\(note)")
    }

    @Test("deny_ips: [loopback] refuses 127.0.0.1 by literal and localhost by name, with no connection")
    func loopbackNamedSet() throws {
        let origin = try Egress.canary("127.0.0.1")
        defer { origin.stop() }
        let proxy = try Egress.proxy { _ in "egress: { deny_ips: [loopback] }" }
        defer { proxy.process.terminate() }
        for url in ["http://127.0.0.1:\(origin.port)/a", "http://localhost:\(origin.port)/b"] {
            let refused = try Egress.get(proxy.port, url)
            #expect(refused?.status == 403, "\(url)")
            #expect(Egress.json(refused)["rule"] as? String == "deny_ips: loopback", "\(url)")
        }
        #expect(origin.acceptedConnections == 0)
    }

    @Test("CONNECT is checked too: denied by name (default deny) and by address (deny_ips), allowed ones spliced")
    func connectByNameAndAddress() throws {
        let allowed = try Egress.canary("127.0.0.2"), byName = try Egress.canary("127.0.0.3"), byAddress = try Egress.canary("127.0.0.4")
        defer { [allowed, byName, byAddress].forEach { $0.stop() } }
        let proxy = try Egress.proxy { _ in
            """
            tls: { tunnel: allow }
            egress: { default: deny, allow: ["127.0.0.2:\(allowed.port)", "127.0.0.4:\(byAddress.port)"], deny_ips: [127.0.0.4/32] }
            """
        }
        defer { proxy.process.terminate() }
        func connect(_ origin: FixtureOrigin) throws -> LenientResponse? {
            try Egress.send(proxy.port, "CONNECT \(origin.authority) HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        }
        let name = try connect(byName)
        #expect(name?.status == 403 && Egress.json(name)["rule"] as? String == "default deny")
        let address = try connect(byAddress)
        #expect(address?.status == 403 && Egress.json(address)["rule"] as? String == "deny_ips: 127.0.0.4/32")
        #expect(byName.acceptedConnections == 0 && byAddress.acceptedConnections == 0)

        let socket = try TestSocket.connect(port: proxy.port)
        defer { socket.close() }
        try socket.send("CONNECT \(allowed.authority) HTTP/1.1\r\nHost: \(allowed.authority)\r\n\r\n")
        let reader = HTTPReader(socket)
        #expect(LenientResponse.read(reader)?.status == 200)
        try socket.send("GET /in-tunnel HTTP/1.1\r\nHost: \(allowed.authority)\r\n\r\n")
        #expect(LenientResponse.read(reader)?.bodyText == "reached 127.0.0.2 /in-tunnel")
    }

    @Test("a followed redirect to a denied destination is refused at that hop: the client gets 403, the target no connection")
    func followedRedirectToDeniedDestination() throws {
        let target = try Egress.canary("127.0.0.3")
        defer { target.stop() }
        let start = try Wire.scripted(host: "127.0.0.2") { _ in
            Array("HTTP/1.1 302 Found\r\nLocation: http://127.0.0.3:\(target.port)/landing\r\nContent-Length: 0\r\n\r\n".utf8)
        }
        defer { start.stop() }
        let proxy = try Egress.proxy { _ in
            """
            redirects: { cross_origin: follow }
            egress: { default: deny, allow: ["http://127.0.0.2:*"] }
            """
        }
        defer { proxy.process.terminate() }
        let response = try Egress.get(proxy.port, "\(start.url)/go")
        #expect(response?.status == 403)
        #expect(Egress.json(response)["destination"] as? String == target.authority, "the refusal names the hop's destination")
        #expect(start.requests.count == 1)
        #expect(target.acceptedConnections == 0)
    }

    @Test("HTTP/2 (h2c prior knowledge): a stream to a denied destination is 403 while its sibling stream is served")
    func h2cStreamDeniedSiblingServed() throws {
        let allowed = try Egress.canary("127.0.0.2"), denied = try Egress.canary("127.0.0.3")
        defer { [allowed, denied].forEach { $0.stop() } }
        let proxy = try Egress.proxy { _ in #"egress: { default: deny, allow: ["http://127.0.0.2:*"] }"# }
        defer { proxy.process.terminate() }
        let answer = try Wire.h2Client([
            "proxy_port": Int(proxy.port),
            "streams": [
                ["method": "GET", "scheme": "http", "authority": denied.authority, "path": "/denied"],
                ["method": "GET", "scheme": "http", "authority": allowed.authority, "path": "/served"],
            ],
        ])
        let streams = Wire.streams(answer)
        try #require(streams.count == 2)
        #expect(streams[0]["status"] as? Int == 403)
        #expect((streams[0]["body"] as? String)?.contains("\"error\":\"egress_denied\"") == true)
        #expect(streams[1]["status"] as? Int == 200 && streams[1]["body"] as? String == "reached 127.0.0.2 /served")
        #expect(denied.acceptedConnections == 0)
    }

    @Test("reload to default deny: an open CONNECT tunnel keeps working, a new request is denied")
    func reloadKeepsOpenTunnelDeniesNewRequests() throws {
        let origin = try Egress.canary("127.0.0.2")
        defer { origin.stop() }
        let proxy = try Egress.proxy { _ in "tls: { tunnel: allow }\n" }
        defer { proxy.process.terminate() }
        let socket = try TestSocket.connect(port: proxy.port)
        defer { socket.close() }
        try socket.send("CONNECT \(origin.authority) HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        let reader = HTTPReader(socket)
        #expect(LenientResponse.read(reader)?.status == 200)
        try socket.send("GET /before HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        #expect(LenientResponse.read(reader)?.bodyText == "reached 127.0.0.2 /before")

        #expect(Egress.reload(proxy, "tls: { tunnel: allow }\negress: { default: deny }\n", reloads: 1))
        try socket.send("GET /after HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        #expect(LenientResponse.read(reader)?.bodyText == "reached 127.0.0.2 /after", "the open tunnel survives the reload")
        #expect(try Egress.get(proxy.port, "\(origin.url)/new")?.status == 403)
        let tunnel = try Egress.send(proxy.port, "CONNECT \(origin.authority) HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        #expect(tunnel?.status == 403, "a new tunnel follows the new policy")
        #expect(origin.requests.map(\.target) == ["/before", "/after"])
        #expect(origin.acceptedConnections == 1)
    }

    @Test("reload to default deny: the next request on an open keep-alive client connection follows the new policy")
    func reloadAppliesToNextRequestOnOpenConnection() throws {
        let origin = try Egress.canary("127.0.0.2")
        defer { origin.stop() }
        let proxy = try Egress.proxy { _ in "" }
        defer { proxy.process.terminate() }
        let socket = try TestSocket.connect(port: proxy.port)
        defer { socket.close() }
        let reader = HTTPReader(socket)
        try socket.send(Wire.request("\(origin.url)/before", host: origin.authority))
        #expect(LenientResponse.read(reader)?.status == 200)
        #expect(Egress.reload(proxy, "egress: { default: deny }\n", reloads: 1))
        try socket.send(Wire.request("\(origin.url)/after", host: origin.authority))
        let refused = LenientResponse.read(reader)
        #expect(refused?.status == 403 && refused?.bodyText.contains("egress_denied") == true)
        #expect(origin.requests.map(\.target) == ["/before"], "the pooled upstream connection carried nothing after the reload")
    }

    @Test("a WebSocket upgrade to a denied destination is 403 and opens nothing")
    func webSocketUpgradeDenied() throws {
        let denied = try Egress.canary("127.0.0.3")
        defer { denied.stop() }
        let proxy = try Egress.proxy { _ in "egress: { default: deny }" }
        defer { proxy.process.terminate() }
        let upgrade = Wire.request(
            "\(denied.url)/ws", host: denied.authority,
            [("Connection", "Upgrade"), ("Upgrade", "websocket"), ("Sec-WebSocket-Version", "13"), ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")])
        let response = try Egress.send(proxy.port, upgrade)
        #expect(response?.status == 403 && Egress.json(response)["error"] as? String == "egress_denied")
        #expect(denied.acceptedConnections == 0)
    }

    @Test("a request inside an intercepted tunnel is checked as a hop: deny_ips refuses it with 403 inside TLS, and the origin gets nothing")
    func interceptedRequestChecked() throws {
        let pki = try TestPKI()
        let origin = try HTTPSOrigin(certificate: pki.certificate("valid"))
        defer { origin.stop() }
        let proxy = try Egress.proxy { log in
            let directory = (log as NSString).deletingLastPathComponent
            return """
                scopes: [{ name: api, origins: ["https://localhost:\(origin.port)"], pass: [Authorization] }]
                tls: { intercept: scoped, tunnel: deny, ca_dir: \(directory)/ca, upstream_ca: \(pki.caPath) }
                egress: { default: deny, deny_ips: [loopback] }
                """
        }
        defer { proxy.process.terminate() }
        let caPath = proxy.scratch.path + "/ca/scopeproxy-ca.pem"
        let (status, body) = try curl([
            "--cacert", caPath, "-x", "http://127.0.0.1:\(proxy.port)", "-w", "\\n%{http_code}", "https://localhost:\(origin.port)/inside",
        ])
        #expect(status == 0, "the CONNECT was admitted by name (a scope origin) and intercepted: \(body)")
        #expect(body.hasSuffix("\n403"), "\(body)")
        #expect(body.contains("\"error\":\"egress_denied\"") && body.contains("\"rule\":\"deny_ips: loopback\""), "\(body)")
        #expect(origin.received.isEmpty)
    }

    @Test("reload adding deny_ips: the next request inside an already intercepted tunnel is checked against the new rules")
    func reloadAppliesInsideOpenInterceptedTunnel() throws {
        let pki = try TestPKI()
        let origin = try HTTPSOrigin(certificate: pki.certificate("valid"))
        defer { origin.stop() }
        var directory = ""
        func yaml(_ egress: String) -> String {
            """
            scopes: [{ name: api, origins: ["https://localhost:\(origin.port)"], pass: [Authorization] }]
            tls: { intercept: scoped, tunnel: deny, ca_dir: \(directory)/ca, upstream_ca: \(pki.caPath) }
            \(egress)
            """
        }
        let proxy = try Egress.proxy { log in
            directory = (log as NSString).deletingLastPathComponent
            return yaml("")
        }
        defer { proxy.process.terminate() }
        // One TLS connection through one CONNECT: a request, a pause while the test reloads (it
        // writes `go`), a second request; the statuses are printed.
        let go = proxy.scratch.path + "/go"
        let client = """
            import socket, ssl, sys, os, time
            proxy, port, ca, go = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
            raw = socket.create_connection(("127.0.0.1", proxy), timeout=10)
            raw.sendall(f"CONNECT localhost:{port} HTTP/1.1\\r\\nHost: localhost:{port}\\r\\n\\r\\n".encode())
            head = b""
            while b"\\r\\n\\r\\n" not in head: head += raw.recv(1)
            tls = ssl.create_default_context(cafile=ca).wrap_socket(raw, server_hostname="localhost")
            reader = tls.makefile("rb")
            def get(path):
                tls.sendall(f"GET {path} HTTP/1.1\\r\\nHost: localhost:{port}\\r\\n\\r\\n".encode())
                status = int(reader.readline().split()[1]); length = 0
                while (line := reader.readline()) not in (b"\\r\\n", b""):
                    if line.lower().startswith(b"content-length:"): length = int(line.split(b":")[1])
                reader.read(length)
                return status
            first = get("/before")
            print("ready", flush=True)
            for _ in range(200):
                if os.path.exists(go): break
                time.sleep(0.05)
            print(first, get("/after"), flush=True)
            """
        let script = proxy.scratch.write("client.py", client)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script, "\(proxy.port)", "\(origin.port)", directory + "/ca/scopeproxy-ca.pem", go]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let handle = output.fileHandleForReading
        var text = ""
        while !text.contains("ready"), case let chunk = handle.availableData, !chunk.isEmpty { text += String(decoding: chunk, as: UTF8.self) }
        #expect(Egress.reload(proxy, yaml("egress: { deny_ips: [loopback] }"), reloads: 1))
        _ = proxy.scratch.write("go", "")
        text += String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(text.contains("200 403"), "the first request reached the origin, the one after the reload was refused: \(text)")
        #expect(origin.received.count == 1)
    }

    @Test("make demo-egress: the agent reaches its listed origin and gets an actionable 403 JSON for an unlisted one; exit 0")
    func demoScript() throws {
        let scratch = ScratchDirectory()
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let script = root.appendingPathComponent("config/demo/egress.sh").path
        let (status, output) = try runProgram([
            "/bin/bash", "-c", "SCOPEPROXY_BINARY=\"$0\" DEMO_DIR=\"$1\" exec \"$2\" 2>&1", ProxyProcess.binaryPath, scratch.path + "/demo", script,
        ])
        #expect(status == 0, "\(output.suffix(1500))")
        #expect(output.contains("HTTP 200 {\"origin\": \"docs\""), "the allowed answer is shown")
        #expect(output.contains("HTTP 403 {\"error\":\"egress_denied\""), "the refusal is shown")
        #expect(output.contains("demo-egress: every step showed what it claims."))
    }
}
