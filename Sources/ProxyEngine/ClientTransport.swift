import CLibevent
import COpenSSL
import HTTP1Codec
import ProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// The client side of a connection as bytes: its bufferevent (a TLS filter after an intercepted
/// CONNECT), writing, and the way it closes. Closing is more than a free: the answer must leave
/// first, and unread request bytes must not turn the close into a reset that destroys it.
///
/// The bufferevent's callbacks and the linger timer belong to the owning `ClientConnection`, which
/// forwards what concerns the transport here; `free` removes them all.
final class ClientTransport {
    enum Closing: Equatable {
        case open
        /// Output is flushing; bounded by the linger timer (`idle`).
        case flushing
        /// Output is out: half-closed, reading until the client closes (bounded), or waiting for the
        /// TLS records under the filter to drain.
        case lingering
    }

    private(set) var bev: OpaquePointer
    private(set) var isTLS = false
    /// The client half-closed (EOF).
    private(set) var inputClosed = false
    private(set) var closing = Closing.open
    private let base: OpaquePointer
    private let idleMilliseconds: Int
    private let highWatermark: Int
    /// Made on first use: most connections close on the client's initiative and never need it.
    private var lingerTimer: OpaquePointer?
    private var lingerCallback: event_callback_fn?
    private var callbackContext: UnsafeMutableRawPointer?
    private var tlsDrainChecks = 0
    /// Reads the plain socket (nil once TLS is on: OpenSSL reads through the bufferevent).
    private var reader: SocketReader?
    /// Called once the transport decided it is done (the owner then frees everything).
    private let finished: () -> Void

    /// `tls`: `bev` is already a TLS bufferevent (the TLS client listener's), read by libevent.
    init(
        bev: OpaquePointer, base: OpaquePointer, idleMilliseconds: Int, highWatermark: Int, tls: Bool = false,
        finished: @escaping () -> Void
    ) {
        self.bev = bev
        isTLS = tls
        self.base = base
        self.idleMilliseconds = idleMilliseconds
        self.highWatermark = highWatermark
        self.finished = finished
    }

    /// Set by `free`: nothing may touch the bufferevent after it.
    private(set) var isFreed = false

    var input: OpaquePointer {
        precondition(!isFreed, "client transport used after free")
        return inputBuffer(bev)
    }

    var output: OpaquePointer {
        precondition(!isFreed, "client transport used after free")
        return outputBuffer(bev)
    }

    func install(
        read: bufferevent_data_cb, write: bufferevent_data_cb, event: bufferevent_event_cb,
        timer: event_callback_fn, context: UnsafeMutableRawPointer
    ) {
        bufferevent_setcb(bev, read, write, event, context)
        configure(bev)
        lingerCallback = timer
        callbackContext = context
        if isTLS {
            // OpenSSL reads through the bufferevent; writes are armed as output is queued.
            bufferevent_enable(bev, sp_ev_read() | sp_ev_write())
            return
        }
        // EV_WRITE (on by default) only while output is pending: see flushOutput. Reading is the
        // SocketReader's (large reads), until a TLS filter takes over.
        bufferevent_disable(bev, sp_ev_write())
        reader = SocketReader(base: base, bev: bev, highWatermark: highWatermark, read: read, event: event, context: context)
    }

    private func configure(_ bufferevent: OpaquePointer) {
        // Reading stops when the input holds a high watermark of unconsumed bytes; the write
        // callback fires once output drains to half of it, which is when pumps resume.
        bufferevent_setwatermark(bufferevent, sp_ev_read(), 0, highWatermark)
        bufferevent_setwatermark(bufferevent, sp_ev_write(), highWatermark / 2, 0)
        bufferevent_set_max_single_read(bufferevent, 128 * 1024)
        bufferevent_set_max_single_write(bufferevent, 128 * 1024)
    }

    func write(_ bytes: [UInt8]) {
        EventBuffer.append(output, bytes)
    }

    /// Writes what is queued straight to the socket; true when nothing is left.
    @discardableResult
    func flush() -> Bool {
        flushOutput(bev, tls: isTLS)
    }

    /// Wraps the connection in TLS, server side, with `ssl` (a leaf the local CA minted). The
    /// bufferevent stays underneath and is freed with the filter. On the TLS client listener that
    /// one is TLS too: an intercepted CONNECT there is TLS inside TLS, a filter over the listener's
    /// TLS bufferevent.
    func startTLS(
        _ ssl: OpaquePointer, read: bufferevent_data_cb, write: bufferevent_data_cb, event: bufferevent_event_cb,
        context: UnsafeMutableRawPointer
    ) -> Bool {
        reader?.stop()
        reader = nil
        bufferevent_enable(bev, sp_ev_read() | sp_ev_write())
        guard
            let filter = bufferevent_openssl_filter_new(
                base, bev, ssl, bufferevent_ssl_state(UInt32(sp_bufferevent_ssl_accepting())), Int32(BEV_OPT_CLOSE_ON_FREE.rawValue))
        else {
            SSL_free(ssl)
            return false
        }
        // The filter hands its records to the layer under it for as long as that layer's write high
        // watermark allows, and with none set, without limit: a client that does not read would
        // pile every encrypted byte up there while the filter's own output (the one the pumps and
        // the HTTP/2 session check) stays empty. With the mark, the filter stops, its output
        // fills, and backpressure reaches the pumps; the layer's low watermark wakes it again.
        bufferevent_setwatermark(bev, sp_ev_write(), highWatermark / 2, highWatermark)
        bev = filter
        isTLS = true
        bufferevent_setcb(filter, read, write, event, context)
        configure(filter)
        bufferevent_enable(filter, sp_ev_read() | sp_ev_write())
        return true
    }

