import HTTP1Codec
import PosixSupport
import ProxyCore
import ScopePolicy

/// The OAuth2 secrets of a configuration: one single-flight cache each, and the fetcher that
/// obtains their tokens. Shared by every worker; what a worker asks for, it is answered on its
/// own loop thread.
///
/// Wiring (the composition root and the worker):
/// - `OAuth2Tokens(specs:secrets:sink:configuration:observer:)` once per configuration, with the
///   secret store as `secrets` and `sink`, and the tripwire's feed as `observer`; `stop()` at shutdown.
/// - Each `Worker` owns an `EventMailbox(base:)` made after its base, and closes it (`close()`) in
///   `deinit` before `event_base_free`.
/// - A request that needs the token calls `acquire(secret:mailbox:onReady:)` on its worker's thread;
///   `onReady` runs on that thread (at once when cached). A 401 from an origin the token went to:
///   `markStale(secret:token:)`.
public final class OAuth2Tokens: Sendable {
    private struct Entry: Sendable {
        let spec: OAuth2Spec
        let cache: OAuth2TokenCache
    }

    private let entries: [String: Entry]
    private let names: Set<String>
    private let fetcher: TokenFetcher
    private let clock: @Sendable () -> UInt64
    private let waiterIDs = Locked<UInt64>(0)

    /// `specs`: the OAuth2 secrets by name. `secrets`: where client secrets and refresh tokens are
    /// read (the secret store). `sink`: where rotated refresh tokens are saved (the store; nil keeps
    /// them in memory). `clock`: monotonic milliseconds (tests move it). `observer`: told every new
    /// access token and rotated refresh token (secret name, value, how long it stays valid when
    /// the endpoint said), on the fetcher's thread, before
    /// any waiter gets it: the log tripwire must know them. The fetcher's thread starts now; nothing
    /// is fetched until a request needs a token.
    public init(
        specs: [String: OAuth2Spec], secrets: SecretLookup, sink: RefreshTokenSink?, configuration: EngineConfiguration,
        policy: TokenCachePolicy = TokenCachePolicy(), responseLimit: Int = OAuth2TokenResponseReader.defaultLimit,
        clock: (@Sendable () -> UInt64)? = nil,
        observer: TokenObserver? = nil
    ) throws(EngineError) {
        let clock = clock ?? { monotonicMilliseconds() }
        entries = Dictionary(
            uniqueKeysWithValues: specs.map { name, spec in
                (name, Entry(spec: spec, cache: OAuth2TokenCache(secret: name, policy: policy)))
            })
        names = Set(specs.keys)
        fetcher = try TokenFetcher(
            configuration: configuration, secrets: secrets, sink: sink, responseLimit: responseLimit, clock: clock,
            observer: observer)
        self.clock = clock
    }

    /// Fails fetches in flight (their waiters are answered) and ends the fetcher's thread.
    public func stop() { fetcher.stop() }

    deinit { fetcher.stop() }

    /// The token endpoint's origin (for `explain` and the 502 that names it).
    public func endpoint(of secret: String) -> Origin? { entries[secret]?.spec.endpoint }

    /// Asks for `secret`'s token on a worker's loop thread, whose mailbox is `mailbox`. `onReady` runs
    /// on that thread exactly once: before this returns when a valid token is cached (or the last
    /// fetch failed less than the retry floor ago), otherwise from the mailbox once the one fetch in
    /// flight ends. Returns nil (and never calls `onReady`) when `secret` is not an OAuth2 secret.
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
            fetcher.fetch(TokenFetcher.Job(secret: secret, spec: entry.spec, cache: entry.cache, ticket: ticket))
            return .waiting(waiterID: id)
        }
    }

    /// A waiter gone before its answer (its client closed): the fetch in flight drops its callback
    /// (and the connection the callback could reach). The fetch itself goes on: other waiters and
    /// the next request want the token too. Loop thread of the waiter.
    public func withdraw(secret: String, waiterID: UInt64) {
        entries[secret]?.cache.withdraw(waiterID: waiterID)
    }

    /// A 401 came back from an origin `token` (of `secret`) was injected into: if it is still the
    /// current token, the next request fetches a new one. Any thread.
    @discardableResult
    public func markStale(secret: String, token: AccessToken) -> Bool {
        entries[secret]?.cache.markStale(token, now: clock()) ?? false
    }

    /// The access tokens requests would be given now (the log tripwire's list).
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

extension OAuth2Tokens: AccessTokenSource {
    public var secretNames: Set<String> { names }
}
