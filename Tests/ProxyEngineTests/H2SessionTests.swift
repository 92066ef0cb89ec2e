import CLibevent
import ProxyCore
import Testing

@testable import ProxyEngine

// H2Session, the nghttp2 glue: a client-role and a server-role session back to back in memory, and
// a server fed raw frames for what a well-behaved client never sends. No sockets, no clocks.

private let cancel: UInt32 = 0x8
private let protocolError: UInt32 = 0x1
private let enhanceYourCalm: UInt32 = 0xB

private func field(_ name: String, _ value: String) -> H2HeaderField { H2HeaderField(name: name, value: value) }

private func pattern(_ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) } }

@Suite("H2Session")
struct H2SessionTests {
    @Test func getWithEndStreamReachesTheServerAsOneRequestBlockAndTheResponseComesBack() {
        let pair = H2Pair()
        let stream = pair.request("/items?id=7", extra: [field("accept", "text/plain")])
        pair.pump()

        #expect(
            pair.serverEvents.events.prefix(2) == [
                .headers(
                    stream: stream,
                    fields: [
                        field(":method", "GET"), field(":scheme", "https"), field(":authority", "origin.test"), field(":path", "/items?id=7"),
                        field("accept", "text/plain"),
                    ],
                    endStream: true, kind: .request),
                .ended(stream),
            ])
        #expect(pair.server.streamCount == 1)

