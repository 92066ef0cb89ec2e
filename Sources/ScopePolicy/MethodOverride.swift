import HTTP1Codec

/// A method named by a `_method` parameter, which Laravel and Symfony (query or form body) and
/// Rails/Rack (form body) run instead of the request line's. Headers that do the same are stripped
/// (`SensitiveHeaders.methodOverride`); a parameter cannot be removed without changing the request,
/// so a scope that limits `methods:` judges the overriding method too.
public enum MethodOverride: Sendable, Equatable {
    case none
    case method(String)
    /// Present, but not one clear value (a multipart body, or several disagreeing values): a
    /// credential limited to some methods is not given.
    case unreadable

    static let parameter = Array("_method".utf8)

    /// From the query, and from a form body when there is one (`body`: the whole body, read).
    public static func detect(pathAndQuery: String, body: [UInt8]?, contentType: String?) -> MethodOverride {
        var found: [String] = []
        if let question = pathAndQuery.firstIndex(of: "?") {
            found += values(in: Array(pathAndQuery.utf8[pathAndQuery.utf8.index(after: question)...]))
        }
        if let body {
            switch mediaType(contentType) {
            case "application/x-www-form-urlencoded", "":
                // Rack reads the body of a request with no Content-Type as a form too.
                found += values(in: body)
            case "multipart/form-data":
                // Parts are not parsed: any mention of the parameter name counts as an override.
                if contains(body, parameter) { return .unreadable }
            default:
                break
            }
        }
        guard let first = found.first else { return .none }
        if found.contains(Self.indexedMarker) { return .unreadable }
        return found.allSatisfy { $0.uppercased() == first.uppercased() } ? .method(first) : .unreadable
    }

    /// The body of a request with this Content-Type may carry `_method`: a form, or no type at all
    /// (Rack's `form_data?` is true for a POST without Content-Type).
    public static func isForm(_ contentType: String?) -> Bool {
        let type = mediaType(contentType)
        return type == "application/x-www-form-urlencoded" || type == "multipart/form-data" || type.isEmpty
    }

    /// `_method` values in `a=1&_method=DELETE;b=2` (`&` and `;` separate pairs), percent-decoded
    /// with `+` as space, names compared after decoding (`%5Fmethod` is `_method` too). PHP reads
    /// `.`, ` ` and an unclosed `[` in a parameter name as `_`, so `.method` and `[method` reach
    /// Laravel and Symfony as `_method`; `_method[]` is an array there, which no value here can say
    /// (read as unreadable, below).
    static func values(in encoded: [UInt8]) -> [String] {
        var result: [String] = []
        for pair in encoded.split(whereSeparator: { $0 == UInt8(ascii: "&") || $0 == UInt8(ascii: ";") }) {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            let name = PercentEncoding.decode(Substring(decoding: parts[0], as: UTF8.self), plusAsSpace: true)
            guard let reading = overrideName(name.map(ASCIIBytes.lowercased)) else { continue }
            let value = parts.count > 1 ? PercentEncoding.decode(Substring(decoding: parts[1], as: UTF8.self), plusAsSpace: true) : []
            result.append(reading == .indexed ? Self.indexedMarker : String(decoding: value, as: UTF8.self).trimmingCharacters(in: " "))
        }
        return result
    }

    /// A value that stands for "an indexed `_method[...]`": never a method, never equal to one.
    static let indexedMarker = "\u{0}indexed"

    enum OverrideName { case plain, indexed }

    /// Whether a (lowercased) parameter name is read as `_method` by some framework.
    static func overrideName(_ name: [UInt8]) -> OverrideName? {
        let leading: Set<UInt8> = [UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: " "), UInt8(ascii: "[")]
        guard let first = name.first, leading.contains(first), name.dropFirst().starts(with: Array("method".utf8)) else { return nil }
        let rest = name.dropFirst(1 + 6)
        if rest.isEmpty { return .plain }
        return rest.first == UInt8(ascii: "[") ? .indexed : nil
    }

    /// The media type of a Content-Type, lowercased ("" when absent); a list (`a, b`, refused at
    /// admission) reads as its first member, as Rack reads it.
    static func mediaType(_ contentType: String?) -> String {
        guard let contentType else { return "" }
        let type = contentType.split(whereSeparator: { $0 == ";" || $0 == "," }).first.map(String.init) ?? ""
        return type.trimmingCharacters(in: " ").lowercased()
    }

    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard needle.count <= haystack.count else { return false }
        return (0...(haystack.count - needle.count)).contains { start in haystack[start..<(start + needle.count)].elementsEqual(needle) }
    }
}

enum ASCIIBytes {
    static func lowercased(_ byte: UInt8) -> UInt8 { (byte >= 0x41 && byte <= 0x5A) ? byte | 0x20 : byte }
}

extension String {
    func trimmingCharacters(in character: Character) -> String {
        var slice = Substring(self)
        while slice.first == character { slice.removeFirst() }
        while slice.last == character { slice.removeLast() }
        return String(slice)
    }
}
