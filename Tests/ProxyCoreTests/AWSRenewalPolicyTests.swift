import ProxyCore
import Testing

/// AWS temporary credentials (and GitHub installation tokens) are renewed 5 minutes before they
/// expire, whatever their lifetime: the policy `TokenFetcherSource.cachePolicy(for:)` gives them.
@Suite struct AWSRenewalPolicyTests {
    static var awsPolicy: TokenCachePolicy {
        var policy = TokenCachePolicy()
        policy.marginMilliseconds = 300_000
        policy.halvesShortLifetimes = false
        return policy
    }

    @Test(
        "the margin holds for every lifetime; inside it, renewed after the retry floor",
        arguments: [
            (3600, 3_300_000), (600, 300_000), (360, 60_000), (301, 1_000), (300, 1_000), (240, 1_000), (0, 1_000),
            (-5, 1_000), (Int.max, UInt64(TokenCachePolicy.maxExpiresInSeconds) * 1000 - 300_000),
        ] as [(Int, UInt64)])
    func marginAlways(expiresIn: Int, lifetime: UInt64) {
        #expect(Self.awsPolicy.lifetime(expiresIn: expiresIn) == lifetime)
    }

    @Test("OAuth2's policy still keeps half of a short lifetime")
    func oauth2Unchanged() {
        var policy = TokenCachePolicy()
        #expect(policy.lifetime(expiresIn: 40) == 20_000)
        policy.marginMilliseconds = 300_000
        #expect(policy.lifetime(expiresIn: 240) == 120_000, "halved: what AWS credentials got before")
        #expect(Self.awsPolicy.lifetime(expiresIn: nil) == policy.lifetime(expiresIn: nil), "no expiry: the default lifetime")
    }
}
