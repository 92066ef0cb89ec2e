@testable import SecretScan

/// The obvious, slow answers the scanner must agree with: every pattern compared at every offset
/// of the whole body. Shared by the property test and the SecretScan fuzz target.
enum NaiveSecretScan {
    static func matches(_ scanner: SecretScanner, in body: [UInt8]) -> [SecretMatch] {
        var found: [SecretMatch] = []
        for pattern in scanner.patterns where pattern.bytes.count <= body.count {
            for start in 0...(body.count - pattern.bytes.count) where body[start..<(start + pattern.bytes.count)].elementsEqual(pattern.bytes) {
                found.append(SecretMatch(pattern: pattern, range: start..<(start + pattern.bytes.count)))
            }
        }
        return inOrder(found)
    }

    /// One order for comparing: by end, then longest first, then pattern.
    static func inOrder(_ matches: [SecretMatch]) -> [SecretMatch] {
        matches.sorted { ($0.range.upperBound, $0.range.lowerBound, $0.pattern.id) < ($1.range.upperBound, $1.range.lowerBound, $1.pattern.id) }
    }

    static func scrubbed(_ scanner: SecretScanner, _ body: [UInt8]) -> [UInt8] {
        var output = body
        for match in matches(scanner, in: body) { for offset in match.range { output[offset] = UInt8(ascii: "*") } }
        return output
    }

    /// What the streaming types said for one body cut into pieces.
    struct StreamOutcome {
        var matches: [SecretMatch] = []
        var scrubbed: [UInt8] = []
        /// The guard: bytes it let through and the leak it reported.
        var forwarded = 0
        var leak: SecretMatch?
        /// Pieces after which the scrubber or the guard (before any leak) held back other than
        /// exactly the last `holdBack` bytes of what arrived since the last release.
        var wrongHoldBacks: [Int] = []
    }

    /// `cuts`: offsets where one piece ends and the next begins (any order, duplicates allowed:
    /// empty pieces are fed too).
    static func pieces(_ body: [UInt8], cuts: [Int]) -> [[UInt8]] {
        let bounds = [0] + cuts.map { min(max($0, 0), body.count) }.sorted() + [body.count]
        return zip(bounds, bounds.dropFirst()).map { Array(body[$0..<$1]) }
    }

    /// `releases`: the indices of pieces after which the idle timer releases what is held.
    static func stream(_ scanner: SecretScanner, _ pieces: [[UInt8]], holdBack: Int? = nil, releases: Set<Int> = []) -> StreamOutcome {
        var outcome = StreamOutcome()
        var stream = scanner.makeStream()
        let holdBack = holdBack ?? max(0, scanner.longestPattern - 1)
        var scrubber = SecretScrubber(scanner: scanner, holdBack: holdBack)
        var egress = EgressGuard(scanner: scanner, holdBack: holdBack)
        var fed = 0
        var sinceRelease = 0
        for (index, piece) in pieces.enumerated() {
            stream.scan(piece) { outcome.matches.append($0) }
            scrubber.scrub(piece, into: &outcome.scrubbed)
            fed += piece.count
            sinceRelease += piece.count
            let expectedHeld = min(holdBack, sinceRelease)
            if fed - outcome.scrubbed.count != expectedHeld { outcome.wrongHoldBacks.append(index) }
            let verdict = egress.inspect(piece)
            outcome.forwarded += verdict.forwardable
            if outcome.leak == nil {
                outcome.leak = verdict.leak
                if verdict.leak == nil, fed - outcome.forwarded != expectedHeld { outcome.wrongHoldBacks.append(index) }
            }
            if releases.contains(index) {
                scrubber.release(into: &outcome.scrubbed)
                outcome.forwarded += egress.release()
                sinceRelease = 0
            }
        }
        scrubber.finish(into: &outcome.scrubbed)
        outcome.forwarded += egress.finish()
        return outcome
    }

    /// The ways a scanner takes pieces, for the property test and the fuzzer: by default (small
    /// pieces byte by byte), and with every piece that can hold four warm-ups taken as a large
    /// one, probed and then left to the probe, skipped through, or laned; the skips with the
    /// vector pair filter where it runs, and with the portable loop.
    static let scanWays: [(lanedFrom: Int?, path: PatternAutomaton.LargePiecePath, pairSkip: PatternAutomaton.PairSkip)] = [
        (nil, .probed, .fastest), (nil, .probed, .portable), (0, .probed, .fastest), (0, .probedThenSkipped, .fastest),
        (0, .probedThenSkipped, .portable), (0, .probedThenLaned, .fastest),
    ]

    /// Checks one cut of `body` against the reference; returns what disagrees (empty when all agree).
    static func disagreements(_ scanner: SecretScanner, _ body: [UInt8], cuts: [Int]) -> [String] {
        let expected = matches(scanner, in: body)
        let outcome = stream(scanner, pieces(body, cuts: cuts))
        var problems: [String] = []
        if inOrder(outcome.matches) != expected { problems.append("matches \(describe(outcome.matches)) != \(describe(expected))") }
        if outcome.scrubbed != scrubbed(scanner, body) { problems.append("scrubbed \(outcome.scrubbed) != \(scrubbed(scanner, body))") }
        // The guard reports the earliest-ending match (longest at that end), forwards nothing from
        // its first byte on, and otherwise all of the body.
        let firstLeak = expected.first
        if outcome.leak != firstLeak {
            problems.append("leak \(describe(outcome.leak.map { [$0] } ?? [])) != \(describe(firstLeak.map { [$0] } ?? []))")
        }
        let forwardLimit = firstLeak?.range.lowerBound ?? body.count
        if firstLeak == nil ? outcome.forwarded != body.count : outcome.forwarded > forwardLimit {
            problems.append("forwarded \(outcome.forwarded) of \(body.count), limit \(forwardLimit)")
        }
        if !outcome.wrongHoldBacks.isEmpty {
            problems.append("held back other than the last bytes after pieces \(outcome.wrongHoldBacks)")
        }
        return problems
    }

    static func describe(_ matches: [SecretMatch]) -> String {
        matches.map { "\($0.pattern.secret)/\($0.pattern.encoding)@\($0.range)" }.joined(separator: " ")
    }
}
