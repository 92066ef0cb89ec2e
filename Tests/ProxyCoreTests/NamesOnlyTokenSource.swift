import HTTP1Codec
import ProxyCore

/// A token source as the exchange core sees it: which secrets are access tokens, and the origin of
/// their endpoint. The machines never acquire a token or mark one stale themselves (they ask the
/// engine: `acquireToken`, `markTokenStale`), so those do nothing here. Shared by the core tests and
/// the exchange machine fuzzer (fuzz/build.sh compiles this file into it).
final class NamesOnlyTokenSource: AccessTokenSource {
    let secretNames: Set<String>
    private let endpointOrigin: Origin?

    init(_ names: Set<String>, endpoint: String) {
        secretNames = names
        endpointOrigin = try? Origin.parse(endpoint)
    }

    func provider(of secret: String) -> TokenProvider? { endpointOrigin.map(TokenProvider.endpoint) }
    func acquire(
        secret: String, mailbox: any TokenMailbox,
        onReady: @escaping (Result<AccessToken, TokenFailure>) -> Void
    ) -> TokenRequest? { nil }
    func withdraw(secret: String, waiterID: UInt64) {}
    func markStale(secret: String, token: AccessToken) -> Bool { false }
}
