import CNGHTTP2
import HTTP1Codec
import ProxyCore

/// A header block going out, laid out once so the nghttp2_nv array can point into it for the
/// duration of one submit call (nghttp2 copies the fields before the call returns).
///
/// Holds by construction, whatever the caller passes: names are lowercase (RFC 9113 §8.2.1),
/// pseudo-header fields come first (§8.3), connection-specific fields are not sent (§8.2.2: an
/// intermediary removes them; `te` only as `trailers`), and credential-bearing fields are never
/// added to the HPACK dynamic table (RFC 7541 §7.1.3: a compression oracle cannot probe them).
struct H2OutgoingFields {
    /// Every name and value, back to back: the nghttp2_nv array points into this one buffer.
    private var storage: [UInt8] = []
    private var entries: [Entry] = []

    private struct Entry {
        var nameStart: Int
        var nameLength: Int
        var valueLength: Int
        var sensitive: Bool
    }

    /// Fields that end a message's connection-level framing in HTTP/1.1 and mean nothing (or harm)
    /// in HTTP/2.
    static let connectionSpecificNames: Set<String> = ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"]
    /// Fields whose values are credentials or session state: never HPACK-indexed.
    static let credentialNames: Set<String> = ["authorization", "proxy-authorization", "cookie", "set-cookie"]

    init(status: Int?, fields: [(name: String, value: String)], neverIndexed: Set<String> = credentialNames) {
        entries.reserveCapacity(fields.count + 1)
        storage.reserveCapacity(fields.reduce(16) { $0 + $1.name.utf8.count + $1.value.utf8.count })
        if let status { append(name: ":status", value: String(status), neverIndexed: neverIndexed) }
        // Two passes rather than a sorted copy: pseudo-header fields first (a response's :status
        // is ours, so a response's own are dropped), then the regular ones in their order.
        if status == nil {
            for (name, value) in fields where name.utf8.first == UInt8(ascii: ":") {
                append(name: lowercasedFieldName(name), value: value, neverIndexed: neverIndexed)
            }
        }
        for (name, value) in fields where name.utf8.first != UInt8(ascii: ":") {
            let lowercase = lowercasedFieldName(name)
            if Self.connectionSpecificNames.contains(lowercase) { continue }
            if lowercase == "te", value.lowercased() != "trailers" { continue }
            append(name: lowercase, value: value, neverIndexed: neverIndexed)
        }
    }

    var count: Int { entries.count }

    private mutating func append(name: String, value: String, neverIndexed: Set<String>) {
        let nameStart = storage.count
        storage.append(contentsOf: name.utf8)
        let valueStart = storage.count
        HTTPField.appendWireBytes(of: value, to: &storage)
        entries.append(
            Entry(
                nameStart: nameStart, nameLength: valueStart - nameStart, valueLength: storage.count - valueStart,
                sensitive: neverIndexed.contains(name)))
    }

    func withNameValues<R>(_ body: (UnsafePointer<nghttp2_nv>?, Int) -> R) -> R {
        var bytes = storage
        bytes.append(0)  // never empty: every nv points into one live buffer, even for empty strings
        return bytes.withUnsafeMutableBufferPointer { buffer in
            guard let base = buffer.baseAddress else { return body(nil, 0) }
            return withUnsafeTemporaryAllocation(of: nghttp2_nv.self, capacity: max(1, entries.count)) { nva in
                for (index, entry) in entries.enumerated() {
                    nva[index] = nghttp2_nv(
                        name: base + entry.nameStart, value: base + entry.nameStart + entry.nameLength,
                        namelen: entry.nameLength, valuelen: entry.valueLength,
                        flags: entry.sensitive ? sp_nghttp2_nv_flag_no_index() : sp_nghttp2_nv_flag_none())
                }
                return body(UnsafePointer(nva.baseAddress), entries.count)
            }
        }
    }
}

/// ASCII lowercase of a field name (names are tokens; anything else is left as it is).
func lowercasedFieldName(_ name: String) -> String {
    HTTPField(name: name, value: "").lowercasedName
}

/// The header block being decoded, with the header list limit applied while it grows.
struct H2HeaderBlock {
    let stream: Int32
    let isRequest: Bool
    var fields: [H2HeaderField] = []
    /// RFC 9113 §6.5.2 size so far: name + value + 32 per field.
    var listSize = 0
    /// Over the limit: nothing more is kept or counted; the stream is being reset.
    var rejected = false
}

