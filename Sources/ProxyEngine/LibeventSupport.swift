import CLibevent
import HTTP1Codec
import JSONText

#if canImport(Glibc)
    import Glibc
#endif

/// Small, allocation-free helpers over libevent's C API. Nothing here holds state.
enum EventBuffer {
    @inline(__always)
    static func length(_ buffer: OpaquePointer) -> Int { evbuffer_get_length(buffer) }

    static func append(_ buffer: OpaquePointer, _ bytes: [UInt8]) {
        bytes.withUnsafeBytes { _ = evbuffer_add(buffer, $0.baseAddress, $0.count) }
    }

    /// The first contiguous extent of the buffer, without copying.
    static func firstExtent(_ buffer: OpaquePointer) -> UnsafeRawBufferPointer? {
        var vector = iovec()
        guard evbuffer_peek(buffer, -1, nil, &vector, 1) > 0, vector.iov_len > 0 else { return nil }
        return UnsafeRawBufferPointer(start: vector.iov_base, count: vector.iov_len)
    }

    /// The first `count` bytes made contiguous (copies only when they span chunks).
    static func contiguousPrefix(_ buffer: OpaquePointer, _ count: Int) -> UnsafeRawBufferPointer {
        guard count > 0, let pointer = evbuffer_pullup(buffer, count) else {
            return UnsafeRawBufferPointer(start: nil, count: 0)
        }
        return UnsafeRawBufferPointer(start: pointer, count: count)
    }

    /// Moves up to `count` bytes (chains are handed over, not copied, where libevent can).
    @discardableResult
    static func move(from source: OpaquePointer, to destination: OpaquePointer, count: Int) -> Int {
        guard count > 0 else { return 0 }
        return Int(evbuffer_remove_buffer(source, destination, count))
    }
}

/// A bufferevent's input and output buffers (libevent never returns NULL for a live bufferevent).
@inline(__always)
func inputBuffer(_ bev: OpaquePointer) -> OpaquePointer { bufferevent_get_input(bev)! }
@inline(__always)
func outputBuffer(_ bev: OpaquePointer) -> OpaquePointer { bufferevent_get_output(bev)! }

/// Writes what a bufferevent's output holds straight to its socket. EV_WRITE is armed only for
/// what the kernel did not take (or to let libevent report the error): the common small response
/// then costs one writev and no epoll_ctl. The write callback disarms it again once drained.
@discardableResult
func flushOutput(_ bev: OpaquePointer, tls: Bool = false) -> Bool {
    let output = outputBuffer(bev)
    guard evbuffer_get_length(output) > 0 else { return true }
    if tls {
        // A TLS bufferevent encrypts on its own write path: never write its fd directly.
        bufferevent_enable(bev, sp_ev_write())
        return false
    }
    // A socket bufferevent freezes the start of its output; its own write path unfreezes it
    // around each write, and so do we.
    evbuffer_unfreeze(output, 1)
    _ = evbuffer_write(output, bufferevent_getfd(bev))
    evbuffer_freeze(output, 1)
    if evbuffer_get_length(output) == 0 {
        bufferevent_disable(bev, sp_ev_write())
        return true
    }
    bufferevent_enable(bev, sp_ev_write())
    return false
}

/// Microseconds on the monotonic clock (exchange durations).
func monotonicMicroseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000
}

/// Milliseconds on the monotonic clock (rate-limited diagnostics).
public func monotonicMilliseconds() -> UInt64 { monotonicMicroseconds() / 1000 }

extension HTTPParseError {
    /// The codec throws only HTTPParseError; this recovers the type where Swift widens it.
    init(_ error: any Error) {
        self = (error as? HTTPParseError) ?? .malformed("invalid message")
    }
}

