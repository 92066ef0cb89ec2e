/// A header value template: literal text with `${secret}` references, parsed once at config load.
public struct HeaderTemplate: Sendable, Equatable {
    public enum Part: Sendable, Equatable {
        case literal(String)
        case secret(String)
    }

    public let parts: [Part]

    public enum ParseError: Error, Equatable {
        case unterminatedReference
        case emptyReference
        case invalidSecretName(String)
        case invalidCharacter
    }

    public init(parts: [Part]) {
        self.parts = parts
    }

    /// `Bearer ${token}`; `$$` is a literal `$`. Secret names are `[A-Za-z0-9_.-]+`. The literal
    /// text must be a valid header value (no CR, LF or other controls).
    public static func parse(_ text: String) throws(ParseError) -> HeaderTemplate {
        var parts: [Part] = []
        var literal = ""
        var index = text.startIndex
        while index < text.endIndex {
            let character = text[index]
            if character == "$" {
                let next = text.index(after: index)
                if next < text.endIndex, text[next] == "$" {
                    literal.append("$")
                    index = text.index(after: next)
                    continue
                }
                if next < text.endIndex, text[next] == "{" {
                    guard let close = text[next...].firstIndex(of: "}") else { throw .unterminatedReference }
                    let name = String(text[text.index(after: next)..<close])
                    guard !name.isEmpty else { throw .emptyReference }
                    guard name.utf8.allSatisfy(isNameByte) else { throw .invalidSecretName(name) }
                    if !literal.isEmpty { parts.append(.literal(literal)) }
                    literal = ""
                    parts.append(.secret(name))
                    index = text.index(after: close)
                    continue
                }
            }
            guard let scalar = character.unicodeScalars.first, character.unicodeScalars.count == 1,
                scalar.value == 0x09 || (scalar.value >= 0x20 && scalar.value < 0x7F)
            else { throw .invalidCharacter }
            literal.append(character)
            index = text.index(after: index)
        }
        if !literal.isEmpty { parts.append(.literal(literal)) }
        return HeaderTemplate(parts: parts)
    }

    public static func isNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "-"):
            true
        default:
            false
        }
    }

    /// The first of `names` that the literal text mentions in a form other than `${name}` (`$name`,
    /// `{{name}}`, `{name}`: shell, Mustache and format habits), which would be sent as it is.
    public func mistakenReference(among names: Set<String>) -> String? {
        for part in parts {
            guard case .literal(let text) = part else { continue }
            let bytes = Array(text.utf8)
            var index = 0
            while index < bytes.count {
                let byte = bytes[index]
                guard byte == UInt8(ascii: "$") || byte == UInt8(ascii: "{") else {
                    index += 1
                    continue
                }
                var start = index + 1
                while start < bytes.count, bytes[start] == UInt8(ascii: "{") || bytes[start] == UInt8(ascii: " ") { start += 1 }
                var end = start
                while end < bytes.count, Self.isNameByte(bytes[end]) { end += 1 }
                let name = String(decoding: bytes[start..<end], as: UTF8.self)
                if end > start, names.contains(name) { return name }
                index = max(end, index + 1)
            }
        }
        return nil
    }

    public var secretNames: [String] {
        parts.compactMap { if case .secret(let name) = $0 { name } else { nil } }
    }

    /// The header value's bytes with current secrets filled in (put it in a header with
    /// `exposedFieldValue`); the failure names the first missing secret. Secrets go in as the
    /// bytes they were read as; literal text as its UTF-8 (`parse` admits only ASCII, so that is
    /// the text itself).
    public func render(_ secrets: any SecretLookup) -> Result<SecretValue, MissingSecret> {
        var bytes: [UInt8] = []
        for part in parts {
            switch part {
            case .literal(let text): bytes += text.utf8
            case .secret(let name):
                guard let secret = secrets.value(of: name) else { return .failure(MissingSecret(name: name)) }
                bytes += secret.exposedBytes
            }
        }
        return .success(SecretValue(bytes: bytes))
    }
}

public struct MissingSecret: Error, Equatable, Sendable {
    /// The secret's name (never its value).
    public let name: String
}
