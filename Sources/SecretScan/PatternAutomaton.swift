import CScanPrefilter

/// Aho-Corasick over bytes, compiled to a dense DFA: one table load per input byte, no branch but
/// the "a pattern ends here" test, no allocation. Built once per pattern set, then immutable.
///
/// Bytes that occur in no pattern share one column (byte classes), which keeps the table at
/// states × (distinct pattern bytes + 1) entries instead of states × 256: 15 MB for 300 token-like
/// secrets of 40 bytes in all their encodings, 0.5 MB for 10 (bench/secretscan.sh).
public final class PatternAutomaton: Sendable {
    /// The DFA: `transitions[row + byteClass[byte]]` is the next state's row (state × classCount),
    /// with `matchFlag` set when some pattern ends in that state.
    private let transitions: [UInt32]
    private let byteClass: [UInt8]
    private let classCount: Int
    /// Per state: the pattern that ends exactly there (-1 if none), and the nearest state on the
    /// failure chain where another pattern ends (-1 if none): every pattern ending at a position.
    private let patternEnding: [Int32]
    private let nextOutput: [Int32]
    /// Per state: the length of the longest suffix of the input so far that is a proper prefix of
    /// some pattern. Bytes before it can no longer be part of a match that ends later.
    private let pendingLength: [Int32]
    let patternLengths: [Int]

    static let matchFlag: UInt32 = 0x8000_0000

    /// A position in the automaton: the current state's row in the table.
    struct State: Sendable {
        fileprivate var row: Int
        static let start = State(row: 0)
    }

