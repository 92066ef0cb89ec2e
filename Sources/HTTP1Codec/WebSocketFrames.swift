// WebSocket framing (RFC 6455 §5): a streaming decoder over byte pieces split anywhere, and the
// encoder the proxy re-frames payloads with. The frames follow an HTTP/1.1 upgrade, so they live
// beside the other HTTP/1.1 wire codecs (chunked, heads): pure, no sockets, compiled into the
// fuzz binary with the rest of this module.

/// RFC 6455 §5.2 opcodes this proxy knows; any other is a protocol error (no extension defines one here).
public enum WebSocketOpcode: UInt8, Sendable, Equatable {
    case continuation = 0x0
    case text = 0x1
    case binary = 0x2
    case close = 0x8
    case ping = 0x9
    case pong = 0xA

    /// Close, ping and pong (§5.5): at most 125 payload bytes, never fragmented.
    public var isControl: Bool { rawValue & 0x8 != 0 }
}

/// Who sent the frames a decoder reads (§5.1): a client masks every frame, a server none.
public enum WebSocketSender: Sendable, Equatable {
    case client
    case server
}

public struct WebSocketFrameHeader: Sendable, Equatable {
    public var fin: Bool
    public var opcode: WebSocketOpcode
    /// The masking key (§5.3), big-endian as on the wire; nil for an unmasked frame.
    public var maskingKey: UInt32?
    public var payloadLength: UInt64

    public init(fin: Bool, opcode: WebSocketOpcode, maskingKey: UInt32? = nil, payloadLength: UInt64) {
        self.fin = fin
        self.opcode = opcode
        self.maskingKey = maskingKey
        self.payloadLength = payloadLength
    }

    /// The header's wire bytes, the length in its minimal form (§5.2: "the minimal number of bytes").
    public func encoded() -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(14)
        bytes.append((fin ? 0x80 : 0) | opcode.rawValue)
        let maskBit: UInt8 = maskingKey == nil ? 0 : 0x80
        if payloadLength <= 125 {
            bytes.append(maskBit | UInt8(payloadLength))
        } else if payloadLength <= 0xFFFF {
            bytes.append(maskBit | 126)
            bytes.append(UInt8(payloadLength >> 8))
            bytes.append(UInt8(payloadLength & 0xFF))
        } else {
            bytes.append(maskBit | 127)
            for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8((payloadLength >> UInt64(shift)) & 0xFF)) }
        }
        if let maskingKey {
            for shift in stride(from: 24, through: 0, by: -8) { bytes.append(UInt8((maskingKey >> UInt32(shift)) & 0xFF)) }
        }
        return bytes
    }
}

/// Why a frame stream is not RFC 6455 (the connection fails with close code 1002, §7.4.1).
public enum WebSocketFrameError: Error, Sendable, Equatable {
    /// RSV1-3 set while no extension was negotiated (§5.2): the proxy lets none through.
    case reservedBitsSet
    case unknownOpcode(UInt8)
    /// A control frame over 125 bytes, or fragmented (§5.5).
    case controlFrameTooLong
    case controlFrameFragmented
    /// A 64-bit length with its most significant bit set (§5.2).
    case lengthTooLarge
    /// A length in a longer form than needed (§5.2).
    case lengthNotMinimal
    /// A client frame without a mask, or a server frame with one (§5.1).
    case maskMissing
    case maskUnexpected
    /// A continuation with no message under way, or a new message before the last one ended (§5.4).
    case unexpectedContinuation
    case messageNotFinished

    /// For the log: what was wrong, in words, naming no byte of the payload.
    public var reason: String {
        switch self {
        case .reservedBitsSet: "RSV bits set without an extension"
        case .unknownOpcode(let code): "unknown opcode \(code)"
        case .controlFrameTooLong: "control frame over 125 bytes"
        case .controlFrameFragmented: "fragmented control frame"
        case .lengthTooLarge: "64-bit length with the top bit set"
        case .lengthNotMinimal: "payload length not in its minimal form"
        case .maskMissing: "unmasked client frame"
        case .maskUnexpected: "masked server frame"
        case .unexpectedContinuation: "continuation without a message"
        case .messageNotFinished: "new message before the last one finished"
        }
    }
}

/// What the decoder found in a piece, in order.
public enum WebSocketFrameEvent: Sendable, Equatable {
    case header(WebSocketFrameHeader)
    /// Payload bytes of the current frame, unmasked; a frame's payload may come in many of these.
    case payload([UInt8])
    /// The current frame's payload is complete (follows its header at once when it is empty).
    case frameEnd
    /// The stream is not RFC 6455; the decoder reads nothing more.
    case protocolError(WebSocketFrameError)
}

/// A streaming RFC 6455 §5.2 decoder: feed it pieces of any size, split anywhere, and it says what
/// they hold. It keeps at most one header (14 bytes) between pieces; payload bytes are handed on as
/// they come, never gathered, whatever the frame's announced length. All lengths are `UInt64` and
/// only compared or subtracted below what they were checked against: no input traps.
public struct WebSocketFrameDecoder: Sendable {
    public let sender: WebSocketSender
    private var headerBytes: [UInt8] = []
    /// The frame whose payload is being read, and how much of it is left.
    private var current: WebSocketFrameHeader?
    private var remaining: UInt64 = 0
    /// Bytes of the current frame's payload already unmasked (the key's phase).
    private var maskOffset: UInt64 = 0
    /// A fragmented data message is under way (its first frame had FIN clear).
    private var inMessage = false
    public private(set) var failed: WebSocketFrameError?

    public init(sender: WebSocketSender) {
        self.sender = sender
        headerBytes.reserveCapacity(14)
    }

