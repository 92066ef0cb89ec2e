// Fuzz target (fuzz/FuzzMain.swift dispatches): raw client bytes (a connection preface, then frames
// in any order, cut at any point) into a real server-role `H2Session` (nghttp2 through mem_recv,
// evbuffers from libevent), whose delegate drives the pure core as the engine's
// H2ClientConnection and H2Stream do: an `H2FloodGuard` for the connection, a `StreamMachine` per
// stream. A fake upstream answers from the input (connected, response heads, body progress,
// closes, timers, tokens). Checked after every step:
//  1. no input traps;
//  2. a stream gets at most one final response (`.respond`), its `.endStream` only after a relayed
//     one, nothing after END_STREAM or RST_STREAM;
//  3. nothing reaches a hop the stream released, and an event of a released (or never connected)
//     hop has no effect;
//  4. a client credential (a `CLIENTCRED…` token in a stream's `authorization`) goes only to the
//     origin that stream addressed, never to another stream's hop;
//  5. every hop connected is released exactly once by the time its stream is gone;
//  6. once the flood guard said GOAWAY, no header block or DATA reaches a stream; once the
//     session's GOAWAY is out, nothing more is read;
//  7. memory per connection is bounded: DATA nobody consumed stays within the windows we
//     announced, and the output stays within the watermark (plus one frame) while the client does
//     not read.
//
// Input bytes: the first picks the scope configuration (bits 0-2) and whether the harness writes the
// preface itself (bit 7 clear); two more give the length of the control part (big-endian), which
// follows; the rest is the wire. Each control byte (mod 8) is a step: 0-2 feed the next
// 1-128 or 64-8192 bytes of the wire and read them, 3 add bytes without reading, 4-5 an upstream
// event for one stream (what the engine would most likely report next), 6 the client reads what was
// written, 7 an event of a stale hop. When the control part is used up, the rest of the wire is
// read, the streams' upstreams answer until done, and the connection closes.

import CLibevent

#if canImport(Glibc)
    import Glibc
#endif

/// The libevent buffer helpers `H2Session` uses (ProxyEngine's LibeventSupport holds the originals;
/// the fuzz build does not compile the engine).
enum EventBuffer {
    static func length(_ buffer: OpaquePointer) -> Int { evbuffer_get_length(buffer) }

    static func firstExtent(_ buffer: OpaquePointer) -> UnsafeRawBufferPointer? {
        var vector = iovec()
        guard evbuffer_peek(buffer, -1, nil, &vector, 1) > 0, vector.iov_len > 0 else { return nil }
        return UnsafeRawBufferPointer(start: vector.iov_base, count: vector.iov_len)
    }
}

private let h2Tracing = getenv("SCOPEPROXY_FUZZ_TRACE") != nil
private let credentialMarker = Array("CLIENTCRED".utf8)
private let clientPreface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
/// The engine's `limits.buffer_high_watermark` default: the session writes while the output holds less.
private let outputWatermark = 64 * 1024

private func parsedResponse(_ text: String) -> ResponseHead {
    let bytes = Array(text.utf8)
    let head = bytes.withUnsafeBytes { buffer -> ResponseHead? in
        var scanner = HeadScanner(limits: .response)
        guard let boundary = try? scanner.scan(buffer) else { return nil }
        return try? HeadParser.parseResponse(UnsafeRawBufferPointer(rebasing: buffer[boundary.start..<boundary.end]))
    }
    guard let head else { fatalError("fixture response does not parse: \(text)") }
    return head
}

private let upstreamResponses: [ResponseHead] = [
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
    "HTTP/1.1 204 No Content\r\n\r\n", "HTTP/1.1 100 Continue\r\n\r\n", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
    "HTTP/1.1 200 OK\r\n\r\n", "HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 302 Found\r\nLocation: https://cdn.scoped.test/x\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://other.test/y\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 301 Moved\r\nLocation: /same\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
    // Completes an RFC 8441 stream's handshake (the streams' key is fixed: `fuzzWebSocketKey`).
    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: \(ExtendedConnect.accept(forKey: fuzzWebSocketKey))\r\n\r\n",
].map(parsedResponse)

private let fuzzWebSocketKey = "dGhlIHNhbXBsZSBub25jZQ=="

