import CNGHTTP2
import HTTP1Codec
import ProxyCore

/// The nghttp2 session and its C callbacks. Each callback recovers its `H2Session` from
/// user_data (unretained: the owner keeps the session alive while nghttp2 runs) and calls one
/// method below; nothing a peer sends is force-unwrapped or narrowed with a trapping conversion.
enum H2SessionCallbacks {
    /// The HPACK table our encoder may use, whatever SETTINGS_HEADER_TABLE_SIZE a peer announces:
    /// a peer cannot make us allocate more than the default (RFC 7541 §4.2). Our decoder's table
    /// is bounded by the 4096 we announce (the default, never raised).
    static let maxEncoderTableSize = 4096
    /// The RST_STREAM code for a header list over our limit: the peer keeps sending more than it
    /// was told we take, and a retry would be refused the same way (not REFUSED_STREAM).
    static let headerListResetCode = NGHTTP2_ENHANCE_YOUR_CALM.rawValue

    static func makeSession(role: H2Session.Role, settings: H2Session.Settings, owner: H2Session) -> OpaquePointer? {
        var callbacksPointer: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacksPointer) == 0, let callbacks = callbacksPointer else { return nil }
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_begin_frame_callback(callbacks, onBeginFrame)
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, onBeginHeaders)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, onHeader)
        nghttp2_session_callbacks_set_on_invalid_header_callback(callbacks, onInvalidHeader)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, onFrameReceived)
        nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(callbacks, onInvalidFrame)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, onDataChunk)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, onStreamClose)
        nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, onFrameSent)
        nghttp2_session_callbacks_set_on_frame_not_send_callback(callbacks, onFrameNotSent)
        nghttp2_session_callbacks_set_error_callback2(callbacks, onError)

        var optionPointer: OpaquePointer?
        guard nghttp2_option_new(&optionPointer) == 0, let option = optionPointer else { return nil }
        defer { nghttp2_option_del(option) }
        // The owner consumes what it forwarded: a stream's window follows the far side's progress.
        nghttp2_option_set_no_auto_window_update(option, 1)
        nghttp2_option_set_max_deflate_dynamic_table_size(option, maxEncoderTableSize)
        // No RFC 7540 priority tree: closed streams need not be kept for it.
        nghttp2_option_set_no_closed_streams(option, 1)
        nghttp2_option_set_max_continuations(option, max(0, settings.maxContinuations))

        var session: OpaquePointer?
        let userData = Unmanaged.passUnretained(owner).toOpaque()
        let status =
            switch role {
            case .server: nghttp2_session_server_new2(&session, callbacks, userData, option)
            case .client: nghttp2_session_client_new2(&session, callbacks, userData, option)
            }
        return status == 0 ? session : nil
    }

    /// A data provider whose reads go to the delegate's `h2ReadBody` (the stream id says which).
    static var bodyProvider: nghttp2_data_provider {
        nghttp2_data_provider(source: nghttp2_data_source(ptr: nil), read_callback: readBody)
    }

    private static func owner(_ userData: UnsafeMutableRawPointer?) -> H2Session? {
        guard let userData else { return nil }
        return Unmanaged<H2Session>.fromOpaque(userData).takeUnretainedValue()
    }

    private static func bytes(_ pointer: UnsafePointer<UInt8>?, _ count: Int) -> UnsafeBufferPointer<UInt8> {
        UnsafeBufferPointer(start: count > 0 ? pointer : nil, count: pointer == nil ? 0 : count)
    }

    private static let onBeginFrame: nghttp2_on_begin_frame_callback = { _, header, userData in
        guard let session = owner(userData), let header else { return 0 }
        return session.frameStarted(header.pointee)
    }

    private static let onBeginHeaders: nghttp2_on_begin_headers_callback = { _, frame, userData in
        guard let session = owner(userData), let frame else { return 0 }
        session.headersStarted(frame)
        return 0
    }

    private static let onHeader: nghttp2_on_header_callback = { _, frame, name, nameLength, value, valueLength, _, userData in
        guard let session = owner(userData), let frame else { return 0 }
        return session.headerField(frame, name: bytes(name, nameLength), value: bytes(value, valueLength))
    }

    private static let onInvalidHeader: nghttp2_on_invalid_header_callback = { _, frame, name, nameLength, _, _, _, userData in
        guard let session = owner(userData), let frame else { return sp_nghttp2_err_temporal_callback_failure() }
        return session.invalidHeaderField(frame, name: bytes(name, nameLength))
    }

    private static let onFrameReceived: nghttp2_on_frame_recv_callback = { _, frame, userData in
        guard let session = owner(userData), let frame else { return 0 }
        session.frameReceived(frame)
        return 0
    }

    private static let onInvalidFrame: nghttp2_on_invalid_frame_recv_callback = { _, frame, libraryCode, userData in
        guard let session = owner(userData), let frame else { return 0 }
        session.invalidFrameReceived(frame, libraryCode: libraryCode)
        return 0
    }

    private static let onDataChunk: nghttp2_on_data_chunk_recv_callback = { _, _, stream, data, length, userData in
        guard let session = owner(userData) else { return 0 }
        session.dataReceived(stream: stream, bytes: UnsafeRawBufferPointer(bytes(data, length)))
        return 0
    }

    private static let onStreamClose: nghttp2_on_stream_close_callback = { _, stream, code, userData in
        guard let session = owner(userData) else { return 0 }
        session.streamClosed(stream: stream, code: code)
        return 0
    }

    private static let onFrameSent: nghttp2_on_frame_send_callback = { _, frame, userData in
        guard let session = owner(userData), let frame else { return 0 }
        session.frameSent(frame)
        return 0
    }

    private static let onFrameNotSent: nghttp2_on_frame_not_send_callback = { _, frame, libraryCode, userData in
        guard let session = owner(userData), let frame else { return 0 }
        session.frameNotSent(frame, libraryCode: libraryCode)
        return 0
    }

    private static let onError: nghttp2_error_callback2 = { _, libraryCode, message, length, userData in
        guard let session = owner(userData), let message else { return 0 }
        let text = String(decoding: UnsafeRawBufferPointer(start: message, count: length), as: UTF8.self)
        session.libraryError(libraryCode, message: text)
        return 0
    }

    private static let readBody: nghttp2_data_source_read_callback = { _, stream, buffer, length, flags, _, userData in
        guard let session = owner(userData), let flags else { return Int(sp_nghttp2_err_temporal_callback_failure()) }
        return session.readBody(
            stream: stream, into: UnsafeMutableRawBufferPointer(start: length > 0 ? buffer : nil, count: buffer == nil ? 0 : length), flags: flags)
    }
}

