import Foundation
import Testing

@testable import HTTP1Codec

/// Builds ClientHello records field by field (RFC 8446 §4.1.2, RFC 6066 §3), so each row changes
/// one thing.
enum HelloBuilder {
    static func u16(_ value: Int) -> [UInt8] { [UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)] }
    static func vector16(_ bytes: [UInt8]) -> [UInt8] { u16(bytes.count) + bytes }

    static func serverNameExtension(_ entries: [(type: UInt8, name: [UInt8])]) -> [UInt8] {
        let list = entries.flatMap { [$0.type] + vector16($0.name) }
        return u16(0) + vector16(vector16(list))
    }

    static func sni(_ name: String) -> [UInt8] { serverNameExtension([(0, Array(name.utf8))]) }

    /// A hello body with these extensions (nil: no extensions block at all, as TLS 1.2 allows).
    static func body(extensions: [[UInt8]]?, sessionID: [UInt8] = Array(repeating: 7, count: 32)) -> [UInt8] {
        var body: [UInt8] = [0x03, 0x03] + Array(repeating: 0x2A, count: 32)
        body += [UInt8(sessionID.count)] + sessionID
        body += vector16([0x13, 0x01, 0x13, 0x02])
        body += [0x01, 0x00]
        if let extensions { body += vector16(extensions.flatMap { $0 }) }
        return body
    }

    /// The handshake message in records of at most `recordSize` bytes of payload.
    static func records(_ body: [UInt8], recordSize: Int = 16384) -> [UInt8] {
        let message = [0x01, UInt8(body.count >> 16 & 0xFF), UInt8(body.count >> 8 & 0xFF), UInt8(body.count & 0xFF)] + body
        var out: [UInt8] = []
        var offset = 0
        while offset < message.count {
            let chunk = Array(message[offset..<min(message.count, offset + recordSize)])
            out += [0x16, 0x03, 0x01] + u16(chunk.count) + chunk
            offset += chunk.count
        }
        return out
    }

    static func hello(_ extensions: [[UInt8]]?, recordSize: Int = 16384) -> [UInt8] {
        records(body(extensions: extensions), recordSize: recordSize)
    }
}

struct HelloRow: Sendable, CustomTestStringConvertible {
    let name: String
    let bytes: [UInt8]
    let expected: ClientHello.Verdict
    var testDescription: String { name }
}

@Suite("ClientHello: the server name transparent capture reads from the first bytes")
struct ClientHelloTests {
    static func host(_ text: String) -> HTTP1Codec.Host { try! HTTP1Codec.Host.parse(Substring(text)) }
    static let alpn: [UInt8] = HelloBuilder.u16(16) + HelloBuilder.vector16(HelloBuilder.vector16([2] + Array("h2".utf8)))

    static let rows: [HelloRow] = [
        HelloRow(
            name: "a name", bytes: HelloBuilder.hello([HelloBuilder.sni("api.scoped.test")]), expected: .hello(serverName: host("api.scoped.test"))),
        HelloRow(
            name: "a name in capitals is normalized", bytes: HelloBuilder.hello([HelloBuilder.sni("API.Scoped.TEST")]),
            expected: .hello(serverName: host("api.scoped.test"))),
        HelloRow(
            name: "the name after another extension", bytes: HelloBuilder.hello([alpn, HelloBuilder.sni("a.example")]),
            expected: .hello(serverName: host("a.example"))),
        HelloRow(name: "no server_name extension", bytes: HelloBuilder.hello([alpn]), expected: .hello(serverName: nil)),
        HelloRow(name: "no extensions at all (TLS 1.2)", bytes: HelloBuilder.hello(nil), expected: .hello(serverName: nil)),
        HelloRow(
            name: "an IPv4 literal is no name (RFC 6066)", bytes: HelloBuilder.hello([HelloBuilder.sni("10.77.0.1")]),
            expected: .hello(serverName: nil)),
        HelloRow(name: "a trailing dot is no name", bytes: HelloBuilder.hello([HelloBuilder.sni("a.example.")]), expected: .hello(serverName: nil)),
        HelloRow(
            name: "bytes outside the name alphabet are no name", bytes: HelloBuilder.hello([HelloBuilder.sni("a b.example")]),
            expected: .hello(serverName: nil)),
        HelloRow(
            name: "an unknown name type is skipped",
            bytes: HelloBuilder.hello([HelloBuilder.serverNameExtension([(9, Array("x".utf8)), (0, Array("b.example".utf8))])]),
            expected: .hello(serverName: host("b.example"))),
        HelloRow(
            name: "the hello across three records", bytes: HelloBuilder.hello([alpn, HelloBuilder.sni("split.example")], recordSize: 40),
            expected: .hello(serverName: host("split.example"))),
        HelloRow(
            name: "two host_names in one extension",
            bytes: HelloBuilder.hello([HelloBuilder.serverNameExtension([(0, Array("a.example".utf8)), (0, Array("b.example".utf8))])]),
            expected: .malformed("more than one host_name in server_name")),
        HelloRow(
            name: "two server_name extensions", bytes: HelloBuilder.hello([HelloBuilder.sni("a.example"), HelloBuilder.sni("b.example")]),
            expected: .malformed("an extension appears twice")),
        HelloRow(
            name: "an extension longer than its block", bytes: HelloBuilder.hello([HelloBuilder.u16(0) + HelloBuilder.u16(200) + [0, 1]]),
            expected: .malformed("invalid extension")),
        HelloRow(
            name: "a session id over 32 bytes",
            bytes: HelloBuilder.records(HelloBuilder.body(extensions: nil, sessionID: Array(repeating: 1, count: 33))),
            expected: .malformed("invalid session id")),
        HelloRow(
            name: "not a handshake record", bytes: [0x17, 0x03, 0x03, 0x00, 0x05, 1, 2, 3, 4, 5], expected: .malformed("not a TLS handshake record")),
        HelloRow(
            name: "a handshake that is not a ClientHello", bytes: [0x16, 0x03, 0x01, 0x00, 0x04, 0x02, 0x00, 0x00, 0x00],
            expected: .malformed("the first handshake message is not a ClientHello")),
        HelloRow(name: "a record of length zero", bytes: [0x16, 0x03, 0x01, 0x00, 0x00], expected: .malformed("invalid TLS record length")),
        HelloRow(
            name: "a hello announcing more than the bound", bytes: [0x16, 0x03, 0x01, 0x00, 0x04, 0x01, 0x01, 0x00, 0x00],
            expected: .malformed("ClientHello too large")),
    ]

