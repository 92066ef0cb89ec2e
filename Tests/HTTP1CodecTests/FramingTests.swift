import Testing

@testable import HTTP1Codec

private func request(_ fields: [(String, String)], version: HTTPVersion = .http1_1) -> RequestHead {
    RequestHead(
        method: "POST", target: "http://a/", version: version,
        fields: HTTPFields(fields.map { HTTPField(name: $0.0, value: $0.1) }))
}

private func response(_ status: Int, _ fields: [(String, String)], version: HTTPVersion = .http1_1) -> ResponseHead {
    ResponseHead(version: version, status: status, reason: "", fields: HTTPFields(fields.map { HTTPField(name: $0.0, value: $0.1) }))
}

@Suite("Body framing and smuggling vectors")
struct FramingTests {
    static let acceptedRequests: [(String, [(String, String)], BodyFraming)] = [
        ("no framing headers", [], .none),
        ("Content-Length", [("Content-Length", "42")], .contentLength(42)),
        ("Content-Length zero", [("Content-Length", "0")], .none),
        ("repeated identical Content-Length", [("Content-Length", "7"), ("content-length", "7")], .contentLength(7)),
        ("identical list members", [("Content-Length", "7, 7")], .contentLength(7)),
        ("chunked", [("Transfer-Encoding", "chunked")], .chunked),
        ("chunked, any case", [("transfer-encoding", "Chunked")], .chunked),
    ]

    @Test("request framing that is unambiguous", arguments: acceptedRequests)
    func accepted(_ name: String, _ fields: [(String, String)], _ expected: BodyFraming) throws {
        #expect(try BodyFraming.forRequest(request(fields)) == expected, "\(name)")
    }

    /// The classic desync vectors (CL.TE, TE.CL, TE.TE obfuscations) plus malformed lengths.
    static let smugglingVectors: [(String, [(String, String)], HTTPParseError)] = [
        ("CL.TE", [("Content-Length", "6"), ("Transfer-Encoding", "chunked")], .malformed("both Content-Length and Transfer-Encoding")),
        ("TE.CL", [("Transfer-Encoding", "chunked"), ("Content-Length", "4")], .malformed("both Content-Length and Transfer-Encoding")),
        ("CL zero with TE", [("Content-Length", "0"), ("Transfer-Encoding", "chunked")], .malformed("both Content-Length and Transfer-Encoding")),
        ("differing Content-Lengths", [("Content-Length", "5"), ("Content-Length", "6")], .malformed("differing Content-Length values")),
        ("differing list members", [("Content-Length", "5, 6")], .malformed("differing Content-Length values")),
        ("signed length", [("Content-Length", "+5")], .malformed("invalid Content-Length")),
        ("negative length", [("Content-Length", "-1")], .malformed("invalid Content-Length")),
        ("hex length", [("Content-Length", "0x10")], .malformed("invalid Content-Length")),
        ("space inside length", [("Content-Length", "1 0")], .malformed("invalid Content-Length")),
        ("empty length", [("Content-Length", "")], .malformed("invalid Content-Length")),
        ("empty list member", [("Content-Length", "5,")], .malformed("invalid Content-Length")),
        ("overflowing length", [("Content-Length", "99999999999999999999")], .malformed("invalid Content-Length")),
        ("TE not chunked", [("Transfer-Encoding", "identity")], .malformed("Transfer-Encoding does not end in chunked")),
        ("TE xchunked", [("Transfer-Encoding", "xchunked")], .malformed("Transfer-Encoding does not end in chunked")),
        (
            "TE chunked then identity", [("Transfer-Encoding", "chunked"), ("Transfer-Encoding", "identity")],
            .malformed("Transfer-Encoding does not end in chunked")
        ),
        ("TE chunked twice", [("Transfer-Encoding", "chunked, chunked")], .malformed("chunked applied more than once")),
        ("TE quoted", [("Transfer-Encoding", "\"chunked\"")], .malformed("Transfer-Encoding does not end in chunked")),
        ("TE empty", [("Transfer-Encoding", "")], .malformed("Transfer-Encoding does not end in chunked")),
        ("TE gzip, chunked", [("Transfer-Encoding", "gzip, chunked")], .unsupportedTransferCoding),
    ]

    @Test("ambiguous request framing is refused", arguments: smugglingVectors)
    func refused(_ name: String, _ fields: [(String, String)], _ expected: HTTPParseError) {
        #expect(throws: expected, "\(name)") { try BodyFraming.forRequest(request(fields)) }
    }

