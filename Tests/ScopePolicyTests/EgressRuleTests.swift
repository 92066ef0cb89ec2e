import HTTP1Codec
import ScopePolicy
import Testing

// The egress policy's pure rules (docs/egress.md): `allow` entries, `deny_ips` sets, and which
// client's rules apply.

private func destination(_ text: String) -> Origin { try! Origin.parse(text) }
private func rule(_ text: String) -> EgressRule { try! EgressRule.parse(text).get() }
private func ip(_ text: String) -> IPAddress { IPAddress.parse(text)! }

@Suite("Egress: allow entries, deny_ips sets, per-client rules")
struct EgressRuleTests {
    struct MatchRow: Sendable, CustomTestStringConvertible {
        let rule: String
        let destination: String
        let matches: Bool
        var testDescription: String { "\(rule) \(matches ? "covers" : "does not cover") \(destination)" }
    }

    static let matchRows: [MatchRow] = [
        // `*.` = one or more whole labels, never the parent itself, never a suffix of a label.
        MatchRow(rule: "https://*.github.com", destination: "https://api.github.com", matches: true),
        MatchRow(rule: "https://*.github.com", destination: "https://a.b.github.com", matches: true),
        MatchRow(rule: "https://*.github.com", destination: "https://github.com", matches: false),
        MatchRow(rule: "https://*.github.com", destination: "https://evilgithub.com", matches: false),
        MatchRow(rule: "https://*.github.com", destination: "https://github.com.evil.example", matches: false),
        MatchRow(rule: "https://*.github.com", destination: "http://api.github.com", matches: false),
        MatchRow(rule: "https://*.github.com", destination: "https://api.github.com:8443", matches: false),
        // No port: the scheme's default; no scheme and no port: 80 and 443, either scheme.
        MatchRow(rule: "api.openai.com", destination: "https://api.openai.com", matches: true),
        MatchRow(rule: "api.openai.com", destination: "http://api.openai.com", matches: true),
        MatchRow(rule: "api.openai.com", destination: "https://api.openai.com:8443", matches: false),
        MatchRow(rule: "api.openai.com:443", destination: "https://api.openai.com", matches: true),
        MatchRow(rule: "api.openai.com:443", destination: "http://api.openai.com:443", matches: true),
        MatchRow(rule: "api.openai.com:443", destination: "http://api.openai.com", matches: false),
        MatchRow(rule: "http://localhost:*", destination: "http://localhost:1", matches: true),
        MatchRow(rule: "http://localhost:*", destination: "http://localhost:65535", matches: true),
        MatchRow(rule: "http://localhost:*", destination: "https://localhost:443", matches: false),
        // Written as a client's URL is read: case, trailing dot, IDNA.
        MatchRow(rule: "HTTPS://API.Example.COM.", destination: "https://api.example.com", matches: true),
        MatchRow(rule: "https://bücher.example", destination: "https://xn--bcher-kva.example", matches: true),
        MatchRow(rule: "https://*.bücher.example", destination: "https://shop.xn--bcher-kva.example", matches: true),
        // Addresses as literals, exactly.
        MatchRow(rule: "http://10.0.0.5:8080", destination: "http://10.0.0.5:8080", matches: true),
        MatchRow(rule: "http://10.0.0.5:8080", destination: "http://10.0.0.50:8080", matches: false),
        MatchRow(rule: "https://[2001:db8::1]", destination: "https://[2001:db8::1]", matches: true),
        MatchRow(rule: "[::1]:8080", destination: "http://[::1]:8080", matches: true),
        // An https:// rule covers a CONNECT to that host:port (a CONNECT's destination is https).
        MatchRow(rule: "https://tunnel.example:2222", destination: "https://tunnel.example:2222", matches: true),
    ]

    @Test("allow entries", arguments: matchRows)
    func matches(_ row: MatchRow) {
        #expect(rule(row.rule).matches(destination(row.destination)) == row.matches)
    }

    @Test(
        "entries that cannot mean what they say are refused, with why",
        arguments: [
            ("api-*.x.com", EgressRule.ParseError.misplacedWildcard),
            ("x.*.com", .misplacedWildcard),
            ("*", .misplacedWildcard),
            ("*.10.0.0.1", .misplacedWildcard),
            ("ftp://x.example", .invalidScheme),
            ("x.example:0", .invalidPort),
            ("x.example:65536", .invalidPort),
            ("x.example:99999999999999999999999", .invalidPort),
            ("x.example:", .invalidPort),
            ("x.example/path", .invalidHost("x.example/path")),
            ("", .invalidHost("")),
        ])
    func refused(_ text: String, _ error: EgressRule.ParseError) {
        #expect(throws: error) { try EgressRule.parse(text).get() }
    }

