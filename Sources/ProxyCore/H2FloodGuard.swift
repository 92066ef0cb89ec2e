/// What an HTTP/2 client sends on one connection, counted to tell a client from a flood: the
/// known HTTP/2 denials of service cost the server work for every small frame a client sends
/// (an answer to queue, a stream to set up and tear down, a header block to decode), so each kind
/// of frame that costs without being useful has a budget. Useful work refills it (a stream opened
/// or answered, DATA with payload, response DATA sent), as nginx and Go's x/net/http2 do; a
/// client that spends a budget faster than it does useful work ends its connection with GOAWAY
/// (ENHANCE_YOUR_CALM) and a fixed code for the log (`H2Violation.code`). Other connections are
/// untouched.
///
/// Pure counters: no clock, no socket. Every count is bounded (saturating, or decayed), so no
/// input, however long the connection or large a frame length, makes the arithmetic trap.
public struct H2FloodGuard: Sendable {
    /// Whether the connection goes on.
    public enum Verdict: Sendable, Equatable {
        case proceed
        /// End the connection: GOAWAY with `violation.errorCode`, one log line with `violation.code`.
        case goAway(H2Violation)
    }

    // MARK: Thresholds (and why each value)

    /// Rapid reset (CVE-2023-44487): a client opens streams and resets them at once, so the
    /// server starts work (an origin request) that it never gets to answer. Tripped when more than
    /// this many streams were reset by the client before their response ended ...
    public static let rapidResetMinimum = 100
    /// ... and they are more than half of the streams it opened: a client cancelling a few
    /// requests (a browser leaving a page, a gRPC deadline) stays far below both.
    static let rapidResetWindow = 1_024
    /// CONTINUATION flood (CVE-2024-27316): one header block split into endless CONTINUATION
    /// frames, each buffered or decoded before the block ends. Real clients send a block in one
    /// HEADERS frame, or a few CONTINUATIONs when it is larger than the frame size (16 KiB).
    public static let maxContinuationFrames = 16
    /// A header block larger than this (its compressed bytes, which are never fewer than the
    /// decoded list's names and values count, less a few bytes per field) is refused: the same
    /// 64 KiB as an HTTP/1.1 request head, and as the SETTINGS_MAX_HEADER_LIST_SIZE the proxy sends.
    public static let maxHeaderBlockBytes = 64 * 1024
    /// SETTINGS (CVE-2019-9515), PING (CVE-2019-9512), empty frames (CVE-2019-9518): each costs an
    /// answer or a pass through the session for nothing. A client sends one or two SETTINGS and a
    /// PING now and then (keepalive); 100 in a row with no useful work between is a flood.
    public static let controlBudget = 100
    /// WINDOW_UPDATE: a client sends one for every few DATA frames it reads, so a download makes
    /// many; the budget is refilled by the DATA the proxy sends (`responseDataSent`).
    public static let windowUpdateBudget = 1_000
    /// PRIORITY (CVE-2019-9513, the resource loop): deprecated by RFC 9113, still sent by some
    /// clients for a handful of streams at the start; each stream opened earns a few more.
    public static let priorityBudget = 100
    static let priorityRefillPerStream = 4

    // MARK: State

    /// The first violation, kept: every call after it says it again.
    public private(set) var violation: H2Violation?
    /// Streams opened, and of those reset by the client before their response ended (halved
    /// together once `opened` reaches `rapidResetWindow`: the ratio is of recent streams).
    private(set) var opened = 0
    private(set) var earlyResets = 0
    /// The header block being received: CONTINUATION frames and bytes since its HEADERS.
    private(set) var blockContinuations = 0
    private(set) var blockBytes = 0
    private(set) var settings = Budget(capacity: controlBudget)
    private(set) var pings = Budget(capacity: controlBudget)
    private(set) var emptyFrames = Budget(capacity: controlBudget)
    private(set) var unknownFrames = Budget(capacity: controlBudget)
    private(set) var windowUpdates = Budget(capacity: windowUpdateBudget)
    private(set) var priorities = Budget(capacity: priorityBudget)

    public init() {}

    /// A budget: spending past zero is a flood; useful work refills it up to its capacity.
    struct Budget: Sendable, Equatable {
        let capacity: Int
        private(set) var left: Int

        init(capacity: Int) {
            self.capacity = capacity
            left = capacity
        }

        /// Spends one; false when nothing was left.
        mutating func spend() -> Bool {
            guard left > 0 else { return false }
            left -= 1
            return true
        }

        mutating func refill(_ amount: Int = 1) {
            left = amount >= capacity - left ? capacity : left + max(0, amount)
        }
    }

    // MARK: Input