private let refusingOrigin = try! Origin.parse("http://other.test")
private let fuzzAccessToken = AccessToken(value: SecretValue("SECRETAPI7f3k"), generation: 1, validUntil: 0)

/// What one stream's actions said so far, and the engine's per-stream buffers (counted, not kept).
private final class FuzzStream {
    let id: Int32
    var machine: StreamMachine
    /// The origin the client's block named: the only one its credentials may reach.
    let addressed: Origin?
    /// `CLIENTCRED…` tokens of its `authorization`, and those of every other field (an ambiguous
    /// token, in both, is not checked: other fields may follow a redirect).
    let credentials: Set<[UInt8]>
    let otherTokens: Set<[UInt8]>
    var origins: [HopID: Origin] = [:]
    var connectedOrder: [HopID] = []
    var released: Set<HopID> = []
    var upstreamConnected: Set<HopID> = []
    var pumping: Set<HopID> = []
    var relaying: Set<HopID> = []
    /// The hop whose WebSocket frames the stream relays (RFC 8441, after its 200).
    var webSocket: HopID?
    var requestComplete: Set<HopID> = []
    var finals = 0
    var ended = false
    var relayed = false
    var resetByUs = false
    var armed: TimerPurpose?
    var isClosed = false
    /// DATA payload delivered and not yet taken by the upstream (the engine's request buffer).
    var pendingRequest = 0
    var requestEnded = false
    /// Response payload relayed and not yet read by the session's data provider.
    var responseSink = 0
    var responseEnded = false
    var providerDeferred = false

    init(id: Int32, machine: StreamMachine, fields: [H2HeaderField]) {
        self.id = id
        self.machine = machine
        // RFC 9113 §8.3.1: Host stands in for a missing :authority.
        let authority = (fields.first { $0.name == ":authority" } ?? fields.first { $0.name == "host" })?.value ?? ""
        let scheme = fields.first { $0.name == ":scheme" }?.value ?? "https"
        addressed = try? Origin.parse(scheme + "://" + authority)
        var credentials: Set<[UInt8]> = []
        var others: Set<[UInt8]> = []
        for field in fields {
            let tokens = credentialTokens(in: Array(field.value.utf8))
            if field.name == "authorization" { credentials.formUnion(tokens) } else { others.formUnion(tokens) }
        }
        self.credentials = credentials
        otherTokens = others
    }
}

/// Every `CLIENTCRED` followed by its letters and digits.
private func credentialTokens(in bytes: [UInt8]) -> Set<[UInt8]> {
    var tokens: Set<[UInt8]> = []
    var index = 0
    while index + credentialMarker.count <= bytes.count {
        guard bytes[index..<index + credentialMarker.count].elementsEqual(credentialMarker) else {
            index += 1
            continue
        }
        var end = index + credentialMarker.count
        while end < bytes.count, end - index < 40,
            (bytes[end] >= 0x30 && bytes[end] <= 0x39) || (bytes[end] | 0x20 >= 0x61 && bytes[end] | 0x20 <= 0x7A)
        {
            end += 1
        }
        tokens.insert(Array(bytes[index..<end]))
        index = end
    }
    return tokens
}

private final class H2ConnectionHarness: H2SessionDelegate {
    let fixture: MachineFixture
    var session: H2Session!
    var floodGuard = H2FloodGuard()
    var streams: [Int32: FuzzStream] = [:]
    var everyStream: [FuzzStream] = []
    var ids = RequestIDGenerator(seed: 1)
    var goingAway = false
    /// The flood guard said GOAWAY (from a frame header or a new stream).
    var guardVerdict = false
    /// The harness (as the engine) terminated the session.
    var terminated = false
    let input: OpaquePointer = evbuffer_new()
    let output: OpaquePointer = evbuffer_new()
    var control: FuzzInput
    /// The last steps, kept only with SCOPEPROXY_FUZZ_TRACE=1 (describing every action costs most of
    /// the run): replay a finding with it to see what led there.
    var trace: [String] = []
    /// Delegate calls so far (what "nothing was read" counts).
    var callbacks = 0

    func note(_ text: @autoclosure () -> String) {
        callbacks += 1
        if h2Tracing { trace.append(text()) }
    }

