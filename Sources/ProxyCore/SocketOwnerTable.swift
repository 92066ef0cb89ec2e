import ScopePolicy

/// Finds who owns a loopback client's socket in the text of `/proc/net/tcp` or `/proc/net/tcp6`
/// (what `ss -tp` reads). Both ends of a loopback connection are sockets of this host: the proxy's
/// accepted one (local = the proxy's address) and the client's (local = the client's address,
/// remote = the proxy's). The client's row carries the uid of the process that created it.
///
/// The kernel prints each address as the raw 32-bit words of `struct in_addr`/`in6_addr` in host
/// byte order (`%08X` per word): on a little-endian machine 127.0.0.1 is `0100007F`, and ::1 is
/// `00000000000000000000000001000000`; ports are plain big-endian hex (`1F90` = 8080).
///
/// Where this cannot work, and fails closed (`SocketOwner.unknown`): a client in another network
/// namespace (a container with its own network: its sockets are not in this namespace's table),
/// a client behind a relay on this host (docker-proxy, `ssh -L`, socat: the uid is the relay's, so
/// do not give a relay's uid a client entry), non-Linux systems (no /proc/net/tcp), and a client
/// that closed before the lookup.
public enum SocketOwnerTable {
    public struct Endpoint: Sendable, Equatable {
        public var address: IPAddress
        public var port: UInt16

        public init(address: IPAddress, port: UInt16) {
            self.address = address
            self.port = port
        }
    }

    /// The uid of the socket whose local end is `client` and remote end is `server`, from one or
    /// more table texts; nil when no row matches, or rows disagree (fail closed).
    public static func owner(client: Endpoint, server: Endpoint, tables: [String], littleEndian: Bool = hostIsLittleEndian) -> UInt32? {
        var found: UInt32?
        for table in tables {
            for line in table.split(separator: "\n").dropFirst() {
                guard let row = parseRow(line, littleEndian: littleEndian), row.local == client, row.remote == server else { continue }
                if let earlier = found, earlier != row.uid { return nil }
                found = row.uid
            }
        }
        return found
    }

    struct Row: Equatable {
        var local: Endpoint
        var remote: Endpoint
        var uid: UInt32
    }

    /// `  0: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000  0 12345 ...`
    static func parseRow(_ line: Substring, littleEndian: Bool) -> Row? {
        let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
        // sl, local, remote, st, tx:rx, tr:when, retrnsmt, uid, ...
        guard fields.count >= 8, fields[0].hasSuffix(":"),
              let local = endpoint(fields[1], littleEndian: littleEndian),
              let remote = endpoint(fields[2], littleEndian: littleEndian),
              fields[7].utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let uid = UInt32(fields[7]) else { return nil }
        return Row(local: local, remote: remote, uid: uid)
    }

    static func endpoint(_ text: Substring, littleEndian: Bool) -> Endpoint? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[1].utf8.count == 4, let port = UInt16(parts[1], radix: 16),
              parts[0].utf8.count == 8 || parts[0].utf8.count == 32 else { return nil }
        var bytes: [UInt8] = []
        var words = parts[0][...]
        while !words.isEmpty {
            guard let word = UInt32(words.prefix(8), radix: 16), words.prefix(8).utf8.allSatisfy(\.isHexDigitASCII) else { return nil }
            words = words.dropFirst(8)
            // The word holds the address bytes in memory order, read as a host integer.
            let memory = littleEndian ? word.byteSwapped : word
            bytes += [UInt8(memory >> 24), UInt8(memory >> 16 & 0xFF), UInt8(memory >> 8 & 0xFF), UInt8(memory & 0xFF)]
        }
        guard let address = IPAddress(raw: bytes) else { return nil }
        return Endpoint(address: address, port: port)
    }

    public static let hostIsLittleEndian = UInt16(1).littleEndian == 1
}

extension UInt8 {
    var isHexDigitASCII: Bool {
        (self >= 0x30 && self <= 0x39) || (self >= 0x41 && self <= 0x46) || (self >= 0x61 && self <= 0x66)
    }
}
