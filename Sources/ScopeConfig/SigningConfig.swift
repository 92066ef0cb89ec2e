import ScopePolicy

/// `sign:` of a scope (docs/configuration.md, AWS SigV4):
///
///     sign:
///       aws_sigv4: { service: s3, region: eu-west-1, access_key_id: aws_key_id,
///                    secret_access_key: aws_secret, session_token: aws_session }
///
/// The credentials are secret names, checked against `secrets:` (so `secrets(_:)` must run first,
/// as it does for `inject:`). Errors point at the offending node, with a did-you-mean for unknown
/// keys and secret names.
extension Decoder {
    func signing(_ node: YAMLNode, scope: String) throws(ConfigError) -> SigningSpec {
        let kinds = try mapping(node, allowed: ["aws_sigv4"], context: "sign of scope '\(scope)'")
        guard let sigv4 = kinds["aws_sigv4"] else {
            throw error(node, "sign of scope '\(scope)' needs a kind of signature: aws_sigv4")
        }
        return .awsSigV4(try awsSigV4(sigv4, scope: scope))
    }

    private func awsSigV4(_ node: YAMLNode, scope: String) throws(ConfigError) -> AWSSigV4Spec {
        let context = "sign.aws_sigv4 of scope '\(scope)'"
        guard case .mapping = node.value else {
            throw error(
                node,
                "\(context) must be a mapping: { service, region, credentials: default } or { service, region, access_key_id, secret_access_key }")
        }
        let fields = try mapping(
            node, allowed: ["service", "region", "credentials", "access_key_id", "secret_access_key", "session_token"], context: context)
        for required in ["service", "region"] where fields[required] == nil { throw error(node, "\(context) needs '\(required)'") }
        let service = try scopeComponent(fields["service"]!, what: "service", example: "s3, execute-api or sts")
        let region = try scopeComponent(fields["region"]!, what: "region", example: "eu-west-1")
        if let credentialsNode = fields["credentials"] {
            if let named = ["access_key_id", "secret_access_key", "session_token"].first(where: { fields[$0] != nil }) {
                throw error(fields[named]!, "\(named) and credentials are two ways to give the keys: keep one")
            }
            return AWSSigV4Spec(service: service, region: region, credentials: try awsCredentials(credentialsNode))
        }
        for required in ["access_key_id", "secret_access_key"] where fields[required] == nil {
            throw error(node, "\(context) needs '\(required)' (a secret name), or credentials: default (the AWS credential chain)")
        }
        let accessKeyID = try secretReference(fields["access_key_id"]!)
        let secretAccessKey = try secretReference(fields["secret_access_key"]!)
        if accessKeyID == secretAccessKey {
            throw error(
                fields["secret_access_key"]!, "access_key_id and secret_access_key name the same secret '\(accessKeyID)': they are two values")
        }
        var sessionToken: String?
        if let tokenNode = fields["session_token"], !tokenNode.isNull {
            let name = try secretReference(tokenNode)
            if name == accessKeyID || name == secretAccessKey {
                throw error(
                    tokenNode, "session_token names the same secret '\(name)' as \(name == accessKeyID ? "access_key_id" : "secret_access_key")")
            }
            sessionToken = name
        }
        return AWSSigV4Spec(
            service: service, region: region, accessKeyIDSecret: accessKeyID, secretAccessKeySecret: secretAccessKey,
            sessionTokenSecret: sessionToken)
    }

    /// `credentials: default` or `credentials: { profile: NAME }` (docs/credentials.md, "The AWS chain").
    private func awsCredentials(_ node: YAMLNode) throws(ConfigError) -> AWSCredentialSelection {
        if case .scalar = node.value {
            let text = try string(node)
            guard text == "default" else {
                throw error(node, "credentials is default (the AWS credential chain) or { profile: NAME }, not '\(text)'")
            }
            return .defaultChain
        }
        let fields = try mapping(node, allowed: ["profile"], context: "credentials")
        guard let profileNode = fields["profile"] else { throw error(node, "credentials names a profile: { profile: NAME }") }
        let profile = try nonEmptyString(profileNode)
        // A section name of the shared files: no brackets, no line breaks, no ':' (the computed secret's separator).
        guard profile.utf8.count <= 128, profile.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != 0x5B && $0 != 0x5D && $0 != 0x3A }) else {
            throw error(profileNode, "a profile name is printable without spaces, brackets or ':', as in [profile NAME] of ~/.aws/config")
        }
        return .profile(profile)
    }

    /// A region or service name: lowercase letters, digits and '-' (AWS spells them so; they go
    /// into the credential scope, where '/' separates the parts).
    private func scopeComponent(_ node: YAMLNode, what: String, example: String) throws(ConfigError) -> String {
        let text = try nonEmptyString(node)
        guard AWSSigV4Spec.isValidScopeComponent(text) else {
            let lowered = text.lowercased()
            throw error(
                node,
                "invalid AWS \(what) '\(text)': lowercase letters, digits and '-', like \(example)"
                    + (lowered != text && AWSSigV4Spec.isValidScopeComponent(lowered) ? ", did you mean '\(lowered)'?" : ""))
        }
        return text
    }
}
