import CLibevent
import HTTP1Codec
import ScopePolicy
#if canImport(Glibc)
import Glibc
#endif

/// A client connection and the data path of each exchange on it, in the order it runs:
///
///   client bytes → request head → target/origin checks → upstream (pooled or new) → request body
///   → response head → response body → keep-alive or close
///
/// One exchange at a time: pipelined requests wait in the input buffer (bounded by the read
/// watermark) and are answered in order. Everything runs on the worker's loop thread.
final class ClientConnection: UpstreamConnectorDelegate {
    private enum Phase {
        case awaitingHead
        case exchange
        case tunnel
        /// Output is flushing (then lingering) before the connection closes.
        case closing
    }

    private enum TimerPurpose {
        case none
        case clientHead
        case idle
        case connect
        case responseHead
        case stall
        case linger
        /// A TLS client whose last encrypted bytes are still leaving (see `flushed`).
        case tlsDrain
    }

    private unowned let worker: Worker
    /// The client's bufferevent; after an intercepted CONNECT, a TLS filter over the socket's.
    private var bev: OpaquePointer
    private var clientTLS = false
    /// Inside an intercepted CONNECT, or on a route's listener: every request's origin is this one.
    private var interceptedOrigin: Origin?
    /// On a route's listener: the address clients use, for rewriting Locations that point upstream.
    private let routePublicOrigin: Origin?
    let peer: String
    private var phase: Phase = .awaitingHead
    private var scanner = HeadScanner(limits: .request)
    private var exchange: Exchange?
    private var timer: OpaquePointer!
    private var timerPurpose: TimerPurpose = .none
    private var clientReadClosed = false
    /// The access-log record of the exchange in progress, emitted exactly once.
    private var record: ExchangeRecord?
    private var tunnelBytesIn: UInt64 = 0
    private var tunnelBytesOut: UInt64 = 0
    private var isClosed = false
    private var lingering = false

    private var configuration: EngineConfiguration { worker.configuration }
    private var highWatermark: Int { configuration.limits.bufferHighWatermark }
    private var clientInput: OpaquePointer { inputBuffer(bev) }
    private var clientOutput: OpaquePointer { outputBuffer(bev) }

    init(worker: Worker, bev: OpaquePointer, peer: String, route: (upstream: Origin, publicOrigin: Origin)? = nil) {
        self.worker = worker
        self.bev = bev
        self.peer = peer
        interceptedOrigin = route?.upstream
        routePublicOrigin = route?.publicOrigin
    }

    func start() {
        let context = Unmanaged.passUnretained(self).toOpaque()
        timer = event_new(worker.base, -1, 0, timerCallback, context)
        bufferevent_setcb(bev, clientReadCallback, clientWriteCallback, clientEventCallback, context)
        configureBuffers(bev)
        // EV_WRITE (on by default) only while output is pending: see flushOutputs.
        bufferevent_disable(bev, sp_ev_write())
        bufferevent_enable(bev, sp_ev_read())
        arm(.clientHead, configuration.timeouts.clientHeader)
    }

    private func configureBuffers(_ bufferevent: OpaquePointer) {
        // Reading stops when the input holds a high watermark of unconsumed bytes; the write
        // callback fires once output drains to half of it, which is when pumps resume.
        bufferevent_setwatermark(bufferevent, sp_ev_read(), 0, highWatermark)
        bufferevent_setwatermark(bufferevent, sp_ev_write(), highWatermark / 2, 0)
        bufferevent_set_max_single_read(bufferevent, 128 * 1024)
        bufferevent_set_max_single_write(bufferevent, 128 * 1024)
    }

    // MARK: 1. Client bytes → request head

    fileprivate func clientReadable() {
        switch phase {
        case .awaitingHead:
            readRequestHead()
        case .exchange:
            // Body bytes go upstream; bytes after the body are a pipelined request and wait.
            pumpRequestBody()
        case .tunnel:
            if let upstream = exchange?.upstream { pumpTunnel(from: bev, to: upstream) }
        case .closing:
            evbuffer_drain(clientInput, EventBuffer.length(clientInput))
        }
    }

    private func readRequestHead() {
        let available = EventBuffer.length(clientInput)
        guard available > 0 else { return }
        if timerPurpose == .idle { arm(.clientHead, configuration.timeouts.clientHeader) }
        let window = min(available, HeadLimits.request.maxHeadBytes + 2)
        let bytes = EventBuffer.contiguousPrefix(clientInput, window)
        let head: RequestHead
        do {
            guard let boundary = try scanner.scan(bytes) else { return }
            head = try HeadParser.parseRequest(UnsafeRawBufferPointer(rebasing: bytes[boundary.start..<boundary.end]))
            evbuffer_drain(clientInput, boundary.end)
            scanner = HeadScanner(limits: .request)
            startRecord(head, headBytes: boundary.end)
        } catch {
            reject(ProxyError(HTTPParseError(error)))
            return
        }
        cancelTimer()
        beginExchange(head)
    }

    // MARK: 2. Request head → origin checks → exchange

