import ScopeConfig
import ProxyEngine

/// `scopeproxy explain`: what the proxy would do with one request. A stub until the lead's logic
/// lands here (keep the signature: the command line calls it).
public enum ExplainCommand {
    public static func run(config: ProxyConfiguration, method: String, headers: [(String, String)], url: String, client: String?) -> Int32 {
        writeStandardError("explain: not implemented yet\n")
        return 1
    }
}
