import CLibevent
import CNGHTTP2
import HTTP1Codec
import ProxyCore

/// One HTTP/2 connection's framing, HPACK and flow control (libnghttp2), driven from the event loop:
/// bytes in through `receive(from:)`, bytes out through `send(to:highWatermark:)`, events out to the
/// delegate. It owns no socket and decides nothing about a stream: the owner (one per connection,
/// on the loop thread only) does, through the delegate and the submit calls.
///
/// The delegate is called only from inside `receive` and `send`. It may call the submit, reset,
/// resume and consume methods from there, but must not release the session: nghttp2 is still on
/// the stack. `receive` and `send` called from inside a delegate call do nothing (the owner sends
/// after `receive` returns anyway).
final class H2Session {
    enum Role: Sendable { case server, client }

    /// Local settings and limits; the defaults are the ones the proxy runs with.
    struct Settings: Sendable {
        /// SETTINGS_MAX_CONCURRENT_STREAMS we announce (server role: `limits.h2_max_concurrent_streams`).
        var maxConcurrentStreams: Int = 100
        /// SETTINGS_MAX_HEADER_LIST_SIZE we announce and enforce while decoding (RFC 9113 §6.5.2:
        /// name + value + 32 per field), the HTTP/1.1 head limit's counterpart.
        var maxHeaderListSize: Int = 65_536
        /// SETTINGS_INITIAL_WINDOW_SIZE: how far a peer may send ahead on one stream before we
        /// `consume`. 256 KiB matches the engine's per-direction buffer, so a stream's unforwarded
        /// bytes never exceed what the HTTP/1.1 path would hold for one exchange.
        var streamWindow: Int = 256 * 1024
        /// The connection window (all streams together). Above the 64 KiB default so one upload is
        /// not capped at 64 KiB in flight. It is credited as DATA arrives, not as it is forwarded:
        /// what a connection holds is bounded by its streams' windows, and one stream whose far
        /// side stopped reading must not starve the others.
        var connectionWindow: Int = 1024 * 1024
        /// CONTINUATION frames nghttp2 accepts after one HEADERS before it ends the connection: a
        /// backstop only. The flood guard (`H2FloodGuard.maxContinuationFrames`, 16) decides first,
        /// so the log says `continuation_flood`; nghttp2's own limit catches what it would miss.
        var maxContinuations: Int = 2 * H2FloodGuard.maxContinuationFrames
        /// Lowercase names of fields we send that are never added to the HPACK table (RFC 7541
        /// §7.1.3): credentials whatever the peer could learn by probing compressed sizes. The
        /// owner adds the names of the fields it injects credentials into.
        var neverIndexedNames: Set<String> = H2OutgoingFields.credentialNames
    }

    let role: Role
    let settings: Settings
    weak var delegate: H2SessionDelegate?

    /// Nil only if nghttp2 could not allocate (then every call is a no-op and `wantsRead` is false).
    private(set) var session: OpaquePointer?
    /// The header block being decoded: HEADERS and its CONTINUATIONs are contiguous on a
    /// connection (RFC 9113 §6.10), so there is at most one.
    var block: H2HeaderBlock?
    /// Request bytes delivered through `h2Data` and not yet `consume`d, per stream: released at
    /// connection level when the stream closes, so a stream the owner dropped never holds the
    /// connection window.
    var unconsumed: [Int32: Int] = [:]
    /// Streams the owner reset: their RST_STREAM is not a rejection.
    var ownResets: Set<Int32> = []
    /// Why nghttp2 (or the header list limit) rejected a stream, reported with its RST_STREAM.
    var rejectionReasons: [Int32: String] = [:]
    /// Streams open in nghttp2 that the owner knows of (requests received, requests submitted).
    var openStreams: Set<Int32> = []
    /// Set when `h2FrameStarted` said no: the callback failure that follows is the guard's.
    var stoppedByGuard = false
    /// Set when the owner (or the guard) asked for GOAWAY: any other GOAWAY is nghttp2's own.
    var goAwayByOwner = false
    /// The last protocol error nghttp2 reported, for a stream or the connection (fixed library text
    /// and at most a field name, never a value). When the session ends without the owner asking
    /// (`wantsRead` and `wantsWrite` false after a GOAWAY nghttp2 sent), this says why.
    private(set) var lastProtocolError: String?
    /// Set once nghttp2 sent a GOAWAY of its own (a connection error, its own flood or reset
    /// limits): why, in the same fixed words as `lastProtocolError`. The owner says it once when
    /// the connection closes, since nothing else reports such an end.
    private(set) var endedByLibrary: String?
    private var processing = false
    /// nghttp2 is on the stack (inside `receive` or `send`): the owner must not free the session
    /// or close its connection now; it flushes once the call returns.
    var isProcessing: Bool { processing }