    private func beginExchange(_ head: RequestHead) {
        let context = configuration.scope.context
        guard context.acceptsProxyAuthorization(head.fields.first("proxy-authorization")) else {
            reject(.proxyAuthenticationRequired)
            return
        }
        let target: RequestTarget
        do {
            target = try RequestTarget.parse(head.target, method: head.method)
        } catch {
            if case .invalid(let reason) = error { reject(.unsupportedTarget(reason)) }
            return
        }
        let origin: Origin
        let pathAndQuery: String
        var userinfo: String?
        switch target {
        case .origin(let path) where interceptedOrigin != nil:
            origin = interceptedOrigin!
            pathAndQuery = path
        case .absolute(let targetOrigin, _, _) where interceptedOrigin != nil && targetOrigin != interceptedOrigin:
            reject(.tunnelOriginMismatch)
            return
        case .authority where interceptedOrigin != nil:
            reject(.malformedRequest("CONNECT inside an intercepted tunnel"))
            return
        case .origin, .asterisk:
            reject(.notProxyRequest)
            return
        case .authority(let host, let port):
            origin = Origin(scheme: .https, host: host, port: port)
            pathAndQuery = ""
        case .absolute(let targetOrigin, let path, let info):
            origin = targetOrigin
            pathAndQuery = path
            userinfo = info
        }
        record?.origin = origin
        record?.pathAndQuery = pathAndQuery
        // On a route the listener fixes the origin, so the client's Host (naming the route) cannot
        // send the request elsewhere; it is replaced by the upstream's like any other.
        if routePublicOrigin == nil, let problem = hostHeaderProblem(head, origin: origin) {
            reject(problem)
            return
        }
        let framing: BodyFraming
        do {
            framing = try BodyFraming.forRequest(head)
        } catch {
            reject(ProxyError(HTTPParseError(error)))
            return
        }

        if head.method == "CONNECT" {
            guard framing == .none else {
                reject(.malformedRequest("CONNECT with a body"))
                return
            }
            if context.interceptHosts.contains(origin.host), configuration.tls?.minter != nil {
                intercept(origin)
                return
            }
            guard configuration.tunnel == .allow else {
                reject(.tunnelDenied(origin))
                return
            }
            startExchange(Exchange(request: head, origin: origin, kind: .connect, upstreamHead: [], requestFraming: .none))
            return
        }
        forward(head, method: head.method, origin: origin, pathAndQuery: pathAndQuery, userinfo: userinfo,
                framing: framing, context: context, chain: ChainContext(), hops: 0, replayBody: nil)
    }

    /// Scope decision, then the upstream head: the step where credentials are stripped or injected.
    /// Also the entry for each hop of a redirect the proxy follows itself.
    private func forward(
        _ clientHead: RequestHead, method: String, origin: Origin, pathAndQuery: String, userinfo: String?,
        framing: BodyFraming, context: ScopeContext, chain: ChainContext, hops: Int, replayBody: [UInt8]?
    ) {
        let bodyConsumed = framing == .none || replayBody != nil
        let scoped: ScopedRequest
        switch context.policy.apply(method: method, origin: origin, pathAndQuery: pathAndQuery, fields: clientHead.fields,
                                    hasUserinfo: userinfo != nil, secrets: context.secrets, chain: chain) {
        case .failure(.secretUnavailable(let scope, let secret)):
            reject(.credentialUnavailable(scope: scope, secret: secret), consumedBody: bodyConsumed)
            return
        case .success(let result):
            scoped = result
        }
        record?.origin = origin
        record?.pathAndQuery = pathAndQuery
        record?.method = method
        record?.scopes = scoped.decision.scopes
        record?.injected = scoped.decision.injected
        record?.stripped = scoped.decision.stripped
        var outgoing = clientHead
        outgoing.method = method
        outgoing.fields = scoped.fields
        if let id = record?.id { outgoing.fields.set(name: "X-Request-ID", value: id) }
        if scoped.keepUserinfo, let userinfo, !outgoing.fields.contains("authorization") {
            // Userinfo cannot travel in an origin-form target; a scope that passes Authorization
            // gets it the way clients send it.
            outgoing.fields.append(name: "Authorization", value: "Basic " + Base64.encode(PercentEncoding.decode(Substring(userinfo))))
        }
        let upstreamHead = Forwarding.upstreamRequest(from: outgoing, origin: origin, pathAndQuery: pathAndQuery, framing: framing)
        let kind: Exchange.Kind = Forwarding.isUpgradeRequest(clientHead) && framing == .none ? .upgrade : .forward
        let exchange = Exchange(
            request: clientHead, origin: origin, kind: kind, upstreamHead: upstreamHead.serialized(),
            requestFraming: replayBody == nil ? framing : .none
        )
        exchange.context = context
        exchange.decision = scoped.decision
        exchange.chain = chain
        exchange.hops = hops
        exchange.pathAndQuery = pathAndQuery
        exchange.replayBody = replayBody
        exchange.method = method
        if context.redirects.mode == .follow, replayBody == nil, framing != .none {
            exchange.requestPump.startCapture(limit: configuration.limits.maxReplayBody)
        }
        if configuration.accessLog?.logBodies == true {
            exchange.requestPump.startObserving(limit: configuration.limits.maxObservedBody)
        }
        startExchange(exchange)
    }

