/// The egress guard: a body goes out only as far as it is known not to carry a secret. The caller
/// keeps the bytes it has not forwarded; for each new piece the guard says how many of them
/// (oldest first) may leave now, or that a complete secret was found, and then the connection
/// is cut before the first byte of that value leaves.
public struct EgressGuard: Sendable {
    public struct Verdict: Sendable, Hashable {
        /// How many of the caller's unforwarded bytes (those kept from earlier pieces, then this
        /// piece) may be forwarded now. With a leak, all of them lie before the secret.
        public let forwardable: Int
        /// The first complete secret (the earliest to end; the longest of those ending together).
        /// Once set, it stays: nothing more is forwardable.
        public let leak: SecretMatch?
    }

    private enum Phase: Sendable {
        /// `unforwarded`: the stream's trailing bytes the caller still holds.
        case watching(SecretScanStream, unforwarded: Int)
        case tripped(SecretMatch)
    }

    private var phase: Phase

    public init(scanner: SecretScanner) { phase = .watching(scanner.makeStream(), unforwarded: 0) }

    public mutating func inspect(_ piece: UnsafeBufferPointer<UInt8>) -> Verdict {
        switch phase {
        case .tripped(let match):
            return Verdict(forwardable: 0, leak: match)
        case .watching(var stream, let unforwarded):
            let firstUnforwarded = stream.offset - unforwarded
            var leak: SecretMatch?
            _ = stream.scanUntil(piece, stop: { match in leak = match; return true })
            // Everything before a byte that could start a match (complete or still open) may go.
            // Both bounds only move forward, so the count is never negative.
            var safeEnd = stream.offset - stream.pendingLength
            if let leak {
                safeEnd = min(safeEnd, leak.range.lowerBound)
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

    /// The end of the body: the bytes still held can no longer complete a secret. Returns how many
    /// may be forwarded (0 after a leak).
    public mutating func finish() -> Int {
        guard case .watching(let stream, let unforwarded) = phase else { return 0 }
        phase = .watching(stream, unforwarded: 0)
        return unforwarded
    }
}