    /// `lanedFrom`: the smallest piece the laned pass takes (`endRowIfNoMatch`), by default 1 KiB
    /// and 16 times the longest pattern (the three warm-ups then add under a fifth); tests and
    /// the fuzzer lower it to put small bodies through that pass too. `largePieces`: how such a
    /// piece is taken when the start state can be skipped; tests force each way.
    /// `pairSkip`: how the start state's pairs are skipped; tests force the portable loop where
    /// the vector filter would run.
    public init(
        patterns: [[UInt8]], lanedFrom: Int? = nil, largePieces: LargePiecePath = .probed, pairSkip: PairSkip = .fastest
    ) {
        self.largePieces = largePieces
        patternLengths = patterns.map(\.count)
        let longest = patterns.map(\.count).max() ?? 0
        // Whatever is asked, each lane's warm-up must fit before its quarter.
        lanedMinimum = max(Self.laneCount * longest, lanedFrom ?? max(1024, 16 * longest), Self.laneCount)
        var byteClass = [UInt8](repeating: 0, count: 256)
        var classCount = 1
        for byte in Set(patterns.joined()).sorted() {
            byteClass[Int(byte)] = UInt8(truncatingIfNeeded: classCount)
            classCount += 1
        }
        // 256 distinct bytes need 257 classes: then every byte keeps its own column, and class 0
        // (bytes in no pattern) is never used.
        if classCount > 256 { for byte in 0..<256 { byteClass[byte] = UInt8(byte) }; classCount = 256 }

        // The trie, in the table itself: 0 means "no child" (the root is nobody's child).
        var next: [Int] = .init(repeating: 0, count: classCount)
        var ending: [Int32] = [-1]
        var depth: [Int] = [0]
        var duplicates: [Int32: [Int]] = [:]
        for (index, pattern) in patterns.enumerated() where !pattern.isEmpty {
            var node = 0
            for byte in pattern {
                let slot = node * classCount + Int(byteClass[Int(byte)])
                if next[slot] == 0 {
                    next[slot] = ending.count
                    next += repeatElement(0, count: classCount)
                    ending.append(-1)
                    depth.append(depth[node] + 1)
                }
                node = next[slot]
            }
            // An identical pattern (the same secret given twice) shares the node.
            if ending[node] == -1 { ending[node] = Int32(index) } else { duplicates[Int32(node), default: []].append(index) }
        }
        let stateCount = ending.count
        precondition(stateCount * classCount < Int(Self.matchFlag), "secret set too large for one automaton")

        // Breadth first: failure links, then each row completed from its failure state's row.
        var failure = [Int](repeating: 0, count: stateCount)
        var output = [Int32](repeating: -1, count: stateCount)
        var pending = [Int32](repeating: 0, count: stateCount)
        var queue = [0]
        var head = 0
        while head < queue.count {
            let node = queue[head]
            head += 1
            var hasChild = false
            for column in 0..<classCount {
                let slot = node * classCount + column
                let child = next[slot]
                // The row is still the trie's (rows are completed in this order): non-zero is a child.
                if child != 0 {
                    hasChild = true
                    let fail = node == 0 ? 0 : next[failure[node] * classCount + column]
                    failure[child] = fail
                    output[child] = ending[fail] != -1 ? Int32(fail) : output[fail]
                    queue.append(child)
                } else {
                    next[slot] = node == 0 ? 0 : next[failure[node] * classCount + column]
                }
            }
            pending[node] = hasChild ? Int32(depth[node]) : pending[failure[node]]
        }
        self.duplicates = duplicates
        self.byteClass = byteClass
        self.classCount = classCount
        patternEnding = ending
        nextOutput = output
        pendingLength = pending
        transitions = next.map { target in
            let matches = ending[target] != -1 || output[target] != -1
            return UInt32(target * classCount) | (matches ? Self.matchFlag : 0)
        }
        // Bytes that leave the start state: no pattern begins with any other byte.
        var leaves = [UInt8](repeating: 0, count: 256)
        for byte in 0..<256 where transitions[Int(byteClass[byte])] != 0 { leaves[byte] = 1 }
        leavesStart = leaves
        // The same bytes, sixteen abreast: each compared with every byte that leaves the start
        // state (the list padded with its first, which changes nothing). Worth it only when few
        // bytes can begin a pattern (a token or two): with many, text hits one every few bytes and
        // the skip costs more than it saves (bench/secretscan.sh).
        let starters = (0..<256).filter { leaves[$0] != 0 }.map { UInt8($0) }
        leavesStartNever = starters.isEmpty
        skipsStartBytes = starters.count <= Self.skipThreshold
        startBytes = (0..<Self.skipThreshold).map { SIMD16(repeating: starters.isEmpty ? 0 : starters[min($0, starters.count - 1)]) }
        // The first two bytes of every pattern, when there are few such pairs and no pattern is a
        // single byte: a pattern's first byte alone is common in text (one byte in twenty for one
        // secret's forms), the pair rare (bench/secretscan.sh).
        // Sorted, so that pairs sharing a first byte share the vector filter's bucket.
        var pairs = Set(patterns.filter { $0.count >= 2 }.map { [$0[0], $0[1]] }).sorted { $0.lexicographicallyPrecedes($1) }
        if patterns.contains(where: { $0.count == 1 }) { pairs = [] }
        if pairSkip == .fastest, Self.pairFilterRuns, !pairs.isEmpty, pairs.count <= Self.filterPairLimit {
            let filter = UnsafeMutablePointer<sp_pair_filter>.allocate(capacity: 1)
            sp_pair_filter_build(filter, pairs.map { $0[0] }, pairs.map { $0[1] }, pairs.count)
            pairFilter = filter
        } else {
            pairFilter = nil
            if pairs.count > Self.pairLimit { pairs = [] }
        }
        pairCount = pairs.count
        startPairs = (0..<Self.pairLimit).map { index in
            let pair = pairs.isEmpty ? [0, 0] : pairs[min(index, pairs.count - 1)]
            return (SIMD16(repeating: pair[0]), SIMD16(repeating: pair[1]))
        }
    }

