import CLibevent
import HTTP1Codec
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The admin endpoint: `GET /healthz` (200 `ok` once ready, 503 while draining) and `GET /metrics`
/// (Prometheus text). Tiny bodies, so libevent's evhttp serves it, on its own thread and loop.
final class AdminServer: @unchecked Sendable {
    private let base: OpaquePointer
    private let http: OpaquePointer
    /// Activated by `stop` from another thread; its callback breaks the loop from inside it.
    private var stopEvent: OpaquePointer!
    private let metrics: Metrics
    let draining = Atomic<Bool>(false)
    private(set) var port: UInt16 = 0
    /// The listening socket (the proxy never connects to it: `OwnSockets`).
    private(set) var descriptor: Int32 = -1
    private var thread: PosixThread?
    /// Request line and header fields together; a probe or a Prometheus scrape sends well under 1 KiB.
    static let maxHeadBytes = 8 * 1024

    init(address: ListenAddress, metrics: Metrics) throws(EngineError) {
        guard let base = event_base_new(), let http = evhttp_new(base) else { throw .eventBase }
        self.base = base
        self.http = http
        self.metrics = metrics
        guard let bound = evhttp_bind_socket_with_handle(http, address.host, address.port) else {
            let reason = String(cString: strerror(errno))  // before the frees below can change errno
            evhttp_free(http)
            event_base_free(base)
            throw .listen("cannot listen on admin address \(address): \(reason)")
        }
        descriptor = evhttp_bound_socket_get_fd(bound)
        port = SocketAddress.boundPort(descriptor) ?? address.port
        evhttp_set_allowed_methods(http, UInt16(EVHTTP_REQ_GET.rawValue | EVHTTP_REQ_HEAD.rawValue))
        // evhttp buffers a whole request before its callback (and before the method check above)
        // runs, with no limit by default: a 150 MiB POST cost 150 MiB of RSS. Health checks and
        // scrapers send a few hundred bytes of head and never a body. In libevent 2.1.12 a limit
        // is a byte count (only a negative one means unlimited), so 0 means no body at all: a
        // Content-Length > 0 or a chunk size > 0 fails the request as soon as the head is read,
        // before any body byte is buffered, with 413 and `Connection: close`. Heads past the
        // header limit (request line included) end in 400. Limits are copied to each connection
        // when it is accepted, so they are set before the loop runs.
        evhttp_set_max_headers_size(http, Self.maxHeadBytes)
        evhttp_set_max_body_size(http, 0)
        evhttp_set_gencb(
            http,
            { request, context in
                Unmanaged<AdminServer>.fromOpaque(context!).takeUnretainedValue().handle(request!)
            }, Unmanaged.passUnretained(self).toOpaque())
        stopEvent = event_new(
            base, -1, 0,
            { _, _, context in
                event_base_loopbreak(Unmanaged<AdminServer>.fromOpaque(context!).takeUnretainedValue().base)
            }, Unmanaged.passUnretained(self).toOpaque())
    }

    func start() {
        thread = PosixThread(name: "scopeproxy-admin") { [self] in _ = event_base_dispatch(base) }
    }

    /// Not `event_base_loopbreak` from here: a loop that starts clears a pending break, so a stop
    /// that came before the admin thread reached its loop (a SIGTERM right after start) was lost
    /// and the join below waited forever. An activated event stays pending until the loop runs it,
    /// whenever that is, and its callback breaks the loop from inside.
    func stop() {
        event_active(stopEvent, 0, 0)
        thread?.join()
        thread = nil  // its closure holds self: keeping it would be a cycle (LeakSanitizer found it)
        event_free(stopEvent)
        evhttp_free(http)
        event_base_free(base)
    }

    private func handle(_ request: OpaquePointer) {
        let path = evhttp_request_get_uri(request).map { String(cString: $0) } ?? "/"
        let body: String
        let status: Int32
        let contentType: String
        switch path {
        case "/healthz":
            let isDraining = draining.load(ordering: .relaxed)
            status = isDraining ? 503 : 200
            body = isDraining ? "draining\n" : "ok\n"
            contentType = "text/plain"
        case "/metrics":
            status = 200
            body = metrics.render()
            contentType = "text/plain; version=0.0.4"
        default:
            status = 404
            body = "not found\n"
            contentType = "text/plain"
        }
        let buffer = evbuffer_new()!
        defer { evbuffer_free(buffer) }
        EventBuffer.append(buffer, Array(body.utf8))
        evhttp_add_header(evhttp_request_get_output_headers(request), "Content-Type", contentType)
        evhttp_send_reply(request, status, status == 200 ? "OK" : (status == 503 ? "Service Unavailable" : "Not Found"), buffer)
    }
}
