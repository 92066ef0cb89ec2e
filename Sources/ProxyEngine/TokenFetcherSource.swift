import HTTP1Codec
import PosixSupport
import ProxyCore
import ScopePolicy

#if canImport(Glibc)
    import Glibc
#endif

/// The computed secrets of a configuration (OAuth2 tokens, commands, GitHub App tokens, AWS chain
/// credentials): one single-flight cache each, and the fetcher that obtains their values. Shared
/// by every worker; what a worker asks for, it is answered on its own loop thread.
///
/// Wiring (the composition root and the worker):
/// - `CredentialSources(recipes:secrets:sink:configuration:observer:)` once per configuration, with
///   the secret store as `secrets` and `sink`, and the tripwire's feed as `observer`; `stop()` at shutdown.
/// - Each `Worker` owns an `EventMailbox(base:)` made after its base, and closes it (`close()`) in
///   `deinit` before `event_base_free`.
/// - A request that needs a value calls `acquire(secret:mailbox:onReady:)` on its worker's thread;
///   `onReady` runs on that thread (at once when cached). A 401 from an origin the value went to:
///   `markStale(secret:token:)`.
public final class CredentialSources: Sendable {
    private struct Entry: Sendable {
        let recipe: ComputedSecret
        let provider: TokenProvider
        let cache: OAuth2TokenCache
    }

    private let entries: [String: Entry]
    private let names: Set<String>
    private let fetcher: TokenFetcher
    private let clock: @Sendable () -> UInt64
    private let waiterIDs = Locked<UInt64>(0)

    /// `recipes`: the computed secrets by name. `secrets`: where their inputs are read (client
    /// secrets, refresh tokens, private keys: the secret store). `sink`: where rotated refresh
    /// tokens are saved (the store; nil keeps them in memory). `policy`: the OAuth2 tokens' cache
    /// policy (the other kinds derive theirs: `cachePolicy(for:)`). `clock`: monotonic
    /// milliseconds, `wallClock`: seconds since the epoch (tests move them). `environment`: what
    /// commands and the AWS chain read (nil: the process's). `observer`: told every value obtained
    /// (and every rotated refresh token, every AWS key part) with how long it stays valid, on the
    /// fetcher's thread, before any waiter gets it: the log tripwire must know them. The fetcher's
    /// thread starts now; nothing is fetched until a request needs a value.
    public init(
        recipes: [String: ComputedSecret], secrets: SecretLookup, sink: RefreshTokenSink?, configuration: EngineConfiguration,
        policy: TokenCachePolicy = TokenCachePolicy(), responseLimit: Int = OAuth2TokenResponseReader.defaultLimit,
        clock: (@Sendable () -> UInt64)? = nil, wallClock: (@Sendable () -> Int64)? = nil, environment: [String: String]? = nil,
        observer: TokenObserver? = nil
    ) throws(EngineError) {
        let clock = clock ?? { monotonicMilliseconds() }
        entries = Dictionary(
            uniqueKeysWithValues: recipes.map { name, recipe in
                (
                    name,
                    Entry(
                        recipe: recipe, provider: Self.provider(of: recipe),
                        cache: OAuth2TokenCache(secret: name, policy: Self.cachePolicy(for: recipe, oauth2: policy)))
                )
            })
        names = Set(recipes.keys)
        fetcher = try TokenFetcher(
            configuration: configuration, secrets: secrets, sink: sink, responseLimit: responseLimit, clock: clock,
            wallClock: wallClock ?? { Int64(time(nil)) }, environment: environment ?? ProcessEnvironment.current(), observer: observer)
        self.clock = clock
    }

    /// OAuth2 tokens only (tests, and configurations before other kinds existed).
    public convenience init(
        specs: [String: OAuth2Spec], secrets: SecretLookup, sink: RefreshTokenSink?, configuration: EngineConfiguration,
        policy: TokenCachePolicy = TokenCachePolicy(), responseLimit: Int = OAuth2TokenResponseReader.defaultLimit,
        clock: (@Sendable () -> UInt64)? = nil, observer: TokenObserver? = nil
    ) throws(EngineError) {
        try self.init(
            recipes: specs.mapValues(ComputedSecret.oauth2), secrets: secrets, sink: sink, configuration: configuration, policy: policy,
            responseLimit: responseLimit, clock: clock, observer: observer)
    }

