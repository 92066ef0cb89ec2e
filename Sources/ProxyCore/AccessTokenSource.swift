import HTTP1Codec

/// Access tokens the proxy obtains and caches: the engine's token source, as the exchange core
/// sees it. The core decides when a hop waits (`acquireToken`) and when a token is stale
/// (`markTokenStale`, after a 401); the engine carries both out through this protocol alone, so it
/// never needs to know which kind of source a scope's context holds.
///
/// OAuth2 (`CredentialSources`: client credentials and refresh tokens, fetched on a thread of its own)
/// is the first kind. The others fit the same shape: a command helper runs its program off the
/// loop and answers through the mailbox; a GitHub App signs a JWT and exchanges it for an
/// installation token; a JWT-bearer grant (RFC 7523) is an OAuth2 token request with an assertion;
/// an AWS credential chain reads its provider. Each caches its tokens, answers `acquire` at once
/// when it has a valid one, fetches once for many waiters otherwise, and drops a token on
/// `markStale` (or returns false where a 401 says nothing about the token, as for a source whose
/// tokens cannot be renewed early). A failure is a `TokenFailure` whose `Reason` is a fixed code;
/// a new kind adds its reasons there, and its `endpoint` names where the token came from.
public protocol AccessTokenSource: AnyObject, Sendable {
    /// The secrets whose value is a token from this source.
    var secretNames: Set<String> { get }
    /// Where `secret`'s tokens come from (the 502 names it).
    func provider(of secret: String) -> TokenProvider?
    /// Asks for `secret`'s token on a loop thread whose mailbox is `mailbox`. `onReady` runs on that
    /// thread exactly once: before this returns when the source can answer at once (a valid cached
    /// token, or a failure it will not retry yet), otherwise as a job posted to `mailbox`. Returns
    /// nil, and never calls `onReady`, when `secret` is not this source's. No loop ever blocks.
    @discardableResult
    func acquire(
        secret: String, mailbox: any TokenMailbox,
        onReady: @escaping (Result<AccessToken, TokenFailure>) -> Void
    ) -> TokenRequest?
    /// The waiter of a `.waiting` request is gone (its client closed): its `onReady` is dropped, and
    /// with it whatever it holds. The fetch itself goes on. Loop thread of the waiter.
    func withdraw(secret: String, waiterID: UInt64)
    /// A 401 came back from an origin `token` (of `secret`) was sent to: if it is still the current
    /// token, the next request gets a new one. True when it was dropped. Any thread.
    @discardableResult
    func markStale(secret: String, token: AccessToken) -> Bool
}

/// What `AccessTokenSource.acquire` did with a request for a token.
public enum TokenRequest: Sendable, Equatable {
    /// `onReady` has run.
    case answered
    /// `onReady` runs through the mailbox later, unless `withdraw(secret:waiterID:)` first.
    case waiting(waiterID: UInt64)
}

/// Where a token source posts an answer so that it runs on the thread that asked: the engine gives
/// each worker's event-loop mailbox. False when the mailbox is closed (the job is dropped, unrun).
public protocol TokenMailbox: AnyObject, Sendable {
    @discardableResult
    func post(_ job: @escaping @Sendable () -> Void) -> Bool
}
