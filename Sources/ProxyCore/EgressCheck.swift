import HTTP1Codec
import ScopePolicy

/// A hop's passage through the egress policy (docs/egress.md): the name was checked when the hop
/// was planned; the rules travel with the hop so that the connect checks each resolved address,
/// and the one it connects to, against the same client's rules.
public struct EgressClearance: Sendable, Equatable {
    // Two words, no more: a hop carries its clearance through every copy of the hop's state (the
    // destination is the hop's origin, read from there when a refusal or a note needs it).
    public let rules: EffectiveEgress
    /// `mode: report`: the name rule that would have denied this destination.
    public let reported: String?

    public init(rules: EffectiveEgress, reported: String? = nil) {
        self.rules = rules
        self.reported = reported
    }

    /// The name-level check for one hop (a request, a CONNECT, a followed redirect, an intercepted
    /// request). A destination that is an origin of a scope serving this client is always
    /// reachable by name (`default: deny` still reaches the scopes).
    public static func clear(_ origin: Origin, client: ClientIdentity, scope: ScopeContext) -> Result<EgressClearance, ProxyError> {
        let rules = scope.egressRules.rules(for: client.name)
        guard rules.defaultAction == .deny else { return .success(EgressClearance(rules: rules)) }
        let scoped = !scope.policy.covering(origin, client: client.name).isEmpty
        switch rules.decide(origin, scopeOrigin: scoped) {
        case .allowed: return .success(EgressClearance(rules: rules))
        case .reported(let rule): return .success(EgressClearance(rules: rules, reported: rule))
        case .denied(let rule): return .failure(.egressDenied(EgressRefusal(destination: origin, rule: rule, rules: rules, address: nil)))
        }
    }

    /// The clearance of a destination the configuration names itself (a route's upstream): no
    /// name or address rule applies.
    public static var configuredUpstream: EgressClearance {
        EgressClearance(rules: unrestricted)
    }

    /// No rule at all: what a configured upstream is reached under (it is never refused, so no
    /// refusal needs the client's name).
    private static let unrestricted = EffectiveEgress(defaultAction: .allow, mode: .enforce, allow: [], denyIPs: .none, client: nil)

    /// The address-level check, on an address about to be connected to (or a pooled connection's
    /// peer about to be reused).
    public func admits(_ address: IPAddress) -> EgressVerdict {
        rules.decide(address: address)
    }

    /// Whether a connection another hop opened to `peer` may carry this hop (a pooled or shared
    /// one): only to an address these rules admit; an unknown address only when no address is
    /// checked at all.
    public func admitsPeer(_ peer: SocketOwnerTable.Endpoint?) -> Bool {
        guard rules.checksAddresses else { return true }
        guard let peer else { return false }
        return !admits(peer.address).isDenied
    }

    /// Whether a connect checking addresses with `other`'s rules checks them exactly as this hop's
    /// would (same client, same rules): a hop waits only for such a connect, whose outcome (an
    /// address refused, named for a client) is then its own.
    public func checksAddressesLike(_ other: EgressClearance) -> Bool { rules == other.rules }

    /// The refusal for a destination every one of whose addresses `rule` denies.
    public func refusal(for origin: Origin, rule: String, address: IPAddress) -> ProxyError {
        .egressDenied(EgressRefusal(destination: origin, rule: rule, rules: rules, address: "\(address)"))
    }
}

/// Why a destination was refused, in the words an agent (or its operator) can act on: the 403's
/// JSON names the destination, the rule, the client and where to change it.
public struct EgressRefusal: Sendable, Equatable {
    public let destination: Origin
    /// `default deny`, `deny_ips: private`, `deny_ips: 10.0.0.0/8`.
    public let rule: String
    public let client: String?
    /// The resolved address a `deny_ips` rule refused; nil for a refusal by name.
    public let address: String?
    public let hint: String

    public init(destination: Origin, rule: String, rules: EffectiveEgress, address: String?) {
        self.destination = destination
        self.rule = rule
        client = rules.client
        self.address = address
        hint = Self.hint(destination: destination, rule: rule, rules: rules, address: address)
    }

    /// Which key to change, and where: the client's own `egress:` when it has one for that key.
    static func hint(destination: Origin, rule: String, rules: EffectiveEgress, address: String?) -> String {
        let owner = rules.client.map { " of client '\($0)'" } ?? ""
        guard let address else {
            let entry =
                destination.port == destination.scheme.defaultPort
                ? "\(destination.scheme.rawValue)://\(destination.host)" : "\(destination.scheme.rawValue)://\(destination.host):\(destination.port)"
            let key = rules.ownRules ? "egress.allow\(owner)" : "egress.allow"
            return "this destination is not allowed: add \"\(entry)\" to \(key) in the proxy's configuration, or ask its operator to"
        }
        let set = rule.hasPrefix("deny_ips: ") ? String(rule.dropFirst("deny_ips: ".count)) : rule
        let key = rules.ownDenyIPs ? "egress.deny_ips\(owner)" : "egress.deny_ips"
        // The address a name resolved to stays in the log: a sandboxed client may have no resolver
        // of its own, and the proxy's answer must not become one (docs/security-model.md).
        let literal = destination.host == address || destination.host == "[\(address)]"
        let subject = literal ? "\(address) is an address" : "\(destination.host) resolves to an address"
        return "\(subject) \(key) denies (\(set)): the proxy never connects there; "
            + "remove '\(set)' from \(key) to allow it, or give this destination a route (routes:)"
    }
}

/// Where an upstream connection went, as the engine reports it with the connect.
public struct UpstreamPeer: Sendable, Equatable {
    /// `93.184.216.34:443`, `[2001:db8::1]:443`.
    public let address: String
    /// `mode: report`: the `deny_ips` rule that would have refused this address.
    public let reported: String?

    public init(address: String, reported: String? = nil) {
        self.address = address
        self.reported = reported
    }
}
