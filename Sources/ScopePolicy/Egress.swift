import HTTP1Codec

/// Where clients may connect at all (docs/egress.md): a decision on the destination's name before
/// anything is resolved, and one on the address actually connected to, after resolution.
public struct EgressPolicy: Sendable, Equatable {
    public enum Default: String, Sendable, Equatable, CaseIterable { case allow, deny }
    public enum Mode: String, Sendable, Equatable, CaseIterable { case enforce, report }

    public var defaultAction: Default
    public var mode: Mode
    public var allow: [EgressRule]
    public var denyIPs: DeniedAddresses
    /// A client's own `egress:` (by client name): replaces `default` and `allow`, and inherits
    /// `mode` and `deny_ips` unless it sets them.
    public var clients: [String: ClientEgress]

    public init(
        defaultAction: Default = .allow, mode: Mode = .enforce, allow: [EgressRule] = [], denyIPs: DeniedAddresses = .standard,
        clients: [String: ClientEgress] = [:]
    ) {
        self.defaultAction = defaultAction
        self.mode = mode
        self.allow = allow
        self.denyIPs = denyIPs
        self.clients = clients
    }

    /// Today's behaviour with no `egress:` key: every destination by name, never a link-local or
    /// metadata address.
    public static let standard = EgressPolicy()

    /// The rules that apply to one client's connections.
    public func effective(for client: String?) -> EffectiveEgress {
        guard let client, let own = clients[client] else {
            return EffectiveEgress(defaultAction: defaultAction, mode: mode, allow: allow, denyIPs: denyIPs, client: client)
        }
        return EffectiveEgress(
            defaultAction: own.defaultAction, mode: own.mode ?? mode, allow: own.allow, denyIPs: own.denyIPs ?? denyIPs, client: client,
            ownRules: true, ownDenyIPs: own.denyIPs != nil)
    }
}

/// A client's `egress:` block.
public struct ClientEgress: Sendable, Equatable {
    public var defaultAction: EgressPolicy.Default
    public var allow: [EgressRule]
    public var mode: EgressPolicy.Mode?
    public var denyIPs: DeniedAddresses?

    public init(
        defaultAction: EgressPolicy.Default, allow: [EgressRule] = [], mode: EgressPolicy.Mode? = nil, denyIPs: DeniedAddresses? = nil
    ) {
        self.defaultAction = defaultAction
        self.allow = allow
        self.mode = mode
        self.denyIPs = denyIPs
    }
}

extension Origin {
    /// `HOST:PORT`, the destination as the egress answer and the log line name it.
    public var hostAndPort: String { "\(host):\(port)" }
}

/// What the rules say about one destination, before or after resolution.
public enum EgressVerdict: Sendable, Equatable {
    case allowed
    /// Denied by `rule` (`default deny`, `deny_ips: private`, `deny_ips: 10.0.0.0/8`).
    case denied(rule: String)
    /// `mode: report`: the rule would deny it; it goes through and the log says so.
    case reported(rule: String)

    public var isDenied: Bool { if case .denied = self { true } else { false } }
}

/// The rules one client's connections follow (`EgressPolicy.effective(for:)`). A class: every hop
/// carries its client's rules to the connect, and a reference is one retain per copy where the
/// fields would be one each (`EgressRuleBook` makes one per client and configuration).
public final class EffectiveEgress: Sendable, Equatable {
    public let defaultAction: EgressPolicy.Default
    public let mode: EgressPolicy.Mode
    public let allow: [EgressRule]
    public let denyIPs: DeniedAddresses
    public let client: String?
    /// The client's own `egress:` sets `default`/`allow` (`ownRules`) and `deny_ips`: where a hint
    /// says to change them.
    public let ownRules: Bool
    public let ownDenyIPs: Bool

    public init(
        defaultAction: EgressPolicy.Default, mode: EgressPolicy.Mode, allow: [EgressRule], denyIPs: DeniedAddresses, client: String?,
        ownRules: Bool = false, ownDenyIPs: Bool = false
    ) {
        self.defaultAction = defaultAction
        self.mode = mode
        self.allow = allow
        self.denyIPs = denyIPs
        self.client = client
        self.ownRules = ownRules
        self.ownDenyIPs = ownDenyIPs
    }

    /// The rule `default: deny` names in a refusal.
    public static let defaultDenyRule = "default deny"

