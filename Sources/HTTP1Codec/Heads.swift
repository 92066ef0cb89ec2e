public struct HTTPVersion: Sendable, Equatable, CustomStringConvertible {
    public var major: Int
    public var minor: Int

    public static let http1_0 = HTTPVersion(major: 1, minor: 0)
    public static let http1_1 = HTTPVersion(major: 1, minor: 1)
    /// A request that arrived on an HTTP/2 stream (RFC 9113); it is never serialized as such (the
    /// upstream leg speaks HTTP/1.1, or HTTP/2 frames).
    public static let http2 = HTTPVersion(major: 2, minor: 0)

    public init(major: Int, minor: Int) {
        self.major = major
        self.minor = minor
    }

    public var description: String { "HTTP/\(major).\(minor)" }

    /// Persistence per RFC 9112 §9.3: `close` ends it; HTTP/1.1 defaults to persistent, HTTP/1.0
    /// only with `keep-alive`.
    static func isPersistent(_ version: HTTPVersion, _ fields: HTTPFields) -> Bool {
        if fields.containsListToken("connection", "close") { return false }
        if version == .http1_1 { return true }
        return fields.containsListToken("connection", "keep-alive")
    }
}

/// A parsed request line and header section. The target is kept as sent; `RequestTarget.parse`
/// interprets it.
public struct RequestHead: Sendable, Equatable {
    public var method: String
    public var target: String
    public var version: HTTPVersion
    public var fields: HTTPFields

    public init(method: String, target: String, version: HTTPVersion, fields: HTTPFields) {
        self.method = method
        self.target = target
        self.version = version
        self.fields = fields
    }

    /// Whether the client asked to keep the connection open after this exchange (RFC 9112 §9.3).
    public var wantsKeepAlive: Bool { HTTPVersion.isPersistent(version, fields) }

    public func serialized() -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(256 + fields.count * 48)
        bytes.append(contentsOf: method.utf8)
        bytes.append(ASCII.space)
        bytes.append(contentsOf: target.utf8)
        bytes.append(ASCII.space)
        bytes.append(contentsOf: version.description.utf8)
        bytes.append(contentsOf: [ASCII.cr, ASCII.lf])
        HeadSerializer.appendFields(fields, to: &bytes)
        return bytes
    }
}

public struct ResponseHead: Sendable, Equatable {
    public var version: HTTPVersion
    public var status: Int
    public var reason: String
    public var fields: HTTPFields

    public init(version: HTTPVersion, status: Int, reason: String, fields: HTTPFields) {
        self.version = version
        self.status = status
        self.reason = reason
        self.fields = fields
    }

    public var isInformational: Bool { (100..<200).contains(status) }

    /// Whether the origin lets this connection carry another exchange (RFC 9112 §9.3).
    public var allowsReuse: Bool { HTTPVersion.isPersistent(version, fields) }

    public func serialized() -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(256 + fields.count * 48)
        bytes.append(contentsOf: version.description.utf8)
        bytes.append(ASCII.space)
        bytes.append(contentsOf: String(status).utf8)
        bytes.append(ASCII.space)
        ASCII.appendLatin1(reason, to: &bytes)
        bytes.append(contentsOf: [ASCII.cr, ASCII.lf])
        HeadSerializer.appendFields(fields, to: &bytes)
        return bytes
    }
}

enum HeadSerializer {
    static func appendFields(_ fields: HTTPFields, to bytes: inout [UInt8]) {
        for field in fields {
            bytes.append(contentsOf: field.name.utf8)
            bytes.append(ASCII.colon)
            bytes.append(ASCII.space)
            ASCII.appendLatin1(field.value, to: &bytes)
            bytes.append(contentsOf: [ASCII.cr, ASCII.lf])
        }
        bytes.append(contentsOf: [ASCII.cr, ASCII.lf])
    }
}
