import CLibevent
import HTTP1Codec
import ProxyCore

/// One hop's stream on a shared `UpstreamH2Connection`, seen by its leg as an HTTP/1.1 connection:
///
/// - request: the leg writes the serialized HTTP/1.1 head and body into `output`; the head is read
///   back with our own `HeadParser` and submitted as HEADERS (`:authority` from Host, connection-
///   specific fields removed, `te: trailers` added); body bytes (Content-Length or chunked framed)
///   leave as DATA only when nghttp2 asks for them, so `output` fills while the origin's window is
///   shut and the request pump stops at its watermark (flow control tied to progress);
/// - response: HEADERS become an HTTP/1.1 head in `input`; DATA become chunks (or raw bytes under
///   the origin's Content-Length); trailers become the chunked trailer section; the window is
///   credited back only as the response pump drains `input` (bounded memory).
///
/// Request trailers are not carried (the HTTP/1.1 side drops them; docs/security-model.md).
final class UpstreamH2Stream {
    let connection: UpstreamH2Connection
    private weak var leg: UpstreamLeg?
    private let highWatermark: Int
    /// The most response bytes the leg's reader holds unread (`UpstreamLeg.inputLimit`): the
    /// stream's receive window, so the origin's bytes wait at the origin beyond it.
    private let inputLimit: Int
    private var windowRaised = false
    let input: OpaquePointer = evbuffer_new()
    let output: OpaquePointer = evbuffer_new()
    /// The stream id once HEADERS were submitted (0 before).
    var id: Int32 = 0

    private enum RequestBody {
        case awaitingHead
        case remaining(UInt64)
        case chunked(ChunkedDecoder)
        case sent
    }

    private var request: RequestBody = .awaitingHead
    private var headReader = HeadReader(limits: .request)
    private var providerDeferred = false
    /// The response's body is written as chunks (the origin named no length): trailers can follow.
    private var responseChunked = false
    private var responseEnded = false
    private var sawFinalHead = false
    /// DATA payload received and not yet credited back to the origin.
    private var uncredited = 0
    /// The stream closed without its response ending (reset, GOAWAY, the connection went).
    private(set) var cut = false
    private var pendingReadable = false
    /// In the connection's list of streams to tell at its next wake (`UpstreamH2Connection.notify`).
    var queuedForNotification = false
    private var pendingWritable = false
    private var pendingClosed = false

    /// The request was sent and the response ended (nothing to cancel).
    var isFinished: Bool {
        if case .sent = request { return responseEnded }
        return false
    }

    init(connection: UpstreamH2Connection, leg: UpstreamLeg, highWatermark: Int, inputLimit: Int) {
        self.connection = connection
        self.leg = leg
        self.highWatermark = highWatermark
        self.inputLimit = inputLimit
    }

    deinit {
        evbuffer_free(input)
        evbuffer_free(output)
    }

    /// The leg let go (released, or its hop ended): the stream is cancelled if unfinished.
    func detach() {
        leg = nil
        connection.detach(self)
    }

    // MARK: Request: HTTP/1.1 bytes in, HEADERS and DATA out

    /// The leg appended to `output` (the head, or body bytes from its pump).
    func outputAdded() {
        if case .awaitingHead = request { submitHead() }
        if providerDeferred, EventBuffer.length(output) > 0 {
            providerDeferred = false
            connection.resume(self)
        }
    }

    private func submitHead() {
        let head: RequestHead
        do {
            guard
                let parsed = try headReader.next(
                    from: output, { bytes, limits throws(HTTPParseError) in try HeadParser.parseRequest(bytes, limits: limits) })
            else { return }
            head = parsed.head
        } catch {
            failLocally()
            return
        }
        let framing: BodyFraming
        do { framing = try BodyFraming.forRequest(head) } catch {
            failLocally()
            return
        }
        let fields = Self.requestFields(head, origin: connection.origin)
        var hasBody = true
        switch framing {
        case .none, .untilClose, .contentLength(0):
            request = .sent
            hasBody = false
        case .contentLength(let length): request = .remaining(length)
        case .chunked: request = .chunked(ChunkedDecoder())
        }
        guard !Forwarding.isUpgradeRequest(head), connection.submit(self, fields: fields, hasBody: hasBody) else {
            failLocally()
            return
        }
    }

