/// The pieces of `scopeproxy tail`'s connection that are plain parsing: the request it sends, the
/// response head it accepts, and the Server-Sent Events it reads (the WHATWG HTML standard,
/// "Server-sent events", §9.2.6 "Interpreting an event stream"), each bounded: the answer comes
/// from whatever listens on the admin port.
enum TailRequest {
    /// `GET /view/events?client=C&origin=O` with the token and the last id seen (a reconnect
    /// replays only what came after it).
    static func text(admin: String, client: String?, origin: String?, token: String?, lastEventID: String?) -> [UInt8] {
        var query: [String] = []
        if let client { query.append("client=" + percentEncoded(client)) }
        if let origin { query.append("origin=" + percentEncoded(origin)) }
        var head = "GET /view/events" + (query.isEmpty ? "" : "?" + query.joined(separator: "&")) + " HTTP/1.1\r\n"
        head += "Host: \(admin)\r\nAccept: text/event-stream\r\nCache-Control: no-store\r\n"
        if let lastEventID { head += "Last-Event-ID: \(lastEventID)\r\n" }
        var bytes = Array(head.utf8)
        if let token {
            // The token's bytes go on the wire and nowhere else (never into a message).
            bytes += Array("Authorization: Bearer ".utf8) + Array(token.utf8) + [13, 10]
        }
        bytes += Array("\r\n".utf8)
        return bytes
    }

    /// RFC 3986 §3.4: unreserved characters and `:` `/` `@` stay as they are (an origin such as
    /// `https://api.x:443` reads the same either way), everything else is `%XX`.
    static func percentEncoded(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: ":"), UInt8(ascii: "/"),
                UInt8(ascii: "@"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let digits = Array("0123456789ABCDEF".utf8)
                out += "%" + String(decoding: [digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]], as: UTF8.self)
            }
        }
        return out
    }
}

/// The response head: its status, its Content-Type, and the first printable words of a body
/// that came with it (for a refusal's message).
struct TailResponseHead: Equatable {
    static let maxHeadBytes = 16 * 1024

    let status: Int
    let contentType: String?
    /// The bytes after the head that arrived with it (the first events, or an error body).
    let rest: [UInt8]

    enum Problem: Error, Equatable {
        /// More is needed.
        case incomplete
        case tooLarge
        case notHTTP
    }

    /// The head if `bytes` hold all of it.
    static func parse(_ bytes: [UInt8]) -> Result<TailResponseHead, Problem> {
        let separator: [UInt8] = [13, 10, 13, 10]
        var end: Int?
        if bytes.count >= 4 {
            for index in 0...(bytes.count - 4) where bytes[index] == 13 && Array(bytes[index..<index + 4]) == separator {
                end = index
                break
            }
        }
        guard let end else {
            if bytes.count >= 5, !bytes.starts(with: Array("HTTP/".utf8)) { return .failure(.notHTTP) }
            return .failure(bytes.count > maxHeadBytes ? .tooLarge : .incomplete)
        }
        guard end <= maxHeadBytes else { return .failure(.tooLarge) }
        let head = String(decoding: bytes[..<end], as: UTF8.self)
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false)
        let parts = (lines.first ?? "").split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0] == "HTTP/1.1" || parts[0] == "HTTP/1.0", parts[1].utf8.count == 3,
            parts[1].utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), let status = Int(parts[1])
        else { return .failure(.notHTTP) }
        var contentType: String?
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            if line[..<colon].lowercased() == "content-type" {
                contentType = line[line.index(after: colon)...].trimmingSpaces.lowercased()
            }
        }
        return .success(TailResponseHead(status: status, contentType: contentType, rest: Array(bytes[(end + 4)...])))
    }

    /// `text/event-stream`, parameters aside.
    var isEventStream: Bool {
        contentType?.split(separator: ";").first.map { $0.trimmingSpaces == "text/event-stream" } ?? false
    }

    /// The start of a body as printable ASCII on one line (for a message: whatever answers is
    /// not necessarily the proxy).
    static func said(_ body: [UInt8]) -> String {
        let shown = body.prefix(200).map { (0x20...0x7E).contains($0) ? $0 : UInt8(ascii: " ") }
        return String(decoding: shown, as: UTF8.self).split(separator: " ").joined(separator: " ")
    }
}

extension Substring {
    fileprivate var trimmingSpaces: String {
        String(drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}

/// One event of the stream: its id (the feed's sequence number) and its data (one record's JSON).
struct SSEEvent: Equatable {
    let id: String?
    let data: [UInt8]
}

/// Reads Server-Sent Events from bytes as they come: `field: value` lines, an event ending at a
/// blank line, `:` comments ignored (the stream's keep-alive), lines ending in LF, CRLF or CR. A
/// line or an event's data longer than `maxLineBytes` is an error (the stream is then dropped,
/// not buffered without end).
struct SSEParser {
    static let maxLineBytes = TailText.maxRecordBytes + 64

    enum Problem: Error, Equatable {
        case lineTooLong
    }

    private var line: [UInt8] = []
    private var data: [UInt8] = []
    private var hasData = false
    /// The last event id seen (kept across events, as the standard's "last event ID buffer").
    private(set) var lastEventID: String?
    private var afterCR = false

    mutating func feed(_ bytes: some Sequence<UInt8>) -> Result<[SSEEvent], Problem> {
        var events: [SSEEvent] = []
        for byte in bytes {
            if afterCR {
                afterCR = false
                if byte == 10 { continue }
            }
            switch byte {
            case 10, 13:
                afterCR = byte == 13
                if let event = endLine() { events.append(event) }
            default:
                guard line.count < Self.maxLineBytes else { return .failure(.lineTooLong) }
                line.append(byte)
            }
        }
        return .success(events)
    }

    private mutating func endLine() -> SSEEvent? {
        defer { line.removeAll(keepingCapacity: true) }
        if line.isEmpty {
            // Dispatch: an event without data is none (§9.2.6).
            defer {
                data = []
                hasData = false
            }
            guard hasData else { return nil }
            return SSEEvent(id: lastEventID, data: data)
        }
        if line.first == UInt8(ascii: ":") { return nil }
        let colon = line.firstIndex(of: UInt8(ascii: ":")) ?? line.count
        let name = String(decoding: line[..<colon], as: UTF8.self)
        var valueStart = min(colon + 1, line.count)
        if valueStart < line.count, line[valueStart] == UInt8(ascii: " ") { valueStart += 1 }
        let value = line[valueStart...]
        switch name {
        case "data":
            if hasData { data.append(10) }
            guard data.count + value.count <= Self.maxLineBytes else {
                // Kept bounded: a record split over many data lines is cut (and then unreadable).
                return nil
            }
            data += value
            hasData = true
        case "id":
            // An id with NUL is ignored (§9.2.6); one that is not a short token is too: it is echoed
            // back in a header on reconnect.
            if value.count <= 64, value.allSatisfy({ (0x21...0x7E).contains($0) }) {
                lastEventID = String(decoding: value, as: UTF8.self)
            }
        default:
            break  // `event`, `retry` and unknown fields: not used by the view's stream
        }
        return nil
    }
}
