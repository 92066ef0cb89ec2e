import Foundation
import TestSupport
import Testing

/// `sign: { aws_sigv4: ... }` end to end (docs/configuration.md, AWS SigV4):
/// a client holding no AWS credential sends plain requests through the proxy, and an origin that
/// recomputes every signature with botocore's signer (Tests/Fixtures/sigv4_origin.py) over what it
/// received accepts them. The fixture is checked on its own first (`fixtureRefusesWhatBotocoreWould`),
/// so its 200 means a signature was verified, not that nothing was checked.
private enum AWS {
    static let plain = SigV4Origin.Credential(accessKeyID: "AKIDPLAINEXAMPLE", secretAccessKey: "plainSecretKeyEXAMPLE/K7MDENG+bPxRfiCY")
    static let tokened = SigV4Origin.Credential(
        accessKeyID: "AKIDTOKENEXAMPLE", secretAccessKey: "tokenSecretKeyEXAMPLE/K7MDENG+bPxRfiCY",
        sessionToken: "IQoJb3JpZ2luX2VjEXAMPLE//////////wEa+token/with=padding==")

    static let secrets: [String: String] = [
        "plain_id": plain.accessKeyID, "plain_secret": plain.secretAccessKey,
        "token_id": tokened.accessKeyID, "token_secret": tokened.secretAccessKey, "session": tokened.sessionToken!,
    ]

    /// Ports of one fixture: 0 execute-api (eu-west-1, no token), 1 execute-api (us-east-1, session
    /// token), 2 s3 (eu-west-1, no token), 3 s3 (eu-west-1, session token), 4 in no scope.
    static func yaml(_ origin: SigV4Origin) -> String {
        """
        secrets:
          plain_id: { env: PLAIN_ID }
          plain_secret: { env: PLAIN_SECRET }
          token_id: { env: TOKEN_ID }
          token_secret: { env: TOKEN_SECRET }
          session: { env: SESSION }
        scopes:
          - name: api
            origins: ["\(origin.url(0))"]
            require_https: false
            sign: { aws_sigv4: { service: execute-api, region: eu-west-1, access_key_id: plain_id, secret_access_key: plain_secret } }
          - name: api-token
            origins: ["\(origin.url(1))"]
            require_https: false
            sign:
              aws_sigv4: { service: execute-api, region: us-east-1, access_key_id: token_id,
                           secret_access_key: token_secret, session_token: session }
          - name: s3
            origins: ["\(origin.url(2))"]
            require_https: false
            sign: { aws_sigv4: { service: s3, region: eu-west-1, access_key_id: plain_id, secret_access_key: plain_secret } }
          - name: s3-token
            origins: ["\(origin.url(3))"]
            require_https: false
            sign:
              aws_sigv4: { service: s3, region: eu-west-1, access_key_id: token_id,
                           secret_access_key: token_secret, session_token: session }
        """
    }

    /// "/a b/ü/~x+y=z" as an SDK serializes it: every byte but the unreserved set and "/" escaped.
    static let encodedPath = "/a%20b/%C3%BC/~x%2By%3Dz"
}

/// One exchange through the proxy, and what the origin said and received.
private struct Signed {
    let response: TestResponse
    let document: [String: Any]
    let received: SigV4Origin.Received?

    var verified: Bool { document["verified"] as? Bool == true }
    var why: String { document["why"] as? String ?? response.bodyText }
    var signedHeaders: [String] { document["signed_headers"] as? [String] ?? [] }
    var sawClientAuthorization: Bool { document["saw_client_authorization"] as? Bool ?? true }
}

private func canary(_ label: String) -> String { "CANARY\(label)\(String(UInt64.random(in: 0...UInt64.max), radix: 16))" }