    /// Every frame the client sends (CONTINUATION included), when its header is read and before
    /// its payload is. `flags` as on the wire; `length` the payload length (any value is read
    /// safely); `stream` is the frame's stream id (0 for the connection), for the engine's log.
    public mutating func frameStarted(_ kind: H2FrameKind, flags: UInt8, stream: Int32, length: Int) -> Verdict {
        if let violation { return .goAway(violation) }
        let length = min(max(0, length), Self.maxHeaderBlockBytes + 1)
        let endStream = flags & H2FrameKind.endStreamFlag != 0
        let endHeaders = flags & H2FrameKind.endHeadersFlag != 0
        switch kind {
        case .data:
            if length > 0 {
                usefulWork()
            } else if !endStream, !emptyFrames.spend() {
                return trip(.emptyFrameFlood)
            }
        case .headers, .pushPromise:
            // A new block starts (a HEADERS inside a block, or a CONTINUATION outside one, is the
            // session's PROTOCOL_ERROR: nghttp2 ends the connection before the guard matters).
            blockContinuations = 0
            blockBytes = length
            if blockBytes > Self.maxHeaderBlockBytes { return trip(.headerListTooLarge) }
            if length == 0, !endStream, !emptyFrames.spend() { return trip(.emptyFrameFlood) }
        case .continuation:
            blockContinuations = min(blockContinuations + 1, Self.maxContinuationFrames + 1)
            blockBytes = min(blockBytes + length, Self.maxHeaderBlockBytes + 1)
            if blockContinuations > Self.maxContinuationFrames { return trip(.continuationFlood) }
            if blockBytes > Self.maxHeaderBlockBytes { return trip(.headerListTooLarge) }
            if length == 0, !endHeaders, !emptyFrames.spend() { return trip(.emptyFrameFlood) }
        case .settings:
            // An ACK answers the proxy's own SETTINGS: it costs nothing.
            if flags & H2FrameKind.ackFlag == 0, !settings.spend() { return trip(.settingsFlood) }
        case .ping:
            if flags & H2FrameKind.ackFlag == 0, !pings.spend() { return trip(.pingFlood) }
        case .windowUpdate:
            if !windowUpdates.spend() { return trip(.windowUpdateFlood) }
        case .priority:
            if !priorities.spend() { return trip(.priorityFlood) }
        case .rstStream, .goAway:
            // Resets are counted per stream (`streamResetByClient`); GOAWAY ends the connection.
            break
        case .unknown:
            // RFC 9113 §5.5: ignored, but each is still read and dispatched.
            if !unknownFrames.spend() { return trip(.unknownFrameFlood) }
        }
        return .proceed
    }

    /// A HEADERS frame opened a new stream.
    public mutating func streamOpened() -> Verdict {
        if let violation { return .goAway(violation) }
        opened += 1
        if opened >= Self.rapidResetWindow {
            opened /= 2
            earlyResets /= 2
        }
        priorities.refill(Self.priorityRefillPerStream)
        usefulWork()
        return .proceed
    }

    /// The client reset a stream (RST_STREAM). `responseEnded`: its response was complete (or
    /// the proxy had reset it first): a late reset costs nothing.
    public mutating func streamResetByClient(responseEnded: Bool) -> Verdict {
        if let violation { return .goAway(violation) }
        guard !responseEnded else { return .proceed }
        earlyResets = min(earlyResets + 1, opened)
        if earlyResets > Self.rapidResetMinimum, earlyResets * 2 > opened { return trip(.rapidReset) }
        return .proceed
    }

    /// A stream's response ended (END_STREAM sent).
    public mutating func streamAnswered() {
        usefulWork()
    }

    /// The proxy sent a DATA frame: the WINDOW_UPDATEs it prompts are useful, and so are the PINGs
    /// a client measures the connection with while it downloads (gRPC's BDP probe answers DATA).
    public mutating func responseDataSent() {
        windowUpdates.refill()
        pings.refill()
    }

    private mutating func usefulWork() {
        settings.refill()
        pings.refill()
        emptyFrames.refill()
        unknownFrames.refill()
        windowUpdates.refill()
    }

    private mutating func trip(_ found: H2Violation) -> Verdict {
        violation = found
        return .goAway(found)
    }
}

/// Why the flood guard ended a connection: a fixed code for the log line and the metrics.
public enum H2Violation: String, Sendable, Equatable, CaseIterable {
    case rapidReset = "rapid_reset"
    case continuationFlood = "continuation_flood"
    case headerListTooLarge = "header_list_too_large"
    case settingsFlood = "settings_flood"
    case pingFlood = "ping_flood"
    case emptyFrameFlood = "empty_frame_flood"
    case windowUpdateFlood = "window_update_flood"
    case priorityFlood = "priority_flood"
    case unknownFrameFlood = "unknown_frame_flood"

    public var code: String { rawValue }

    /// The GOAWAY's code: ENHANCE_YOUR_CALM (RFC 9113 §7, "excessive load") for every flood.
    public var errorCode: H2ErrorCode { .enhanceYourCalm }
}

/// RFC 9113 §6: the frame types (an unknown one is ignored, §5.5, but still counted).
public enum H2FrameKind: Sendable, Equatable {
    case data
    case headers
    case priority
    case rstStream
    case settings
    case pushPromise
    case ping
    case goAway
    case windowUpdate
    case continuation
    case unknown(UInt8)

    public init(type: UInt8) {
        switch type {
        case 0x0: self = .data
        case 0x1: self = .headers
        case 0x2: self = .priority
        case 0x3: self = .rstStream
        case 0x4: self = .settings
        case 0x5: self = .pushPromise
        case 0x6: self = .ping
        case 0x7: self = .goAway
        case 0x8: self = .windowUpdate
        case 0x9: self = .continuation
        default: self = .unknown(type)
        }
    }

    /// END_STREAM (DATA, HEADERS), ACK (SETTINGS, PING), END_HEADERS (HEADERS, CONTINUATION,
    /// PUSH_PROMISE): RFC 9113 §6.
    static let endStreamFlag: UInt8 = 0x1
    static let ackFlag: UInt8 = 0x1
    static let endHeadersFlag: UInt8 = 0x4
}
