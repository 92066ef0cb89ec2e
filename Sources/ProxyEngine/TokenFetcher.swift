import HTTP1Codec
import PosixSupport
import ProxyCore
import ScopePolicy

/// Obtains computed secrets on a loop thread of its own, so no worker loop ever waits on a token
/// endpoint, a command or the AWS chain, and file writes (rotated refresh tokens) happen off the
/// workers too. Each kind of source is a procedure on this loop (`TokenFetcher+Kinds.swift`);
/// started fetches always end: by their answer, a timeout, or `stop` (which fails them).
final class TokenFetcher: @unchecked Sendable {
    /// A fetch to run: which cache's ticket it completes.
    struct Job: Sendable {
        let secret: String
        let recipe: ComputedSecret
        let provider: TokenProvider
        let cache: OAuth2TokenCache
        let ticket: TokenFetchTicket
    }

    /// What a procedure obtained: the value, its lifetime, and the parts the scrub, the guard and
    /// the tripwire must know (a rotated refresh token, the AWS keys one by one).
    struct Obtained {
        let grant: TokenGrant
        /// (name, value) told to the observer before any waiter gets the value; the value itself
        /// under the secret's own name unless `watchValueItself` is false (AWS: only its parts).
        var parts: [(String, SecretValue)] = []
        var watchValueItself = true
    }

    /// A refresh token the endpoint rotated, used in place of the stored value until the store
    /// shows something other than the value it replaced (our write, read back; or an operator's).
    private struct Rotation {
        let replaced: SecretValue?
        let value: SecretValue
    }

    let loop: MailboxLoop
    let secrets: SecretLookup
    private let sink: RefreshTokenSink?
    private let metrics: Metrics
    let responseLimit: Int
    private let clock: @Sendable () -> UInt64
    /// Seconds since the epoch: a stated `expires_at` becomes a lifetime against it.
    let wallClock: @Sendable () -> Int64
    /// The proxy's environment as commands and the AWS chain read it (tests give their own).
    let environment: [String: String]
    private let observer: TokenObserver?
    // Touched only on the loop's thread:
    private var inFlight: [ObjectIdentifier: FetchRun] = [:]
    private var rotations: [String: Rotation] = [:]

    init(
        configuration: EngineConfiguration, secrets: SecretLookup, sink: RefreshTokenSink?, responseLimit: Int,
        clock: @escaping @Sendable () -> UInt64, wallClock: @escaping @Sendable () -> Int64, environment: [String: String],
        observer: TokenObserver?
    ) throws(EngineError) {
        self.observer = observer
        var configuration = configuration
        if configuration.tls == nil { configuration.tls = try? TLSContexts(authority: nil, upstreamCA: nil) }
        loop = try MailboxLoop(name: "scopeproxy-token", configuration: configuration)
        self.secrets = secrets
        self.sink = sink
        metrics = configuration.metrics
        self.responseLimit = responseLimit
        self.clock = clock
        self.wallClock = wallClock
        self.environment = environment
    }

    /// Thread-safe. Fails the job at once when the fetcher has stopped.
    func fetch(_ job: Job) {
        guard loop.mailbox.post({ [self] in start(job) }) else {
            complete(job, .failure(TokenFailure(secret: job.secret, provider: job.provider, reason: .refused)))
            return
        }
    }

    /// Fails the fetches in flight (their waiters hear about it) and stops the thread.
    func stop() {
        loop.stop { [self] in
            for (_, run) in inFlight {
                run.cancelBeforeLoopStops()
                complete(run.job, .failure(TokenFailure(secret: run.job.secret, provider: run.job.provider, reason: .refused)))
            }
            inFlight.removeAll()
        }
    }

    // MARK: On the loop's thread

    private func start(_ job: Job) {
        // Tracked before anything starts: a step may end inside its own start (a refused address).
        let run = FetchRun(job)
        inFlight[ObjectIdentifier(run)] = run
        switch job.recipe {
        case .oauth2(let spec): startOAuth2(run, spec)
        case .command(let spec): startCommand(run, spec)
        case .githubApp(let spec): startGitHubApp(run, spec)
        case .awsChain(let selection): startAWSChain(run, selection)
        }
    }

    /// A run's end: forgotten, its result handed on. Exactly once per run; later calls (a step
    /// answering after `stop` failed the run) change nothing. Loop thread.
    func finished(_ run: FetchRun, _ result: Result<Obtained, TokenFailure.Reason>) {
        guard inFlight.removeValue(forKey: ObjectIdentifier(run)) != nil else { return }
        run.step = nil
        finish(run.job, result)
    }

