import Digests
import HTTP1Codec
import PosixSupport
import ProxyCore
import ProxyEngine
import ScopeConfig
import ScopePolicy
import SecretStore

/// How the banner, `explain` and `check` speak of a computed secret: what kind it is, where its
/// value would come from, and what would stop it, without fetching anything (no request, no
/// command run) and without a value.
enum CredentialSourceText {
    /// "OAuth2 token", "command value", ... : the banner's word for a secret of this kind.
    static func kind(_ recipe: ComputedSecret) -> String {
        switch recipe {
        case .oauth2: "OAuth2 token"
        case .command: "command value"
        case .githubApp: "GitHub App token"
        case .awsChain: "AWS credentials"
        }
    }

    /// One sentence: where the value comes from and when it is obtained.
    static func source(_ name: String, _ recipe: ComputedSecret, environment: [String: String] = ProcessEnvironment.current()) -> String {
        switch recipe {
        case .oauth2(let spec):
            let client = spec.clientID.map { ", client \($0)" } ?? ""
            var key = spec.privateKeys.first.map { ", assertion signed with private key '\($0)'" } ?? ""
            if case .jwtBearer(let bearer) = spec.grant { key += ", issuer \(bearer.issuer)" }
            return "\(name) is an OAuth2 access token from \(spec.tokenURL) (\(spec.grant.name)\(client)\(key)): fetched when a request "
                + "first needs it, renewed before it expires; the request waits for it (502 credential_unavailable if the endpoint fails)"
        case .command(let spec):
            let extra = spec.environment.isEmpty ? "" : " plus \(spec.environment.joined(separator: ", "))"
            return "\(name) is the output of command \(spec.argv.joined(separator: " ")) (no shell; minimal environment\(extra)): "
                + "run when a request first needs it, at most one run at a time, kept for its stated expiry or ttl \(spec.ttlSeconds)s; "
                + "the request waits for it (502 credential_unavailable if it fails or takes over \(spec.timeoutMilliseconds) ms)"
        case .githubApp(let spec):
            return "\(name) is a GitHub App installation token (app \(spec.appID), installation \(spec.installationID)) from "
                + "\(spec.api)\(spec.pathPrefix), asked for with a JWT signed by private key '\(spec.privateKey)': fetched when a request "
                + "first needs it, renewed 5 minutes before it expires (502 credential_unavailable if GitHub refuses)"
        case .awsChain(let selection):
            let link = AWSCredentialChain.describe(selection: selection, environment: environment, readFile: readSmallFile)
            return "\(selection) would give: \(link); fetched when a request first needs it, temporary credentials renewed "
                + "5 minutes before they expire (502 credential_unavailable if no link gives credentials)"
        }
    }

    /// What `check` can see wrong with a computed secret without fetching: a private key that is
    /// not one (read from its secret), an AWS profile that does not exist. The key's bytes never
    /// leave this function.
    static func problems(_ config: ProxyConfiguration, environment: [String: String] = ProcessEnvironment.current()) -> [String] {
        var found: [String] = []
        for (name, recipe) in config.computed.sorted(by: { $0.key < $1.key }) {
            for key in recipe.privateKeys {
                guard let source = config.secrets[key] else { continue }
                let store = SecretStore(
                    sources: [key: source], storeDirectory: config.storeDirectory, configPath: config.sourcePath, privateKeys: [key])
                // A key that cannot be read is already named by Preflight.
                guard (try? store.load()) != nil, let pem = store.value(of: key) else { continue }
                do {
                    let signingKey = try SigningKey.parsePEM(pem.exposedBytes)
                    if case .githubApp = recipe, signingKey.algorithm != .rs256 {
                        found.append("secret '\(key)' (private key of '\(name)'): \(SigningKeyError.gitHubAppNeedsRSA)")
                    }
                } catch {
                    found.append("secret '\(key)' (private key of '\(name)'): \(error); requests needing '\(name)' would get 502")
                }
            }
            if case .awsChain(let selection) = recipe,
                let failure = AWSCredentialChain.validate(selection: selection, environment: environment, readFile: readSmallFile)
            {
                found.append("\(selection): \(failure.description); requests signed with it would get 502")
            }
        }
        return found
    }

    static func readSmallFile(_ path: String) -> [UInt8]? {
        try? SmallFile.read(path, limit: AWSSharedConfigFile.maxFileBytes).get()
    }
}