    /// The origin is always the target's. A Host header must agree with it, and there must be
    /// exactly one on HTTP/1.1 (RFC 9112 §3.2).
    private func hostHeaderProblem(_ head: RequestHead, origin: Origin) -> ProxyError? {
        if head.fields.count("host") > 1 { return .malformedRequest("more than one Host header") }
        guard let host = head.fields.first("host") else {
            return head.version == .http1_1 ? .malformedRequest("missing Host header") : nil
        }
        guard let (hostPart, port) = try? RequestTarget.parseAuthority(Substring(host)),
              Origin(scheme: origin.scheme, host: hostPart, port: port) == origin
        else { return .hostMismatch }
        return nil
    }

    private func startExchange(_ exchange: Exchange) {
        self.exchange = exchange
        phase = .exchange
        if exchange.kind != .connect, let pooled = worker.pool.checkout(exchange.origin) {
            attachUpstream(pooled.bev, reused: true, tls: exchange.origin.scheme == .https)
        } else {
            connectUpstream(exchange)
        }
    }

    // MARK: 3. Upstream connection (pooled, or resolved and connected)

    private func connectUpstream(_ exchange: Exchange) {
        let connector = UpstreamConnector(origin: exchange.origin, worker: worker,
                                          tls: exchange.kind != .connect && exchange.origin.scheme == .https)
        connector.delegate = self
        exchange.connector = connector
        arm(.connect, configuration.timeouts.connect)
        connector.start()  // may call back before returning (IP literals, /etc/hosts)
    }

    func connectorDidConnect(_ connector: UpstreamConnector, bev upstream: OpaquePointer, tls: Bool) {
        configuration.metrics.upstreamConnections.add(1, ordering: .relaxed)
        guard let exchange, exchange.connector === connector else {
            worker.pool.release(upstream)
            return
        }
        exchange.connector = nil
        attachUpstream(upstream, reused: false, tls: tls)
        flushOutputs()
    }

    func connectorDidFail(_ connector: UpstreamConnector, error: ProxyError) {
        guard let exchange, exchange.connector === connector else { return }
        exchange.connector = nil
        failExchange(error)
        flushOutputs()
    }

    private func attachUpstream(_ upstream: OpaquePointer, reused: Bool, tls: Bool) {
        guard let exchange else { return }
        exchange.upstream = upstream
        exchange.upstreamReused = reused
        exchange.upstreamTLS = tls
        let context = Unmanaged.passUnretained(self).toOpaque()
        bufferevent_setcb(upstream, upstreamReadCallback, upstreamWriteCallback, upstreamEventCallback, context)
        configureBuffers(upstream)
        if tls {
            bufferevent_enable(upstream, sp_ev_read() | sp_ev_write())
        } else {
            bufferevent_disable(upstream, sp_ev_write())
            bufferevent_enable(upstream, sp_ev_read())
        }
        if exchange.kind == .connect {
            EventBuffer.append(clientOutput, Array("HTTP/1.1 200 Connection Established\r\n\r\n".utf8))
            enterTunnel()
            return
        }
        EventBuffer.append(outputBuffer(upstream), exchange.upstreamHead)
        if let replayBody = exchange.replayBody, !replayBody.isEmpty {
            EventBuffer.append(outputBuffer(upstream), replayBody)
        }
        if exchange.requestPump.isComplete {
            arm(.responseHead, configuration.timeouts.upstream)
        } else {
            pumpRequestBody()
        }
    }

    // MARK: 4. Request body → upstream

    private func pumpRequestBody() {
        guard let exchange, let upstream = exchange.upstream, !exchange.requestPump.isComplete else { return }
        let before = exchange.requestPump.bodyBytes
        let complete: Bool
        do {
            complete = try exchange.requestPump.pump(
                from: clientInput, to: outputBuffer(upstream), highWatermark: highWatermark
            )
        } catch {
            // Part of the body may already be upstream: that request is cut, never completed.
            failExchange(ProxyError(HTTPParseError(error)), closeClient: true)
            return
        }
        if complete {
            if !exchange.responseStarted { arm(.responseHead, configuration.timeouts.upstream) }
        } else if clientReadClosed, EventBuffer.length(clientInput) == 0 {
            abort()  // the client went away mid-body
        } else if !exchange.responseStarted, exchange.requestPump.bodyBytes != before || timerPurpose != .stall {
            // Progress restarts the stall timer; no progress leaves a running one alone.
            arm(.stall, configuration.timeouts.idle)
        }
    }

    // MARK: 5. Response head ← upstream

    fileprivate func upstreamReadable() {
        guard let exchange, let upstream = exchange.upstream else { return }
        switch phase {
        case .tunnel:
            pumpTunnel(from: upstream, to: bev)
        case .exchange where !exchange.responseStarted:
            readResponseHead(exchange, upstream: upstream)
        case .exchange:
            pumpResponseBody()
        default:
            break
        }
    }

    private func readResponseHead(_ exchange: Exchange, upstream: OpaquePointer) {
        let input = inputBuffer(upstream)
        while phase == .exchange, !exchange.responseStarted {
            let available = EventBuffer.length(input)
            guard available > 0 else { return }
            exchange.receivedResponseBytes = true
            let bytes = EventBuffer.contiguousPrefix(input, min(available, HeadLimits.response.maxHeadBytes + 2))
            let head: ResponseHead
            do {
                guard let boundary = try exchange.responseScanner.scan(bytes) else { return }
                head = try HeadParser.parseResponse(UnsafeRawBufferPointer(rebasing: bytes[boundary.start..<boundary.end]))
                evbuffer_drain(input, boundary.end)
                exchange.responseScanner = HeadScanner(limits: .response)
            } catch {
                failExchange(.badUpstreamResponse(exchange.origin, Self.describe(HTTPParseError(error))))
                return
            }
            if head.isInformational {
                handleInformational(head, exchange)
            } else {
                handleFinalHead(head, exchange)
            }
        }
    }