    /// The name-level decision, before any lookup. `scopeOrigins`: the destination is an origin of
    /// a scope that serves this client (a deny default still reaches those).
    public func decide(_ destination: Origin, scopeOrigin: Bool) -> EgressVerdict {
        guard defaultAction == .deny else { return .allowed }
        if scopeOrigin || allow.contains(where: { $0.matches(destination) }) { return .allowed }
        return verdict(rule: Self.defaultDenyRule)
    }

    /// The first `allow` entry that covers the destination (what `explain` names).
    public func allowEntry(for destination: Origin) -> EgressRule? {
        allow.first { $0.matches(destination) }
    }

    /// The address-level decision, on the address about to be connected to.
    public func decide(address: IPAddress) -> EgressVerdict {
        guard let rule = denyIPs.denial(of: address) else { return .allowed }
        return verdict(rule: rule)
    }

    /// Nothing the address check could refuse: no address needs to be looked at.
    public var checksAddresses: Bool { !denyIPs.isEmpty }

    private func verdict(rule: String) -> EgressVerdict {
        mode == .report ? .reported(rule: rule) : .denied(rule: rule)
    }

    public static func == (lhs: EffectiveEgress, rhs: EffectiveEgress) -> Bool {
        lhs === rhs
            || (lhs.defaultAction == rhs.defaultAction && lhs.mode == rhs.mode && lhs.allow == rhs.allow && lhs.denyIPs == rhs.denyIPs
                && lhs.client == rhs.client && lhs.ownRules == rhs.ownRules && lhs.ownDenyIPs == rhs.ownDenyIPs)
    }
}

/// Each client's rules, made once per configuration (the `ScopeContext` holds one): a hop looks its
/// client's up instead of building them.
public final class EgressRuleBook: Sendable {
    public let policy: EgressPolicy
    private let unnamed: EffectiveEgress
    private let byClient: [String: EffectiveEgress]

    /// `clients`: every configured client's name (each gets its rules here, its own or the global
    /// ones named for it, so that a refusal says which client it was).
    public init(_ policy: EgressPolicy, clients: some Sequence<String>) {
        self.policy = policy
        unnamed = policy.effective(for: nil)
        byClient = clients.reduce(into: [:]) { book, name in book[name] = policy.effective(for: name) }
    }

    public func rules(for client: String?) -> EffectiveEgress {
        guard let client else { return unnamed }
        return byClient[client] ?? policy.effective(for: client)
    }
}

/// One `allow:` entry: `[scheme://]host-glob[:port|*]`.
public struct EgressRule: Sendable, Equatable, CustomStringConvertible {
    public enum HostPattern: Sendable, Equatable {
        case exact(String)
        /// `*.example.com`: one or more labels before `.example.com` (never `example.com` itself).
        case subdomains(of: String)
    }

    public enum Ports: Sendable, Equatable {
        /// No port written: the scheme's default, or 80 and 443 without a scheme.
        case defaults
        case exactly(UInt16)
        /// `:*`
        case any
    }

    public let scheme: Scheme?
    public let host: HostPattern
    public let ports: Ports
    /// As written in the configuration (what a refusal or `explain` names).
    public let text: String

    public var description: String { text }

    public func matches(_ destination: Origin) -> Bool {
        if let scheme, scheme != destination.scheme { return false }
        switch ports {
        case .any: break
        case .exactly(let port): if port != destination.port { return false }
        case .defaults:
            if let scheme {
                if destination.port != scheme.defaultPort { return false }
            } else if destination.port != 80 && destination.port != 443 {
                return false
            }
        }
        switch host {
        case .exact(let name): return destination.host == name
        case .subdomains(let parent):
            // At least one whole label before the parent: `x.example.com`, never `xexample.com`.
            let host = destination.host.utf8
            return host.count > parent.utf8.count + 1 && destination.host.hasSuffix("." + parent)
        }
    }

    public enum ParseError: Error, Equatable, Sendable {
        case invalidScheme
        case invalidHost(String)
        case invalidPort
        /// `*` somewhere other than as the whole leftmost label(s) (`api-*.x.com`, `x.*.com`).
        case misplacedWildcard
    }

