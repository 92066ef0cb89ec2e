import CLibevent
import COpenSSL
import HTTP1Codec
import ProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// One token request on the fetcher's loop: connect (DNS, TCP, verified TLS: `UpstreamConnector`,
/// as for every origin), write the request, read the response through the bounded
/// `OAuth2TokenResponseReader`. A timer bounds the connect (`timeouts.connect`) and then the
/// response (`timeouts.upstream`). `finish` is called exactly once, unless `cancel` comes first.
final class TokenExchange: UpstreamConnectorDelegate {
    typealias Outcome = Result<(status: Int, body: [UInt8]), TokenFailure.Reason>

    private enum Phase {
        case idle
        case connecting(UpstreamConnector)
        case exchanging(bev: OpaquePointer, reader: OAuth2TokenResponseReader)
        case finished
    }

    private let worker: Worker
    private let origin: Origin
    private let request: [UInt8]
    private let responseLimit: Int
    /// Bounds the connect and then the answer instead of `timeouts.connect` / `timeouts.upstream`.
    private let timeoutMilliseconds: Int?
    private var finish: ((Outcome) -> Void)?
    private var phase = Phase.idle
    private var timer: OpaquePointer?

    init(worker: Worker, origin: Origin, request: [UInt8], responseLimit: Int, timeoutMilliseconds: Int? = nil) {
        self.timeoutMilliseconds = timeoutMilliseconds
        self.worker = worker
        self.origin = origin
        self.request = request
        self.responseLimit = responseLimit
    }

    deinit { release() }

    /// `finish` is called once, on this loop (possibly before `start` returns: a refused IP literal).
    func start(finish: @escaping (Outcome) -> Void) {
        self.finish = finish
        let context = Unmanaged.passUnretained(self).toOpaque()
        timer = event_new(
            worker.base, -1, 0,
            { _, _, context in
                let exchange = Unmanaged<TokenExchange>.fromOpaque(context!).takeUnretainedValue()
                withExtendedLifetime(exchange) { exchange.timedOut() }
            }, context)
        if let timer { sp_event_add_ms(timer, timeoutMilliseconds ?? worker.configuration.timeouts.connect) }
        let connector = UpstreamConnector(
            // The proxy's own fetch of a configured endpoint: egress does not govern it (docs/egress.md).
            origin: origin, worker: worker, tls: origin.scheme == .https, egress: nil)
        connector.delegate = self
        phase = .connecting(connector)
        connector.start()
    }

    /// Stops whatever is in progress; `finish` is not called.
    func cancel() {
        finish = nil
        release()
    }

    // MARK: UpstreamConnectorDelegate

    func connectorDidConnect(_ connector: UpstreamConnector, bev: OpaquePointer, tls: Bool, h2: Bool) {
        guard case .connecting = phase else {
            bufferevent_free(bev)
            return
        }
        phase = .exchanging(bev: bev, reader: OAuth2TokenResponseReader(limit: responseLimit))
        if let timer { sp_event_add_ms(timer, timeoutMilliseconds ?? worker.configuration.timeouts.upstream) }
        let context = Unmanaged.passUnretained(self).toOpaque()
        bufferevent_setcb(
            bev,
            { _, context in
                let exchange = Unmanaged<TokenExchange>.fromOpaque(context!).takeUnretainedValue()
                withExtendedLifetime(exchange) { exchange.readable() }
            }, nil,
            { _, events, context in
                let exchange = Unmanaged<TokenExchange>.fromOpaque(context!).takeUnretainedValue()
                withExtendedLifetime(exchange) { exchange.event(events) }
            }, context)
        _ = request.withUnsafeBytes { bufferevent_write(bev, $0.baseAddress, $0.count) }
        bufferevent_enable(bev, sp_ev_read() | sp_ev_write())
    }

    func connectorDidFail(_ connector: UpstreamConnector, error: ProxyError) {
        let reason: TokenFailure.Reason =
            switch error {
            case .dnsFailure: .dnsFailure
            case .upstreamTLSVerification(_, let why): .tlsVerification(why)
            case .upstreamTLSHandshake: .tlsHandshake
            case .connectTimeout: .connectTimeout
            default: .refused
            }
        end(.failure(reason))
    }

    // MARK: Reading

    private func readable() {
        guard case .exchanging(let bev, var reader) = phase else { return }
        let input = inputBuffer(bev)
        var outcome = OAuth2TokenResponseReader.Outcome.needMore
        while let extent = EventBuffer.firstExtent(input), case .needMore = outcome {
            // Never more than the limit (plus one byte to notice) leaves libevent's buffer.
            outcome = reader.receive(extent)
            evbuffer_drain(input, extent.count)
        }
        phase = .exchanging(bev: bev, reader: reader)
        conclude(outcome)
    }

    private func event(_ events: Int16) {
        guard case .exchanging = phase else { return }
        if events & sp_bev_event_eof() != 0 {
            readable()  // what arrived with the EOF
            guard case .exchanging(_, let reader) = phase else { return }
            conclude(reader.endOfInput())
            if case .exchanging = phase { end(.failure(.closedEarly)) }
        } else if events & (sp_bev_event_error() | sp_bev_event_timeout()) != 0 {
            end(.failure(.closedEarly))
        }
    }

    private func conclude(_ outcome: OAuth2TokenResponseReader.Outcome) {
        switch outcome {
        case .needMore: break
        case .complete(let status, let body): end(.success((status, body)))
        case .failed(let reason): end(.failure(reason))
        }
    }

    private func timedOut() {
        switch phase {
        case .connecting: end(.failure(.connectTimeout))
        case .exchanging: end(.failure(.responseTimeout))
        case .idle, .finished: break
        }
    }

    private func end(_ outcome: Outcome) {
        if case .finished = phase { return }
        release()
        let finish = self.finish
        self.finish = nil
        finish?(outcome)
    }

    /// The owner that armed the callbacks disarms them: the connector, the bufferevent (its
    /// callbacks cleared by `bufferevent_free`), the timer.
    private func release() {
        switch phase {
        case .connecting(let connector):
            connector.delegate = nil
            connector.cancel()
        case .exchanging(let bev, _):
            bufferevent_free(bev)
        case .idle, .finished:
            break
        }
        phase = .finished
        if let timer {
            event_free(timer)
            self.timer = nil
        }
    }
}
