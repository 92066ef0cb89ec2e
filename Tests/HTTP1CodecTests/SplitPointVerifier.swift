@testable import HTTP1Codec

/// What the codec made of a whole input: a parsed head, an error, or "needs more bytes".
enum HeadOutcome: Equatable {
    case request(RequestHead, consumed: Int)
    case response(ResponseHead, consumed: Int)
    case failure(HTTPParseError)
    case incomplete
}

enum Kind { case request, response }

/// Feeds `pieces` one after another the way the engine does (the scanner sees the growing
/// buffer prefix each time), stopping at the first complete head or error.
func feedHead(_ pieces: [[UInt8]], kind: Kind) -> HeadOutcome {
    var scanner = HeadScanner(limits: kind == .request ? .request : .response)
    var buffer: [UInt8] = []
    for piece in pieces {
        buffer += piece
        do {
            let boundary = try buffer.withUnsafeBytes { try scanner.scan($0) }
            guard let boundary else { continue }
            return try buffer.withUnsafeBytes { bytes in
                let head = UnsafeRawBufferPointer(rebasing: bytes[boundary.start..<boundary.end])
                switch kind {
                case .request: return .request(try HeadParser.parseRequest(head), consumed: boundary.end)
                case .response: return .response(try HeadParser.parseResponse(head), consumed: boundary.end)
                }
            }
        } catch {
            return .failure(error as! HTTPParseError)
        }
    }
    return .incomplete
}

/// Every way to cut `input` in two, plus one byte at a time.
func splits(of input: [UInt8]) -> [[[UInt8]]] {
    var result: [[[UInt8]]] = [[input], input.map { [$0] }]
    for cut in 1..<max(1, input.count) {
        result.append([Array(input[..<cut]), Array(input[cut...])])
    }
    return result
}

/// The split-point property: the codec's verdict must not depend on how bytes arrive.
func verifyHeadSplits(_ input: [UInt8], kind: Kind) -> (whole: HeadOutcome, mismatches: Int) {
    let whole = feedHead([input], kind: kind)
    let mismatches = splits(of: input).filter { feedHead($0, kind: kind) != whole }.count
    return (whole, mismatches)
}

enum ChunkedOutcome: Equatable {
    case body([UInt8], trailers: HTTPFields, consumed: Int)
    case failure(HTTPParseError)
    case incomplete
}

/// Drives `ChunkedDecoder` exactly like the engine's BodyPump: framing through `advance`,
/// data taken by the caller and acknowledged with `didConsumeData`.
func decodeChunked(_ pieces: [[UInt8]]) -> ChunkedOutcome {
    var decoder = ChunkedDecoder()
    var buffer: [UInt8] = []
    var offset = 0
    var body: [UInt8] = []
    for piece in pieces {
        buffer += piece
        do {
            loop: while true {
                let (consumed, next) = try buffer.withUnsafeBytes { bytes in
                    try decoder.advance(UnsafeRawBufferPointer(rebasing: bytes[offset...]))
                }
                offset += consumed
                switch next {
                case .needMore:
                    break loop
                case .data(let size):
                    let take = min(size, buffer.count - offset)
                    if take == 0 { break loop }
                    body += buffer[offset..<offset + take]
                    offset += take
                    decoder.didConsumeData(take)
                case .done:
                    return .body(body, trailers: decoder.trailers, consumed: offset)
                }
            }
        } catch {
            return .failure(error as! HTTPParseError)
        }
    }
    return .incomplete
}

func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }
