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
    /// Parses `node` (the value of `oauth2:`) for the secret `secret`. `inputSecrets` are the
    /// ordinary secrets (env, file, store) `client_secret`, `refresh_token` and `private_key` may
    /// refer to (so call this once every secret's name is known).
    public static func parse(_ node: YAMLNode, secret: String, file: String, inputSecrets: [String: SecretSource]) throws(ConfigError)
        -> OAuth2Spec
    {
        try Decoder(file: file, home: "").oauth2(node, secret: secret, inputs: InputSecrets(sources: inputSecrets))
    }
}

extension Decoder {
    func oauth2(_ node: YAMLNode, secret name: String, inputs: InputSecrets) throws(ConfigError) -> OAuth2Spec {
        let context = "the oauth2 of secret '\(name)'"
        let keys = try mapping(
            node,
            allowed: [
                "token_url", "grant", "client_id", "client_secret", "refresh_token", "scope", "audience", "client_auth",
                "private_key", "key_id", "alg", "issuer", "subject",
            ],
            context: context)
        guard case .mapping = node.value else { throw error(node, "\(context) must be a mapping") }
        func required(_ key: String) throws(ConfigError) -> YAMLNode {
            guard let value = keys[key] else { throw error(node, "\(context) needs '\(key)'") }
            return value
        }

        let urlNode = try required("token_url")
        let (endpoint, path) = try credentialEndpointURL(urlNode, key: "token_url", example: "https://auth.example/oauth/token")

        // The key a JWT is signed with (jwt_bearer's assertion, private_key_jwt's client assertion).
        var key: JWTKeySpec?
        if let keyNode = keys["private_key"] {
            let keyName = try privateKeyReference(keyNode, computedSecret: name, inputs: inputs)
            var keyID: String?
            if let idNode = keys["key_id"] {
                let text = try nonEmptyString(idNode)
                guard text.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value < 0x7F }) else {
                    throw error(idNode, "key_id is printable ASCII (the JWS kid header)")
                }
                keyID = text
            }
            var algorithm: String?
            if let algNode = keys["alg"] {
                let text = try string(algNode)
                guard JWTKeySpec.algorithms.contains(text) else {
                    throw error(
                        algNode,
                        "unknown alg '\(text)': RS256 (an RSA key) or ES256 (a P-256 key)\(suggestion(text.uppercased(), Set(JWTKeySpec.algorithms)))"
                    )
                }
                algorithm = text
            }
            key = JWTKeySpec(privateKey: keyName, keyID: keyID, algorithm: algorithm)
        } else if let stray = ["key_id", "alg"].first(where: { keys[$0] != nil }) {
            throw error(keys[stray]!, "\(stray) applies with private_key (jwt_bearer, or client_auth: private_key_jwt)")
        }

        let grantNode = try required("grant")
        let grantName = try string(grantNode)
        let refreshNode = keys["refresh_token"]
        if grantName != "refresh_token", let refreshNode { throw error(refreshNode, "refresh_token applies to grant: refresh_token only") }
        if grantName != "jwt_bearer", let stray = ["issuer", "subject"].first(where: { keys[$0] != nil }) {
            throw error(keys[stray]!, "\(stray) is a claim of the jwt_bearer grant's assertion: grant: jwt_bearer")
        }
        let grant: OAuth2Spec.Grant
        switch grantName {
        case "client_credentials":
            grant = .clientCredentials
        case "refresh_token":
            guard let refreshNode else { throw error(node, "grant: refresh_token needs 'refresh_token' (the name of the secret holding it)") }
            grant = .refreshToken(secret: try inputSecret(refreshNode, computedSecret: name, inputs: inputs))
        case "jwt_bearer":
            guard let key else {
                throw error(node, "grant: jwt_bearer needs 'private_key' (the file or store secret with the PEM key the assertion is signed with)")
            }
            let issuer = try claim(try required("issuer"), key: "issuer")
            let subject = try keys["subject"].map { node throws(ConfigError) in try claim(node, key: "subject") }
            let audience = try keys["audience"].map { node throws(ConfigError) in try claim(node, key: "audience") }
            grant = .jwtBearer(OAuth2Spec.JWTBearerSpec(key: key, issuer: issuer, subject: subject, audience: audience))
        default:
            let grants: Set<String> = ["client_credentials", "refresh_token", "jwt_bearer"]
            throw error(
                grantNode, "unknown grant '\(grantName)': use client_credentials, refresh_token or jwt_bearer\(suggestion(grantName, grants))")
        }
        let isBearer: Bool = if case .jwtBearer = grant { true } else { false }

        var clientID: String?
        if let idNode = keys["client_id"] {
            let text = try nonEmptyString(idNode)
            // RFC 6749 Appendix A.1: client-id = *VSCHAR.
            guard text.utf8.allSatisfy({ $0 >= 0x20 && $0 <= 0x7E }) else {
                throw error(idNode, "client_id must be printable ASCII (RFC 6749 Appendix A.1)")
            }
            clientID = text
        } else if !isBearer {
            throw error(node, "\(context) needs 'client_id'")
        }

        let authNames = ["basic", "body", "private_key_jwt", "none"]
        var authName: String
        if let authNode = keys["client_auth"] {
            authName = try string(authNode)
            guard authNames.contains(authName) else {
                throw error(
                    authNode,
                    "unknown client_auth '\(authName)': basic (RFC 6749 §2.3.1 HTTP Basic), body, or private_key_jwt (RFC 7523 §2.2)"
                        + suggestion(authName, Set(authNames)))
            }
        } else {
            authName = isBearer && keys["client_secret"] == nil ? "none" : "basic"
        }
        let secretNode = keys["client_secret"]
        let clientAuthentication: OAuth2Spec.ClientAuthentication
        switch authName {
        case "basic", "body":
            guard let secretNode else { throw error(node, "\(context) needs 'client_secret' (a secret name) for client_auth: \(authName)") }
            let secret = try inputSecret(secretNode, computedSecret: name, inputs: inputs)
            guard clientID != nil else { throw error(node, "\(context) needs 'client_id' with its client_secret") }
            clientAuthentication = authName == "basic" ? .basic(secret: secret) : .body(secret: secret)
        case "private_key_jwt":
            if let secretNode { throw error(secretNode, "client_auth: private_key_jwt signs with private_key: no client_secret") }
            guard let key else { throw error(node, "client_auth: private_key_jwt needs 'private_key' (a file or store secret with the PEM key)") }
            guard clientID != nil else { throw error(node, "client_auth: private_key_jwt needs 'client_id' (the assertion's iss and sub)") }
            clientAuthentication = .privateKeyJWT(key)
        default:
            guard isBearer else {
                throw error(keys["client_auth"] ?? node, "client_auth: none applies to grant: jwt_bearer only (its assertion is the proof)")
            }
            if let secretNode { throw error(secretNode, "client_secret needs client_auth: basic or body") }
            clientAuthentication = .none
        }
        if key != nil, !isBearer, authName != "private_key_jwt" {
            throw error(keys["private_key"]!, "private_key applies to grant: jwt_bearer or client_auth: private_key_jwt")
        }

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
        if !isBearer, let audienceNode = keys["audience"], !audienceNode.isNull {
            audience = try claim(audienceNode, key: "audience")
        }
        return OAuth2Spec(
            endpoint: endpoint, path: path, grant: grant, clientID: clientID, scope: scope, audience: audience,
            clientAuthentication: clientAuthentication)
    }

    /// A claim or form value: text without control characters.
    private func claim(_ node: YAMLNode, key: String) throws(ConfigError) -> String {
        let text = try nonEmptyString(node)
        guard text.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7F }) else {
            throw error(node, "\(key) must not contain control characters")
        }
        return text
    }

    private func inputSecret(_ node: YAMLNode, computedSecret: String, inputs: InputSecrets) throws(ConfigError) -> String {
        let referenced = try string(node)
        if referenced == computedSecret { throw error(node, "secret '\(computedSecret)' cannot be computed from itself") }
        guard inputs.names.contains(referenced) else {
            throw error(node, "'\(referenced)' names no env, file or store secret in 'secrets'\(suggestion(referenced, inputs.names))")
        }
        return referenced
    }
}
