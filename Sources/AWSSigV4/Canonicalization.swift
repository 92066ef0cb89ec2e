import HTTP1Codec

/// The canonical forms of the request's parts (AWS "Create a canonical request"). Each function is
/// checked against the AWS SigV4 test suite's `.creq` files and against botocore.
enum AWSSigV4Canonical {
    /// Every service but S3: dot segments and empty segments removed (RFC 3986 §5.2.4; AWS also
    /// collapses `//`, as botocore's `remove_dot_segments` does), a trailing `/` kept when a
    /// segment remains, then each segment URI-encoded (the path on the wire is already encoded
    /// once, so an escape there is encoded again: `%20` -> `%2520`, AWS's "encode twice").
    static func normalizedURI(_ path: String) -> String {
        guard !path.isEmpty else { return "/" }
        var segments: [Substring] = []
        for segment in path.split(separator: "/", omittingEmptySubsequences: true) {
            switch segment {
            case ".": continue
            case "..": _ = segments.popLast()
            default: segments.append(segment)
            }
        }
        let leading = path.hasPrefix("/") ? "/" : ""
        let trailing = path.hasSuffix("/") && !segments.isEmpty ? "/" : ""
        return leading + segments.map { PercentEncoding.encode(Array($0.utf8)) }.joined(separator: "/") + trailing
    }

    /// S3: the object key's single URI encoding, not normalized (keys may hold `//`, `.` and `..`).
    /// S3 computes it from the key it decodes out of the path, not from the path's spelling: a
    /// path an SDK sent (every byte but the unreserved set and `/` already escaped, as botocore's
    /// serializer does it) comes out unchanged, which is what botocore and the CRT signer sign; a
    /// path a plain HTTP client sent with `(`, `!`, `=` or `$` raw is signed as S3 will see it
    /// (`%28`, ...). `+` decodes to a space, as S3 reads a path (its canonical request for
    /// `/libstdc++-docs` reads `/libstdc%20%20-docs`); an escaped `%2F` is the key's `/`.
    static func s3URI(_ path: String) -> String {
        guard !path.isEmpty else { return "/" }
        let key = PercentEncoding.decode(Substring(path), plusAsSpace: true)
        return key.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
            .map { PercentEncoding.encode(Array($0)) }.joined(separator: "/")
    }

    /// Pairs decoded (`+` as a space) and re-encoded with the unreserved set, sorted by encoded name
    /// then encoded value (byte order); a pair without `=` has an empty value; empty pairs (`a&&b`)
    /// are not parameters and are dropped.
    static func query(_ query: String) -> String {
        guard !query.isEmpty else { return "" }
        var pairs: [(name: [UInt8], value: [UInt8])] = []
        for piece in query.split(separator: "&", omittingEmptySubsequences: true) {
            let name: Substring, value: Substring
            if let equals = piece.firstIndex(of: "=") {
                name = piece[..<equals]
                value = piece[piece.index(after: equals)...]
            } else {
                name = piece
                value = ""
            }
            pairs.append(
                (
                    Array(PercentEncoding.encode(PercentEncoding.decode(name, plusAsSpace: true)).utf8),
                    Array(PercentEncoding.encode(PercentEncoding.decode(value, plusAsSpace: true)).utf8)
                ))
        }
        pairs.sort { left, right in
            left.name != right.name ? left.name.lexicographicallyPrecedes(right.name) : left.value.lexicographicallyPrecedes(right.value)
        }
        var bytes: [UInt8] = []
        for (index, pair) in pairs.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: "&")) }
            bytes += pair.name + [UInt8(ascii: "=")] + pair.value
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The canonical header block (`name:value\n` per name, names lowercase and sorted, a name's
    /// values trimmed, inner whitespace runs collapsed, joined with `,` in the order sent) and the
    /// sorted names. Values are their wire bytes (fields hold one scalar per byte).
    static func headers(_ fields: [HTTPField]) -> (block: [UInt8], names: [String]) {
        var valuesByName: [String: [[UInt8]]] = [:]
        var names: [String] = []
        for field in fields {
            let name = field.lowercasedName
            if valuesByName[name] == nil { names.append(name) }
            valuesByName[name, default: []].append(trimAll(HTTPField.wireBytes(of: field.value)))
        }
        names.sort { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
        var block: [UInt8] = []
        for name in names {
            block += Array(name.utf8) + [UInt8(ascii: ":")]
            for (index, value) in valuesByName[name, default: []].enumerated() {
                if index > 0 { block.append(UInt8(ascii: ",")) }
                block += value
            }
            block.append(0x0A)
        }
        return (block, names)
    }

    /// AWS's Trimall: whitespace before and after removed, each run inside made one space. The
    /// whitespace set is botocore's (Python's `str.split()` on ASCII): SP, HT, LF, VT, FF, CR, so an
    /// obs-folded value (the test suite's `get-header-value-multiline`) reads as botocore reads it.
    static func trimAll(_ value: [UInt8]) -> [UInt8] {
        var output: [UInt8] = []
        output.reserveCapacity(value.count)
        var pendingSpace = false
        for byte in value {
            if isWhitespace(byte) {
                pendingSpace = !output.isEmpty
            } else {
                if pendingSpace { output.append(UInt8(ascii: " ")) }
                pendingSpace = false
                output.append(byte)
            }
        }
        return output
    }

    static func isWhitespace(_ byte: UInt8) -> Bool {
        byte == 0x20 || (byte >= 0x09 && byte <= 0x0D)
    }
}
