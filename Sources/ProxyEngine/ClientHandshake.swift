import CLibevent
import COpenSSL
import ProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// A connection to the TLS client listener before its first HTTP byte: the server-side TLS
/// handshake, which asks for a client certificate, bounded by `timeouts.client_header` as the head
/// it precedes would be. On success the TLS bufferevent and the certificate's facts go to a new
/// `ClientConnection` (which then owns them); on failure the connection closes, and a diagnostics
/// line and a counter say why.
///
/// The worker's registry keeps it alive until `finish`; it owns its bufferevent and timer and frees
/// both there (freeing the bufferevent removes the callbacks whose context is this object).
final class ClientHandshake {
    private unowned let worker: Worker
    /// What was known at accept (peer, socket owner); the certificate is added on success.
    let facts: ConnectionFacts
    var peer: String { facts.peer }
    private let tls: ClientListenerTLS
    /// The socket-based TLS bufferevent (owns the descriptor and the SSL); nil once handed over or freed.
    private var bev: OpaquePointer?
    private var timer: OpaquePointer?

    /// Takes the descriptor: closed here if anything fails.
    init?(worker: Worker, fd: Int32, facts: ConnectionFacts, tls: ClientListenerTLS) {
        self.worker = worker
        self.facts = facts
        self.tls = tls
        let ssl: OpaquePointer
        do {
            ssl = try tls.session(fd: fd)
        } catch {
            close(fd)
            worker.clientTLSFailed(peer: peer, .certificateUnavailable, detail: error.description)
            return nil
        }
        // On failure libevent has freed the SSL and closed the descriptor, or (allocation failed
        // first) touched neither: closing here could close a descriptor reused since. Both only
        // happen out of memory; a leak is the safer of the two.
        guard
            let bev = bufferevent_openssl_socket_new(
                worker.base, fd, ssl, bufferevent_ssl_state(UInt32(sp_bufferevent_ssl_accepting())), Int32(BEV_OPT_CLOSE_ON_FREE.rawValue))
        else { return nil }
        // A client that closes without close_notify (most do, after their last response) ends
        // its input like a TCP FIN on the plain listener, not with an error. Request bodies are
        // framed, so a cut one is still seen as cut; a tunnel's inner TLS guards its own end.
        bufferevent_openssl_set_allow_dirty_shutdown(bev, 1)
        self.bev = bev
    }

    func start() {
        guard let bev else { return }
        let context = Unmanaged.passUnretained(self).toOpaque()
        timer = event_new(
            worker.base, -1, 0,
            { _, _, context in
                let handshake = Unmanaged<ClientHandshake>.fromOpaque(context!).takeUnretainedValue()
                withExtendedLifetime(handshake) { handshake.fail(.handshakeTimeout) }
            }, context)
        if let timer { sp_event_add_ms(timer, worker.configuration.timeouts.clientHeader) }
        // No read callback: decrypted bytes that arrive with the end of the handshake wait in the
        // input for the connection.
        bufferevent_setcb(
            bev, nil, nil,
            { _, events, context in
                let handshake = Unmanaged<ClientHandshake>.fromOpaque(context!).takeUnretainedValue()
                withExtendedLifetime(handshake) { handshake.event(events) }
            }, context)
        bufferevent_enable(bev, sp_ev_read() | sp_ev_write())
    }

    private func event(_ events: Int16) {
        guard let bev else { return }
        if events & sp_bev_event_connected() != 0 {
            succeed(bev)
            return
        }
        guard events & (sp_bev_event_eof() | sp_bev_event_error()) != 0 else { return }
        let classified = ClientTLSFailure.classify(bev)
        fail(classified.failure, detail: classified.detail)
    }

    private func succeed(_ bev: OpaquePointer) {
        let certificate = bufferevent_openssl_get_ssl(bev).flatMap { tls.certificate(of: $0) }
        releaseTimer()
        bufferevent_setcb(bev, nil, nil, nil, nil)
        self.bev = nil
        worker.clientHandshakeSucceeded(self, bev: bev, certificate: certificate)
    }

    private func fail(_ why: ClientTLSFailure, detail: String? = nil) {
        guard bev != nil else { return }
        worker.clientTLSFailed(peer: peer, why, detail: detail)
        abort()
    }

    /// Closes the connection (a failed handshake, or the worker draining).
    func abort() {
        releaseTimer()
        if let bev {
            self.bev = nil
            bufferevent_free(bev)
        }
        worker.clientHandshakeEnded(self)
    }

    private func releaseTimer() {
        if let timer {
            event_free(timer)
            self.timer = nil
        }
    }
}