    @Test("each hello's verdict", arguments: rows)
    func verdict(_ row: HelloRow) {
        #expect(ClientHello.read(row.bytes) == row.expected)
    }

    @Test("every proper prefix of a whole hello is incomplete, or already the whole's verdict", arguments: rows)
    func prefixes(_ row: HelloRow) {
        let whole = ClientHello.read(row.bytes)
        for cut in 0..<row.bytes.count {
            let verdict = ClientHello.read(row.bytes[..<cut])
            #expect(verdict == .incomplete || verdict == whole, "cut at \(cut): \(verdict)")
        }
    }

    @Test("a hello Python's ssl module wrote is read, with and without SNI")
    func realHello() throws {
        let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../fuzz/corpus/clienthello")
        let named = try [UInt8](Data(contentsOf: corpus.appendingPathComponent("python-ssl-sni")))
        let unnamed = try [UInt8](Data(contentsOf: corpus.appendingPathComponent("python-ssl-no-sni")))
        #expect(ClientHello.read(named) == .hello(serverName: Self.host("api.scoped.test")))
        #expect(ClientHello.read(unnamed) == .hello(serverName: nil))
    }

    @Test("bytes past the bound are never read: a stream of records that never completes a hello is refused at the bound")
    func bounded() {
        // A hello announcing 16 KiB whose records never finish it: refused once the bound is reached.
        let body = [UInt8](repeating: 0, count: 16 * 1024 - 4)
        let bytes = HelloBuilder.records(body, recordSize: 100)
        #expect(bytes.count > ClientHello.maxBytes)
        #expect(ClientHello.read(bytes.prefix(8000)) == .incomplete)
        #expect(ClientHello.read(bytes) == .malformed("ClientHello too large"))
    }
}

@Suite("ClientHello: a hello that arrives slowly")
struct ClientHelloDripTests {
    /// The engine peeks at the whole prefix each time it wakes, and wakes when `bytesNeeded` have
    /// arrived: a hello dribbled a byte at a time must be read about once per record, not once per
    /// byte (16 KiB a byte at a time would be 16 Ki reads of up to 16 KiB each).
    @Test("a hello sent a byte at a time is read once per record, and read the same as whole")
    func readOncePerRecord() {
        let padding = HelloBuilder.u16(21) + HelloBuilder.vector16(Array(repeating: 0, count: 12_000))
        for recordSize in [16384, 4096, 500] {
            let hello = HelloBuilder.hello([HelloBuilder.sni("api.scoped.test"), padding], recordSize: recordSize)
            let records = (hello.count + recordSize) / (recordSize + 5) + 1
            var wanted = 1, reads = 0
            var verdict = ClientHello.Verdict.incomplete
            for end in 1...hello.count where end >= wanted {
                reads += 1
                verdict = ClientHello.read(hello[..<end])
                guard verdict == .incomplete else { break }
                wanted = ClientHello.bytesNeeded(hello[..<end])
                #expect(wanted > end)
            }
            #expect(verdict == ClientHello.read(hello))
            #expect(verdict == .hello(serverName: ClientHelloTests.host("api.scoped.test")))
            #expect(reads <= 2 * records + 2, "\(reads) reads of a \(hello.count)-byte hello in \(records) records")
        }
    }

    @Test("what is needed never passes what a verdict needs: a malformed or oversized start is read at once")
    func neededNeverOvershoots() {
        let hello = HelloBuilder.hello([HelloBuilder.sni("api.scoped.test")], recordSize: 40)
        for end in 1..<hello.count where ClientHello.read(hello[..<end]) == .incomplete {
            // One byte more than needed is never a different verdict than exactly what is needed.
            let needed = ClientHello.bytesNeeded(hello[..<end])
            #expect(needed <= hello.count)
            if needed > end + 1 { #expect(ClientHello.read(hello[..<(needed - 1)]) == .incomplete) }
        }
        // A header announcing a record past the limit: needed stays within the limit (read says malformed there).
        let huge: [UInt8] = [0x16, 0x03, 0x01, 0x40, 0x00]
        #expect(ClientHello.bytesNeeded(huge) <= ClientHello.maxBytes)
    }
}
