/// Aho-Corasick over bytes, compiled to a dense DFA: one table load per input byte, no branch but
/// the "a pattern ends here" test, no allocation. Built once per pattern set, then immutable.
///
/// Bytes that occur in no pattern share one column (byte classes), which keeps the table at
/// states × (distinct pattern bytes + 1) entries instead of states × 256: 15 MB for 300 token-like
/// secrets of 40 bytes in all their encodings, 0.5 MB for 10 (bench/secretscan.sh).
public struct PatternAutomaton: Sendable {
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
    /// the fuzzer lower it to put small bodies through that pass too.
    public init(patterns: [[UInt8]], lanedFrom: Int? = nil) {
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
        // Worth it only when few bytes can begin a pattern (a token or two): with many, text hits
        // one every few bytes and the skip costs more than it saves (bench/secretscan.sh).
        skipsStart = leaves.reduce(0) { $0 + Int($1) } <= Self.skipThreshold
    }

    /// Per byte: 1 when it takes the start state anywhere else. When few bytes do, most bytes of
    /// most bodies keep the start state: the scan skips them eight at a time (independent loads,
    /// no chain through the table).
    private let leavesStart: [UInt8]
    private let skipsStart: Bool
    static let skipThreshold = 10

    /// Patterns identical to the one a state records (by state): reported with it.
    private let duplicates: [Int32: [Int]]

    var longestPattern: Int { patternLengths.max() ?? 0 }
    var tableBytes: Int { transitions.count * MemoryLayout<UInt32>.stride }

    func pendingLength(_ state: State) -> Int { Int(pendingLength[state.row / classCount]) }

    /// Runs `bytes` from `state`. For every pattern ending at `bytes[i]` calls `onMatch(pattern,
    /// i + 1)`, longest first at one position; `false` from it stops the scan there. Returns how
    /// many bytes were consumed (all unless stopped).
    func scan(_ bytes: UnsafeBufferPointer<UInt8>, from state: inout State,
              onMatch: (_ pattern: Int, _ end: Int) -> Bool) -> Int {
        // Nearly every body holds no secret: the laned pass proves that at several times the
        // speed, and only a piece where it finds a match is scanned again, exactly, below.
        if bytes.count >= lanedMinimum, let row = endRowIfNoMatch(bytes, from: state.row) {
            state.row = row
            return bytes.count
        }
        if skipsStart { return scanSkippingStart(bytes, from: &state, onMatch: onMatch) }
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

    /// `scan` for automata few bytes can leave the start state with: in the start state, bytes that
    /// cannot begin a pattern are skipped eight at a time (independent loads, no chain through the
    /// table); the same transitions otherwise.
    private func scanSkippingStart(_ bytes: UnsafeBufferPointer<UInt8>, from state: inout State,
                                   onMatch: (_ pattern: Int, _ end: Int) -> Bool) -> Int {
        var row = state.row
        defer { state.row = row }
        return transitions.withUnsafeBufferPointer { table in
            byteClass.withUnsafeBufferPointer { classes in
                leavesStart.withUnsafeBufferPointer { leaves in
                    var index = 0
                    let count = bytes.count
                    while index < count {
                        if row == 0 {
                            while index &+ 8 <= count {
                                let any = leaves[Int(bytes[index])] | leaves[Int(bytes[index &+ 1])] | leaves[Int(bytes[index &+ 2])]
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
                        if entry & Self.matchFlag != 0 && !reportMatches(at: row / classCount, end: index, onMatch) {
                            return index
                        }
                    }
                    return index
                }
            }
        }
    }

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
