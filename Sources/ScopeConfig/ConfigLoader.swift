import HTTP1Codec
import PosixSupport

/// Reads a YAML config and validates it into a `ProxyConfiguration`. The first error wins and
/// names its position: `FILE:LINE:COLUMN: message`.
public enum ConfigLoader {
    public static func load(path: String, home: String) throws(ConfigError) -> ProxyConfiguration {
        let bytes: [UInt8]
        switch SmallFile.read(path, limit: 4 << 20) {
        case .success(let read): bytes = read
        case .failure(let failure):
            throw ConfigError(
                file: path, mark: Mark(line: 1, column: 1),
                message: "the config file " + failure.describe(path)
                    + (failure == .tooLarge ? " (the limit is 4 MiB)" : ""))
        }
        return try parse(String(decoding: bytes, as: UTF8.self), file: path, home: home)
    }

    /// Every key whose value is a path the loader resolves relative to the config file (dotted;
    /// `[]` is each item of a list, `*` each entry of a mapping). `config print` writes each of them
    /// resolved, and ConfigRoundTripTests walks this list.
    public static let pathKeys = [
        "store_dir", "secrets.*.file", "clients[].tls_client.ca", "tls.ca_dir", "tls.upstream_ca", "log.output",
    ]

    public static func parse(_ text: String, file: String, home: String) throws(ConfigError) -> ProxyConfiguration {
        let root = try YAMLDocument.parse(text, file: file)
        var decoder = Decoder(file: file, home: home)
        return try decoder.configuration(root)
    }
}

/// Walks the node tree; each method checks one part of the schema.
struct Decoder {
    let file: String
    let home: String
    var secretNames: Set<String> = []
    /// Secrets declared with `placeholder: true`: the only ones a scope may `substitute`.
    var placeholderNames: Set<String> = []
    /// Secrets holding a private key (`github_app`, `jwt_bearer`, `private_key_jwt`): never injected.
    var privateKeyNames: Set<String> = []
    /// Names of the configured clients (`clients:`), which scopes refer to.
    var clientNames: Set<String> = []
    /// Every scope origin with where it is written: warnings about them are known only once `tls`
    /// and `routes` are read.
    var scopeOrigins: [(scope: String, origin: Origin, mark: Mark)] = []

    /// The file's top-level sections, in the order they are read: a section may use what one above
    /// it declared (scopes and proxy_auth name secrets and clients), so the first error is the same
    /// whatever order the file writes them in. Adding a section is its file (an `extension Decoder`
    /// with its reader, like TLSConfig.swift) and one line here.
    static let sections: [ConfigSection] = [
        ConfigSection(["store_dir"]) { (decoder, keys, config) throws(ConfigError) in try decoder.readStoreDirectory(keys, into: &config) },
        ConfigSection(["secrets"]) { (decoder, keys, config) throws(ConfigError) in try decoder.readSecrets(keys, into: &config) },
        ConfigSection(["listen", "admin", "admin_token"]) { (decoder, keys, config) throws(ConfigError) in try decoder.readListen(keys, into: &config)
        },
        ConfigSection(["clients", "proxy_auth"]) { (decoder, keys, config) throws(ConfigError) in try decoder.readClients(keys, into: &config) },
        ConfigSection(["egress"]) { (decoder, keys, config) throws(ConfigError) in try decoder.readEgress(keys, into: &config) },
        ConfigSection(["sensitive_headers", "scopes"]) { (decoder, keys, config) throws(ConfigError) in try decoder.readScopes(keys, into: &config) },
        ConfigSection(["routes"]) { (decoder, keys, config) throws(ConfigError) in try decoder.readRoutes(keys, into: &config) },
        ConfigSection(["transparent"]) { (decoder, keys, config) throws(ConfigError) in try decoder.readTransparent(keys, into: &config) },
        ConfigSection(["redirects"]) { (decoder, keys, config) throws(ConfigError) in try decoder.readRedirects(keys, into: &config) },
        ConfigSection(["tls"]) { (decoder, keys, config) throws(ConfigError) in try decoder.readTLS(keys, into: &config) },
        ConfigSection(["timeouts"]) { (decoder, keys, config) throws(ConfigError) in try decoder.readTimeouts(keys, into: &config) },
        ConfigSection(["limits"]) { (decoder, keys, config) throws(ConfigError) in try decoder.readLimits(keys, into: &config) },
        ConfigSection(["log"]) { (decoder, keys, config) throws(ConfigError) in try decoder.readLog(keys, into: &config) },
        ConfigSection(["scrub", "guard"]) { (decoder, keys, config) throws(ConfigError) in try decoder.readProtection(keys, into: &config) },
    ]
    /// The keys of the file's top level; under `inject:` or `secrets:` one is a key indented too deep.
    static let topLevelKeys = sections.flatMap(\.keys)
    /// The keys a scope accepts. A header under `inject:` with one of these names is a key indented
    /// one level too deep (docs/configuration.md, "Scopes").
    /// The keys a client accepts (`clients:` entries; their `egress:` is read with the `egress` section).
    static let clientKeys = ["name", "auth", "uid", "source", "tls_client", "rate", "egress"]
    static let scopeKeys = ["name", "origins", "require_https", "inject", "pass", "methods", "paths", "clients", "substitute", "sign"]
    /// The keys a secret's source mapping accepts; a secret with one of these names and a value that
    /// is not a mapping is such a key indented one level too shallow.
    static let secretSources = ["env", "file", "store", "command", "oauth2", "github_app"]
    static let secretKeys = secretSources + ["allow_group_read", "placeholder", "env_var", "ttl", "timeout"]

    init(file: String, home: String) {
        self.file = file
        self.home = home
    }

    func error(_ node: YAMLNode, _ message: String) -> ConfigError {
        ConfigError(file: file, mark: node.mark, message: message)
    }

    // MARK: Top level

    mutating func configuration(_ root: YAMLNode) throws(ConfigError) -> ProxyConfiguration {
        var config = ProxyConfiguration.embeddedDefault(home: home)
        config.sourcePath = file
        let keys = try mapping(root, allowed: Self.topLevelKeys, context: "the config")
        for section in Self.sections { try section.read(&self, keys, &config) }
        // What only the whole file tells: an origin no listener or interception reaches, a log
        // setting that does nothing in the format chosen.
        config.warnings.insert(contentsOf: uninterceptedOriginWarnings(config, origins: scopeOrigins), at: 0)
        if let warning = logBodiesWarning(keys, config) { config.warnings.append(warning) }
        return config
    }
}

/// One top-level section of the config file: the keys it owns and how they are read (each reader
/// takes the top-level mapping and reads its own keys, absent ones included).
struct ConfigSection: Sendable {
    typealias Read = @Sendable (inout Decoder, [String: YAMLNode], inout ProxyConfiguration) throws(ConfigError) -> Void
    let keys: [String]
    let read: Read

    init(_ keys: [String], read: @escaping Read) {
        self.keys = keys
        self.read = read
    }
}
