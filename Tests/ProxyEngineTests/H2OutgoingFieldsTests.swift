import CNGHTTP2
import Testing

@testable import ProxyEngine

/// What an outgoing header block holds by construction, whatever the caller passes (RFC 9113
/// §8.2.1, §8.2.2, §8.3; RFC 7541 §7.1.3), read back from the nghttp2_nv array nghttp2 is given.
@Suite("HTTP/2 outgoing header blocks: lowercase, pseudo-header fields first, no connection fields, credentials never indexed")
struct H2OutgoingFieldsTests {
    private func laidOut(_ block: H2OutgoingFields) -> [(name: String, value: String, noIndex: Bool)] {
        block.withNameValues { nva, count in
            (0..<count).map { index in
                let nv = nva![index]
                return (
                    String(decoding: UnsafeBufferPointer(start: nv.name, count: nv.namelen), as: UTF8.self),
                    String(decoding: UnsafeBufferPointer(start: nv.value, count: nv.valuelen), as: UTF8.self),
                    nv.flags & UInt8(NGHTTP2_NV_FLAG_NO_INDEX.rawValue) != 0
                )
            }
        }
    }

    @Test(
        "a request: pseudo-header fields move first in their order, names lowercased, connection-specific fields and a te other than trailers dropped"
    )
    func request() {
        let block = H2OutgoingFields(
            status: nil,
            fields: [
                ("Accept", "*/*"), (":method", "GET"), ("Connection", "keep-alive"), (":path", "/a"), ("TE", "gzip"),
                ("Transfer-Encoding", "chunked"), ("Authorization", "Bearer x"), ("Upgrade", "h2c"), ("Keep-Alive", "5"),
                ("Proxy-Connection", "close"), (":authority", "example.test"), ("Cookie", "a=b"), ("X-Empty", ""),
            ])
        let fields = laidOut(block)
        #expect(fields.map(\.name) == [":method", ":path", ":authority", "accept", "authorization", "cookie", "x-empty"])
        #expect(fields.map(\.value) == ["GET", "/a", "example.test", "*/*", "Bearer x", "a=b", ""])
        #expect(fields.map(\.noIndex) == [false, false, false, false, true, true, false], "credentials never enter the HPACK table")
        #expect(block.count == 7)
    }

    @Test("a response: :status first and only ours, te: trailers kept, set-cookie never indexed, a Latin-1 value keeps its bytes")
    func response() {
        let block = H2OutgoingFields(
            status: 204, fields: [(":status", "500"), ("Set-Cookie", "s=1"), ("te", "Trailers"), ("X-Latin", "caf\u{E9}")])
        let fields = laidOut(block)
        #expect(fields.map(\.name) == [":status", "set-cookie", "te", "x-latin"])
        #expect(fields[0].value == "204")
        #expect(fields.map(\.noIndex) == [false, true, false, false])
        let latin = block.withNameValues { nva, _ in Array(UnsafeBufferPointer(start: nva![3].value, count: nva![3].valuelen)) }
        #expect(latin == [0x63, 0x61, 0x66, 0xE9], "one byte per Latin-1 character, as on an HTTP/1.1 wire")
    }

    @Test("an empty block still hands nghttp2 a live pointer")
    func empty() {
        let block = H2OutgoingFields(status: nil, fields: [])
        #expect(block.count == 0)
        #expect(block.withNameValues { _, count in count } == 0)
    }
}
