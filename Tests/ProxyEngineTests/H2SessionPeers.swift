import CLibevent
import ProxyCore

@testable import ProxyEngine

// Test peers for H2Session: a delegate that records what it hears and serves bodies from memory,
// a client and a server session wired back to back through two evbuffers (no sockets), and raw
// frame and HPACK builders for what a well-behaved nghttp2 client would never send.

/// Records every delegate event in order; serves outgoing bodies from memory.
final class H2Recorder: H2SessionDelegate {
    enum Event: Equatable {
        case headers(stream: Int32, fields: [H2HeaderField], endStream: Bool, kind: H2HeadersKind)
        case ended(Int32)
        case closed(Int32, code: UInt32)
        case rejected(Int32, reason: String)
        case goAway(lastStream: Int32, code: UInt32)
    }

    struct Frame: Equatable {
        var type: H2FrameType
        var flags: UInt8
        var stream: Int32
        var length: Int
    }

    /// A body to send on a stream: what is left of it, its trailers, and whether it is held back
    /// (`h2ReadBody` answers `.deferred` until the test releases it and calls `resumeData`).
    struct Outgoing {
        var bytes: [UInt8]
        var offset = 0
        var trailers: [H2HeaderField]? = nil
        var held = false
    }

    var events: [Event] = []
    var frames: [Frame] = []
    var received: [Int32: [UInt8]] = [:]
    var outgoing: [Int32: Outgoing] = [:]
    /// How many times `h2ReadBody` answered `.deferred`.
    var deferrals = 0
    /// Consume DATA as it arrives (false: the test consumes, to hold the peer to the window).
    var consumesOnArrival = true
    /// Says whether the session goes on after this frame header (the flood guard's seat).
    var admitsFrame: (Frame) -> Bool = { _ in true }

    func h2FrameStarted(_ session: H2Session, type: H2FrameType, flags: UInt8, stream: Int32, length: Int) -> Bool {
        let frame = Frame(type: type, flags: flags, stream: stream, length: length)
        frames.append(frame)
        return admitsFrame(frame)
    }

    func h2Headers(_ session: H2Session, stream: Int32, fields: [H2HeaderField], endStream: Bool, kind: H2HeadersKind) {
        events.append(.headers(stream: stream, fields: fields, endStream: endStream, kind: kind))
    }

    func h2Data(_ session: H2Session, stream: Int32, bytes: UnsafeRawBufferPointer) {
        received[stream, default: []].append(contentsOf: bytes)
        if consumesOnArrival { session.consume(stream: stream, bytes: bytes.count) }
    }

    /// Called after END_STREAM is recorded (from inside `receive`: it may submit a response).
    var onStreamEnded: ((H2Session, Int32) -> Void)?

    func h2StreamEnded(_ session: H2Session, stream: Int32) {
        events.append(.ended(stream))
        onStreamEnded?(session, stream)
    }

    func h2StreamClosed(_ session: H2Session, stream: Int32, code: UInt32) { events.append(.closed(stream, code: code)) }

    func h2StreamRejected(_ session: H2Session, stream: Int32, reason: String) { events.append(.rejected(stream, reason: reason)) }

    func h2GoAwayReceived(_ session: H2Session, lastStream: Int32, code: UInt32) { events.append(.goAway(lastStream: lastStream, code: code)) }

    func h2ReadBody(_ session: H2Session, stream: Int32, into buffer: UnsafeMutableRawBufferPointer) -> H2BodyRead {
        guard var body = outgoing[stream], !body.held else {
            deferrals += 1
            return .deferred
        }
        let count = min(buffer.count, body.bytes.count - body.offset)
        body.bytes.withUnsafeBytes { source in
            buffer.baseAddress?.copyMemory(from: source.baseAddress! + body.offset, byteCount: count)
        }
        body.offset += count
        outgoing[stream] = body
        return body.offset == body.bytes.count ? .end(count, trailers: body.trailers) : .bytes(count)
    }

