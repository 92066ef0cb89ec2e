import ScopePolicy
import Testing

@testable import ScopeConfig

// `egress:` and `clients[].egress` (docs/egress.md): what the loader builds, and every mistake
// refused at its position with the fix.

private func load(_ text: String) throws -> ProxyConfiguration {
    try ConfigLoader.parse(text, file: "c.yaml", home: "/home/tester")
}

private func error(_ text: String) -> String? {
    do {
        _ = try ConfigLoader.parse(text, file: "c.yaml", home: "/home/tester")
        return nil
    } catch {
        return error.description
    }
}

@Suite("Config: egress")
struct EgressConfigTests {
    @Test("no egress key: allow by name, deny link_local and metadata addresses (the standard policy)")
    func standard() throws {
        #expect(try load("").egress == .standard)
        #expect(EgressPolicy.standard.denyIPs == DeniedAddresses(named: [.linkLocal, .metadata]))
    }

    @Test("the whole schema, global and per client")
    func schema() throws {
        let config = try load(
            """
            secrets: { agent_key: { env: AGENT_KEY } }
            egress:
              default: deny
              mode: report
              allow: ["https://*.github.com", "api.openai.com:443", "http://localhost:*"]
              deny_ips: [link_local, metadata, private, 198.51.100.0/24]
            clients:
              - name: agent
                auth: { bearer: agent_key }
                egress: { default: deny, allow: ["https://api.github.com"], deny_ips: [loopback] }
              - name: anonymous
            """)
        let egress = config.egress
        #expect(egress.defaultAction == .deny && egress.mode == .report)
        #expect(egress.allow.map(\.text) == ["https://*.github.com", "api.openai.com:443", "http://localhost:*"])
        #expect(egress.denyIPs.named == [.linkLocal, .metadata, .private] && egress.denyIPs.cidrs.map(\.text) == ["198.51.100.0/24"])
        #expect(egress.clients["agent"]?.allow.map(\.text) == ["https://api.github.com"])
        #expect(egress.clients["agent"]?.denyIPs == DeniedAddresses(named: [.loopback]))
        #expect(egress.clients["agent"]?.mode == nil, "inherited")
        #expect(egress.clients["anonymous"] == nil)
    }

    @Test("deny_ips: [] turns the address check off, said in so many words")
    func emptyDenyIPs() throws {
        #expect(try load("egress: { deny_ips: [] }").egress.denyIPs.isEmpty)
    }

    @Test(
        "mistakes are refused at their position with the fix",
        arguments: [
            ("egress: { default: maybe }", "c.yaml:1:20: egress.default must be allow or deny"),
            ("egress: { mode: audit }", "c.yaml:1:17: egress.mode must be enforce or report"),
            ("egress: { default: deny, allow: [\"api-*.x.com\"] }", "'*' may only be whole leftmost labels"),
            ("egress: { default: deny, allow: [\"ftp://x.example\"] }", "the scheme must be http:// or https://"),
            ("egress: { default: deny, allow: [\"x.example:70000\"] }", "the port must be 1-65535 or *"),
            ("egress: { default: deny, allow: [\"https://x.example/path\"] }", "no path"),
            ("egress: { deny_ips: [privat] }", "'privat' is not an address set: use link_local, metadata, loopback, private"),
            ("egress: { deny_ips: [10.0.0.1/8] }", "has bits set after the prefix"),
            ("egress: { alow: [] }", "unknown key 'alow' in egress"),
            (
                "clients:\n  - name: anonymous\n    egress: { allow: [\"https://x.example\"] }\n",
                "c.yaml:3:13: a client's egress replaces the global default and allow: give it 'default: allow' or 'default: deny'"
            ),
            ("clients:\n  - name: anonymous\n    egress: { default: deny, deny: [] }\n", "unknown key 'deny' in egress of client 'anonymous'"),
        ])
    func refused(_ yaml: String, _ expected: String) {
        let message = error(yaml)
        #expect(message?.contains(expected) == true, "\(message ?? "loaded")")
    }

    @Test("allow entries under the default allow change nothing: a warning says so at the list")
    func allowWithoutDeny() throws {
        let config = try load("egress:\n  allow: [\"https://x.example\"]\n")
        #expect(
            config.warnings.map(\.description) == [
                "c.yaml:2:10: egress.allow changes nothing while egress.default is allow (every destination is allowed): add 'default: deny' to reach only scope origins and these entries"
            ])
    }
}
