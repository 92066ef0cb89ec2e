/// One header (or trailer) field as it came off the wire: name case and value bytes preserved.
public struct HTTPField: Sendable, Equatable {
    public var name: String
    public var value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    /// The name ASCII-lowercased (names are tokens), without a new string when it already is.
    public var lowercasedName: String { ASCII.lowercasedName(name) }

    /// Case-insensitive name match; `lowercaseName` must be lowercase.
    @inline(__always)
    public func hasName(_ lowercaseName: String) -> Bool {
        ASCII.equalsIgnoringCase(name, lowercase: lowercaseName)
    }
}

/// An ordered list of fields. Order and case are kept so that re-serialization changes nothing
/// but what the proxy means to change.
public struct HTTPFields: Sendable, Equatable, Sequence {
    public private(set) var storage: [HTTPField]

    public init(_ fields: [HTTPField] = []) {
        storage = fields
    }

    public var count: Int { storage.count }

    public func makeIterator() -> IndexingIterator<[HTTPField]> { storage.makeIterator() }

    public func values(_ lowercaseName: String) -> [String] {
        storage.compactMap { $0.hasName(lowercaseName) ? $0.value : nil }
    }

    public func count(_ lowercaseName: String) -> Int {
        var count = 0
        for field in storage where field.hasName(lowercaseName) { count += 1 }
        return count
    }

    /// Whether any field of that name lists `lowercaseToken` (case-insensitive), e.g.
    /// `Connection: keep-alive, Close` contains "close". Allocation-free but for the value bytes.
    public func containsListToken(_ lowercaseName: String, _ lowercaseToken: String) -> Bool {
        for field in storage where field.hasName(lowercaseName) {
            var found = false
            ASCII.forEachListMember(field.value) { member in
                found = ASCII.equalsIgnoringCase(member, lowercase: lowercaseToken)
                return !found
            }
            if found { return true }
        }
        return false
    }

    /// The first field of that name, for fields where a repeat changes nothing the proxy decides.
    /// A field that decides (`HTTPFields.decidingNames`) is read through `singleValue(of:)`:
    /// first-wins there is how a proxy and the client behind it come to read two different
    /// messages (docs/security-model.md, "Strict parsing").
    public func first(_ lowercaseName: String) -> String? {
        assert(!Self.decidingNames.contains(lowercaseName), "'\(lowercaseName)' decides: read it with singleValue(of:)")
        return storage.first { $0.hasName(lowercaseName) }?.value
    }

    /// The fields whose value decides where a message goes, how long it is, who sent it or how the
    /// proxy reads its body (Content-Type: whether a form's `_method` is checked, whether
    /// placeholders are replaced). Content-Length and Transfer-Encoding are read by `BodyFraming`
    /// (all fields, list members compared); the others through `singleValue(of:)`.
    public static let decidingNames: Set<String> = [
        "host", "location", "content-length", "transfer-encoding", "proxy-authorization", "content-type",
    ]

    /// What the fields of one name say, for a field that must have one value (RFC 9110 §5.3: a
    /// singleton repeated is an error). Values are compared byte for byte, names case-insensitively.
    public func singleValue(of lowercaseName: String) -> SingleFieldValue {
        var found: String?
        var repeated = false
        for field in storage where field.hasName(lowercaseName) {
            guard let value = found else {
                found = field.value
                continue
            }
            guard value == field.value else { return .conflicting }
            repeated = true
        }
        guard let found else { return .absent }
        return repeated ? .repeated(found) : .one(found)
    }

    public func contains(_ lowercaseName: String) -> Bool {
        storage.contains { $0.hasName(lowercaseName) }
    }

    /// Room for `count` fields without growing (a head is built field by field).
    public mutating func reserveCapacity(_ count: Int) {
        storage.reserveCapacity(count)
    }

    public mutating func append(name: String, value: String) {
        storage.append(HTTPField(name: name, value: value))
    }

    public mutating func removeAll(_ lowercaseName: String) {
        storage.removeAll { $0.hasName(lowercaseName) }
    }

    public mutating func removeAll(where shouldRemove: (HTTPField) -> Bool) {
        storage.removeAll(where: shouldRemove)
    }

    /// Replaces every field of that name with one field (placed where the first one was, or appended).
    public mutating func set(name: String, value: String) {
        let lowercase = ASCII.lowercasedName(name)
        guard let index = storage.firstIndex(where: { $0.hasName(lowercase) }) else {
            storage.append(HTTPField(name: name, value: value))
            return
        }
        storage[index].value = value
        // Only when there are more (rare): removing walks and rewrites the whole list.
        guard storage[(index + 1)...].contains(where: { $0.hasName(lowercase) }) else { return }
        var seen = false
        storage.removeAll { field in
            guard field.hasName(lowercase) else { return false }
            defer { seen = true }
            return seen
        }
    }