    /// How a piece of `lanedMinimum` bytes or more is scanned by an automaton that skips the
    /// start state. Skipping runs at 9-25 GB/s with the vector pair filter (up to 64 pairs: ten
    /// secrets) on bytes where those pairs are rare, at 5-6 GB/s with the portable loop (up to eight
    /// pairs: one or two secrets), at 9 GB/s by first bytes alone where none occurs
    /// (zeros, sparse files); the laned pass at 1.8 GB/s whatever the bytes. But every position
    /// that does begin a pattern breaks the skip off (a mispredicted branch, then the table) for
    /// some 25 ns: on text where one byte in twenty can begin a pattern, skipping by first bytes
    /// falls to 0.7 GB/s (bench/secretscan.sh).
    public enum LargePiecePath: Sendable {
        /// The default: the first eighth (at least `minimumProbe` bytes, all of a smaller piece)
        /// is skipped through, exactly, counting the bytes that needed the table; if under one in
        /// fifty did (a break costs about what fifty bytes
        /// cost the laned pass), the rest is skipped through too, else the laned pass takes it.
        case probed
        /// The first eighth as above, then the rest skipped through whatever the count (tests).
        case probedThenSkipped
        /// The first eighth as above, then the rest through the laned pass (tests).
        case probedThenLaned
    }

    /// Per byte: 1 when it takes the start state anywhere else. When few bytes do, most bytes of
    /// most bodies keep the start state: the scan skips them sixteen at a time (`startBytes`),
    /// then eight (independent loads, no chain through the table).
    private let leavesStart: [UInt8]
    /// The start state is skipped (by pairs, by bytes or both; the eight-byte step always works).
    private var skipsStart: Bool { skipsStartBytes || pairCount > 0 }
    /// At most `skipThreshold` bytes begin a pattern: `startBytes` holds them all.
    private let skipsStartBytes: Bool
    private let startBytes: [SIMD16<UInt8>]
    /// The (first, second) bytes of every pattern, padded with the first pair, for the portable
    /// loop. `pairCount`: how many distinct pairs the skip compares, 0 when the pair skip is off (a
    /// one-byte pattern, or more than `filterPairLimit` with the vector filter, more than
    /// `pairLimit` without it).
    private let startPairs: [(SIMD16<UInt8>, SIMD16<UInt8>)]
    let pairCount: Int
    /// The most pairs the portable loop compares (eight vector compares of each kind per block).
    static let pairLimit = 8
    /// The vector filter (`CScanPrefilter`), when it runs here and the pairs are few enough for
    /// its eight buckets to stay selective; it then replaces the portable loop. Owned: freed in
    /// `deinit`, never written after `init`.
    nonisolated(unsafe) private let pairFilter: UnsafeMutablePointer<sp_pair_filter>?
    static let filterPairLimit = 64
    /// Asked of the CPU once per process.
    static let pairFilterRuns = sp_pair_filter_available() != 0

    /// How the start state's pairs are skipped.
    public enum PairSkip: Sendable {
        /// The vector filter where the CPU has it (x86-64 with AVX2), else the portable loop.
        case fastest
        /// Swift's SIMD compares with each pair (tests; what runs where the filter cannot).
        case portable
    }

    deinit { pairFilter?.deallocate() }
    /// No byte leaves the start state (no pattern at all): nothing can ever match.
    private let leavesStartNever: Bool
    static let skipThreshold = 10
    private let largePieces: LargePiecePath

    /// Patterns identical to the one a state records (by state): reported with it.
    private let duplicates: [Int32: [Int]]

    var longestPattern: Int { patternLengths.max() ?? 0 }
    var tableBytes: Int { transitions.count * MemoryLayout<UInt32>.stride }

    func pendingLength(_ state: State) -> Int { Int(pendingLength[state.row / classCount]) }