enum SocketAddress {
    /// A socket address for a numeric IPv4 or IPv6 host (no brackets), or nil for a name.
    static func numeric(_ host: String, port: UInt16) -> sockaddr_storage? {
        var storage = sockaddr_storage()
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            withUnsafeMutableBytes(of: &storage) { raw in
                let address = raw.baseAddress!.assumingMemoryBound(to: sockaddr_in.self)
                address.pointee.sin_family = sa_family_t(AF_INET)
                address.pointee.sin_port = port.bigEndian
                address.pointee.sin_addr = v4
            }
            return storage
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, host, &v6) == 1 {
            withUnsafeMutableBytes(of: &storage) { raw in
                let address = raw.baseAddress!.assumingMemoryBound(to: sockaddr_in6.self)
                address.pointee.sin6_family = sa_family_t(AF_INET6)
                address.pointee.sin6_port = port.bigEndian
                address.pointee.sin6_addr = v6
            }
            return storage
        }
        return nil
    }

    static func length(of storage: sockaddr_storage) -> Int32 {
        Int32(storage.ss_family) == AF_INET6 ? Int32(MemoryLayout<sockaddr_in6>.size) : Int32(MemoryLayout<sockaddr_in>.size)
    }

    /// `127.0.0.1:5000` or `[::1]:5000`.
    static func describe(_ address: UnsafePointer<sockaddr>) -> String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        switch Int32(address.pointee.sa_family) {
        case AF_INET:
            return address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
                var raw = v4.pointee.sin_addr
                inet_ntop(AF_INET, &raw, &buffer, socklen_t(buffer.count))
                return
                    "\(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)):\(UInt16(bigEndian: v4.pointee.sin_port))"
            }
        case AF_INET6:
            return address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
                var raw = v6.pointee.sin6_addr
                inet_ntop(AF_INET6, &raw, &buffer, socklen_t(buffer.count))
                return
                    "[\(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))]:\(UInt16(bigEndian: v6.pointee.sin6_port))"
            }
        default:
            return "unknown"
        }
    }

    /// The local port a listening socket was bound to (for `--listen HOST:0`).
    static func boundPort(_ fd: Int32) -> UInt16? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard result == 0 else { return nil }
        switch Int32(storage.ss_family) {
        case AF_INET:
            return withUnsafeBytes(of: storage) { UInt16(bigEndian: $0.load(as: sockaddr_in.self).sin_port) }
        case AF_INET6:
            return withUnsafeBytes(of: storage) { UInt16(bigEndian: $0.load(as: sockaddr_in6.self).sin6_port) }
        default:
            return nil
        }
    }
}

/// A POSIX thread running a closure; Foundation's Thread would pull in all of Foundation.
final class PosixThread: @unchecked Sendable {
    private var handle = pthread_t()
    private let body: @Sendable () -> Void
    private let name: String

    init(name: String, body: @escaping @Sendable () -> Void) {
        self.body = body
        self.name = String(name.prefix(15))
        let context = Unmanaged.passRetained(self).toOpaque()
        let result = pthread_create(
            &handle, nil,
            { context in
                let thread = Unmanaged<PosixThread>.fromOpaque(context!).takeRetainedValue()
                thread.name.withCString { sp_set_thread_name($0) }
                thread.body()
                return nil
            }, context)
        precondition(result == 0, "pthread_create failed: \(result)")
    }

    func join() {
        pthread_join(handle, nil)
    }

    /// For threads that live as long as the process (the log writer).
    func detach() {
        pthread_detach(handle)
    }
}

/// Operational messages (not the access log): one JSON object per line on stderr. Values are names
/// and fixed text chosen by the proxy, never request data or secrets.
public enum Diagnostics {
    public static func info(_ event: String, _ fields: [(String, String)] = []) { write("info", event, fields) }
    public static func warning(_ event: String, _ fields: [(String, String)] = []) { write("warning", event, fields) }
    public static func error(_ event: String, _ fields: [(String, String)] = []) { write("error", event, fields) }

    private static func write(_ level: String, _ event: String, _ fields: [(String, String)]) {
        var line = JSONLine()
        line.string("level", level)
        line.string("event", event)
        for (key, value) in fields { line.string(key, value) }
        writeAll(2, line.finish() + [0x0A])
    }
}

/// Writes the whole string to fd 2 in one call, so concurrent lines never interleave.
public func writeStandardError(_ text: String) { writeAll(2, text) }

public func writeStandardOutput(_ text: String) { writeAll(1, text) }

/// write(2) until everything is out (retrying EINTR and short writes).
public func writeAll(_ fd: Int32, _ text: String) { writeAll(fd, Array(text.utf8)) }

public func writeAll(_ fd: Int32, _ bytes: [UInt8]) { _ = writeReportingError(fd, bytes) }

/// write(2) until everything is out; the errno of a write that failed, or nil.
public func writeReportingError(_ fd: Int32, _ bytes: [UInt8]) -> Int32? {
    bytes.withUnsafeBytes { raw -> Int32? in
        var offset = 0
        while offset < raw.count {
            let written = Glibc.write(fd, raw.baseAddress! + offset, raw.count - offset)
            if written < 0 && errno == EINTR { continue }
            if written <= 0 { return written < 0 ? errno : EIO }
            offset += written
        }
        return nil
    }
}
