/// Strict RFC 9112 parsing of a complete head (as delimited by `HeadScanner`: every line ends in
/// CRLF, no bare CR or LF inside). Anything two parsers could read differently is refused.
public enum HeadParser {
    public static func parseRequest(
        _ head: UnsafeRawBufferPointer, limits: HeadLimits = .request
    ) throws(HTTPParseError) -> RequestHead {
        var lines = LineIterator(head)
        guard let requestLine = lines.next(), !requestLine.isEmpty else {
            throw .malformed("empty request line")
        }
        let (method, target, version) = try parseRequestLine(requestLine, limits: limits)
        let fields = try parseFields(&lines, limits: limits)
        return RequestHead(method: method, target: target, version: version, fields: fields)
    }

    public static func parseResponse(
        _ head: UnsafeRawBufferPointer, limits: HeadLimits = .response
    ) throws(HTTPParseError) -> ResponseHead {
        var lines = LineIterator(head)
        guard let statusLine = lines.next(), !statusLine.isEmpty else {
            throw .malformed("empty status line")
        }
        let (version, status, reason) = try parseStatusLine(statusLine)
        let fields = try parseFields(&lines, limits: limits)
        return ResponseHead(version: version, status: status, reason: reason, fields: fields)
    }

    // MARK: Start lines

    private static func parseRequestLine(
        _ line: UnsafeRawBufferPointer.SubSequence, limits: HeadLimits
    ) throws(HTTPParseError) -> (String, String, HTTPVersion) {
        var index = line.startIndex
        let end = line.endIndex
        let methodStart = index
        while index < end, ASCII.isTokenChar(line[index]) { index += 1 }
        guard index > methodStart else { throw .malformed("invalid method") }
        guard index < end, line[index] == ASCII.space else { throw .malformed("invalid method") }
        let method = String(decoding: line[methodStart..<index], as: UTF8.self)
        index += 1

        let targetStart = index
        // Visible ASCII only: a raw space, control byte or non-ASCII byte in a target is refused.
        while index < end, line[index] > 0x20, line[index] < 0x7F { index += 1 }
        let targetLength = index - targetStart
        if targetLength > limits.maxTargetBytes { throw .targetTooLong }
        guard targetLength > 0 else { throw .malformed("empty request target") }
        guard index < end, line[index] == ASCII.space else { throw .malformed("invalid request target") }
        let target = String(decoding: line[targetStart..<index], as: UTF8.self)
        index += 1

        let version = try parseVersion(line[index..<end])
        return (method, target, version)
    }

    private static func parseStatusLine(
        _ line: UnsafeRawBufferPointer.SubSequence
    ) throws(HTTPParseError) -> (HTTPVersion, Int, String) {
        let start = line.startIndex
        guard line.count >= 12 else { throw .malformed("short status line") }
        let version = try parseVersion(line[start..<start + 8])
        guard line[start + 8] == ASCII.space else { throw .malformed("invalid status line") }
        var status = 0
        for offset in 9..<12 {
            let byte = line[start + offset]
            guard byte >= 0x30, byte <= 0x39 else { throw .malformed("invalid status code") }
            status = status * 10 + Int(byte - 0x30)
        }
        guard status >= 100 else { throw .malformed("invalid status code") }
        var reason = ""
        if line.count > 12 {
            // RFC 9112 §4: SP reason-phrase; a missing reason ("HTTP/1.1 200") is tolerated as
            // it is unambiguous, but anything after the code must start with one space.
            guard line[start + 12] == ASCII.space else { throw .malformed("invalid status line") }
            let reasonBytes = line[(start + 13)...]
            for byte in reasonBytes where !ASCII.isFieldValueChar(byte) {
                throw .malformed("control character in reason phrase")
            }
            reason = ASCII.latin1String(reasonBytes)
        }
        return (version, status, reason)
    }

    private static func parseVersion(
        _ bytes: UnsafeRawBufferPointer.SubSequence
    ) throws(HTTPParseError) -> HTTPVersion {
        guard bytes.count == 8, bytes.prefix(5).elementsEqual("HTTP/".utf8) else {
            throw .malformed("invalid HTTP version")
        }
        let start = bytes.startIndex
        let major = bytes[start + 5], dot = bytes[start + 6], minor = bytes[start + 7]
        guard (0x30...0x39).contains(major), dot == UInt8(ascii: "."), (0x30...0x39).contains(minor) else {
            throw .malformed("invalid HTTP version")
        }
        // RFC 9112 §2.3: a higher 1.x minor version is processed as the highest we support (1.1),
        // and it is what we forward; another major version is 505.
        guard major == UInt8(ascii: "1") else { throw .unsupportedVersion }
        return minor == UInt8(ascii: "0") ? .http1_0 : .http1_1
    }

    // MARK: Fields

    static func parseFields(
        _ lines: inout LineIterator, limits: HeadLimits
    ) throws(HTTPParseError) -> HTTPFields {
        var fields: [HTTPField] = []
        fields.reserveCapacity(16)  // one allocation for a usual head, not four as the array grows
        while let line = lines.next() {
            if line.isEmpty { break }  // the blank line that ends the head
            if fields.count == limits.maxFields { throw .tooManyFields }
            fields.append(try parseField(line))
        }
        return HTTPFields(fields)
    }

    static func parseField(_ line: UnsafeRawBufferPointer.SubSequence) throws(HTTPParseError) -> HTTPField {
        var index = line.startIndex
        let end = line.endIndex
        let first = line[index]
        if first == ASCII.space || first == ASCII.tab {
            throw .malformed("obs-fold (line folding) in header")
        }
        while index < end, ASCII.isTokenChar(line[index]) { index += 1 }
        guard index < end, line[index] == ASCII.colon else {
            if index < end, line[index] == ASCII.space || line[index] == ASCII.tab {
                throw .malformed("whitespace before colon in header")
            }
            throw .malformed("invalid header name")
        }
        guard index > line.startIndex else { throw .malformed("empty header name") }
        let name = String(decoding: line[line.startIndex..<index], as: UTF8.self)
        index += 1
        var valueStart = index
        var valueEnd = end
        while valueStart < valueEnd, line[valueStart] == ASCII.space || line[valueStart] == ASCII.tab {
            valueStart += 1
        }
        while valueEnd > valueStart, line[valueEnd - 1] == ASCII.space || line[valueEnd - 1] == ASCII.tab {
            valueEnd -= 1
        }
        for position in valueStart..<valueEnd where !ASCII.isFieldValueChar(line[position]) {
            throw .malformed("control character in header value")
        }
        return HTTPField(name: name, value: ASCII.latin1String(line[valueStart..<valueEnd]))
    }
}

/// Lines of a head known to use CRLF throughout; yields each line without its CRLF.
struct LineIterator {
    private let bytes: UnsafeRawBufferPointer
    private var position: Int

    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
        position = 0
    }

    mutating func next() -> UnsafeRawBufferPointer.SubSequence? {
        guard position < bytes.count else { return nil }
        var index = position
        while index < bytes.count, bytes[index] != ASCII.cr { index += 1 }
        let line = bytes[position..<index]
        position = min(index + 2, bytes.count)
        return line
    }
}