    init(role: Role, settings: Settings = Settings(), delegate: H2SessionDelegate? = nil) {
        self.role = role
        self.settings = settings
        self.delegate = delegate
        session = H2SessionCallbacks.makeSession(role: role, settings: settings, owner: self)
        if session != nil { submitLocalSettings() }
    }

    deinit {
        if let session { nghttp2_session_del(session) }
    }

    // MARK: Driving

    /// Feeds every buffered byte to nghttp2 and drains it. Nil: all was taken (frames may now be
    /// waiting for `send`). A failure means the connection is over: `send` once more to flush the
    /// GOAWAY nghttp2 queued, then close.
    @discardableResult
    func receive(from input: OpaquePointer) -> H2SessionFailure? {
        guard let session, !processing else { return nil }
        processing = true
        defer { processing = false }
        while let extent = EventBuffer.firstExtent(input) {
            guard nghttp2_session_want_read(session) != 0 else {
                // The session is over (GOAWAY sent or received and no stream left): nothing more is read.
                evbuffer_drain(input, EventBuffer.length(input))
                return nil
            }
            let taken = nghttp2_session_mem_recv(session, extent.baseAddress?.assumingMemoryBound(to: UInt8.self), extent.count)
            if taken < 0 {
                evbuffer_drain(input, EventBuffer.length(input))
                return H2SessionFailure(libraryCode: Int(taken), stoppedByGuard: stoppedByGuard)
            }
            evbuffer_drain(input, Int(taken))
            if Int(taken) < extent.count { break }  // only with NGHTTP2_ERR_PAUSE, which we never use
        }
        return nil
    }

    /// Serializes pending frames into `output` while it holds less than `highWatermark` bytes (a
    /// peer that does not read bounds our memory: one frame past the mark at most). Call again
    /// when the output drains. A failure means the connection is over.
    @discardableResult
    func send(to output: OpaquePointer, highWatermark: Int) -> H2SessionFailure? {
        guard let session, !processing else { return nil }
        processing = true
        defer { processing = false }
        while EventBuffer.length(output) < highWatermark {
            var chunk: UnsafePointer<UInt8>?
            let count = nghttp2_session_mem_send(session, &chunk)
            if count < 0 { return H2SessionFailure(libraryCode: Int(count), stoppedByGuard: false) }
            guard count > 0, let chunk else { break }
            evbuffer_add(output, chunk, Int(count))
        }
        return nil
    }

    /// Whether nghttp2 still reads. Both `wantsRead` and `wantsWrite` false: the session is over.
    var wantsRead: Bool { session.map { nghttp2_session_want_read($0) != 0 } ?? false }
    /// Whether frames are waiting. A deferred body is not counted: `resumeData` brings it back.
    var wantsWrite: Bool { session.map { nghttp2_session_want_write($0) != 0 } ?? false }

    // MARK: Submitting

    /// A final response. `hasBody` false: END_STREAM on HEADERS; true: the body comes from
    /// `h2ReadBody`. False if nghttp2 refused (the stream is gone: the peer reset it).
    @discardableResult
    func submitResponse(stream: Int32, status: Int, fields: [H2HeaderField], hasBody: Bool) -> Bool {
        guard let session, (200...999).contains(status) else { return false }
        let block = H2OutgoingFields(status: status, fields: fields.map { ($0.name, $0.value) }, neverIndexed: settings.neverIndexedNames)
        return block.withNameValues { nva, count in
            var provider = H2SessionCallbacks.bodyProvider
            return hasBody
                ? nghttp2_submit_response(session, stream, nva, count, &provider) == 0
                : nghttp2_submit_response(session, stream, nva, count, nil) == 0
        }
    }

