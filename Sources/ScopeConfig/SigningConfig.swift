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
            throw error(node, "\(context) must be a mapping: { service, region, access_key_id, secret_access_key, session_token }")
        }
        let fields = try mapping(node, allowed: ["service", "region", "access_key_id", "secret_access_key", "session_token"], context: context)
        for required in ["service", "region", "access_key_id", "secret_access_key"] where fields[required] == nil {
            throw error(
                node,
                "\(context) needs '\(required)'"
                    + (required.hasSuffix("_id") || required.hasPrefix("secret") ? " (a secret name)" : ""))
        }
        let service = try scopeComponent(fields["service"]!, what: "service", example: "s3, execute-api or sts")
        let region = try scopeComponent(fields["region"]!, what: "region", example: "eu-west-1")
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
