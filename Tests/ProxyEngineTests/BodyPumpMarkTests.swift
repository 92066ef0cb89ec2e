import CLibevent
import HTTP1Codec
import Testing

@testable import ProxyEngine

/// The pumps' half of every memory bound (docs/http2.md, "Memory"): one run takes at most the room
/// under its mark, whatever the source holds, so a destination's size is the mark's business, not
/// the source's (a run once moved a whole read-ahead past it).
@Suite("BodyPump: one run never fills its destination past the mark")
struct BodyPumpMarkTests {
    @Test(
        "content-length, close-delimited and chunked bodies, marks from 1 byte to 64 KiB, destinations empty or part full: at most the mark after a run (and one chunk's framing when re-framing)",
        arguments: [BodyFraming.contentLength(300_000), .untilClose, .chunked])
    func destinationStaysUnderTheMark(_ framing: BodyFraming) throws {
        let body = [UInt8](repeating: 0x61, count: 300_000)
        for mark in [1, 100, 4096, 65_536] {
            for prefill in Set([0, mark / 2, mark - 1]) {
                let source = evbuffer_new()!
                let destination = evbuffer_new()!
                defer {
                    evbuffer_free(source)
                    evbuffer_free(destination)
                }
                if framing == .chunked {
                    for start in stride(from: 0, to: body.count, by: 70_000) {
                        let piece = Array(body[start..<min(body.count, start + 70_000)])
                        EventBuffer.append(source, Array((String(piece.count, radix: 16) + "\r\n").utf8) + piece + [13, 10])
                    }
                    EventBuffer.append(source, Array("0\r\n\r\n".utf8))
                } else {
                    EventBuffer.append(source, body)
                }
                EventBuffer.append(destination, [UInt8](repeating: 0x62, count: prefill))
                var pump = BodyPump(inbound: framing, outbound: framing)
                _ = try pump.pump(from: source, to: destination, highWatermark: mark)
                // A re-framed run adds a chunk header and its CRLF (and the last chunk) to what it moved.
                let framingSlack = framing == .chunked ? 16 : 0
                #expect(
                    EventBuffer.length(destination) <= mark + framingSlack,
                    "\(framing), mark \(mark), \(prefill) already there: \(EventBuffer.length(destination))")
                #expect(EventBuffer.length(destination) > prefill, "the run moved something")
            }
        }
    }
}
