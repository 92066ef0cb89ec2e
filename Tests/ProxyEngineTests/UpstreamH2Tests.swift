import CLibevent
import HTTP1Codec
import ProxyCore
import SecretScan
import Testing

@testable import ProxyEngine

// The pure parts of HTTP/2 to origins: which protocol a leg may speak, the HTTP/2 form of the
// HTTP/1.1 head the exchange serializes, and the response trailers a chunked pump keeps aside.

@Suite("HTTP/2 upstream: protocol choice, request mapping, relayed trailers")
struct UpstreamH2Tests {
    @Test("protocol choice: TLS offers h2 unless the hop upgrades; plain is h2c only for an h2c client; a tunnel is raw bytes")
    func protocolChoiceTable() {
        let rows: [(UpstreamTransport, h2c: Bool, upgrade: Bool, UpstreamHTTP2)] = [
            (.tls, false, false, .offerInALPN), (.tls, true, false, .offerInALPN),
            (.tls, false, true, .never), (.tls, true, true, .never),
            (.plain, false, false, .never), (.plain, true, false, .priorKnowledge),
            (.plain, true, true, .never), (.plain, false, true, .never),
            (.raw, true, false, .never), (.raw, false, false, .never),
        ]
        for (transport, h2c, upgrade, expected) in rows {
            #expect(
                UpstreamHTTP2.choose(transport: transport, clientSpokeH2c: h2c, isUpgrade: upgrade) == expected,
                "\(transport) h2c=\(h2c) upgrade=\(upgrade)")
        }
    }

    private func head(_ text: String) throws -> RequestHead {
        try Array(text.utf8).withUnsafeBytes { try HeadParser.parseRequest($0) }
    }

    @Test(
        "request mapping: pseudo-fields from the request line and Host, connection-specific fields and framing removed, te: trailers added, the rest in order"
    )
    func requestFieldsFromHTTP1Head() throws {
        let origin = try Origin.parse("https://api.example:8443")
        let parsed = try head(
            "POST /svc/Unary?x=1 HTTP/1.1\r\nHost: api.example:8443\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n"
                + "Content-Type: application/grpc\r\nAuthorization: Bearer t\r\nTE: trailers\r\nUpgrade: h2c\r\nX-Two: a\r\nX-Two: b\r\n\r\n")
        let fields = UpstreamH2Stream.requestFields(parsed, origin: origin)
        #expect(
            fields.map { "\($0.name)=\($0.value)" } == [
                ":method=POST", ":scheme=https", ":authority=api.example:8443", ":path=/svc/Unary?x=1",
                "content-type=application/grpc", "authorization=Bearer t", "x-two=a", "x-two=b", "te=trailers",
            ])
    }

    @Test("request mapping: an absolute-form target keeps only its path; none at all is /")
    func requestFieldsFromAbsoluteForm() throws {
        let origin = try Origin.parse("http://127.0.0.1:9000")
        for (target, path) in [("http://127.0.0.1:9000/a/b?c", "/a/b?c"), ("http://127.0.0.1:9000", "/")] {
            let fields = UpstreamH2Stream.requestFields(try head("GET \(target) HTTP/1.1\r\nHost: 127.0.0.1:9000\r\n\r\n"), origin: origin)
            #expect(fields.first { $0.name == ":path" }?.value == path)
        }
    }

    /// A chunked body with `trailers`, through a pump scrubbing `value`; returns the pump.
    private func pumpChunked(trailers: String, value: [UInt8]) throws -> BodyPump {
        let source = evbuffer_new()!
        let destination = evbuffer_new()!
        defer {
            evbuffer_free(source)
            evbuffer_free(destination)
        }
        EventBuffer.append(source, Array("5\r\nhello\r\n0\r\n\(trailers)\r\n".utf8))
        let watch = SecretWatch(scanner: SecretScanner(secrets: [value]), secrets: ["token"], placeholders: [false])
        var pump = BodyPump(inbound: .chunked, outbound: .untilClose, scrub: watch)
        #expect(try pump.pump(from: source, to: destination, highWatermark: .max))
        return pump
    }

    @Test("trailers: kept aside by a chunked pump, connection-specific and framing fields removed, a value the scrub watches masked and reported")
    func trailersCleanedAndScrubbed() throws {
        let value = Array("trailer-secret-Zq7wXv".utf8)
        var pump = try pumpChunked(
            trailers: "grpc-status: 0\r\ngrpc-message: ok\r\nConnection: close\r\nContent-Length: 4\r\nTE: trailers\r\n"
                + "Proxy-Authorization: Basic x\r\nx-echo: Bearer trailer-secret-Zq7wXv\r\n",
            value: value)
        let trailers = try #require(pump.trailers)
        #expect(
            trailers.map { "\($0.name)=\($0.value)" } == [
                "grpc-status=0", "grpc-message=ok", "x-echo=Bearer " + String(repeating: "*", count: value.count),
            ])
        #expect(pump.takeFindings()?.map(\.secret) == ["token"], "the masked trailer is reported with the body's findings")
    }

    @Test("trailers: none sent, none kept; a section of only removed fields is none")
    func noTrailers() throws {
        #expect(try pumpChunked(trailers: "", value: Array("unused-secret-abc".utf8)).trailers == nil)
        #expect(try pumpChunked(trailers: "Connection: close\r\n", value: Array("unused-secret-abc".utf8)).trailers == nil)
    }
}