    /// The fields of a gRPC status (PROTOCOL-HTTP2, "Responses").
    static let grpcStatusNames: Set<String> = ["grpc-status", "grpc-message", "grpc-status-details-bin"]

    /// The HTTP/2 form of a serialized HTTP/1.1 request head (RFC 9113 §8.3.1, §8.2.2).
    static func requestFields(_ head: RequestHead, origin: Origin) -> [H2HeaderField] {
        let authority = head.fields.values("host").first ?? origin.authority
        var path = head.target
        if !path.hasPrefix("/"), path != "*" {
            // Absolute-form (`scheme://authority/path`): the path is what follows the authority.
            let parts = path.split(separator: "/", maxSplits: 3, omittingEmptySubsequences: false)
            path = parts.count == 4 ? "/" + parts[3] : "/"
        }
        var fields = [
            H2HeaderField(name: ":method", value: head.method),
            H2HeaderField(name: ":scheme", value: origin.scheme.rawValue),
            H2HeaderField(name: ":authority", value: authority),
            H2HeaderField(name: ":path", value: path),
        ]
        for field in head.fields {
            let name = lowercasedFieldName(field.name)
            if name == "host" || name == "te" || name == "trailer" || H2OutgoingFields.connectionSpecificNames.contains(name) { continue }
            fields.append(H2HeaderField(name: name, value: field.value))
        }
        // The proxy accepts trailers (relays them, or drops them for an HTTP/1.1 client that did
        // not ask: RFC 9110 §6.5.1); gRPC origins require this (PROTOCOL-HTTP2, "Requests").
        fields.append(H2HeaderField(name: "te", value: "trailers"))
        return fields
    }

    /// The next DATA payload: decoded from `output` only now, so what the origin has not asked
    /// for stays there and holds the request pump back.
    func readRequestBody(into buffer: UnsafeMutableRawBufferPointer) -> H2BodyRead {
        defer { if EventBuffer.length(output) < highWatermark { markWritable() } }
        switch request {
        case .awaitingHead, .sent:
            return .end(0, trailers: nil)
        case .remaining(let remaining):
            let count = Int(evbuffer_remove(output, buffer.baseAddress, min(buffer.count, Int(clamping: remaining))))
            let left = remaining - UInt64(max(0, count))
            if left == 0 {
                request = .sent
                return .end(count, trailers: nil)
            }
            request = .remaining(left)
            return deferredIfEmpty(count)
        case .chunked(var decoder):
            var written = 0
            defer { if case .chunked = request { request = .chunked(decoder) } }
            while written < buffer.count, let extent = EventBuffer.firstExtent(output) {
                let step: (consumed: Int, next: ChunkedDecoder.Next)
                do { step = try decoder.advance(extent) } catch {
                    failLocally()
                    return .end(written, trailers: nil)
                }
                if step.consumed > 0 { evbuffer_drain(output, step.consumed) }
                switch step.next {
                case .needMore: continue
                case .data(let size):
                    let count = Int(evbuffer_remove(output, buffer.baseAddress! + written, min(size, buffer.count - written)))
                    guard count > 0 else { return deferredIfEmpty(written) }
                    decoder.didConsumeData(count)
                    written += count
                case .done:
                    request = .sent  // request trailers, parsed by the decoder, are dropped
                    return .end(written, trailers: nil)
                }
            }
            return deferredIfEmpty(written)
        }
    }

    private func deferredIfEmpty(_ count: Int) -> H2BodyRead {
        guard count == 0 else { return .bytes(count) }
        providerDeferred = true
        return .deferred
    }

    // MARK: Response: HEADERS, DATA and trailers in, HTTP/1.1 bytes out