    /// True between frames: nothing of a header or payload is pending.
    public var atFrameBoundary: Bool { current == nil && headerBytes.isEmpty }

    public mutating func feed(_ piece: [UInt8]) -> [WebSocketFrameEvent] {
        piece.withUnsafeBufferPointer { feed($0) }
    }

    public mutating func feed(_ piece: UnsafeBufferPointer<UInt8>) -> [WebSocketFrameEvent] {
        var events: [WebSocketFrameEvent] = []
        guard failed == nil else { return events }
        var index = 0
        while index < piece.count || (current != nil && remaining == 0) {
            if let header = current {
                if remaining == 0 {
                    events.append(.frameEnd)
                    if header.opcode.isControl == false { inMessage = !header.fin }
                    current = nil
                    continue
                }
                let take = Int(min(remaining, UInt64(piece.count - index)))
                var bytes = Array(piece[index..<(index + take)])
                if let key = header.maskingKey { Self.applyMask(key, to: &bytes, offset: maskOffset) }
                maskOffset &+= UInt64(take)
                remaining -= UInt64(take)
                index += take
                events.append(.payload(bytes))
                continue
            }
            headerBytes.append(piece[index])
            index += 1
            switch parseHeader() {
            case .needMore:
                continue
            case .failed(let error):
                failed = error
                events.append(.protocolError(error))
                return events
            case .header(let header):
                headerBytes.removeAll(keepingCapacity: true)
                current = header
                remaining = header.payloadLength
                maskOffset = 0
                events.append(.header(header))
            }
        }
        return events
    }

    private enum HeaderParse {
        case needMore
        case header(WebSocketFrameHeader)
        case failed(WebSocketFrameError)
    }

    /// The header in `headerBytes`, once all of it is there; each rule checked as soon as its bytes are.
    private func parseHeader() -> HeaderParse {
        let first = headerBytes[0]
        if headerBytes.count == 1 {
            guard first & 0x70 == 0 else { return .failed(.reservedBitsSet) }
            guard let opcode = WebSocketOpcode(rawValue: first & 0x0F) else { return .failed(.unknownOpcode(first & 0x0F)) }
            let fin = first & 0x80 != 0
            if opcode.isControl {
                guard fin else { return .failed(.controlFrameFragmented) }
            } else if opcode == .continuation {
                guard inMessage else { return .failed(.unexpectedContinuation) }
            } else {
                guard !inMessage else { return .failed(.messageNotFinished) }
            }
            return .needMore
        }
        let second = headerBytes[1]
        let masked = second & 0x80 != 0
        if headerBytes.count == 2 {
            switch (sender, masked) {
            case (.client, false): return .failed(.maskMissing)
            case (.server, true): return .failed(.maskUnexpected)
            default: break
            }
            if first & 0x08 != 0, second & 0x7F > 125 { return .failed(.controlFrameTooLong) }
        }
        let lengthBytes: Int
        switch second & 0x7F {
        case 126: lengthBytes = 2
        case 127: lengthBytes = 8
        default: lengthBytes = 0
        }
        if lengthBytes == 8, headerBytes.count == 3, headerBytes[2] & 0x80 != 0 { return .failed(.lengthTooLarge) }
        let total = 2 + lengthBytes + (masked ? 4 : 0)
        guard headerBytes.count == total else { return .needMore }
        var length = UInt64(second & 0x7F)
        if lengthBytes > 0 {
            length = 0
            for byte in headerBytes[2..<(2 + lengthBytes)] { length = length << 8 | UInt64(byte) }
            let minimal = lengthBytes == 2 ? length > 125 : length > 0xFFFF
            guard minimal else { return .failed(.lengthNotMinimal) }
        }
        var key: UInt32?
        if masked {
            key = headerBytes[(total - 4)..<total].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        }
        return .header(
            WebSocketFrameHeader(
                fin: first & 0x80 != 0, opcode: WebSocketOpcode(rawValue: first & 0x0F)!, maskingKey: key,
                payloadLength: length))
    }

    /// XORs `bytes` with the key (§5.3), `offset` bytes into the frame's payload. Masking and
    /// unmasking are the same operation.
    public static func applyMask(_ key: UInt32, to bytes: inout [UInt8], offset: UInt64) {
        let keyBytes = [UInt8(key >> 24), UInt8((key >> 16) & 0xFF), UInt8((key >> 8) & 0xFF), UInt8(key & 0xFF)]
        let phase = Int(offset & 3)
        for index in bytes.indices { bytes[index] ^= keyBytes[(index &+ phase) & 3] }
    }
}

/// Whole frames as the proxy writes them: masked with a fresh key towards an origin (§5.3: a client
/// masks every frame, and the key must be unpredictable: the caller supplies it), unmasked towards
/// a client.
public enum WebSocketFrameEncoder {
    public static func frame(fin: Bool, opcode: WebSocketOpcode, payload: [UInt8], maskingKey: UInt32?) -> [UInt8] {
        var bytes = WebSocketFrameHeader(
            fin: fin, opcode: opcode, maskingKey: maskingKey, payloadLength: UInt64(payload.count)
        ).encoded()
        var body = payload
        if let maskingKey { WebSocketFrameDecoder.applyMask(maskingKey, to: &body, offset: 0) }
        bytes += body
        return bytes
    }

    /// A close frame (§5.5.1) with its status code (§7.4.1: 1002 protocol error, 1008 policy
    /// violation) and no reason text.
    public static func close(code: UInt16, maskingKey: UInt32?) -> [UInt8] {
        frame(fin: true, opcode: .close, payload: [UInt8(code >> 8), UInt8(code & 0xFF)], maskingKey: maskingKey)
    }

    public static let protocolErrorCode: UInt16 = 1002
    public static let policyViolationCode: UInt16 = 1008
}
