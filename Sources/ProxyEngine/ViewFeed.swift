import HTTP1Codec
import JSONText
import PosixSupport
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// One exchange's record for the live decision view (docs/view.md): a complete JSON object,
/// already redacted and tripwire-scrubbed by whoever built it, and the keys the `/view/events`
/// filters match on.
public struct ViewEntry: Sendable {
    /// The record: a JSON object (`{...}`) without the feed's `seq`, which the feed adds.
    public var json: [UInt8]
    /// The configured client's name (`client_id`), or nil.
    public var clientID: String?
    /// The client's address (`127.0.0.1:5000`).
    public var clientAddress: String
    /// `host:port` of the origin, or nil when the request named none readable.
    public var origin: String?

    public init(json: [UInt8], clientID: String?, clientAddress: String, origin: String?) {
        self.json = json
        self.clientID = clientID
        self.clientAddress = clientAddress
        self.origin = origin
    }
}

/// Immutable bytes shared by every viewer's output: libevent holds a reference (`evbuffer_add_reference`)
/// per viewer and releases it when those bytes have gone to the socket or the viewer is closed, so
/// 100 viewers of one record cost one copy of it.
final class SharedBytes: @unchecked Sendable {
    let base: UnsafeMutableRawPointer
    let count: Int

    /// One SSE event for a record: `id: SEQ\ndata: {"seq":SEQ,` then the record after its `{`,
    /// then a blank line. A raw line break in the record (in valid JSON only whitespace) becomes a
    /// space: it would end the data line.
    init(seq: UInt64, record: UnsafeRawBufferPointer) {
        var digits: [UInt8] = []
        JSONLine.appendDecimal(seq, to: &digits)
        let body = UnsafeRawBufferPointer(rebasing: record.dropFirst())
        let isEmptyObject = body.first { $0 != 0x20 && $0 != 0x09 && $0 != 0x0A && $0 != 0x0D } == UInt8(ascii: "}")
        let idPrefix = "id: ", dataPrefix = "\ndata: {\"seq\":"
        count = idPrefix.utf8.count + 2 * digits.count + dataPrefix.utf8.count + (isEmptyObject ? 0 : 1) + body.count + 2
        base = .allocate(byteCount: count, alignment: 1)
        var offset = 0
        func append(_ bytes: UnsafeRawBufferPointer) {
            guard let source = bytes.baseAddress, !bytes.isEmpty else { return }
            (base + offset).copyMemory(from: source, byteCount: bytes.count)
            offset += bytes.count
        }
        var prefix = Array(idPrefix.utf8) + digits + Array(dataPrefix.utf8) + digits
        if !isEmptyObject { prefix.append(UInt8(ascii: ",")) }
        prefix.withUnsafeBytes { append($0) }
        let bodyStart = offset
        append(body)
        for lineBreak: UInt8 in [0x0A, 0x0D] {
            var cursor = bodyStart
            while cursor < offset, let found = memchr(base + cursor, Int32(lineBreak), offset - cursor) {
                found.storeBytes(of: 0x20, as: UInt8.self)
                cursor = found - base + 1
            }
        }
        (base + offset).storeBytes(of: 0x0A, as: UInt8.self)
        (base + offset + 1).storeBytes(of: 0x0A, as: UInt8.self)
    }

    /// Several blocks' bytes as one block (a batch of records for one group of viewers).
    init(joining blocks: [SharedBytes]) {
        count = blocks.reduce(0) { $0 + $1.count }
        base = .allocate(byteCount: max(count, 1), alignment: 1)
        var offset = 0
        for block in blocks {
            (base + offset).copyMemory(from: block.base, byteCount: block.count)
            offset += block.count
        }
    }

    var bytes: [UInt8] { Array(UnsafeRawBufferPointer(start: base, count: count)) }

    deinit { base.deallocate() }
}

/// One published record as the SSE stream carries it (`id: SEQ\ndata: JSON\n\n`), with the keys
/// the filters read.
struct ViewEvent: Sendable {
    let seq: UInt64
    let frame: SharedBytes
    let clientID: String?
    let clientAddress: String
    let origin: String?
}

/// The recent records a new viewer is sent first: at most `maxRecords` and `maxBytes` of frames, so
/// a replay always fits well under the 1 MiB a viewer may fall behind before it is dropped.
struct ViewRing {
    static let maxRecords = 500
    static let maxBytes = 512 * 1024