    func receivedHeaders(_ fields: [H2HeaderField], endStream: Bool, kind: H2HeadersKind) {
        switch kind {
        case .request:
            return
        case .trailers:
            guard responseChunked, !responseEnded else { return }
            var section = Array("0\r\n".utf8)
            for field in fields where !field.name.hasPrefix(":") && !H2OutgoingFields.connectionSpecificNames.contains(field.name) {
                section += Array("\(field.name): \(field.value)\r\n".utf8)
            }
            EventBuffer.append(input, section + Array("\r\n".utf8))
            responseEnded = true
        case .interim, .response:
            // The first HEADERS come before any DATA: the window grows to what the reader holds
            // while nothing of the body was received (a plain WINDOW_UPDATE of the difference).
            if !windowRaised {
                windowRaised = true
                connection.raiseWindow(self, to: inputLimit)
            }
            guard let status = fields.first(where: { $0.name == ":status" }).flatMap({ Int($0.value) }) else { return }
            // A gRPC Trailers-Only response (its status in the one HEADERS block) is relayed in the
            // general form: the head, no message, the status as trailers (PROTOCOL-HTTP2 allows
            // both), because the HTTP/1.1 view has no way to say "these fields end the stream".
            let trailersOnly = kind == .response && endStream && fields.contains { $0.name == "grpc-status" }
            // HTTP/2 has no reason phrase (RFC 9113 §8.3.2): the status line's is empty (RFC 9112 §4).
            var head = Array("HTTP/1.1 \(status) \r\n".utf8)
            var trailerSection = Array("0\r\n".utf8)
            var hasLength = false
            for field in fields where !field.name.hasPrefix(":") {
                if trailersOnly, Self.grpcStatusNames.contains(field.name) {
                    trailerSection += Array("\(field.name): \(field.value)\r\n".utf8)
                    continue
                }
                if field.name == "content-length" { hasLength = true }
                head += Array("\(field.name): \(field.value)\r\n".utf8)
            }
            if trailersOnly {
                sawFinalHead = true
                responseEnded = true
                EventBuffer.append(input, head + Array("transfer-encoding: chunked\r\n\r\n".utf8) + trailerSection + Array("\r\n".utf8))
                markReadable()
                return
            }
            if kind == .response {
                sawFinalHead = true
                let bodiless = status == 204 || status == 304
                if endStream {
                    if !hasLength, !bodiless { head += Array("content-length: 0\r\n".utf8) }
                    responseEnded = true
                } else if !hasLength, !bodiless {
                    head += Array("transfer-encoding: chunked\r\n".utf8)
                    responseChunked = true
                }
            }
            EventBuffer.append(input, head + Array("\r\n".utf8))
        }
        markReadable()
    }

    func receivedData(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty else { return }
        guard leg != nil, sawFinalHead, !responseEnded else {
            connection.consume(self, bytes: bytes.count)
            return
        }
        if responseChunked {
            EventBuffer.append(input, Array(String(bytes.count, radix: 16).utf8) + [0x0D, 0x0A])
            evbuffer_add(input, bytes.baseAddress, bytes.count)
            EventBuffer.append(input, [0x0D, 0x0A])
        } else {
            evbuffer_add(input, bytes.baseAddress, bytes.count)
        }
        uncredited += bytes.count
        markReadable()
    }

    func receivedEnd() {
        guard !responseEnded else { return }
        responseEnded = true
        if responseChunked { EventBuffer.append(input, ChunkedEncoder.lastChunk) }
        markReadable()
    }

    /// The response pump took bytes from `input`: the origin may send as much again.
    func inputDrained() {
        let credit = uncredited - min(uncredited, EventBuffer.length(input))
        guard credit > 0 else { return }
        uncredited -= credit
        connection.consume(self, bytes: credit)
        connection.flush()
    }

    /// The stream closed: before its response ended, that is a cut (a reset, a GOAWAY that did not
    /// process it); after, nothing (a reset once the response is whole only stops our request body,
    /// RFC 9113 §8.1).
    func streamClosed(code: UInt32) {
        if !responseEnded { cutShort() }
    }

    /// The whole connection ended (socket, GOAWAY processing, a session failure).
    func connectionEnded() {
        if !responseEnded { cutShort() }
    }

    /// Something on our side (a head we cannot map, no stream id left): the leg sees a close.
    private func failLocally() {
        request = .sent
        cutShort()
    }

    private func cutShort() {
        cut = true
        responseEnded = true
        pendingClosed = true
        connection.notify(self)
    }

    private func markReadable() {
        pendingReadable = true
        connection.notify(self)
    }

    private func markWritable() {
        guard !pendingWritable else { return }
        pendingWritable = true
        connection.notify(self)
    }

    /// From the connection's deferred callback: the leg's owner hears what changed.
    func deliverNotifications() {
        guard let leg else { return }
        let readable = pendingReadable
        let writable = pendingWritable
        let closed = pendingClosed
        pendingReadable = false
        pendingWritable = false
        pendingClosed = false
        if writable { leg.h2Writable() }
        if readable { leg.h2Readable() }
        if closed { leg.h2Closed() }
    }
}
