/// How a message body is delimited (RFC 9112 §6). Decided once per message, before any body byte
/// is forwarded, so both sides of the proxy agree on where each message ends.
public enum BodyFraming: Equatable, Sendable {
    case none
    case contentLength(UInt64)
    case chunked
    /// Responses only: the body runs until the origin closes the connection.
    case untilClose

    public static func forRequest(_ head: RequestHead) throws(HTTPParseError) -> BodyFraming {
        let hasTransferEncoding = head.fields.contains("transfer-encoding")
        let contentLength = try parseContentLength(head.fields)
        if hasTransferEncoding {
            // Both framings at once is the classic smuggling vector (RFC 9112 §6.1, §6.3).
            if contentLength != nil { throw .malformed("both Content-Length and Transfer-Encoding") }
            // An HTTP/1.0 message with Transfer-Encoding has faulty framing (RFC 9112 §6.1).
            if head.version == .http1_0 { throw .malformed("Transfer-Encoding in HTTP/1.0 request") }
            return try chunkedOnly(head.fields.listMembers("transfer-encoding"))
        }
        if let contentLength { return contentLength == 0 ? .none : .contentLength(contentLength) }
        return .none
    }

    /// `requestMethod` matters: a response to HEAD never has a body, whatever its headers say.
    public static func forResponse(
        _ head: ResponseHead, requestMethod: String
    ) throws(HTTPParseError) -> BodyFraming {
        if requestMethod == "HEAD" || head.isInformational || head.status == 204 || head.status == 304 {
            return .none
        }
        let hasTransferEncoding = head.fields.contains("transfer-encoding")
        let contentLength = try parseContentLength(head.fields)
        if hasTransferEncoding {
            // RFC 9112 lets Transfer-Encoding win, but says such a message "ought to be handled as an
            // error": a proxy that guessed would be desynchronised from its origin.
            if contentLength != nil { throw .malformed("both Content-Length and Transfer-Encoding") }
            if head.version == .http1_0 { throw .malformed("Transfer-Encoding in HTTP/1.0 response") }
            return try chunkedOnly(head.fields.listMembers("transfer-encoding"))
        }
        if let contentLength { return .contentLength(contentLength) }
        return .untilClose
    }

    /// Only a lone `chunked` is accepted: the proxy decodes and re-frames it, and cannot pass other
    /// codings through once the hop-by-hop Transfer-Encoding header is rebuilt.
    private static func chunkedOnly(_ codings: [String]) throws(HTTPParseError) -> BodyFraming {
        guard let last = codings.last, last == "chunked" else {
            throw .malformed("Transfer-Encoding does not end in chunked")
        }
        guard codings.count == 1 else {
            if codings.dropLast().contains("chunked") {
                throw .malformed("chunked applied more than once")
            }
            throw .unsupportedTransferCoding
        }
        return .chunked
    }

    /// The Content-Length of a message whose framing is decided elsewhere (an HTTP/2 stream, where
    /// it must match the DATA that follows): read as `parseContentLength` reads it for HTTP/1.
    public static func contentLength(of fields: HTTPFields) throws(HTTPParseError) -> UInt64? {
        try parseContentLength(fields)
    }

    /// Content-Length = 1*DIGIT. Repeated fields or list members must all agree (RFC 9112 §6.3
    /// item 5); any sign, space inside, or overflow is refused.
    static func parseContentLength(_ fields: HTTPFields) throws(HTTPParseError) -> UInt64? {
        var result: UInt64?
        for field in fields.storage where field.hasName("content-length") {
            // Split by hand: empty members ("5,") are errors here, unlike in other lists.
            var value: UInt64 = 0
            var digits = 0
            var trailingSpace = false
            func finishMember() throws(HTTPParseError) {
                guard digits > 0 else { throw .malformed("invalid Content-Length") }
                if let existing = result, existing != value { throw .malformed("differing Content-Length values") }
                result = value
                value = 0
                digits = 0
                trailingSpace = false
            }
            for byte in field.value.utf8 {
                switch byte {
                case 0x30...0x39:
                    guard !trailingSpace, digits < 18 else { throw .malformed("invalid Content-Length") }
                    value = value * 10 + UInt64(byte - 0x30)
                    digits += 1
                case ASCII.space, ASCII.tab:
                    if digits > 0 { trailingSpace = true }
                case UInt8(ascii: ","):
                    try finishMember()
                default:
                    throw .malformed("invalid Content-Length")
                }
            }
            try finishMember()
        }
        return result
    }
}