    private var slots: [ViewEvent?] = Array(repeating: nil, count: ViewRing.maxRecords)
    /// Index of the oldest record.
    private var head = 0
    private(set) var count = 0
    private(set) var bytes = 0

    mutating func append(_ event: ViewEvent) {
        if count == Self.maxRecords { dropOldest() }
        slots[(head + count) % Self.maxRecords] = event
        count += 1
        bytes += event.frame.count
        // The newest record always stays (the feed bounds one record's size well below maxBytes).
        while bytes > Self.maxBytes, count > 1 { dropOldest() }
    }

    private mutating func dropOldest() {
        bytes -= slots[head]?.frame.count ?? 0
        slots[head] = nil
        head = (head + 1) % Self.maxRecords
        count -= 1
    }

    /// The records with a sequence number above `seq`, oldest first.
    func events(after seq: UInt64) -> [ViewEvent] {
        var result: [ViewEvent] = []
        for offset in 0..<count {
            guard let event = slots[(head + offset) % Self.maxRecords], event.seq > seq else { continue }
            result.append(event)
        }
        return result
    }
}

/// What a viewer asked to see (`/view/events?client=C&origin=O`, docs/view.md). Parsed from the
/// query; matching is plain comparison, no pattern.
struct ViewFilter: Hashable, Sendable {
    /// A client's configured name, its address (`127.0.0.1:5000`) or the address's host (`127.0.0.1`).
    var client: String?
    /// A host (lowercased; IPv6 in brackets) and, unless any port matches, a port.
    var originHost: String?
    var originPort: UInt16?

    static let everything = ViewFilter()

    var isEverything: Bool { client == nil && originHost == nil }

    /// `host:port`, `host` (any port) or `scheme://host[:port]` (the scheme's default port).
    static func origin(_ text: String) -> (host: String, port: UInt16?)? {
        if text.contains("://") {
            guard let origin = try? Origin.parse(text) else { return nil }
            return (origin.host, origin.port)
        }
        guard let (host, port) = try? RequestTarget.parseAuthority(Substring(text)) else { return nil }
        return (host.normalized, port)
    }

    func matches(_ event: ViewEvent) -> Bool {
        if let client, event.clientID != client, event.clientAddress != client, Self.host(ofAddress: event.clientAddress) != client {
            return false
        }
        if let originHost {
            guard let origin = event.origin, let colon = origin.lastIndex(of: ":") else { return false }
            guard asciiEqualsIgnoringCase(origin[..<colon], lowercase: originHost) else { return false }
            if let originPort, origin[origin.index(after: colon)...] != Substring(String(originPort)) { return false }
        }
        return true
    }

    /// `127.0.0.1` of `127.0.0.1:5000`, `::1` and `[::1]` of `[::1]:5000` (compared both ways).
    static func host(ofAddress address: String) -> String {
        guard let colon = address.lastIndex(of: ":") else { return address }
        return String(address[..<colon])
    }
}

/// `text` equals `lowercase` (already lowercase), ASCII letters compared without case.
func asciiEqualsIgnoringCase<Text: StringProtocol>(_ text: Text, lowercase: String) -> Bool {
    guard text.utf8.count == lowercase.utf8.count else { return false }
    for (byte, expected) in zip(text.utf8, lowercase.utf8) {
        let lowered = (byte >= 0x41 && byte <= 0x5A) ? byte | 0x20 : byte
        guard lowered == expected else { return false }
    }
    return true
}

/// The records the admin listener streams to viewers (`/view/events`, docs/view.md). Workers
/// publish; the admin thread fans out. `publish` costs a lock around an append (and, when the
/// admin thread has viewers and is not already woken, one `event_active`): a viewer never slows a
/// worker, whatever it does.
public final class ViewFeed: Sendable {
    /// Records waiting for the admin thread, at most this many bytes: past it every viewer is that
    /// far behind, the same limit a slow viewer is dropped at, and they are all dropped (counted).
    static let maxPendingBytes = 1 << 20
    /// A record larger than this is replaced by a short one saying so: a replay must stay bounded.
    static let maxRecordBytes = 256 * 1024

    struct State {
        var seq: UInt64 = 0
        var ring = ViewRing()
        /// Published since the admin thread last took them; only while it has viewers.
        var pending: [ViewEvent] = []
        var pendingBytes = 0
        /// Records were lost between the admin thread's takes (`maxPendingBytes`).
        var lost = false
        var hasViewers = false
        /// Wakes the admin loop (`event_active`); called with the lock held, so `detach` followed
        /// by freeing the event can never race a worker's call.
        var waker: (@Sendable () -> Void)?
        var woken = false
    }

