/// The three allowlists. Anything not on them is redacted: a new header, query parameter or JSON
/// key stays hidden until someone decides it is safe (`log.safe_headers`, `safe_query`,
/// `safe_json_keys` extend them).
public struct RedactionRules: Sendable, Equatable {
    public var safeHeaders: Set<String>
    public var safeQuery: Set<String>
    public var safeJSONKeys: Set<String>

    public init(extraHeaders: [String] = [], extraQuery: [String] = [], extraJSONKeys: [String] = []) {
        safeHeaders = Self.builtInHeaders.union(extraHeaders.map { $0.lowercased() })
        safeQuery = Self.builtInQuery.union(extraQuery)
        safeJSONKeys = Self.builtInJSONKeys.union(extraJSONKeys)
    }

    public static let builtInHeaders: Set<String> = [
        "accept", "accept-encoding", "accept-language", "accept-ranges", "age", "cache-control", "connection",
        "content-encoding", "content-language", "content-length", "content-range", "content-type", "date", "etag",
        "expires", "host", "if-match", "if-modified-since", "if-none-match", "keep-alive", "last-modified", "pragma",
        "range", "retry-after", "server", "transfer-encoding", "user-agent", "vary", "via", "x-request-id", "proxy-connection",
        "x-content-type-options", "x-frame-options", "strict-transport-security", "access-control-allow-origin",
        "access-control-allow-methods", "access-control-allow-headers", "access-control-max-age",
    ]

    public static let builtInQuery: Set<String> = [
        "limit", "offset", "page", "page_size", "per_page", "sort", "order", "direction", "format", "fields",
        "include", "expand", "lang", "locale", "version",
    ]

    public static let builtInJSONKeys: Set<String> = [
        "id", "status", "error", "error_description", "type", "title", "code", "count", "next", "previous",
        "total", "page", "limit", "offset", "has_more", "object", "kind", "created_at", "updated_at",
    ]
}
