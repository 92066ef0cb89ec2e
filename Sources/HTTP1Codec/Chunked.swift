/// Incremental decoder for the chunked transfer coding (RFC 9112 §7.1).
///
/// It never copies body data: `advance` consumes framing bytes and then reports how many of the
/// following bytes are chunk data, which the caller moves (evbuffer to evbuffer) and acknowledges with
/// `didConsumeData`. Chunk extensions are validated and dropped; trailers are parsed and kept in
/// `trailers` (the engine discards them, see `Forwarding`).
public struct ChunkedDecoder: Sendable {
    public enum Next: Equatable, Sendable {
        /// Give me more input.
        case needMore
        /// The next `count` bytes are body data (possibly more than is buffered now).
        case data(Int)
        /// The body and its trailer section are complete.
        case done
    }

    private enum State: Sendable {
        case size(digits: Int, value: UInt64)
        case sizeWhitespace  // BWS between size and ";"
        case extensionStart  // just after ";" (BWS then a name)
        case extensionName(length: Int)
        case extensionAfterName  // BWS before "=" or ";" or CRLF
        case extensionValueStart  // after "=" (BWS then token or quoted-string)
        case extensionToken(length: Int)
        case extensionQuoted(escaped: Bool)
        case extensionAfterValue  // BWS before ";" or CRLF
        case sizeLineLF
        case data(remaining: UInt64)
        case dataCR
        case dataLF
        case trailerLine(length: Int)
        case trailerLineLF(length: Int)
        case done
    }

    private var state: State = .size(digits: 0, value: 0)
    private var isLastChunk = false
    private var extensionBytes = 0
    private var trailerLine: [UInt8] = []
    private var trailerBytes = 0
    public private(set) var trailers = HTTPFields()

    /// Bounds that keep a hostile peer from making the decoder buffer or spin: chunk-size digits,
    /// extension bytes per chunk line, and the whole trailer section.
    public static let maxSizeDigits = 15
    public static let maxExtensionBytes = 4096
    public static let maxTrailerBytes = 16 * 1024
    public static let maxTrailerFields = 64

    public init() {}

    public var isDone: Bool { if case .done = state { true } else { false } }

    /// Consumes framing bytes from the front of `input`. Returns how many were consumed and what
    /// comes next. In the data state it consumes nothing and returns `.data`.
    public mutating func advance(_ input: UnsafeRawBufferPointer) throws(HTTPParseError) -> (consumed: Int, next: Next) {
        var index = 0
        while true {
            if case .data(let remaining) = state {
                return (index, .data(Int(clamping: remaining)))
            }
            if case .done = state { return (index, .done) }
            guard index < input.count else { return (index, .needMore) }
            try step(input[index])
            index += 1
        }
    }

    /// Acknowledges `count` bytes of chunk data taken after a `.data` step.
    public mutating func didConsumeData(_ count: Int) {
        guard case .data(let remaining) = state else {
            preconditionFailure("didConsumeData outside of chunk data")
        }
        precondition(UInt64(count) <= remaining, "consumed past the chunk")
        let left = remaining - UInt64(count)
        state = left == 0 ? .dataCR : .data(remaining: left)
    }

    private static func hexValue(_ byte: UInt8) -> UInt64? {
        switch byte {
        case 0x30...0x39: UInt64(byte - 0x30)
        case 0x41...0x46: UInt64(byte - 0x41 + 10)
        case 0x61...0x66: UInt64(byte - 0x61 + 10)
        default: nil
        }
    }

    private static func isWhitespace(_ byte: UInt8) -> Bool { byte == ASCII.space || byte == ASCII.tab }

    private mutating func countExtensionByte() throws(HTTPParseError) {
        extensionBytes += 1
        if extensionBytes > Self.maxExtensionBytes { throw .malformed("chunk extension too long") }
    }