// The callbacks' work, on the session (state lives there).
extension H2Session {
    func frameStarted(_ header: nghttp2_frame_hd) -> Int32 {
        guard let delegate else { return 0 }
        let length = Int(header.length)
        if delegate.h2FrameStarted(self, type: H2FrameType(rawValue: header.type), flags: header.flags, stream: header.stream_id, length: length) {
            return 0
        }
        stoppedByGuard = true
        goAwayByOwner = true
        if let session { _ = nghttp2_session_terminate_session(session, NGHTTP2_ENHANCE_YOUR_CALM.rawValue) }
        return sp_nghttp2_err_callback_failure()
    }

    func headersStarted(_ frame: UnsafePointer<nghttp2_frame>) {
        let category = sp_nghttp2_frame_headers_category(frame)
        // Push is off in the client role (ENABLE_PUSH 0); a PUSH_PROMISE is nghttp2's error to answer.
        guard category != sp_nghttp2_hcat_push_response() else { return }
        let stream = sp_nghttp2_frame_stream(frame)
        let isRequest = category == sp_nghttp2_hcat_request()
        block = H2HeaderBlock(stream: stream, isRequest: isRequest)
        if isRequest { openStreams.insert(stream) }
    }

    func headerField(_ frame: UnsafePointer<nghttp2_frame>, name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) -> Int32 {
        let stream = sp_nghttp2_frame_stream(frame)
        guard block?.stream == stream, block?.rejected == false else { return 0 }
        let listSize = (block?.listSize ?? 0) + name.count + value.count + 32
        block?.listSize = listSize
        guard listSize <= settings.maxHeaderListSize else {
            block?.rejected = true
            block?.fields = []
            if rejectionReasons[stream] == nil {
                rejectionReasons[stream] = "header list over \(settings.maxHeaderListSize) bytes (RFC 9113 §6.5.2)"
            }
            if let session {
                _ = nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream, H2SessionCallbacks.headerListResetCode)
            }
            // nghttp2 decodes the rest of the block (HPACK state) without calling us for it.
            return sp_nghttp2_err_temporal_callback_failure()
        }
        // Names passed nghttp2's checks (lowercase tokens); values are kept byte for byte.
        block?.fields.append(H2HeaderField(name: String(decoding: name, as: UTF8.self), value: HTTPField.value(wireBytes: value)))
        return 0
    }

    func invalidHeaderField(_ frame: UnsafePointer<nghttp2_frame>, name: UnsafeBufferPointer<UInt8>) -> Int32 {
        let stream = sp_nghttp2_frame_stream(frame)
        if rejectionReasons[stream] == nil {
            rejectionReasons[stream] = H2Rejection.reason(forInvalidFieldNamed: String(decoding: name, as: UTF8.self))
        }
        // A field nghttp2 would drop silently makes the stream malformed instead: a proxy that
        // forwards a request without a field the client sent reads a different message than it.
        return sp_nghttp2_err_temporal_callback_failure()
    }

    func frameReceived(_ frame: UnsafePointer<nghttp2_frame>) {
        let stream = sp_nghttp2_frame_stream(frame)
        let endStream = sp_nghttp2_frame_flags(frame) & sp_nghttp2_flag_end_stream() != 0
        switch H2FrameType(rawValue: sp_nghttp2_frame_type(frame)) {
        case .headers:
            guard let current = block, current.stream == stream else { return }
            block = nil
            guard !current.rejected else { return }
            delegate?.h2Headers(self, stream: stream, fields: current.fields, endStream: endStream, kind: Self.kind(of: current))
            if endStream { delegate?.h2StreamEnded(self, stream: stream) }
        case .data:
            if endStream { delegate?.h2StreamEnded(self, stream: stream) }
        case .goAway:
            delegate?.h2GoAwayReceived(self, lastStream: sp_nghttp2_frame_goaway_last_stream(frame), code: sp_nghttp2_frame_goaway_code(frame))
        default:
            break
        }
    }

    private static func kind(of block: H2HeaderBlock) -> H2HeadersKind {
        if let status = block.fields.first(where: { $0.name == ":status" }) {
            return status.value.hasPrefix("1") ? .interim : .response
        }
        return block.isRequest ? .request : .trailers
    }

    func invalidFrameReceived(_ frame: UnsafePointer<nghttp2_frame>, libraryCode: Int32) {
        let stream = sp_nghttp2_frame_stream(frame)
        let type = sp_nghttp2_frame_type(frame)
        var reason = H2Rejection.reason(libraryCode: libraryCode, frameType: type)
        if H2FrameType(rawValue: type) == .headers, libraryCode == NGHTTP2_ERR_PROTO.rawValue, !openStreams.contains(stream),
            openStreams.count >= settings.maxConcurrentStreams
        {
            // nghttp2 ends the connection (GOAWAY PROTOCOL_ERROR) for a stream over the limit once
            // the peer acknowledged it; before that the stream alone is refused.
            reason = "over the concurrent stream limit (\(settings.maxConcurrentStreams)) after acknowledging it"
        }
        if block?.stream == stream { block = nil }
        // Reported when (if) its RST_STREAM goes out; if nghttp2 ends the connection instead, this
        // is the last protocol error the owner can log.
        if stream != 0, rejectionReasons[stream] == nil { rejectionReasons[stream] = reason }
        noteProtocolError(reason)
    }

    func dataReceived(stream: Int32, bytes: UnsafeRawBufferPointer) {
        unconsumed[stream, default: 0] += bytes.count
        // The connection window is credited on receipt, the stream's only as its bytes are
        // forwarded (`consume`): each stream's window bounds what it holds, and a stream whose far
        // side stopped reading cannot starve its siblings of the shared window (RFC 9113 §5.2.2:
        // flow control must not let one stream block others).
        if let session { _ = nghttp2_session_consume_connection(session, bytes.count) }
        delegate?.h2Data(self, stream: stream, bytes: bytes)
    }

    func streamClosed(stream: Int32, code: UInt32) {
        openStreams.remove(stream)
        ownResets.remove(stream)
        rejectionReasons.removeValue(forKey: stream)
        if block?.stream == stream { block = nil }
        unconsumed.removeValue(forKey: stream)  // the connection window had them on receipt
        delegate?.h2StreamClosed(self, stream: stream, code: code)
    }

    func frameSent(_ frame: UnsafePointer<nghttp2_frame>) {
        let type = H2FrameType(rawValue: sp_nghttp2_frame_type(frame))
        if type == .goAway, !goAwayByOwner {
            // nghttp2 ended the connection on its own (a connection error, its rapid-reset or
            // flood limits): say so even when no callback said why.
            let code = H2Rejection.errorCodeName(sp_nghttp2_frame_goaway_code(frame))
            noteEndedByLibrary(lastProtocolError.map { "\($0); nghttp2 sent GOAWAY \(code)" } ?? "nghttp2 sent GOAWAY \(code) (its own limits)")
        }
        guard type == .rstStream else { return }
        let stream = sp_nghttp2_frame_stream(frame)
        let reason = rejectionReasons.removeValue(forKey: stream)
        if ownResets.remove(stream) != nil { return }
        let code = sp_nghttp2_frame_rst_code(frame)
        delegate?.h2StreamRejected(self, stream: stream, reason: reason ?? "reset by the HTTP/2 layer (\(H2Rejection.errorCodeName(code)))")
    }

    func frameNotSent(_ frame: UnsafePointer<nghttp2_frame>, libraryCode: Int32) {
        let stream = sp_nghttp2_frame_stream(frame)
        switch H2FrameType(rawValue: sp_nghttp2_frame_type(frame)) {
        case .rstStream:
            ownResets.remove(stream)
            rejectionReasons.removeValue(forKey: stream)
        case .headers where stream != 0:
            // Our own block never left (the session is going away, no stream ids are left, the block
            // is over nghttp2's 64 KiB send limit).
            delegate?.h2StreamRejected(self, stream: stream, reason: "HEADERS not sent: \(String(cString: nghttp2_strerror(libraryCode)))")
            // nghttp2 closes a request stream itself, but leaves a peer's stream open with nothing
            // coming: reset it, so the peer hears the response failed instead of waiting for it.
            if let session, nghttp2_session_find_stream(session, stream) != nil,
                nghttp2_session_want_write(session) != 0 || nghttp2_session_want_read(session) != 0
            {
                if nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream, NGHTTP2_INTERNAL_ERROR.rawValue) == 0 {
                    ownResets.insert(stream)
                }
            }
        default:
            break
        }
    }

    func libraryError(_ libraryCode: Int32, message: String) {
        if libraryCode == NGHTTP2_ERR_HTTP_HEADER.rawValue {
            // The message quotes the field's value: only the stream and the name are kept.
            if let (stream, reason) = H2Rejection.fieldRejection(message: message), rejectionReasons[stream] == nil {
                rejectionReasons[stream] = reason
            }
            return
        }
        noteProtocolError(H2Rejection.printable(message, limit: 200))
    }

    func readBody(stream: Int32, into buffer: UnsafeMutableRawBufferPointer, flags: UnsafeMutablePointer<UInt32>) -> Int {
        guard let delegate else { return Int(sp_nghttp2_err_temporal_callback_failure()) }
        switch delegate.h2ReadBody(self, stream: stream, into: buffer) {
        case .bytes(let count):
            return count > 0 ? min(count, buffer.count) : Int(sp_nghttp2_err_deferred())
        case .deferred:
            return Int(sp_nghttp2_err_deferred())
        case .end(let count, let trailers):
            flags.pointee |= sp_nghttp2_data_flag_eof()
            if let trailers, !trailers.isEmpty, let session {
                let block = H2OutgoingFields(status: nil, fields: trailers.map { ($0.name, $0.value) }, neverIndexed: settings.neverIndexedNames)
                let submitted = block.withNameValues { nva, length in nghttp2_submit_trailer(session, stream, nva, length) == 0 }
                if submitted { flags.pointee |= sp_nghttp2_data_flag_no_end_stream() }
            }
            return max(0, min(count, buffer.count))
        }
    }
}
