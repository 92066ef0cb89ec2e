/// Builds one JSON object straight into bytes, escaping as it copies (RFC 8259 §7): no Foundation
/// encoder and no intermediate strings on the per-request path. The one JSON writer of the project:
/// access-log lines, error bodies, diagnostics and redacted body summaries all escape through it.
public struct JSONLine {
    // Settable from inlinable code (cross-module callers inline the writer: it is on the per-request path).
    public var bytes: [UInt8] = [UInt8(ascii: "{")]
    @usableFromInline var first = true

    @inlinable public init() {
        bytes.reserveCapacity(1024)
    }

    /// An object already begun elsewhere (`bytes` holds `{` and its first members, not closed):
    /// members added now follow them.
    @inlinable public init(continuing bytes: ArraySlice<UInt8>) {
        self.bytes = Array(bytes)
        first = bytes.count <= 1
    }

    /// `"name":`, after a comma when needed; the value is the caller's to append to `bytes`.
    @inlinable public mutating func key(_ name: String) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        appendQuoted(name)
        bytes.append(UInt8(ascii: ":"))
    }

    /// A key written once in advance, `"name":` with its quotes and colon (`quotedKey`): a line's
    /// fixed field names are not escaped again for every line.
    @inlinable public mutating func key(quoted: [UInt8]) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        bytes.append(contentsOf: quoted)
    }

    /// `"name":` as `key(quoted:)` takes it.
    public static func quotedKey(_ name: String) -> [UInt8] {
        var bytes: [UInt8] = []
        appendQuoted(name, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        return bytes
    }

    @inlinable public mutating func beginObject(quoted key: [UInt8]) {
        self.key(quoted: key)
        openObject()
    }

    @inlinable public mutating func string(quoted key: [UInt8], _ value: String) {
        self.key(quoted: key)
        appendQuoted(value)
    }

    @inlinable public mutating func number(quoted key: [UInt8], _ value: UInt64) {
        self.key(quoted: key)
        JSONLine.appendDecimal(value, to: &bytes)
    }

    @inlinable public mutating func array(quoted key: [UInt8], _ values: [String]) {
        self.key(quoted: key)
        appendArray(values)
    }

    /// `"name":{`: members follow (`string`, `number`, ...) until `endObject`. One level deep.
    @inlinable public mutating func beginObject(_ name: String) {
        key(name)
        openObject()
    }

    /// `{`, its first member to come (after a key).
    @inlinable mutating func openObject() {
        bytes.append(UInt8(ascii: "{"))
        first = true
    }

    @inlinable public mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        first = false
    }

    /// The object closed, and a line feed after it: one log line, no copy.
    @inlinable public mutating func finishLine() -> [UInt8] {
        bytes.append(UInt8(ascii: "}"))
        bytes.append(0x0A)
        return bytes
    }

    @inlinable public mutating func appendQuoted(_ text: String) {
        JSONLine.appendQuoted(text, to: &bytes)
    }

    /// A JSON string literal (quotes included) for `text`, appended to `bytes`.
    @inlinable public static func appendQuoted(_ text: String, to bytes: inout [UInt8]) {
        var text = text
        // Native strings are contiguous UTF-8: scan and copy them as a buffer (a per-byte closure
        // over `String.UTF8View` cost more than the rest of a log line's formatting together).
        text.withUTF8 { appendQuoted($0, to: &bytes) }
    }

    @inlinable public static func appendQuoted(_ text: UnsafeBufferPointer<UInt8>, to bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        var clean = 0
        var index = 0
        // Runs of bytes that need no escaping go in one append each; nearly every value is one run.
        while index < text.count {
            // Eight bytes at a time while none of them needs escaping (a log line is mostly such runs).
            if index + 8 <= text.count, let base = text.baseAddress,
                !wordNeedsEscape(UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self))
            {
                index += 8
                continue
            }
            let byte = text[index]
            index += 1
            guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte == 0x7F else { continue }
            if clean < index - 1 { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: text[clean..<(index - 1)])) }
            clean = index
            bytes.append(UInt8(ascii: "\\"))
            switch byte {
            case UInt8(ascii: "\""): bytes.append(UInt8(ascii: "\""))
            case UInt8(ascii: "\\"): bytes.append(UInt8(ascii: "\\"))
            case 0x0A: bytes.append(UInt8(ascii: "n"))
            case 0x0D: bytes.append(UInt8(ascii: "r"))
            case 0x09: bytes.append(UInt8(ascii: "t"))
            default:
                bytes.append(UInt8(ascii: "u"))
                bytes.append(UInt8(ascii: "0"))
                bytes.append(UInt8(ascii: "0"))
                bytes.append(hexDigit(byte >> 4))
                bytes.append(hexDigit(byte & 0x0F))
            }
        }
        if clean < text.count { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: text[clean...])) }
        bytes.append(UInt8(ascii: "\""))
    }

    /// Whether any of eight bytes is a control (< 0x20), `"`, `\` or DEL. The classic SWAR tests
    /// ("has a byte less than n", "has a zero byte" after an XOR), exact for existence.
    @inlinable static func wordNeedsEscape(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
        @inline(__always) func hasZero(_ x: UInt64) -> Bool { (x &- ones) & ~x & highs != 0 }
        let control = (word &- ones &* 0x20) & ~word & highs != 0
        return control || hasZero(word ^ (ones &* 0x22)) || hasZero(word ^ (ones &* 0x5C)) || hasZero(word ^ (ones &* 0x7F))
    }

    @inlinable static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
    }

    @inlinable public mutating func string(_ name: String, _ value: String) {
        key(name)
        appendQuoted(value)
    }

    @inlinable public mutating func optionalString(_ name: String, _ value: String?) {
        if let value { string(name, value) }
    }

    @inlinable public mutating func raw(_ name: String, _ json: String) {
        key(name)
        bytes += json.utf8
    }

    @inlinable public mutating func raw(_ name: String, _ json: [UInt8]) {
        key(name)
        bytes += json
    }

    @inlinable public mutating func number(_ name: String, _ value: UInt64) {
        key(name)
        JSONLine.appendDecimal(value, to: &bytes)
    }

    @inlinable public mutating func array(_ name: String, _ values: [String]) {
        key(name)
        appendArray(values)
    }

    /// `["a","b"]` (after a key).
    @inlinable mutating func appendArray(_ values: [String]) {
        bytes.append(UInt8(ascii: "["))
        for (index, value) in values.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            appendQuoted(value)
        }
        bytes.append(UInt8(ascii: "]"))
    }

    @inlinable public func finish() -> [UInt8] { bytes + [UInt8(ascii: "}")] }

    @inlinable public static func appendDecimal(_ value: UInt64, minimumDigits: Int = 1, to bytes: inout [UInt8]) {
        var digits = 1
        var rest = value / 10
        while rest > 0 { digits += 1; rest /= 10 }
        let width = max(minimumDigits, digits)
        let start = bytes.count
        bytes.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: width))
        // Written from the last digit back; the leading positions keep their zeros.
        var remaining = value
        var position = start + width - 1
        repeat {
            bytes[position] = UInt8(ascii: "0") + UInt8(remaining % 10)
            remaining /= 10
            position -= 1
        } while remaining > 0
    }
}

extension JSONLine {
    /// `text` as a JSON string literal, quotes included.
    @inlinable public static func quoted(_ text: String) -> String {
        var bytes: [UInt8] = []
        appendQuoted(text, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }
}
