import HTTP1Codec
import PosixSupport
import ProxyCore
import ScopePolicy

/// Performs token requests on a loop thread of its own, so no worker loop ever waits on a token
/// endpoint, and file writes (rotated refresh tokens) happen off the workers too. Started fetches
/// always end: by the response, a timeout, or `stop` (which fails them).
final class TokenFetcher: @unchecked Sendable {
    /// A fetch to run: which cache's ticket it completes.
    struct Job: Sendable {
        let secret: String
        let spec: OAuth2Spec
        let cache: OAuth2TokenCache
        let ticket: TokenFetchTicket
    }

    /// A refresh token the endpoint rotated, used in place of the stored value until the store
    /// shows something other than the value it replaced (our write, read back; or an operator's).
    private struct Rotation {
        let replaced: SecretValue?
        let value: SecretValue
    }

    private let loop: MailboxLoop
    private let secrets: SecretLookup
    private let sink: RefreshTokenSink?
    private let metrics: Metrics
    private let responseLimit: Int
    private let clock: @Sendable () -> UInt64
    private let observer: TokenObserver?
    // Touched only on the loop's thread:
    private var exchanges: [ObjectIdentifier: (exchange: TokenExchange, job: Job)] = [:]
    private var rotations: [String: Rotation] = [:]

    init(
        configuration: EngineConfiguration, secrets: SecretLookup, sink: RefreshTokenSink?, responseLimit: Int,
        clock: @escaping @Sendable () -> UInt64, observer: TokenObserver?
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
    }

    /// Thread-safe. Fails the job at once when the fetcher has stopped.
    func fetch(_ job: Job) {
        guard loop.mailbox.post({ [self] in start(job) }) else {
            complete(job, .failure(TokenFailure(secret: job.secret, endpoint: job.spec.endpoint, reason: .refused)))
            return
        }
    }

    /// Fails the fetches in flight (their waiters hear about it) and stops the thread.
    func stop() {
        loop.stop { [self] in
            for (_, entry) in exchanges {
                entry.exchange.cancel()
                complete(entry.job, .failure(TokenFailure(secret: entry.job.secret, endpoint: entry.job.spec.endpoint, reason: .refused)))
            }
            exchanges.removeAll()
        }
    }

    // MARK: On the loop's thread

    private func start(_ job: Job) {
        let spec = job.spec
        guard let clientSecret = secrets.value(of: spec.clientSecret) else {
            complete(job, .failure(TokenFailure(secret: job.secret, endpoint: spec.endpoint, reason: .secretUnavailable(spec.clientSecret))))
            return
        }
        var refreshToken: SecretValue?
        if case .refreshToken(let name) = spec.grant {
            guard let current = currentRefreshToken(name) else {
                complete(job, .failure(TokenFailure(secret: job.secret, endpoint: spec.endpoint, reason: .secretUnavailable(name))))
                return
            }
            refreshToken = current
        }
        let request = OAuth2TokenRequest.make(spec, clientSecret: clientSecret, refreshToken: refreshToken)
        let exchange = TokenExchange(worker: loop.worker, origin: spec.endpoint, request: request.wireBytes, responseLimit: responseLimit)
        let key = ObjectIdentifier(exchange)
        exchanges[key] = (exchange, job)
        exchange.start { [unowned self] outcome in
            self.exchangeEnded(key: key, outcome: outcome, refreshTokenSent: refreshToken)
        }
    }

    private func exchangeEnded(key: ObjectIdentifier, outcome: TokenExchange.Outcome, refreshTokenSent: SecretValue?) {
        guard let (_, job) = exchanges.removeValue(forKey: key) else { return }
        let failure = { (reason: TokenFailure.Reason) in TokenFailure(secret: job.secret, endpoint: job.spec.endpoint, reason: reason) }
        let result: Result<OAuth2TokenGrant, TokenFailure>
        switch outcome {
        case .failure(let reason):
            result = .failure(failure(reason))
        case .success(let response):
            result = OAuth2TokenResponse.parse(status: response.status, body: response.body).mapError(failure)
        }
        if case .success(let grant) = result {
            // The tripwire learns a value before any request can carry it.
            observer?(job.secret, grant.accessToken, policyValidity(grant.expiresIn))
            if case .refreshToken(let name) = job.spec.grant, let rotated = grant.refreshToken, rotated != refreshTokenSent {
                observer?(name, rotated, nil)
                keepRotated(name, rotated, replacing: refreshTokenSent, for: job)
            }
        }
        complete(job, result)
    }

    /// RFC 6749 §6: a new refresh token replaces the old one, which the server may have revoked.
    private func keepRotated(_ name: String, _ value: SecretValue, replacing old: SecretValue?, for job: Job) {
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

    private func currentRefreshToken(_ name: String) -> SecretValue? {
        let stored = secrets.value(of: name)
        if let rotation = rotations[name] {
            if stored == rotation.replaced { return rotation.value }
            rotations[name] = nil
        }
        return stored
    }

    /// Any thread: hands the result to the cache and wakes every waiter (each on its own loop).
    private func complete(_ job: Job, _ result: Result<OAuth2TokenGrant, TokenFailure>) {
        switch result {
        case .success: metrics.increment(.tokenFetch(secret: job.secret, failure: nil))
        case .failure(let failure): metrics.increment(.tokenFetch(secret: job.secret, failure: failure.reason))
        }
        let (waiters, delivered) = job.cache.complete(job.ticket, result, now: clock())
        for waiter in waiters { waiter.deliver(delivered) }
    }
}

/// Told every value a token source obtains, before any request can carry it: the secret's name,
/// the value, and how many milliseconds it stays valid (nil: the endpoint did not say).
public typealias TokenObserver = @Sendable (_ secret: String, _ value: SecretValue, _ validForMilliseconds: UInt64?) -> Void

/// `expires_in` as milliseconds of validity (the parser bounds it to a year).
func policyValidity(_ expiresIn: Int?) -> UInt64? {
    expiresIn.map { TokenCachePolicy().validity(expiresIn: $0) }
}
