// Shared drivers for the fuzz targets (compiled into the same module as the codec sources).
enum FuzzSupport {
    enum HeadVerdict: Equatable {
        case parsed(RequestHead)
        case failed(HTTPParseError)
        case incomplete
    }

    static func feedRequestHead(_ pieces: [[UInt8]]) -> HeadVerdict {
        var scanner = HeadScanner(limits: .request)
        var buffer: [UInt8] = []
        for piece in pieces {
            buffer += piece
            do {
                let boundary = try buffer.withUnsafeBytes { try scanner.scan($0) }
                guard let boundary else { continue }
                return .parsed(try buffer.withUnsafeBytes { bytes in
                    try HeadParser.parseRequest(UnsafeRawBufferPointer(rebasing: bytes[boundary.start..<boundary.end]))
                })
            } catch {
                return .failed(error as! HTTPParseError)
            }
        }
        return .incomplete
    }

    enum ChunkedVerdict: Equatable {
        case body([UInt8], consumed: Int)
        case failed(HTTPParseError)
        case incomplete
    }

    static func decodeChunked(_ pieces: [[UInt8]]) -> ChunkedVerdict {
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
                    case .needMore: break loop
                    case .data(let size):
                        let take = min(size, buffer.count - offset)
                        if take == 0 { break loop }
                        body += buffer[offset..<offset + take]
                        offset += take
                        decoder.didConsumeData(take)
                    case .done: return .body(body, consumed: offset)
                    }
                }
            } catch {
                return .failed(error as! HTTPParseError)
            }
        }
        return .incomplete
    }
}
