import CLibevent
import HTTP1Codec

#if canImport(Glibc)
    import Glibc
#endif

/// One bound, listening TCP socket per address, shared by every worker thread of this process
/// (each watches a duplicate of the descriptor in its own event loop).
///
/// Why not `SO_REUSEPORT` on every worker's own socket: the kernel lets any other process of the
/// same user join such a group, and then splits new connections between the two. A second
/// scopeproxy started on the same address (another config, or a mistyped command) silently took
/// about half the clients, which then got the other process's credentials. Without it, binding an
/// address that is in use fails, naming it.
struct ListeningSocket {
    let descriptor: Int32
    let address: ListenAddress

    static func bind(_ address: ListenAddress) throws(EngineError) -> ListeningSocket {
        guard var storage = SocketAddress.numeric(address.host == "localhost" ? "127.0.0.1" : address.host, port: address.port) else {
            throw .listen("listen host must be an IP address: \(address.host)")
        }
        let family = Int32(storage.ss_family)
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .listen("cannot create a socket for \(address): \(String(cString: strerror(errno)))") }
        // SO_REUSEADDR only lets a restarted proxy bind while old connections linger in TIME_WAIT;
        // on Linux it never lets two sockets listen on one address.
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        let length = SocketAddress.length(of: storage)
        let bound = withUnsafePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(length)) }
        }
        guard bound == 0, Glibc.listen(fd, 1024) == 0 else {
            let code = errno
            Glibc.close(fd)
            if code == EADDRINUSE {
                throw .listen("cannot listen on \(address): address already in use (another scopeproxy, or another program, listens there)")
            }
            throw .listen("cannot listen on \(address): \(String(cString: strerror(code)))")
        }
        guard let port = SocketAddress.boundPort(fd) else {
            Glibc.close(fd)
            throw .listen("cannot read the bound port of \(address)")
        }
        return ListeningSocket(descriptor: fd, address: ListenAddress(host: address.host, port: port))
    }

    /// A descriptor of its own for one worker's listener (closed when that listener is freed).
    func duplicate() throws(EngineError) -> Int32 {
        let copy = fcntl(descriptor, F_DUPFD_CLOEXEC, 0)
        guard copy >= 0 else { throw .listen("cannot share the listening socket of \(address): \(String(cString: strerror(errno)))") }
        return copy
    }

    func close() {
        Glibc.close(descriptor)
    }
}