    /// Runs `bytes` from `state`. For every pattern ending at `bytes[i]` calls `onMatch(pattern,
    /// i + 1)`, longest first at one position; `false` from it stops the scan there. Returns how
    /// many bytes were consumed (all unless stopped).
    func scan(
        _ bytes: UnsafeBufferPointer<UInt8>, from state: inout State,
        onMatch: (_ pattern: Int, _ end: Int) -> Bool
    ) -> Int {
        if leavesStartNever { return bytes.count }
        guard bytes.count >= lanedMinimum else { return scanExactly(bytes, from: &state, onMatch: onMatch) }
        var done = 0
        if skipsStart {
            // Probe: skip through the first eighth exactly, counting the bytes the table took. By
            // default at least `minimumProbe` bytes: in a small piece an eighth is so few bytes that
            // one or two chance hits sent the rest to the laned pass, which costs several times the
            // skip (make cost: 7k instructions for a 1 KiB response). The forced paths keep the
            // eighth, so that small pieces still reach the pass they name.
            let probe = largePieces == .probed ? max(bytes.count / 8, min(bytes.count, Self.minimumProbe)) : bytes.count / 8
            var tableSteps = 0
            var stopped = false
            let probed = scanSkippingStart(
                UnsafeBufferPointer(rebasing: bytes[..<probe]), from: &state,
                tableSteps: &tableSteps
            ) { pattern, end in
                stopped = !onMatch(pattern, end)
                return !stopped
            }
            if stopped { return probed }
            let sparse = tableSteps * 50 < probe
            done = probe
            if largePieces == .probedThenSkipped || (largePieces == .probed && sparse) {
                return done
                    + scanSkippingStart(
                        UnsafeBufferPointer(rebasing: bytes[done...]), from: &state,
                        tableSteps: &tableSteps
                    ) { onMatch($0, done + $1) }
            }
        }
        // Nearly every body holds no secret: the laned pass proves that at several times the
        // table walk's speed, and only a piece where it finds a match is scanned again, exactly.
        let rest = UnsafeBufferPointer(rebasing: bytes[done...])
        if rest.count / Self.laneCount >= longestPattern, let row = endRowIfNoMatch(rest, from: state.row) {
            state.row = row
            return bytes.count
        }
        return done + scanExactly(rest, from: &state) { onMatch($0, done + $1) }
    }

    /// Every byte through the table (skipping the start state where that pays).
    private func scanExactly(
        _ bytes: UnsafeBufferPointer<UInt8>, from state: inout State,
        onMatch: (_ pattern: Int, _ end: Int) -> Bool
    ) -> Int {
        if skipsStart {
            var tableSteps = 0
            return scanSkippingStart(bytes, from: &state, tableSteps: &tableSteps, onMatch: onMatch)
        }
        var row = state.row
        defer { state.row = row }
        return transitions.withUnsafeBufferPointer { table in
            byteClass.withUnsafeBufferPointer { classes in
                var index = 0
                while index < bytes.count {
                    let entry = table[row &+ Int(classes[Int(bytes[index])])]
                    row = Int(entry & ~Self.matchFlag)
                    index &+= 1
                    if entry & Self.matchFlag != 0 && !reportMatches(at: row / classCount, end: index, onMatch) {
                        return index
                    }
                }
                return index
            }
        }
    }

