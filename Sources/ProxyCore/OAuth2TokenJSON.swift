/// A strict JSON reader (RFC 8259) for token responses: just enough to read one object's members.
/// Strict on purpose: duplicate member names, trailing bytes, invalid UTF-8, lone surrogates, and
/// nesting deeper than 16 are refused, so two readers of the same response cannot disagree on
/// which `access_token` it carries. Errors are fixed texts: never a byte of the input. Also the
/// reader of `scopeproxy tail` (a view record from whatever listens on the admin port).
public enum TokenJSON: Equatable, Sendable {
    case string([UInt8])  // UTF-8
    case number(String)
    case bool(Bool)
    case null
    case array([TokenJSON])
    case object([String: TokenJSON])

    public struct Invalid: Error, Equatable {
        public let reason: String
    }

    public static let maxDepth = 16

    public static func parse(_ bytes: [UInt8]) throws(Invalid) -> TokenJSON {
        var reader = Reader(bytes: bytes)
        reader.skipSpace()
        let value = try reader.value(depth: 0)
        reader.skipSpace()
        guard reader.index == bytes.count else { throw Invalid(reason: "trailing data after the JSON value") }
        return value
    }

    private struct Reader {
        let bytes: [UInt8]
        var index = 0

        init(bytes: [UInt8]) {
            self.bytes = bytes
        }

        mutating func skipSpace() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
        }

        func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func expect(_ literal: String) throws(Invalid) {
            let expected = Array(literal.utf8)
            guard index + expected.count <= bytes.count, Array(bytes[index..<index + expected.count]) == expected else {
                throw Invalid(reason: "invalid JSON literal")
            }
            index += expected.count
        }

        mutating func value(depth: Int) throws(Invalid) -> TokenJSON {
            guard depth < TokenJSON.maxDepth else { throw Invalid(reason: "JSON nested too deeply") }
            guard let byte = peek() else { throw Invalid(reason: "unexpected end of JSON") }
            switch byte {
            case UInt8(ascii: "{"): return try object(depth: depth)
            case UInt8(ascii: "["): return try array(depth: depth)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"): try expect("true"); return .bool(true)
            case UInt8(ascii: "f"): try expect("false"); return .bool(false)
            case UInt8(ascii: "n"): try expect("null"); return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number())
            default: throw Invalid(reason: "invalid JSON value")
            }
        }

        mutating func object(depth: Int) throws(Invalid) -> TokenJSON {
            index += 1
            var members: [String: TokenJSON] = [:]
            skipSpace()
            if peek() == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            }
            while true {
                skipSpace()
                guard peek() == UInt8(ascii: "\"") else { throw Invalid(reason: "expected a member name") }
                let name = String(decoding: try string(), as: UTF8.self)
                skipSpace()
                guard peek() == UInt8(ascii: ":") else { throw Invalid(reason: "expected ':'") }
                index += 1
                skipSpace()
                let member = try value(depth: depth + 1)
                guard members.updateValue(member, forKey: name) == nil else { throw Invalid(reason: "duplicate member name") }
                skipSpace()
                switch peek() {
                case UInt8(ascii: ","): index += 1
                case UInt8(ascii: "}"): index += 1; return .object(members)
                default: throw Invalid(reason: "expected ',' or '}'")
                }
            }
        }

        mutating func array(depth: Int) throws(Invalid) -> TokenJSON {
            index += 1
            var items: [TokenJSON] = []
            skipSpace()
            if peek() == UInt8(ascii: "]") {
                index += 1
                return .array(items)
            }
            while true {
                skipSpace()
                items.append(try value(depth: depth + 1))
                skipSpace()
                switch peek() {
                case UInt8(ascii: ","): index += 1
                case UInt8(ascii: "]"): index += 1; return .array(items)
                default: throw Invalid(reason: "expected ',' or ']'")
                }
            }
        }

        /// RFC 8259 §6: `-? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?`, kept as text.
        mutating func number() throws(Invalid) -> String {
            let start = index
            if peek() == UInt8(ascii: "-") { index += 1 }
            guard let first = peek(), isDigit(first) else { throw Invalid(reason: "invalid JSON number") }
            index += 1
            if first != UInt8(ascii: "0") { while let next = peek(), isDigit(next) { index += 1 } }
            if peek() == UInt8(ascii: ".") {
                index += 1
                guard let next = peek(), isDigit(next) else { throw Invalid(reason: "invalid JSON number") }
                while let next = peek(), isDigit(next) { index += 1 }
            }
            if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
                index += 1
                if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { index += 1 }
                guard let next = peek(), isDigit(next) else { throw Invalid(reason: "invalid JSON number") }
                while let next = peek(), isDigit(next) { index += 1 }
            }
            return String(decoding: bytes[start..<index], as: UTF8.self)
        }

        func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

        /// A string's UTF-8 bytes, escapes decoded. Raw control characters are refused (§7), and so
        /// is invalid UTF-8 and a lone surrogate escape.
        mutating func string() throws(Invalid) -> [UInt8] {
            index += 1
            var output: [UInt8] = []
            while true {
                guard let byte = peek() else { throw Invalid(reason: "unterminated JSON string") }
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    // Raw bytes were copied as they were: check they form valid UTF-8.
                    guard String(validating: output, as: UTF8.self) != nil else { throw Invalid(reason: "invalid UTF-8 in a JSON string") }
                    return output
                case UInt8(ascii: "\\"):
                    guard let escape = peek() else { throw Invalid(reason: "unterminated JSON string") }
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): output.append(escape)
                    case UInt8(ascii: "b"): output.append(0x08)
                    case UInt8(ascii: "f"): output.append(0x0C)
                    case UInt8(ascii: "n"): output.append(0x0A)
                    case UInt8(ascii: "r"): output.append(0x0D)
                    case UInt8(ascii: "t"): output.append(0x09)
                    case UInt8(ascii: "u"):
                        var scalar = try hex4()
                        if (0xD800...0xDBFF).contains(scalar) {
                            guard peek() == UInt8(ascii: "\\") else { throw Invalid(reason: "lone surrogate in a JSON string") }
                            index += 1
                            guard peek() == UInt8(ascii: "u") else { throw Invalid(reason: "lone surrogate in a JSON string") }
                            index += 1
                            let low = try hex4()
                            guard (0xDC00...0xDFFF).contains(low) else { throw Invalid(reason: "lone surrogate in a JSON string") }
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        } else if (0xDC00...0xDFFF).contains(scalar) {
                            throw Invalid(reason: "lone surrogate in a JSON string")
                        }
                        guard let unicode = Unicode.Scalar(scalar) else { throw Invalid(reason: "invalid escape in a JSON string") }
                        output += Array(String(Character(unicode)).utf8)
                    default:
                        throw Invalid(reason: "invalid escape in a JSON string")
                    }
                case 0x00..<0x20:
                    throw Invalid(reason: "control character in a JSON string")
                default:
                    output.append(byte)
                }
            }
        }

        mutating func hex4() throws(Invalid) -> UInt32 {
            guard index + 4 <= bytes.count else { throw Invalid(reason: "invalid escape in a JSON string") }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                index += 1
                let digit: UInt32
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
                default: throw Invalid(reason: "invalid escape in a JSON string")
                }
                value = value << 4 | digit
            }
            return value
        }
    }
}
