import Foundation
import Testing

@testable import SecretScan

private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

/// SplitMix64: seeded, so a failing random case can be replayed from its seed.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

@Suite("SecretScan: secrets found in byte streams in every encoding, across pieces")
struct SecretScanTests {
    static let secret = "s3cr3t/value+with=odd?chars"

    /// Encoded here with Foundation, not with the encoders the scanner uses; the secret sits inside
    /// other bytes at each base64 alignment.
    static let encodings: [(String, SecretEncoding)] = {
        let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        let percent = secret.addingPercentEncoding(withAllowedCharacters: unreserved)!
        var cases: [(String, SecretEncoding)] = [(secret, .raw), (percent, .percentUppercase), (percent.lowercased(), .percentLowercase)]
        for prefix in ["", "u", "us"] {
            let base64 = Data((prefix + secret + "tail").utf8).base64EncodedString()
            let base64URL = base64.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            // Where no `+` or `/` falls in the secret's run, base64url is the same bytes, found as base64.
            let urlSafeDiffers = base64URL != base64
            cases += [
                (base64, .base64(alignment: prefix.count)),
                (base64URL, urlSafeDiffers ? .base64URL(alignment: prefix.count) : .base64(alignment: prefix.count)),
            ]
        }
        return cases
    }()

    @Test("each encoding of a secret is found, as that encoding", arguments: encodings)
    func encoding(_ text: String, _ encoding: SecretEncoding) {
        let scanner = SecretScanner(secrets: [bytes(Self.secret)])
        let found = scanner.matches(in: bytes("{\"x\":\"" + text + "\"}"))
        #expect(found.map(\.pattern.encoding) == [encoding])
        #expect(found.map(\.pattern.secret) == [0])
    }

