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

    /// From the query, and from a body when there is one (`body`: the whole body, read; `hasBody`:
    /// the request has one, read or not). A body a framework would decode first (`Content-Encoding`)
    /// cannot be read here: unreadable.
    public static func detect(
        pathAndQuery: String, body: [UInt8]?, contentType: String?, contentEncoding: String? = nil,
        hasBody: Bool = false
    ) -> MethodOverride {
        var found: [String] = []
        if let question = pathAndQuery.firstIndex(of: "?") {
            found += values(in: Array(pathAndQuery.utf8[pathAndQuery.utf8.index(after: question)...]))
        }
        if hasBody || body != nil, isEncoded(contentEncoding), isForm(contentType) || isJSON(contentType) {
            return .unreadable
        }
        if let body {
            if isJSON(contentType) {
                // Laravel reads a JSON body's members as input, `_method` included: a key read as
                // `_method` at any depth gets no credential (its value is not judged).
                if jsonHasOverrideKey(body) { return .unreadable }
            } else {
                switch mediaType(contentType) {
                case "application/x-www-form-urlencoded", "":
                    // Rack reads the body of a request with no Content-Type as a form too.
                    found += values(in: body)
                case "multipart/form-data":
                    // Parts are not parsed: a part name read as `_method` makes it unreadable.
                    if multipartHasOverrideName(body) { return .unreadable }
                default:
                    break
                }
            }
        }
        guard let first = found.first else { return .none }
        if found.contains(Self.indexedMarker) { return .unreadable }
        return found.allSatisfy { $0.uppercased() == first.uppercased() } ? .method(first) : .unreadable
    }

    /// Laravel's `isJson`: a Content-Type containing `/json` or `+json`.
    public static func isJSON(_ contentType: String?) -> Bool {
        guard let type = contentType?.lowercased() else { return false }
        return type.contains("/json") || type.contains("+json")
    }

    public static func isEncoded(_ contentEncoding: String?) -> Bool {
        guard let coding = contentEncoding?.trimmingCharacters(in: " ").lowercased(), !coding.isEmpty else { return false }
        return coding != "identity"
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

    /// Whether a (lowercased) parameter name is read as `_method` by some framework: PHP ends a
    /// name at NUL, drops leading spaces and reads `.`, ` ` and an unclosed `[` as `_`; Rack 2 drops
    /// brackets around a name (`[_method]`, `]_method`).
    static func overrideName(_ name: [UInt8]) -> OverrideName? {
        var name = ArraySlice(name.prefix { $0 != 0 })
        while name.first == UInt8(ascii: " ") { name = name.dropFirst() }
        let brackets: Set<UInt8> = [UInt8(ascii: "["), UInt8(ascii: "]")]
        var stripped = name
        while let first = stripped.first, brackets.contains(first) { stripped = stripped.dropFirst() }
        while let last = stripped.last, brackets.contains(last) { stripped = stripped.dropLast() }
        let leading: Set<UInt8> = [UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: " "), UInt8(ascii: "[")]
        var reading: OverrideName?
        for candidate in [name, stripped] {
            guard let first = candidate.first, leading.contains(first), candidate.dropFirst().starts(with: Array("method".utf8)) else { continue }
            let rest = candidate.dropFirst(1 + 6)
            if rest.isEmpty { reading = reading ?? .plain } else if rest.first == UInt8(ascii: "[") { reading = .indexed }
        }
        return reading
    }

    /// A key of a JSON body (at any depth) read as `_method`; string escapes decoded (`\u005f`).
    static func jsonHasOverrideKey(_ body: [UInt8]) -> Bool {
        var index = 0
        while index < body.count {
            guard body[index] == UInt8(ascii: "\"") else {
                index += 1
                continue
            }
            var decoded: [UInt8] = []
            index += 1
            while index < body.count, body[index] != UInt8(ascii: "\"") {
                if body[index] == UInt8(ascii: "\\"), index + 1 < body.count {
                    let escape = body[index + 1]
                    if escape == UInt8(ascii: "u"), index + 5 < body.count,
                        let code = UInt8(String(decoding: body[(index + 2)...(index + 5)], as: UTF8.self), radix: 16)
                    {
                        decoded.append(code)
                        index += 6
                    } else {
                        decoded.append(escape == UInt8(ascii: "u") ? 0x80 : escape)
                        index += 2
                    }
                } else {
                    decoded.append(body[index])
                    index += 1
                }
            }
            index += 1  // the closing quote
            var next = index
            while next < body.count, [0x20, 0x09, 0x0A, 0x0D].contains(body[next]) { next += 1 }
            if next < body.count, body[next] == UInt8(ascii: ":"), overrideName(decoded.map(ASCIIBytes.lowercased)) != nil { return true }
        }
        return false
    }

    /// A multipart part whose `name` (quoted or not, `name*=` too) is read as `_method`.
    static func multipartHasOverrideName(_ body: [UInt8]) -> Bool {
        let lowered = body.map(ASCIIBytes.lowercased)
        let key = Array("name".utf8)
        var index = 0
        while index + key.count < lowered.count {
            guard lowered[index..<(index + key.count)].elementsEqual(key) else {
                index += 1
                continue
            }
            var cursor = index + key.count
            if cursor < lowered.count, lowered[cursor] == UInt8(ascii: "*") { cursor += 1 }
            while cursor < lowered.count, lowered[cursor] == UInt8(ascii: " ") { cursor += 1 }
            guard cursor < lowered.count, lowered[cursor] == UInt8(ascii: "=") else {
                index += 1
                continue
            }
            cursor += 1
            while cursor < lowered.count, lowered[cursor] == UInt8(ascii: " ") { cursor += 1 }
            let quoted = cursor < lowered.count && lowered[cursor] == UInt8(ascii: "\"")
            if quoted { cursor += 1 }
            let end =
                lowered[cursor...].firstIndex {
                    quoted ? $0 == UInt8(ascii: "\"") : ($0 == UInt8(ascii: ";") || $0 == 0x0D || $0 == 0x0A || $0 == UInt8(ascii: " "))
                } ?? lowered.count
            let raw = Array(lowered[cursor..<end])
            // Percent and RFC 2231 (`utf-8''%5Fmethod`) forms: decoded as a framework would.
            let afterCharset = raw.split(separator: UInt8(ascii: "'"), omittingEmptySubsequences: false).last.map(Array.init) ?? raw
            for candidate in [raw, afterCharset] {
                let decoded = PercentEncoding.decode(Substring(decoding: candidate, as: UTF8.self), plusAsSpace: false)
                if overrideName(candidate) != nil || overrideName(decoded.map(ASCIIBytes.lowercased)) != nil { return true }
            }
            index = end
        }
        return false
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