    private func handleInformational(_ head: ResponseHead, _ exchange: Exchange) {
        if head.status == 101 {
            guard exchange.kind == .upgrade else {
                failExchange(.badUpstreamResponse(exchange.origin, "101 without an upgrade request"))
                return
            }
            let switching = Forwarding.clientResponse(
                from: head, framing: .none, clientVersion: exchange.request.version, keepAlive: true, switchingProtocols: true
            )
            EventBuffer.append(clientOutput, switching.serialized())
            exchange.response = head
            enterTunnel()
            return
        }
        exchange.informationalResponses += 1
        guard exchange.informationalResponses <= configuration.limits.maxInformationalResponses else {
            failExchange(.badUpstreamResponse(exchange.origin, "too many interim responses"))
            return
        }
        // 1xx must not go to an HTTP/1.0 client (RFC 9110 §15.2).
        if exchange.request.version == .http1_1 {
            let interim = Forwarding.clientResponse(
                from: head, framing: .none, clientVersion: .http1_1, keepAlive: true
            )
            EventBuffer.append(clientOutput, interim.serialized())
        }
    }

    private func handleFinalHead(_ head: ResponseHead, _ exchange: Exchange) {
        var head = head
        if let publicOrigin = routePublicOrigin, let location = head.fields.first("location"),
           case .target(let target) = RedirectPolicy.resolve(location, origin: exchange.origin, pathAndQuery: exchange.pathAndQuery),
           target.origin == exchange.origin {
            // A route's client knows only the route: a Location pointing upstream is rewritten back.
            let routeAuthority = exchange.request.fields.first("host").flatMap { host in
                (try? RequestTarget.parseAuthority(Substring(host))) != nil ? host : nil
            } ?? publicOrigin.authority
            head.fields.set(name: "Location", value: "http://\(routeAuthority)\(target.pathAndQuery)")
        } else if !applyRedirectPolicy(head, exchange) {
            return
        }
        let framing: BodyFraming
        do {
            framing = try BodyFraming.forResponse(head, requestMethod: exchange.request.method)
        } catch {
            failExchange(.badUpstreamResponse(exchange.origin, Self.describe(HTTPParseError(error))))
            return
        }
        let clientFraming = Forwarding.clientFraming(upstream: framing, clientVersion: exchange.request.version)
        exchange.keepAlive = exchange.request.wantsKeepAlive && !worker.isDraining && !clientReadClosed
            && clientFraming != .untilClose && exchange.requestPump.isComplete
        var clientHead = Forwarding.clientResponse(
            from: head, framing: clientFraming, clientVersion: exchange.request.version, keepAlive: exchange.keepAlive
        )
        if let id = record?.id { clientHead.fields.set(name: "X-Request-ID", value: id) }
        let headBytes = clientHead.serialized()
        EventBuffer.append(clientOutput, headBytes)
        record?.status = head.status
        record?.responseFields = clientHead.fields
        record?.bytesOut += UInt64(headBytes.count)
        exchange.response = head
        exchange.responsePump = BodyPump(inbound: framing, outbound: clientFraming)
        if configuration.accessLog?.logBodies == true {
            exchange.responsePump.startObserving(limit: configuration.limits.maxObservedBody)
        }
        arm(.stall, configuration.timeouts.idle)
        pumpResponseBody()
    }

    /// The redirect decision on a 3xx with Location. Returns false when the exchange was taken over
    /// (blocked, or followed by the proxy itself).
    private func applyRedirectPolicy(_ head: ResponseHead, _ exchange: Exchange) -> Bool {
        let verdict = exchange.context.redirects.decide(
            status: head.status, location: head.fields.first("location"), requestMethod: exchange.method,
            from: exchange.origin, pathAndQuery: exchange.pathAndQuery, hops: exchange.hops)
        switch verdict {
        case .notRedirect:
            return true
        case .pass(let target):
            if let target { record?.redirect = (head.fields.first("location"), target.origin, "pass") }
            return true
        case .block(let target):
            if let target { record?.redirect = (head.fields.first("location"), target, "block") }
            failExchange(.redirectBlocked(target))  // the target receives nothing
            return false
        case .tooManyHops:
            failExchange(.redirectLoop)
            return false
        case .follow(let target, let method, let replay):
            // Follow only when the whole request was read (its body, if replayed, kept in memory);
            // otherwise the client gets the 3xx and follows it itself, scoped on its own.
            let body: [UInt8]? = replay ? exchange.replayableBody : []
            guard exchange.requestPump.isComplete, let body else {
                record?.redirect = (head.fields.first("location"), target.origin, "pass")
                return true
            }
            record?.status = head.status
            record?.responseFields = head.fields
            record?.redirect = (head.fields.first("location"), target.origin, "follow")
            followRedirect(exchange, to: target, method: method, body: body)
            return false
        }
    }

