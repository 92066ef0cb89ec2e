import AWSSigV4
import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

/// AWS SigV4 in the exchange core: which requests are signed, what of the client's goes, bodies
/// read to be hashed (and refused when too large), s3 streaming unsigned. The signature itself is
/// checked against the AWS test suite and botocore in AWSSigV4Tests and end to end in the engine.
@Suite("Machine: AWS SigV4 signing")
struct SigningTests {
    static let yaml = """
        secrets:
          kid: { env: KID }
          skey: { env: SKEY }
          tok: { env: TOK }
        scopes:
          - name: api
            origins: ["https://api.example"]
            sign: { aws_sigv4: { service: execute-api, region: eu-west-1, access_key_id: kid, secret_access_key: skey } }
          - name: s3
            origins: ["https://s3.example"]
            sign: { aws_sigv4: { service: s3, region: eu-west-1, access_key_id: kid, secret_access_key: skey, session_token: tok } }

        """
    static let secrets = ["kid": "AKIDEXAMPLE", "skey": "SECRET-KEY-CANARY-93a1", "tok": "SESSION-TOKEN-CANARY-77c2"]
    static let fixture = Fixture(yaml, secrets: secrets)
    static let api = origin("https://api.example")
    static let s3 = origin("https://s3.example")
    /// 2015-08-30T12:36:00Z, the AWS test suite's moment.
    static let wallClock: Int64 = 1_440_938_160

    func arrivalHead(_ p: Playbook, _ lines: [String]) -> ConnectionEvent {
        .requestHead(
            requestHead(lines), headBytes: lines.joined(separator: "\r\n").utf8.count + 4,
            Arrival(now: p.now, scope: p.fixture.scope, wallClock: Self.wallClock))
    }

