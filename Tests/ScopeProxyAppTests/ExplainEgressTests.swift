import HTTP1Codec
import ScopeConfig
import ScopeProxyApp
import Testing

// `explain` answers for the egress policy too (docs/egress.md): allowed or denied, by which rule,
// for which client, before anything is sent.

private func config(_ yaml: String) throws -> ProxyConfiguration {
    try ConfigLoader.parse(yaml, file: "explain.yaml", home: "/home/tester")
}

private let sandbox = """
    secrets: { agent_key: { env: PATH }, gh: { env: PATH } }
    egress:
      default: deny
      allow: ["https://*.allowed.example", "http://localhost:*"]
    clients:
      - name: agent
        auth: { bearer: agent_key }
        egress: { default: deny, allow: ["https://api.github.com"], deny_ips: [loopback] }
      - name: anonymous
    scopes:
      - name: library
        origins: ["https://api.library.example"]
        inject: { Authorization: "Bearer ${gh}" }
    tls: { intercept: scoped }
    """

@Suite("explain: the egress policy")
struct ExplainEgressTests {
    @Test("a destination default deny does not list: denied, with the key to add, and the 403 it gets")
    func denied() throws {
        let (text, status) = Explanation.render(
            try config(sandbox), .init(method: "GET", headers: [], url: "https://unlisted.example/x", client: "anonymous"))
        #expect(status == 0)
        #expect(
            text.contains("egress        denied (default deny): this destination is not allowed: add \"https://unlisted.example\" to egress.allow"))
        #expect(text.contains("answer        403 egress_denied:"))
        #expect(!text.contains("upstream "), "nothing is planned past the refusal")
    }

    @Test("allowed by an allow entry (named), by a scope origin, or by the client's own entry")
    func allowed() throws {
        let cfg = try config(sandbox)
        let byEntry = Explanation.render(cfg, .init(method: "GET", headers: [], url: "https://a.b.allowed.example/", client: "anonymous")).text
        #expect(
            byEntry.contains(
                "egress        allowed by egress.allow entry \"https://*.allowed.example\"; addresses checked at connect against deny_ips: link_local, metadata"
            ))
        let byScope = Explanation.render(cfg, .init(method: "GET", headers: [], url: "https://api.library.example/", client: "anonymous")).text
        #expect(byScope.contains("egress        allowed: an origin of scope library (default deny still reaches scopes)"))
        let byClient = Explanation.render(cfg, .init(method: "GET", headers: [], url: "https://api.github.com/", client: "agent")).text
        #expect(
            byClient.contains(
                "egress        allowed by egress.allow of client 'agent' entry \"https://api.github.com\"; addresses checked at connect against deny_ips: loopback"
            ))
    }

    @Test("the client's own rules replace the global ones: the global entry does not help it, and the hint names its key")
    func clientRules() throws {
        let (text, _) = Explanation.render(try config(sandbox), .init(method: "GET", headers: [], url: "https://x.allowed.example/", client: "agent"))
        #expect(
            text.contains(
                "egress        denied (default deny): this destination is not allowed: add \"https://x.allowed.example\" to egress.allow of client 'agent'"
            ))
    }

    @Test("an address literal in a denied set is refused before any lookup; report mode says what it would deny")
    func addresses() throws {
        let metadata = Explanation.render(try config(""), .init(method: "GET", headers: [], url: "http://169.254.169.254/latest/meta-data/")).text
        #expect(metadata.contains("egress        denied (deny_ips: metadata): 169.254.169.254 is an address egress.deny_ips denies (metadata)"))
        #expect(metadata.contains("answer        403 egress_denied"))
        let report = Explanation.render(
            try config("egress: { default: deny, mode: report }"), .init(method: "GET", headers: [], url: "http://169.254.169.254/")
        ).text
        #expect(
            report.contains(
                "would be denied (default deny) but egress.mode is report: it goes through, logged as report_deny; the address would be denied (deny_ips: metadata), logged as report_deny"
            ))
    }
}
