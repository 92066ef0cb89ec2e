import Foundation

#if canImport(Glibc)
    import Glibc
#endif

public struct TestSocketError: Error, CustomStringConvertible {
    public let description: String
    init(_ what: String) { description = "\(what): \(String(cString: strerror(errno)))" }
}

/// A blocking TCP socket with a receive timeout, for test clients and fixture servers. Tests never
/// sleep to wait for a server: they block on a read that has a deadline.
public final class TestSocket: @unchecked Sendable {
    public let fd: Int32
    private var closed = false
    private let lock = NSLock()

    init(fd: Int32, receiveTimeoutMilliseconds: Int = 15_000) {
        self.fd = fd
        setReceiveTimeout(milliseconds: receiveTimeoutMilliseconds)
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    deinit { close() }

    public static func connect(host: String = "127.0.0.1", port: UInt16) throws -> TestSocket {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestSocketError("socket") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        inet_pton(AF_INET, host, &address.sin_addr)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else {
            let error = TestSocketError("connect \(host):\(port)")
            Glibc.close(fd)
            throw error
        }
        return TestSocket(fd: fd)
    }

    public func setReceiveTimeout(milliseconds: Int) {
        var timeout = timeval(tv_sec: milliseconds / 1000, tv_usec: (milliseconds % 1000) * 1000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    public func send(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let sent = Glibc.send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                if sent < 0 {
                    if errno == EINTR { continue }
                    throw TestSocketError("send")
                }
                offset += sent
            }
        }
    }

    public func send(_ text: String) throws { try send(Array(text.utf8)) }

    /// Up to `maximum` bytes; empty at EOF. Throws on timeout or reset.
    public func receive(maximum: Int = 256 * 1024) throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: maximum)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, maximum, 0) }
            if count >= 0 { return Array(buffer[..<count]) }
            if errno == EINTR { continue }
            throw TestSocketError("recv")
        }
    }

    /// Everything until EOF (or an error, which ends the read too: a reset is a kind of end).
    public func receiveUntilClose() -> [UInt8] {
        var all: [UInt8] = []
        while let chunk = try? receive(), !chunk.isEmpty { all += chunk }
        return all
    }

    /// True when the peer closed (EOF or reset) within the receive timeout; false if data came or
    /// the read timed out.
    public func peerClosed() -> Bool {
        do { return try receive(maximum: 1).isEmpty } catch { return errno == ECONNRESET }
    }

    public func shutdownWrite() {
        lock.lock()
        defer { lock.unlock() }
        guard !closed else { return }
        Glibc.shutdown(fd, Int32(SHUT_WR))
    }

    /// Close with RST instead of FIN (SO_LINGER 0): how a crashed or hostile peer looks.
    public func reset() {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        close()
    }

    public func close() {
        lock.lock()
        defer { lock.unlock() }
        guard !closed else { return }
        closed = true
        Glibc.close(fd)
    }

    /// Unblocks a thread stuck in recv on this socket. A no-op once closed: the fd number may
    /// already belong to another socket (of another test running in parallel).
    public func shutdownBoth() {
        lock.lock()
        defer { lock.unlock() }
        guard !closed else { return }
        Glibc.shutdown(fd, Int32(SHUT_RDWR))
    }
}

/// A listening socket on loopback, port 0 unless told otherwise.
public final class TestListener: @unchecked Sendable {
    public let fd: Int32
    public let host: String
    public let port: UInt16

    public init(host: String = "127.0.0.1", port: UInt16 = 0, backlog: Int32 = 512) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.fd = fd
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        inet_pton(AF_INET, host, &address.sin_addr)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, backlog) == 0 else { throw TestSocketError("bind/listen \(host)") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.host = host
        self.port = UInt16(bigEndian: address.sin_port)
        _ = self.fd
    }

    public func accept() -> TestSocket? {
        let client = Glibc.accept(fd, nil, nil)
        return client >= 0 ? TestSocket(fd: client) : nil
    }

    private let lock = NSLock()
    private var closed = false

    /// Closing a listening socket does not wake a thread blocked in accept on Linux; shutdown does.
    /// Idempotent: closing an fd twice could close a socket that reused the number.
    public func close() {
        lock.lock()
        defer { lock.unlock() }
        guard !closed else { return }
        closed = true
        Glibc.shutdown(fd, Int32(SHUT_RDWR))
        Glibc.close(fd)
    }
}

extension TestListener {
    /// A port that was free a moment ago (bound, then released), for configs that need a fixed port.
    public static func freePort() throws -> UInt16 {
        let listener = try TestListener()
        defer { listener.close() }
        return listener.port
    }
}

/// One GET on a fresh connection to an admin endpoint (/healthz, /metrics).
public func adminGet(_ port: UInt16, _ path: String) throws -> TestResponse? {
    let socket = try TestSocket.connect(port: port)
    try socket.send("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    return try HTTPReader(socket).readResponse()
}

/// A gauge or counter's value from Prometheus text (`name value` lines without labels).
public func metricValue(_ text: String, _ name: String) -> Double? {
    for line in text.split(separator: "\n") where line.hasPrefix(name + " ") {
        return Double(line.dropFirst(name.count + 1))
    }
    return nil
}
