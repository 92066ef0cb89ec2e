/// Finds where a message head ends, incrementally, while refusing bare CR and bare LF as soon as
/// they arrive (a lenient peer could read them as line ends; we must not disagree with it silently).
///
/// Feed it the whole buffered prefix each time more bytes arrive; it resumes where it stopped, so a
/// slow-drip head costs O(n) in total.
public struct HeadScanner: Sendable {
    public let limits: HeadLimits
    private var position = 0
    private var lineStart = 0
    private var headStart = 0
    private var lineCount = 0

    public init(limits: HeadLimits) {
        self.limits = limits
    }

    /// The head's location in the buffer once complete: `start` skips the empty lines a server may
    /// ignore before a request line (RFC 9112 §2.2); `end` is just past the blank line.
    public struct Boundary: Equatable, Sendable {
        public var start: Int
        public var end: Int
    }

    /// A TLS record's content type `handshake` and every TLS version's major byte (RFC 8446 §5.1).
    static let tlsHandshakeRecord: UInt8 = 0x16, tlsMajorVersion: UInt8 = 0x03

    /// How far the scan has read (it resumes here): what the scan of a growing prefix has cost so far.
    public var scannedThrough: Int { position }

    /// True once any byte of a head (beyond ignorable empty lines) has been seen.
    public var hasStarted: Bool { position > headStart }

    public mutating func scan(_ bytes: UnsafeRawBufferPointer) throws(HTTPParseError) -> Boundary? {
        let count = bytes.count
        while position < count {
            let byte = bytes[position]
            if position == headStart, byte == Self.tlsHandshakeRecord {
                // No request line starts with a control character: 0x16 0x03 is a TLS record
                // (a ClientHello). Said at once, instead of waiting for a CRLF that never comes.
                guard position + 1 < count else { break }
                if bytes[position + 1] == Self.tlsMajorVersion { throw .tlsHandshake }
            }
            if byte == ASCII.cr {
                guard position + 1 < count else { break }  // need the next byte to judge this CR
                guard bytes[position + 1] == ASCII.lf else { throw .malformed("bare CR in head") }
                let lineIsEmpty = position == lineStart
                position += 2
                if lineIsEmpty {
                    if lineStart == headStart {
                        // An empty line before the start line: skippable, but still counted
                        // against the head size so a flood of CRLFs ends in 431.
                        headStart = position
                        lineStart = position
                        if position > limits.maxHeadBytes { throw .headTooLarge }
                        continue
                    }
                    // The blank line counts too: a head is at most maxHeadBytes, terminator included.
                    if position > limits.maxHeadBytes { throw .headTooLarge }
                    return Boundary(start: headStart, end: position)
                }
                lineStart = position
                lineCount += 1
                if lineCount > limits.maxFields + 1 { throw .tooManyFields }
            } else if byte == ASCII.lf {
                throw .malformed("bare LF in head")
            } else {
                position += 1
            }
            if position > limits.maxHeadBytes { throw .headTooLarge }
        }
        if position > limits.maxHeadBytes { throw .headTooLarge }
        return nil
    }
}
