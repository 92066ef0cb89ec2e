/// `rate: "N/s"` or `"N/m"` on a client.
public struct RateLimit: Sendable, Equatable, CustomStringConvertible {
    public let count: Int
    /// The period in seconds: 1 or 60.
    public let periodSeconds: Int

    public init(count: Int, periodSeconds: Int) {
        self.count = count
        self.periodSeconds = periodSeconds
    }

    public static func parse(_ text: String) -> RateLimit? {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].utf8.count <= 7, parts[0].utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
            !parts[0].hasPrefix("0"), let count = Int(parts[0]), count > 0
        else { return nil }
        switch parts[1] {
        case "s": return RateLimit(count: count, periodSeconds: 1)
        case "m": return RateLimit(count: count, periodSeconds: 60)
        default: return nil
        }
    }

    public var description: String { "\(count)/\(periodSeconds == 1 ? "s" : "m")" }
}

/// A token bucket: holds up to `count` tokens (the burst), refilled continuously at `count` per
/// period; each request takes one. Pure: the caller passes the time (monotonic microseconds).
public struct TokenBucket: Sendable, Equatable {
    public let limit: RateLimit
    /// Tokens, in millionths (integers keep the arithmetic exact and the tests deterministic).
    private(set) var microTokens: Int64
    private(set) var updatedAt: UInt64

    public enum Decision: Sendable, Equatable {
        case allowed
        /// Refused; a token is back after this many seconds (at least 1: `Retry-After` counts
        /// whole seconds).
        case limited(retryAfterSeconds: Int)
    }

    public init(limit: RateLimit, now: UInt64) {
        self.limit = limit
        microTokens = Int64(limit.count) * 1_000_000
        updatedAt = now
    }

    public mutating func take(now: UInt64) -> Decision {
        let capacity = Int64(limit.count) * 1_000_000
        if now > updatedAt {
            // tokens per microsecond = count / (period * 1e6); in micro-tokens: count / period.
            let elapsed = Int64(min(now - updatedAt, UInt64(limit.periodSeconds) * 1_000_000))
            microTokens = min(capacity, microTokens + elapsed * Int64(limit.count) / Int64(limit.periodSeconds))
            updatedAt = now
        }
        if microTokens >= 1_000_000 {
            microTokens -= 1_000_000
            return .allowed
        }
        let missing = 1_000_000 - microTokens
        // microseconds until one token: missing / (count / period)
        let wait = (missing * Int64(limit.periodSeconds) + Int64(limit.count) - 1) / Int64(limit.count)
        return .limited(retryAfterSeconds: max(1, Int((wait + 999_999) / 1_000_000)))
    }
}