    @Test("`*.*.x.com` is the same set as `*.x.com` (one or more labels)")
    func repeatedWildcard() {
        for host in ["https://a.x.com", "https://a.b.x.com", "https://x.com"] {
            #expect(rule("https://*.*.x.com").matches(destination(host)) == rule("https://*.x.com").matches(destination(host)))
        }
    }

    struct AddressRow: Sendable, CustomTestStringConvertible {
        let address: String
        let sets: [DeniedAddresses.Named]
        let rule: String?
        var testDescription: String { "\(address) under \(sets.map(\.rawValue)): \(rule ?? "allowed")" }
    }

    static let addressRows: [AddressRow] = [
        AddressRow(address: "169.254.169.254", sets: [.linkLocal, .metadata], rule: "deny_ips: metadata"),
        AddressRow(address: "169.254.170.2", sets: [.metadata], rule: "deny_ips: metadata"),
        AddressRow(address: "100.100.100.200", sets: [.metadata], rule: "deny_ips: metadata"),
        AddressRow(address: "fd00:ec2::254", sets: [.metadata], rule: "deny_ips: metadata"),
        AddressRow(address: "169.254.1.1", sets: [.linkLocal, .metadata], rule: "deny_ips: link_local"),
        AddressRow(address: "fe80::1", sets: [.linkLocal], rule: "deny_ips: link_local"),
        // The embedded IPv4 forms count as the IPv4 address inside.
        AddressRow(address: "::ffff:169.254.169.254", sets: [.metadata], rule: "deny_ips: metadata"),
        AddressRow(address: "64:ff9b::a9fe:a9fe", sets: [.metadata], rule: "deny_ips: metadata"),
        AddressRow(address: "64:ff9b:1::a9fe:a9fe", sets: [.metadata], rule: "deny_ips: metadata"),
        AddressRow(address: "2002:a9fe:a9fe::1", sets: [.metadata], rule: "deny_ips: metadata"),
        AddressRow(address: "64:ff9b::a00:1", sets: [.private], rule: "deny_ips: private"),
        AddressRow(address: "2002:7f00:1::", sets: [.loopback], rule: "deny_ips: loopback"),
        // Loopback includes what connects to this machine.
        AddressRow(address: "127.0.0.1", sets: [.loopback], rule: "deny_ips: loopback"),
        AddressRow(address: "127.255.0.9", sets: [.loopback], rule: "deny_ips: loopback"),
        AddressRow(address: "::1", sets: [.loopback], rule: "deny_ips: loopback"),
        AddressRow(address: "0.0.0.0", sets: [.loopback], rule: "deny_ips: loopback"),
        AddressRow(address: "::", sets: [.loopback], rule: "deny_ips: loopback"),
        AddressRow(address: "10.1.2.3", sets: [.private], rule: "deny_ips: private"),
        AddressRow(address: "172.16.0.1", sets: [.private], rule: "deny_ips: private"),
        AddressRow(address: "172.31.255.255", sets: [.private], rule: "deny_ips: private"),
        AddressRow(address: "172.32.0.1", sets: [.private], rule: nil),
        AddressRow(address: "192.168.1.1", sets: [.private], rule: "deny_ips: private"),
        AddressRow(address: "100.64.0.1", sets: [.private], rule: "deny_ips: private"),
        AddressRow(address: "fd12::1", sets: [.private], rule: "deny_ips: private"),
        AddressRow(address: "93.184.216.34", sets: DeniedAddresses.Named.allCases, rule: nil),
        AddressRow(address: "2606:2800:220:1::", sets: DeniedAddresses.Named.allCases, rule: nil),
        // Only what is listed.
        AddressRow(address: "10.1.2.3", sets: [.linkLocal, .metadata], rule: nil),
        AddressRow(address: "169.254.169.254", sets: [], rule: nil),
    ]

    @Test("deny_ips named sets", arguments: addressRows)
    func namedSets(_ row: AddressRow) {
        #expect(DeniedAddresses(named: row.sets).denial(of: ip(row.address)) == row.rule)
    }

    @Test("deny_ips CIDRs name themselves; the most specific listed range is the one named")
    func cidrs() {
        let denied = DeniedAddresses(named: [.private], cidrs: [try! CIDR.parse("10.9.0.0/16").get(), try! CIDR.parse("2001:db8::/32").get()])
        #expect(denied.denial(of: ip("10.9.1.1")) == "deny_ips: 10.9.0.0/16")
        #expect(denied.denial(of: ip("10.8.1.1")) == "deny_ips: private")
        #expect(denied.denial(of: ip("2001:db8::5")) == "deny_ips: 2001:db8::/32")
        #expect(denied.denial(of: ip("64:ff9b::a09:101")) == "deny_ips: 10.9.0.0/16", "NAT64 of 10.9.1.1")
    }

