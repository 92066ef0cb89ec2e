import HTTP1Codec

/// Redacts URLs for the log: userinfo and fragment always removed; query names kept, values
/// replaced unless the name is safe; path segments classified by shape after percent-decoding.
public struct Redactor: Sendable {
    public let rules: RedactionRules

    public init(rules: RedactionRules = RedactionRules()) {
        self.rules = rules
    }

    public static let redacted = "<redacted>"

    /// `/users/:email/orders?limit=20&token=:redacted` from a request's path and query.
    public func pathAndQuery(_ text: String) -> String {
        Self.isPlainPathKeptAsIs(text) ? text : redactedPathAndQuery(text)
    }

    /// The general case: split, decoded and classified part by part.
    func redactedPathAndQuery(_ text: String) -> String {
        var pathPart = Substring(text)
        if let hash = pathPart.firstIndex(of: "#") { pathPart = pathPart[..<hash] }
        var query: Substring?
        if let question = pathPart.firstIndex(of: "?") {
            query = pathPart[pathPart.index(after: question)...]
            pathPart = pathPart[..<question]
        }
        var result = pathPart.split(separator: "/", omittingEmptySubsequences: false).map(redactedSegment).joined(separator: "/")
        if let query {
            result += "?"
            // `;` separates pairs too (Tomcat, Python's old parse_qs, many frameworks): split only
            // on `&`, `limit=20;api_key=SECRET` logged the key as part of the safe `limit` value.
            // Each separator is kept as it was, so the log shows the query's real shape.
            var pairStart = query.startIndex
            var index = query.startIndex
            while true {
                if index == query.endIndex || query[index] == "&" || query[index] == ";" {
                    result += redactedPair(query[pairStart..<index])
                    guard index < query.endIndex else { break }
                    result.append(query[index])
                    pairStart = query.index(after: index)
                }
                index = query.index(after: index)
            }
        }
        return result
    }

    /// A path segment, classified by shape. Parameters after `;` (`/app;jsessionid=...`, how
    /// Tomcat rewrites a session into the URL) are `name=value` pairs like a query's: classified as
    /// a whole, a short session id next to a route word would have been kept.
    func redactedSegment(_ segment: Substring) -> String {
        guard let semicolon = segment.firstIndex(of: ";") else { return Self.classify(segment) ?? String(segment) }
        let head = segment[..<semicolon]
        var result = Self.classify(head) ?? String(head)
        for parameter in segment[segment.index(after: semicolon)...].split(separator: ";", omittingEmptySubsequences: false) {
            result += ";" + redactedPair(parameter)
        }
        return result
    }

    /// One `name=value` of a query: the name shown (classified if it looks like data), the value
    /// only when the name is on the allowlist.
    func redactedPair(_ pair: Substring) -> String {
        let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
        let shownName = Self.classify(parts[0]) ?? String(parts[0])
        guard parts.count == 2 else { return shownName }
        let decodedName = String(decoding: Self.percentDecoded(parts[0]), as: UTF8.self)
        if rules.safeQuery.contains(decodedName) {
            return shownName + "=" + (Self.classify(parts[1]) ?? String(parts[1]))
        }
        return shownName + "=:redacted"
    }

    /// An absolute or relative URL (a Location header): `https://cdn.x:443/:token?sig=:redacted`.
    public func url(_ text: String) -> String {
        guard let schemeEnd = text.firstIndex(of: ":"), text[schemeEnd...].hasPrefix("://") else {
            return pathAndQuery(text)
        }
        let afterScheme = text.index(schemeEnd, offsetBy: 3)
        let rest = text[afterScheme...]
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
        var authority = rest[..<authorityEnd]
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        let scheme = text[..<schemeEnd].lowercased()
        guard scheme.utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7A) || $0 == UInt8(ascii: "+") || $0 == UInt8(ascii: "-") }) else {
            return Self.redacted
        }
        return scheme + "://" + authority.lowercased() + pathAndQuery(String(rest[authorityEnd...]))
    }

    /// `:email`, `:number`, `:uuid` or `:token` for a segment (or query part) that looks like one;
    /// nil to keep it. Decides on the percent-decoded text.
    static func classify(_ raw: Substring) -> String? {
        classify(decoded: percentDecoded(raw))
    }

    /// The common case decided on the bytes, without splitting, decoding or new strings: a path
    /// with no query, fragment, parameters, escapes, `+` or non-ASCII, none of whose segments
    /// looks like data, is logged as it is (what the general path would produce, unchanged).
    static func isPlainPathKeptAsIs(_ text: String) -> Bool {
        var text = text
        return text.withUTF8 { bytes in
            var segmentStart = 0
            for index in 0...bytes.count {
                if index == bytes.count || bytes[index] == UInt8(ascii: "/") {
                    if classify(decoded: UnsafeBufferPointer(rebasing: bytes[segmentStart..<index])) != nil { return false }
                    segmentStart = index + 1
                    continue
                }
                switch bytes[index] {
                case UInt8(ascii: "?"), UInt8(ascii: "#"), UInt8(ascii: ";"), UInt8(ascii: "%"), UInt8(ascii: "+"), 0x80...: return false
                default: continue
                }
            }
            return true
        }
    }

    static func classify<Bytes: RandomAccessCollection>(decoded: Bytes) -> String? where Bytes.Element == UInt8 {
        guard !decoded.isEmpty else { return nil }
        if decoded.contains(UInt8(ascii: "@")) { return ":email" }
        var longestDigitRun = 0, run = 0, hexCount = 0, tokenCount = 0
        for byte in decoded {
            let isDigit = byte >= 0x30 && byte <= 0x39
            run = isDigit ? run + 1 : 0
            longestDigitRun = max(longestDigitRun, run)
            if isDigit || (byte >= 0x61 && byte <= 0x66) || (byte >= 0x41 && byte <= 0x46) || byte == UInt8(ascii: "-") { hexCount += 1 }
            if isTokenByte(byte) { tokenCount += 1 }
        }
        if isUUID(decoded) || (decoded.count >= 16 && hexCount == decoded.count && decoded.contains(where: { $0 >= 0x30 && $0 <= 0x39 })) {
            return ":uuid"
        }
        if decoded.count >= 24 && tokenCount == decoded.count { return ":token" }
        if longestDigitRun >= 6 { return ":number" }
        // Non-printable or non-ASCII bytes: nothing a route word would hold.
        if decoded.contains(where: { $0 < 0x20 || $0 >= 0x7F }) { return ":token" }
        return nil
    }

    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: true
        default: "-_.~+/=".utf8.contains(byte)
        }
    }

    static func isUUID<Bytes: RandomAccessCollection>(_ bytes: Bytes) -> Bool where Bytes.Element == UInt8 {
        guard bytes.count == 36 else { return false }
        for (index, byte) in bytes.enumerated() {
            if [8, 13, 18, 23].contains(index) {
                if byte != UInt8(ascii: "-") { return false }
            } else if !((byte >= 0x30 && byte <= 0x39) || (byte >= 0x61 && byte <= 0x66) || (byte >= 0x41 && byte <= 0x46)) {
                return false
            }
        }
        return true
    }

    static func percentDecoded(_ text: Substring) -> [UInt8] {
        PercentEncoding.decode(text, plusAsSpace: true)
    }
}
