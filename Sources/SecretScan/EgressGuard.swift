/// The egress guard: a body goes out only as far as it is known not to carry a secret, and no
/// further than its last `holdBack` bytes. The caller keeps the bytes it has not forwarded; for
/// each new piece the guard says how many of them (oldest first) may leave now, or that a complete
/// secret was found, and then the connection is cut before the value's unforwarded bytes leave.
///
/// No oracle (docs/security-model.md, "No oracle"): how many bytes leave never depends on what the
/// held bytes are. The guard holds back the last `holdBack` bytes of whatever arrived (a number
/// fixed by the configuration, not by the secrets' values), and releases them when more bytes
/// come, when the body ends (`finish`), or when the caller's idle timer runs out (`release`).
/// An earlier guard held back "the bytes that could begin a secret": the count forwarded then told
/// a client, byte by byte, whether its body ended with a prefix of someone else's key.
public struct EgressGuard: Sendable {
    public struct Verdict: Sendable, Hashable {
        /// How many of the caller's unforwarded bytes (those kept from earlier pieces, then this
        /// piece) may be forwarded now. With a leak, none of them is a byte of the value.
        public let forwardable: Int
        /// The first complete secret (the earliest to end; the longest of those ending together).
        /// Once set, it stays: nothing more is forwardable.
        public let leak: SecretMatch?
    }

    private enum Phase: Sendable {
        /// `unforwarded`: the stream's trailing bytes the caller still holds (at most `holdBack`).
        case watching(SecretScanStream, unforwarded: Int)
        case tripped(SecretMatch)
    }

    private var phase: Phase
    /// How many trailing bytes wait for the next piece: at least the longest pattern minus one, so
    /// that every value completed later is still wholly unforwarded when it is found.
    public let holdBack: Int

    /// `holdBack`: the configuration's (see `SecretHoldBack`); never less than the scanner needs.
    public init(scanner: SecretScanner, holdBack: Int) {
        precondition(holdBack >= scanner.longestPattern - 1, "a hold-back shorter than a pattern lets a value's first bytes out")
        phase = .watching(scanner.makeStream(), unforwarded: 0)
        self.holdBack = holdBack
    }

    public mutating func inspect(_ piece: UnsafeBufferPointer<UInt8>) -> Verdict {
        switch phase {
        case .tripped(let match):
            return Verdict(forwardable: 0, leak: match)
        case .watching(var stream, let unforwarded):
            let firstUnforwarded = stream.offset - unforwarded
            var leak: SecretMatch?
            _ = stream.scanUntil(
                piece,
                stop: { match in
                    leak = match; return true
                })
            // All but the last `holdBack` bytes, whatever they are. Bytes an idle release already
            // let go are not counted again (the bound never moves back).
            var safeEnd = max(firstUnforwarded, stream.offset - holdBack)
            if let leak {
                // Without an idle release the value lies wholly in the held bytes (it is at most
                // `holdBack + 1` long and ends here), so this changes nothing; after one, its first
                // bytes may already be out, and the rest is stopped.
                safeEnd = max(firstUnforwarded, min(safeEnd, leak.range.lowerBound))
                phase = .tripped(leak)
            } else {
                phase = .watching(stream, unforwarded: stream.offset - safeEnd)
            }
            return Verdict(forwardable: safeEnd - firstUnforwarded, leak: leak)
        }
    }

    public mutating func inspect(_ piece: [UInt8]) -> Verdict {
        piece.withUnsafeBufferPointer { inspect($0) }
    }

    /// The idle time ran out with no new byte: the held bytes may go (the scanner keeps its state,
    /// so a value completed later is still found and stopped). Returns how many (0 after a leak).
    public mutating func release() -> Int { finish() }

    /// The end of the body: the bytes still held can no longer complete a secret. Returns how many
    /// may be forwarded (0 after a leak).
    public mutating func finish() -> Int {
        guard case .watching(let stream, let unforwarded) = phase else { return 0 }
        phase = .watching(stream, unforwarded: 0)
        return unforwarded
    }

    /// How many bytes the caller holds for the guard now.
    public var held: Int {
        if case .watching(_, let unforwarded) = phase { return unforwarded }
        return 0
    }
}

/// The hold-back of the response scrub and the egress guard, the same for every body while a
/// configuration and its secrets stay the same (docs/security-model.md, "No oracle").
public enum SecretHoldBack {
    /// Held bytes leave after this long without a new byte, so a stream that pauses (server-sent
    /// events, gRPC ping-pong, an interactive upload) is delayed, never stalled.
    public static let idleReleaseMilliseconds = 100

    /// The hold-back of a configuration: its longest watched form (every secret value in every
    /// encoding, every placeholder) minus one; 0 when nothing is watched.
    public static func bytes(longestForm: Int) -> Int { max(0, longestForm - 1) }
}
