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

    /// `"name":`, after a comma when needed; the value is the caller's to append to `bytes`.
    @inlinable public mutating func key(_ name: String) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        appendQuoted(name)
        bytes.append(UInt8(ascii: ":"))
    }

    /// `"name":{`: members follow (`string`, `number`, ...) until `endObject`. One level deep.
    @inlinable public mutating func beginObject(_ name: String) {
        key(name)
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
        bytes.append(UInt8(ascii: "\""))
        // Nearly every value needs no escaping: one bulk append.
        if !text.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") || $0 == 0x7F }) {
            bytes += text.utf8
            bytes.append(UInt8(ascii: "\""))
            return
        }
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
            case UInt8(ascii: "\\"): bytes += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case 0x0A: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            case 0x0D: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
            case 0x09: bytes += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
            case 0..<0x20, 0x7F:
                let hex = Array("0123456789abcdef".utf8)
                bytes += Array("\\u00".utf8) + [hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
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
        bytes.append(UInt8(ascii: "["))
        for (index, value) in values.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            appendQuoted(value)
        }
        bytes.append(UInt8(ascii: "]"))
    }

    @inlinable public func finish() -> [UInt8] { bytes + [UInt8(ascii: "}")] }

    @inlinable public static func appendDecimal(_ value: UInt64, minimumDigits: Int = 1, to bytes: inout [UInt8]) {
        let text = String(value)  // a small string: no allocation
        for _ in text.utf8.count..<max(minimumDigits, text.utf8.count) { bytes.append(UInt8(ascii: "0")) }
        bytes += text.utf8
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