    /// The next hop of a chain the proxy follows: the 3xx is dropped (its connection is not reused),
    /// and the original request is scoped afresh for the new origin.
    private func followRedirect(_ exchange: Exchange, to target: RedirectTarget, method: String, body: [UInt8]) {
        dropUpstream(of: exchange)
        var chain = exchange.chain
        // A client credential stripped once stays stripped for the rest of the chain.
        chain.strippedByClientHeader.formUnion(exchange.decision.stripped.map { $0.lowercased() })
        if exchange.origin.scheme == .https && target.origin.scheme == .http { chain.downgraded = true }
        var clientHead = exchange.request
        if body.isEmpty && method != exchange.method {
            clientHead.fields.removeAll("content-type")
        }
        self.exchange = nil
        // Each hop is its own log line, all with the request's id.
        let id = record?.id
        record?.bytesIn += exchange.requestPump.bodyBytes
        emitRecord()
        startRecord(clientHead, headBytes: 0, id: id)
        forward(clientHead, method: method, origin: target.origin, pathAndQuery: target.pathAndQuery, userinfo: nil,
                framing: body.isEmpty ? .none : .contentLength(UInt64(body.count)), context: exchange.context,
                chain: chain, hops: exchange.hops + 1, replayBody: body)
    }

    // MARK: 6. Response body → client

    private func pumpResponseBody() {
        guard let exchange, let upstream = exchange.upstream, exchange.responseStarted, phase == .exchange else { return }
        let input = inputBuffer(upstream)
        var complete: Bool
        do {
            complete = try exchange.responsePump.pump(from: input, to: clientOutput, highWatermark: highWatermark)
        } catch {
            cutResponse()
            return
        }
        // The origin hung up: that ends a close-delimited body, and cuts any other one, but only
        // once the bytes it sent before closing (held back by backpressure) have gone out.
        if !complete, exchange.upstreamClosed, EventBuffer.length(input) == 0 {
            exchange.responsePump.sourceClosed()
            complete = exchange.responsePump.isComplete
            if !complete {
                cutResponse()
                return
            }
        }
        if complete {
            finishExchange(exchange)
        } else {
            arm(.stall, configuration.timeouts.idle)
        }
    }

    // MARK: 7. Keep-alive or close

    private func finishExchange(_ exchange: Exchange) {
        cancelTimer()
        if let upstream = exchange.upstream {
            exchange.upstream = nil
            // Reuse only a connection known clean: whole request sent, whole response read,
            // nothing after it, and the origin did not ask to close.
            let reusable = exchange.response?.allowsReuse == true && exchange.requestPump.isComplete
                && !exchange.responsePump.isDelimitedByClose && !exchange.upstreamClosed
                && EventBuffer.length(inputBuffer(upstream)) == 0
            if reusable {
                worker.pool.checkin(UpstreamConnection(origin: exchange.origin, bev: upstream))
            } else {
                worker.pool.release(upstream)
            }
        }
        self.exchange = nil
        record?.bytesIn += exchange.requestPump.bodyBytes
        record?.bytesOut += exchange.responsePump.bodyBytes
        if configuration.accessLog?.logBodies == true {
            record?.requestBody = Self.observedBody(exchange.requestPump, exchange.request.fields)
            record?.responseBody = Self.observedBody(exchange.responsePump, exchange.response?.fields ?? HTTPFields())
        }
        emitRecord()
        guard exchange.keepAlive, exchange.requestPump.isComplete, !worker.isDraining else {
            closeAfterFlush()
            return
        }
        phase = .awaitingHead
        if EventBuffer.length(clientInput) > 0 {
            readRequestHead()  // a pipelined request, answered in order
        } else if clientReadClosed {
            closeAfterFlush()
        } else {
            arm(.idle, configuration.timeouts.idle)
        }
    }

    // MARK: Upstream events

    fileprivate func upstreamWritable() {
        if let exchange, let upstream = exchange.upstream, !exchange.upstreamTLS, EventBuffer.length(outputBuffer(upstream)) == 0 {
            bufferevent_disable(upstream, sp_ev_write())
        }
        switch phase {
        case .exchange: pumpRequestBody()
        case .tunnel: if let upstream = exchange?.upstream { pumpTunnel(from: bev, to: upstream) }
        case .closing:
            // A tunnel whose client hung up closes once the upstream has taken the last bytes.
            if let upstream = exchange?.upstream, EventBuffer.length(outputBuffer(upstream)) == 0 { close() }
        case .awaitingHead: break
        }
    }

    fileprivate func upstreamEvent(_ events: Int16) {
        guard let exchange, exchange.upstream != nil else { return }
        guard events & (sp_bev_event_eof() | sp_bev_event_error()) != 0 else { return }
        exchange.upstreamClosed = true
        switch phase {
        case .tunnel:
            closeTunnel(closedSideIsClient: false)
        case .exchange where !exchange.responseStarted:
            // A pooled connection the origin closed just as we reused it: retry once on a fresh
            // one, but only when nothing of the response arrived and no body bytes were sent.
            if exchange.upstreamReused, !exchange.retried, !exchange.receivedResponseBytes,
               exchange.requestPump.bodyBytes == 0 {
                exchange.retried = true
                dropUpstream(of: exchange)
                exchange.upstreamClosed = false
                connectUpstream(exchange)
            } else if exchange.receivedResponseBytes {
                failExchange(.badUpstreamResponse(exchange.origin, "connection closed inside the response head"))
            } else {
                failExchange(.upstreamClosed(exchange.origin))
            }
        case .exchange:
            pumpResponseBody()
        default:
            break
        }
    }

