import HTTP1Codec

extension Redactor {
    /// Header name -> value for the log: the value only for safe headers, a Location through the URL
    /// redactor, everything else (Set-Cookie always) `<redacted>`. Repeated names are joined.
    public func headers(_ fields: HTTPFields) -> [(name: String, value: String)] {
        var result: [(name: String, value: String)] = []
        for field in fields {
            let name = field.name.lowercased()
            let value: String
            if name == "location" || name == "content-location" {
                value = url(field.value)
            } else if name != "set-cookie", rules.safeHeaders.contains(name) {
                value = field.value
            } else {
                value = Self.redacted
            }
            if let index = result.firstIndex(where: { $0.name == name }) {
                if result[index].value != value { result[index].value += ", " + value }
            } else {
                result.append((name, value))
            }
        }
        return result
    }
}