    /// The client's TLS handshake chose HTTP/2 (ALPN `h2`).
    var negotiatedH2: Bool {
        guard isTLS, !isFreed, let ssl = bufferevent_openssl_get_ssl(bev) else { return false }
        return sp_ssl_alpn_is_h2(ssl) == 1
    }

    /// Why the TLS handshake with the client failed, from the errors OpenSSL queued (the alert the
    /// client sent, or what it sent instead of TLS). Drains the queue.
    func handshakeFailure() -> ClientTLSFailure {
        ClientTLSFailure.classify(bev).failure
    }

    // MARK: Events the owner forwards

    /// EOF from the client. Returns true when the transport is done (it was closing already).
    func inputDidClose() -> Bool {
        inputClosed = true
        return closing != .open
    }

    /// Output drained below the low watermark.
    func writable() {
        if !isTLS, EventBuffer.length(output) == 0 { bufferevent_disable(bev, sp_ev_write()) }
        if closing == .flushing, EventBuffer.length(output) == 0 { linger() }
    }

    /// While closing, whatever the client still sends is read and dropped.
    func discardInput() {
        evbuffer_drain(input, EventBuffer.length(input))
    }

    // MARK: Closing

    /// Send what is queued, then close. Bounded by `idle`: a client that never reads does not hold
    /// the connection open.
    func closeAfterFlush() {
        guard closing == .open else { return }
        closing = .flushing
        arm(idleMilliseconds)
        if flush() { linger() }
    }

    /// Called after the owner flushed at the end of a callback.
    func didFlush() {
        if closing == .flushing, EventBuffer.length(output) == 0 { linger() }
    }

    /// Output is out: half-close and read until the client closes (bounded), so unread request
    /// bytes do not turn our close into a reset that could destroy the response in flight.
    private func linger() {
        guard closing == .flushing else { return }
        closing = .lingering
        if isTLS {
            // The filter's output is empty, but the encrypted bytes may still sit in the socket
            // bufferevent under it: freeing now would drop the end of the response. Close once
            // that drains too (a TLS connection cannot half-close under its record layer).
            tlsDrainChecks = 0
            checkTLSDrained()
            return
        }
        if inputClosed {
            finished()
            return
        }
        shutdown(bufferevent_getfd(bev), Int32(SHUT_WR))
        discardInput()
        arm(2_000)
    }

    /// Every layer under the top one must have handed its bytes on: one (a filter over the plain
    /// socket, or over the client listener's socket-based TLS), or two (an intercepted CONNECT on
    /// the client listener: a filter over a filter over the socket).
    private func checkTLSDrained() {
        guard tlsDrainChecks < 400, Self.lowerLayersHoldOutput(bev) else {
            finished()
            return
        }
        tlsDrainChecks += 1
        arm(5)
    }

    /// Bytes in the buffers under a TLS filter (encrypted output not yet written, records read and
    /// not yet decrypted): the proxy holds them too.
    var lowerLayersBufferedBytes: Int {
        guard isTLS, !isFreed else { return 0 }
        var total = 0
        var layer = bufferevent_get_underlying(bev)
        while let current = layer {
            total += EventBuffer.length(outputBuffer(current)) + EventBuffer.length(inputBuffer(current))
            layer = bufferevent_get_underlying(current)
        }
        return total
    }

    private static func lowerLayersHoldOutput(_ top: OpaquePointer) -> Bool {
        var layer = bufferevent_get_underlying(top)
        while let current = layer {
            if EventBuffer.length(outputBuffer(current)) > 0 { return true }
            layer = bufferevent_get_underlying(current)
        }
        return false
    }

    /// A tunnel whose client hung up: keep the connection for up to `milliseconds` while the last
    /// bytes leave upstream.
    func waitForUpstream(milliseconds: Int) {
        closing = .lingering
        arm(milliseconds)
    }

    func lingerTimerFired() {
        if closing == .lingering, isTLS, tlsDrainChecks > 0 {
            checkTLSDrained()
        } else {
            finished()
        }
    }

    private func arm(_ milliseconds: Int) {
        if lingerTimer == nil, let lingerCallback { lingerTimer = event_new(base, -1, 0, lingerCallback, callbackContext) }
        if let lingerTimer { sp_event_add_ms(lingerTimer, milliseconds) }
    }

    /// Frees the bufferevent (which removes its callbacks) and the timer.
    func free() {
        guard !isFreed else { return }
        isFreed = true
        reader?.stop()
        reader = nil
        if let lingerTimer {
            event_free(lingerTimer)
            self.lingerTimer = nil
        }
        bufferevent_free(bev)
    }
}