    private func finish(_ job: Job, _ result: Result<Obtained, TokenFailure.Reason>) {
        switch result {
        case .failure(let reason):
            // The request's 502 carries only the code; the operator gets the proxy's own words for why
            // (at most once a second per secret: the cache's retry floor).
            Diagnostics.error(
                "credential_fetch_failed",
                [("secret", job.secret), ("source", job.provider.description), ("reason", reason.code), ("detail", reason.explanation)])
            complete(job, .failure(TokenFailure(secret: job.secret, provider: job.provider, reason: reason)))
        case .success(let obtained):
            // The tripwire, the scrub and the guard learn every value before any request can carry it.
            let validity = policyValidity(obtained.grant.expiresIn)
            if obtained.watchValueItself { observer?(job.secret, obtained.grant.value, validity) }
            for (name, value) in obtained.parts { observer?(name, value, validity) }
            complete(job, .success(obtained.grant))
        }
    }

    // MARK: Refresh-token rotation (OAuth2)

    /// RFC 6749 §6: a new refresh token replaces the old one, which the server may have revoked.
    func keepRotated(_ name: String, _ value: SecretValue, replacing old: SecretValue?, for job: Job) {
        rotations[name] = Rotation(replaced: secrets.value(of: name) ?? old, value: value)
        let outcome = sink?.storeRotatedRefreshToken(secret: name, value: value) ?? .notAStoreSecret
        switch outcome {
        case .persisted:
            metrics.increment(.refreshTokenRotation(secret: job.secret, .persisted))
        case .notAStoreSecret:
            metrics.increment(.refreshTokenRotation(secret: job.secret, .memoryOnly))
            Diagnostics.info(
                "refresh_token_rotated", [("secret", name), ("note", "not a store secret: the new refresh token is kept in memory only")])
        case .failed(let why):
            metrics.increment(.refreshTokenRotation(secret: job.secret, .writeFailed))
            Diagnostics.error("refresh_token_not_saved", [("secret", name), ("reason", why)])
        }
    }

    func currentRefreshToken(_ name: String) -> SecretValue? {
        let stored = secrets.value(of: name)
        if let rotation = rotations[name] {
            if stored == rotation.replaced { return rotation.value }
            rotations[name] = nil
        }
        return stored
    }

    /// Any thread: hands the result to the cache and wakes every waiter (each on its own loop).
    private func complete(_ job: Job, _ result: Result<TokenGrant, TokenFailure>) {
        switch result {
        case .success: metrics.increment(.tokenFetch(secret: job.secret, failure: nil))
        case .failure(let failure): metrics.increment(.tokenFetch(secret: job.secret, failure: failure.reason))
        }
        let (waiters, delivered) = job.cache.complete(job.ticket, result, now: clock())
        for waiter in waiters { waiter.deliver(delivered) }
    }
}

/// Something a fetch is waiting on, on the fetcher's loop (a token request, a command): `cancel`
/// stops it without an answer; `cancelBeforeLoopStops` also leaves nothing for the loop to finish
/// (a killed command is reaped at once).
protocol FetchProcedure: AnyObject {
    func cancel()
    func cancelBeforeLoopStops()
}

extension FetchProcedure {
    func cancelBeforeLoopStops() { cancel() }
}

/// One fetch on the fetcher's loop, from its start to `finished`: the step it waits on now (an
/// AWS chain or a GitHub App walks several), which `stop` cancels.
final class FetchRun {
    let job: TokenFetcher.Job
    var step: (any FetchProcedure)?

    init(_ job: TokenFetcher.Job) { self.job = job }

    func cancel() {
        step?.cancel()
        step = nil
    }

    func cancelBeforeLoopStops() {
        step?.cancelBeforeLoopStops()
        step = nil
    }
}

/// Told every value a token source obtains, before any request can carry it: the secret's name,
/// the value, and how many milliseconds it stays valid (nil: the endpoint did not say).
public typealias TokenObserver = @Sendable (_ secret: String, _ value: SecretValue, _ validForMilliseconds: UInt64?) -> Void

/// `expires_in` as milliseconds of validity (the parser bounds it to a year).
func policyValidity(_ expiresIn: Int?) -> UInt64? {
    expiresIn.map { TokenCachePolicy().validity(expiresIn: $0) }
}