    @discardableResult
    func submitResponse(stream: Int32, status: Int, fields: HTTPFields, hasBody: Bool) -> Bool {
        submitResponse(stream: stream, status: status, fields: fields.map { H2HeaderField(name: $0.name, value: $0.value) }, hasBody: hasBody)
    }

    /// An interim response (1xx but 101, which HTTP/2 has no use for: RFC 9113 §8.6).
    @discardableResult
    func submitInterim(stream: Int32, status: Int, fields: [H2HeaderField] = []) -> Bool {
        guard let session, (100...199).contains(status), status != 101 else { return false }
        let block = H2OutgoingFields(status: status, fields: fields.map { ($0.name, $0.value) }, neverIndexed: settings.neverIndexedNames)
        return block.withNameValues { nva, count in
            nghttp2_submit_headers(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream, nil, nva, count, nil) >= 0
        }
    }

    /// Trailers that end the stream. Prefer `.end(_, trailers:)` from `h2ReadBody`, which sends
    /// them right after the last DATA; this is for a stream whose body the owner ended otherwise.
    @discardableResult
    func submitTrailers(stream: Int32, fields: [H2HeaderField]) -> Bool {
        guard let session else { return false }
        let block = H2OutgoingFields(status: nil, fields: fields.map { ($0.name, $0.value) }, neverIndexed: settings.neverIndexedNames)
        return block.withNameValues { nva, count in nghttp2_submit_trailer(session, stream, nva, count) == 0 }
    }

    /// A request (client role): `fields` carries the pseudo-header fields (`:method`, `:scheme`,
    /// `:authority`, `:path`), sent first whatever their place. The new stream id, or a negative
    /// nghttp2 error (no stream ids left, the session is going away).
    func submitRequest(fields: [H2HeaderField], hasBody: Bool) -> Int32 {
        guard let session, role == .client else { return Int32(NGHTTP2_ERR_INVALID_STATE.rawValue) }
        let block = H2OutgoingFields(status: nil, fields: fields.map { ($0.name, $0.value) }, neverIndexed: settings.neverIndexedNames)
        let stream = block.withNameValues { nva, count in
            var provider = H2SessionCallbacks.bodyProvider
            return hasBody
                ? nghttp2_submit_request(session, nil, nva, count, &provider, nil)
                : nghttp2_submit_request(session, nil, nva, count, nil, nil)
        }
        if stream > 0 { openStreams.insert(stream) }
        return stream
    }

    /// Puts a stream whose `h2ReadBody` answered `.deferred` back in the send queue.
    func resumeData(stream: Int32) {
        guard let session else { return }
        _ = nghttp2_session_resume_data(session, stream)
    }

