/// Response scrubbing: the body passes through with every byte of every match replaced by `*`,
/// same length, so Content-Length and chunk sizes still hold. The last `holdBack` bytes of what
/// arrived wait for the next piece (a value the next piece completes is masked whole), and leave
/// when more bytes come, when the body ends (`finish`) or when the caller's idle timer runs out
/// (`release`), never because of what they are: holding back only "bytes that could begin a
/// value" told a client that had an origin echo its guesses whether each guess began the value
/// (docs/security-model.md, "No oracle").
public struct SecretScrubber: Sendable {
    private var stream: SecretScanStream
    /// Scanned bytes not yet released, masked where already known: the stream's last
    /// `heldBack.count` bytes.
    private var heldBack: [UInt8] = []
    public let holdBack: Int

    /// `holdBack`: the configuration's (see `SecretHoldBack`); never less than the scanner needs.
    public init(scanner: SecretScanner, holdBack: Int) {
        precondition(holdBack >= scanner.longestPattern - 1, "a hold-back shorter than a pattern lets a value's first bytes out")
        stream = scanner.makeStream()
        self.holdBack = holdBack
        heldBack.reserveCapacity(holdBack)
    }

    public static let mask = UInt8(ascii: "*")

    /// Appends to `output` the bytes now safe to send (scrubbed), calling `onMatch` for each match
    /// completed by this piece.
    public mutating func scrub(
        _ piece: UnsafeBufferPointer<UInt8>, into output: inout [UInt8],
        onMatch: (SecretMatch) -> Void = { _ in }
    ) {
        let outputStart = output.count
        let streamStart = stream.offset - heldBack.count  // the stream offset of output[outputStart]
        output.append(contentsOf: heldBack)
        output.append(contentsOf: piece)
        heldBack.removeAll(keepingCapacity: true)
        stream.scan(piece) { match in
            // A match ending here starts in what was held, unless an idle release let its first
            // bytes go already: those cannot be taken back, the rest is masked.
            for offset in max(match.range.lowerBound, streamStart)..<match.range.upperBound {
                output[outputStart + offset - streamStart] = Self.mask
            }
            onMatch(match)
        }
        let keep = min(holdBack, output.count - outputStart)
        heldBack.append(contentsOf: output[(output.count - keep)...])
        output.removeLast(keep)
    }

    public mutating func scrub(_ piece: [UInt8], into output: inout [UInt8], onMatch: (SecretMatch) -> Void = { _ in }) {
        piece.withUnsafeBufferPointer { scrub($0, into: &output, onMatch: onMatch) }
    }

    /// The idle time ran out with no new byte: what was held goes now (the scanner keeps its state).
    public mutating func release(into output: inout [UInt8]) { finish(into: &output) }

    /// The end of the body: what was held back cannot become a match any more.
    public mutating func finish(into output: inout [UInt8]) {
        output.append(contentsOf: heldBack)
        heldBack.removeAll(keepingCapacity: true)
    }

    /// How many bytes wait for the next piece.
    public var held: Int { heldBack.count }
}
