import HTTP1Codec
import PosixSupport
import ProxyCore
import ScopePolicy

extension TokenExchange: FetchProcedure {}

/// The procedures of each kind of computed secret, on the fetcher's loop. Each sets the run's
/// current step and ends the run through `finished` exactly once.
extension TokenFetcher {
    /// One HTTP request on this loop (connect, verified TLS, bounded response), the building block
    /// of every kind that asks a server.
    func exchange(_ run: FetchRun, _ origin: Origin, _ request: [UInt8], then: @escaping (TokenExchange.Outcome) -> Void) {
        let exchange = TokenExchange(worker: loop.worker, origin: origin, request: request, responseLimit: responseLimit)
        run.step = exchange
        exchange.start(finish: then)
    }

    // MARK: OAuth2 (RFC 6749 §4.4, §6; RFC 7523 §2.1, §2.2)

    func startOAuth2(_ run: FetchRun, _ spec: OAuth2Spec) {
        var clientSecret: SecretValue?
        if let name = spec.clientSecret {
            guard let value = secrets.value(of: name) else {
                return finished(run, .failure(.secretUnavailable(name)))
            }
            clientSecret = value
        }
        var refreshToken: SecretValue?
        if case .refreshToken(let name) = spec.grant {
            guard let current = currentRefreshToken(name) else {
                return finished(run, .failure(.secretUnavailable(name)))
            }
            refreshToken = current
        }
        let assertions: OAuth2TokenRequest.Assertions
        switch signAssertions(spec) {
        case .success(let signed): assertions = signed
        case .failure(let reason):
            return finished(run, .failure(reason))
        }
        let request = OAuth2TokenRequest.make(spec, clientSecret: clientSecret, refreshToken: refreshToken, assertions: assertions)
        exchange(run, spec.endpoint, request.wireBytes) { [unowned self] outcome in
            let result = outcome.flatMap { response in OAuth2TokenResponse.parse(status: response.status, body: response.body) }
            finished(
                run,
                result.map { grant in
                    var obtained = Obtained(grant: grant)
                    if case .refreshToken(let name) = spec.grant, let rotated = grant.refreshToken, rotated != refreshToken {
                        obtained.parts.append((name, rotated))
                        keepRotated(name, rotated, replacing: refreshToken, for: run.job)
                    }
                    return obtained
                })
        }
    }

    /// The JWTs a token request carries (`jwt_bearer`'s assertion, `private_key_jwt`'s client assertion).
    func signAssertions(_ spec: OAuth2Spec) -> Result<OAuth2TokenRequest.Assertions, TokenFailure.Reason> {
        let needsKey = !spec.privateKeys.isEmpty
        guard needsKey else { return .success(OAuth2TokenRequest.Assertions()) }
        return .failure(.keyUnusable("JWT signing is not wired yet"))
    }

    // MARK: A command (docs/credentials.md, "A command")

    func startCommand(_ run: FetchRun, _ spec: CommandSecretSpec) {
        finished(run, .failure(.commandNotStarted("command secrets are not wired yet")))
    }

    // MARK: A GitHub App (docs/credentials.md, "A GitHub App")

    func startGitHubApp(_ run: FetchRun, _ spec: GitHubAppSpec) {
        finished(run, .failure(.keyUnusable("GitHub App tokens are not wired yet")))
    }

    // MARK: The AWS chain (docs/credentials.md, "The AWS chain")

    func startAWSChain(_ run: FetchRun, _ selection: AWSCredentialSelection) {
        finished(run, .failure(.awsChain("the AWS chain is not wired yet")))
    }
}
