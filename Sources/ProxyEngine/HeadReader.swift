import CLibevent
import HTTP1Codec

/// Reads one message head at a time from an evbuffer with the codec's incremental scanner: the
/// head's bytes are drained only once it is complete and parsed; whatever follows stays buffered.
struct HeadReader {
    private let limits: HeadLimits
    private var scanner: HeadScanner

    init(limits: HeadLimits) {
        self.limits = limits
        scanner = HeadScanner(limits: limits)
    }

    /// Bytes of a head have been seen (the head timeout starts to matter).
    var hasStarted: Bool { scanner.hasStarted }

    /// The next complete head, parsed by `parse` (`HeadParser.parseRequest` or `parseResponse`),
    /// and its size; nil while it is incomplete.
    mutating func next<Head>(
        from input: OpaquePointer, _ parse: (UnsafeRawBufferPointer, HeadLimits) throws(HTTPParseError) -> Head
    ) throws(HTTPParseError) -> (head: Head, bytes: Int)? {
        let available = EventBuffer.length(input)
        guard available > 0 else { return nil }
        let bytes = EventBuffer.contiguousPrefix(input, min(available, limits.maxHeadBytes + 2))
        guard let boundary = try scanner.scan(bytes) else { return nil }
        let head = try parse(UnsafeRawBufferPointer(rebasing: bytes[boundary.start..<boundary.end]), limits)
        evbuffer_drain(input, boundary.end)
        scanner = HeadScanner(limits: limits)
        return (head, boundary.end)
    }
}