    @Test("a request to the scope's origin is signed; the client's Authorization, X-Amz-Date and token are replaced, its x-amz-meta kept")
    func signedGet() throws {
        var p = Playbook(Self.fixture)
        p.start([.arm(.clientHead)])
        p.on(
            arrivalHead(
                p,
                [
                    "GET https://s3.example/bucket/key?b=2&a=1 HTTP/1.1", "Host: s3.example",
                    "Authorization: AWS4-HMAC-SHA256 CLIENT-CANARY", "X-Amz-Date: 20000101T000000Z",
                    "X-Amz-Security-Token: CLIENT-TOKEN-CANARY", "x-amz-meta-color: blue",
                ]),
            [.cancelTimer, .arm(.connect), .connect(hop(1), Self.s3, .tls, reusePooled: true)])
        _ = p.feed(.upstreamConnected(hop(1), reused: false))
        let sent = try #require(p.sent(to: hop(1)))
        #expect(sent.hasPrefix("GET /bucket/key?a=1&b=2 HTTP/1.1\r\n"), "the query goes out in its canonical order")
        #expect(
            sent.contains(
                "Authorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/eu-west-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-meta-color;x-amz-security-token, Signature="
            ))
        #expect(sent.contains("X-Amz-Date: 20150830T123600Z\r\n"))
        #expect(sent.contains("X-Amz-Content-Sha256: UNSIGNED-PAYLOAD\r\n"))
        #expect(sent.contains("X-Amz-Security-Token: SESSION-TOKEN-CANARY-77c2\r\n"))
        #expect(sent.contains("x-amz-meta-color: blue\r\n"))
        #expect(!sent.contains("CLIENT-CANARY") && !sent.contains("CLIENT-TOKEN-CANARY") && !sent.contains("20000101"))
        #expect(!sent.contains("SECRET-KEY-CANARY"), "the secret key only keys the HMAC")
    }

    @Test("an s3 upload streams (UNSIGNED-PAYLOAD); a non-s3 body is read whole to be hashed")
    func bodies() throws {
        var s3 = Playbook(Self.fixture)
        s3.start([.arm(.clientHead)])
        s3.on(
            arrivalHead(s3, ["PUT https://s3.example/b/k HTTP/1.1", "Host: s3.example", "Content-Length: 5000000"]),
            [.cancelTimer, .arm(.connect), .connect(hop(1), Self.s3, .tls, reusePooled: true)])

        var api = Playbook(Self.fixture)
        api.start([.arm(.clientHead)])
        api.on(
            arrivalHead(
                api,
                [
                    "POST https://api.example/items HTTP/1.1", "Host: api.example", "Content-Type: application/json",
                    "Content-Length: 7",
                ]),
            [.cancelTimer, .exactly(.collectRequestBody(.contentLength(7), limit: AWSSigV4Spec.maxHashedBodyBytes)), .arm(.stall)])
        api.on(
            .collectedBody(.complete(Array("{\"a\":1}".utf8))), [.cancelTimer, .arm(.connect), .connect(hop(1), Self.api, .tls, reusePooled: true)])
        _ = api.feed(.upstreamConnected(hop(1), reused: false))
        let sent = try #require(api.sent(to: hop(1)))
        #expect(sent.contains("SignedHeaders=content-type;host;x-amz-date, Signature="))
        #expect(sent.hasSuffix("Content-Length: 7\r\n\r\n{\"a\":1}"))
        #expect(!sent.contains("X-Amz-Content-Sha256"), "only s3 sends the payload hash header")
    }

    @Test("a non-s3 body over 1 MiB: 413 body_too_large_to_sign from the head alone (Content-Length) or once the read passes the limit (chunked)")
    func tooLargeToSign() {
        var p = Playbook(Self.fixture)
        p.start([.arm(.clientHead)])
        let returned = p.feed(arrivalHead(p, ["POST https://api.example/items HTTP/1.1", "Host: api.example", "Content-Length: 2000000"]))
        #expect(p.connected.isEmpty)
        #expect(returned.contains { if case .writeToClient(let bytes) = $0 { text(bytes).contains("body_too_large_to_sign") } else { false } })

        var q = Playbook(Self.fixture)
        q.start([.arm(.clientHead)])
        q.on(
            arrivalHead(q, ["POST https://api.example/items HTTP/1.1", "Host: api.example", "Transfer-Encoding: chunked"]),
            [.cancelTimer, .exactly(.collectRequestBody(.chunked, limit: AWSSigV4Spec.maxHashedBodyBytes)), .arm(.stall)])
        _ = q.feed(.collectedBody(.tooLarge))
        #expect(q.emitted.last?.failure?.code == "body_too_large_to_sign")
        #expect(q.connected.isEmpty)
    }

    @Test("another origin gets no signature, and the client's own Authorization is stripped there as everywhere")
    func unscopedUnsigned() throws {
        var p = Playbook(Self.fixture)
        p.start([.arm(.clientHead)])
        p.on(
            arrivalHead(p, ["GET http://plain.example/ HTTP/1.1", "Host: plain.example", "Authorization: AWS4-HMAC-SHA256 CLIENT-CANARY"]),
            [.cancelTimer, .arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)])
        _ = p.feed(.upstreamConnected(hop(1), reused: false))
        let sent = try #require(p.sent(to: hop(1)))
        #expect(!sent.contains("Authorization") && !sent.contains("X-Amz-Date"))
    }

    @Test("the record says signed; a missing credential is 502 credential_unavailable naming the secret, nothing sent")
    func recordAndMissing() {
        var p = Playbook(Self.fixture)
        p.start([.arm(.clientHead)])
        _ = p.feed(arrivalHead(p, ["GET https://s3.example/b HTTP/1.1", "Host: s3.example"]))
        _ = p.feed(.upstreamConnected(hop(1), reused: false))
        _ = p.feed(.responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 0")))
        _ = p.feed(.responseBody(hop(1), .complete(payload: 0, consumed: 0, captured: nil, observed: nil)))
        #expect(p.emitted.last?.signed == "aws_sigv4")

        var q = Playbook(Fixture(Self.yaml, secrets: ["kid": "AKIDEXAMPLE", "tok": "t"]))
        q.start([.arm(.clientHead)])
        let returned = q.feed(arrivalHead(q, ["GET https://s3.example/b HTTP/1.1", "Host: s3.example"]))
        #expect(q.connected.isEmpty)
        let written = returned.compactMap { if case .writeToClient(let bytes) = $0 { text(bytes) } else { nil } }.joined()
        #expect(written.hasPrefix("HTTP/1.1 502") && written.contains("credential_unavailable") && written.contains("skey"))
    }

    @Test("the guard lets the access key id and session token go to the signing scope's origins only; the secret key nowhere")
    func guardKnowsSigningSecrets() {
        var p = Playbook(Self.fixture)
        p.start([.arm(.clientHead)])
        _ = p.feed(arrivalHead(p, ["GET http://plain.example/?k=SECRET-KEY-CANARY-93a1 HTTP/1.1", "Host: plain.example"]))
        #expect(p.emitted.last?.failure?.code == "secret_egress_blocked")
        var q = Playbook(Self.fixture)
        q.start([.arm(.clientHead)])
        _ = q.feed(arrivalHead(q, ["GET https://s3.example/?k=SECRET-KEY-CANARY-93a1 HTTP/1.1", "Host: s3.example"]))
        #expect(q.emitted.last?.failure?.code == "secret_egress_blocked", "not even to its own scope's origin")
    }
}