/// Log text for a stream nghttp2 rejected: fixed words and at most a field name (printable ASCII,
/// cut short), never a value.
enum H2Rejection {
    static let maxNameInReason = 64

    /// From nghttp2's error message for an invalid received field ("... stream: 1, name: [X],
    /// value: [...]"): the stream and why, or nil if the text is not in that form.
    static func fieldRejection(message: String) -> (stream: Int32, reason: String)? {
        let text = Array(message.utf8)
        guard let streamStart = find(Array("stream: ".utf8), in: text, from: 0),
            let nameStart = find(Array("name: [".utf8), in: text, from: streamStart)
        else { return nil }
        let digits = text[streamStart...].prefix { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
        guard let stream = Int32(String(decoding: digits, as: UTF8.self)) else { return nil }
        // The value follows the name: the name is what precedes the first "], value: [".
        guard let nameEnd = find(Array("], value: [".utf8), in: text, from: nameStart) else { return nil }
        let name = text[nameStart..<(nameEnd - "], value: [".utf8.count)]
        return (stream, reason(forInvalidFieldNamed: String(decoding: name, as: UTF8.self)))
    }

    /// The index just past the first `needle` in `text` at or after `start`.
    private static func find(_ needle: [UInt8], in text: [UInt8], from start: Int) -> Int? {
        guard !needle.isEmpty, text.count >= needle.count, start <= text.count - needle.count else { return nil }
        for index in start...(text.count - needle.count) where text[index..<(index + needle.count)].elementsEqual(needle) {
            return index + needle.count
        }
        return nil
    }

    /// Why a field name makes a stream malformed (RFC 9113 §8.2.1, §8.2.2, §8.3).
    static func reason(forInvalidFieldNamed name: String) -> String {
        let shown = printable(name)
        let lowercase = lowercasedFieldName(name)
        if name.hasPrefix(":") { return "malformed: invalid pseudo-header field '\(shown)'" }
        if lowercase != name { return "malformed: uppercase header field name '\(shown)'" }
        if H2OutgoingFields.connectionSpecificNames.contains(name) { return "malformed: connection-specific header field '\(shown)'" }
        if name == "te" { return "malformed: te other than trailers" }
        if name == "host" || name == "content-length" { return "malformed: invalid '\(shown)' field" }
        return "malformed: invalid header field '\(shown)'"
    }

    /// Fixed text for an nghttp2 error code on a received frame.
    static func reason(libraryCode: Int32, frameType: UInt8) -> String {
        let frame = frameName(frameType)
        switch libraryCode {
        case NGHTTP2_ERR_HTTP_HEADER.rawValue: return "malformed: invalid header field in \(frame)"
        case NGHTTP2_ERR_HTTP_MESSAGING.rawValue: return "malformed: HTTP messaging rule broken in \(frame) (pseudo-header fields, content-length)"
        case NGHTTP2_ERR_REFUSED_STREAM.rawValue: return "refused: over the concurrent stream limit"
        default: return "\(frame): \(String(cString: nghttp2_strerror(libraryCode)))"
        }
    }

    static func frameName(_ type: UInt8) -> String {
        switch H2FrameType(rawValue: type) {
        case .data: "DATA"
        case .headers: "HEADERS"
        case .priority: "PRIORITY"
        case .rstStream: "RST_STREAM"
        case .settings: "SETTINGS"
        case .pushPromise: "PUSH_PROMISE"
        case .ping: "PING"
        case .goAway: "GOAWAY"
        case .windowUpdate: "WINDOW_UPDATE"
        case .continuation: "CONTINUATION"
        default: "frame type \(type)"
        }
    }

    /// RFC 9113 §7 error code names, for the log.
    static func errorCodeName(_ code: UInt32) -> String {
        let names = [
            "NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT", "STREAM_CLOSED", "FRAME_SIZE_ERROR",
            "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED",
        ]
        return code < names.count ? names[Int(code)] : "error code \(code)"
    }

    static func printable(_ text: String, limit: Int = maxNameInReason) -> String {
        var shown = ""
        for scalar in text.unicodeScalars.prefix(limit) {
            shown.unicodeScalars.append((0x20...0x7E).contains(scalar.value) && scalar != "'" ? scalar : "?")
        }
        return text.unicodeScalars.count > limit ? shown + "..." : shown
    }
}