    /// RST_STREAM with `code` (an RFC 9113 §7 error code). The owner's own resets are not reported
    /// as rejections.
    func reset(stream: Int32, code: UInt32) {
        guard let session else { return }
        if nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream, code) == 0 {
            ownResets.insert(stream)
        }
    }

    /// A graceful GOAWAY: streams up to the last one nghttp2 processed still finish; no new ones.
    /// `debug` goes to the peer: never put a secret or a field value in it.
    func goAway(code: UInt32, debug: String = "") {
        guard let session else { return }
        goAwayByOwner = true
        let last = nghttp2_session_get_last_proc_stream_id(session)
        var bytes = Array(debug.utf8.prefix(256))
        _ = bytes.withUnsafeMutableBufferPointer { debugBytes in
            nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), last, code, debugBytes.baseAddress, debugBytes.count)
        }
    }

    /// GOAWAY and the end of the session once it is sent: no stream finishes.
    func terminate(code: UInt32) {
        guard let session else { return }
        goAwayByOwner = true
        _ = nghttp2_session_terminate_session(session, code)
    }

    /// Raises one stream's receive window to `size` (client role: a stream whose reader may hold
    /// more than the initial stream window). Call before any DATA of the stream arrived (at its
    /// response HEADERS): the origin is then sent exactly the difference as WINDOW_UPDATE.
    func raiseStreamWindow(stream: Int32, to size: Int) {
        guard let session, size > settings.streamWindow else { return }
        _ = nghttp2_session_set_local_window_size(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream, Int32(clamping: size))
    }

    /// The owner forwarded `bytes` of a stream's body: the peer may send as much again on that
    /// stream (the connection window was credited on receipt, `dataReceived`). Counts beyond what
    /// was delivered are ignored.
    func consume(stream: Int32, bytes: Int) {
        guard let session, bytes > 0, let pending = unconsumed[stream] else { return }
        let count = min(bytes, pending)
        unconsumed[stream] = pending - count
        _ = nghttp2_session_consume_stream(session, stream, count)
    }

    // MARK: Queries

    /// The peer's SETTINGS_MAX_CONCURRENT_STREAMS (before its SETTINGS arrive: nghttp2's initial
    /// assumption, unlimited in 1.52). A client-role owner opens no more streams than this.
    var remoteMaxConcurrentStreams: Int {
        session.map { Int(nghttp2_session_get_remote_settings($0, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS)) } ?? 0
    }

    /// Streams open: requests received (server role) or submitted (client role) and not closed.
    var streamCount: Int { openStreams.count }

    // MARK: Internals

    private func submitLocalSettings() {
        guard let session else { return }
        var entries = [
            nghttp2_settings_entry(
                settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: UInt32(clamping: settings.maxConcurrentStreams)),
            nghttp2_settings_entry(
                settings_id: Int32(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE.rawValue), value: UInt32(clamping: settings.maxHeaderListSize)),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: UInt32(clamping: settings.streamWindow)),
            // RFC 9218: no RFC 7540 priority tree to build or keep for the peer's PRIORITY frames.
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES.rawValue), value: 1),
        ]
        if role == .client {
            entries.append(nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_PUSH.rawValue), value: 0))
        } else {
            // RFC 8441 §3: clients may send extended CONNECT (`:protocol`), which is how a WebSocket
            // rides an HTTP/2 stream (docs/http2.md); nghttp2 then accepts `:protocol` on CONNECT.
            entries.append(nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL.rawValue), value: 1))
        }
        _ = nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), entries, entries.count)
        _ = nghttp2_session_set_local_window_size(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, Int32(clamping: settings.connectionWindow))
    }

    func noteProtocolError(_ text: String) { lastProtocolError = text }

    func noteEndedByLibrary(_ text: String) {
        noteProtocolError(text)
        if endedByLibrary == nil { endedByLibrary = text }
    }
}

/// What `h2ReadBody` gives nghttp2 for one DATA frame.
enum H2BodyRead: Equatable, Sendable {
    /// That many bytes were written into the buffer (0 is taken as `.deferred`: an empty DATA
    /// frame would be a wasted frame the peer may count as a flood).
    case bytes(Int)
    /// Nothing yet: the owner calls `resumeData(stream:)` when it has bytes or the end.
    case deferred
    /// The last bytes (possibly 0), then END_STREAM; with trailers, END_STREAM goes on them.
    case end(Int, trailers: [H2HeaderField]?)
}

/// What the frames of one header block are: the owner maps them to an exchange's events.
enum H2HeadersKind: Equatable, Sendable {
    case request, response, interim, trailers
}

/// A frame type as it came off the wire (extension types included: RFC 9113 §5.5).
struct H2FrameType: RawRepresentable, Equatable, Hashable, Sendable {
    let rawValue: UInt8

    static let data = H2FrameType(rawValue: 0x0)
    static let headers = H2FrameType(rawValue: 0x1)
    static let priority = H2FrameType(rawValue: 0x2)
    static let rstStream = H2FrameType(rawValue: 0x3)
    static let settings = H2FrameType(rawValue: 0x4)
    static let pushPromise = H2FrameType(rawValue: 0x5)
    static let ping = H2FrameType(rawValue: 0x6)
    static let goAway = H2FrameType(rawValue: 0x7)
    static let windowUpdate = H2FrameType(rawValue: 0x8)
    static let continuation = H2FrameType(rawValue: 0x9)
}