    init(fixture: MachineFixture, control: FuzzInput) {
        self.fixture = fixture
        self.control = control
        session = H2Session(role: .server, settings: H2Session.Settings(maxConcurrentStreams: 100), delegate: self)
    }

    deinit {
        evbuffer_free(input)
        evbuffer_free(output)
    }

    func fail(_ message: String) -> Never {
        let steps = h2Tracing ? trace.suffix(40).joined(separator: "\n") : "(SCOPEPROXY_FUZZ_TRACE=1 prints the steps)"
        fatalError("H2Connection: \(message)\n" + steps)
    }

    // MARK: Socket → session (H2ClientConnection.readable)

    func read() {
        guard let failure = session.receive(from: input) else { return }
        note("receive failed: \(failure.code)")
        goingAway = true
        let code: H2ErrorCode = failure == .flooded || failure == .stoppedByGuard ? .enhanceYourCalm : .protocolError
        terminate(code)
    }

    func terminate(_ code: H2ErrorCode) {
        terminated = true
        session.terminate(code: code.rawValue)
    }

    /// The session writes while the output is under the watermark (H2ClientConnection.flushOutputs).
    func flush() {
        guard !session.isProcessing else { return }
        session.send(to: output, highWatermark: outputWatermark)
        // One frame past the mark at most (a DATA frame is at most 16 KiB; a header block our
        // responses make is small).
        if EventBuffer.length(output) > outputWatermark + 64 * 1024 {
            fail("the output holds \(EventBuffer.length(output)) bytes while the client does not read")
        }
    }

    // MARK: H2SessionDelegate (as H2ClientConnection)

    func h2FrameStarted(_ session: H2Session, type: H2FrameType, flags: UInt8, stream: Int32, length: Int) -> Bool {
        note("frame \(type.rawValue) flags \(flags) stream \(stream) length \(length)")
        switch floodGuard.frameStarted(H2FrameKind(type: type.rawValue), flags: flags, stream: stream, length: length) {
        case .proceed:
            return true
        case .goAway(let violation):
            note("guard: \(violation.code)")
            guardVerdict = true
            goingAway = true
            return false
        }
    }