    /// `scan` for automata few bytes or byte pairs can leave the start state with: in the start
    /// state, positions that cannot begin a pattern are skipped sixteen at a time (vector compares
    /// with each pair that can, then each byte), then eight (independent loads, no chain through
    /// the table); the same transitions otherwise. `tableSteps` grows by the bytes that went
    /// through the table.
    private func scanSkippingStart(
        _ bytes: UnsafeBufferPointer<UInt8>, from state: inout State,
        tableSteps: inout Int,
        onMatch: (_ pattern: Int, _ end: Int) -> Bool
    ) -> Int {
        var row = state.row
        var steps = 0
        defer { state.row = row; tableSteps += steps }
        guard let base = bytes.baseAddress else { return 0 }
        return transitions.withUnsafeBufferPointer { table in
            byteClass.withUnsafeBufferPointer { classes in
                leavesStart.withUnsafeBufferPointer { leaves in
                    let s = startBytes
                    let (s0, s1, s2, s3, s4) = (s[0], s[1], s[2], s[3], s[4])
                    let (s5, s6, s7, s8, s9) = (s[5], s[6], s[7], s[8], s[9])
                    let p = startPairs
                    let (a0, b0) = p[0], (a1, b1) = p[1], (a2, b2) = p[2], (a3, b3) = p[3]
                    let (a4, b4) = p[4], (a5, b5) = p[5], (a6, b6) = p[6], (a7, b7) = p[7]
                    var index = 0
                    let count = bytes.count
                    while index < count {
                        if row == 0 {
                            // A block of positions (32 for the vector filter, 16 for the portable
                            // loop) where none begins a pattern's first two bytes: no match (two
                            // bytes or more) can then start in it, and the state after it is the
                            // start state or a first byte alone; the byte after the block (in this
                            // piece: the filter asks for 33 bytes, the loop for 17) does not continue
                            // that first byte, its pair having been compared, so going on from the
                            // start state there gives the same states and matches. The filter also
                            // stops exactly at the first position it accepts, whose predecessor's
                            // pair it rejected: the same holds there.
                            if let pairFilter {
                                index &+= sp_pair_filter_skip(pairFilter, base + index, count &- index)
                            } else if pairCount > 0 {
                                while index &+ 17 <= count {
                                    let v = UnsafeRawPointer(base + index).loadUnaligned(as: SIMD16<UInt8>.self)
                                    let w = UnsafeRawPointer(base + (index &+ 1)).loadUnaligned(as: SIMD16<UInt8>.self)
                                    let hits0 = ((v .== a0) .& (w .== b0)) .| ((v .== a1) .& (w .== b1))
                                    let hits1 = ((v .== a2) .& (w .== b2)) .| ((v .== a3) .& (w .== b3))
                                    let hits2 = ((v .== a4) .& (w .== b4)) .| ((v .== a5) .& (w .== b5))
                                    let hits3 = ((v .== a6) .& (w .== b6)) .| ((v .== a7) .& (w .== b7))
                                    if any(hits0 .| hits1 .| hits2 .| hits3) { break }
                                    index &+= 16
                                }
                            }
                            if skipsStartBytes {
                                while index &+ 16 <= count {
                                    let v = UnsafeRawPointer(base + index).loadUnaligned(as: SIMD16<UInt8>.self)
                                    let hit =
                                        (v .== s0) .| (v .== s1) .| (v .== s2) .| (v .== s3) .| (v .== s4)
                                        .| (v .== s5) .| (v .== s6) .| (v .== s7) .| (v .== s8) .| (v .== s9)
                                    if any(hit) { break }
                                    index &+= 16
                                }
                            }
                            while index &+ 8 <= count {
                                let any =
                                    leaves[Int(bytes[index])] | leaves[Int(bytes[index &+ 1])] | leaves[Int(bytes[index &+ 2])]
                                    | leaves[Int(bytes[index &+ 3])] | leaves[Int(bytes[index &+ 4])] | leaves[Int(bytes[index &+ 5])]
                                    | leaves[Int(bytes[index &+ 6])] | leaves[Int(bytes[index &+ 7])]
                                if any != 0 { break }
                                index &+= 8
                            }
                            while index < count && leaves[Int(bytes[index])] == 0 { index &+= 1 }
                            if index == count { break }
                        }
                        let entry = table[row &+ Int(classes[Int(bytes[index])])]
                        row = Int(entry & ~Self.matchFlag)
                        index &+= 1
                        steps &+= 1
                        if entry & Self.matchFlag != 0 && !reportMatches(at: row / classCount, end: index, onMatch) {
                            return index
                        }
                    }
                    return index
                }
            }
        }
    }

    /// The fewest bytes the default path probes (all of a smaller piece): the count of table steps
    /// in them decides between skipping and the laned pass for the rest. The eighth of the body
    /// pump's 16 KiB pieces, so only smaller pieces probe more than before.
    static let minimumProbe = 2048

