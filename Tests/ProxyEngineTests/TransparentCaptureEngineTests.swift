import Foundation
import Testing

@testable import TestSupport

/// Transparent capture end to end (docs/transparent.md): the real binary in a network namespace of
/// its own (Tests/Fixtures/netns_run.py), an nftables REDIRECT for the client's uid only, origins on
/// private addresses named in a bind-mounted /etc/hosts, and curl run as uid 65534 with no proxy
/// variables at all. The canary is the injected token's value: where it arrives is the test.
@Suite("Transparent capture: redirected clients, in a network namespace")
struct TransparentCaptureEngineTests {
    static let canary = "CANARY-TRANSPARENT-5f1e"
    static let clientUID = 65534
    static let transparentPort = 15001
    static let forwardPort = 18080

    /// What one namespace run needs: the PKI, the config, and where the proxy's CA is copied for the client.
    final class Setup: @unchecked Sendable {
        let scratch = ScratchDirectory()
        let pki: TestPKI
        var proxyCA: String { scratch.path + "/proxy-ca.pem" }
        var accessLog: String { scratch.path + "/access.log" }

        /// `extra`: more top-level config (a `timeouts:` section, say).
        init(tunnel: String, extra: String = "") throws {
            pki = try TestPKI()
            try pki.issueLeaf("scoped", san: "DNS:api.scoped.test")
            try pki.issueLeaf("unscoped", san: "DNS:unscoped.test")
            // The client (uid 65534) reads the CA copies and nothing else here.
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: scratch.path)
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: pki.directory)
            scratch.write(
                "config.yaml",
                """
                listen: "127.0.0.1:\(TransparentCaptureEngineTests.forwardPort)"
                transparent: { listen: "127.0.0.1:\(TransparentCaptureEngineTests.transparentPort)" }
                secrets: { canary: { env: CANARY_TOKEN } }
                # Recognised by the owner of its socket, as on the forward listener; the scope serves it only.
                clients: [{ name: sandboxed, uid: \(TransparentCaptureEngineTests.clientUID) }, { name: anonymous }]
                scopes:
                  - name: scoped
                    origins: ["http://api.scoped.test", "https://api.scoped.test"]
                    require_https: false
                    inject: { Authorization: "Bearer ${canary}" }
                    clients: [sandboxed]
                tls: { intercept: ["api.scoped.test"], tunnel: \(tunnel), ca_dir: \(scratch.path)/ca, upstream_ca: \(pki.caPath) }
                log: { format: json, output: \(scratch.path)/access.log }
                \(extra)
                """)
        }

        /// The namespace: 10.77.0.1 is api.scoped.test, 10.77.0.2 unscoped.test, each with an HTTP and
        /// an HTTPS origin; uid 65534's connections to ports 80, 443 and the forward listener's port
        /// are redirected to the transparent listener (the proxy runs as root: never redirected).
        /// `ownRules`: the commands install the redirect themselves (the docs' recipes); no rule of the test's.
        func spec(_ commands: [[String: Any]], ownRules: Bool = false) -> [String: Any] {
            let ports = "80, 443, \(TransparentCaptureEngineTests.forwardPort)"
            var spec: [String: Any] = [
                "addresses": ["10.77.0.1/32", "10.77.0.2/32", "10.77.0.53/32"],
                "hosts": ["api.scoped.test": "10.77.0.1", "unscoped.test": "10.77.0.2"],
                // A name with both addresses, the other one first: only the DNS server knows it.
                "resolv_conf": "nameserver 10.77.0.53\n",
                "dns": [["listen": "10.77.0.53:53", "answers": ["both.scoped.test": ["10.77.0.2", "10.77.0.1"]]]],
                "nft": """
                table ip nat {
                  chain output {
                    type nat hook output priority -100; policy accept;
                    meta skuid \(TransparentCaptureEngineTests.clientUID) tcp dport { \(ports) } redirect to :\(TransparentCaptureEngineTests.transparentPort)
                  }
                }

                """,
                "origins": [
                    ["name": "scoped80", "listen": "10.77.0.1:80"],
                    ["name": "unscoped80", "listen": "10.77.0.2:80"],
                    [
                        "name": "scoped443", "listen": "10.77.0.1:443",
                        "tls": ["cert": pki.certificate("scoped").cert, "key": pki.certificate("scoped").key],
                    ],
                    [
                        "name": "unscoped443", "listen": "10.77.0.2:443",
                        "tls": ["cert": pki.certificate("unscoped").cert, "key": pki.certificate("unscoped").key],
                    ],
                ],
                "background": [
                    [
                        "name": "proxy", "argv": [ProxyProcess.binaryPath, "run", "--config", scratch.path + "/config.yaml"],
                        "env": ["CANARY_TOKEN": TransparentCaptureEngineTests.canary, "HOME": scratch.path], "ready": "listening on",
                    ]
                ],
                // The proxy made its CA at start; the client gets a readable copy.
                "commands": [["name": "ca", "argv": ["install", "-m", "644", scratch.path + "/ca/scopeproxy-ca.pem", proxyCA]]] + commands,
            ]
            if ownRules { spec["nft"] = nil }
            return spec
        }

        func run(_ commands: [[String: Any]], ownRules: Bool = false) throws -> NetnsRun.Report? {
            switch try NetnsRun.run(spec(commands, ownRules: ownRules), in: scratch.path) {
            case .skipped(let reason):
                print("TransparentCaptureEngineTests skipped: \(reason)")
                return nil
            case .ran(let report):
                #expect(report.error == nil, "\(report.error ?? "")\n\(report.background["proxy"] ?? "")")
                return report
            }
        }

        /// The access log's lines, as JSON objects.
        func logLines() -> [[String: Any]] {
            let text = (try? String(contentsOfFile: accessLog, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        }
    }

    /// curl as the redirected user, with no proxy variable (the fixture's environment is PATH only).
    static func curl(_ name: String, _ arguments: [String]) -> [String: Any] {
        ["name": name, "argv": ["curl", "-sS", "-m", "20"] + arguments, "uid": clientUID, "timeout": 30]
    }

    static func carriesCanary(_ request: NetnsRun.Request) -> Bool {
        request.headers.values.contains { $0.contains(canary) }
    }

    @Test(
        "the scope's token reaches a redirected connection only where the name resolves to the original destination: plain HTTP, TLS intercepted with the proxy's CA, a Host pointed at another address, a listener of the proxy as the destination"
    )
    func redirectedClients() throws {
        let setup = try Setup(tunnel: "deny")
        guard
            let report = try setup.run([
                Self.curl("plain", ["http://api.scoped.test/plain"]),
                // Two requests on one client connection: each upstream connection is the proxy's own
                // to the pinned address, never pooled (docs/transparent.md).
                Self.curl("keep-alive", ["http://api.scoped.test/first", "http://api.scoped.test/second"]),
                // The client connects to 10.77.0.2 but names the scoped host: the name does not resolve there.
                Self.curl("decoy", ["--resolve", "api.scoped.test:80:10.77.0.2", "http://api.scoped.test/decoy"]),
                Self.curl(
                    "decoy-tls", ["--resolve", "api.scoped.test:443:10.77.0.2", "--cacert", setup.pki.caPath, "https://api.scoped.test/decoy-tls"]),
                Self.curl("intercepted", ["--cacert", setup.proxyCA, "https://api.scoped.test/intercepted"]),
                Self.curl("tunnel-denied", ["--cacert", setup.pki.caPath, "https://unscoped.test/denied"]),
                Self.curl("loop", ["http://127.0.0.1:\(Self.forwardPort)/loop"]),
                Self.curl("not-redirected", ["http://127.0.0.1:\(Self.transparentPort)/direct"]),
                // The name resolves to both addresses: the connection still goes where the client was going.
                Self.curl("pinned", ["--resolve", "both.scoped.test:80:10.77.0.1", "http://both.scoped.test/pinned"]),
                // Root is not redirected: straight to the origin, nothing injected.
                ["name": "root", "argv": ["curl", "-sS", "-m", "20", "http://api.scoped.test/root"]],
            ])
        else { return }
        let scoped80 = report.origins["scoped80"] ?? [], scoped443 = report.origins["scoped443"] ?? []
        let unscoped80 = report.origins["unscoped80"] ?? [], unscoped443 = report.origins["unscoped443"] ?? []

        // Plain HTTP to the scoped host: the token arrives, at the scoped address.
        #expect(report.command("plain")?.rc == 0)
        let first = try #require(scoped80.first { $0.path == "/first" }), second = try #require(scoped80.first { $0.path == "/second" })
        #expect(first.peer != second.peer, "a pinned upstream connection was reused: \(first.peer)")
        #expect(scoped80.first { $0.path == "/plain" }.map(Self.carriesCanary) == true)
        // TLS to the scoped host: intercepted (the client trusts only the proxy's CA), the token arrives.
        #expect(report.command("intercepted")?.rc == 0, "\(report.command("intercepted")?.stderr ?? "")")
        #expect(scoped443.first { $0.path == "/intercepted" }.map(Self.carriesCanary) == true)
        // The decoy reached the address it was redirected for, as the address, without the token.
        #expect(report.command("decoy")?.rc == 0)
        let decoy = try #require(unscoped80.first { $0.path == "/decoy" })
        #expect(decoy.header("host") == "10.77.0.2")
        // The TLS decoy is the address literal: not intercepted, and tunnels are denied.
        #expect(report.command("decoy-tls")?.rc != 0)
        #expect(!unscoped443.contains { $0.path == "/decoy-tls" } && !scoped443.contains { $0.path == "/decoy-tls" })
        // Pinned: the proxy connected to the original destination, not to the name's first address.
        #expect(report.command("pinned")?.rc == 0)
        #expect(scoped80.contains { $0.path == "/pinned" } && !unscoped80.contains { $0.path == "/pinned" })
        // TLS to an unscoped host with tunnels denied: closed, nothing reached the origin.
        #expect(report.command("tunnel-denied")?.rc != 0)
        #expect(unscoped443.isEmpty)
        // A destination that is the proxy's own listener, or no redirect at all: 403 loop_refused.
        #expect(report.command("loop")?.stdout.contains("\"error\":\"loop_refused\"") == true)
        #expect(report.command("not-redirected")?.stdout.contains("\"error\":\"loop_refused\"") == true)
        // The root client went straight to the origin: the rule redirects only uid 65534.
        #expect(scoped80.first { $0.path == "/root" }.map(Self.carriesCanary) == false)
        // The token went to the scoped address twice (plain, intercepted) and nowhere else.
        let carrying = report.allRequests.filter(Self.carriesCanary).map(\.path).sorted()
        #expect(carrying == ["/first", "/intercepted", "/plain", "/second"])

        // The log: each line names the original destination; the TLS lines are CONNECT lines.
        let lines = setup.logLines()
        func line(_ url: String) -> [String: Any]? { lines.first { ($0["url"] as? String) == url } }
        #expect(line("http://api.scoped.test:80/plain")?["original_dst"] as? String == "10.77.0.1:80")
        #expect(line("http://api.scoped.test:80/plain")?["client_id"] as? String == "sandboxed", "recognised by uid")

        #expect(line("http://10.77.0.2:80/decoy")?["injected"] as? [String] == [])
        let intercept = try #require(lines.first { $0["method"] as? String == "CONNECT" && $0["decision"] as? String == "intercept" })
        #expect(intercept["url"] as? String == "https://api.scoped.test:443" && intercept["original_dst"] as? String == "10.77.0.1:443")
        #expect(intercept["client_id"] as? String == "sandboxed")
        let denied = try #require(
            lines.first { $0["original_dst"] as? String == "10.77.0.2:443" && $0["url"] as? String == "https://unscoped.test:443" })
        #expect(denied["decision"] as? String == "deny" && denied["error"] as? String == "tunnel_denied")
        #expect(line("http://127.0.0.1:\(Self.forwardPort)/loop")?["error"] as? String == "loop_refused")
        // The proxy's own upstream connections were never redirected back to it: no loop refusal for
        // the requests it forwarded.
        #expect(lines.filter { $0["error"] as? String == "loop_refused" }.count == 2)
        #expect(!(report.background["proxy"] ?? "").contains(Self.canary), "the canary in the proxy's output")
    }

    @Test("TLS, tunnels allowed: spliced to the original destination, SNI or none; no ClientHello, or none in time: closed, with a line")
    func tunnelAllowed() throws {
        // A client that sends nothing is closed once client_header has passed (short here).
        let setup = try Setup(tunnel: "allow", extra: "timeouts: { client_header: 300ms }\n")
        guard
            let report = try setup.run([
                Self.curl("tunnel", ["--cacert", setup.pki.caPath, "https://unscoped.test/tunnelled"]),
                // An address in the URL: curl sends no SNI, the origin is the address literal (the
                // origin's certificate names only unscoped.test, hence --insecure).
                Self.curl("no-sni", ["--insecure", "https://10.77.0.2/by-address"]),
                // A record that says handshake but holds no ClientHello: closed, with a line saying why.
                [
                    "name": "not-a-hello", "uid": Self.clientUID,
                    "argv": [
                        "python3", "-c",
                        "import socket\ns = socket.create_connection(('10.77.0.2', 443))\ns.sendall(b'\\x16\\x03\\x01\\x00\\x05hello')\n"
                            + "try:\n    print(len(s.recv(100)))\nexcept ConnectionResetError:\n    print(0)",
                    ],
                ],
                [
                    "name": "silent", "uid": Self.clientUID,
                    "argv": [
                        "python3", "-c",
                        "import socket\ns = socket.create_connection(('10.77.0.2', 443))\ntry:\n    print(len(s.recv(100)))\n"
                            + "except ConnectionResetError:\n    print(0)",
                    ],
                ],
            ])
        else { return }
        #expect(report.command("silent")?.stdout == "0\n", "closed without a byte")
        #expect((report.background["proxy"] ?? "").contains("no ClientHello or request head within timeouts.client_header"))
        #expect(report.command("tunnel")?.rc == 0, "\(report.command("tunnel")?.stderr ?? "")")
        let tunnelled = try #require(report.origins["unscoped443"]?.first { $0.path == "/tunnelled" })
        #expect(!Self.carriesCanary(tunnelled))
        let lines = setup.logLines()
        let line = try #require(lines.first { $0["method"] as? String == "CONNECT" && $0["url"] as? String == "https://unscoped.test:443" })
        #expect(line["decision"] as? String == "tunnel" && line["original_dst"] as? String == "10.77.0.2:443")
        #expect((line["bytes_in"] as? Int ?? 0) > 0 && (line["bytes_out"] as? Int ?? 0) > 0)
        #expect(report.command("no-sni")?.rc == 0)
        #expect(report.origins["unscoped443"]?.contains { $0.path == "/by-address" } == true)
        #expect(lines.contains { $0["url"] as? String == "https://10.77.0.2:443" && $0["decision"] as? String == "tunnel" })
        #expect(report.command("not-a-hello")?.stdout == "0\n", "closed without a byte: \(report.command("not-a-hello")?.stderr ?? "")")
        let closed = (report.background["proxy"] ?? "").split(separator: "\n").first { $0.contains("\"event\":\"transparent_closed\"") }
        #expect(closed?.contains("\"original_dst\":\"10.77.0.2:443\"") == true)
        #expect(closed?.contains("unreadable ClientHello: the first handshake message is not a ClientHello") == true, "\(closed ?? "no line")")
    }

    /// A ClientHello re-framed into 50-byte records and sent a byte per send (the proxy waits for
    /// each record whole rather than reading the hello again on every byte): read, and spliced.
    static let dribblingClient = #"""
        import socket, ssl, sys
        ca, name = sys.argv[1], sys.argv[2]
        context = ssl.create_default_context(cafile=ca)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = context.wrap_bio(incoming, outgoing, server_hostname=name)
        try:
            tls.do_handshake()
        except ssl.SSLWantReadError:
            pass
        hello = outgoing.read()
        payload = hello[5:5 + (hello[3] << 8 | hello[4])]
        # The same handshake message in records of 50 bytes, then sent one byte per send.
        framed = b''.join(b'\x16\x03\x01' + len(payload[i:i + 50]).to_bytes(2, 'big') + payload[i:i + 50] for i in range(0, len(payload), 50))
        s = socket.create_connection(('10.77.0.2', 443))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(framed)):
            s.sendall(framed[i:i + 1])
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                s.sendall(outgoing.read())
                data = s.recv(65536)
                if not data:
                    sys.exit('closed during the handshake')
                incoming.write(data)
        s.sendall(outgoing.read())
        tls.write(b'GET /dribbled HTTP/1.1\r\nHost: ' + name.encode() + b'\r\nConnection: close\r\n\r\n')
        s.sendall(outgoing.read())
        answer = b''
        while b'\r\n' not in answer:
            try:
                answer += tls.read(65536)
            except ssl.SSLWantReadError:
                data = s.recv(65536)
                if not data:
                    break
                incoming.write(data)
        print(answer.split(b'\r\n')[0].decode())
        """#

    @Test("TLS: a ClientHello in many small records, sent a byte at a time, is read whole and tunnelled to the original destination")
    func dribbledHello() throws {
        let setup = try Setup(tunnel: "allow")
        guard
            let report = try setup.run([
                [
                    "name": "dribbled", "uid": Self.clientUID, "timeout": 60,
                    "argv": ["python3", "-c", Self.dribblingClient, setup.pki.caPath, "unscoped.test"],
                ]
            ])
        else { return }
        let command = report.command("dribbled")
        #expect(command?.stdout == "HTTP/1.1 200 OK\n", "\(command?.stdout ?? "") \(command?.stderr ?? "")")
        #expect(report.origins["unscoped443"]?.contains { $0.path == "/dribbled" } == true)
        let lines = setup.logLines()
        #expect(lines.contains { $0["url"] as? String == "https://unscoped.test:443" && $0["decision"] as? String == "tunnel" }, "\(lines)")
    }

    /// The shell blocks of docs/transparent.md marked `<!-- recipe: NAME -->`.
    static func recipes() throws -> [String: String] {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("docs/transparent.md"), encoding: .utf8)
        var found: [String: String] = [:]
        for part in text.components(separatedBy: "<!-- recipe: ").dropFirst() {
            let name = String(part.prefix { $0 != " " })
            guard let start = part.range(of: "```sh\n"), let end = part.range(of: "\n```", range: start.upperBound..<part.endIndex) else { continue }
            found[name] = String(part[start.upperBound..<end.lowerBound])
        }
        return found
    }

    @Test(
        "the nftables and iptables recipes of docs/transparent.md, run as written (the proxy's uid 0 here), capture the client until removed",
        arguments: ["nftables", "iptables"])
    func documentedRecipe(_ name: String) throws {
        let recipe = try #require(try Self.recipes()[name], "docs/transparent.md has no recipe '\(name)'")
        // The one line that names the proxy's user: this namespace's proxy runs as root.
        let lookup = "PROXY_UID=$(id -u scopeproxy)\n"
        #expect(recipe.hasPrefix(lookup))
        let script = "PROXY_UID=0\n" + recipe.dropFirst(lookup.count)
        let removal = try #require(try Self.recipes()[name + "-remove"], "docs/transparent.md has no recipe '\(name)-remove'")
        let removeScript = removal.hasPrefix(lookup) ? "PROXY_UID=0\n" + removal.dropFirst(lookup.count) : removal
        let setup = try Setup(tunnel: "deny")
        guard
            let report = try setup.run(
                [
                    ["name": "rule", "argv": ["sh", "-e", "-c", script]], Self.curl("plain", ["http://api.scoped.test/recipe"]),
                    ["name": "remove", "argv": ["sh", "-e", "-c", removeScript]], Self.curl("after", ["http://api.scoped.test/removed"]),
                ], ownRules: true)
        else { return }
        // Removed: the client reaches the origin itself, and nothing is injected.
        #expect(report.command("remove")?.rc == 0, "\(report.command("remove")?.stderr ?? "")")
        #expect(report.origins["scoped80"]?.first { $0.path == "/removed" }.map(Self.carriesCanary) == false)
        #expect(report.command("rule")?.rc == 0, "\(report.command("rule")?.stderr ?? "")")
        #expect(report.command("plain")?.rc == 0)
        #expect(report.origins["scoped80"]?.first { $0.path == "/recipe" }.map(Self.carriesCanary) == true, "the request went through the proxy")
        #expect(setup.logLines().contains { $0["original_dst"] as? String == "10.77.0.1:80" })
    }

    @Test("IPv6: a redirected connection's original destination is read the IPv6 way; the name rule and the pin hold there too")
    func ipv6() throws {
        let scratch = ScratchDirectory()
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: scratch.path)
        let config = scratch.write(
            "config.yaml",
            """
            listen: "127.0.0.1:\(Self.forwardPort)"
            transparent: { listen: "[::1]:\(Self.transparentPort)" }
            secrets: { canary: { env: CANARY_TOKEN } }
            scopes:
              - { name: scoped, origins: ["http://api.scoped.test"], require_https: false, inject: { Authorization: "Bearer ${canary}" } }
            log: { format: json, output: \(scratch.path)/access.log }

            """)
        let spec: [String: Any] = [
            "addresses": ["fd00::1/128", "fd00::2/128"],
            "hosts": ["api.scoped.test": "fd00::1"],
            "nft": """
            table ip6 nat {
              chain output {
                type nat hook output priority -100; policy accept;
                meta skuid \(Self.clientUID) tcp dport 80 redirect to :\(Self.transparentPort)
              }
            }

            """,
            "origins": [["name": "scoped", "listen": "[fd00::1]:80"], ["name": "other", "listen": "[fd00::2]:80"]],
            "background": [
                [
                    "name": "proxy", "argv": [ProxyProcess.binaryPath, "run", "--config", config],
                    "env": ["CANARY_TOKEN": Self.canary, "HOME": scratch.path], "ready": "listening on",
                ]
            ],
            "commands": [
                Self.curl("named", ["http://api.scoped.test/named"]),
                Self.curl("decoy", ["--resolve", "api.scoped.test:80:[fd00::2]", "http://api.scoped.test/decoy"]),
            ],
        ]
        guard case .ran(let report) = try NetnsRun.run(spec, in: scratch.path) else { return print("ipv6 skipped: not root or nft missing") }
        #expect(report.error == nil, "\(report.error ?? "")")
        #expect(report.origins["scoped"]?.first { $0.path == "/named" }.map(Self.carriesCanary) == true)
        let decoy = try #require(report.origins["other"]?.first { $0.path == "/decoy" })
        #expect(!Self.carriesCanary(decoy) && decoy.header("host") == "[fd00::2]")
        let log = (try? String(contentsOfFile: scratch.path + "/access.log", encoding: .utf8)) ?? ""
        #expect(log.contains("\"original_dst\":\"[fd00::1]:80\""))
    }
}
