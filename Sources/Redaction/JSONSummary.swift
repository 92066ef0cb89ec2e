import JSONText

/// A redacted summary of a JSON body: the structure stays, values only under safe keys, arrays cut
/// to their first 3 elements plus a count, the whole capped at 2 KB. Anything that is not JSON is
/// summarized as `<N bytes TYPE>`.
extension Redactor {
    public static let summaryCap = 2048

    public func bodySummary(_ bytes: [UInt8], totalBytes: UInt64, contentType: String?, truncated: Bool) -> String {
        let type = contentType.map(Self.mediaType) ?? "unknown"
        let isJSON = type == "application/json" || type.hasSuffix("+json")
        guard isJSON, !truncated, var parser = Optional(JSONParser(bytes)), let value = parser.parseDocument() else {
            return "<\(totalBytes) bytes \(type)>"
        }
        var output = ""
        render(value, safe: false, into: &output)
        if output.utf8.count > Self.summaryCap {
            output = String(decoding: output.utf8.prefix(Self.summaryCap - 3), as: UTF8.self) + "..."
        }
        return output
    }

    private func render(_ value: JSONValue, safe: Bool, into output: inout String) {
        switch value {
        case .object(let members):
            output += "{"
            for (index, member) in members.enumerated() {
                if index > 0 { output += "," }
                // Keys are data too (an email used as a key): unknown-looking keys are classified.
                let key = Self.classify(Substring(member.key)) ?? member.key
                output += JSONLine.quoted(key) + ":"
                render(member.value, safe: rules.safeJSONKeys.contains(member.key), into: &output)
            }
            output += "}"
        case .array(let items):
            output += "["
            for (index, item) in items.prefix(3).enumerated() {
                if index > 0 { output += "," }
                render(item, safe: safe, into: &output)
            }
            if items.count > 3 { output += ",\"...(\(items.count) items)\"" }
            output += "]"
        case .string(let text):
            output += safe ? JSONLine.quoted(Self.classify(Substring(text)) ?? text) : "\"\(Self.redacted)\""
        case .number(let text):
            output += safe ? text : "\"\(Self.redacted)\""
        case .bool(let flag):
            output += safe ? (flag ? "true" : "false") : "\"\(Self.redacted)\""
        case .null:
            output += "null"
        }
    }
}

indirect enum JSONValue {
    case object([(key: String, value: JSONValue)])
    case array([JSONValue])
    case string(String)
    case number(String)
    case bool(Bool)
    case null
}

/// A small, strict, bounded JSON parser (RFC 8259) for log summaries: no Foundation, depth-limited.
struct JSONParser {
    private let bytes: [UInt8]
    private var index = 0
    private var depth = 0

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    mutating func parseDocument() -> JSONValue? {
        guard let value = parseValue() else { return nil }
        skipWhitespace()
        return index == bytes.count ? value : nil
    }

    private mutating func skipWhitespace() {
        while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
    }

    private mutating func parseValue() -> JSONValue? {
        skipWhitespace()
        guard index < bytes.count else { return nil }
        switch bytes[index] {
        case UInt8(ascii: "{"): return parseObject()
        case UInt8(ascii: "["): return parseArray()
        case UInt8(ascii: "\""): return parseString().map(JSONValue.string)
        case UInt8(ascii: "t"): return literal("true", .bool(true))
        case UInt8(ascii: "f"): return literal("false", .bool(false))
        case UInt8(ascii: "n"): return literal("null", .null)
        default: return parseNumber()
        }
    }

    private mutating func literal(_ word: String, _ value: JSONValue) -> JSONValue? {
        let expected = Array(word.utf8)
        guard index + expected.count <= bytes.count, Array(bytes[index..<index + expected.count]) == expected else { return nil }
        index += expected.count
        return value
    }

    private mutating func parseNumber() -> JSONValue? {
        let start = index
        while index < bytes.count, "+-0123456789.eE".utf8.contains(bytes[index]) { index += 1 }
        guard index > start else { return nil }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        guard Double(text) != nil else { return nil }
        return .number(text)
    }

    private mutating func parseString() -> String? {
        index += 1
        var output: [UInt8] = []
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                return String(decoding: output, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard index < bytes.count else { return nil }
                let escaped = bytes[index]
                index += 1
                switch escaped {
                case UInt8(ascii: "u"):
                    guard index + 4 <= bytes.count, let code = UInt32(String(decoding: bytes[index..<index + 4], as: UTF8.self), radix: 16) else {
                        return nil
                    }
                    index += 4
                    output += Array(String(Unicode.Scalar(code).map(Character.init) ?? "?").utf8)
                case UInt8(ascii: "n"): output.append(0x0A)
                case UInt8(ascii: "t"): output.append(0x09)
                case UInt8(ascii: "r"): output.append(0x0D)
                case UInt8(ascii: "b"), UInt8(ascii: "f"): output.append(0x20)
                default: output.append(escaped)
                }
            case 0..<0x20:
                return nil
            default:
                output.append(byte)
            }
        }
        return nil
    }

    private mutating func parseArray() -> JSONValue? {
        depth += 1
        defer { depth -= 1 }
        guard depth <= 32 else { return nil }
        index += 1
        var items: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(items)
        }
        while true {
            guard let item = parseValue() else { return nil }
            items.append(item)
            skipWhitespace()
            guard index < bytes.count else { return nil }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(items) }
            return nil
        }
    }

    private mutating func parseObject() -> JSONValue? {
        depth += 1
        defer { depth -= 1 }
        guard depth <= 32 else { return nil }
        index += 1
        var members: [(key: String, value: JSONValue)] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\""), let key = parseString() else { return nil }
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { return nil }
            index += 1
            guard let value = parseValue() else { return nil }
            members.append((key, value))
            skipWhitespace()
            guard index < bytes.count else { return nil }
            if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
            if bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
            return nil
        }
    }
}

extension Redactor {
    /// `Application/JSON; charset=utf-8` -> `application/json`.
    static func mediaType(_ contentType: String) -> String {
        var type = contentType.split(separator: ";", omittingEmptySubsequences: false)[0]
        while type.first == " " || type.first == "\t" { type.removeFirst() }
        while type.last == " " || type.last == "\t" { type.removeLast() }
        return type.lowercased()
    }
}
