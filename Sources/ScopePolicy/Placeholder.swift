import Digests

/// A secret the client may hold a stand-in for (`placeholder: true` on the secret): the proxy
/// swaps the stand-in for the value toward the origins of scopes that `substitute` the secret,
/// and refuses it everywhere else.
public struct PlaceholderSecret: Sendable, Equatable {
    public let secret: String
    /// `env_var`: the variable `scopeproxy env` exports the placeholder as.
    public let environmentVariable: String?

    public init(secret: String, environmentVariable: String? = nil) {
        self.secret = secret
        self.environmentVariable = environmentVariable
    }
}

/// A placeholder's text. Derived from the secret's *name* and the per-install key, never from the
/// value: it is stable across restarts and rotations, and tells nothing about the value. Without
/// the key it cannot be guessed (128 bits of HMAC-SHA-256).
public enum Placeholder {
    public static let prefix = "scopeproxy-ph-"
    /// Length of the per-install key, in bytes.
    public static let keyLength = 32

    public static func text(secret: String, key: [UInt8]) -> String {
        let mac = HMAC.sha256(key: key, message: "scopeproxy placeholder v1\n" + secret)
        return prefix + secret + "-" + Hex.lowercase(Array(mac.prefix(16)))
    }
}

/// Every placeholder of a configuration, derived once: text -> secret name.
public struct PlaceholderTable: Sendable, Equatable {
    /// Secret name -> placeholder text.
    public let texts: [String: String]
    /// Placeholder bytes -> secret name (what the request scan looks up).
    public let secrets: [[UInt8]: String]

    public init(_ declared: [PlaceholderSecret], key: [UInt8]) {
        var texts: [String: String] = [:]
        var secrets: [[UInt8]: String] = [:]
        for declaration in declared {
            let text = Placeholder.text(secret: declaration.secret, key: key)
            texts[declaration.secret] = text
            secrets[Array(text.utf8)] = declaration.secret
        }
        self.texts = texts
        self.secrets = secrets
    }

    public static let empty = PlaceholderTable([], key: [])

    public var isEmpty: Bool { texts.isEmpty }
}
