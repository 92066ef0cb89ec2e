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
    /// Each name is lowercased once into stack space, and a repeated name, which is rare, is found
    /// by comparing those: reading a field out of the array for every comparison retained and
    /// released its two strings each time (bench/cost.sh: a third of this function's cost).
    public func forEachHeader(_ fields: HTTPFields, _ body: (_ name: String, _ value: String) -> Void) {
        let storage = fields.storage
        let count = storage.count
        withUnsafeTemporaryAllocation(of: String.self, capacity: count) { names in
            guard let base = names.baseAddress else { return }
            for index in 0..<count { (base + index).initialize(to: storage[index].lowercasedName) }
            defer { base.deinitialize(count: count) }
            next: for position in 0..<count {
                let name = names[position]
                for earlier in 0..<position where Self.sameName(names[earlier], name) { continue next }
                var value = shownValue(storage[position].value, lowercaseName: name)
                for later in (position + 1)..<count where Self.sameName(names[later], name) {
                    let more = shownValue(storage[later].value, lowercaseName: name)
                    if value != more { value += ", " + more }
                }
                body(name, value)
            }
        }
    }

    /// Two lowercased names are one: their lengths (known without reading them) first, since nearly
    /// every pair differs there.
    @inline(__always)
    private static func sameName(_ a: String, _ b: String) -> Bool {
        a.utf8.count == b.utf8.count && a == b
    }

    /// A Location through the URL redactor, a safe header's value as it is, anything else
    /// (Set-Cookie always) `<redacted>`.
    public func shownValue(_ value: String, lowercaseName name: String) -> String {
        if Self.isLocation(name) { return url(value) }
        return showsValue(lowercaseName: name) ? value : Self.redacted
    }

    /// Whether a header's value is shown (a Location's through the URL redactor), not `<redacted>`.
    public func showsValue(lowercaseName name: String) -> Bool {
        Self.isLocation(name) || (name != "set-cookie" && rules.safeHeaders.contains(name))
    }

    /// Location and Content-Location: URLs, shown through the URL redactor.
    public static func isLocation(_ lowercaseName: String) -> Bool {
        lowercaseName == "location" || lowercaseName == "content-location"
    }

    /// Whether a shown text hides something: `<redacted>` anywhere in it.
    public static func hidesSomething(_ shown: String) -> Bool {
        var shown = shown
        return shown.withUTF8 { Tripwire.find(redactedBytes, in: $0) != nil }
    }

    private static let redactedBytes = Array(redacted.utf8)
}