    @Test("forms: an encoding equal to an earlier one is left out; base64 runs under 8 characters are dropped")
    func forms() {
        // "abcdef" one or two bytes into a group: the runs are too short, the final runs are not.
        #expect(
            SecretEncoding.forms(of: bytes("abcdef")).map(\.encoding)
                == [.raw, .base64(alignment: 0), .base64(alignment: 1), .base64(alignment: 2)])
        #expect(SecretEncoding.finalBase64Run(bytes("abcdef"), alignment: 1, urlSafe: false) == bytes("FiY2RlZg"))
        #expect(SecretEncoding.finalBase64Run(bytes("abcdef"), alignment: 0, urlSafe: false) == nil, "ends on a character boundary")
        #expect(SecretEncoding.forms(of: bytes("abc")).map(\.encoding) == [.raw])
        #expect(SecretEncoding.forms(of: bytes("a b")).map(\.bytes) == [bytes("a b"), bytes("a%20b")])
        #expect(SecretEncoding.base64Run(bytes("abcdef"), alignment: 0, urlSafe: false) == bytes("YWJjZGVm"))
        // "xabcdefg" = eGFiY2RlZmc=: the first two characters and the last carry a neighbour's bits.
        #expect(SecretEncoding.base64Run(bytes("abcdefg"), alignment: 1, urlSafe: false) == bytes("FiY2RlZm"))
    }

    /// A value base64-encoded alone or closing the encoded text (the password of `user:password`),
    /// for every length modulo 3 and every alignment, standard and URL-safe: every character that
    /// holds only the value's bits is masked, the last one included; what stays is the padding and
    /// a leading character shared with the neighbour before it (CI found the last character showing
    /// for values of 23 bytes: the test's value had a random length).
    @Test(
        "a value ending the encoded text: masked to its last character, whatever its length and alignment",
        arguments: [22, 23, 24], ["", "u", "us"])
    func finalCharacterMasked(length: Int, prefix: String) {
        let value = String("0123456789abcdefghijKLMNOPQRST~?>".prefix(length))
        let scanner = SecretScanner(secrets: [bytes(value)])
        let standard = Data((prefix + value).utf8).base64EncodedString()
        let urlSafe = standard.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        for encoded in [standard, urlSafe] {
            var scrubber = SecretScrubber(scanner: scanner, holdBack: scanner.longestPattern - 1)
            var output: [UInt8] = []
            scrubber.scrub(bytes("x=" + encoded + "&"), into: &output)
            scrubber.finish(into: &output)
            let shown = Array(output.dropFirst(2).dropLast())
            // Characters before the value's first whole one: ceil(8·prefix / 6).
            let leading = (8 * prefix.count + 5) / 6
            let padding = encoded.utf8.reversed().prefix { $0 == UInt8(ascii: "=") }.count
            let expected =
                Array(encoded.utf8.prefix(leading)) + Array(repeating: SecretScrubber.mask, count: shown.count - leading - padding)
                + Array(repeating: UInt8(ascii: "="), count: padding)
            #expect(shown == expected, "length \(length), prefix \(prefix.count), \(encoded == standard ? "base64" : "base64url")")
        }
    }

    /// (secrets, body, expected matches as "secret/encoding@range").
    static let exact: [([String], String, String)] = [
        ([], "anything at all", ""),
        (["abcd"], "", ""),
        (["abcd"], "abcd", "0/raw@0..<4"),
        (["abcd"], "xxabcdabcdxx", "0/raw@2..<6 0/raw@6..<10"),
        // Overlapping occurrences of one secret are each found.
        (["aaaa"], "aaaaaa", "0/raw@0..<4 0/raw@1..<5 0/raw@2..<6"),
        // A secret that is a prefix of another, and one nested inside another.
        (["abcd", "abcdef"], "abcdef", "0/raw@0..<4 1/raw@0..<6"),
        (["bcde", "abcdef"], "abcdef", "0/raw@1..<5 1/raw@0..<6"),
        // Ending together: the longest first.
        (["cdef", "abcdef"], "abcdef", "1/raw@0..<6 0/raw@2..<6"),
        // Two overlapping secrets, and the same secret given twice.
        (["abcd", "cdef"], "abcdef", "0/raw@0..<4 1/raw@2..<6"),
        (["abcd", "abcd"], "abcd", "0/raw@0..<4 1/raw@0..<4"),
        // Almost-matches that must not report.
        (["abcd"], "abcabcx abd", ""),
        (["a%b!"], "a%25b%21 a%25b%21", "0/percent@0..<8 0/percent@9..<17"),
        (["a%b!"], "a%25b%21", "0/percent@0..<8"),
    ]

    @Test("exact cases", arguments: exact)
    func exactCase(_ secrets: [String], _ body: String, _ expected: String) {
        let scanner = SecretScanner(secrets: secrets.map(bytes))
        #expect(NaiveSecretScan.describe(scanner.matches(in: bytes(body))) == expected)
        #expect(NaiveSecretScan.disagreements(scanner, bytes(body), cuts: []) == [])
    }

    @Test("binary secrets and bodies: NUL, 0xFF, every byte value")
    func binary() {
        let secret: [UInt8] = [0x00, 0xFF, 0x0D, 0x0A, 0x80, 0x00]
        let allBytes = (0...255).map { UInt8($0) }
        let scanner = SecretScanner(secrets: [secret, allBytes])
        let body = [0xFF, 0x00] + secret + allBytes + secret.dropLast()
        #expect(NaiveSecretScan.describe(scanner.matches(in: body)) == "0/raw@2..<8 1/raw@8..<264")
        var scrubber = SecretScrubber(scanner: scanner, holdBack: scanner.longestPattern - 1)
        var output: [UInt8] = []
        scrubber.scrub(body, into: &output)
        scrubber.finish(into: &output)
        #expect(output == [0xFF, 0x00] + [UInt8](repeating: UInt8(ascii: "*"), count: 262) + secret.dropLast())
        #expect(NaiveSecretScan.disagreements(scanner, body, cuts: [3, 100, 263]) == [])
    }

    @Test("every split point, in 2 pieces, in 3 pieces, and byte by byte, of a body with secrets in several encodings")
    func everySplitPoint() {
        let scanner = SecretScanner(secrets: [bytes("tok_9xQ2"), bytes("tok_9xQ2-long-Z"), bytes("pa ss")])
        let base64 = Data("user:tok_9xQ2-long-Z".utf8).base64EncodedString()
        let body = bytes("a=tok_9xQ2&b=pa%20ss&auth=" + base64 + "&c=tok_9xQ2-long-Z;tok_9x")
        // The Basic credentials' value is found twice: its run and, as it ends the text, its final run.
        #expect(scanner.matches(in: body).count == 7)
        for cut in 0...body.count {
            #expect(NaiveSecretScan.disagreements(scanner, body, cuts: [cut]) == [], "cut at \(cut)")
            for second in cut...body.count {
                #expect(NaiveSecretScan.disagreements(scanner, body, cuts: [cut, second]) == [], "cuts at \(cut), \(second)")
            }
        }
        #expect(NaiveSecretScan.disagreements(scanner, body, cuts: Array(0...body.count)) == [])
    }

    @Test("scrubbing keeps the length, holds back exactly the last W bytes, and masks a value split across pieces")
    func scrubbing() {
        let scanner = SecretScanner(secrets: [bytes("SECRET-1")])
        // W = 12: more than the longest form needs (11), as a configuration with longer values sets it.
        var scrubber = SecretScrubber(scanner: scanner, holdBack: 12)
        var output: [UInt8] = []
        scrubber.scrub(bytes("hello SEC"), into: &output)
        #expect(output == [], "9 bytes: all held")
        scrubber.scrub(bytes("RET-"), into: &output)
        #expect(output == bytes("h"), "13 bytes: all but the last 12")
        scrubber.scrub(bytes("1 and SECRET-"), into: &output)
        #expect(output == bytes("hello ********"), "the value was held whole when its last byte came")
        scrubber.scrub(bytes("2"), into: &output)
        #expect(output == bytes("hello ******** "))
        scrubber.scrub(bytes(" SE"), into: &output)
        scrubber.finish(into: &output)
        #expect(output == bytes("hello ******** and SECRET-2 SE"))
    }

    @Test("the guard forwards all but the last W bytes and stops before a complete value")
    func egressGuard() {
        let scanner = SecretScanner(secrets: [bytes("SECRET-1")])
        var egress = EgressGuard(scanner: scanner, holdBack: 12)
        #expect(egress.inspect(bytes("hello SEC")) == .init(forwardable: 0, leak: nil))
        #expect(egress.inspect(bytes("RET-2 SECR")) == .init(forwardable: 7, leak: nil))
        let verdict = egress.inspect(bytes("ET-1 more"))
        // The value ends at 23: what lies 12 or more bytes before its end (bytes 7..<11) goes, the rest never.
        #expect(verdict.forwardable == 4)
        #expect(verdict.leak?.range == 15..<23)
        #expect(egress.inspect(bytes("x")) == .init(forwardable: 0, leak: verdict.leak))
        #expect(egress.finish() == 0)

        var clean = EgressGuard(scanner: scanner, holdBack: 12)
        #expect(clean.inspect(bytes("no secret SECRET")) == .init(forwardable: 4, leak: nil))
        #expect(clean.finish() == 12)
        var empty = EgressGuard(scanner: SecretScanner(secrets: []), holdBack: 0)
        #expect(empty.inspect(bytes("abc")) == .init(forwardable: 3, leak: nil))
    }

    @Test("property: random secret sets, bodies and split points agree with the naive reference")
    func property() {
        for seed in UInt64(1)...300 {
            var random = SeededGenerator(state: seed)
            let (secrets, body, cuts) = Self.randomCase(&random)
            // The default scanner takes these small pieces one byte at a time; the others take
            // every piece that can hold four warm-ups as a large one: probed, then each way.
            for (lanedFrom, path, pairSkip) in NaiveSecretScan.scanWays {
                let scanner = SecretScanner(secrets: secrets, lanedFrom: lanedFrom, largePieces: path, pairSkip: pairSkip)
                let problems = NaiveSecretScan.disagreements(scanner, body, cuts: cuts)
                #expect(
                    problems == [],
                    "seed \(seed), laned from \(lanedFrom ?? -1) \(path) \(pairSkip): secrets \(secrets) body \(body) cuts \(cuts)")
            }
        }
    }

    /// The laned pass (four quarters walked at once, each after a warm-up of the longest pattern's
    /// length) at its default size: a value planted at every offset near a boundary of bodies whose quarters
    /// divide evenly or leave 1-3 bytes over, and a value begun in one large piece and completed in the next. An off-by-one in a quarter's
    /// start, its warm-up or the leftover bytes misses or invents a match here.
    ///
    /// Both ways a large piece goes after the probe of its first eighth, and the default, which
    /// here (a filler that never leaves the start state) skips.
    @Test(
        "the laned pass at its default size: a value at every offset, across every quarter boundary and two pieces",
        arguments: [PatternAutomaton.LargePiecePath.probed, .probedThenSkipped, .probedThenLaned])
    func lanedPassEveryOffset(path: PatternAutomaton.LargePiecePath) {
        let value = bytes("tok_Q9-laned")  // 12 bytes, so base64 forms too
        let scanner = SecretScanner(secrets: [value], largePieces: path)
        let filler = Array(repeating: UInt8(ascii: "."), count: 1027)
        for size in 1024...1027 {
            let quarter = size / 4
            // Every offset within 40 bytes of a quarter boundary, a warm-up or either end.
            let near = [0, size / 8, quarter, 2 * quarter, 3 * quarter, 4 * quarter, size].flatMap { ($0 - 40)...($0 + 40) }
            for offset in Set(near).sorted() where offset >= 0 && offset + value.count <= size {
                var body = Array(filler.prefix(size))
                body.replaceSubrange(offset..<(offset + value.count), with: value)
                let problems = NaiveSecretScan.disagreements(scanner, body, cuts: [])
                #expect(problems == [], "size \(size) (quarters of \(quarter)), value at \(offset)")
            }
        }
        // A piece of 2 KiB ending in the value's first k bytes, then one of 2 KiB beginning with
        // the rest (and one with no value at all): the state crosses the pieces through lane 3
        // and back into lane 0.
        for k in 0...value.count {
            let body = Array(repeating: UInt8(ascii: "."), count: 2048 - k) + value + Array(repeating: UInt8(ascii: "-"), count: 2048)
            #expect(NaiveSecretScan.disagreements(scanner, body, cuts: [2048]) == [], "value split after \(k) bytes")
        }
        let clean = Array(repeating: UInt8(ascii: "t"), count: 4096)
        #expect(NaiveSecretScan.disagreements(scanner, clean, cuts: [2048]) == [])
        // A value in each of two large pieces: the second's offsets count every byte of the first.
        var twice = Array(repeating: UInt8(ascii: "t"), count: 4096)
        twice.replaceSubrange(1500..<(1500 + value.count), with: value)
        twice.replaceSubrange(3000..<(3000 + value.count), with: value)
        #expect(NaiveSecretScan.disagreements(scanner, twice, cuts: [2048]) == [])
    }

    /// The start-state skip compares sixteen bytes at once with each byte a pattern can begin with
    /// (up to ten). Each of ten patterns (ten pairs: too many for the portable pair skip), alone in
    /// zeros at every position of a vector and of the eight-byte step after it: a compare left out
    /// skips it.
    @Test("the vector skip stops at every byte a pattern can begin with, in every lane")
    func vectorSkipEveryStartingByte() {
        let patterns = (0..<PatternAutomaton.skipThreshold).map { index in [UInt8(0x41 + index), 0x7E, UInt8(0x61 + index)] }
        let automaton = PatternAutomaton(patterns: patterns, pairSkip: .portable)
        #expect(automaton.pairCount == 0)
        Self.forEachPlanted(patterns, fillers: [0x00], size: 64, offsets: 0..<40) { body, index, range, _ in
            #expect(Self.matchRanges(automaton, body) == [index: range], "pattern \(index) at \(range.lowerBound)")
        }
    }

    /// The pair skip compares sixteen positions at once with each pattern's first two bytes (up to
    /// eight pairs; the vector filter 32 positions with up to 64). Each of eight patterns at every
    /// position of three blocks and the bytes after them (a pair across their boundaries too),
    /// among zeros, among copies of the first pattern's first byte (every position begins a
    /// pattern, none a pair: the state at each block's end is that byte alone), and among copies
    /// of a second byte; and with a one-byte pattern, which turns the pair skip off.
    @Test(
        "the pair skip stops at every pair a pattern begins with, in every lane, whatever bytes surround it",
        arguments: [PatternAutomaton.PairSkip.fastest, .portable])
    func pairSkipEveryStartingPair(pairSkip: PatternAutomaton.PairSkip) {
        let patterns = (0..<PatternAutomaton.pairLimit).map { index in [UInt8(0x41 + index), UInt8(0x61 + index), 0x7E] }
        let automaton = PatternAutomaton(patterns: patterns, pairSkip: pairSkip)
        #expect(automaton.pairCount == PatternAutomaton.pairLimit)
        Self.forEachPlanted(patterns, fillers: [0x00, 0x41, 0x61], size: 104, offsets: 0..<101) { body, index, range, filler in
            #expect(Self.matchRanges(automaton, body) == [index: range], "pattern \(index) at \(range.lowerBound) among \(filler)")
        }
        let withSingleByte = PatternAutomaton(patterns: patterns + [[0x7E]], pairSkip: pairSkip)
        #expect(withSingleByte.pairCount == 0)
    }

    /// The vector filter with buckets of two pairs each (sixteen patterns) and bytes with the high
    /// bit set (a shuffle index with it set reads zero): each pattern at every position of three
    /// blocks and after them, among fillers that share its nibbles, whole and cut in two pieces at
    /// every offset.
    @Test("the vector filter's shared buckets and high bytes: every pattern found at every offset, whole and cut")
    func pairFilterSharedBuckets() {
        let patterns = (0..<16).map { index in [UInt8(0x80 + index), UInt8(0xC0 + index), 0x7E] }
        let automaton = PatternAutomaton(patterns: patterns, pairSkip: .fastest)
        #expect(automaton.pairCount == 16)
        Self.forEachPlanted(patterns, fillers: [0x00, 0x80, 0xC0, 0xFF], size: 104, offsets: 0..<101) { body, index, range, filler in
            let offset = range.lowerBound
            #expect(Self.matchRanges(automaton, body) == [index: range], "pattern \(index) at \(offset) among \(filler)")
            for cut in (offset - 2)...(offset + 4) where cut > 0 && cut < body.count {
                var state = PatternAutomaton.State.start
                var ends: [Int] = []
                for piece in [body[..<cut], body[cut...]] {
                    let start = piece.startIndex
                    Array(piece).withUnsafeBufferPointer { buffer in
                        _ = automaton.scan(buffer, from: &state) { _, end in
                            ends.append(start + end)
                            return true
                        }
                    }
                }
                #expect(ends == [range.upperBound], "pattern \(index) at \(offset) among \(filler), cut at \(cut)")
            }
        }
    }

    /// Each pattern alone, at each offset, in a body of `size` bytes of each filler: `check` gets
    /// the body, the pattern's index and where it lies.
    static func forEachPlanted(
        _ patterns: [[UInt8]], fillers: [UInt8], size: Int, offsets: Range<Int>,
        _ check: (_ body: [UInt8], _ index: Int, _ range: Range<Int>, _ filler: UInt8) -> Void
    ) {
        for filler in fillers {
            for (index, pattern) in patterns.enumerated() {
                for offset in offsets {
                    var body = [UInt8](repeating: filler, count: size)
                    let range = offset..<(offset + pattern.count)
                    body.replaceSubrange(range, with: pattern)
                    check(body, index, range, filler)
                }
            }
        }
    }

    /// Every match in `body` from the start state: pattern index to range.
    static func matchRanges(_ automaton: PatternAutomaton, _ body: [UInt8]) -> [Int: Range<Int>] {
        var found: [Int: Range<Int>] = [:]
        body.withUnsafeBufferPointer { buffer in automaton.forEachMatch(in: buffer) { found[$0] = $1 } }
        return found
    }

    /// Secrets over a small alphabet (so they overlap and nest), a body made of that alphabet and
    /// of the secrets' encoded forms, and up to 6 cuts.
    static func randomCase(_ random: inout some RandomNumberGenerator) -> ([[UInt8]], [UInt8], [Int]) {
        let alphabet: [UInt8] = bytes("ab%+/=") + [0x00, 0xFF]
        let secrets = (0..<Int.random(in: 0...6, using: &random)).map { _ in
            (0..<Int.random(in: 1...10, using: &random)).map { _ in alphabet.randomElement(using: &random)! }
        }
        let forms = secrets.flatMap { SecretEncoding.forms(of: $0).map(\.bytes) }
        var body: [UInt8] = []
        for _ in 0..<Int.random(in: 0...12, using: &random) {
            if let form = forms.randomElement(using: &random), Bool.random(using: &random) {
                body += form.prefix(Int.random(in: form.count / 2...form.count, using: &random))
            } else {
                body += (0..<Int.random(in: 0...4, using: &random)).map { _ in alphabet.randomElement(using: &random)! }
            }
        }
        let cuts = (0..<Int.random(in: 0...6, using: &random)).map { _ in Int.random(in: 0...body.count, using: &random) }
        return (secrets, body, cuts)
    }
}