/// Sends `method index-origin target` with `fields` and `body` through the proxy on a fresh
/// connection; the request is tagged with X-Test-Case so the origin's record of it can be found.
private func send(
    _ proxyPort: UInt16, _ origin: SigV4Origin, _ index: Int, _ method: String, _ target: String,
    fields: [(String, String)] = [], body: [UInt8] = []
) throws -> Signed {
    let id = UUID().uuidString
    var head = "\(method) \(origin.url(index))\(target) HTTP/1.1\r\nHost: \(origin.authority(index))\r\nX-Test-Case: \(id)\r\n"
    for (name, value) in fields { head += "\(name): \(value)\r\n" }
    if !body.isEmpty || method == "PUT" || method == "POST" { head += "Content-Length: \(body.count)\r\n" }
    head += "Connection: close\r\n\r\n"
    let socket = try TestSocket.connect(port: proxyPort)
    try socket.send(head)
    // The proxy may answer before the body is in (a 413 from the Content-Length alone) and close:
    // the body goes on another thread (its errors ignored) while this one reads the answer,
    // bounded by the socket's receive timeout.
    let sent = DispatchSemaphore(value: 0)
    Thread.detachNewThread {
        if !body.isEmpty { try? socket.send(body) }
        sent.signal()
    }
    let response = try #require(try HTTPReader(socket).readResponse(requestMethod: method))
    if sent.wait(timeout: .now() + 15) == .timedOut { socket.shutdownBoth() }
    let document = (try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]) ?? [:]
    let received = origin.received.first { $0.header("x-test-case") == id }
    return Signed(response: response, document: document, received: received)
}

/// The query's pairs as a service reads them (`+` a space, escapes decoded), sorted: the proxy may
/// re-encode the query canonically on the wire, so the pairs, not the spelling, must survive.
private func queryPairs(_ target: String) -> [String] {
    guard let query = target.split(separator: "?", maxSplits: 1).dropFirst().first else { return [] }
    return query.split(separator: "&").map { pair in
        let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map {
            $0.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String($0)
        }
        return parts[0] + "=" + (parts.count > 1 ? parts[1] : "")
    }.sorted()
}

/// `AWS4-HMAC-SHA256 Credential=AKID/YYYYMMDD/REGION/SERVICE/aws4_request, SignedHeaders=..., Signature=<64 hex>`
private func expectAuthorization(
    _ received: SigV4Origin.Received?, keyID: String, region: String, service: String,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    let authorization = received?.headers("authorization") ?? []
    #expect(authorization.count == 1, "exactly one Authorization arrives", sourceLocation: sourceLocation)
    let date = String((received?.header("x-amz-date") ?? "").prefix(8))
    #expect(date.count == 8, "X-Amz-Date arrives", sourceLocation: sourceLocation)
    let prefix = "AWS4-HMAC-SHA256 Credential=\(keyID)/\(date)/\(region)/\(service)/aws4_request, SignedHeaders="
    #expect(
        authorization.first?.hasPrefix(prefix) == true, "\(authorization.first ?? "none") is not \(prefix)...",
        sourceLocation: sourceLocation)
}

@Suite("SigV4 end to end: botocore's signer verifies what the origin received", .serialized)
struct SigV4EngineTests {
    @Test("the fixture on its own: botocore-signed requests verify, every tampered one is refused (no proxy)")
    func fixtureRefusesWhatBotocoreWould() throws {
        let python = try #require(SigV4Origin.botocorePython, "no python3 here imports botocore: install python3-botocore (make packages-test)")
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/sigv4_origin_check.py").path
        let result = try SigV4Origin.runBounded(python, [script], seconds: 120)
        #expect(result.status == 0, "sigv4_origin_check.py:\n\(result.output)")
        print("SigV4 origin fixture: " + (result.output.split(separator: "\n").last.map(String.init) ?? ""))
    }

    @Test("GET with a query to a non-s3 service, no session token: verified, query pairs intact, no payload or token field")
    func getWithQuery() throws {
        let origin = try SigV4Origin(credentials: [AWS.plain, AWS.tokened], ports: 5)
        defer { origin.stop() }
        let proxy = try ProxyHarness(yaml: AWS.yaml(origin), secrets: AWS.secrets)
        defer { proxy.stop() }
        let sent = "/prod/items?b=2&a=1&c=x%20y&empty=&tilde=~t&slash=a%2Fb"
        let result = try send(proxy.port, origin, 0, "GET", sent, fields: [("Accept", "application/json")])
        #expect(result.response.status == 200, "\(result.why)")
        #expect(result.verified, "\(result.why)")
        #expect(result.signedHeaders == ["host", "x-amz-date"])
        let received = try #require(result.received)
        expectAuthorization(received, keyID: AWS.plain.accessKeyID, region: "eu-west-1", service: "execute-api")
        #expect(received.path == "/prod/items")
        #expect(queryPairs(received.target) == queryPairs(sent))
        #expect(received.header("x-amz-security-token") == nil)
        #expect(received.header("x-amz-content-sha256") == nil, "only s3 gets X-Amz-Content-Sha256")
        #expect(received.header("accept") == "application/json", "unsigned fields still pass")
    }