        pair.serverEvents.outgoing[stream] = .init(bytes: Array("hello".utf8))
        // Names go out lowercase; connection-specific fields are not HTTP/2 fields at all.
        #expect(
            pair.server.submitResponse(
                stream: stream, status: 200,
                fields: [field("Content-Type", "text/plain"), field("Connection", "close"), field("Transfer-Encoding", "chunked")], hasBody: true))
        pair.pump()

        #expect(pair.clientEvents.headerBlocks.map(\.kind) == [.response])
        #expect(pair.clientEvents.headerBlocks.first?.fields == [field(":status", "200"), field("content-type", "text/plain")])
        #expect(pair.clientEvents.received[stream] == Array("hello".utf8))
        #expect(pair.clientEvents.events.suffix(2) == [.ended(stream), .closed(stream, code: 0)])
        #expect(pair.serverEvents.events.last == .closed(stream, code: 0))
        #expect(pair.server.streamCount == 0 && pair.client.streamCount == 0)
        #expect(pair.serverEvents.rejections.isEmpty && pair.clientEvents.rejections.isEmpty)
        #expect(pair.clientFailures.isEmpty && pair.serverFailures.isEmpty)
    }

    @Test func fieldValuesKeepEveryByteBothWays() {
        // obs-text (0x80-0xFF) is legal in a value (RFC 9113 §8.2.1): one scalar per byte, as the
        // HTTP/1.1 parser builds values, so a relayed value is the same bytes on both legs.
        let server = H2RawServer()
        let block = H2Wire.requestBlock() + H2Wire.literal("x-latin", bytes: [0x63, 0xE9, 0xFF])
        #expect(server.feed(H2Wire.clientStart + H2Wire.frame(.headers, flags: H2Wire.endStream | H2Wire.endHeaders, stream: 1, block)) == nil)
        #expect(server.events.headerBlocks.first?.fields.last == field("x-latin", "c\u{E9}\u{FF}"))

        let pair = H2Pair()
        let stream = pair.request("/")
        pair.pump()
        #expect(pair.client.remoteMaxConcurrentStreams == 100)
        pair.server.submitResponse(stream: stream, status: 200, fields: [field("x-latin", "c\u{E9}\u{FF}")], hasBody: false)
        pair.pump()
        #expect(pair.clientEvents.headerBlocks.first?.fields.last == field("x-latin", "c\u{E9}\u{FF}"))
    }

    /// The HEADERS payload sizes of two identical requests carrying `name`, as a client session writes them.
    private func repeatedBlockSizes(carrying name: String, settings: H2Session.Settings = .init()) -> [Int] {
        let client = H2Session(role: .client, settings: settings)
        let output = evbuffer_new()!
        defer { evbuffer_free(output) }
        let fields = [
            field(":method", "GET"), field(":scheme", "https"), field(":authority", "origin.test"), field(":path", "/"),
            field(name, "Bearer h2canary-0123456789abcdef0123456789abcdef"),
        ]
        _ = client.submitRequest(fields: fields, hasBody: false)
        _ = client.submitRequest(fields: fields, hasBody: false)
        client.send(to: output, highWatermark: 1 << 20)
        let count = evbuffer_get_length(output)
        var bytes = [UInt8](repeating: 0, count: count)
        bytes.withUnsafeMutableBytes { _ = evbuffer_remove(output, $0.baseAddress, count) }
        return H2Wire.parse(Array(bytes.dropFirst(H2Wire.preface.count))).filter { $0.type == .headers }.map(\.payload.count)
    }

    @Test func credentialFieldsAreNeverAddedToTheHPACKTable() {
        // An ordinary field is indexed: the second request refers to it in a byte or two.
        let ordinary = repeatedBlockSizes(carrying: "x-trace")
        #expect(ordinary.count == 2 && ordinary[1] < ordinary[0] - 20)
        // A credential goes out literally every time (RFC 7541 §7.1.3: no compression oracle).
        for name in ["authorization", "Proxy-Authorization", "cookie"] {
            let sizes = repeatedBlockSizes(carrying: name)
            // The second block carries the value again (about 35 bytes Huffman-coded), the ordinary one does not.
            #expect(sizes.count == 2 && sizes[1] >= ordinary[1] + 30, "\(name): \(sizes) against \(ordinary)")
        }
        // And so does a field the owner names (one it injects a credential into).
        var settings = H2Session.Settings()
        settings.neverIndexedNames.insert("x-api-key")
        let injected = repeatedBlockSizes(carrying: "X-Api-Key", settings: settings)
        #expect(injected.count == 2 && injected[1] >= ordinary[1] + 30, "\(injected) against \(ordinary)")
    }

    @Test func aRequestBodyStaysWithinTheStreamWindowUntilTheServerConsumes() {
        let window = 256 * 1024
        let pair = H2Pair()
        pair.serverEvents.consumesOnArrival = false
        let body = pattern(1024 * 1024)
        let stream = pair.request("/upload", method: "POST", body: body)
        pair.pump()

        // The client cannot get more than one window ahead of what the server consumed.
        #expect(pair.serverEvents.received[stream]?.count == window)
        var consumed = 0
        var rounds = 0
        while consumed < body.count, rounds < 1000 {
            let delivered = pair.serverEvents.received[stream]?.count ?? 0
            #expect(delivered - consumed <= window, "in flight: \(delivered - consumed) after consuming \(consumed)")
            let step = min(48 * 1024, delivered - consumed)
            pair.server.consume(stream: stream, bytes: step)
            consumed += step
            pair.pump()
            rounds += 1
        }
        #expect(pair.serverEvents.received[stream] == body)
        #expect(pair.serverEvents.events.last == .ended(stream))
    }

    @Test func bytesAStreamNeverConsumedAreGivenBackToTheConnectionWhenItCloses() {
        let pair = H2Pair()
        pair.serverEvents.consumesOnArrival = false
        // Five uploads of a full stream window each (1.25 MiB: more than the 1 MiB connection
        // window), each reset by the server before it consumed a byte.
        for _ in 0..<5 {
            let stream = pair.request("/abandoned", method: "POST", body: pattern(256 * 1024))
            pair.pump()
            #expect(pair.serverEvents.received[stream]?.count == 256 * 1024)
            pair.server.reset(stream: stream, code: cancel)
            pair.pump()
        }
        // The connection window is whole again: the next upload goes through.
        pair.serverEvents.consumesOnArrival = true
        let last = pair.request("/last", method: "POST", body: pattern(512 * 1024))
        pair.pump()
        #expect(pair.serverEvents.received[last]?.count == 512 * 1024)
        #expect(pair.serverEvents.events.last == .ended(last))
    }

    @Test func paddingInDataFramesDoesNotUseUpTheWindow() {
        // A small stream window, so leaked padding would exhaust it within a few frames.
        let server = H2RawServer(settings: .init(streamWindow: 16_384))
        let settingsAck = H2Wire.frame(.settings, flags: 0x1)
        #expect(
            server.feed(H2Wire.clientStart + settingsAck + H2Wire.frame(.headers, flags: H2Wire.endHeaders, stream: 1, H2Wire.requestBlock())) == nil)
        _ = server.written()
        // Each frame: 1 byte of data and 255 of padding (RFC 9113 §6.1): 257 bytes of window.
        let padded = H2Wire.frame(.data, flags: 0x8, stream: 1, [255, UInt8(ascii: "x")] + [UInt8](repeating: 0, count: 255))
        for _ in 0..<200 {
            #expect(server.feed(padded) == nil)
            _ = server.written()
        }
        #expect(server.events.received[1]?.count == 200)
        #expect(server.events.rejections.isEmpty)
        #expect(!server.events.events.contains { if case .closed = $0 { true } else { false } })
    }

    @Test func sendStopsAtTheWatermarkWhileThePeerDoesNotRead() {
        let pair = H2Pair()
        let stream = pair.request("/big")
        pair.pump()
        // The client's windows are opened wide by nghttp2 only as it consumes; here it reads nothing.
        pair.serverEvents.outgoing[stream] = .init(bytes: pattern(1024 * 1024))
        pair.server.submitResponse(stream: stream, status: 200, fields: [], hasBody: true)
        let output = evbuffer_new()!
        defer { evbuffer_free(output) }
        let watermark = 16 * 1024
        pair.server.send(to: output, highWatermark: watermark)
        let first = evbuffer_get_length(output)
        #expect(first >= watermark && first < watermark + 16_384 + 9, "at most one frame past the mark: \(first)")
        pair.server.send(to: output, highWatermark: watermark)
        #expect(evbuffer_get_length(output) == first, "nothing more while the output is over the mark")
        #expect(pair.server.wantsWrite)
        evbuffer_drain(output, first)
        pair.server.send(to: output, highWatermark: watermark)
        #expect(evbuffer_get_length(output) >= watermark)
    }

    @Test func aResponseEndsWithTrailersWhenTheBodyReadSaysSo() {
        let pair = H2Pair()
        let stream = pair.request(
            "/svc.Echo/Say", method: "POST", extra: [field("content-type", "application/grpc"), field("te", "trailers")], body: [0, 0, 0, 0, 0])
        pair.pump()
        #expect(pair.serverEvents.received[stream] == [0, 0, 0, 0, 0])
        #expect(pair.serverEvents.headerBlocks.first?.fields.contains(field("te", "trailers")) == true)

        pair.serverEvents.outgoing[stream] = .init(bytes: [0, 0, 0, 0, 2, 8, 1], trailers: [field("grpc-status", "0"), field("Grpc-Message", "ok")])
        pair.server.submitResponse(stream: stream, status: 200, fields: [field("content-type", "application/grpc")], hasBody: true)
        pair.pump()

        let blocks = pair.clientEvents.headerBlocks
        #expect(blocks.map(\.kind) == [.response, .trailers])
        #expect(blocks.last?.fields == [field("grpc-status", "0"), field("grpc-message", "ok")])
        #expect(blocks.last?.endStream == true)
        #expect(pair.clientEvents.received[stream] == [0, 0, 0, 0, 2, 8, 1])
        #expect(pair.clientEvents.events.suffix(2) == [.ended(stream), .closed(stream, code: 0)])
    }

    @Test func anInterimResponseArrivesBeforeTheFinalOne() {
        let pair = H2Pair()
        let stream = pair.request("/upload", method: "POST", extra: [field("expect", "100-continue")], body: Array("payload".utf8))
        pair.clientEvents.outgoing[stream]?.held = true
        pair.pump()
        #expect(pair.serverEvents.headerBlocks.first?.endStream == false)
        #expect(pair.server.submitInterim(stream: stream, status: 100))
        #expect(!pair.server.submitInterim(stream: stream, status: 101), "101 has no meaning in HTTP/2")
        pair.pump()
        #expect(pair.clientEvents.headerBlocks.map(\.kind) == [.interim])

        pair.clientEvents.outgoing[stream]?.held = false
        pair.client.resumeData(stream: stream)
        pair.pump()
        #expect(pair.serverEvents.received[stream] == Array("payload".utf8))
        pair.server.submitResponse(stream: stream, status: 204, fields: [], hasBody: false)
        pair.pump()
        #expect(pair.clientEvents.headerBlocks.map(\.kind) == [.interim, .response])
        #expect(pair.clientEvents.headerBlocks.last?.fields == [field(":status", "204")])
    }

    @Test func theOwnersResetClosesTheStreamOnBothSidesAndIsNoRejection() {
        let pair = H2Pair()
        let first = pair.request("/a", method: "POST", body: Array("x".utf8))
        pair.clientEvents.outgoing[first]?.held = true
        let second = pair.request("/b")
        pair.pump()
        pair.server.reset(stream: first, code: cancel)
        pair.client.reset(stream: second, code: cancel)
        pair.pump()
        #expect(pair.clientEvents.events.contains(.closed(first, code: cancel)))
        #expect(pair.serverEvents.events.contains(.closed(first, code: cancel)))
        #expect(pair.serverEvents.events.contains(.closed(second, code: cancel)))
        #expect(pair.clientEvents.events.contains(.closed(second, code: cancel)))
        #expect(pair.serverEvents.rejections.isEmpty && pair.clientEvents.rejections.isEmpty)
        #expect(pair.server.streamCount == 0 && pair.client.streamCount == 0)
    }

    @Test func aGracefulGoAwayLetsTheOpenStreamFinishAndThenTheSessionIsOver() {
        let pair = H2Pair()
        let stream = pair.request("/slow")
        pair.pump()
        pair.server.goAway(code: 0)
        pair.pump()
        #expect(pair.clientEvents.events.contains(.goAway(lastStream: stream, code: 0)))
        #expect(pair.server.wantsRead, "the open stream still reads")

        pair.server.submitResponse(stream: stream, status: 200, fields: [], hasBody: false)
        pair.pump()
        #expect(pair.clientEvents.events.suffix(2) == [.ended(stream), .closed(stream, code: 0)])
        #expect(!pair.server.wantsRead && !pair.server.wantsWrite)
        // The client heard GOAWAY: a new stream is refused before it leaves.
        let late = pair.request("/late")
        pair.pump()
        #expect(late < 0 || pair.clientEvents.events.last == .closed(late, code: 7))
        #expect(pair.serverEvents.headerBlocks.count == 1)
    }

    @Test func terminateSendsGoAwayWithTheCodeAndEndsEveryStream() {
        let pair = H2Pair()
        let stream = pair.request("/slow")
        pair.pump()
        pair.server.terminate(code: enhanceYourCalm)
        pair.pump()
        #expect(pair.clientEvents.events.contains(.goAway(lastStream: stream, code: enhanceYourCalm)))
        #expect(!pair.server.wantsRead && !pair.server.wantsWrite)
    }

    @Test func aDeferredBodyResumesWhenTheOwnerHasBytes() {
        let pair = H2Pair()
        let stream = pair.request("/late")
        pair.pump()
        pair.serverEvents.outgoing[stream] = .init(bytes: Array("late bytes".utf8), held: true)
        pair.server.submitResponse(stream: stream, status: 200, fields: [], hasBody: true)
        pair.pump()
        #expect(pair.clientEvents.headerBlocks.map(\.kind) == [.response])
        #expect(pair.clientEvents.received[stream] == nil)
        #expect(pair.serverEvents.deferrals == 1)
        #expect(!pair.server.wantsWrite, "a deferred body waits for resumeData")

        pair.serverEvents.outgoing[stream]?.held = false
        pair.server.resumeData(stream: stream)
        #expect(pair.server.wantsWrite)
        pair.pump()
        #expect(pair.clientEvents.received[stream] == Array("late bytes".utf8))
        #expect(pair.clientEvents.events.suffix(2) == [.ended(stream), .closed(stream, code: 0)])
    }

    @Test func aHeaderListOverTheLimitResetsOnlyThatStreamAndSaysWhy() {
        let server = H2RawServer()
        // An HPACK bomb: one 4 000-byte field added to the dynamic table, then referenced 19 times
        // by its one-byte index: 4 KB on the wire, 76 KB of header list.
        let big = String(repeating: "v", count: 4000)
        let bomb =
            H2Wire.requestBlock() + [0x40] + H2Wire.string(Array("x-big".utf8)) + H2Wire.string(Array(big.utf8)) + Array(repeating: 0xBE, count: 19)
        #expect(server.feed(H2Wire.clientStart + H2Wire.frame(.headers, flags: H2Wire.endStream | H2Wire.endHeaders, stream: 1, bomb)) == nil)
        #expect(server.events.headerBlocks.isEmpty)
        #expect(server.events.rejections.isEmpty, "reported with the RST_STREAM")
        let reset = server.written().first { $0.type == .rstStream }
        #expect(reset?.stream == 1 && reset?.errorCode == enhanceYourCalm)
        #expect(server.events.rejections.map(\.stream) == [1])
        #expect(server.events.rejections.first?.reason.contains("header list over 65536 bytes") == true)
        #expect(server.events.events.last == .closed(1, code: enhanceYourCalm))

        // The HPACK state stayed in step: the next block references the same entry and is read.
        let next = H2Wire.requestBlock() + Array(repeating: 0xBE, count: 2)
        #expect(server.feed(H2Wire.frame(.headers, flags: H2Wire.endStream | H2Wire.endHeaders, stream: 3, next)) == nil)
        #expect(server.events.headerBlocks.map(\.stream) == [3])
        #expect(server.events.headerBlocks.first?.fields.suffix(2).map(\.value.count) == [4000, 4000])
    }

    @Test func aHeaderListOfExactlyTheLimitIsDelivered() {
        let server = H2RawServer()
        // 65 536 bytes of list exactly: the pseudo-header fields plus eight fields sized to fill it.
        let pseudo = [(":method", "GET"), (":scheme", "https"), (":path", "/"), (":authority", "origin.test")].reduce(0) {
            $0 + $1.0.count + $1.1.count + 32
        }
        var fill: [(String, String)] = (0..<7).map { ("x-fill-\($0)", String(repeating: "v", count: 8000)) }
        let used = pseudo + fill.reduce(0) { $0 + $1.0.count + $1.1.count + 32 }
        fill.append(("x-fill-7", String(repeating: "w", count: 65_536 - used - 32 - "x-fill-7".count)))
        let block = H2Wire.requestBlock(fill)
        var rest = block
        var first = true
        while !rest.isEmpty {
            let piece = Array(rest.prefix(16_000))
            rest.removeFirst(piece.count)
            let flags = rest.isEmpty ? H2Wire.endHeaders : 0
            let frame =
                first
                ? H2Wire.frame(.headers, flags: flags | H2Wire.endStream, stream: 1, piece)
                : H2Wire.frame(.continuation, flags: flags, stream: 1, piece)
            #expect(server.feed((first ? H2Wire.clientStart : []) + frame) == nil)
            first = false
        }
        let fields = server.events.headerBlocks.first?.fields ?? []
        #expect(fields.reduce(0) { $0 + $1.name.count + $1.value.count + 32 } == 65_536)
        #expect(fields.last?.name == "x-fill-7")
        #expect(server.events.rejections.isEmpty)
    }

    @Test func continuationFramesReachTheFrameHookOneByOne() {
        let server = H2RawServer()
        let block = H2Wire.requestBlock([("x-one", "1"), ("x-two", "2"), ("x-three", "3")])
        var bytes = H2Wire.clientStart
        let pieces = stride(from: 0, to: block.count, by: 6).map { Array(block[$0..<min($0 + 6, block.count)]) }
        bytes += H2Wire.frame(.headers, flags: H2Wire.endStream, stream: 1, pieces[0])
        for (index, piece) in pieces.enumerated().dropFirst() {
            bytes += H2Wire.frame(.continuation, flags: index == pieces.count - 1 ? H2Wire.endHeaders : 0, stream: 1, piece)
        }
        #expect(pieces.count >= 5)
        #expect(server.feed(bytes) == nil)

        let seen = server.events.frames.filter { $0.stream == 1 }
        #expect(seen.map(\.type) == [.headers] + Array(repeating: .continuation, count: pieces.count - 1))
        #expect(seen.map(\.length) == pieces.map(\.count))
        #expect(server.events.headerBlocks.first?.fields.suffix(3) == [field("x-one", "1"), field("x-two", "2"), field("x-three", "3")])
    }

    @Test func theFrameHookSayingNoEndsTheSessionWithGoAway() {
        let server = H2RawServer()
        var continuations = 0
        server.events.admitsFrame = { frame in
            if frame.type == .continuation { continuations += 1 }
            return continuations < 3
        }
        var bytes = H2Wire.clientStart + H2Wire.frame(.headers, stream: 1, [0x82])
        for _ in 0..<6 { bytes += H2Wire.frame(.continuation, stream: 1, []) }
        #expect(server.feed(bytes) == .stoppedByGuard)
        #expect(continuations == 3, "nothing is read after the hook says no")
        let goAway = server.written().first { $0.type == .goAway }
        #expect(goAway?.errorCode == enhanceYourCalm)
        #expect(!server.session.wantsRead)
    }

    @Test func nghttp2sOwnContinuationLimitEndsTheSessionAsAFlood() {
        let server = H2RawServer()
        var bytes = H2Wire.clientStart + H2Wire.frame(.headers, stream: 1, [0x82])
        // Past the backstop (twice the flood guard's limit; the guard is not consulted here).
        for _ in 0..<(H2Session.Settings().maxContinuations + 4) { bytes += H2Wire.frame(.continuation, stream: 1, []) }
        #expect(server.feed(bytes) == .flooded)
    }

    /// Each malformed request (RFC 9113 §8.2, §8.3) is reset by nghttp2's messaging checks, and the
    /// delegate hears which rule it broke, naming at most the field: never its value.
    @Test(arguments: [
        (H2Wire.requestBlock([("X-Upper", "canary-value-1")]), "uppercase header field name 'X-Upper'"),
        (H2Wire.requestBlock([("connection", "canary-value-2")]), "connection-specific header field 'connection'"),
        (H2Wire.requestBlock([("transfer-encoding", "chunked")]), "connection-specific header field 'transfer-encoding'"),
        (H2Wire.requestBlock([("te", "gzip")]), "te other than trailers"),
        (H2Wire.requestBlock([("x-bad name", "canary-value-3")]), "invalid header field 'x-bad name'"),
        (H2Wire.requestBlock([("x-ctl", "canary\u{1}value")]), "invalid header field 'x-ctl'"),
        (H2Wire.requestBlock([("x-ws", " canary-padded")]), "invalid header field 'x-ws'"),
        (H2Wire.requestBlock([("x-ws", "canary-padded\t")]), "invalid header field 'x-ws'"),
        ([0x82, 0x87] + H2Wire.literalIndexedName(1, "origin.test"), "HTTP messaging rule broken"),  // no :path
        (H2Wire.requestBlock([(":path", "/again")]), "invalid pseudo-header field ':path'"),
        (H2Wire.requestBlock([("host", "other.test"), ("content-length", "x")]), "invalid 'content-length' field"),
    ])
    func aMalformedRequestIsResetAndTheReasonNamesTheRule(block: [UInt8], expected: String) {
        let server = H2RawServer()
        #expect(server.feed(H2Wire.clientStart + H2Wire.frame(.headers, flags: H2Wire.endStream | H2Wire.endHeaders, stream: 1, block)) == nil)
        let written = server.written()
        #expect(written.first { $0.type == .rstStream }?.stream == 1)
        #expect(server.events.headerBlocks.isEmpty)
        let reasons = server.events.rejections
        #expect(reasons.count == 1 && reasons.first?.stream == 1)
        #expect(reasons.first?.reason.contains(expected) == true, "\(reasons)")
        #expect(reasons.first?.reason.contains("canary") == false)
        // The connection goes on: the next stream is read.
        #expect(server.feed(H2Wire.frame(.headers, flags: H2Wire.endStream | H2Wire.endHeaders, stream: 3, H2Wire.requestBlock())) == nil)
        #expect(server.events.headerBlocks.map(\.stream) == [3])
    }

    @Test func bytesThatAreNotThePrefaceFailTyped() {
        let server = H2RawServer()
        #expect(server.feed(Array("GET / HTTP/1.1\r\nHost: a\r\n\r\n".utf8)) == .notHTTP2Preface)
    }
}
