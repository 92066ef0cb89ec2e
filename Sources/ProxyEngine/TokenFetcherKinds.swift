import Digests
import HTTP1Codec
import PosixSupport
import ProxyCore
import Redaction
import ScopePolicy

extension TokenExchange: FetchProcedure {}

/// The procedures of each kind of computed secret, on the fetcher's loop. Each sets the run's
/// current step and ends the run through `finished` exactly once.
extension TokenFetcher {
    /// One HTTP request on this loop (connect, verified TLS, bounded response), the building block
    /// of every kind that asks a server.
    func exchange(
        _ run: FetchRun, _ origin: Origin, _ request: [UInt8], timeoutMilliseconds: Int? = nil,
        then: @escaping (TokenExchange.Outcome) -> Void
    ) {
        let exchange = TokenExchange(
            worker: loop.worker, origin: origin, request: request, responseLimit: responseLimit, timeoutMilliseconds: timeoutMilliseconds)
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

    /// The JWTs a token request carries (`jwt_bearer`'s assertion, `private_key_jwt`'s client
    /// assertion), signed now with a fresh `jti` (RFC 7523 §3: a server may refuse a replay).
    func signAssertions(_ spec: OAuth2Spec) -> Result<OAuth2TokenRequest.Assertions, TokenFailure.Reason> {
        var assertions = OAuth2TokenRequest.Assertions()
        let now = wallClock()
        if case .jwtBearer(let bearer) = spec.grant {
            switch signingKey(bearer.key) {
            case .failure(let reason): return .failure(reason)
            case .success(let (key, algorithm)):
                do {
                    assertions.grant = try JWTBearer.assertion(
                        issuer: bearer.issuer, subject: bearer.subject, audience: bearer.audience ?? spec.tokenURL, scope: spec.scope,
                        key: key, algorithm: algorithm, keyID: bearer.key.keyID, now: now, jti: JWTBearer.jti(random: RandomBytes.generate(16)))
                } catch { return .failure(.keyUnusable(error.description)) }
            }
        }
        if case .privateKeyJWT(let keySpec) = spec.clientAuthentication, let clientID = spec.clientID {
            switch signingKey(keySpec) {
            case .failure(let reason): return .failure(reason)
            case .success(let (key, algorithm)):
                do {
                    let fields = try JWTBearer.clientAssertionFields(
                        clientID: clientID, tokenURL: spec.tokenURL, key: key, algorithm: algorithm, keyID: keySpec.keyID, now: now,
                        jti: JWTBearer.jti(random: RandomBytes.generate(16)))
                    assertions.client = fields.first { $0.0 == "client_assertion" }.map { String(decoding: $0.1, as: UTF8.self) }
                } catch { return .failure(.keyUnusable(error.description)) }
            }
        }
        return .success(assertions)
    }

    /// The private key a JWT is signed with, read from its secret now (a rotated key file takes
    /// effect on the next fetch), and the algorithm: the configured one, or the key's own.
    func signingKey(_ spec: JWTKeySpec) -> Result<(SigningKey, JWTAlgorithm), TokenFailure.Reason> {
        guard let pem = secrets.value(of: spec.privateKey) else { return .failure(.secretUnavailable(spec.privateKey)) }
        let key: SigningKey
        do { key = try SigningKey.parsePEM(pem.exposedBytes) } catch { return .failure(.keyUnusable(error.description)) }
        let algorithm = spec.algorithm.flatMap(JWTAlgorithm.init(rawValue:)) ?? key.algorithm
        guard algorithm == key.algorithm else {
            return .failure(.keyUnusable(SigningKeyError.algorithmMismatch(key: key.algorithm, requested: algorithm).description))
        }
        return .success((key, algorithm))
    }

    // MARK: A command (docs/credentials.md, "A command")

    func startCommand(_ run: FetchRun, _ spec: CommandSecretSpec) {
        runCommand(
            run, argv: spec.argv, environment: CommandEnvironment.minimal(from: environment, passing: spec.environment),
            timeoutMilliseconds: spec.timeoutMilliseconds
        ) { [unowned self] result in
            finished(
                run,
                result.flatMap { stdout in
                    switch CommandOutput.parse(stdout, now: wallClock()) {
                    case .success(let credential):
                        CommandValues.record(credential.value, expiresIn: credential.expiresIn, ttlSeconds: spec.ttlSeconds)
                        return .success(Obtained(grant: TokenGrant(value: credential.value, expiresIn: credential.expiresIn)))
                    case .failure(let problem): return .failure(.invalidOutput(problem.description))
                    }
                })
        }
    }

    /// Runs a program for a credential (a `command:` secret, an AWS `credential_process`): its
    /// stdout on success; on failure a typed reason, and stderr's first line in the error log with
    /// every secret value the proxy knows (and every value a command printed that may still be
    /// valid) replaced.
    func runCommand(
        _ run: FetchRun, argv: [String], environment: [String: String], timeoutMilliseconds: Int,
        then: @escaping (Result<[UInt8], TokenFailure.Reason>) -> Void
    ) {
        // Every value is replaced in stderr's line as the command wrote it, before the line is cut
        // to 200 bytes and made printable (a value straddling the cut would otherwise leave its
        // first bytes in the log).
        let runner = CommandRunner(
            worker: loop.worker, argv: argv, environment: environment, timeoutMilliseconds: timeoutMilliseconds,
            stderrScrub: { [secrets] line in
                let known = (Array(secrets.currentValues.values) + CommandValues.current).map(\.exposedBytes)
                return Tripwire(secrets: known).scrub(line).line
            })
        run.step = runner
        let program = TokenProvider.command(CommandSecretSpec(argv: argv).programName).description
        runner.start { [unowned self] outcome in
            switch outcome {
            case .success(let output):
                then(.success(output.stdout))
            case .failure(let failure):
                var fields = [("secret", run.job.secret), ("command", program), ("reason", failure.code)]
                if case .exited(_, let line?) = failure {
                    let known = (Array(secrets.currentValues.values) + CommandValues.current).map(\.exposedBytes)
                    fields.append(("stderr", Tripwire(secrets: known).scrub(line).line))
                }
                Diagnostics.error("credential_command_failed", fields)
                then(.failure(Self.reason(failure)))
            }
        }
    }

    static func reason(_ failure: CommandRunFailure) -> TokenFailure.Reason {
        switch failure {
        case .notStarted(let why): .commandNotStarted(why)
        case .exited(let status, _): .commandFailed(status: status)
        case .signaled(let signal): .commandFailed(status: -signal)
        case .timedOut(let milliseconds): .commandTimedOut(milliseconds: milliseconds)
        case .outputTooLarge(let limit): .invalidOutput("more than \(limit) bytes")
        }
    }

    // MARK: A GitHub App (docs/credentials.md, "A GitHub App")

    func startGitHubApp(_ run: FetchRun, _ spec: GitHubAppSpec) {
        let key: SigningKey
        switch signingKey(JWTKeySpec(privateKey: spec.privateKey, algorithm: JWTAlgorithm.rs256.rawValue)) {
        case .success(let (signing, _)): key = signing
        case .failure(let reason): return finished(run, .failure(reason))
        }
        let now = wallClock()
        let jwt: String
        do { jwt = try GitHubAppJWT.make(appID: spec.appID, key: key, now: now) } catch {
            return finished(run, .failure(.keyUnusable(error.description)))
        }
        let request = GitHubInstallationTokenRequest.make(
            api: spec.api, pathPrefix: spec.pathPrefix, installationID: spec.installationID, jwt: jwt,
            permissions: spec.permissions.map { ($0.name, $0.access) }, repositories: spec.repositories)
        exchange(run, spec.api, request) { [unowned self] outcome in
            let result = outcome.flatMap { response in GitHubInstallationTokenResponse.parse(status: response.status, body: response.body) }
            finished(
                run,
                result.map { answer in
                    // The time left, bounded before it is an Int: an expires_at in the past is 0 (renewed at once).
                    let left = min(max(0, answer.expiresAt - wallClock()), Int64(TokenCachePolicy.maxExpiresInSeconds))
                    return Obtained(grant: TokenGrant(value: answer.token, expiresIn: Int(left)))
                })
        }
    }

    // MARK: The AWS chain (docs/credentials.md, "The AWS chain")

    func startAWSChain(_ run: FetchRun, _ selection: AWSCredentialSelection) {
        // A fresh chain per fetch: the files (and the web identity token) are read now.
        let chain = AWSChainWalk(
            AWSCredentialChain(
                selection: selection, environment: environment,
                readFile: { path in try? SmallFile.read(path, limit: AWSSharedConfigFile.maxFileBytes).get() }, now: wallClock()))
        advance(run, chain, selection, chain.chain.start())
    }

    /// One link of the chain: a request, a `credential_process`, or the end.
    private func advance(_ run: FetchRun, _ walk: AWSChainWalk, _ selection: AWSCredentialSelection, _ step: AWSChainStep) {
        switch step {
        case .send(let request):
            exchange(run, request.origin, request.bytes, timeoutMilliseconds: request.timeoutMilliseconds) { [unowned self] outcome in
                let input: AWSChainInput =
                    switch outcome {
                    case .success(let response): .response(status: response.status, body: response.body)
                    case .failure(let reason): .requestFailed(reason)
                    }
                advance(run, walk, selection, walk.chain.resume(input))
            }
        case .run(let argv):
            // credential_process gets the minimal environment plus the AWS_* variables it may read.
            let variables = environment.keys.filter { $0.hasPrefix("AWS_") }
            runCommand(
                run, argv: argv, environment: CommandEnvironment.minimal(from: environment, passing: variables),
                timeoutMilliseconds: CommandSecretSpec.defaultTimeoutMilliseconds
            ) { [unowned self] result in
                let input: AWSChainInput =
                    switch result {
                    case .success(let stdout): .commandOutput(stdout)
                    case .failure(let reason): .commandFailed(reason.explanation)
                    }
                advance(run, walk, selection, walk.chain.resume(input))
            }
        case .finished(let credentials, let source):
            let parts = selection.partNames
            var obtained = Obtained(
                grant: TokenGrant(
                    value: credentials.packed,
                    expiresIn: credentials.expiration.map { Int(min(max(0, $0 - wallClock()), Int64(TokenCachePolicy.maxExpiresInSeconds))) }),
                parts: [(parts.accessKeyID, credentials.accessKeyID), (parts.secretAccessKey, credentials.secretAccessKey)],
                watchValueItself: false)
            if let token = credentials.sessionToken { obtained.parts.append((parts.sessionToken, token)) }
            Diagnostics.info("aws_credentials", [("secret", run.job.secret), ("source", source.description)])
            finished(run, .success(obtained))
        case .failed(let failure):
            finished(run, .failure(.awsChain(failure.description)))
        }
    }
}

/// The AWS chain of one fetch, shared by the callbacks of its links (a struct mutated as it walks).
private final class AWSChainWalk {
    var chain: AWSCredentialChain
    init(_ chain: AWSCredentialChain) { self.chain = chain }
}

extension CommandRunner: FetchProcedure {}

/// Every value a command printed that may still be valid, process-wide: a failing run's stderr
/// line is scrubbed of them, since a helper often names the value it gave before ("token X
/// expired"). Neither the cache (it holds no value while a fetch runs) nor the fetcher (a reload
/// makes a new one) can say it. Each is kept for its validity (`expires_in`, else its ttl or
/// `TokenCachePolicy.unknownExpiryMilliseconds`, as the scrub keeps a replaced token), at most
/// `limit` of them, the oldest dropped first.
private enum CommandValues {
    private struct Entry {
        let value: SecretValue
        let until: UInt64
    }

    private static let entries = Locked<[Entry]>([])
    static let limit = 64

    static func record(_ value: SecretValue, expiresIn: Int?, ttlSeconds: Int) {
        let now = monotonicMilliseconds()
        // A value without an expiry is used for its ttl, and may work for longer. Every term is
        // bounded (a year at most, the config's ttl at most a day, milliseconds since boot).
        let policy = TokenCachePolicy()
        let validity =
            expiresIn == nil ? max(policy.unknownExpiryMilliseconds, UInt64(max(0, ttlSeconds)) * 1000) : policy.validity(expiresIn: expiresIn)
        let until = now + validity
        entries.withLock { entries in
            entries.removeAll { $0.until <= now || $0.value == value }
            entries.append(Entry(value: value, until: until))
            if entries.count > limit { entries.removeFirst(entries.count - limit) }
        }
    }

    static var current: [SecretValue] {
        let now = monotonicMilliseconds()
        return entries.withLock { entries in entries.filter { $0.until > now }.map(\.value) }
    }
}
