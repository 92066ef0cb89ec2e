import CScanPrefilter
import Testing

@testable import SecretScan

/// The vector pair filter (`CScanPrefilter`) against a scalar model of the same tables, and the
/// tables against the pair set: a pair of the set is never passed over (a value would then go
/// unseen), and with at most eight pairs nothing else stops the skip.
@Suite("SecretScan: the vector pair filter", .enabled(if: PatternAutomaton.pairFilterRuns, "needs x86-64 with AVX2"))
struct PairFilterTests {
    struct Tables {
        var filter = sp_pair_filter()
        let pairs: [(UInt8, UInt8)]

        init(_ pairs: [(UInt8, UInt8)]) {
            self.pairs = pairs
            sp_pair_filter_build(&filter, pairs.map(\.0), pairs.map(\.1), pairs.count)
        }

        /// The scalar model: the bucket bits each byte's nibbles select, as the shuffles do.
        func accepts(_ first: UInt8, _ second: UInt8) -> Bool {
            func bits(_ table: PartialKeyPath<sp_pair_filter>, _ nibble: UInt8) -> UInt8 {
                withUnsafeBytes(of: filter) { $0[MemoryLayout<sp_pair_filter>.offset(of: table)! + Int(nibble)] }
            }
            let firstBits = bits(\.first_low, first & 15) & bits(\.first_high, first >> 4)
            let secondBits = bits(\.second_low, second & 15) & bits(\.second_high, second >> 4)
            return firstBits & secondBits != 0
        }

        /// What the skip must return: the first accepted position within whole 32-position blocks
        /// whose last pair lies in `bytes`, else the first position of the block that did not fit.
        func expectedSkip(_ bytes: [UInt8]) -> Int {
            var block = 0
            while block + 33 <= bytes.count {
                for index in block..<(block + 32) where accepts(bytes[index], bytes[index + 1]) { return index }
                block += 32
            }
            return block
        }

        func skip(_ bytes: [UInt8]) -> Int {
            withUnsafePointer(to: filter) { filter in
                bytes.withUnsafeBufferPointer { sp_pair_filter_skip(filter, $0.baseAddress, $0.count) }
            }
        }
    }

    /// A pair as one number, for sets of pairs.
    static func key(_ first: UInt8, _ second: UInt8) -> UInt16 { UInt16(first) << 8 | UInt16(second) }

    static func randomPairs(_ count: Int, _ random: inout SeededGenerator) -> [(UInt8, UInt8)] {
        var seen = Set<UInt16>()
        var pairs: [(UInt8, UInt8)] = []
        while pairs.count < count {
            let pair = (UInt8.random(in: 0...255, using: &random), UInt8.random(in: 0...255, using: &random))
            if seen.insert(key(pair.0, pair.1)).inserted { pairs.append(pair) }
        }
        return pairs.sorted { ($0.0, $0.1) < ($1.0, $1.1) }
    }

    @Test("every pair of the set is accepted; with eight or fewer, exactly the set", arguments: [1, 2, 5, 8, 9, 16, 40, 64])
    func acceptsTheSet(count: Int) {
        for seed in UInt64(1)...20 {
            var random = SeededGenerator(state: seed &* 1000 &+ UInt64(count))
            let tables = Tables(Self.randomPairs(count, &random))
            let set = Set(tables.pairs.map { Self.key($0.0, $0.1) })
            var extra = 0
            for first in 0...255 {
                for second in 0...255 {
                    let inSet = set.contains(Self.key(UInt8(first), UInt8(second)))
                    let accepted = tables.accepts(UInt8(first), UInt8(second))
                    #expect(!inSet || accepted, "seed \(seed): pair (\(first), \(second)) of the set not accepted")
                    if accepted && !inSet { extra += 1 }
                }
            }
            if count <= 8 { #expect(extra == 0, "seed \(seed): \(extra) pairs outside the set accepted") }
        }
    }

    /// The vector code against the scalar model, on bytes drawn mostly from the pairs' own bytes
    /// (so candidates fall at every lane, at the 128-bit half of a block, at its last position,
    /// whose second byte is the next block's first, and in the bytes after the last whole block).
    @Test("the vector skip stops where the scalar model of its tables does", arguments: [1, 3, 8, 16, 64])
    func vectorMatchesModel(count: Int) {
        for seed in UInt64(1)...400 {
            var random = SeededGenerator(state: seed &* 7919 &+ UInt64(count))
            let tables = Tables(Self.randomPairs(count, &random))
            let alphabet: [UInt8] = tables.pairs.flatMap { pair -> [UInt8] in [pair.0, pair.1] } + [0, 0x41, 0xFF]
            let length = Int.random(in: 0...200, using: &random)
            // Filler the tables reject (after itself), with a few bytes of the pairs planted: the
            // skip then has blocks to pass over before it stops.
            let start = UInt8.random(in: 0...255, using: &random)
            let filler = (0...255).lazy.map { start &+ UInt8($0) }.first { !tables.accepts($0, $0) } ?? start
            var body = [UInt8](repeating: filler, count: length)
            for _ in 0..<Int.random(in: 0...6, using: &random) where length > 0 {
                body[Int.random(in: 0..<length, using: &random)] = alphabet.randomElement(using: &random)!
            }
            #expect(tables.skip(body) == tables.expectedSkip(body), "seed \(seed), \(count) pairs, body \(body)")
        }
    }

    @Test("a planted pair is found at every position of two blocks")
    func everyPosition() {
        let tables = Tables([(UInt8(ascii: "t"), UInt8(ascii: "k"))])
        for position in 0..<65 {
            var body = [UInt8](repeating: UInt8(ascii: "."), count: 66)
            body[position] = UInt8(ascii: "t")
            body[position + 1] = UInt8(ascii: "k")
            // Two whole blocks fit (positions 0..<64); the third would need bytes 64...96, so a
            // pair at 64 is left to the caller.
            #expect(tables.skip(body) == (position < 64 ? position : 64), "pair at \(position)")
            #expect(tables.skip(body + [UInt8](repeating: UInt8(ascii: "."), count: 40)) == position, "pair at \(position), room after it")
        }
    }
}