    func h2Headers(_ session: H2Session, stream id: Int32, fields: [H2HeaderField], endStream: Bool, kind: H2HeadersKind) {
        note("headers \(kind) stream \(id) endStream \(endStream) fields \(fields.count)")
        if guardVerdict { fail("a header block reached the connection after the flood guard's GOAWAY") }
        switch kind {
        case .request:
            if terminated { fail("a new stream was read after the session was terminated") }
            guard !goingAway else { return session.reset(stream: id, code: H2ErrorCode.refusedStream.rawValue) }
            if streams[id] != nil || everyStream.contains(where: { $0.id == id }) { fail("stream \(id) opened twice") }
            if case .goAway = floodGuard.streamOpened() {
                guardVerdict = true
                goingAway = true
                return terminate(.enhanceYourCalm)
            }
            var machine = StreamMachine(settings: fixture.settings, mode: .forwardProxy, facts: ConnectionFacts(peer: "127.0.0.1:4000"), proto: .h2c)
            machine.toleratesImpossibleEvents = true
            machine.makeWebSocketKey = { fuzzWebSocketKey }
            let stream = FuzzStream(id: id, machine: machine, fields: fields)
            streams[id] = stream
            everyStream.append(stream)
            if endStream { stream.requestEnded = true }
            var actions: [StreamAction] = []
            let headBytes = fields.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 32 }
            let arrival = Arrival(now: 1_000_000, scope: fixture.scope, wallClock: 1_700_000_000)
            stream.machine.start(fields, endStream: endStream, headBytes: headBytes, arrival, ids: &ids, into: &actions)
            execute(actions, on: stream)
        case .trailers:
            if endStream { streams[id]?.requestEnded = true }
        case .response, .interim:
            session.reset(stream: id, code: H2ErrorCode.protocolError.rawValue)
        }
    }

    func h2Data(_ session: H2Session, stream id: Int32, bytes: UnsafeRawBufferPointer) {
        note("data stream \(id) \(bytes.count)")
        if guardVerdict { fail("DATA reached a stream after the flood guard's GOAWAY") }
        guard let stream = streams[id], !stream.isClosed, !stream.requestEnded, !stream.machine.isFinished else {
            return session.consume(stream: id, bytes: bytes.count)
        }
        stream.pendingRequest += bytes.count
        // Flow control bounds what a client makes us hold: the stream window (the 64 KiB default
        // until our SETTINGS are acknowledged), the connection window for all streams.
        let streamBound = max(session.settings.streamWindow, 65_535)
        if stream.pendingRequest > streamBound { fail("stream \(id) holds \(stream.pendingRequest) unconsumed bytes") }
        let total = streams.values.reduce(0) { $0 + $1.pendingRequest }
        if total > session.settings.connectionWindow { fail("the connection holds \(total) unconsumed request bytes") }
    }

    func h2StreamEnded(_ session: H2Session, stream id: Int32) {
        note("end stream \(id)")
        streams[id]?.requestEnded = true
    }

    func h2StreamClosed(_ session: H2Session, stream id: Int32, code: UInt32) {
        note("closed stream \(id) code \(code)")
        guard let stream = streams.removeValue(forKey: id) else { return }
        if !stream.machine.isFinished, !stream.resetByUs, case .goAway = floodGuard.streamResetByClient(responseEnded: false) {
            guardVerdict = true
            goingAway = true
            terminate(.enhanceYourCalm)
        }
        if stream.machine.isFinished { floodGuard.streamAnswered() }
        close(stream)
        if streams.isEmpty, goingAway, !terminated { terminate(.noError) }
    }

    func h2StreamRejected(_ session: H2Session, stream id: Int32, reason: String) {
        note("rejected stream \(id): \(reason)")
    }

    func h2ReadBody(_ session: H2Session, stream id: Int32, into buffer: UnsafeMutableRawBufferPointer) -> H2BodyRead {
        guard let stream = streams[id] else { return .end(0, trailers: nil) }
        let count = min(buffer.count, stream.responseSink)
        if count > 0 {
            if let base = buffer.baseAddress { memset(base, 0x72, count) }
            stream.responseSink -= count
            floodGuard.responseDataSent()  // as H2ClientConnection.h2ReadBody: the budgets refill
            return stream.responseEnded && stream.responseSink == 0 ? .end(count, trailers: nil) : .bytes(count)
        }
        if stream.responseEnded { return .end(0, trailers: nil) }
        stream.providerDeferred = true
        return .deferred
    }

    // MARK: Streams (as H2Stream)

    func deliver(_ event: ConnectionEvent, to stream: FuzzStream) {
        note("  event \(String("\(event)".prefix(120))) to stream \(stream.id)")
        var actions: [StreamAction] = []
        stream.machine.handle(event, into: &actions)
        execute(actions, on: stream)
    }

    func close(_ stream: FuzzStream) {
        guard !stream.isClosed else { return }
        stream.isClosed = true
        deliver(.connectionClosed, to: stream)
        let unreleased = stream.connectedOrder.filter { !stream.released.contains($0) }
        if !unreleased.isEmpty { fail("stream \(stream.id): \(unreleased) never released") }
        if !stream.machine.isFinished { fail("stream \(stream.id) not finished once closed") }
    }

    func resumeIfDeferred(_ stream: FuzzStream) {
        guard stream.providerDeferred, stream.responseSink > 0 || stream.responseEnded else { return }
        stream.providerDeferred = false
        session.resumeData(stream: stream.id)
    }

    func execute(_ actions: [StreamAction], on stream: FuzzStream) {
        for action in actions {
            note("    -> \(String("\(action)".prefix(120)))")
            observe(action, on: stream)
            if stream.isClosed { continue }
            switch action {
            case .respond(let status, let fields, let body):
                switch body {
                case .none:
                    stream.responseEnded = true
                    session.submitResponse(stream: stream.id, status: status, fields: fields, hasBody: false)
                case .bytes(let bytes):
                    stream.responseSink += bytes.count
                    stream.responseEnded = true
                    session.submitResponse(stream: stream.id, status: status, fields: fields, hasBody: true)
                case .relayed:
                    session.submitResponse(stream: stream.id, status: status, fields: fields, hasBody: true)
                }
            case .interim(let status, let fields):
                session.submitInterim(stream: stream.id, status: status, fields: fields.map { H2HeaderField(name: $0.name, value: $0.value) })
            case .endStream:
                stream.responseEnded = true
                resumeIfDeferred(stream)
            case .reset(let code):
                stream.resetByUs = true
                session.reset(stream: stream.id, code: code.rawValue)
            case .exchange(.armTimer(let purpose, _)):
                stream.armed = purpose
            case .exchange(.cancelTimer):
                stream.armed = nil
            default:
                break
            }
        }
    }

    /// The checks of StreamInvariantTests' observer, for every action a stream asks for.
    func observe(_ action: StreamAction, on stream: FuzzStream) {
        let name = "stream \(stream.id)"
        switch action {
        case .respond(let status, _, let body):
            if stream.ended { fail("\(name): HEADERS \(status) after the stream ended") }
            stream.finals += 1
            if stream.finals > 1 { fail("\(name): a second final response") }
            switch body {
            case .none, .bytes: stream.ended = true
            case .relayed: stream.relayed = true
            }
        case .interim:
            if stream.ended || stream.finals > 0 { fail("\(name): an interim response after the final one") }
        case .endStream:
            if stream.ended { fail("\(name): END_STREAM twice") }
            if !stream.relayed { fail("\(name): END_STREAM without a relayed response") }
            stream.ended = true
        case .reset:
            if stream.ended { fail("\(name): RST_STREAM after the stream ended") }
            stream.ended = true
        case .relayWebSocket(let hop, _):
            checkLive(stream, hop, "relayWebSocket")
            if stream.webSocket != nil { fail("\(name): frames relayed twice") }
            if stream.ended || !stream.relayed { fail("\(name): frames relayed without an open 200 before them") }
            stream.webSocket = hop
        case .exchange(let action):
            switch action {
            case .writeToClient, .closeClient, .readNextRequest, .startClientTLS, .splice, .finishTunnel, .relayWebSocket:
                fail("\(name): an HTTP/1.1 action \(action)")
            case .connect(let hop, let origin, _, _, _):
                // Hop ids are the stream machine's own (each stream counts from 1).
                if stream.origins[hop] != nil { fail("\(name): \(hop) connected twice") }
                stream.origins[hop] = origin
                stream.connectedOrder.append(hop)
            case .releaseUpstream(let hop, _):
                if stream.origins[hop] == nil { fail("\(name): \(hop) released but never connected") }
                if !stream.released.insert(hop).inserted { fail("\(name): \(hop) released twice") }
            case .sendToUpstream(let hop, let bytes):
                checkLive(stream, hop, "sendToUpstream")
                checkCredentials(bytes, to: hop, of: stream)
            case .pumpRequestBody(let hop, _, _, _, _):
                checkLive(stream, hop, "pumpRequestBody")
                stream.pumping.insert(hop)
            case .relayResponseBody(let hop, _, _, _, _):
                checkLive(stream, hop, "relayResponseBody")
                stream.relaying.insert(hop)
            default:
                break
            }
        }
    }

    func checkLive(_ stream: FuzzStream, _ hop: HopID, _ what: String) {
        if stream.origins[hop] == nil { fail("stream \(stream.id): \(what) to \(hop), never connected") }
        if stream.released.contains(hop) { fail("stream \(stream.id): \(what) to released \(hop)") }
    }

    func checkCredentials(_ bytes: [UInt8], to hop: HopID, of stream: FuzzStream) {
        for token in credentialTokens(in: bytes) {
            if stream.credentials.contains(token) {
                if stream.otherTokens.contains(token) { continue }
                if stream.origins[hop] != stream.addressed {
                    fail("stream \(stream.id): its authorization went to \(stream.origins[hop].map { "\($0)" } ?? "?")")
                }
            } else if !stream.otherTokens.contains(token),
                everyStream.contains(where: { $0 !== stream && $0.credentials.contains(token) })
            {
                fail("stream \(stream.id): another stream's authorization went to its hop")
            }
        }
    }

    // MARK: The fake upstream

    /// Takes request payload off the stream's buffer, crediting the client's window as H2Stream does.
    func take(_ count: Int, from stream: FuzzStream) -> Int {
        let taken = min(count, stream.pendingRequest)
        guard taken > 0 else { return 0 }
        stream.pendingRequest -= taken
        session.consume(stream: stream.id, bytes: taken)
        return taken
    }

    /// What the engine would most likely report next for this stream; false if there is nothing.
    @discardableResult
    func upstreamStep(_ stream: FuzzStream) -> Bool {
        let machine = stream.machine
        let choice = control.byte()
        if let secret = machine.awaitedToken {
            deliver(
                choice < 224 ? .tokenReady(secret: secret, fuzzAccessToken) : .tokenFailed(secret: secret, provider: nil, reason: .refused),
                to: stream)
        } else if machine.isCollecting {
            let taken = take(Int(choice) * 64 + 1, from: stream)
            if stream.requestEnded, stream.pendingRequest == 0 {
                deliver(.collectedBody(choice & 1 == 0 ? .complete(Array("a=1".utf8)) : .tooLarge), to: stream)
            } else if taken > 0 {
                deliver(.collectedBody(.progressed), to: stream)
            } else if let armed = stream.armed {
                deliver(.timerFired(armed), to: stream)
            } else {
                return false
            }
        } else if machine.isWebSocket, let hop = machine.currentHop {
            // Frames both ways (H2StreamWebSocket.swift): moved, scrubbed, stopped, or a side ends.
            let finding = SecretFinding(secret: "api", encoding: .raw, isPlaceholder: false)
            let event: ConnectionEvent =
                switch choice % 8 {
                case 0, 1, 2: .tunnelBytes(hop, fromClient: UInt64(control.byte()), fromUpstream: UInt64(control.byte()))
                case 3: .webSocketScrubbed(hop, [finding])
                case 4: .webSocketStopped(hop, choice & 8 == 0 ? .secret(finding) : .protocolError(.maskMissing), sender: .client)
                case 5: .upstreamClosed(hop, sawResponseBytes: true)
                case 6: .clientInputClosed(bufferedBytes: 0)
                default: .timerFired(stream.armed ?? .stall)
                }
            deliver(event, to: stream)
        } else if let hop = machine.currentHop {
            if !stream.upstreamConnected.contains(hop) {
                stream.upstreamConnected.insert(hop)
                deliver(
                    choice < 232 ? .upstreamConnected(hop, reused: choice & 1 == 1) : .upstreamConnectFailed(hop, .upstreamRefused(refusingOrigin)),
                    to: stream)
            } else if stream.pumping.contains(hop), !stream.requestComplete.contains(hop), choice < 200 {
                let taken = take(Int(choice) * 256 + 1, from: stream)
                if stream.requestEnded, stream.pendingRequest == 0 {
                    stream.requestComplete.insert(hop)
                    deliver(.requestBody(hop, .complete(payload: UInt64(taken), consumed: UInt64(taken), captured: nil, observed: nil)), to: stream)
                } else if taken > 0 {
                    deliver(.requestBody(hop, .moved(payload: UInt64(taken), consumed: UInt64(taken))), to: stream)
                } else {
                    deliver(.clientInputClosed(bufferedBytes: 0), to: stream)
                }
            } else if machine.expectsResponseHead(from: hop) {
                deliver(.responseHead(hop, upstreamResponses[Int(control.byte()) % upstreamResponses.count]), to: stream)
            } else if stream.relaying.contains(hop) {
                // The relay stops while the stream's response buffer is full (H2Stream's pump).
                guard stream.responseSink < outputWatermark else { return false }
                let payload = UInt64(control.byte()) * 64
                let progress: BodyProgress =
                    switch choice % 8 {
                    case 0, 1, 2, 3: .moved(payload: payload, consumed: payload)
                    case 4, 5: .complete(payload: payload, consumed: payload, captured: nil, observed: nil)
                    case 6: .cut
                    default: .invalid
                    }
                if case .moved = progress { stream.responseSink += Int(payload) }
                if case .complete = progress { stream.responseSink += Int(payload) }
                deliver(.responseBody(hop, progress), to: stream)
                resumeIfDeferred(stream)
            } else if let armed = stream.armed {
                deliver(.timerFired(armed), to: stream)
            } else {
                deliver(.upstreamClosed(hop, sawResponseBytes: choice & 1 == 1), to: stream)
            }
        } else if let armed = stream.armed {
            deliver(.timerFired(armed), to: stream)
        } else {
            return false
        }
        return true
    }

    /// An event of a hop that is not the stream's current one: it must change nothing.
    func staleStep(_ stream: FuzzStream) {
        let current = stream.machine.currentHop
        let known = stream.connectedOrder.filter { $0 != current && stream.released.contains($0) }
        let hop = known.isEmpty ? HopID(UInt32(9000 + control.pick(10))) : known[control.pick(known.count)]
        let event: ConnectionEvent =
            switch control.pick(5) {
            case 0: .upstreamConnected(hop, reused: false)
            case 1: .responseHead(hop, upstreamResponses[0])
            case 2: .responseBody(hop, .moved(payload: 3, consumed: 3))
            case 3: .upstreamClosed(hop, sawResponseBytes: true)
            default: .requestBody(hop, .moved(payload: 1, consumed: 1))
            }
        let actions = stream.machine.handle(event)
        if !actions.isEmpty { fail("stream \(stream.id): an event of \(hop) (not current) acted: \(actions)") }
    }

    func pickStream() -> FuzzStream? {
        let open = streams.keys.sorted()
        guard !open.isEmpty else { return nil }
        return streams[open[control.pick(open.count)]]
    }

    // MARK: The run

    func run(wire: [UInt8]) {
        var position = 0
        flush()
        while !control.isEmpty {
            let op = control.byte() % 8
            switch op {
            case 0, 1, 2, 3:
                let size = control.byte()
                let count = min(wire.count - position, size < 128 ? Int(size) + 1 : (Int(size) - 127) * 64)
                if count > 0 {
                    wire[position..<position + count].withUnsafeBytes { _ = evbuffer_add(input, $0.baseAddress, $0.count) }
                    position += count
                }
                if op != 3 { read() }
            case 4, 5:
                if let stream = pickStream() { upstreamStep(stream) }
            case 6:
                evbuffer_drain(output, EventBuffer.length(output))
            default:
                if let stream = pickStream() { staleStep(stream) }
            }
            flush()
            checkAfterGoAway()
        }
        if position < wire.count {
            wire[position...].withUnsafeBytes { _ = evbuffer_add(input, $0.baseAddress, $0.count) }
        }
        read()
        flush()
        // The upstreams answer until every stream is done (or a bounded number of rounds).
        for _ in 0..<64 {
            evbuffer_drain(output, EventBuffer.length(output))
            var moved = false
            for id in streams.keys.sorted() { if let stream = streams[id], upstreamStep(stream) { moved = true } }
            flush()
            if !moved { break }
        }
        // The socket goes (H2ClientConnection.close): every stream ends.
        for id in streams.keys.sorted() { if let stream = streams[id] { close(stream) } }
        streams.removeAll()
        for stream in everyStream where !stream.isClosed { close(stream) }
    }

    /// Once the session's GOAWAY is out (it reads no more), bytes that arrive are not read.
    func checkAfterGoAway() {
        guard terminated, !session.wantsRead else { return }
        let before = callbacks
        let frame: [UInt8] = [0, 0, 0, 0x6, 0, 0, 0, 0, 0]  // a PING header: one more frame
        frame.withUnsafeBytes { _ = evbuffer_add(input, $0.baseAddress, $0.count) }
        read()
        if callbacks != before { fail("a frame was read after the session's GOAWAY went out") }
    }
}

func fuzzH2Connection(_ data: UnsafePointer<UInt8>, _ size: Int) {
    var input = FuzzInput(bytes: UnsafeBufferPointer(start: data, count: size))
    let first = input.byte()
    let fixture = machineFixtures[Int(first & 0x7) % machineFixtures.count]
    let controlLength = Int(input.byte()) << 8 | Int(input.byte())
    let control = input.take(controlLength)
    var wire = first & 0x80 == 0 ? clientPreface : []
    wire += input.rest()
    control.withUnsafeBufferPointer { controlBytes in
        let harness = H2ConnectionHarness(fixture: fixture, control: FuzzInput(bytes: controlBytes))
        harness.run(wire: wire)
    }
}