    @Test("PUT and POST with bodies to a non-s3 service, with and without a session token: the body is hashed and signed")
    func bodiesHashed() throws {
        let origin = try SigV4Origin(credentials: [AWS.plain, AWS.tokened], ports: 5)
        defer { origin.stop() }
        let proxy = try ProxyHarness(yaml: AWS.yaml(origin), secrets: AWS.secrets)
        defer { proxy.stop() }
        let body = Array(#"{"name":"café","n":42}"#.utf8)

        let put = try send(proxy.port, origin, 1, "PUT", "/prod/items/1", fields: [("Content-Type", "application/json")], body: body)
        #expect(put.response.status == 200, "\(put.why)")
        #expect(put.verified, "\(put.why)")
        #expect(put.signedHeaders == ["content-type", "host", "x-amz-date", "x-amz-security-token"])
        let putReceived = try #require(put.received)
        expectAuthorization(putReceived, keyID: AWS.tokened.accessKeyID, region: "us-east-1", service: "execute-api")
        #expect(putReceived.headers("x-amz-security-token") == [AWS.tokened.sessionToken!])
        #expect(putReceived.bodyLength == body.count)
        #expect(put.document["payload"] as? String == putReceived.bodySHA256, "the signature covers the body's SHA-256")

        let post = try send(
            proxy.port, origin, 0, "POST", "/prod/query",
            fields: [
                ("Content-Type", "application/x-amz-json-1.0"),
                ("X-Amz-Target", "Service.Query"),
            ], body: body)
        #expect(post.response.status == 200, "\(post.why)")
        #expect(post.verified, "\(post.why)")
        #expect(post.signedHeaders == ["content-type", "host", "x-amz-date", "x-amz-target"])
        let postReceived = try #require(post.received)
        expectAuthorization(postReceived, keyID: AWS.plain.accessKeyID, region: "eu-west-1", service: "execute-api")
        #expect(postReceived.header("x-amz-security-token") == nil)
        #expect(postReceived.header("x-amz-target") == "Service.Query")
        #expect(post.document["payload"] as? String == postReceived.bodySHA256)

        let empty = try send(proxy.port, origin, 0, "POST", "/prod/empty", body: [])
        #expect(empty.verified, "an empty body hashes as empty: \(empty.why)")
    }

    @Test("s3 PUT and GET, with and without a session token: UNSIGNED-PAYLOAD, body intact, a 2 MiB body streams through")
    func s3() throws {
        let origin = try SigV4Origin(credentials: [AWS.plain, AWS.tokened], ports: 5)
        defer { origin.stop() }
        let proxy = try ProxyHarness(yaml: AWS.yaml(origin), secrets: AWS.secrets)
        defer { proxy.stop() }
        let body = Array("not really a jpeg\n".utf8)
        let put = try send(
            proxy.port, origin, 3, "PUT", "/bucket/photos/trip.jpg",
            fields: [("Content-Type", "image/jpeg"), ("x-amz-acl", "private")], body: body)
        #expect(put.response.status == 200, "\(put.why)")
        #expect(put.verified, "\(put.why)")
        #expect(put.signedHeaders == ["content-type", "host", "x-amz-acl", "x-amz-content-sha256", "x-amz-date", "x-amz-security-token"])
        #expect(put.document["payload"] as? String == "UNSIGNED-PAYLOAD")
        let putReceived = try #require(put.received)
        expectAuthorization(putReceived, keyID: AWS.tokened.accessKeyID, region: "eu-west-1", service: "s3")
        #expect(putReceived.headers("x-amz-content-sha256") == ["UNSIGNED-PAYLOAD"])
        #expect(putReceived.headers("x-amz-security-token") == [AWS.tokened.sessionToken!])
        #expect(putReceived.bodyLength == body.count)

        let sent = "/bucket?list-type=2&prefix=photos%2F2026%20trip%2F&delimiter=%2F"
        let get = try send(proxy.port, origin, 2, "GET", sent)
        #expect(get.verified, "\(get.why)")
        #expect(get.signedHeaders == ["host", "x-amz-content-sha256", "x-amz-date"])
        let getReceived = try #require(get.received)
        expectAuthorization(getReceived, keyID: AWS.plain.accessKeyID, region: "eu-west-1", service: "s3")
        #expect(getReceived.header("x-amz-security-token") == nil)
        #expect(queryPairs(getReceived.target) == queryPairs(sent))

        let big = [UInt8](repeating: 0x61, count: 2 << 20)
        let large = try send(proxy.port, origin, 2, "PUT", "/bucket/big.bin", fields: [("Content-Type", "application/octet-stream")], body: big)
        #expect(large.verified, "s3 is not buffered, so no size limit: \(large.why)")
        #expect(large.received?.bodyLength == big.count)
    }

    @Test("paths needing URI encoding sign as botocore does, for s3 (encoded once) and other services (twice)")
    func encodedPaths() throws {
        let origin = try SigV4Origin(credentials: [AWS.plain, AWS.tokened], ports: 5)
        defer { origin.stop() }
        let proxy = try ProxyHarness(yaml: AWS.yaml(origin), secrets: AWS.secrets)
        defer { proxy.stop() }
        for (index, path) in [
            (0, "/prod" + AWS.encodedPath), (1, AWS.encodedPath), (2, "/bucket" + AWS.encodedPath),
            (3, "/bucket/2026%20trip/caf%C3%A9%20%2B%20%3D%20~%21.jpg"),
        ] {
            let result = try send(proxy.port, origin, index, "GET", path + "?k=v%20w")
            #expect(result.response.status == 200, "\(path) on port \(index): \(result.why)")
            #expect(result.verified, "\(path) on port \(index): \(result.why)")
            #expect(result.received?.path == path, "the path goes on the wire as the client sent it")
        }
    }

    @Test("the client's Authorization, X-Amz-Date, X-Amz-Security-Token and X-Amz-Content-Sha256 never arrive; its x-amz-meta-* is kept and signed")
    func clientSigningFieldsReplaced() throws {
        let origin = try SigV4Origin(credentials: [AWS.plain, AWS.tokened], ports: 5)
        defer { origin.stop() }
        let proxy = try ProxyHarness(yaml: AWS.yaml(origin), secrets: AWS.secrets)
        defer { proxy.stop() }
        let authorization = canary("auth"), token = canary("token2"), contentHash = canary("sha")
        let clientFields = [
            (
                "Authorization",
                "AWS4-HMAC-SHA256 Credential=AKIDCLIENT/20200101/eu-west-1/s3/aws4_request, SignedHeaders=host, Signature=\(authorization)"
            ),
            ("X-Amz-Date", "20200101T000000Z"), ("X-Amz-Security-Token", token), ("X-Amz-Content-Sha256", contentHash),
            ("x-amz-meta-foo", "bar  baz"),
        ]
        for index in 0..<4 {
            let body = Array("payload \(index)".utf8)
            let result = try send(
                proxy.port, origin, index, "PUT", "/bucket/key-\(index)",
                fields: clientFields + [("Content-Type", "text/plain")], body: body)
            #expect(result.response.status == 200, "port \(index): \(result.why)")
            #expect(result.verified, "port \(index): \(result.why)")
            #expect(!result.sawClientAuthorization)
            #expect(result.signedHeaders.contains("x-amz-meta-foo"), "the client's other x-amz-* fields are signed")
            let received = try #require(result.received)
            #expect(received.headers("x-amz-meta-foo") == ["bar  baz"] || received.headers("x-amz-meta-foo") == ["bar baz"])
            #expect(received.headers("authorization").count == 1)
            #expect(received.headers("x-amz-date").count == 1)
            #expect(received.header("x-amz-date") != "20200101T000000Z", "the proxy's date, not the client's")
            #expect(received.headers("x-amz-security-token").count == (index == 1 || index == 3 ? 1 : 0))
            #expect(received.headers("x-amz-content-sha256").count == (index >= 2 ? 1 : 0))
        }
        for received in origin.received {
            for item in [authorization, token, contentHash] {
                #expect(!received.allText.contains(item), "\(item.prefix(12)) reached the origin")
            }
            #expect(!received.allText.contains("AKIDCLIENT"))
        }
    }

    @Test("an origin in no signing scope gets no signature, and the client's Authorization and X-Amz-Security-Token are stripped as usual")
    func unscopedOriginUnsigned() throws {
        let origin = try SigV4Origin(credentials: [AWS.plain, AWS.tokened], ports: 5)
        defer { origin.stop() }
        let proxy = try ProxyHarness(yaml: AWS.yaml(origin), secrets: AWS.secrets)
        defer { proxy.stop() }
        let authorization = canary("auth"), token = canary("token")
        let result = try send(
            proxy.port, origin, 4, "GET", "/x?a=1",
            fields: [
                (
                    "Authorization",
                    "AWS4-HMAC-SHA256 Credential=AKIDCLIENT/20200101/eu-west-1/s3/aws4_request, SignedHeaders=host, Signature=\(authorization)"
                ),
                ("X-Amz-Security-Token", token), ("x-amz-meta-foo", "bar"),
            ])
        #expect(result.response.status == 403)
        #expect(result.why == "no Authorization")
        let received = try #require(result.received)
        #expect(received.header("authorization") == nil)
        #expect(received.header("x-amz-security-token") == nil)
        #expect(received.header("x-amz-date") == nil, "nothing signed it")
        #expect(received.header("x-amz-meta-foo") == "bar")
        #expect(!received.allText.contains(authorization) && !received.allText.contains(token))
        for secret in [AWS.plain.accessKeyID, AWS.tokened.accessKeyID, AWS.tokened.sessionToken!] {
            #expect(!received.allText.contains(secret), "no AWS credential goes to an origin outside the scope")
        }
    }

    @Test("signing is per hop: a followed redirect is signed for its own origin's scope, or not at all")
    func redirectSignedPerHop() throws {
        let origin = try SigV4Origin(credentials: [AWS.plain, AWS.tokened], ports: 5)
        defer { origin.stop() }
        let proxy = try ProxyHarness(yaml: AWS.yaml(origin) + "\nredirects: { cross_origin: follow }\n", secrets: AWS.secrets)
        defer { proxy.stop() }

        let toS3 = try send(proxy.port, origin, 1, "GET", "/redirect/\(origin.ports[3])/bucket/landed?x=1")
        #expect(toS3.response.status == 200, "\(toS3.why)")
        #expect(toS3.verified, "the second hop is signed for the s3 scope: \(toS3.why)")
        let landed = try #require(origin.received.last)
        #expect(landed.port == origin.ports[3] && landed.path == "/bucket/landed")
        expectAuthorization(landed, keyID: AWS.tokened.accessKeyID, region: "eu-west-1", service: "s3")
        #expect(landed.headers("x-amz-content-sha256") == ["UNSIGNED-PAYLOAD"])

        let before = origin.received.count
        let away = try send(proxy.port, origin, 1, "GET", "/redirect/\(origin.ports[4])/elsewhere")
        let hops = origin.received.dropFirst(before)
        #expect(hops.count == 2, "the signed first hop and the followed one")
        #expect(hops.first?.verified == true, "\(hops.first?.why ?? "")")
        let unscoped = try #require(hops.last)
        #expect(unscoped.port == origin.ports[4] && unscoped.path == "/elsewhere")
        #expect(away.response.status == 403 && away.why == "no Authorization", "the followed hop is not signed")
        #expect(unscoped.header("authorization") == nil)
        #expect(unscoped.header("x-amz-date") == nil && unscoped.header("x-amz-security-token") == nil)
        #expect(!unscoped.allText.contains(AWS.tokened.sessionToken!) && !unscoped.allText.contains(AWS.tokened.accessKeyID))
    }

    @Test("a non-s3 body over 1 MiB (Content-Length) is refused with 413 body_too_large_to_sign, and the origin receives nothing")
    func tooLargeToSign() throws {
        let origin = try SigV4Origin(credentials: [AWS.plain, AWS.tokened], ports: 5)
        defer { origin.stop() }
        let proxy = try ProxyHarness(yaml: AWS.yaml(origin), secrets: AWS.secrets)
        defer { proxy.stop() }
        let exactly = try send(proxy.port, origin, 0, "POST", "/prod/at-limit", body: [UInt8](repeating: 0x62, count: 1 << 20))
        #expect(exactly.verified, "1 MiB is still signed: \(exactly.why)")
        let before = origin.received.count

        let tooLarge = try send(
            proxy.port, origin, 0, "POST", "/prod/too-large", fields: [("Content-Type", "application/octet-stream")],
            body: [UInt8](repeating: 0x61, count: (1 << 20) + 1))
        #expect(tooLarge.response.status == 413)
        #expect(tooLarge.response.bodyText.contains("body_too_large_to_sign"))
        #expect(tooLarge.received == nil)
        #expect(origin.received.count == before, "the origin received nothing")
    }
}

@Suite("SigV4 through the binary: the AWS secret key and session token appear in no log line, metric or error", .serialized)
struct SigV4BinaryCanaryTests {
    @Test("signed exchanges log a signed field and leak neither the secret access key nor the session token")
    func noSecretAnywhere() throws {
        let secretKey = canary("awssecret") + "/K7MDENG+bPxRfiCY"
        let sessionToken = canary("awssession") + "//////////wEa+token=="
        let credential = SigV4Origin.Credential(accessKeyID: "AKIDBINARYEXAMPLE", secretAccessKey: secretKey, sessionToken: sessionToken)
        let origin = try SigV4Origin(credentials: [credential], ports: 2)
        defer { origin.stop() }
        let configured = try ConfiguredProxy(environment: [
            "AWS_KEY_ID": credential.accessKeyID, "AWS_SECRET": secretKey,
            "AWS_SESSION": sessionToken,
        ]) { logPath in
            """
            secrets: { aws_key_id: { env: AWS_KEY_ID }, aws_secret: { env: AWS_SECRET }, aws_session: { env: AWS_SESSION } }
            scopes:
              - name: s3
                origins: ["\(origin.url(0))"]
                require_https: false
                sign: { aws_sigv4: { service: s3, region: eu-west-1, access_key_id: aws_key_id, secret_access_key: aws_secret, session_token: aws_session } }
              - name: api
                origins: ["\(origin.url(1))"]
                require_https: false
                sign: { aws_sigv4: { service: execute-api, region: eu-west-1, access_key_id: aws_key_id, secret_access_key: aws_secret, session_token: aws_session } }
            log: { output: \(logPath) }
            """
        }
        let (proxy, adminPort, logPath) = (configured.process, configured.adminPort, configured.logPath)
        defer { proxy.terminate() }

        let put = try send(
            proxy.port, origin, 0, "PUT", "/bucket/key",
            fields: [
                ("Content-Type", "text/plain"),
                ("X-Amz-Security-Token", canary("client")),
            ],
            body: Array("hello".utf8))
        #expect(put.verified, "\(put.why)")
        let get = try send(proxy.port, origin, 1, "GET", "/prod/items?b=2&a=1")
        #expect(get.verified, "\(get.why)")
        let tooLarge = try send(proxy.port, origin, 1, "POST", "/prod/big", body: [UInt8](repeating: 0x61, count: (1 << 20) + 1))
        #expect(tooLarge.response.status == 413)
        for response in [put.response, get.response, tooLarge.response] {
            let text = String(decoding: response.rawHead + response.body, as: UTF8.self)
            #expect(!text.contains(secretKey) && !text.contains(sessionToken), "a response to the client carries an AWS secret")
        }

        let metrics = try #require(try adminGet(adminPort, "/metrics")).bodyText
        #expect(proxy.terminate() == 0)
        let log = try String(contentsOfFile: logPath, encoding: .utf8)
        let lines = log.split(separator: "\n").map(String.init)
        #expect(lines.count == 3)
        for (name, text) in [("log", log), ("/metrics", metrics), ("stderr", proxy.standardError)] {
            #expect(!text.contains(secretKey), "\(name) leaked the secret access key")
            #expect(!text.contains(sessionToken), "\(name) leaked the session token")
            #expect(!text.contains("CANARYawssecret") && !text.contains("CANARYawssession"), "\(name) leaked part of a secret")
        }
        #expect(metrics.contains("scopeproxy_log_tripwire_hits_total 0"), "the design held; the tripwire never fired")
        for line in lines.prefix(2) {
            #expect(line.contains(#""signed""#), "a signed exchange's line says so: \(line)")
        }
        #expect(lines.last?.contains("body_too_large_to_sign") == true)
    }
}
