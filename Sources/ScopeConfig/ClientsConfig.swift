import HTTP1Codec
import ProxySettings
import ScopePolicy

/// `clients:` (docs/configuration.md, `clients`): how the proxy tells clients apart, each rule checked
/// here; scopes then refer to the names.
extension Decoder {
    /// `clients:`, or its shorthand for one client, `proxy_auth:` (never both).
    mutating func readClients(_ keys: [String: YAMLNode], into config: inout ProxyConfiguration) throws(ConfigError) {
        if let node = keys["clients"], !node.isNull {
            if let auth = keys["proxy_auth"], !auth.isNull {
                throw error(
                    auth,
                    "proxy_auth and clients cannot both be given: proxy_auth is the shorthand for one client; "
                        + "with clients, write it as a client: { name: me, auth: { bearer: SECRET } } (or basic: { user: U, password: SECRET })")
            }
            config.clients = try clients(node)
            clientNames = Set(config.clients.map(\.name))
        }
        if let node = keys["proxy_auth"], !node.isNull {
            let auth = try mapping(node, allowed: ["secret"], context: "proxy_auth")
            guard let secretNode = auth["secret"] else { throw error(node, "proxy_auth needs 'secret'") }
            config.proxyAuthSecret = try secretReference(secretNode)
        }
    }

    func clients(_ node: YAMLNode) throws(ConfigError) -> [ClientRule] {
        var rules: [ClientRule] = []
        var names: Set<String> = []
        var basicUsers: [String: String] = [:]
        for item in try list(node) {
            let keys = try mapping(item, allowed: Self.clientKeys, context: "a client")
            guard let nameNode = keys["name"] else { throw error(item, "a client needs a 'name'") }
            let name = try nonEmptyString(nameNode)
            guard name.utf8.allSatisfy(HeaderTemplate.isNameByte) else {
                throw error(nameNode, "client names use letters, digits, '_', '.' and '-' (they appear in logs and metrics)")
            }
            guard names.insert(name).inserted else { throw error(nameNode, "duplicate client name '\(name)'") }

            var auth: ClientAuth?
            if let authNode = keys["auth"] {
                let fields = try mapping(authNode, allowed: ["basic", "bearer"], context: "auth of client '\(name)'")
                switch (fields["basic"], fields["bearer"]) {
                case (let basic?, nil):
                    let parts = try mapping(basic, allowed: ["user", "password"], context: "auth.basic of client '\(name)'")
                    guard let userNode = parts["user"], let passwordNode = parts["password"] else {
                        throw error(basic, "auth.basic needs 'user' and 'password' (a secret name)")
                    }
                    let user = try nonEmptyString(userNode)
                    guard !user.contains(":"), user.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                        throw error(userNode, "a Basic user name is printable ASCII without ':' or spaces")
                    }
                    if let other = basicUsers[user] {
                        throw error(userNode, "clients '\(other)' and '\(name)' both use the Basic user '\(user)': the user name selects the client")
                    }
                    basicUsers[user] = name
                    auth = .basic(user: user, passwordSecret: try secretReference(passwordNode))
                case (nil, let bearer?):
                    auth = .bearer(tokenSecret: try secretReference(bearer))
                default:
                    throw error(authNode, "auth takes exactly one of basic: { user: U, password: SECRET } or bearer: SECRET")
                }
            }
            var uid: UInt32?
            if let uidNode = keys["uid"] {
                #if os(Linux)
                    let value = try int(uidNode)
                    guard (0..<Int(UInt32.max)).contains(value) else { throw error(uidNode, "uid must be between 0 and 4294967294") }
                    uid = UInt32(value)
                #else
                    throw error(uidNode, "uid recognition needs Linux (/proc/net/tcp); it is not available on this system")
                #endif
            }
            var sources: [CIDR] = []
            if let sourceNode = keys["source"] {
                var items = [sourceNode]
                if case .scalar = sourceNode.value {} else { items = try list(sourceNode) }
                for entry in items {
                    let text = try nonEmptyString(entry)
                    sources.append(try cidr(entry, text))
                }
                guard !sources.isEmpty else { throw error(sourceNode, "source needs at least one network") }
            }
            var tlsClient: TLSClientMatch?
            if let tlsNode = keys["tls_client"] {
                let fields = try mapping(tlsNode, allowed: ["ca", "subject"], context: "tls_client of client '\(name)'")
                guard let caNode = fields["ca"], let subjectNode = fields["subject"] else {
                    throw error(tlsNode, "tls_client needs 'ca' (a PEM file) and 'subject' (CN=name, DNS:name, email:addr, URI:uri or IP:addr)")
                }
                let subjectText = try nonEmptyString(subjectNode)
                guard let subject = SubjectMatch.parse(subjectText) else {
                    throw error(subjectNode, "subject must be CN=name, DNS:name, email:addr, URI:uri or IP:addr")
                }
                tlsClient = TLSClientMatch(caFile: expand(try nonEmptyString(caNode), relativeTo: file), subject: subject)
            }
            var rate: RateLimit?
            if let rateNode = keys["rate"] {
                let text = try string(rateNode)
                guard let parsed = RateLimit.parse(text) else {
                    throw error(rateNode, "invalid rate '\(text)': use a whole number of requests per second or minute, like \"10/s\" or \"100/m\"")
                }
                rate = parsed
            }
            let rule = ClientRule(name: name, auth: auth, uid: uid, sources: sources, tlsClient: tlsClient, rate: rate)
            if name == ClientRule.anonymousName {
                guard !rule.hasRecognitionMethod else {
                    throw error(nameNode, "'anonymous' applies to clients nothing else recognises: give it no auth, uid, source or tls_client")
                }
            } else if !rule.hasRecognitionMethod {
                throw error(
                    nameNode,
                    "client '\(name)' has no way to be recognised: give it auth, uid, source or tls_client "
                        + "(only the client named 'anonymous' needs none)")
            }
            rules.append(rule)
        }
        var uidOwners: [UInt32: String] = [:]
        for rule in rules {
            guard let uid = rule.uid else { continue }
            if let other = uidOwners[uid] { throw error(node, "clients '\(other)' and '\(rule.name)' both use uid \(uid)") }
            uidOwners[uid] = rule.name
        }
        return rules
    }

    /// One `ADDRESS/PREFIX` network (`source:`, `deny_ips:`).
    func cidr(_ entry: YAMLNode, _ text: String) throws(ConfigError) -> CIDR {
        switch CIDR.parse(text) {
        case .success(let cidr): return cidr
        case .failure(.invalidAddress):
            throw error(
                entry,
                "'\(text)' is not an IP network: expected ADDRESS/PREFIX like 10.0.0.0/8 or fd00::/8 "
                    + "(IPv4 in four decimal parts without leading zeros)")
        case .failure(.invalidPrefix): throw error(entry, "'\(text)': the prefix length must be 0-32 for IPv4, 0-128 for IPv6")
        case .failure(.hostBitsSet): throw error(entry, "'\(text)' has bits set after the prefix: write the network address")
        }
    }
}
