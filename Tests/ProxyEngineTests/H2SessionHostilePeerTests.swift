import CLibevent
import ProxyCore
import Testing

@testable import ProxyEngine

// H2Session against peers that break the rules: arbitrary frames, bytes one at a time, more streams
// than allowed, bodies longer than their content-length. The session never traps, and every stream
// it ends on its own reaches the delegate with a reason.

extension SplitMix {
    /// 0..<bound, from the suite's deterministic generator (MetricLabelBoundTests).
    fileprivate mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
}

private let settingsAck = H2Wire.frame(.settings, flags: 0x1)
private let endAll = H2Wire.endStream | H2Wire.endHeaders

private func field(_ name: String, _ value: String) -> H2HeaderField { H2HeaderField(name: name, value: value) }

@Suite("H2Session with hostile peers")
struct H2SessionHostilePeerTests {
    /// Frames of every type (extension types too) with random flags, stream ids, lengths and
    /// payloads, some of them HPACK-looking: the session answers or ends, and never traps.
    @Test(arguments: 0..<64)
    func arbitraryFramesNeverTrapTheSession(seed: Int) {
        var random = SplitMix(seed: UInt64(seed))
        let server = H2RawServer()
        var bytes = H2Wire.clientStart
        for _ in 0..<(1 + random.below(40)) {
            let type = H2FrameType(rawValue: UInt8(random.below(12)))
            let flags = UInt8(random.below(256))
            let stream = Int32(random.below(4) == 0 ? 0 : random.below(9))
            var payload = (0..<random.below(64)).map { _ in UInt8(random.below(256)) }
            if type == .headers, random.below(2) == 0 { payload = H2Wire.requestBlock([("x-r", String(random.below(1000)))]) }
            bytes += H2Wire.frame(type, flags: flags, stream: stream, payload)
        }
        if random.below(3) == 0 { bytes += (0..<random.below(20)).map { _ in UInt8(random.below(256)) } }
        // In pieces of random sizes, sending between them, until the session stops reading.
        var offset = 0
        while offset < bytes.count, server.session.wantsRead {
            let piece = min(bytes.count - offset, 1 + random.below(50))
            if server.feed(Array(bytes[offset..<(offset + piece)])) != nil { break }
            _ = server.written()
            offset += piece
        }
        _ = server.written()
        // Every stream the session reset on its own was reported, with a reason.
        for case .rejected(_, let reason) in server.events.events { #expect(!reason.isEmpty) }
    }

    @Test func aRequestFedOneByteAtATimeGivesTheSameEventsAsAllAtOnce() {
        let frames =
            H2Wire.clientStart + settingsAck
            + H2Wire.frame(.headers, flags: H2Wire.endHeaders, stream: 1, H2Wire.requestBlock([("content-type", "text/plain")]))
            + H2Wire.frame(.data, stream: 1, Array("first ".utf8)) + H2Wire.frame(.data, flags: H2Wire.endStream, stream: 1, Array("second".utf8))
        let whole = H2RawServer()
        #expect(whole.feed(frames) == nil)
        let trickled = H2RawServer()
        for byte in frames { #expect(trickled.feed([byte]) == nil) }
        #expect(trickled.events.events == whole.events.events)
        #expect(trickled.events.received == whole.events.received)
        #expect(whole.events.received[1] == Array("first second".utf8))
        #expect(whole.events.events.last == .ended(1))
    }

    @Test func aStreamOverTheConcurrentLimitBeforeTheSettingsAckIsRefusedAndReported() {
        let server = H2RawServer(settings: .init(maxConcurrentStreams: 2))
        // The client has not acknowledged our SETTINGS yet: it may not know the limit.
        var bytes = H2Wire.clientStart
        for stream in [1, 3, 5] as [Int32] { bytes += H2Wire.frame(.headers, flags: H2Wire.endHeaders, stream: stream, H2Wire.requestBlock()) }
        #expect(server.feed(bytes) == nil)
        #expect(server.events.headerBlocks.map(\.stream) == [1, 3])
        #expect(server.session.streamCount == 2)
        let reset = server.written().first { $0.type == .rstStream }
        #expect(reset?.stream == 5 && reset?.errorCode == 0x7, "REFUSED_STREAM: the client may retry it")
        #expect(server.events.rejections.map(\.stream) == [5])
        #expect(server.events.rejections.first?.reason.contains("refused: over the concurrent stream limit") == true)
        #expect(server.session.wantsRead, "the connection goes on")
    }

    @Test func aStreamOverTheAcknowledgedConcurrentLimitEndsTheConnectionWithAReason() {
        let server = H2RawServer(settings: .init(maxConcurrentStreams: 2))
        var bytes = H2Wire.clientStart + settingsAck
        for stream in [1, 3, 5] as [Int32] { bytes += H2Wire.frame(.headers, flags: H2Wire.endHeaders, stream: stream, H2Wire.requestBlock()) }
        #expect(server.feed(bytes) == nil)
        #expect(server.events.headerBlocks.map(\.stream) == [1, 3])
        let goAway = server.written().first { $0.type == .goAway }
        #expect(goAway?.errorCode == 0x1, "nghttp2 1.52 makes it a connection error")
        #expect(server.session.lastProtocolError?.contains("over the concurrent stream limit (2)") == true)
        #expect(!server.session.wantsRead)
    }

    @Test func aBodyLongerThanItsContentLengthIsResetAndReported() {
        let server = H2RawServer()
        let head = H2Wire.frame(.headers, flags: H2Wire.endHeaders, stream: 1, H2Wire.requestBlock([("content-length", "5")]))
        #expect(
            server.feed(H2Wire.clientStart + settingsAck + head + H2Wire.frame(.data, flags: H2Wire.endStream, stream: 1, Array("ten bytes!".utf8)))
                == nil)
        let reset = server.written().first { $0.type == .rstStream }
        #expect(reset?.stream == 1 && reset?.errorCode == 0x1)
        #expect(server.events.rejections.map(\.stream) == [1])
        #expect(server.events.events.last == .closed(1, code: 0x1))
        #expect(!server.events.events.contains(.ended(1)), "a body the stream was reset for never ends normally")
    }

    @Test func aResponseHeaderBlockTooLargeToSendIsReportedAndTheClientIsToldTheStreamFailed() {
        let pair = H2Pair()
        let stream = pair.request("/huge-head")
        pair.pump()
        // Over nghttp2's 64 KiB limit for a block it sends: varied values HPACK cannot shrink.
        let fields = (0..<40).map { index in field("x-filler-\(index)", String(repeating: String(UnicodeScalar(UInt8(65 + index % 26))), count: 2000))
        }
        #expect(pair.server.submitResponse(stream: stream, status: 200, fields: fields, hasBody: false))
        pair.pump()
        #expect(pair.serverEvents.rejections.map(\.stream) == [stream])
        #expect(pair.serverEvents.rejections.first?.reason.hasPrefix("HEADERS not sent") == true)
        #expect(pair.clientEvents.events.last == .closed(stream, code: 0x2), "INTERNAL_ERROR, not a stream left waiting")
        #expect(pair.serverEvents.events.last == .closed(stream, code: 0x2))
        #expect(pair.server.streamCount == 0)
    }

    /// The client role (origins) runs the same checks on responses: a malformed one resets its
    /// stream, and the delegate hears which rule it broke.
    @Test(arguments: [
        (H2Wire.literal("X-Upper", "1"), "uppercase header field name 'X-Upper'"),
        (H2Wire.literal("connection", "close"), "connection-specific header field 'connection'"),
        ([UInt8](), "HTTP messaging rule broken"),  // no :status
    ])
    func aMalformedResponseFromAnOriginIsResetAndReported(extra: [UInt8], expected: String) {
        let events = H2Recorder()
        let client = H2Session(role: .client)
        client.delegate = events
        let output = evbuffer_new()!
        let input = evbuffer_new()!
        defer {
            evbuffer_free(output)
            evbuffer_free(input)
        }
        let stream = client.submitRequest(
            fields: [field(":method", "GET"), field(":scheme", "https"), field(":authority", "origin.test"), field(":path", "/")], hasBody: false)
        client.send(to: output, highWatermark: 1 << 20)
        evbuffer_drain(output, evbuffer_get_length(output))
        // The origin's SETTINGS, then a response whose block breaks a rule (0x88: :status 200).
        let block = (extra.isEmpty ? [] : [0x88]) + extra + H2Wire.literal("content-type", "text/plain")
        let reply = H2Wire.frame(.settings) + H2Wire.frame(.headers, flags: H2Wire.endStream | H2Wire.endHeaders, stream: stream, block)
        reply.withUnsafeBytes { _ = evbuffer_add(input, $0.baseAddress, $0.count) }
        #expect(client.receive(from: input) == nil)
        client.send(to: output, highWatermark: 1 << 20)
        #expect(events.headerBlocks.isEmpty)
        #expect(events.rejections.map(\.stream) == [stream])
        #expect(events.rejections.first?.reason.contains(expected) == true, "\(events.rejections)")
        #expect(events.events.last == .closed(stream, code: 0x1))
    }

    /// nghttp2's own rapid-reset limit (Debian's 1.52 carries the upstream fix: 1 000 resets in a
    /// burst) is a floor under the engine's flood guard: the connection ends, and the owner can say why.
    @Test func nghttp2sOwnRapidResetLimitEndsTheConnectionAndSaysSo() {
        let server = H2RawServer(settings: .init(maxConcurrentStreams: 2000))
        var bytes = H2Wire.clientStart + settingsAck
        for index in 0..<1200 {
            let stream = Int32(1 + 2 * index)
            bytes += H2Wire.frame(.headers, flags: H2Wire.endHeaders, stream: stream, H2Wire.requestBlock())
            bytes += H2Wire.frame(.rstStream, stream: stream, [0, 0, 0, 8])
        }
        #expect(server.feed(bytes) == nil)
        #expect(server.written().contains { $0.type == .goAway })
        #expect(!server.session.wantsRead && !server.session.wantsWrite)
        #expect(server.session.lastProtocolError?.contains("nghttp2 sent GOAWAY") == true, "\(server.session.lastProtocolError ?? "-")")
    }

    @Test func theOwnersGoAwayIsNotCalledAProtocolError() {
        let pair = H2Pair()
        pair.server.terminate(code: 0)
        pair.pump()
        #expect(pair.server.lastProtocolError == nil)
        #expect(pair.clientEvents.events.contains(.goAway(lastStream: 0, code: 0)))
    }

    @Test func requestTrailersFromTheClientRoleEndTheStream() {
        let pair = H2Pair()
        let stream = pair.request("/svc", method: "POST", body: Array("payload".utf8), trailers: [H2HeaderField(name: "X-Checksum", value: "42")])
        pair.pump()
        #expect(pair.serverEvents.headerBlocks.map(\.kind) == [.request, .trailers])
        #expect(pair.serverEvents.headerBlocks.last?.fields == [H2HeaderField(name: "x-checksum", value: "42")])
        #expect(pair.serverEvents.headerBlocks.last?.endStream == true)
        #expect(pair.serverEvents.received[stream] == Array("payload".utf8))
        #expect(pair.serverEvents.events.last == .ended(stream))
    }
}