    /// The smallest piece the laned pass takes (see `init`).
    private let lanedMinimum: Int
    static let laneCount = 4

    /// One table walk is a chain of dependent loads: each byte waits for the state before it, so
    /// the loop runs at the table's load latency, not at the core's speed. Four lanes walk four
    /// quarters of `bytes` at once, four independent chains, and report only whether any pattern
    /// ended anywhere (nil) or else the state after the last byte.
    ///
    /// Lane k > 0 starts in the start state `longestPattern` bytes before its quarter: the state
    /// after a position is the longest suffix of the input that is a node of the trie, never longer
    /// than the longest pattern, so those bytes alone give the exact state where the quarter
    /// begins. A pattern ending in those warm-up bytes belongs to the lane before, which sees it.
    private func endRowIfNoMatch(_ bytes: UnsafeBufferPointer<UInt8>, from startRow: Int) -> Int? {
        let quarter = bytes.count / Self.laneCount
        let warmUp = longestPattern
        precondition(quarter >= warmUp && Self.laneCount == 4)
        return transitions.withUnsafeBufferPointer { table -> Int? in
            byteClass.withUnsafeBufferPointer { classes -> Int? in
                let base = bytes.baseAddress!
                func warm(_ laneStart: Int) -> Int {
                    var row = 0
                    for index in (laneStart - warmUp)..<laneStart {
                        row = Int(table[row &+ Int(classes[Int(base[index])])] & ~Self.matchFlag)
                    }
                    return row
                }
                var row0 = startRow, row1 = warm(quarter), row2 = warm(2 * quarter), row3 = warm(3 * quarter)
                let lane1 = base + quarter, lane2 = base + 2 * quarter, lane3 = base + 3 * quarter
                var flags: UInt32 = 0
                var index = 0
                while index < quarter {
                    let entry0 = table[row0 &+ Int(classes[Int(base[index])])]
                    let entry1 = table[row1 &+ Int(classes[Int(lane1[index])])]
                    let entry2 = table[row2 &+ Int(classes[Int(lane2[index])])]
                    let entry3 = table[row3 &+ Int(classes[Int(lane3[index])])]
                    flags |= entry0 | entry1 | entry2 | entry3
                    row0 = Int(entry0 & ~Self.matchFlag)
                    row1 = Int(entry1 & ~Self.matchFlag)
                    row2 = Int(entry2 & ~Self.matchFlag)
                    row3 = Int(entry3 & ~Self.matchFlag)
                    index &+= 1
                }
                // The last lane also takes what the division left over.
                var tail = 4 * quarter
                while tail < bytes.count {
                    let entry = table[row3 &+ Int(classes[Int(base[tail])])]
                    flags |= entry
                    row3 = Int(entry & ~Self.matchFlag)
                    tail &+= 1
                }
                return flags & Self.matchFlag == 0 ? row3 : nil
            }
        }
    }

    /// Every match in one buffer from the start state: the pattern's index and its range.
    public func forEachMatch(in bytes: UnsafeBufferPointer<UInt8>, _ body: (_ pattern: Int, _ range: Range<Int>) -> Void) {
        var state = State.start
        _ = scan(bytes, from: &state) { pattern, end in
            body(pattern, (end - patternLengths[pattern])..<end)
            return true
        }
    }

    private func reportMatches(at state: Int, end: Int, _ onMatch: (Int, Int) -> Bool) -> Bool {
        var node = patternEnding[state] != -1 ? Int32(state) : nextOutput[state]
        while node != -1 {
            let pattern = Int(patternEnding[Int(node)])
            guard onMatch(pattern, end) else { return false }
            for duplicate in duplicates[node] ?? [] { guard onMatch(duplicate, end) else { return false } }
            node = nextOutput[Int(node)]
        }
        return true
    }
}