    /// How long each kind's values are trusted (docs/credentials.md): OAuth2 tokens as configured
    /// (renewed 30 s before `expires_in`); a command's for its `ttl` when it states no expiry;
    /// GitHub installation tokens and AWS temporary credentials renewed 5 minutes before they
    /// expire, as GitHub's and the AWS SDKs' own clients do.
    static func cachePolicy(for recipe: ComputedSecret, oauth2: TokenCachePolicy) -> TokenCachePolicy {
        var policy = TokenCachePolicy()
        switch recipe {
        case .oauth2: return oauth2
        case .command(let spec): policy.defaultLifetimeMilliseconds = UInt64(spec.ttlSeconds) * 1000
        case .githubApp, .awsChain:
            policy.marginMilliseconds = 300_000
            // Credentials with 4 minutes left are inside the margin: fetched again (after the retry
            // floor), not used for 2 more minutes.
            policy.halvesShortLifetimes = false
        }
        return policy
    }

    static func provider(of recipe: ComputedSecret) -> TokenProvider {
        switch recipe {
        case .oauth2(let spec): .endpoint(spec.endpoint)
        case .command(let spec): .command(spec.programName)
        case .githubApp(let spec): .endpoint(spec.api)
        case .awsChain(let selection): .awsChain(selection)
        }
    }

    /// Fails fetches in flight (their waiters are answered) and ends the fetcher's thread.
    public func stop() { fetcher.stop() }

    deinit { fetcher.stop() }

    /// Where `secret`'s values come from (for `explain` and the 502 that names it).
    public func provider(of secret: String) -> TokenProvider? { entries[secret]?.provider }

    /// Asks for `secret`'s value on a worker's loop thread, whose mailbox is `mailbox`. `onReady`
    /// runs on that thread exactly once: before this returns when a valid value is cached (or the
    /// last fetch failed less than the retry floor ago), otherwise from the mailbox once the one
    /// fetch in flight ends. Returns nil (and never calls `onReady`) when `secret` is not computed here.
    @discardableResult
    public func acquire(
        secret: String, mailbox: any TokenMailbox,
        onReady: @escaping (Result<AccessToken, TokenFailure>) -> Void
    ) -> TokenRequest? {
        guard let entry = entries[secret] else { return nil }
        // The callback belongs to the caller's thread; it crosses threads only to be posted back.
        let callback = LoopBound(onReady)
        let id = waiterIDs.withLock { next in
            next += 1
            return next
        }
        let waiter = TokenWaiter(id: id) { result in
            mailbox.post { callback.value(result) }
        }
        switch entry.cache.acquire(now: clock(), waiter: waiter) {
        case .ready(let token):
            onReady(.success(token))
            return .answered
        case .failed(let failure):
            onReady(.failure(failure))
            return .answered
        case .wait:
            return .waiting(waiterID: id)
        case .fetch(let ticket):
            fetcher.fetch(
                TokenFetcher.Job(secret: secret, recipe: entry.recipe, provider: entry.provider, cache: entry.cache, ticket: ticket))
            return .waiting(waiterID: id)
        }
    }

    /// A waiter gone before its answer (its client closed): the fetch in flight drops its callback
    /// (and the connection the callback could reach). The fetch itself goes on: other waiters and
    /// the next request want the value too. Loop thread of the waiter.
    public func withdraw(secret: String, waiterID: UInt64) {
        entries[secret]?.cache.withdraw(waiterID: waiterID)
    }

    /// A 401 came back from an origin `token` (of `secret`) was sent to: if it is still the
    /// current value, the next request obtains a new one. Any thread.
    @discardableResult
    public func markStale(secret: String, token: AccessToken) -> Bool {
        entries[secret]?.cache.markStale(token, now: clock()) ?? false
    }

    /// The values requests would be given now (the log tripwire's list).
    public var currentValues: [SecretValue] { entries.values.compactMap { $0.cache.current?.value } }

    /// The cache of `secret` (tests; metrics of waiters).
    public func cache(for secret: String) -> OAuth2TokenCache? { entries[secret]?.cache }
}

/// A value that is used only on the thread it was created on, carried through Sendable machinery
/// (a waiter's callback posted back to its own loop).
private final class LoopBound<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

extension CredentialSources: AccessTokenSource {
    public var secretNames: Set<String> { names }
}
