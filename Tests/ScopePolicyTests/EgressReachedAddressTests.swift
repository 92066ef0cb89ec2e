import ScopePolicy
import Testing

/// `deny_ips` judges the address a connect reaches, not only the one it names (docs/egress.md):
/// Linux connects to 0.0.0.0 as 127.0.0.1 and to `::` as `::1`, and IPv4-mapped, NAT64 and 6to4
/// forms carry an IPv4 address. Whatever the rules, an address is denied whenever what it reaches is.
@Suite("Egress deny_ips: an address is denied whenever the address it reaches is")
struct EgressReachedAddressTests {
    /// Rule sets that deny some loopback address and not another (so the check cannot pass by
    /// denying everything), and ones that deny none.
    static let ruleSets: [DeniedAddresses] =
        [
            DeniedAddresses(named: [.loopback]), .standard, .none, DeniedAddresses(named: [.private, .linkLocal, .metadata]),
        ]
        + ["127.0.0.1/32", "127.0.0.0/8", "::1/128", "127.0.0.0/31", "0.0.0.0/32", "::/128"].map {
            DeniedAddresses(named: [], cidrs: [try! CIDR.parse($0).get()])
        }

    /// Each spelling and the address a connect to it reaches.
    static let reaches: [(spelled: String, reached: String)] = [
        ("0.0.0.0", "127.0.0.1"), ("::ffff:0.0.0.0", "127.0.0.1"), ("::", "::1"),
        ("::ffff:127.0.0.1", "127.0.0.1"), ("64:ff9b::7f00:1", "127.0.0.1"), ("2002:7f00:1::", "127.0.0.1"),
    ]

    @Test("for every rule set, each spelling is denied when the address it reaches is (and by a rule naming one of them)")
    func deniedWhenReachedAddressIs() throws {
        for rules in Self.ruleSets {
            for (spelled, reached) in Self.reaches {
                let spelledAddress = try #require(IPAddress.parse(spelled)), reachedAddress = try #require(IPAddress.parse(reached))
                if let rule = rules.denial(of: reachedAddress) {
                    #expect(rules.denial(of: spelledAddress) != nil, "\(spelled) passes \(rules.description) though \(reached) is denied (\(rule))")
                }
            }
        }
    }

    @Test("control: a rule on 127.0.0.1 does not deny other addresses that reach elsewhere (0.0.0.1, ::2, 127.0.0.2)")
    func onlyTheReachedAddress() throws {
        let rules = DeniedAddresses(named: [], cidrs: [try CIDR.parse("127.0.0.1/32").get()])
        for other in ["0.0.0.1", "::2", "127.0.0.2", "::1"] {
            #expect(rules.denial(of: try #require(IPAddress.parse(other))) == nil, "\(other)")
        }
        #expect(rules.denial(of: try #require(IPAddress.parse("0.0.0.0"))) == "deny_ips: 127.0.0.1/32", "named by the rule that denies it")
    }
}
