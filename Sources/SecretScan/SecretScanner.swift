/// One encoded form of one secret, as the scanner looks for it.
public struct SecretPattern: Sendable, Hashable {
    /// Its index in `SecretScanner.patterns`.
    public let id: Int
    /// The index of the secret, in the order the scanner was given them.
    public let secret: Int
    public let encoding: SecretEncoding
    public let bytes: [UInt8]
}

/// A complete occurrence of a pattern, at absolute offsets in the stream (from its first byte).
public struct SecretMatch: Sendable, Hashable {
    public let pattern: SecretPattern
    public let range: Range<Int>
}

/// Every secret of a set in all its encodings (`SecretEncoding.forms`), compiled into one
/// automaton. Build it once per secret set (a reload, a rotation); it is immutable and shared by
/// every stream that scans with it.
public struct SecretScanner: Sendable {
    public let patterns: [SecretPattern]
    let automaton: PatternAutomaton

    /// `secrets`: each secret's exact bytes; an empty one is ignored. `lanedFrom`, `largePieces`,
    /// `pairSkip`: see `PatternAutomaton.init`.
    public init(
        secrets: [[UInt8]], lanedFrom: Int? = nil, largePieces: PatternAutomaton.LargePiecePath = .probed,
        pairSkip: PatternAutomaton.PairSkip = .fastest
    ) {
        var patterns: [SecretPattern] = []
        for (secret, raw) in secrets.enumerated() where !raw.isEmpty {
            for form in SecretEncoding.forms(of: raw) {
                patterns.append(SecretPattern(id: patterns.count, secret: secret, encoding: form.encoding, bytes: form.bytes))
            }
        }
        self.patterns = patterns
        automaton = PatternAutomaton(patterns: patterns.map(\.bytes), lanedFrom: lanedFrom, largePieces: largePieces, pairSkip: pairSkip)
    }

    /// The most a stream ever holds back is one less than this.
    public var longestPattern: Int { automaton.longestPattern }
    /// The automaton's transition table, for capacity planning (it dominates the scanner's size).
    public var tableBytes: Int { automaton.tableBytes }

    public func makeStream() -> SecretScanStream { SecretScanStream(scanner: self) }

    /// Every match in one complete buffer, in the order of their ends (longest first at one end).
    public func matches(in bytes: [UInt8]) -> [SecretMatch] {
        var stream = makeStream()
        var found: [SecretMatch] = []
        stream.scan(bytes) { found.append($0) }
        return found
    }
}

/// Scans a body piece by piece: the state between pieces is the automaton's, so a match split
/// across any number of pieces is found when its last byte arrives, with its absolute range.
public struct SecretScanStream: Sendable {
    public let scanner: SecretScanner
    private var state = PatternAutomaton.State.start
    /// How many bytes have been scanned: the absolute offset of the next piece's first byte.
    public private(set) var offset = 0

    init(scanner: SecretScanner) { self.scanner = scanner }

    /// The trailing bytes a match ending in a later piece could still start in: the longest
    /// suffix of the stream so far that is a proper prefix of a pattern (< `longestPattern`).
    public var pendingLength: Int { scanner.automaton.pendingLength(state) }

    /// Scans the next piece, calling `onMatch` for each match that ends in it.
    public mutating func scan(_ piece: UnsafeBufferPointer<UInt8>, onMatch: (SecretMatch) -> Void) {
        _ = scanUntil(
            piece,
            stop: { match in
                onMatch(match); return false
            })
    }

    public mutating func scan(_ piece: [UInt8], onMatch: (SecretMatch) -> Void) {
        piece.withUnsafeBufferPointer { scan($0, onMatch: onMatch) }
    }

    /// Scans until `stop` returns true for a match; returns how many bytes of `piece` were consumed
    /// (through the last byte of the match that stopped it).
    mutating func scanUntil(_ piece: UnsafeBufferPointer<UInt8>, stop: (SecretMatch) -> Bool) -> Int {
        let base = offset
        let patterns = scanner.patterns
        let consumed = scanner.automaton.scan(piece, from: &state) { pattern, end in
            let length = patterns[pattern].bytes.count
            return !stop(SecretMatch(pattern: patterns[pattern], range: (base + end - length)..<(base + end)))
        }
        offset += consumed
        return consumed
    }
}