    /// The header events, without the others.
    var headerBlocks: [(stream: Int32, fields: [H2HeaderField], endStream: Bool, kind: H2HeadersKind)] {
        events.compactMap {
            if case .headers(let stream, let fields, let endStream, let kind) = $0 { return (stream, fields, endStream, kind) }
            return nil
        }
    }

    var rejections: [(stream: Int32, reason: String)] {
        events.compactMap {
            if case .rejected(let stream, let reason) = $0 { return (stream, reason) }
            return nil
        }
    }
}

/// A client-role and a server-role session talking through two evbuffers.
final class H2Pair {
    let clientEvents = H2Recorder()
    let serverEvents = H2Recorder()
    let client: H2Session
    let server: H2Session
    let toServer: OpaquePointer = evbuffer_new()!
    let toClient: OpaquePointer = evbuffer_new()!
    private(set) var clientFailures: [H2SessionFailure] = []
    private(set) var serverFailures: [H2SessionFailure] = []
    /// Bytes that crossed each way so far.
    private(set) var bytesToServer = 0
    private(set) var bytesToClient = 0

    init(serverSettings: H2Session.Settings = .init(), clientSettings: H2Session.Settings = .init()) {
        client = H2Session(role: .client, settings: clientSettings)
        server = H2Session(role: .server, settings: serverSettings)
        client.delegate = clientEvents
        server.delegate = serverEvents
    }

    deinit {
        evbuffer_free(toServer)
        evbuffer_free(toClient)
    }

    /// Moves frames both ways until neither side has anything more to say.
    func pump(highWatermark: Int = 1 << 20) {
        for _ in 0..<100_000 {
            if let failure = client.send(to: toServer, highWatermark: highWatermark) { clientFailures.append(failure) }
            let up = evbuffer_get_length(toServer)
            bytesToServer += up
            if let failure = server.receive(from: toServer) { serverFailures.append(failure) }
            if let failure = server.send(to: toClient, highWatermark: highWatermark) { serverFailures.append(failure) }
            let down = evbuffer_get_length(toClient)
            bytesToClient += down
            if let failure = client.receive(from: toClient) { clientFailures.append(failure) }
            if up == 0 && down == 0 { return }
        }
    }

    func request(_ path: String, method: String = "GET", extra: [H2HeaderField] = [], body: [UInt8]? = nil, trailers: [H2HeaderField]? = nil)
        -> Int32
    {
        let fields =
            [
                H2HeaderField(name: ":method", value: method), H2HeaderField(name: ":scheme", value: "https"),
                H2HeaderField(name: ":authority", value: "origin.test"), H2HeaderField(name: ":path", value: path),
            ] + extra
        let stream = client.submitRequest(fields: fields, hasBody: body != nil)
        if let body { clientEvents.outgoing[stream] = .init(bytes: body, trailers: trailers) }
        return stream
    }
}

/// Raw HTTP/2 frames and HPACK blocks, for peers that misbehave on purpose.
enum H2Wire {
    static let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
    static let endStream: UInt8 = 0x1
    static let endHeaders: UInt8 = 0x4

