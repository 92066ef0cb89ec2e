import PosixSupport
import ScopePolicy

/// An access token as a token source hands it out (OAuth2's cache, and any other kind). `generation`
/// identifies it (a 401 marks this one stale, not whichever token is current by then); its value
/// prints as `<redacted>`.
public struct AccessToken: Sendable, Equatable {
    public let value: SecretValue
    public let generation: UInt64
    /// Monotonic milliseconds after which the cache fetches a new one.
    public let validUntil: UInt64
    /// Monotonic milliseconds when it was obtained (a 401 drops it only once it is a second old).
    public let obtainedAt: UInt64
    /// Monotonic milliseconds when the endpoint said it stops working (`expires_in` without the
    /// renewal margin; an hour when it did not say): until then a replaced token stays watched.
    public let expiresAt: UInt64

    public init(value: SecretValue, generation: UInt64, validUntil: UInt64, obtainedAt: UInt64 = 0, expiresAt: UInt64? = nil) {
        self.value = value
        self.generation = generation
        self.validUntil = validUntil
        self.obtainedAt = obtainedAt
        self.expiresAt = expiresAt ?? validUntil
    }
}

/// How long tokens are trusted, and how soon a failed endpoint is tried again (docs/security-model.md, "Credentials the proxy computes").
public struct TokenCachePolicy: Sendable, Equatable {
    /// Tokens are renewed this long before the endpoint's `expires_in` ends.
    public var marginMilliseconds: UInt64 = 30_000
    /// The lifetime of a token that came without `expires_in`.
    public var defaultLifetimeMilliseconds: UInt64 = 300_000
    /// After a failure, requests fail at once for this long: a broken endpoint is not hammered.
    public var retryFloorMilliseconds: UInt64 = 1_000

    public init() {}

    /// The longest `expires_in` taken: a year. A longer one is read as a year, here and where the
    /// token response is read, so the arithmetic below stays in range for any input.
    public static let maxExpiresInSeconds = 365 * 86_400

    /// How long a token whose endpoint gave no `expires_in` is taken to stay valid once replaced
    /// (it is renewed after `defaultLifetimeMilliseconds`, but may work for longer).
    public var unknownExpiryMilliseconds: UInt64 = 3_600_000
    /// The most replaced tokens that may still be valid at once: beyond it a 401 does not drop the
    /// current token, so every token handed out stays in the scrub and the guard until it expires
    /// (`SecretValueIndex.maxEarlierValues`). A client that can make an origin answer 401 cannot
    /// push a valid token out of them by making the proxy rotate it.
    public var maxReplacedValid = 32

    /// The full validity of a token from when it was obtained: `expires_in` (bounded to a year
    /// here and by the parser), or `unknownExpiryMilliseconds`.
    public func validity(expiresIn: Int?) -> UInt64 {
        guard let expiresIn else { return unknownExpiryMilliseconds }
        return UInt64(min(max(0, expiresIn), Self.maxExpiresInSeconds)) * 1000
    }

    /// Whether a lifetime shorter than twice the margin keeps half of itself (OAuth2: a 40 s token
    /// with a 30 s margin). When false the margin holds for every lifetime, as the AWS SDKs refresh
    /// credentials (botocore refreshes on every call once inside its window): credentials that
    /// arrive with less than the margin left are fetched again once the retry floor has passed.
    public var halvesShortLifetimes = true

    /// `expires_in` minus the margin; a lifetime shorter than twice the margin keeps half of itself
    /// (a 40 s token must not be renewed after 10 s, nor used for all 40) unless
    /// `halvesShortLifetimes` is false.
    public func lifetime(expiresIn: Int?) -> UInt64 {
        guard let expiresIn else { return defaultLifetimeMilliseconds }
        let full = validity(expiresIn: expiresIn)
        let renewal: UInt64
        if full >= 2 * marginMilliseconds {
            renewal = full - marginMilliseconds
        } else if halvesShortLifetimes {
            renewal = full / 2
        } else {
            renewal = full > marginMilliseconds ? full - marginMilliseconds : 0
        }
        // Never under the retry floor: an endpoint answering `expires_in: 0` would otherwise be
        // asked again for every request.
        return max(retryFloorMilliseconds, renewal)
    }
}

/// Handed to the one caller that must start a fetch; `complete` takes it back.
public struct TokenFetchTicket: Sendable, Equatable {
    public let number: UInt64
}

/// Someone waiting for a token: `deliver` is called once, outside the cache's lock, by whoever
/// completes the fetch (the engine's `deliver` posts the result to the waiter's own worker thread).
public struct TokenWaiter: Sendable {
    public let id: UInt64
    public let deliver: @Sendable (Result<AccessToken, TokenFailure>) -> Void

    public init(id: UInt64, deliver: @escaping @Sendable (Result<AccessToken, TokenFailure>) -> Void) {
        self.id = id
        self.deliver = deliver
    }
}

/// What `acquire` decided.
public enum TokenAcquisition: Sendable, Equatable {
    /// A valid token: use it now (the waiter was not registered).
    case ready(AccessToken)
    /// A fetch is in flight; the waiter is registered and will be delivered the result.
    case wait
    /// The caller must start the fetch and `complete` it with this ticket. Its waiter is
    /// registered too and is delivered the result like every other.
    case fetch(TokenFetchTicket)
    /// The last fetch failed less than the retry floor ago: fail closed now (not registered).
    case failed(TokenFailure)
}

