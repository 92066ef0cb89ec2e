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
///
/// A closed client's socket must never lend an owner: once closed it is an orphan (inode 0) or a
/// TIME_WAIT entry, for which the kernel prints uid 0, so a local user who connects, writes and
/// closes before the proxy accepts (easy while `max_connections` holds accepting back) would read
/// as root. Only rows in a state a live client socket can be in, with an inode, count
/// (`liveOwner`); the sock_diag question asks only those states too.
public enum SocketOwnerTable {
    public struct Endpoint: Sendable, Hashable {
        public var address: IPAddress
        public var port: UInt16

        public init(address: IPAddress, port: UInt16) {
            self.address = address
            self.port = port
        }
    }

    /// TCP states (numbered as in the kernel's `include/net/tcp_states.h`) a client's socket can be
    /// in while its process still holds it, when the proxy has not closed its end yet: connected,
    /// or the client shut down its writing side (FIN_WAIT1, FIN_WAIT2). TIME_WAIT, CLOSE and the
    /// rest belong to no live client.
    public static let liveClientStates: [UInt8] = [1, 4, 5]

    /// `liveClientStates` as the `idiag_states` bit mask of a sock_diag request.
    public static var liveClientStateMask: UInt32 { liveClientStates.reduce(0) { $0 | 1 << UInt32($1) } }

    /// The owner a socket's entry vouches for: its uid only when the entry is a live socket that a
    /// process holds (a live state and an inode); nil otherwise: owner unknown, never uid 0.
    public static func liveOwner(state: UInt8, inode: UInt64, uid: UInt32) -> UInt32? {
        guard liveClientStates.contains(state), inode != 0 else { return nil }
        return uid
    }

    /// The uid of the socket whose local end is `client` and remote end is `server`, from one or
    /// more table texts; nil when no live row matches (`liveOwner`), or rows disagree (fail closed).
    public static func owner(client: Endpoint, server: Endpoint, tables: [String], littleEndian: Bool = hostIsLittleEndian) -> UInt32? {
        var found: UInt32?
        for table in tables {
            for line in table.split(separator: "\n").dropFirst() {
                guard let row = parseRow(line, littleEndian: littleEndian), row.local == client, row.remote == server,
                    let uid = liveOwner(state: row.state, inode: row.inode, uid: row.uid)
                else { continue }
                if let earlier = found, earlier != uid { return nil }
                found = uid
            }
        }
        return found
    }

    struct Row: Equatable {
        var local: Endpoint
        var remote: Endpoint
        var state: UInt8
        var uid: UInt32
        var inode: UInt64
    }

    /// `  0: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000  0 12345 ...`
    static func parseRow(_ line: Substring, littleEndian: Bool) -> Row? {
        let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
        // sl, local, remote, st, tx:rx, tr:when, retrnsmt, uid, timeout, inode, ...
        guard fields.count >= 10, fields[0].hasSuffix(":"),
            let local = endpoint(fields[1], littleEndian: littleEndian),
            let remote = endpoint(fields[2], littleEndian: littleEndian),
            fields[3].utf8.count == 2, fields[3].utf8.allSatisfy(\.isHexDigitASCII), let state = UInt8(fields[3], radix: 16),
            let uid = decimal(fields[7]).flatMap(UInt32.init(exactly:)),
            let inode = decimal(fields[9])
        else { return nil }
        return Row(local: local, remote: remote, state: state, uid: uid, inode: inode)
    }

    /// Digits only (Swift's `UInt64("+1")` would take a sign).
    static func decimal(_ text: Substring) -> UInt64? {
        guard text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return UInt64(text)
    }

    static func endpoint(_ text: Substring, littleEndian: Bool) -> Endpoint? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[1].utf8.count == 4, let port = UInt16(parts[1], radix: 16),
            parts[0].utf8.count == 8 || parts[0].utf8.count == 32
        else { return nil }
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
