/// Response scrubbing: the body passes through with every byte of every match replaced by `*`,
/// same length, so Content-Length and chunk sizes still hold. A piece's last bytes that could
/// begin a match completed by a later piece are held back (fewer than `longestPattern`) until
/// that is decided; `finish` releases them at the end of the body.
public struct SecretScrubber: Sendable {
    private var stream: SecretScanStream
    /// Scanned bytes not yet released, masked where already known: the stream's last
    /// `heldBack.count` bytes.
    private var heldBack: [UInt8] = []

    public init(scanner: SecretScanner) {
        stream = scanner.makeStream()
        heldBack.reserveCapacity(scanner.longestPattern)
    }

    public static let mask = UInt8(ascii: "*")

    /// Appends to `output` the bytes now safe to send (scrubbed), calling `onMatch` for each match
    /// completed by this piece.
    public mutating func scrub(_ piece: UnsafeBufferPointer<UInt8>, into output: inout [UInt8],
                               onMatch: (SecretMatch) -> Void = { _ in }) {
        let outputStart = output.count
        let streamStart = stream.offset - heldBack.count  // the stream offset of output[outputStart]
        output.append(contentsOf: heldBack)
        output.append(contentsOf: piece)
        heldBack.removeAll(keepingCapacity: true)
        stream.scan(piece) { match in
            // A match ending here starts at most `pendingLength` before the piece: in what was held.
            precondition(match.range.lowerBound >= streamStart)
            for offset in match.range { output[outputStart + offset - streamStart] = Self.mask }
            onMatch(match)
        }
        let keep = stream.pendingLength
        heldBack.append(contentsOf: output[(output.count - keep)...])
        output.removeLast(keep)
    }

    public mutating func scrub(_ piece: [UInt8], into output: inout [UInt8], onMatch: (SecretMatch) -> Void = { _ in }) {
        piece.withUnsafeBufferPointer { scrub($0, into: &output, onMatch: onMatch) }
    }

    /// The end of the body: what was held back cannot become a match any more.
    public mutating func finish(into output: inout [UInt8]) {
        output.append(contentsOf: heldBack)
        heldBack.removeAll()
    }
}
