/// One header (or trailer) field as it came off the wire: name case and value bytes preserved.
public struct HTTPField: Sendable, Equatable {
    public var name: String
    public var value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }

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
        storage.lazy.filter { $0.hasName(lowercaseName) }.map(\.value)
    }

    public func first(_ lowercaseName: String) -> String? {
        storage.first { $0.hasName(lowercaseName) }?.value
    }

    public func contains(_ lowercaseName: String) -> Bool {
        storage.contains { $0.hasName(lowercaseName) }
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
        let lowercase = name.lowercased()
        if let index = storage.firstIndex(where: { $0.hasName(lowercase) }) {
            storage[index].value = value
            var seen = false
            storage.removeAll { field in
                guard field.hasName(lowercase) else { return false }
                defer { seen = true }
                return seen
            }
        } else {
            storage.append(HTTPField(name: name, value: value))
        }
    }

    /// Comma-separated list members of every field of that name (RFC 9110 §5.6.1), trimmed, empty
    /// members dropped.
    public func listMembers(_ lowercaseName: String) -> [Substring] {
        var members: [Substring] = []
        for value in values(lowercaseName) {
            for member in value.split(separator: ",", omittingEmptySubsequences: true) {
                let trimmed = member.trimmingOWS()
                if !trimmed.isEmpty { members.append(trimmed) }
            }
        }
        return members
    }
}

extension Substring {
    func trimmingOWS() -> Substring {
        var result = self
        while let first = result.first, first == " " || first == "\t" { result.removeFirst() }
        while let last = result.last, last == " " || last == "\t" { result.removeLast() }
        return result
    }
}
