import ScopePolicy

/// `egress:` and each client's `egress:` (docs/egress.md): where clients may connect at all.
extension Decoder {
    func readEgress(_ keys: [String: YAMLNode], into config: inout ProxyConfiguration) throws(ConfigError) {
        if let node = keys["egress"], !node.isNull {
            let fields = try mapping(node, allowed: ["default", "mode", "allow", "deny_ips"], context: "egress")
            var policy = EgressPolicy()
            if let defaultNode = fields["default"] { policy.defaultAction = try choice(defaultNode, key: "egress.default") }
            if let modeNode = fields["mode"] { policy.mode = try choice(modeNode, key: "egress.mode") }
            if let allowNode = fields["allow"] { policy.allow = try allowRules(allowNode) }
            if let denyNode = fields["deny_ips"] { policy.denyIPs = try deniedAddresses(denyNode) }
            if policy.defaultAction == .allow, let allowNode = fields["allow"], !policy.allow.isEmpty {
                config.warnings.append(
                    ConfigWarning(
                        file: file, mark: allowNode.mark,
                        message: "egress.allow changes nothing while egress.default is allow (every destination is allowed): "
                            + "add 'default: deny' to reach only scope origins and these entries"))
            }
            config.egress = policy
        }
        // Clients were read (and checked) before this section; only their `egress:` is read here.
        guard let clientsNode = keys["clients"] else { return }
        for item in try list(clientsNode) {
            let clientKeys = try mapping(item, allowed: Self.clientKeys, context: "a client")
            guard let egressNode = clientKeys["egress"], let nameNode = clientKeys["name"] else { continue }
            let name = try string(nameNode)
            let fields = try mapping(egressNode, allowed: ["default", "mode", "allow", "deny_ips"], context: "egress of client '\(name)'")
            guard let defaultNode = fields["default"] else {
                throw error(
                    egressNode,
                    "a client's egress replaces the global default and allow: give it 'default: allow' or 'default: deny' "
                        + "(mode and deny_ips are inherited unless set)")
            }
            var own = ClientEgress(defaultAction: try choice(defaultNode, key: "egress.default"))
            if let allowNode = fields["allow"] { own.allow = try allowRules(allowNode) }
            if let modeNode = fields["mode"] { own.mode = try choice(modeNode, key: "egress.mode") }
            if let denyNode = fields["deny_ips"] { own.denyIPs = try deniedAddresses(denyNode) }
            config.egress.clients[name] = own
        }
    }

    private func choice<Word: RawRepresentable & CaseIterable>(_ node: YAMLNode, key: String) throws(ConfigError) -> Word
    where Word.RawValue == String {
        let allowed = Word.allCases.map(\.rawValue)
        guard case .scalar(let text, _) = node.value, let value = Word(rawValue: text) else {
            throw error(node, "\(key) must be \(allowed.joined(separator: " or "))")
        }
        return value
    }

    private func allowRules(_ node: YAMLNode) throws(ConfigError) -> [EgressRule] {
        var rules: [EgressRule] = []
        for entry in try list(node) {
            let text = try nonEmptyString(entry)
            switch EgressRule.parse(text) {
            case .success(let rule): rules.append(rule)
            case .failure(.invalidScheme): throw error(entry, "'\(text)': the scheme must be http:// or https:// (or none, for both)")
            case .failure(.invalidPort): throw error(entry, "'\(text)': the port must be 1-65535 or * (any port)")
            case .failure(.misplacedWildcard):
                throw error(
                    entry,
                    "'\(text)': '*' may only be whole leftmost labels of a name, like *.example.com (one or more labels); "
                        + "for any host, use 'default: allow'")
            case .failure(.invalidHost(let host)):
                throw error(entry, "'\(text)': '\(host)' is not a host name or IP address (entries are [scheme://]host[:port|*], no path)")
            }
        }
        return rules
    }

    private func deniedAddresses(_ node: YAMLNode) throws(ConfigError) -> DeniedAddresses {
        var named: [DeniedAddresses.Named] = []
        var cidrs: [CIDR] = []
        for entry in try list(node) {
            let text = try nonEmptyString(entry)
            if let name = DeniedAddresses.Named(rawValue: text) {
                if !named.contains(name) { named.append(name) }
            } else if text.contains("/") || text.contains(".") || text.contains(":") {
                cidrs.append(try cidr(entry, text))
            } else {
                let names = DeniedAddresses.Named.allCases.map(\.rawValue)
                throw error(
                    entry,
                    "'\(text)' is not an address set: use \(names.joined(separator: ", ")) or a network like 10.0.0.0/8"
                        + suggestion(text, Set(names)))
            }
        }
        return DeniedAddresses(named: named, cidrs: cidrs)
    }
}
