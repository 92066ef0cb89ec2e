import HTTP1Codec
import ProxySettings

/// `transparent:` (docs/configuration.md, `transparent`; docs/transparent.md): the listener that
/// takes connections redirected by nftables/iptables REDIRECT and reads where they were going.
extension Decoder {
    func readTransparent(_ keys: [String: YAMLNode], into config: inout ProxyConfiguration) throws(ConfigError) {
        guard let node = keys["transparent"], !node.isNull else { return }
        let section = try mapping(node, allowed: ["listen"], context: "transparent")
        guard let listenNode = section["listen"] else {
            throw error(node, "transparent needs 'listen' (HOST:PORT, the port nftables/iptables REDIRECT sends connections to)")
        }
        config.transparentListen = try hostPort(listenNode)
    }
}