    // MARK: Client events

    fileprivate func clientWritable() {
        if !clientTLS, EventBuffer.length(clientOutput) == 0 { bufferevent_disable(bev, sp_ev_write()) }
        switch phase {
        case .exchange: pumpResponseBody()
        case .tunnel: if let upstream = exchange?.upstream { pumpTunnel(from: upstream, to: bev) }
        case .closing: if EventBuffer.length(clientOutput) == 0 { flushed() }
        case .awaitingHead: break
        }
    }

    fileprivate func clientEvent(_ events: Int16) {
        guard events & (sp_bev_event_eof() | sp_bev_event_error()) != 0 else { return }
        clientReadClosed = true
        if events & sp_bev_event_error() != 0 {
            close()
            return
        }
        switch phase {
        case .awaitingHead:
            if EventBuffer.length(clientInput) == 0 { close() } else { readRequestHead() }
            if phase == .awaitingHead { close() }  // a partial head that will never complete
        case .exchange:
            // A client may half-close once its request is sent; the response still goes out.
            if let exchange, !exchange.requestPump.isComplete { pumpRequestBody() }
        case .tunnel:
            closeTunnel(closedSideIsClient: true)
        case .closing:
            close()
        }
    }

    // MARK: TLS interception

    /// CONNECT to an intercepted host: answer 200, then terminate the client's TLS with a leaf minted
    /// by the local CA, and treat each inner request like a plain one whose origin is the tunnel's.
    private func intercept(_ origin: Origin) {
        EventBuffer.append(clientOutput, Array("HTTP/1.1 200 Connection Established\r\n\r\n".utf8))
        flushOutput(bev)
        emitRecord { record in
            record.status = 200
            record.tunnelDecision = "intercept"
        }
        guard let tls = configuration.tls, let ssl = try? tls.serverSession(for: origin.hostForLookup) else {
            closeAfterFlush()
            return
        }
        bufferevent_enable(bev, sp_ev_read() | sp_ev_write())
        guard let filter = bufferevent_openssl_filter_new(
            worker.base, bev, ssl, bufferevent_ssl_state(UInt32(sp_bufferevent_ssl_accepting())), Int32(BEV_OPT_CLOSE_ON_FREE.rawValue))
        else {
            SSL_free(ssl)
            closeAfterFlush()
            return
        }
        bev = filter
        clientTLS = true
        interceptedOrigin = origin
        let context = Unmanaged.passUnretained(self).toOpaque()
        bufferevent_setcb(filter, clientReadCallback, clientWriteCallback, clientEventCallback, context)
        configureBuffers(filter)
        bufferevent_enable(filter, sp_ev_read() | sp_ev_write())
        exchange = nil
        phase = .awaitingHead
        scanner = HeadScanner(limits: .request)
        arm(.clientHead, configuration.timeouts.clientHeader)
    }

    // MARK: Tunnels (CONNECT, and Upgrade after 101)

    private func enterTunnel() {
        phase = .tunnel
        if exchange?.kind == .connect {
            // A tunnel's line counts the bytes spliced each way, not the CONNECT exchange itself.
            record?.status = 200
            record?.tunnelDecision = "tunnel"
            record?.bytesIn = 0
        }
        arm(.stall, configuration.timeouts.idle)
        guard let upstream = exchange?.upstream else { return }
        pumpTunnel(from: bev, to: upstream)
        pumpTunnel(from: upstream, to: bev)
    }

    private func pumpTunnel(from source: OpaquePointer, to destination: OpaquePointer) {
        let input = inputBuffer(source)
        let output = outputBuffer(destination)
        let room = highWatermark - EventBuffer.length(output)
        guard room > 0, EventBuffer.length(input) > 0 else { return }
        let moved = UInt64(EventBuffer.move(from: input, to: output, count: min(room, EventBuffer.length(input))))
        if source == bev { tunnelBytesIn += moved } else { tunnelBytesOut += moved }
        arm(.stall, configuration.timeouts.idle)
    }

    /// One side hung up: hand over what it sent, then close once the other side has it.
    private func closeTunnel(closedSideIsClient: Bool) {
        guard let exchange, let upstream = exchange.upstream else { return close() }
        if closedSideIsClient {
            EventBuffer.move(from: clientInput, to: outputBuffer(upstream), count: EventBuffer.length(clientInput))
            // Give the upstream a moment to take the last bytes, bounded by the linger timer.
            phase = .closing
            lingering = true
            arm(.linger, 2_000)
            if EventBuffer.length(outputBuffer(upstream)) == 0 { close() }
        } else {
            let input = inputBuffer(upstream)
            EventBuffer.move(from: input, to: clientOutput, count: EventBuffer.length(input))
            dropUpstream(of: exchange)
            closeAfterFlush()
        }
    }

    // MARK: Errors