/// The single-flight authority for one OAuth2 secret, shared by every worker thread. Pure: it
/// starts nothing and calls nothing under its lock; the time is given.
public final class OAuth2TokenCache: Sendable {
    private enum State {
        case empty
        case fetching(TokenFetchTicket, waiters: [TokenWaiter])
        case valid(AccessToken)
        case failed(TokenFailure, retryAt: UInt64)
    }

    private struct Guarded {
        var state: State = .empty
        var nextTicket: UInt64 = 1
        var nextGeneration: UInt64 = 1
        /// When each replaced token stops working (pruned as time passes).
        var replacedExpiries: [UInt64] = []
    }

    public let secret: String
    public let policy: TokenCachePolicy
    private let guarded = Locked(Guarded())

    public init(secret: String, policy: TokenCachePolicy = TokenCachePolicy()) {
        self.secret = secret
        self.policy = policy
    }

    /// `now`: monotonic milliseconds.
    public func acquire(now: UInt64, waiter: TokenWaiter) -> TokenAcquisition {
        guarded.withLock { guarded in
            switch guarded.state {
            case .valid(let token) where now < token.validUntil:
                return .ready(token)
            case .fetching(let ticket, var waiters):
                waiters.append(waiter)
                guarded.state = .fetching(ticket, waiters: waiters)
                return .wait
            case .failed(let failure, let retryAt) where now < retryAt:
                return .failed(failure)
            case .empty, .valid, .failed:
                let ticket = TokenFetchTicket(number: guarded.nextTicket)
                guarded.nextTicket += 1
                guarded.state = .fetching(ticket, waiters: [waiter])
                return .fetch(ticket)
            }
        }
    }

    /// Ends the fetch `ticket` started. Returns the waiters to deliver `result` to (the caller
    /// calls their `deliver`, outside any lock), and the result as they get it. A ticket that is
    /// not the current fetch's changes nothing.
    public func complete(_ ticket: TokenFetchTicket, _ result: Result<TokenGrant, TokenFailure>, now: UInt64)
        -> (waiters: [TokenWaiter], result: Result<AccessToken, TokenFailure>)
    {
        guarded.withLock { guarded in
            guard case .fetching(let current, let waiters) = guarded.state, current == ticket else {
                return ([], result.map { AccessToken(value: $0.value, generation: 0, validUntil: now) })
            }
            switch result {
            case .success(let grant):
                let token = AccessToken(
                    value: grant.value, generation: guarded.nextGeneration,
                    validUntil: now + policy.lifetime(expiresIn: grant.expiresIn), obtainedAt: now,
                    expiresAt: now + policy.validity(expiresIn: grant.expiresIn))
                guarded.nextGeneration += 1
                guarded.state = .valid(token)
                return (waiters, .success(token))
            case .failure(let failure):
                guarded.state = .failed(failure, retryAt: now + policy.retryFloorMilliseconds)
                return (waiters, .failure(failure))
            }
        }
    }

    /// A 401 came from an origin `token` was injected into: if it is still the current token, the
    /// next `acquire` fetches a new one. A late 401 for an older token changes nothing, nor does one
    /// for a token younger than the retry floor: a client that can make an origin answer 401 must
    /// not make the proxy ask the endpoint for a token per request (the endpoint would lock the
    /// client id out for everyone). Returns whether the token was dropped.
    @discardableResult
    public func markStale(_ token: AccessToken, now: UInt64 = .max) -> Bool {
        guarded.withLock { guarded in
            guard case .valid(let current) = guarded.state, current.generation == token.generation,
                now >= current.obtainedAt &+ policy.retryFloorMilliseconds
            else { return false }
            guarded.replacedExpiries.removeAll { $0 <= now }
            guard guarded.replacedExpiries.count < policy.maxReplacedValid else { return false }
            guarded.replacedExpiries.append(current.expiresAt)
            guarded.state = .empty
            return true
        }
    }

    /// How many waiters the fetch in flight will answer (0 when none is in flight).
    public var waiterCount: Int {
        guarded.withLock { guarded in
            if case .fetching(_, let waiters) = guarded.state { return waiters.count }
            return 0
        }
    }

    /// A waiter that no longer wants the result (its client left): the fetch no longer holds its
    /// callback, nor what the callback holds. Returns whether it was waiting.
    @discardableResult
    public func withdraw(waiterID: UInt64) -> Bool {
        guarded.withLock { guarded in
            guard case .fetching(let ticket, var waiters) = guarded.state,
                let index = waiters.firstIndex(where: { $0.id == waiterID })
            else { return false }
            waiters.remove(at: index)
            guarded.state = .fetching(ticket, waiters: waiters)
            return true
        }
    }

    /// The token a request would be given now (for the log tripwire, which must know its value).
    public var current: AccessToken? {
        guarded.withLock { guarded in
            if case .valid(let token) = guarded.state { return token }
            return nil
        }
    }

    /// How many wait for the fetch in flight (tests, metrics).
    public var waiting: Int {
        guarded.withLock { guarded in
            if case .fetching(_, let waiters) = guarded.state { return waiters.count }
            return 0
        }
    }
}
