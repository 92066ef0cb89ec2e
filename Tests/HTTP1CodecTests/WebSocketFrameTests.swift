import Testing

@testable import HTTP1Codec

/// A frame stream decoded to whole frames: header, payload (joined), or the error that stopped it.
enum DecodedFrames: Equatable {
    case frames([Frame], error: WebSocketFrameError?, pendingBytes: Bool)

    struct Frame: Equatable {
        let header: WebSocketFrameHeader
        let payload: [UInt8]
    }
}

/// Feeds `pieces` in order and gathers what the decoder said, joining each frame's payload events.
func decodeFrames(_ pieces: [[UInt8]], sender: WebSocketSender) -> DecodedFrames {
    var decoder = WebSocketFrameDecoder(sender: sender)
    var frames: [DecodedFrames.Frame] = []
    var header: WebSocketFrameHeader?
    var payload: [UInt8] = []
    var error: WebSocketFrameError?
    for piece in pieces {
        for event in decoder.feed(piece) {
            switch event {
            case .header(let next):
                header = next
                payload = []
            case .payload(let bytes):
                payload += bytes
            case .frameEnd:
                frames.append(.init(header: header!, payload: payload))
                header = nil
            case .protocolError(let stop):
                error = stop
            }
        }
    }
    return .frames(frames, error: error, pendingBytes: !decoder.atFrameBoundary)
}

@Suite("WebSocket frames (RFC 6455 §5): decoder, encoder, every split point")
struct WebSocketFrameTests {
    static let key: UInt32 = 0x3712_A5C9

    static func masked(_ opcode: WebSocketOpcode, _ text: String, fin: Bool = true) -> [UInt8] {
        WebSocketFrameEncoder.frame(fin: fin, opcode: opcode, payload: Array(text.utf8), maskingKey: key)
    }

    static func plain(_ opcode: WebSocketOpcode, _ text: String, fin: Bool = true) -> [UInt8] {
        WebSocketFrameEncoder.frame(fin: fin, opcode: opcode, payload: Array(text.utf8), maskingKey: nil)
    }

