/// The server name a TLS ClientHello asks for (RFC 6066 §3), read from the first bytes a client sent,
/// without consuming them: transparent capture (docs/transparent.md) peeks at them and decides,
/// from this name, whether the connection is intercepted or tunnelled; the bytes themselves then go
/// to the handshake or to the origin untouched.
///
/// Bounded: a hello is read only from its first `maxBytes` bytes (records included), so a client
/// cannot make the proxy hold more than that per connection before it decides.
public enum ClientHello {
    /// What the first bytes of a connection say.
    public enum Verdict: Sendable, Equatable {
        /// Not enough bytes yet to decide (and fewer than `maxBytes`).
        case incomplete
        /// A ClientHello, whole; its `host_name` when it sent one that is a valid DNS name (RFC 6066
        /// allows only names there: an address literal, or bytes no resolver would take, count as none).
        case hello(serverName: Host?)
        /// Not a TLS ClientHello, or one that breaks its own lengths, or larger than `maxBytes`;
        /// the reason is a fixed phrase (never the client's bytes).
        case malformed(String)
    }

    /// A ClientHello with every extension a browser sends (post-quantum key shares included) is
    /// under 2 KiB; 16 KiB is one full TLS record.
    public static let maxBytes = 16 * 1024 + 5

    /// Reads the record layer (the hello may span several handshake records) and then the hello.
    public static func read(_ bytes: some Collection<UInt8>) -> Verdict {
        let bytes = Array(bytes.prefix(maxBytes))
        // The handshake message reassembled from the records' payloads.
        var message: [UInt8] = []
        var offset = 0
        while true {
            guard bytes.count >= offset + 5 else { return bytes.count >= maxBytes ? .malformed("ClientHello too large") : .incomplete }
            guard bytes[offset] == 0x16 else { return .malformed("not a TLS handshake record") }
            guard bytes[offset + 1] == 0x03 else { return .malformed("not a TLS record version") }
            let length = Int(bytes[offset + 3]) << 8 | Int(bytes[offset + 4])
            guard length > 0, length <= 16 * 1024 else { return .malformed("invalid TLS record length") }
            let end = offset + 5 + length
            guard bytes.count >= end else {
                return end > maxBytes ? .malformed("ClientHello too large") : .incomplete
            }
            message += bytes[(offset + 5)..<end]
            offset = end
            guard message.count >= 4 else { continue }
            guard message[0] == 0x01 else { return .malformed("the first handshake message is not a ClientHello") }
            let bodyLength = Int(message[1]) << 16 | Int(message[2]) << 8 | Int(message[3])
            guard 4 + bodyLength <= maxBytes else { return .malformed("ClientHello too large") }
            guard message.count >= 4 + bodyLength else { continue }
            return parseBody(message[4..<(4 + bodyLength)])
        }
    }

    /// How long the prefix must grow before `read` can say anything new of it (an `.incomplete`
    /// prefix): the engine waits for that many bytes (the socket's receive low-watermark) instead of
    /// reading the hello again on every byte a slow client sends.
    /// That is the end of the record under way, or the next record's header: a client that splits
    /// its hello into tiny records gets a read per record, and a record is at least 6 bytes.
    public static func bytesNeeded(_ bytes: some Collection<UInt8>) -> Int {
        let bytes = Array(bytes.prefix(maxBytes))
        var offset = 0
        while bytes.count >= offset + 5 {
            let end = offset + 5 + (Int(bytes[offset + 3]) << 8 | Int(bytes[offset + 4]))
            if end > bytes.count { return min(end, maxBytes) }
            offset = end
        }
        return min(max(offset + 5, bytes.count + 1), maxBytes)
    }