    /// Answers a request the proxy will not forward, then closes: its body (if any) was not read,
    /// so the byte stream cannot be trusted for another request.
    private func reject(_ error: ProxyError, consumedBody: Bool = false) {
        cancelTimer()
        let keepAlive = consumedBody && error.allowsKeepAlive && !worker.isDraining && !clientReadClosed
        if record == nil { startRecord(nil, headBytes: 0) }
        let response = error.response(keepAlive: keepAlive, requestID: record?.id ?? "")
        EventBuffer.append(clientOutput, response)
        emitRecord { record in
            record.status = error.status
            record.error = error.code
            record.bytesOut += UInt64(response.count)
            if case .tunnelDenied = error { record.tunnelDecision = "deny" }
        }
        if keepAlive {
            phase = .awaitingHead
            exchange = nil
            if EventBuffer.length(clientInput) > 0 { readRequestHead() } else { arm(.idle, configuration.timeouts.idle) }
        } else {
            closeAfterFlush()
        }
    }

    /// The exchange failed before or while its response head was read.
    private func failExchange(_ error: ProxyError, closeClient: Bool = false) {
        guard let exchange else { return }
        dropUpstream(of: exchange)
        if exchange.responseStarted {
            cutResponse()
            return
        }
        self.exchange = nil
        record?.bytesIn += exchange.requestPump.bodyBytes
        reject(error, consumedBody: !closeClient && exchange.requestPump.isComplete && exchange.request.wantsKeepAlive)
    }

    /// The response was already under way: close without completing it (a chunked body is left
    /// unterminated), so the client can never mistake a truncated body for a whole one.
    private func cutResponse() {
        if let exchange {
            record?.bytesIn += exchange.requestPump.bodyBytes
            record?.bytesOut += exchange.responsePump.bodyBytes
            emitRecord { $0.error = "response_cut" }
            dropUpstream(of: exchange)
            self.exchange = nil
        }
        closeAfterFlush()
    }

    /// Gives up the exchange's upstream: a connect in progress is cancelled, a connection is closed
    /// (never pooled: only `finishExchange` knows when one is clean enough to reuse).
    private func dropUpstream(of exchange: Exchange) {
        exchange.connector?.cancel()
        exchange.connector = nil
        if let upstream = exchange.upstream {
            exchange.upstream = nil
            worker.pool.release(upstream)
        }
    }

    // MARK: Output

    /// Runs at the end of every callback: writes pending output on both sides directly, so one
    /// turn of the loop produces at most one writev per socket.
    fileprivate func flushOutputs() {
        guard !isClosed else { return }
        if let exchange, let upstream = exchange.upstream { flushOutput(upstream, tls: exchange.upstreamTLS) }
        let clientDrained = flushOutput(bev, tls: clientTLS)
        if phase == .closing, clientDrained, !lingering { flushed() }
    }

    // MARK: Closing

    private func closeAfterFlush() {
        phase = .closing
        if !lingering { arm(.linger, configuration.timeouts.idle) }
    }

    /// Output is out: half-close and read until the client closes (bounded), so unread request
    /// bytes do not turn our close into a reset that could destroy the response in flight.
    private func flushed() {
        guard !lingering else { return }
        lingering = true
        if clientTLS {
            // The filter's output is empty, but the encrypted bytes may still sit in the socket
            // bufferevent under it: freeing now would drop the end of the response. Close once
            // that drains too (a TLS connection cannot half-close under its record layer).
            tlsDrainChecks = 0
            closeWhenTLSDrained()
            return
        }
        if clientReadClosed {
            close()
            return
        }
        shutdown(bufferevent_getfd(bev), Int32(SHUT_WR))
        evbuffer_drain(clientInput, EventBuffer.length(clientInput))
        arm(.linger, 2_000)
    }

    private var tlsDrainChecks = 0

    private func closeWhenTLSDrained() {
        guard let underlying = bufferevent_get_underlying(bev), EventBuffer.length(outputBuffer(underlying)) > 0,
              tlsDrainChecks < 400 else {
            close()
            return
        }
        tlsDrainChecks += 1
        arm(.tlsDrain, 5)
    }

    /// Called by the worker when it starts draining: idle connections close now, busy ones after
    /// their exchange.
    func drain() {
        if phase == .awaitingHead, EventBuffer.length(clientInput) == 0 { close() }
    }

    func abort() {
        close()
    }

    private func close() {
        guard !isClosed else { return }
        isClosed = true
        emitRecord { record in
            record.bytesIn += self.tunnelBytesIn
            record.bytesOut += self.tunnelBytesOut
            if record.tunnelDecision == nil, record.error == nil, self.phase != .closing { record.error = "client_closed" }
        }
        cancelTimer()
        event_free(timer)
        if let exchange {
            dropUpstream(of: exchange)
            self.exchange = nil
        }
        bufferevent_free(bev)
        worker.connectionClosed(self)
    }

    // MARK: Access log

    /// Opens the record for a request: its id is the client's X-Request-ID when well-formed.
    private func startRecord(_ head: RequestHead?, headBytes: Int, id: String? = nil) {
        let clientID = head?.fields.first("x-request-id").flatMap { RequestID.isWellFormed($0) ? $0 : nil }
        record = ExchangeRecord(id: id ?? clientID ?? worker.requestIDs.next(), client: peer, method: head?.method,
                                startedAt: monotonicMicroseconds())
        record?.bytesIn = UInt64(headBytes)
        record?.requestFields = head?.fields
        tunnelBytesIn = 0
        tunnelBytesOut = 0
    }

