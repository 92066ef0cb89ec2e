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
            case "application/x-www-form-urlencoded":
                found += values(in: body)
            case "multipart/form-data":
                // Parts are not parsed: any mention of the parameter name counts as an override.
                if contains(body, parameter) { return .unreadable }
            default:
                break
            }
        }
        guard let first = found.first else { return .none }
        return found.allSatisfy { $0.uppercased() == first.uppercased() } ? .method(first) : .unreadable
    }

    /// The body of a request with this Content-Type may carry `_method`.
    public static func isForm(_ contentType: String?) -> Bool {
        let type = mediaType(contentType)
        return type == "application/x-www-form-urlencoded" || type == "multipart/form-data"
    }

    /// `_method` values in `a=1&_method=DELETE;b=2` (`&` and `;` separate pairs), percent-decoded
    /// with `+` as space, names compared after decoding (`%5Fmethod` is `_method` too).
    static func values(in encoded: [UInt8]) -> [String] {
        var result: [String] = []
        for pair in encoded.split(whereSeparator: { $0 == UInt8(ascii: "&") || $0 == UInt8(ascii: ";") }) {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            let name = PercentEncoding.decode(Substring(decoding: parts[0], as: UTF8.self), plusAsSpace: true)
            guard name.map(ASCIIBytes.lowercased) == parameter else { continue }
            let value = parts.count > 1 ? PercentEncoding.decode(Substring(decoding: parts[1], as: UTF8.self), plusAsSpace: true) : []
            result.append(String(decoding: value, as: UTF8.self).trimmingCharacters(in: " "))
        }
        return result
    }

    static func mediaType(_ contentType: String?) -> String {
        guard let contentType else { return "" }
        let type = contentType.split(separator: ";", maxSplits: 1).first.map(String.init) ?? ""
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