    /// Comma-separated list members of every field of that name (RFC 9110 §5.6.1), trimmed, empty
    /// members dropped, lowercased.
    public func listMembers(_ lowercaseName: String) -> [String] {
        var members: [String] = []
        for field in storage where field.hasName(lowercaseName) {
            ASCII.forEachListMember(field.value) { member in
                members.append(String(decoding: member.map(ASCII.lowercased), as: UTF8.self))
                return true
            }
        }
        return members
    }
}

/// The answer of `HTTPFields.singleValue(of:)`. There is no "first" to fall back to: a caller
/// decides what a repeat means (Location: the same value twice is one value; Host and
/// Proxy-Authorization: any repeat is refused) and a conflict is always refused.
public enum SingleFieldValue: Sendable, Equatable {
    case absent
    case one(String)
    /// More than one field, all with exactly this value.
    case repeated(String)
    /// Two fields with different values.
    case conflicting

    /// The value when there is exactly one field; nil when absent, repeated or conflicting.
    public var only: String? {
        if case .one(let value) = self { return value }
        return nil
    }

    /// The value when every field says the same (one field or the same value repeated); nil when
    /// absent or conflicting.
    public var agreed: String? {
        switch self {
        case .one(let value), .repeated(let value): value
        case .absent, .conflicting: nil
        }
    }
}

extension HTTPField {
    /// field-name = token (RFC 9110 §5.1): the rule the head parser applies, for names that come
    /// from elsewhere (the config's header lists and injections).
    public static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.allSatisfy(ASCII.isTokenChar)
    }
}

extension HTTPField {
    /// The value String that serializes to exactly `bytes`. Field values are kept as one Unicode
    /// scalar per wire byte (ISO-8859-1), which is how the parser builds them and how the
    /// serializer writes them back; a value made from bytes that did not come off the wire (a
    /// secret read from a file) must be built the same way, or `é` read as UTF-8 (C3 A9) would
    /// go out as E9, and anything above U+00FF as `?`.
    @inlinable
    public static func value<C: Collection>(wireBytes bytes: C) -> String where C.Element == UInt8 {
        ASCII.latin1String(bytes)
    }

    /// The bytes the serializer writes for `value`: the inverse of `value(wireBytes:)`.
    public static func wireBytes(of value: String) -> [UInt8] {
        var bytes: [UInt8] = []
        ASCII.appendLatin1(value, to: &bytes)
        return bytes
    }

    /// `wireBytes(of:)` appended to `buffer`, without an array of its own.
    public static func appendWireBytes(of value: String, to buffer: inout [UInt8]) {
        ASCII.appendLatin1(value, to: &buffer)
    }
}

extension HTTPField {
    /// An HTTP/2 field name (RFC 9113 §8.2.1): a token (as `isValidName`) with no upper-case
    /// letter, since HTTP/2 carries names in lower case and one in upper case makes the message
    /// malformed.
    public static func isValidLowercaseName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.allSatisfy { ASCII.isTokenChar($0) && !($0 >= 0x41 && $0 <= 0x5A) }
    }

    /// A field value from a peer that did not come through the HTTP/1 head parser (an HTTP/2
    /// header block): the bytes that parser accepts (no NUL, CR, LF, other control or DEL; HTAB
    /// and obs-text are fine), one byte per Unicode scalar, and no leading or trailing SP or HTAB
    /// (RFC 9113 §8.2.1; the HTTP/1 parser trims them instead).
    public static func isValidValue(_ value: String) -> Bool {
        let scalars = value.unicodeScalars
        if let first = scalars.first, first == " " || first == "\t" { return false }
        if let last = scalars.last, last == " " || last == "\t" { return false }
        return scalars.allSatisfy { $0.value <= 0xFF && ASCII.isFieldValueChar(UInt8($0.value)) }
    }
}

extension HTTPField {
    /// Whether every byte is below 0x80, eight at a time (header values are checked on the
    /// per-request path: the scrub, the view's naming).
    @inlinable
    public static func isASCII(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = bytes.baseAddress else { return true }
        let raw = UnsafeRawPointer(base)
        var index = 0
        var high: UInt64 = 0
        while index + 8 <= bytes.count {
            high |= raw.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            index += 8
        }
        while index < bytes.count {
            high |= UInt64(bytes[index])
            index += 1
        }
        return high & 0x8080_8080_8080_8080 == 0
    }
}