    /// Counts the exchange in /metrics and writes its log line; at most once per record.
    private func emitRecord(_ update: (inout ExchangeRecord) -> Void = { _ in }) {
        guard var current = record else { return }
        record = nil
        update(&current)
        let statusClass = current.status.map { Self.statusClasses[min(max($0 / 100, 0), 5)] } ?? "none"
        var updates: [(name: String, labels: [(String, String)], amount: UInt64)] = [
            ("scopeproxy_requests_total", [("status_class", statusClass), ("scope", current.scopes.first ?? "none")], 1),
            ("scopeproxy_bytes_in_total", [], current.bytesIn),
            ("scopeproxy_bytes_out_total", [], current.bytesOut),
        ]
        for name in current.injected { updates.append(("scopeproxy_injected_total", [("header", name.lowercased())], 1)) }
        for name in current.stripped { updates.append(("scopeproxy_stripped_total", [("header", name.lowercased())], 1)) }
        if let redirect = current.redirect { updates.append(("scopeproxy_redirects_total", [("decision", redirect.decision)], 1)) }
        if let error = current.error, Self.upstreamErrorCodes.contains(error) {
            updates.append(("scopeproxy_upstream_errors_total", [("kind", error)], 1))
        }
        configuration.metrics.increment(updates)
        configuration.accessLog?.record(current)
    }

    private static let statusClasses = ["0xx", "1xx", "2xx", "3xx", "4xx", "5xx"]

    private static let upstreamErrorCodes: Set<String> = [
        "dns_failure", "upstream_refused", "connect_timeout", "upstream_timeout", "upstream_closed", "bad_upstream_response", "response_cut",
    ]

    private static func observedBody(_ pump: BodyPump, _ fields: HTTPFields) -> ExchangeRecord.ObservedBody? {
        guard let observed = pump.observed, pump.bodyBytes > 0 else { return nil }
        return ExchangeRecord.ObservedBody(bytes: observed, total: pump.bodyBytes, truncated: pump.observedTruncated,
                                           contentType: fields.first("content-type"))
    }

    // MARK: Timers

    private func arm(_ purpose: TimerPurpose, _ milliseconds: Int) {
        timerPurpose = purpose
        sp_event_add_ms(timer, milliseconds)
    }

    private func cancelTimer() {
        timerPurpose = .none
        event_del(timer)
    }

    fileprivate func timerFired() {
        let purpose = timerPurpose
        timerPurpose = .none
        switch purpose {
        case .none:
            break
        case .clientHead:
            if scanner.hasStarted || EventBuffer.length(clientInput) > 0 { reject(.requestHeadTimeout) } else { close() }
        case .idle, .linger:
            close()
        case .tlsDrain:
            closeWhenTLSDrained()
        case .connect:
            if let exchange { failExchange(.connectTimeout(exchange.origin)) }
        case .responseHead:
            if let exchange { failExchange(.responseTimeout(exchange.origin)) }
        case .stall:
            // No progress in either direction for `idle`: a stuck peer. Cut, never complete.
            if let exchange, phase == .exchange, !exchange.responseStarted, exchange.requestPump.isComplete {
                failExchange(.responseTimeout(exchange.origin))
            } else {
                cutResponse()
            }
        }
    }

    private static func describe(_ error: HTTPParseError) -> String {
        switch error {
        case .headTooLarge: "response head too large"
        case .tooManyFields: "too many response header fields"
        case .targetTooLong: "target too long"
        case .unsupportedVersion: "unsupported HTTP version"
        case .unsupportedTransferCoding: "unsupported transfer coding"
        case .malformed(let reason): reason
        }
    }
}

// Trampolines: capture-free C callbacks that recover the connection from the context pointer.
// The worker's registry keeps the connection alive; withExtendedLifetime covers a close() inside.
// Every callback ends by flushing output, so a turn of the loop writes each socket at most once.

private func withConnection(_ context: UnsafeMutableRawPointer?, _ body: (ClientConnection) -> Void) {
    let connection = Unmanaged<ClientConnection>.fromOpaque(context!).takeUnretainedValue()
    withExtendedLifetime(connection) {
        body(connection)
        connection.flushOutputs()
    }
}

private func clientReadCallback(_: OpaquePointer?, _ context: UnsafeMutableRawPointer?) {
    withConnection(context) { $0.clientReadable() }
}

private func clientWriteCallback(_: OpaquePointer?, _ context: UnsafeMutableRawPointer?) {
    withConnection(context) { $0.clientWritable() }
}

private func clientEventCallback(_: OpaquePointer?, _ events: Int16, _ context: UnsafeMutableRawPointer?) {
    withConnection(context) { $0.clientEvent(events) }
}

private func upstreamReadCallback(_: OpaquePointer?, _ context: UnsafeMutableRawPointer?) {
    withConnection(context) { $0.upstreamReadable() }
}

private func upstreamWriteCallback(_: OpaquePointer?, _ context: UnsafeMutableRawPointer?) {
    withConnection(context) { $0.upstreamWritable() }
}

private func upstreamEventCallback(_: OpaquePointer?, _ events: Int16, _ context: UnsafeMutableRawPointer?) {
    withConnection(context) { $0.upstreamEvent(events) }
}

private func timerCallback(_: Int32, _: Int16, _ context: UnsafeMutableRawPointer?) {
    withConnection(context) { $0.timerFired() }
}
