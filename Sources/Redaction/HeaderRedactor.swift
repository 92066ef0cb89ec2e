import HTTP1Codec

extension Redactor {
    /// Header name -> value for the log: the value only for safe headers, a Location through the URL
    /// redactor, everything else (Set-Cookie always) `<redacted>`. Repeated names are joined.
    public func headers(_ fields: HTTPFields) -> [(name: String, value: String)] {
        var result: [(name: String, value: String)] = []
        forEachHeader(fields) { name, value in result.append((name, value)) }
        return result
    }

    /// `headers`, one pair at a time, without building the list (the access log's per-request path).
    public func forEachHeader(_ fields: HTTPFields, _ body: (_ name: String, _ value: String) -> Void) {
        var names: [String] = []
        var values: [String] = []
        names.reserveCapacity(fields.count)
        values.reserveCapacity(fields.count)
        for field in fields {
            let name = field.lowercasedName
            let value: String
            if name == "location" || name == "content-location" {
                value = url(field.value)
            } else if name != "set-cookie", rules.safeHeaders.contains(name) {
                value = field.value
            } else {
                value = Self.redacted
            }
            if let index = names.firstIndex(of: name) {
                if values[index] != value { values[index] += ", " + value }
            } else {
                names.append(name)
                values.append(value)
            }
        }
        for index in names.indices { body(names[index], values[index]) }
    }
}
