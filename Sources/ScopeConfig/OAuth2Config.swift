import HTTP1Codec
import ScopePolicy

/// The `oauth2:` mapping of a secret (docs/configuration.md, OAuth2 access tokens):
///
///     partner_token:
///       oauth2:
///         token_url: "https://auth.partner.example/oauth/token"
///         grant: client_credentials          # or refresh_token
///         client_id: my-client
///         client_secret: partner_client_secret   # a secret name
///         refresh_token: partner_refresh         # refresh_token grant only; a secret name
///         scope: "read write"                    # optional
///         audience: "https://api.partner.example"  # optional
///         client_auth: basic                     # basic (default) | body
public enum OAuth2Config {
    /// Parses `node` (the value of `oauth2:`) for the secret `secret`. `inputSecrets` are the names
    /// `client_secret` and `refresh_token` may refer to: the config's secrets that are not OAuth2
    /// secrets themselves (so call this once every secret's name is known).
    public static func parse(_ node: YAMLNode, secret: String, file: String, inputSecrets: Set<String>) throws(ConfigError) -> OAuth2Spec {
        try Decoder(file: file, home: "").oauth2(node, secret: secret, inputSecrets: inputSecrets)
    }
}

extension Decoder {
    func oauth2(_ node: YAMLNode, secret name: String, inputSecrets: Set<String>) throws(ConfigError) -> OAuth2Spec {
        let context = "the oauth2 of secret '\(name)'"
        let keys = try mapping(
            node, allowed: ["token_url", "grant", "client_id", "client_secret", "refresh_token", "scope", "audience", "client_auth"],
            context: context)
        guard case .mapping = node.value else { throw error(node, "\(context) must be a mapping") }
        func required(_ key: String) throws(ConfigError) -> YAMLNode {
            guard let value = keys[key] else { throw error(node, "\(context) needs '\(key)'") }
            return value
        }

        let urlNode = try required("token_url")
        let (endpoint, path) = try tokenURL(urlNode)

        let grantNode = try required("grant")
        let grantName = try string(grantNode)
        let refreshNode = keys["refresh_token"]
        let grant: OAuth2Spec.Grant
        switch grantName {
        case "client_credentials":
            if let refreshNode { throw error(refreshNode, "refresh_token applies to grant: refresh_token only") }
            grant = .clientCredentials
        case "refresh_token":
            guard let refreshNode else { throw error(node, "grant: refresh_token needs 'refresh_token' (the name of the secret holding it)") }
            grant = .refreshToken(secret: try inputSecret(refreshNode, oauth2Secret: name, inputSecrets: inputSecrets))
        default:
            throw error(
                grantNode,
                "unknown grant '\(grantName)': use client_credentials or refresh_token\(suggestion(grantName, ["client_credentials", "refresh_token"]))"
            )
        }

        let idNode = try required("client_id")
        let clientID = try nonEmptyString(idNode)
        // RFC 6749 Appendix A.1: client-id = *VSCHAR.
        guard clientID.utf8.allSatisfy({ $0 >= 0x20 && $0 <= 0x7E }) else {
            throw error(idNode, "client_id must be printable ASCII (RFC 6749 Appendix A.1)")
        }
        let clientSecret = try inputSecret(try required("client_secret"), oauth2Secret: name, inputSecrets: inputSecrets)

        var scope: String?
        if let scopeNode = keys["scope"], !scopeNode.isNull {
            let text = try nonEmptyString(scopeNode)
            // Appendix A.4: scope = scope-token *( SP scope-token ), scope-token = 1*NQCHAR.
            let tokens = text.split(separator: " ", omittingEmptySubsequences: false)
            guard tokens.allSatisfy({ !$0.isEmpty && $0.utf8.allSatisfy { $0 == 0x21 || (0x23...0x5B).contains($0) || (0x5D...0x7E).contains($0) } })
            else {
                throw error(scopeNode, "scope must be scope tokens separated by single spaces (RFC 6749 §3.3)")
            }
            scope = text
        }
        var audience: String?
        if let audienceNode = keys["audience"], !audienceNode.isNull {
            let text = try nonEmptyString(audienceNode)
            guard text.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7F }) else {
                throw error(audienceNode, "audience must not contain control characters")
            }
            audience = text
        }
        var clientAuthentication = OAuth2Spec.ClientAuthentication.basic
        if let authNode = keys["client_auth"] {
            let text = try string(authNode)
            guard let parsed = OAuth2Spec.ClientAuthentication(rawValue: text) else {
                throw error(
                    authNode, "unknown client_auth '\(text)': use basic (RFC 6749 §2.3.1 HTTP Basic) or body\(suggestion(text, ["basic", "body"]))")
            }
            clientAuthentication = parsed
        }
        return OAuth2Spec(
            endpoint: endpoint, path: path, grant: grant, clientID: clientID, clientSecret: clientSecret,
            scope: scope, audience: audience, clientAuthentication: clientAuthentication)
    }

    /// `https://host[:port]/path[?query]`; http only to loopback (the client secret travels in it).
    /// No userinfo, no fragment.
    private func tokenURL(_ node: YAMLNode) throws(ConfigError) -> (Origin, String) {
        let text = try nonEmptyString(node)
        guard case .absolute(let origin, let path, let userinfo)? = try? RequestTarget.parse(text, method: "POST") else {
            throw error(node, "token_url must be an absolute https:// URL")
        }
        guard userinfo == nil else { throw error(node, "token_url must not carry user:password@ (client credentials are secrets)") }
        guard origin.scheme == .https || origin.isLoopback else {
            throw error(node, "token_url must be https (http only to a loopback address): the client secret travels in the request")
        }
        return (origin, path)
    }

    private func inputSecret(_ node: YAMLNode, oauth2Secret: String, inputSecrets: Set<String>) throws(ConfigError) -> String {
        let referenced = try string(node)
        if referenced == oauth2Secret { throw error(node, "secret '\(oauth2Secret)' cannot be computed from itself") }
        guard inputSecrets.contains(referenced) else {
            throw error(node, "'\(referenced)' names no env, file or store secret in 'secrets'\(suggestion(referenced, inputSecrets))")
        }
        return referenced
    }
}