    /// Parses one entry as written. Hosts are normalized the way request targets are (lowercase,
    /// IDNA, no trailing dot), so a rule matches what a client's URL becomes.
    public static func parse(_ text: String) -> Result<EgressRule, ParseError> {
        guard text.utf8.count <= 300 else { return .failure(.invalidHost("longer than 300 characters")) }
        var rest = Substring(text)
        var scheme: Scheme?
        if let colon = rest.firstIndex(of: ":"), rest[colon...].hasPrefix("://") {
            guard let parsed = Scheme(rawValue: rest[..<colon].lowercased()) else { return .failure(.invalidScheme) }
            scheme = parsed
            rest = rest[rest.index(colon, offsetBy: 3)...]
        }
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        var ports = Ports.defaults
        // The port follows the last ':' outside an IPv6 literal's brackets.
        if let colon = rest.lastIndex(of: ":"), !rest[colon...].contains("]"), rest.first != "[" || rest[..<colon].hasSuffix("]") {
            let portText = rest[rest.index(after: colon)...]
            rest = rest[..<colon]
            if portText == "*" {
                ports = .any
            } else {
                guard let port = BoundedDecimal.parse(portText.utf8, maximum: 65535), port > 0 else { return .failure(.invalidPort) }
                ports = .exactly(UInt16(port))
            }
        }
        var wildcard = false
        if rest.hasPrefix("*.") {
            wildcard = true
            rest = rest.dropFirst(2)
            // `*.*.x.com` is the same set as `*.x.com` (one or more labels): accepted as written.
            while rest.hasPrefix("*.") { rest = rest.dropFirst(2) }
        }
        guard !rest.contains("*") else { return .failure(.misplacedWildcard) }
        let host: Host
        do {
            host = try Host.parse(rest)
        } catch {
            return .failure(.invalidHost(String(rest)))
        }
        if wildcard {
            guard host.kind == .name else { return .failure(.misplacedWildcard) }
            return .success(EgressRule(scheme: scheme, host: .subdomains(of: host.normalized), ports: ports, text: text))
        }
        return .success(EgressRule(scheme: scheme, host: .exact(host.normalized), ports: ports, text: text))
    }
}

/// `deny_ips:`: named address sets and CIDRs, checked on the address actually connected to.
public struct DeniedAddresses: Sendable, Equatable {
    public enum Named: String, Sendable, Equatable, CaseIterable {
        case linkLocal = "link_local"
        case metadata
        case loopback
        case `private`

        /// The ranges each name stands for (docs/egress.md, "deny_ips").
        public var ranges: [CIDR] {
            let texts: [String]
            switch self {
            case .linkLocal: texts = ["169.254.0.0/16", "fe80::/10"]
            case .metadata: texts = ["169.254.169.254/32", "169.254.170.2/32", "fd00:ec2::254/128", "100.100.100.200/32"]
            // 0.0.0.0/8 and `::` reach this machine when connected to (Linux treats them as local).
            case .loopback: texts = ["127.0.0.0/8", "::1/128", "0.0.0.0/8", "::/128"]
            case .private: texts = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"]
            }
            return texts.map { try! CIDR.parse($0).get() }
        }
    }

    public let named: [Named]
    public let cidrs: [CIDR]
    /// Every range as two masked 64-bit words, most specific first (so `metadata` is named for
    /// 169.254.169.254 when both it and `link_local` are listed): a check is two ANDs and two
    /// compares per range, with no reference counted on the way (it runs for every connect and
    /// every reuse of a pooled connection).
    private let ranges: [MaskedRange]
    private let rules: [String]

    private struct MaskedRange: Sendable {
        let high: UInt64, low: UInt64, maskHigh: UInt64, maskLow: UInt64
        let rule: Int

        func contains(_ words: (high: UInt64, low: UInt64)) -> Bool {
            words.high & maskHigh == high && words.low & maskLow == low
        }
    }