    static func frame(_ type: H2FrameType, flags: UInt8 = 0, stream: Int32 = 0, _ payload: [UInt8] = []) -> [UInt8] {
        let length = payload.count
        let id = UInt32(stream)
        return [
            UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF), type.rawValue, flags,
            UInt8(id >> 24 & 0x7F), UInt8(id >> 16 & 0xFF), UInt8(id >> 8 & 0xFF), UInt8(id & 0xFF),
        ] + payload
    }

    /// The preface and an empty SETTINGS: what a client sends before its first stream.
    static let clientStart = preface + frame(.settings)

    /// HPACK for `GET https://origin.test/` from the static table, then `fields` as literals.
    static func requestBlock(_ fields: [(String, String)] = []) -> [UInt8] {
        var block: [UInt8] = [0x82, 0x87, 0x84]  // :method GET, :scheme https, :path /
        block += literalIndexedName(1, "origin.test")  // :authority
        for (name, value) in fields { block += literal(name, value) }
        return block
    }

    /// A literal field without indexing and with a literal name (RFC 7541 §6.2.2), no Huffman.
    static func literal(_ name: String, _ value: String) -> [UInt8] {
        [0x00] + string(Array(name.utf8)) + string(Array(value.utf8))
    }

    static func literal(_ name: String, bytes value: [UInt8]) -> [UInt8] {
        [0x00] + string(Array(name.utf8)) + string(value)
    }

    static func literalIndexedName(_ index: Int, _ value: String) -> [UInt8] {
        integer(index, prefixBits: 4, firstByte: 0x00) + string(Array(value.utf8))
    }

    static func string(_ bytes: [UInt8]) -> [UInt8] { integer(bytes.count, prefixBits: 7, firstByte: 0x00) + bytes }

    /// RFC 7541 §5.1 integer with an N-bit prefix.
    static func integer(_ value: Int, prefixBits: Int, firstByte: UInt8) -> [UInt8] {
        let limit = (1 << prefixBits) - 1
        if value < limit { return [firstByte | UInt8(value)] }
        var bytes = [firstByte | UInt8(limit)]
        var rest = value - limit
        while rest >= 128 {
            bytes.append(UInt8(rest % 128 + 128))
            rest /= 128
        }
        bytes.append(UInt8(rest))
        return bytes
    }

    struct Parsed: Equatable {
        var type: H2FrameType
        var flags: UInt8
        var stream: Int32
        var payload: [UInt8]

        /// The error code of a RST_STREAM, or of a GOAWAY (after its last stream id).
        var errorCode: UInt32? {
            let offset = type == .rstStream ? 0 : type == .goAway ? 4 : -1
            guard offset >= 0, payload.count >= offset + 4 else { return nil }
            return payload[offset..<(offset + 4)].reduce(0) { $0 << 8 | UInt32($1) }
        }
    }

    /// Splits what a server wrote into frames (a server writes no preface).
    static func parse(_ bytes: [UInt8]) -> [Parsed] {
        var frames: [Parsed] = []
        var index = 0
        while bytes.count - index >= 9 {
            let length = Int(bytes[index]) << 16 | Int(bytes[index + 1]) << 8 | Int(bytes[index + 2])
            guard bytes.count - index - 9 >= length else { break }
            let stream = Int32(bitPattern: bytes[(index + 5)..<(index + 9)].reduce(0) { $0 << 8 | UInt32($1) } & 0x7FFF_FFFF)
            frames.append(
                Parsed(
                    type: H2FrameType(rawValue: bytes[index + 3]), flags: bytes[index + 4], stream: stream,
                    payload: Array(bytes[(index + 9)..<(index + 9 + length)])))
            index += 9 + length
        }
        return frames
    }
}

/// A server-role session fed raw bytes, with what it writes back parsed into frames.
final class H2RawServer {
    let events = H2Recorder()
    let session: H2Session
    private let input: OpaquePointer = evbuffer_new()!
    private let output: OpaquePointer = evbuffer_new()!

    init(settings: H2Session.Settings = .init()) {
        session = H2Session(role: .server, settings: settings)
        session.delegate = events
    }

    deinit {
        evbuffer_free(input)
        evbuffer_free(output)
    }

    func feed(_ bytes: [UInt8]) -> H2SessionFailure? {
        bytes.withUnsafeBytes { _ = evbuffer_add(input, $0.baseAddress, $0.count) }
        return session.receive(from: input)
    }

    /// Everything the session has to send, as frames.
    func written() -> [H2Wire.Parsed] {
        session.send(to: output, highWatermark: 1 << 20)
        let count = evbuffer_get_length(output)
        var bytes = [UInt8](repeating: 0, count: count)
        bytes.withUnsafeMutableBytes { _ = evbuffer_remove(output, $0.baseAddress, count) }
        return H2Wire.parse(bytes)
    }
}
