import CLibevent

#if canImport(Glibc)
    import Glibc
#endif

/// Reads a plain TCP socket into its bufferevent's input buffer in large chunks.
///
/// libevent 2.1's own read path caps one read at 4 KiB (`EVBUFFER_MAX_READ`) and asks the kernel
/// how much is waiting first (`ioctl(FIONREAD)`), then returns to the loop: a 200 MiB upload
/// cost 52 854 readv, as many ioctl, epoll_wait and writev (measured with strace). This reader
/// takes the bufferevent's place for reading: one readv into up to 256 KiB of the input buffer's
/// own free space (`evbuffer_reserve_space`), bounded by the same high watermark, and then calls
/// the callbacks the bufferevent would have called. Writing stays the bufferevent's.
///
/// TLS bufferevents keep libevent's path (the bytes must go through OpenSSL).
final class SocketReader {
    private let bev: OpaquePointer
    private let fd: Int32
    private var highWatermark: Int
    private var readCallback: bufferevent_data_cb
    private var eventCallback: bufferevent_event_cb
    private var context: UnsafeMutableRawPointer
    private var event: OpaquePointer?
    private var watch: OpaquePointer?
    private var paused = false
    private var finished = false

    /// The most one read takes: large enough that a bulk transfer costs a few syscalls per MiB.
    static let maxRead = 256 * 1024
    /// Where the read size starts, and the least it shrinks to.
    static let minRead = 16 * 1024
    /// The size of the next read, adapted to what the socket delivers (as Netty's adaptive
    /// receive buffers do): a read that fills its space doubles the next one, up to `maxRead`; one
    /// that uses less than a quarter halves it. A small request costs a 16 KiB extent, not 256 KiB
    /// (reserving allocates the extent whatever arrives); a bulk body reaches 256 KiB in four reads.
    private var readSize = SocketReader.minRead

    /// Reads `bev`'s socket from now on; `read`/`event` are the bufferevent's callbacks, called the
    /// same way (with `bev` and `context`).
    init(
        base: OpaquePointer, bev: OpaquePointer, highWatermark: Int, read: bufferevent_data_cb, event: bufferevent_event_cb,
        context: UnsafeMutableRawPointer
    ) {
        self.bev = bev
        fd = bufferevent_getfd(bev)
        self.highWatermark = highWatermark
        readCallback = read
        eventCallback = event
        self.context = context
        bufferevent_disable(bev, sp_ev_read())
        let own = Unmanaged.passUnretained(self).toOpaque()
        self.event = event_new(
            base, fd, sp_ev_read() | sp_ev_persist(),
            { _, _, context in
                let reader = Unmanaged<SocketReader>.fromOpaque(context!).takeUnretainedValue()
                withExtendedLifetime(reader) { reader.readable() }
            }, own)
        // Reading resumes when the consumer drains the input below the watermark.
        watch = evbuffer_add_cb(
            inputBuffer(bev),
            { _, info, context in
                guard let info, info.pointee.n_deleted > 0 else { return }
                let reader = Unmanaged<SocketReader>.fromOpaque(context!).takeUnretainedValue()
                reader.resumeIfRoom()
            }, own)
        if EventBuffer.length(inputBuffer(bev)) < highWatermark, let event = self.event {
            event_add(event, nil)
        } else {
            paused = true
        }
    }

    deinit { stop() }

    /// Hands the reads to other callbacks (a pooled connection between its owners) while the read
    /// event stays registered: a stop and a new reader would cost two epoll_ctl calls per request.
    /// False when the reader has stopped (EOF or an error was reported).
    /// `highWatermark`: the new owner's read-ahead limit, when it has its own (an HTTP/2 stream's
    /// is smaller than a connection's).
    func retarget(
        read: bufferevent_data_cb, event: bufferevent_event_cb, context: UnsafeMutableRawPointer, highWatermark: Int? = nil
    ) -> Bool {
        guard !finished else { return false }
        readCallback = read
        eventCallback = event
        self.context = context
        if let highWatermark, highWatermark != self.highWatermark {
            self.highWatermark = highWatermark
            if EventBuffer.length(inputBuffer(bev)) >= highWatermark { pause() } else { resumeIfRoom() }
        }
        return true
    }

    var isReading: Bool { !finished }

    /// Gives reading back to nobody: the event and the buffer watch go (before `bev` is freed or
    /// handed to another owner, such as the pool, which reads with the bufferevent again).
    func stop() {
        guard !finished else { return }
        finished = true
        if let event {
            event_free(event)
            self.event = nil
        }
        if let watch {
            evbuffer_remove_cb_entry(inputBuffer(bev), watch)
            self.watch = nil
        }
    }

    private func resumeIfRoom() {
        guard paused, !finished, EventBuffer.length(inputBuffer(bev)) < highWatermark, let event else { return }
        paused = false
        event_add(event, nil)
    }

    private func pause() {
        guard !paused, let event else { return }
        paused = true
        event_del(event)
    }

    private func readable() {
        let input = inputBuffer(bev)
        let room = highWatermark - EventBuffer.length(input)
        guard room > 0 else {
            pause()
            return
        }
        var vectors = (iovec(), iovec())
        // A socket bufferevent freezes the end of its input (only its own read path adds there);
        // this reader is that read path now, so it unfreezes around its write, as libevent does.
        evbuffer_unfreeze(input, 0)
        let got: Int = withUnsafeMutableBytes(of: &vectors) { raw in
            let iov = raw.baseAddress!.assumingMemoryBound(to: iovec.self)
            let wanted = min(room, readSize)
            let count = evbuffer_reserve_space(input, wanted, iov, 2)
            guard count > 0 else { return -2 }
            // libevent may reserve more than asked (the free end of the last chain, then a new
            // one): read only what was asked, so the input never passes the watermark.
            var allowed = wanted
            for index in 0..<Int(count) {
                iov[index].iov_len = min(iov[index].iov_len, allowed)
                allowed -= iov[index].iov_len
            }
            let result = readv(fd, iov, count)
            // Commit exactly what arrived: trim the reserved extents to it.
            var left = max(0, result)
            var used: Int32 = 0
            for index in 0..<Int(count) where left > 0 {
                iov[index].iov_len = min(iov[index].iov_len, left)
                left -= iov[index].iov_len
                used += 1
            }
            evbuffer_commit_space(input, iov, used)
            return result
        }
        evbuffer_freeze(input, 0)
        if got >= min(room, readSize) {
            readSize = min(readSize * 2, Self.maxRead)
        } else if got >= 0, got < readSize / 4 {
            readSize = max(readSize / 2, Self.minRead)
        }
        if got > 0 {
            readCallback(bev, context)
            if !finished, EventBuffer.length(inputBuffer(bev)) >= highWatermark { pause() }
        } else if got == 0 {
            stop()
            eventCallback(bev, sp_bev_event_eof() | sp_bev_event_reading(), context)
        } else if got == -1, errno != EAGAIN, errno != EINTR {
            stop()
            eventCallback(bev, sp_bev_event_error() | sp_bev_event_reading(), context)
        }
    }
}