    /// RFC 8446 §4.1.2 (and TLS 1.2's, which has the same layout up to the extensions).
    static func parseBody(_ body: ArraySlice<UInt8>) -> Verdict {
        var reader = ByteReader(body)
        guard reader.skip(2 + 32) else { return .malformed("ClientHello cut short") }  // legacy_version, random
        guard let sessionID = reader.vector(lengthBytes: 1), sessionID.count <= 32 else { return .malformed("invalid session id") }
        guard let suites = reader.vector(lengthBytes: 2), suites.count >= 2, suites.count % 2 == 0 else {
            return .malformed("invalid cipher suites")
        }
        guard let compression = reader.vector(lengthBytes: 1), !compression.isEmpty else { return .malformed("invalid compression methods") }
        // TLS 1.2 allows a hello without extensions (and so without a name).
        if reader.isAtEnd { return .hello(serverName: nil) }
        guard let extensions = reader.vector(lengthBytes: 2), reader.isAtEnd else { return .malformed("invalid extensions") }
        var list = ByteReader(extensions)
        var serverName: Host?
        var seenServerName = false
        var seenTypes: Set<UInt16> = []
        while !list.isAtEnd {
            guard let type = list.uint16(), let data = list.vector(lengthBytes: 2) else { return .malformed("invalid extension") }
            // RFC 8446 §4.2: one extension of a type; two server_name extensions could be read
            // first-wins here and last-wins by the origin.
            guard seenTypes.insert(type).inserted else { return .malformed("an extension appears twice") }
            guard type == 0 else { continue }
            seenServerName = true
            switch parseServerName(data) {
            case .success(let name): serverName = name
            case .failure(let failure): return .malformed(failure.reason)
            }
        }
        return .hello(serverName: seenServerName ? serverName : nil)
    }

    struct Failure: Error {
        let reason: String
    }

    /// RFC 6066 §3: a list of (type, name); at most one `host_name` (type 0). A name that is not a
    /// valid DNS name (an address literal, a trailing dot, bytes outside the name alphabet) is no
    /// name: the connection is then treated as one without SNI.
    static func parseServerName(_ data: ArraySlice<UInt8>) -> Result<Host?, Failure> {
        var reader = ByteReader(data)
        guard let list = reader.vector(lengthBytes: 2), reader.isAtEnd, !list.isEmpty else {
            return .failure(Failure(reason: "invalid server_name extension"))
        }
        var entries = ByteReader(list)
        var name: Host?
        var seenHostName = false
        while !entries.isAtEnd {
            guard let type = entries.byte(), let value = entries.vector(lengthBytes: 2), !value.isEmpty else {
                return .failure(Failure(reason: "invalid server_name entry"))
            }
            guard type == 0 else { continue }
            guard !seenHostName else { return .failure(Failure(reason: "more than one host_name in server_name")) }
            seenHostName = true
            guard value.last != UInt8(ascii: "."), let host = try? Host.parse(value), host.kind == .name else { continue }
            name = host
        }
        return .success(name)
    }
}

/// Reads big-endian integers and length-prefixed vectors off a byte slice, never past its end.
struct ByteReader {
    private var bytes: ArraySlice<UInt8>

    init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
    }

    var isAtEnd: Bool { bytes.isEmpty }

    mutating func skip(_ count: Int) -> Bool {
        guard bytes.count >= count else { return false }
        bytes = bytes.dropFirst(count)
        return true
    }

    mutating func byte() -> UInt8? {
        guard let first = bytes.first else { return nil }
        bytes = bytes.dropFirst()
        return first
    }

    mutating func uint16() -> UInt16? {
        guard bytes.count >= 2 else { return nil }
        let value = UInt16(bytes[bytes.startIndex]) << 8 | UInt16(bytes[bytes.startIndex + 1])
        bytes = bytes.dropFirst(2)
        return value
    }

    /// A vector whose length is the next `lengthBytes` bytes (1 or 2).
    mutating func vector(lengthBytes: Int) -> ArraySlice<UInt8>? {
        var length = 0
        for _ in 0..<lengthBytes {
            guard let next = byte() else { return nil }
            length = length << 8 | Int(next)
        }
        guard bytes.count >= length else { return nil }
        let vector = bytes.prefix(length)
        bytes = bytes.dropFirst(length)
        return vector
    }
}