    @Test("Transfer-Encoding on an HTTP/1.0 request is faulty framing (RFC 9112 §6.1)")
    func transferEncodingOnHTTP10() {
        #expect(throws: HTTPParseError.malformed("Transfer-Encoding in HTTP/1.0 request")) {
            try BodyFraming.forRequest(request([("Transfer-Encoding", "chunked")], version: .http1_0))
        }
    }

    @Test("TE obfuscated with whitespace before the colon never reaches framing")
    func obfuscatedName() {
        let text = "POST http://a/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\nContent-Length: 4\r\n\r\n"
        #expect(feedHead([bytes(text)], kind: .request) == .failure(.malformed("whitespace before colon in header")))
    }

    @Test("response framing follows RFC 9112 §6.3")
    func responseFraming() throws {
        #expect(try BodyFraming.forResponse(response(200, [("Content-Length", "10")]), requestMethod: "HEAD") == .none)
        #expect(try BodyFraming.forResponse(response(204, [("Content-Length", "10")]), requestMethod: "GET") == .none)
        #expect(try BodyFraming.forResponse(response(304, []), requestMethod: "GET") == .none)
        #expect(try BodyFraming.forResponse(response(100, []), requestMethod: "GET") == .none)
        #expect(try BodyFraming.forResponse(response(200, [("Content-Length", "10")]), requestMethod: "GET") == .contentLength(10))
        #expect(try BodyFraming.forResponse(response(200, [("Content-Length", "0")]), requestMethod: "GET") == .contentLength(0))
        #expect(try BodyFraming.forResponse(response(200, [("Transfer-Encoding", "chunked")]), requestMethod: "GET") == .chunked)
        #expect(try BodyFraming.forResponse(response(200, []), requestMethod: "GET") == .untilClose)
        #expect(throws: HTTPParseError.malformed("both Content-Length and Transfer-Encoding")) {
            try BodyFraming.forResponse(response(200, [("Content-Length", "3"), ("Transfer-Encoding", "chunked")]), requestMethod: "GET")
        }
        #expect(throws: HTTPParseError.malformed("differing Content-Length values")) {
            try BodyFraming.forResponse(response(200, [("Content-Length", "3"), ("Content-Length", "4")]), requestMethod: "GET")
        }
    }
}

@Suite("Chunked decoding")
struct ChunkedTests {
    static let valid: [(String, String, String)] = [
        ("one chunk", "5\r\nhello\r\n0\r\n\r\n", "hello"),
        ("two chunks", "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "hello world"),
        ("hex sizes, any case", "a\r\n0123456789\r\nA\r\nabcdefghij\r\n0\r\n\r\n", "0123456789abcdefghij"),
        ("leading zeros", "0005\r\nhello\r\n000\r\n\r\n", "hello"),
        ("extension", "5;name=value\r\nhello\r\n0;last\r\n\r\n", "hello"),
        ("quoted extension", "5;n=\"a \\\" b\"\r\nhello\r\n0\r\n\r\n", "hello"),
        ("BWS around extension", "5 ; n = v\r\nhello\r\n0\r\n\r\n", "hello"),
        ("empty body", "0\r\n\r\n", ""),
        ("CRLF inside data", "4\r\n\r\n\r\n\r\n0\r\n\r\n", "\r\n\r\n"),
    ]

    @Test("valid chunked bodies decode identically at every split point", arguments: valid)
    func decodes(_ name: String, _ wire: String, _ body: String) {
        let input = bytes(wire)
        let whole = decodeChunked([input])
        #expect(whole == .body(bytes(body), trailers: HTTPFields(), consumed: input.count), "\(name)")
        for pieces in splits(of: input) {
            #expect(decodeChunked(pieces) == whole, "\(name) split \(pieces.map(\.count))")
        }
    }

    @Test("trailers are parsed (and kept out of the body)")
    func trailers() {
        let input = bytes("3\r\nabc\r\n0\r\nX-Checksum: 42\r\nX-Other:  v \r\n\r\nNEXT")
        let expected = ChunkedOutcome.body(
            bytes("abc"),
            trailers: HTTPFields([
                HTTPField(name: "X-Checksum", value: "42"), HTTPField(name: "X-Other", value: "v"),
            ]), consumed: input.count - 4)
        for pieces in splits(of: input) { #expect(decodeChunked(pieces) == expected) }
    }

    static let invalid: [(String, String)] = [
        ("no size", "\r\nhello\r\n0\r\n\r\n"),
        ("0x prefix", "0x5\r\nhello\r\n0\r\n\r\n"),
        ("negative", "-5\r\nhello\r\n0\r\n\r\n"),
        ("size too large", "1000000000000000\r\n"),
        ("bare LF after size", "5\nhello\r\n0\r\n\r\n"),
        ("bare CR after size", "5\rhello\r\n0\r\n\r\n"),
        ("data longer than size", "3\r\nhello\r\n0\r\n\r\n"),
        ("LF-only after data", "5\r\nhello\n0\r\n\r\n"),
        ("space inside size", "5 5\r\nhello\r\n0\r\n\r\n"),
        ("bad extension name", "5;=v\r\nhello\r\n0\r\n\r\n"),
        ("LF inside quoted extension", "5;n=\"a\nb\"\r\nhello\r\n0\r\n\r\n"),
        ("bare LF in trailer", "0\r\nX: y\n\r\n"),
        ("obs-fold in trailer", "0\r\nX: y\r\n z\r\n\r\n"),
        ("space before colon in trailer", "0\r\nX : y\r\n\r\n"),
    ]

    @Test("invalid chunk framing is refused at every split point", arguments: invalid)
    func refused(_ name: String, _ wire: String) {
        let input = bytes(wire)
        let whole = decodeChunked([input])
        guard case .failure = whole else {
            Issue.record("\(name): expected a failure, got \(whole)")
            return
        }
        for pieces in splits(of: input) { #expect(decodeChunked(pieces) == whole, "\(name)") }
    }

    @Test("an endless chunk extension is bounded")
    func extensionBound() {
        let input = bytes("5;" + String(repeating: "a", count: ChunkedDecoder.maxExtensionBytes + 10))
        #expect(decodeChunked([input]) == .failure(.malformed("chunk extension too long")))
    }

    @Test("re-framing writes hex sizes and a bare last chunk")
    func encoder() {
        #expect(ChunkedEncoder.chunkHeader(size: 255) == bytes("ff\r\n"))
        #expect(ChunkedEncoder.lastChunk == bytes("0\r\n\r\n"))
    }
}
