import Testing

@testable import HTTP1Codec

@Suite("A TLS handshake where an HTTP head was expected")
struct TLSRecordTests {
    /// The start of a real ClientHello record: handshake (0x16), record version 3.1, length, then
    /// the handshake header. It holds no CRLF: without its own verdict it would wait for the head's end.
    static let clientHello: [UInt8] = [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC, 0x03, 0x03] + [UInt8](repeating: 0x2A, count: 32)

    @Test("0x16 0x03 as a head's first bytes is a TLS handshake, however the bytes arrive, after empty lines too")
    func clientHelloIsNamed() {
        for input in [Self.clientHello, Array("\r\n".utf8) + Self.clientHello, [0x16, 0x03]] {
            let (whole, mismatches) = verifyHeadSplits(input, kind: .request)
            #expect(whole == .failure(.tlsHandshake))
            #expect(mismatches == 0)
        }
    }

    @Test("0x16 alone waits for the next byte; 0x16 before another byte, or later in a head, is left to the parser")
    func onlyARecordStart() {
        #expect(feedHead([[0x16]], kind: .request) == .incomplete)
        #expect(feedHead([[0x16, 0x41] + Array(" / HTTP/1.1\r\n\r\n".utf8)], kind: .request) != .failure(.tlsHandshake))
        #expect(feedHead([Array("GET /\u{16}\u{03} HTTP/1.1\r\n\r\n".utf8)], kind: .request) != .failure(.tlsHandshake))
        #expect(feedHead([Array("GET / HTTP/1.1\r\nHost: a\r\n\r\n".utf8)], kind: .request) != .failure(.tlsHandshake))
    }
}