    private mutating func step(_ byte: UInt8) throws(HTTPParseError) {
        switch state {
        case .size(let digits, let value):
            if let hex = Self.hexValue(byte) {
                guard digits < Self.maxSizeDigits else { throw .malformed("chunk size too large") }
                state = .size(digits: digits + 1, value: value << 4 | hex)
                return
            }
            guard digits > 0 else { throw .malformed("invalid chunk size") }
            isLastChunk = value == 0
            extensionBytes = 0
            if byte == ASCII.cr {
                state = .sizeLineLF
            } else if byte == UInt8(ascii: ";") {
                state = .extensionStart
            } else if Self.isWhitespace(byte) {
                state = .sizeWhitespace
            } else {
                throw .malformed("invalid chunk size")
            }
            if !isLastChunk { pendingChunkSize = value }

        case .sizeWhitespace:
            try countExtensionByte()
            if Self.isWhitespace(byte) { return }
            // Whitespace after the size is only allowed as BWS before an extension.
            guard byte == UInt8(ascii: ";") else { throw .malformed("invalid chunk size") }
            state = .extensionStart

        case .extensionStart:
            try countExtensionByte()
            if Self.isWhitespace(byte) { return }
            guard ASCII.isTokenChar(byte) else { throw .malformed("invalid chunk extension") }
            state = .extensionName(length: 1)

        case .extensionName(let length):
            try countExtensionByte()
            if ASCII.isTokenChar(byte) {
                state = .extensionName(length: length + 1)
            } else {
                try endOfExtensionItem(byte, allowEquals: true)
            }

        case .extensionAfterName:
            try countExtensionByte()
            if Self.isWhitespace(byte) { return }
            try endOfExtensionItem(byte, allowEquals: true)

        case .extensionValueStart:
            try countExtensionByte()
            if Self.isWhitespace(byte) { return }
            if byte == UInt8(ascii: "\"") {
                state = .extensionQuoted(escaped: false)
            } else if ASCII.isTokenChar(byte) {
                state = .extensionToken(length: 1)
            } else {
                throw .malformed("invalid chunk extension")
            }

        case .extensionToken(let length):
            try countExtensionByte()
            if ASCII.isTokenChar(byte) {
                state = .extensionToken(length: length + 1)
            } else {
                try endOfExtensionItem(byte, allowEquals: false)
            }

        case .extensionQuoted(let escaped):
            try countExtensionByte()
            // qdtext / quoted-pair (RFC 9110 §5.6.4); CR, LF and other controls are refused.
            guard byte == ASCII.tab || (byte >= 0x20 && byte != 0x7F) else {
                throw .malformed("invalid chunk extension")
            }
            if escaped {
                state = .extensionQuoted(escaped: false)
            } else if byte == UInt8(ascii: "\\") {
                state = .extensionQuoted(escaped: true)
            } else if byte == UInt8(ascii: "\"") {
                state = .extensionAfterValue
            }

        case .extensionAfterValue:
            try countExtensionByte()
            if Self.isWhitespace(byte) { return }
            try endOfExtensionItem(byte, allowEquals: false)

        case .sizeLineLF:
            guard byte == ASCII.lf else { throw .malformed("bare CR in chunk size line") }
            if isLastChunk {
                state = .trailerLine(length: 0)
            } else {
                state = .data(remaining: pendingChunkSize)
            }

        case .data:
            preconditionFailure("data bytes are moved by the caller")

        case .dataCR:
            guard byte == ASCII.cr else { throw .malformed("chunk data longer than its size") }
            state = .dataLF

        case .dataLF:
            guard byte == ASCII.lf else { throw .malformed("chunk data not followed by CRLF") }
            state = .size(digits: 0, value: 0)

        case .trailerLine(let length):
            trailerBytes += 1
            if trailerBytes > Self.maxTrailerBytes { throw .malformed("trailer section too large") }
            if byte == ASCII.cr {
                state = .trailerLineLF(length: length)
            } else if byte == ASCII.lf {
                throw .malformed("bare LF in trailer section")
            } else {
                trailerLine.append(byte)
                state = .trailerLine(length: length + 1)
            }

        case .trailerLineLF(let length):
            guard byte == ASCII.lf else { throw .malformed("bare CR in trailer section") }
            if length == 0 {
                state = .done
                return
            }
            guard trailers.count < Self.maxTrailerFields else { throw .malformed("too many trailer fields") }
            let field: HTTPField
            do {
                field = try trailerLine.withUnsafeBytes { bytes in try HeadParser.parseField(bytes[...]) }
            } catch let error as HTTPParseError {
                throw error
            } catch {
                throw .malformed("invalid trailer field")
            }
            trailers.append(name: field.name, value: field.value)
            trailerLine.removeAll(keepingCapacity: true)
            state = .trailerLine(length: 0)

        case .done:
            throw .malformed("bytes after the end of a chunked body")
        }
    }

    private var pendingChunkSize: UInt64 = 0

    /// After an extension name or value: another extension, "=" (after a name), or the line end.
    private mutating func endOfExtensionItem(_ byte: UInt8, allowEquals: Bool) throws(HTTPParseError) {
        if byte == UInt8(ascii: ";") {
            state = .extensionStart
        } else if byte == ASCII.cr {
            state = .sizeLineLF
        } else if Self.isWhitespace(byte) {
            state = allowEquals ? .extensionAfterName : .extensionAfterValue
        } else if allowEquals, byte == UInt8(ascii: "=") {
            state = .extensionValueStart
        } else {
            throw .malformed("invalid chunk extension")
        }
    }
}

/// Chunked re-framing on the way out: every piece of data the proxy forwards becomes one chunk.
public enum ChunkedEncoder {
    public static func chunkHeader(size: Int) -> [UInt8] {
        precondition(size > 0, "a zero-size chunk would end the body")
        return Array(String(size, radix: 16).utf8) + [ASCII.cr, ASCII.lf]
    }

    public static let chunkTrailer: [UInt8] = [ASCII.cr, ASCII.lf]
    /// The last chunk with an empty trailer section (trailers are never forwarded).
    public static let lastChunk: [UInt8] = Array("0\r\n\r\n".utf8)
}
