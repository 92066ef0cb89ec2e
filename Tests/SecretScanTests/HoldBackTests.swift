import Testing

@testable import SecretScan

private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

/// The hold-back of the scrub and the guard reveals nothing of the values it looks for
/// (docs/security-model.md, "No oracle"): what leaves, and when, depends on the byte count, the
/// time and "a value was found", never on whether the held bytes begin a value.
@Suite("Hold-back: no oracle in what the scrub and the guard hold back")
struct HoldBackTests {
    /// One step of a stream: a piece arrives, or the idle timer releases what is held.
    enum Step: CustomStringConvertible {
        case piece([UInt8])
        case idleRelease

        var description: String {
            switch self {
            case .piece(let bytes): "piece(\(bytes.count))"
            case .idleRelease: "release"
            }
        }
    }

    /// What leaves after each step: the scrubbed bytes and the guard's forwardable count.
    struct Observation: Equatable {
        var scrubbed: [UInt8]
        var forwarded: Int
        var leak: Bool
    }

    static func observe(_ secrets: [[UInt8]], holdBack: Int, _ steps: [Step]) -> [Observation] {
        let scanner = SecretScanner(secrets: secrets)
        var scrubber = SecretScrubber(scanner: scanner, holdBack: holdBack)
        var egress = EgressGuard(scanner: scanner, holdBack: holdBack)
        var seen: [Observation] = []
        for step in steps {
            var output: [UInt8] = []
            var forwarded = 0
            var leak = false
            switch step {
            case .piece(let piece):
                scrubber.scrub(piece, into: &output)
                let verdict = egress.inspect(piece)
                forwarded = verdict.forwardable
                leak = verdict.leak != nil
            case .idleRelease:
                scrubber.release(into: &output)
                forwarded = egress.release()
            }
            seen.append(Observation(scrubbed: output, forwarded: forwarded, leak: leak))
        }
        var output: [UInt8] = []
        scrubber.finish(into: &output)
        seen.append(Observation(scrubbed: output, forwarded: egress.finish(), leak: false))
        return seen
    }

    /// The attack that recovered a key byte by byte: a body ending in a guess of the key's first k
    /// bytes. The right guess and a wrong one must leave the same way at every step.
    @Test("a body ending in a right guess of a value's prefix leaves exactly as one ending in a wrong guess")
    func prefixGuessIsNotAnOracle() {
        let key = bytes("sp_key_7d1e9a44c0b3f2a8")
        let holdBack = max(0, SecretScanner(secrets: [key]).longestPattern - 1)
        for k in 1..<key.count {
            let right = bytes("probe=") + key.prefix(k)
            var wrong = right
            wrong[wrong.count - 1] ^= 0x01
            for releasing in [false, true] {
                let steps: [Step] = [.piece(right)] + (releasing ? [.idleRelease] : []) + [.piece(bytes("&end"))]
                let wrongSteps: [Step] = [.piece(wrong)] + (releasing ? [.idleRelease] : []) + [.piece(bytes("&end"))]
                let seenRight = Self.observe([key], holdBack: holdBack, steps)
                let seenWrong = Self.observe([key], holdBack: holdBack, wrongSteps)
                #expect(seenRight.map(\.forwarded) == seenWrong.map(\.forwarded), "guard, prefix of \(k) bytes, release \(releasing)")
                #expect(seenRight.map(\.scrubbed.count) == seenWrong.map(\.scrubbed.count), "scrub, prefix of \(k) bytes, release \(releasing)")
            }
        }
    }