/// Events from one `H2Session`, on the loop thread, from inside `receive` or `send`.
protocol H2SessionDelegate: AnyObject {
    /// Every frame header, CONTINUATION included, before its payload (the flood guard's count).
    /// False: the session queues GOAWAY (ENHANCE_YOUR_CALM), reads nothing more and `receive`
    /// returns `.stoppedByGuard`.
    func h2FrameStarted(_ session: H2Session, type: H2FrameType, flags: UInt8, stream: Int32, length: Int) -> Bool
    /// A whole header block, after END_HEADERS, within the header list limit and past nghttp2's
    /// HTTP messaging checks. `endStream`: the block carried END_STREAM (`h2StreamEnded` follows).
    func h2Headers(_ session: H2Session, stream: Int32, fields: [H2HeaderField], endStream: Bool, kind: H2HeadersKind)
    /// A chunk of DATA payload; the owner calls `consume(stream:bytes:)` once it forwarded it.
    func h2Data(_ session: H2Session, stream: Int32, bytes: UnsafeRawBufferPointer)
    /// END_STREAM from the peer, once per stream, after the frame's headers or data.
    func h2StreamEnded(_ session: H2Session, stream: Int32)
    /// The stream is closed (both ends, or a reset either way); `code` is the RST_STREAM or
    /// GOAWAY code (0: closed normally). Also for streams the owner never saw (refused ones).
    func h2StreamClosed(_ session: H2Session, stream: Int32, code: UInt32)
    /// nghttp2 (its HTTP messaging checks, its stream limits) or the header list limit reset a
    /// stream on its own, when its RST_STREAM goes out; `reason` is for the log (fixed text and
    /// at most a field name: never a value). `h2StreamClosed` follows.
    func h2StreamRejected(_ session: H2Session, stream: Int32, reason: String)
    /// The next DATA payload of a stream whose response (or request) was submitted with a body.
    func h2ReadBody(_ session: H2Session, stream: Int32, into buffer: UnsafeMutableRawBufferPointer) -> H2BodyRead
    /// The peer sent GOAWAY: no stream above `lastStream` will be processed.
    func h2GoAwayReceived(_ session: H2Session, lastStream: Int32, code: UInt32)
}

extension H2SessionDelegate {
    func h2GoAwayReceived(_ session: H2Session, lastStream: Int32, code: UInt32) {}
}

/// Why a session ended (typed; `code` is the log's fixed value).
enum H2SessionFailure: Error, Equatable, Sendable {
    /// The first bytes were not the HTTP/2 connection preface (server role).
    case notHTTP2Preface
    /// `h2FrameStarted` said no.
    case stoppedByGuard
    /// nghttp2's own flood limits (SETTINGS/PING ACKs piling up, too many CONTINUATIONs or SETTINGS entries).
    case flooded
    /// Any other library failure (out of memory, a callback failure), by nghttp2 error code.
    case library(code: Int)

    init(libraryCode: Int, stoppedByGuard: Bool) {
        switch libraryCode {
        case Int(NGHTTP2_ERR_BAD_CLIENT_MAGIC.rawValue): self = .notHTTP2Preface
        case Int(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue) where stoppedByGuard: self = .stoppedByGuard
        case Int(NGHTTP2_ERR_FLOODED.rawValue), Int(NGHTTP2_ERR_TOO_MANY_CONTINUATIONS.rawValue), Int(NGHTTP2_ERR_TOO_MANY_SETTINGS.rawValue):
            self = .flooded
        default: self = .library(code: libraryCode)
        }
    }

    /// The log's value.
    var code: String {
        switch self {
        case .notHTTP2Preface: "h2_bad_preface"
        case .stoppedByGuard: "h2_guard"
        case .flooded: "h2_flood"
        case .library: "h2_library_error"
        }
    }

    var description: String {
        switch self {
        case .notHTTP2Preface: "the connection did not start with the HTTP/2 preface"
        case .stoppedByGuard: "the connection's frames went over a limit"
        case .flooded: "the peer flooded the connection (nghttp2 limit)"
        case .library(let code): "nghttp2: \(String(cString: nghttp2_strerror(Int32(clamping: code))))"
        }
    }
}
