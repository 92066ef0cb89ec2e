import HTTP1Codec
import ProxyCore
import Testing

/// HTTP/2 → HTTP/1.1 smuggling as a class: whatever bytes a header block holds (CR, LF, NUL, DEL,
/// spaces, obs-text, pseudo-header fields anywhere, framing fields, names in any case), a head the
/// mapping and admission's target reading accept is one HTTP/1.1 request, read back by the HTTP/1 parser exactly as the mapping
/// built it: the same method, target and fields, and the same framing. A value that could end a
/// line, start a second request or change the body's length never gets past the mapping.
@Suite("HTTP/2: every header block the mapping and the target reader accept reads back as the same HTTP/1.1 request")
struct H2RequestMappingRoundTripTests {
    static let names = [
        ":method", ":scheme", ":authority", ":path", ":protocol", ":status", ":x", "host", "content-length", "transfer-encoding",
        "connection", "te", "cookie", "x-a", "X-A", "x a", "x:a", "", "x-\u{7f}", "proxy-authorization", "upgrade", "expect", "content-type",
    ]
    static let pieces = [
        "a", "/", "/x", " ", "\t", "\r", "\n", "\r\n", "\0", "\u{7f}", "\u{80}", "\u{ff}", ",", "0", "5", "chunked", "trailers", "a.example",
        "a.example:8080", "b.example", "@", "?", "#", "%2e", ":", "http://b.example/", "GET", "HTTP/1.1", "\r\nGET /smuggled HTTP/1.1",
    ]
    static let methods = ["GET", "POST", "get", "G ET", "CONNECT", "OPTIONS", "", "GET\r\n", "PO\u{ff}ST"]

    static func value(_ random: inout SeededRandom) -> String {
        (0..<Int.random(in: 0...3, using: &random)).map { _ in pieces.randomElement(using: &random)! }.joined()
    }

    /// A plausible request block, then a few hostile edits (a field added, replaced or moved).
    static func block(_ random: inout SeededRandom) -> [H2HeaderField] {
        var fields = [
            H2HeaderField(name: ":method", value: methods.randomElement(using: &random)!),
            H2HeaderField(name: ":scheme", value: Bool.random(using: &random) ? "https" : "http"),
            H2HeaderField(name: ":authority", value: Bool.random(using: &random) ? "a.example" : value(&random)),
            H2HeaderField(name: ":path", value: "/" + value(&random)),
        ]
        for _ in 0..<Int.random(in: 0...4, using: &random) {
            let field = H2HeaderField(name: names.randomElement(using: &random)!, value: value(&random))
            switch Int.random(in: 0..<3, using: &random) {
            case 0: fields.append(field)
            case 1: fields[Int.random(in: 0..<fields.count, using: &random)] = field
            default: fields.insert(field, at: Int.random(in: 0...fields.count, using: &random))
            }
        }
        return fields
    }

    @Test("20,000 seeded hostile blocks: accepted ones serialize and parse back to the same head and framing", arguments: [1, 2, 3, 4])
    func acceptedBlocksReadBackTheSame(seed: UInt64) throws {
        var random = SeededRandom(state: seed)
        var accepted = 0
        for _ in 0..<5_000 {
            let fields = Self.block(&random)
            let endStream = Bool.random(using: &random)
            let connection: H2Connection = Bool.random(using: &random) ? .cleartext : .intercepted(origin("https://a.example"))
            guard case .success(let mapped) = H2RequestMapping.requestHead(fields, endStream: endStream, on: connection) else { continue }
            // Admission reads the target next (`RequestTarget.parse`) and answers 400 to one it
            // refuses: only a block that passes both reaches an origin.
            guard (try? RequestTarget.parse(mapped.head.target, method: mapped.head.method)) != nil else { continue }
            accepted += 1
            var sent = mapped.head
            sent.version = .http1_1
            let bytes = sent.serialized()
            let parsed: RequestHead
            do {
                parsed = try bytes.withUnsafeBytes { buffer throws(HTTPParseError) in try HeadParser.parseRequest(buffer) }
            } catch {
                Issue.record("an accepted block does not parse as HTTP/1.1 (\(error)): \(fields)")
                continue
            }
            #expect(parsed.method == sent.method, "\(fields)")
            #expect(parsed.target == sent.target, "\(fields)")
            #expect(parsed.fields == sent.fields, "\(fields)")
            let framing = try? BodyFraming.forRequest(parsed)
            if mapped.reframedAsChunked {
                #expect(framing == .chunked, "\(fields)")
            } else {
                #expect(framing != .chunked, "no chunked framing the mapping did not add: \(fields)")
            }
        }
        #expect(accepted > 50, "the generator reaches accepted blocks (\(accepted))")
    }
}