    @Test("property: every IPv4 address gets the same verdict as its IPv4-mapped, NAT64 and 6to4 forms (fixed seed)")
    func embeddedFormsAgree() {
        var generator = SplitMix(seed: 0xE6_2E55)
        let sets = DeniedAddresses(named: DeniedAddresses.Named.allCases, cidrs: [try! CIDR.parse("203.0.113.0/24").get()])
        // Addresses near every range's edges, plus random ones.
        var samples: [[UInt8]] = [
            [169, 254, 169, 254], [169, 254, 0, 0], [169, 253, 255, 255], [10, 0, 0, 0], [9, 255, 255, 255], [11, 0, 0, 0],
            [172, 15, 255, 255], [172, 16, 0, 0], [100, 63, 255, 255], [100, 64, 0, 0], [100, 127, 255, 255], [100, 128, 0, 0],
            [127, 0, 0, 1], [0, 0, 0, 0], [0, 255, 255, 255], [1, 0, 0, 0], [203, 0, 113, 77], [203, 0, 114, 0],
        ]
        for _ in 0..<2000 { samples.append((0..<4).map { _ in UInt8(truncatingIfNeeded: generator.next()) }) }
        for v4 in samples {
            let plain = IPAddress(raw: v4)!
            let forms = [
                IPAddress(raw: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF] + v4)!,
                IPAddress(raw: [0, 0x64, 0xFF, 0x9B, 0, 0, 0, 0, 0, 0, 0, 0] + v4)!,
                IPAddress(raw: [0, 0x64, 0xFF, 0x9B, 0, 1, 0, 0, 0, 0, 0, 0] + v4)!,
                IPAddress(raw: [0x20, 0x02] + v4 + [0, 0, 0, 0, 0, 0, 0, 0, 0, 1])!,
            ]
            let expected = sets.denial(of: plain)
            for form in forms { #expect(sets.denial(of: form) == expected, "\(form) vs \(plain)") }
        }
    }

    @Test("a client's egress replaces default and allow, and inherits mode and deny_ips unless it sets them")
    func inheritance() {
        let global = EgressPolicy(
            defaultAction: .allow, mode: .report, allow: [rule("https://global.example")], denyIPs: DeniedAddresses(named: [.private]),
            clients: [
                "agent": ClientEgress(defaultAction: .deny, allow: [rule("https://agent.example")]),
                "strict": ClientEgress(defaultAction: .deny, mode: .enforce, denyIPs: DeniedAddresses(named: [.loopback])),
            ])
        let agent = global.effective(for: "agent")
        #expect(agent.defaultAction == .deny && agent.allow == [rule("https://agent.example")])
        #expect(agent.mode == .report && agent.denyIPs == DeniedAddresses(named: [.private]), "inherited")
        #expect(agent.ownRules && !agent.ownDenyIPs)
        let strict = global.effective(for: "strict")
        #expect(strict.mode == .enforce && strict.denyIPs == DeniedAddresses(named: [.loopback]) && strict.allow.isEmpty)
        let other = global.effective(for: "other")
        #expect(other.defaultAction == .allow && other.allow == [rule("https://global.example")] && !other.ownRules)
        #expect(global.effective(for: nil) == other.withClient(nil))
    }

    @Test("the name check: default allow admits all; deny admits scope origins and allow entries; report says what it would deny")
    func nameCheck() {
        let deny = EgressPolicy(defaultAction: .deny, allow: [rule("https://ok.example")]).effective(for: nil)
        #expect(deny.decide(destination("https://ok.example"), scopeOrigin: false) == .allowed)
        #expect(deny.decide(destination("https://scoped.example"), scopeOrigin: true) == .allowed)
        #expect(deny.decide(destination("https://other.example"), scopeOrigin: false) == .denied(rule: "default deny"))
        let report = EgressPolicy(defaultAction: .deny, mode: .report).effective(for: nil)
        #expect(report.decide(destination("https://other.example"), scopeOrigin: false) == .reported(rule: "default deny"))
        #expect(report.decide(address: ip("169.254.169.254")) == .reported(rule: "deny_ips: metadata"))
        let allow = EgressPolicy.standard.effective(for: nil)
        #expect(allow.decide(destination("https://anything.example"), scopeOrigin: false) == .allowed)
        #expect(allow.decide(address: ip("169.254.169.254")) == .denied(rule: "deny_ips: metadata"), "the default deny_ips")
        #expect(allow.decide(address: ip("10.0.0.1")) == .allowed)
    }
}

extension EffectiveEgress {
    fileprivate func withClient(_ name: String?) -> EffectiveEgress {
        EffectiveEgress(defaultAction: defaultAction, mode: mode, allow: allow, denyIPs: denyIPs, client: name)
    }
}

/// A fixed-seed generator (SplitMix64): the same addresses in every run.
private struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
