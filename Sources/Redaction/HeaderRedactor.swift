import HTTP1Codec

extension Redactor {
    /// Header name -> value for the log: the value only for safe headers, a Location through the URL
    /// redactor, everything else (Set-Cookie always) `<redacted>`. Repeated names are joined.
    public func headers(_ fields: HTTPFields) -> [(name: String, value: String)] {
        var result: [(name: String, value: String)] = []
        forEachHeader(fields) { name, value in result.append((name, value)) }
        return result
    }

    /// `headers`, one pair at a time, without building the list (the access log's per-request path:
    /// no arrays, and a repeated name, which is rare, is found by looking back and ahead).
    public func forEachHeader(_ fields: HTTPFields, _ body: (_ name: String, _ value: String) -> Void) {
        let storage = fields.storage
        next: for position in storage.indices {
            let name = storage[position].lowercasedName
            for earlier in 0..<position where storage[earlier].hasName(name) { continue next }
            var value = shownValue(storage[position].value, lowercaseName: name)
            for later in (position + 1)..<storage.count where storage[later].hasName(name) {
                let more = shownValue(storage[later].value, lowercaseName: name)
                if value != more { value += ", " + more }
            }
            body(name, value)
        }
    }

    /// A Location through the URL redactor, a safe header's value as it is, anything else
    /// (Set-Cookie always) `<redacted>`.
    private func shownValue(_ value: String, lowercaseName name: String) -> String {
        if name == "location" || name == "content-location" { return url(value) }
        if name != "set-cookie", rules.safeHeaders.contains(name) { return value }
        return Self.redacted
    }
}
