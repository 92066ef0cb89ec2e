import HTTP1Codec

/// Collects a token endpoint's HTTP/1.1 response from the bytes as they arrive, bounded: the head
/// and body together may not exceed `limit` (64 KiB by default; a token response is a few hundred
/// bytes, and the endpoint is not trusted to stop). Sans-io: the fetcher feeds it.
public struct OAuth2TokenResponseReader: Sendable {
    public enum Outcome: Sendable, Equatable {
        case needMore
        case complete(status: Int, body: [UInt8])
        case failed(TokenFailure.Reason)
    }

    public static let defaultLimit = 64 * 1024

    public let limit: Int
    private var buffer: [UInt8] = []

    public init(limit: Int = OAuth2TokenResponseReader.defaultLimit) {
        self.limit = limit
    }

    public mutating func receive(_ bytes: some Collection<UInt8>) -> Outcome {
        buffer += bytes
        guard buffer.count <= limit else { return .failed(.responseTooLarge(limit: limit)) }
        return evaluate(atEnd: false)
    }

    /// The connection ended (clean EOF): a body delimited by the close is complete now.
    public func endOfInput() -> Outcome {
        evaluate(atEnd: true)
    }

    private func evaluate(atEnd: Bool) -> Outcome {
        let ended: Outcome = atEnd ? .failed(.closedEarly) : .needMore
        var offset = 0
        while true {
            let rest = Array(buffer[offset...])
            var scanner = HeadScanner(limits: .response)
            let head: ResponseHead
            let headEnd: Int
            do {
                guard let boundary = try rest.withUnsafeBytes({ raw throws(HTTPParseError) in try scanner.scan(raw) }) else { return ended }
                head = try rest.withUnsafeBytes { raw throws(HTTPParseError) in
                    try HeadParser.parseResponse(UnsafeRawBufferPointer(rebasing: raw[boundary.start..<boundary.end]))
                }
                headEnd = boundary.end
            } catch {
                return .failed(.malformedResponse("invalid HTTP response head"))
            }
            if head.isInformational {
                // 100 Continue and other interim responses precede the real one (RFC 9110 §15.2);
                // 101 would switch protocols, which a token endpoint has no business doing.
                guard head.status != 101 else { return .failed(.malformedResponse("unexpected 101 Switching Protocols")) }
                offset += headEnd
                continue
            }
            let body = rest[headEnd...]
            let framing: BodyFraming
            do { framing = try BodyFraming.forResponse(head, requestMethod: "POST") } catch {
                return .failed(.malformedResponse("invalid response framing"))
            }
            switch framing {
            case .none:
                return .complete(status: head.status, body: [])
            case .contentLength(let length):
                guard length <= UInt64(limit) else { return .failed(.responseTooLarge(limit: limit)) }
                guard body.count >= Int(length) else { return ended }
                return .complete(status: head.status, body: Array(body.prefix(Int(length))))
            case .untilClose:
                return atEnd ? .complete(status: head.status, body: Array(body)) : .needMore
            case .chunked:
                switch Self.dechunk(Array(body)) {
                case .some(.some(let decoded)): return .complete(status: head.status, body: decoded)
                case .some(.none): return ended
                case .none: return .failed(.malformedResponse("invalid chunked body"))
                }
            }
        }
    }

    /// nil: invalid; .some(nil): incomplete; the decoded body once the last chunk and trailers are in.
    private static func dechunk(_ body: [UInt8]) -> [UInt8]?? {
        var decoder = ChunkedDecoder()
        var output: [UInt8] = []
        var index = 0
        return body.withUnsafeBytes { raw -> [UInt8]?? in
            while true {
                let step: (consumed: Int, next: ChunkedDecoder.Next)
                do { step = try decoder.advance(UnsafeRawBufferPointer(rebasing: raw[index...])) } catch { return .none }
                index += step.consumed
                switch step.next {
                case .needMore:
                    return .some(nil)
                case .data(let count):
                    let take = min(count, raw.count - index)
                    if take == 0 { return .some(nil) }
                    output += raw[index..<index + take]
                    decoder.didConsumeData(take)
                    index += take
                case .done:
                    return .some(output)
                }
            }
        }
    }
}