    private let state = Locked(State())
    private let metrics: Metrics?
    /// Until when (monotonic microseconds) exchanges are recorded: `UInt64.max` while a viewer is
    /// attached, then `recordingGrace` longer (a page reload or a `tail` reconnect finds what
    /// happened meanwhile). Read by workers without the lock: one load per exchange.
    private let recordingUntil = Atomic<UInt64>(0)
    /// How long records are still made after the last viewer left.
    static let recordingGrace: UInt64 = 5 * 60 * 1_000_000

    /// Whether an exchange that ends now should be rendered and published. Rendering a record
    /// costs about as much as the exchange itself (docs/view.md), so a proxy whose view nobody
    /// opens pays nothing for it: records are made while a viewer is attached and for
    /// `recordingGrace` after the last one left, and the ring replays those.
    public var isRecording: Bool {
        let until = recordingUntil.load(ordering: .relaxed)
        return until == .max || (until != 0 && until > monotonicMicroseconds())
    }

    /// `metrics`: counts published records (`scopeproxy_view_records_published_total`).
    public init(metrics: Metrics? = nil) {
        self.metrics = metrics
    }

    /// Called on a worker thread as each exchange's line is written. Never blocks on a viewer.
    /// An entry whose JSON is not an object is not published.
    public func publish(_ entry: ViewEntry) {
        guard entry.json.first == UInt8(ascii: "{") else { return }
        var json = entry.json
        if json.count > Self.maxRecordBytes {
            json = Array(#"{"omitted":"record over the view's size limit","bytes":\#(json.count)}"#.utf8)
        }
        metrics?.viewRecordsPublished.add(1, ordering: .relaxed)
        state.withLock { state in
            state.seq += 1
            let seq = state.seq
            let frame = json.withUnsafeBytes { SharedBytes(seq: seq, record: $0) }
            let event = ViewEvent(
                seq: state.seq, frame: frame, clientID: entry.clientID, clientAddress: entry.clientAddress, origin: entry.origin)
            state.ring.append(event)
            guard state.hasViewers else { return }
            if state.lost || state.pendingBytes + frame.count > Self.maxPendingBytes {
                state.lost = true
                state.pending.removeAll()
                state.pendingBytes = 0
            } else {
                state.pending.append(event)
                state.pendingBytes += frame.count
            }
            if !state.woken, let waker = state.waker {
                state.woken = true
                waker()
            }
        }
    }

    /// The sequence number of the newest record (0: none yet).
    var newestSeq: UInt64 { state.withLock { $0.seq } }

    // MARK: The admin thread's side

    func attach(waker: @escaping @Sendable () -> Void) {
        state.withLock { $0.waker = waker }
    }

    /// After this returns no worker calls the waker again (the admin server then frees its event).
    func detach() {
        state.withLock { state in
            state.waker = nil
            state.hasViewers = false
            state.pending.removeAll()
            state.pendingBytes = 0
        }
    }

    /// What was published since the last take; `lost`: records were dropped in between (every
    /// viewer missed them).
    func takePending() -> (events: [ViewEvent], lost: Bool) {
        state.withLock { state in
            defer {
                state.pending.removeAll(keepingCapacity: true)
                state.pendingBytes = 0
                state.lost = false
                state.woken = false
            }
            return (state.pending, state.lost)
        }
    }

    /// A new viewer: under one lock, what is pending for the viewers already there, and the replay
    /// for the new one (the ring after `lastEventID`; all of it without one, or when `lastEventID`
    /// is past the newest record, a previous run's). Every record after that reaches it as pending.
    func join(after lastEventID: UInt64?) -> (pending: [ViewEvent], lost: Bool, replay: [ViewEvent]) {
        state.withLock { state in
            defer {
                state.pending.removeAll(keepingCapacity: true)
                state.pendingBytes = 0
                state.lost = false
                state.woken = false
                state.hasViewers = true
            }
            recordingUntil.store(.max, ordering: .relaxed)
            let after = lastEventID.map { $0 > state.seq ? 0 : $0 } ?? 0
            return (state.pending, state.lost, state.ring.events(after: after))
        }
    }

    /// The last viewer left: records are no longer queued for the admin thread.
    func viewersGone() {
        recordingUntil.store(monotonicMicroseconds() + Self.recordingGrace, ordering: .relaxed)
        state.withLock { state in
            state.hasViewers = false
            state.pending.removeAll()
            state.pendingBytes = 0
            state.lost = false
        }
    }
}