    public init(named: [Named], cidrs: [CIDR] = []) {
        self.named = named
        self.cidrs = cidrs
        let listed = named.flatMap { name in name.ranges.map { ("deny_ips: \(name.rawValue)", $0) } } + cidrs.map { ("deny_ips: \($0.text)", $0) }
        let sorted = listed.enumerated().sorted { ($0.element.1.prefixLength, -$0.offset) > ($1.element.1.prefixLength, -$1.offset) }
        rules = sorted.map(\.element.0)
        ranges = sorted.enumerated().map { index, entry in
            let cidr = entry.element.1
            let length = cidr.prefixLength
            let maskHigh: UInt64 = length >= 64 ? .max : length == 0 ? 0 : ~(UInt64.max >> UInt64(length))
            let maskLow: UInt64 = length <= 64 ? 0 : length >= 128 ? .max : ~(UInt64.max >> UInt64(length - 64))
            let words = cidr.network.words
            return MaskedRange(high: words.high & maskHigh, low: words.low & maskLow, maskHigh: maskHigh, maskLow: maskLow, rule: index)
        }
    }

    /// `[link_local, metadata]`: the default, also with no `egress:` key.
    public static let standard = DeniedAddresses(named: [.linkLocal, .metadata])
    public static let none = DeniedAddresses(named: [])

    public var isEmpty: Bool { ranges.isEmpty }

    /// The rule that denies `address`, checked as written, as the IPv4 address it embeds
    /// (IPv4-mapped is already IPv4 in `IPAddress`; NAT64 and 6to4 are unwrapped here), and as the
    /// address a connect to it reaches (0.0.0.0 and :: are this machine's loopback).
    public func denial(of address: IPAddress) -> String? {
        if let rule = firstRange(holding: address) { return rule }
        if let embedded = address.embeddedIPv4, let rule = firstRange(holding: embedded) { return rule }
        if let reached = address.reachedByConnect, let rule = firstRange(holding: reached) { return rule }
        return nil
    }

    private func firstRange(holding address: IPAddress) -> String? {
        guard !ranges.isEmpty else { return nil }
        let words = address.words
        for range in ranges where range.contains(words) { return rules[range.rule] }
        return nil
    }

    public static func == (lhs: DeniedAddresses, rhs: DeniedAddresses) -> Bool {
        lhs.named == rhs.named && lhs.cidrs == rhs.cidrs
    }

    public var description: String { (named.map(\.rawValue) + cidrs.map(\.text)).joined(separator: ", ") }
}

extension IPAddress {
    /// The 16 bytes as two big-endian words (the masked compare of `DeniedAddresses`).
    var words: (high: UInt64, low: UInt64) {
        bytes.withUnsafeBufferPointer { raw in
            var high: UInt64 = 0, low: UInt64 = 0
            for index in 0..<8 { high = high << 8 | UInt64(raw[index]) }
            for index in 8..<16 { low = low << 8 | UInt64(raw[index]) }
            return (high, low)
        }
    }

    /// The address a connect to this one actually reaches, when that differs: Linux connects to
    /// 0.0.0.0 as 127.0.0.1 and to `::` as `::1` (ip_route_connect, tcp_v6_connect), so a rule on
    /// 127.0.0.1 must deny `http://0.0.0.0:PORT` too.
    public var reachedByConnect: IPAddress? {
        // Read in place: this runs for every address checked, and only these two need an answer.
        if isIPv4 {
            return bytes[12] == 0 && bytes[13] == 0 && bytes[14] == 0 && bytes[15] == 0 ? .ipv4(127, 0, 0, 1) : nil
        }
        return bytes.allSatisfy({ $0 == 0 }) ? IPAddress(bytes: Array(repeating: 0, count: 15) + [1]) : nil
    }

    /// The IPv4 address an IPv6 form carries to the IPv4 network: NAT64 (`64:ff9b::/96`, RFC 6052,
    /// and the local-use `64:ff9b:1::/48`, RFC 8215, read as a /96 with the address in the last 32
    /// bits, the layout NAT64 gateways use) and 6to4
    /// (`2002:AABB:CCDD::/16`, RFC 3056). IPv4-mapped addresses are IPv4 already.
    public var embeddedIPv4: IPAddress? {
        if isIPv4 { return nil }
        if bytes[0] == 0x00, bytes[1] == 0x64, bytes[2] == 0xff, bytes[3] == 0x9b {
            let wellKnown = bytes[4..<12].allSatisfy { $0 == 0 }
            let localUse = bytes[4] == 0 && bytes[5] == 1
            if wellKnown || localUse { return .ipv4(bytes[12], bytes[13], bytes[14], bytes[15]) }
        }
        if bytes[0] == 0x20, bytes[1] == 0x02 { return .ipv4(bytes[2], bytes[3], bytes[4], bytes[5]) }
        return nil
    }
}