    @Test("RFC 6455 §5.7 examples: an unmasked and a masked \"Hello\", fragmented text, ping and pong")
    func rfcExamples() {
        let unmasked: [UInt8] = [0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f]
        let masked: [UInt8] = [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58]
        let hello = Array("Hello".utf8)
        #expect(
            decodeFrames([unmasked], sender: .server)
                == .frames([.init(header: .init(fin: true, opcode: .text, payloadLength: 5), payload: hello)], error: nil, pendingBytes: false))
        #expect(
            decodeFrames([masked], sender: .client)
                == .frames(
                    [.init(header: .init(fin: true, opcode: .text, maskingKey: 0x37fa_213d, payloadLength: 5), payload: hello)],
                    error: nil, pendingBytes: false))
        #expect(WebSocketFrameEncoder.frame(fin: true, opcode: .text, payload: hello, maskingKey: 0x37fa_213d) == masked)
        #expect(WebSocketFrameEncoder.frame(fin: true, opcode: .text, payload: hello, maskingKey: nil) == unmasked)
        let fragmented: [UInt8] = [0x01, 0x03, 0x48, 0x65, 0x6c, 0x80, 0x02, 0x6c, 0x6f]
        guard case .frames(let frames, nil, false) = decodeFrames([fragmented], sender: .server) else {
            Issue.record("fragmented text did not decode")
            return
        }
        #expect(frames.map(\.header.opcode) == [.text, .continuation])
        #expect(frames.flatMap(\.payload) == hello)
        #expect(WebSocketFrameEncoder.frame(fin: true, opcode: .ping, payload: hello, maskingKey: nil) == [0x89, 0x05] + hello)
    }

    @Test(
        "payload lengths at each form's edges: 7-bit up to 125, 16-bit 126...65535, 64-bit beyond; encoded minimal, decoded back",
        arguments: [0, 1, 125, 126, 127, 65535, 65536, 70000])
    func lengthForms(length: Int) {
        let payload = (0..<length).map { UInt8(truncatingIfNeeded: $0) }
        let frame = WebSocketFrameEncoder.frame(fin: true, opcode: .binary, payload: payload, maskingKey: Self.key)
        let headerLength = 2 + (length <= 125 ? 0 : length <= 65535 ? 2 : 8) + 4
        #expect(frame.count == headerLength + length)
        guard case .frames(let frames, nil, false) = decodeFrames([frame], sender: .client) else {
            Issue.record("length \(length) did not decode")
            return
        }
        #expect(frames.count == 1 && frames[0].payload == payload && frames[0].header.payloadLength == UInt64(length))
    }

    @Test(
        "protocol errors, each found as soon as its bytes are there",
        arguments: [
            ([0xC1, 0x80, 0, 0, 0, 0], WebSocketSender.client, WebSocketFrameError.reservedBitsSet),
            ([0xA1, 0x80, 0, 0, 0, 0], .client, .reservedBitsSet),
            ([0x91, 0x80, 0, 0, 0, 0], .client, .reservedBitsSet),
            ([0x83, 0x80, 0, 0, 0, 0], .client, .unknownOpcode(3)),
            ([0x8B, 0x80, 0, 0, 0, 0], .client, .unknownOpcode(11)),
            ([0x89, 0xFE, 0x00, 0x7E], .client, .controlFrameTooLong),
            ([0x09, 0x80, 0, 0, 0, 0], .client, .controlFrameFragmented),
            ([0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0], .client, .lengthTooLarge),
            ([0x82, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF], .server, .lengthTooLarge),
            ([0x82, 0xFE, 0x00, 0x05, 0, 0, 0, 0], .client, .lengthNotMinimal),
            ([0x82, 0xFF, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0, 0, 0, 0], .client, .lengthNotMinimal),
            ([0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f], .client, .maskMissing),
            ([0x81, 0x80, 0, 0, 0, 0], .server, .maskUnexpected),
            ([0x80, 0x80, 0, 0, 0, 0], .client, .unexpectedContinuation),
            ([0x01, 0x80, 0, 0, 0, 0, 0x82, 0x80, 0, 0, 0, 0], .client, .messageNotFinished),
        ] as [([UInt8], WebSocketSender, WebSocketFrameError)])
    func protocolErrors(bytes: [UInt8], sender: WebSocketSender, error: WebSocketFrameError) {
        for pieces in splits(of: bytes) {
            guard case .frames(_, let found, _) = decodeFrames(pieces, sender: sender) else { return }
            #expect(found == error, "split into \(pieces.map(\.count))")
        }
    }

    @Test("after an error the decoder reads nothing more, whatever follows")
    func stopsAfterError() {
        var decoder = WebSocketFrameDecoder(sender: .server)
        #expect(decoder.feed([0xC1, 0x00]) == [.protocolError(.reservedBitsSet)])
        #expect(decoder.feed(Self.plain(.text, "ok")) == [])
        #expect(decoder.failed == .reservedBitsSet)
    }

    @Test("control frames between fragments of a message; empty frames; a close with its code")
    func interleavedControl() {
        let stream =
            Self.masked(.text, "Hel", fin: false) + Self.masked(.ping, "") + Self.masked(.continuation, "lo", fin: false)
            + Self.masked(.pong, "p") + Self.masked(.continuation, "") + WebSocketFrameEncoder.close(code: 1008, maskingKey: Self.key)
        guard case .frames(let frames, nil, false) = decodeFrames([stream], sender: .client) else {
            Issue.record("did not decode")
            return
        }
        #expect(frames.map(\.header.opcode) == [.text, .ping, .continuation, .pong, .continuation, .close])
        #expect(frames.last?.payload == [0x03, 0xF0])
    }

    /// The split-point property: however the bytes are cut, the decoder finds the same frames (and
    /// the same error) as from the whole.
    @Test("every split point of a frame stream decodes to the same frames as the whole")
    func splitPoints() {
        let streams: [([UInt8], WebSocketSender)] = [
            (Self.masked(.text, "Hel", fin: false) + Self.masked(.ping, "x") + Self.masked(.continuation, "lo"), .client),
            (Self.plain(.binary, String(repeating: "z", count: 200)) + Self.plain(.close, ""), .server),
            (Self.masked(.binary, String(repeating: "y", count: 130)) + [0xC2], .client),
            (Self.plain(.text, "a") + [0x82, 0x7F, 0x80], .server),
        ]
        for (stream, sender) in streams {
            let whole = decodeFrames([stream], sender: sender)
            for pieces in splits(of: stream) {
                #expect(decodeFrames(pieces, sender: sender) == whole, "split into \(pieces.map(\.count))")
            }
        }
    }

    @Test("a 64-bit length near the limit is announced, not allocated: payload events only carry what arrived")
    func hugeLengthStreams() {
        var decoder = WebSocketFrameDecoder(sender: .server)
        let header = WebSocketFrameHeader(fin: true, opcode: .binary, payloadLength: UInt64(Int64.max)).encoded()
        let events = decoder.feed(header + [1, 2, 3])
        #expect(events == [.header(.init(fin: true, opcode: .binary, payloadLength: UInt64(Int64.max))), .payload([1, 2, 3])])
        #expect(!decoder.atFrameBoundary)
    }
}