    /// Noninterference: two secret sets whose values differ only in their bytes (equal lengths),
    /// random traffic that carries neither set's complete values but plenty of their prefixes
    /// (of the first set's, which is what an attacker probes), cut at random, with idle releases at
    /// random: every step gives the same bytes and counts out for both.
    @Test("property: secret sets differing only in value give identical output for traffic that carries neither")
    func noninterference() {
        for seed in UInt64(1)...200 {
            var random = SeededGenerator(state: seed)
            let (first, second, steps) = Self.randomCase(&random)
            // Lengths alone fix the hold-back (as the index computes it from lengths).
            let holdBack = first.map { 8 * $0.count + 8 }.max()! - 1
            let traffic = steps.flatMap { step -> [UInt8] in if case .piece(let bytes) = step { bytes } else { [] } }
            let carries =
                !SecretScanner(secrets: first).matches(in: traffic).isEmpty
                || !SecretScanner(secrets: second).matches(in: traffic).isEmpty
            if carries { continue }
            let seenFirst = Self.observe(first, holdBack: holdBack, steps)
            let seenSecond = Self.observe(second, holdBack: holdBack, steps)
            #expect(seenFirst == seenSecond, "seed \(seed): steps \(steps)")
        }
    }

    @Test("an idle release lets the held bytes go; a value completed after it is still masked and stopped from there")
    func idleRelease() {
        let value = bytes("VALUE-0123456789")
        let scanner = SecretScanner(secrets: [value])
        let holdBack = scanner.longestPattern - 1
        var scrubber = SecretScrubber(scanner: scanner, holdBack: holdBack)
        var egress = EgressGuard(scanner: scanner, holdBack: holdBack)
        var output: [UInt8] = []
        scrubber.scrub(bytes("data: VALUE-01"), into: &output)
        #expect(output.isEmpty)
        #expect(egress.inspect(bytes("data: VALUE-01")).forwardable == 0)
        scrubber.release(into: &output)
        #expect(output == bytes("data: VALUE-01"), "the first bytes leave on time, as any bytes would")
        #expect(egress.release() == 14)
        scrubber.scrub(bytes("23456789 next"), into: &output)
        scrubber.finish(into: &output)
        #expect(output == bytes("data: VALUE-01") + bytes("******** next"))
        let verdict = egress.inspect(bytes("23456789 next"))
        #expect(verdict.leak != nil)
        #expect(verdict.forwardable == 0, "nothing of the value's rest leaves")
        #expect(egress.finish() == 0)
    }

    @Test("the index's length bound covers the longest form of any value of that length")
    func lengthBoundCoversWorstCases() {
        // Worst cases for the JSON escape and percent-encoding: control bytes, quotes, high bytes.
        for length in 1...40 {
            for filler: UInt8 in [0x01, 0x22, 0x5C, 0xFF, 0x41] {
                let value = [UInt8](repeating: filler, count: length)
                var json: [UInt8] = []
                for byte in value {
                    switch byte {
                    case 0x22, 0x5C: json += [0x5C, byte]
                    case 0..<0x20: json += bytes("\\u00") + [0x30, 0x31]
                    default: json.append(byte)
                    }
                }
                let longest = [value, json].flatMap { SecretEncoding.forms(of: $0).map(\.bytes.count) }.max()!
                #expect(longest <= 8 * length + 8, "length \(length), byte \(filler)")
            }
        }
    }

    static func randomCase(_ random: inout some RandomNumberGenerator) -> ([[UInt8]], [[UInt8]], [Step]) {
        let alphabet: [UInt8] = bytes("abcd%+/=") + [0x00, 0xFF]
        let count = Int.random(in: 1...3, using: &random)
        let lengths = (0..<count).map { _ in Int.random(in: 8...14, using: &random) }
        func values() -> [[UInt8]] {
            lengths.map { length in (0..<length).map { _ in alphabet.randomElement(using: &random)! } }
        }
        let first = values()
        let second = values()
        let forms = first.flatMap { SecretEncoding.forms(of: $0).map(\.bytes) }
        var steps: [Step] = []
        for _ in 0..<Int.random(in: 1...10, using: &random) {
            switch Int.random(in: 0..<4, using: &random) {
            case 0:
                steps.append(.idleRelease)
            case 1:
                // A proper prefix of a form of the first set: what a prefix oracle would reveal.
                let form = forms.randomElement(using: &random)!
                steps.append(.piece(Array(form.prefix(Int.random(in: 1..<form.count, using: &random)))))
            default:
                steps.append(.piece((0..<Int.random(in: 0...20, using: &random)).map { _ in alphabet.randomElement(using: &random)! }))
            }
        }
        return (first, second, steps)
    }
}
