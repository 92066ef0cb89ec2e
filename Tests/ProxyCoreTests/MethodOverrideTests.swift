import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

/// `methods:` limits what a credential may do; `_method` in a query or a form body makes Laravel,
/// Symfony and Rails run another method than the request line's (docs/security-model.md).
@Suite("Machine: method overrides in a query or a form body, and bodies read before scoping")
struct MethodOverrideTests {
    static let mToken = "X-M-Key: M-INJECTED-9b3f"

    @Test(
        "a _method in the query that the scope does not allow: the request goes, without the credential",
        arguments: ["_method=DELETE", "a=1&_method=delete", "a=1;%5Fmethod=PUT", "_METHOD=DELETE"])
    func queryOverride(_ query: String) {
        var p = Playbook(Configs.methodsLimited)
        p.requested(["POST https://m.example/v1/users/7?\(query) HTTP/1.1", "Host: m.example"], to: limited)
        p.on(
            .upstreamConnected(hop(1), reused: false),
            [.send(hop(1), startingWith: "POST /v1/users/7?", excluding: ["M-INJECTED"]), .arm(.responseHead)])
    }

    @Test("a _method the scope allows keeps the credential")
    func allowedOverride() {
        var p = Playbook(Configs.methodsLimited)
        p.requested(["POST https://m.example/v1/users/7?_method=GET HTTP/1.1", "Host: m.example"], to: limited)
        p.on(.upstreamConnected(hop(1), reused: false), [.send(hop(1), startingWith: "POST ", containing: [Self.mToken]), .arm(.responseHead)])
    }

    @Test("a form body to a scope that limits methods is read whole first, then scoped: _method=DELETE gets nothing")
    func formBodyOverride() {
        var p = Playbook(Configs.methodsLimited)
        p.start([.arm(.clientHead)])
        p.on(
            p.head(
                "POST https://m.example/v1/users/7 HTTP/1.1", "Host: m.example",
                "Content-Type: application/x-www-form-urlencoded", "Content-Length: 20"),
            [.cancelTimer, .exactly(.collectRequestBody(.contentLength(20), limit: p.settings.limits.maxInspectedBody)), .arm(.stall)])
        #expect(p.connected.isEmpty, "nothing goes upstream before the body is read")
        p.on(.collectedBody(.progressed), [.arm(.stall)])
        p.on(
            .collectedBody(.complete(Array("name=x&_method=DELETE".utf8))),
            [.cancelTimer, .arm(.connect), .connect(hop(1), limited, .tls, reusePooled: true)])
        p.on(
            .upstreamConnected(hop(1), reused: true),
            [
                .send(
                    hop(1), startingWith: "POST /v1/users/7 HTTP/1.1\r\n", containing: ["Content-Length: 21", "\r\n\r\nname=x&_method=DELETE"],
                    excluding: ["M-INJECTED"]),
                .arm(.responseHead),
            ])
    }

    @Test("a chunked form body without an override is read whole and sent with its length, credential included")
    func formBodyPlain() {
        var p = Playbook(Configs.methodsLimited)
        p.start([.arm(.clientHead)])
        p.on(
            p.head(
                "POST https://m.example/v1/items HTTP/1.1", "Host: m.example", "Content-Type: application/x-www-form-urlencoded; charset=utf-8",
                "Transfer-Encoding: chunked"),
            [.cancelTimer, .exactly(.collectRequestBody(.chunked, limit: p.settings.limits.maxInspectedBody)), .arm(.stall)])
        p.on(.collectedBody(.complete(Array("name=x".utf8))), [.cancelTimer, .arm(.connect), .connect(hop(1), limited, .tls, reusePooled: true)])
        p.on(
            .upstreamConnected(hop(1), reused: true),
            [
                .send(
                    hop(1), startingWith: "POST /v1/items HTTP/1.1\r\n", containing: [Self.mToken, "Content-Length: 6", "\r\n\r\nname=x"],
                    excluding: ["Transfer-Encoding"]),
                .arm(.responseHead),
            ])
        p.on(
            .responseHead(hop(1), response("HTTP/1.1 200 OK", "Content-Length: 0")),
            [.write(startingWith: "HTTP/1.1 200 OK\r\n"), .relay(hop(1), .contentLength(0), .contentLength(0)), .arm(.stall)])
        p.on(
            .responseBody(hop(1), .complete(payload: 0, consumed: 0, captured: nil, observed: nil)),
            [.cancelTimer, .release(hop(1), reuse: true), .emit(.status(200)), .arm(.idle), .readNextRequest])
        #expect(p.emitted.first?.bytesIn ?? 0 > 6, "the body counts in bytes_in")
    }

    @Test("a multipart body that mentions _method gets no credential (parts are not parsed: it fails closed)")
    func multipart() {
        var p = Playbook(Configs.methodsLimited)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("POST https://m.example/v1/x HTTP/1.1", "Host: m.example", "Content-Type: multipart/form-data; boundary=b", "Content-Length: 60"),
            [.cancelTimer, .exactly(.collectRequestBody(.contentLength(60), limit: p.settings.limits.maxInspectedBody)), .arm(.stall)])
        let body = "--b\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--b--"
        p.on(.collectedBody(.complete(Array(body.utf8))), [.cancelTimer, .arm(.connect), .connect(hop(1), limited, .tls, reusePooled: true)])
        p.on(.upstreamConnected(hop(1), reused: true), [.send(hop(1), startingWith: "POST ", excluding: ["M-INJECTED"]), .arm(.responseHead)])
    }

    @Test("a form body larger than the limit is refused with 413 and nothing goes upstream")
    func tooLarge() {
        var p = Playbook(Configs.methodsLimited)
        p.start([.arm(.clientHead)])
        p.on(
            p.head(
                "POST https://m.example/v1/x HTTP/1.1", "Host: m.example", "Content-Type: application/x-www-form-urlencoded", "Content-Length: 999999"
            ),
            [.cancelTimer, .exactly(.collectRequestBody(.contentLength(999999), limit: p.settings.limits.maxInspectedBody)), .arm(.stall)])
        p.on(
            .collectedBody(.tooLarge),
            [
                .cancelTimer,
                .write(startingWith: "HTTP/1.1 413 Content Too Large\r\n", containing: ["body_too_large_to_inspect", "Connection: close"]),
                .emit(.status(413), .failure(.proxy(.bodyTooLargeToInspect(limit: p.settings.limits.maxInspectedBody)))),
                .close(.afterFlush),
            ])
        #expect(p.connected.isEmpty)
    }

    @Test("a client that stalls or leaves while its body is read: 408 and close, or one clientClosed line")
    func stallAndLeave() {
        var p = Playbook(Configs.methodsLimited)
        p.start([.arm(.clientHead)])
        let head = p.head(
            "POST https://m.example/v1/x HTTP/1.1", "Host: m.example", "Content-Type: application/x-www-form-urlencoded", "Content-Length: 10")
        p.on(head, [.cancelTimer, .exactly(.collectRequestBody(.contentLength(10), limit: p.settings.limits.maxInspectedBody)), .arm(.stall)])
        p.on(
            .timerFired(.stall),
            [
                .write(startingWith: "HTTP/1.1 408 ", containing: ["request_body_timeout"]),
                .emit(.status(408)), .close(.afterFlush),
            ])

        var q = Playbook(Configs.methodsLimited)
        q.start([.arm(.clientHead)])
        q.on(head, [.cancelTimer, .exactly(.collectRequestBody(.contentLength(10), limit: q.settings.limits.maxInspectedBody)), .arm(.stall)])
        q.ignores(.clientInputClosed(bufferedBytes: 4))
        q.on(.clientInputClosed(bufferedBytes: 0), [.close(.now)])
        q.on(.connectionClosed, [.cancelTimer, .emit(.failure(.clientClosed))])
    }

    @Test(
        "other bodies, and requests the scope would not give a credential anyway, stream as before (JSON is read: Laravel reads its members)",
        arguments: [("POST", "application/octet-stream"), ("DELETE", "application/x-www-form-urlencoded"), ("POST", "text/plain")])
    func notCollected(_ method: String, _ type: String) {
        var p = Playbook(Configs.methodsLimited)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("\(method) https://m.example/v1/x HTTP/1.1", "Host: m.example", "Content-Type: \(type)", "Content-Length: 5"),
            [.cancelTimer, .arm(.connect), .connect(hop(1), limited, .tls, reusePooled: true)])
    }
}

@Suite("Method overrides: detection")
struct MethodOverrideDetectionTests {
    @Test(
        "from the query and from form bodies",
        arguments: [
            ("/x?_method=DELETE", nil, nil, MethodOverride.method("DELETE")),
            ("/x?a=_method", nil, nil, .none),
            ("/x?_method=DELETE&_method=delete", nil, nil, .method("DELETE")),
            ("/x?_method=DELETE&_method=PUT", nil, nil, .unreadable),
            ("/x", "_method=PATCH", "application/x-www-form-urlencoded", .method("PATCH")),
            ("/x", "_method=PATCH", "application/json", .none),
            ("/x?_method=GET", "_method=DELETE", "application/x-www-form-urlencoded", .unreadable),
            ("/x", "x=1&%5fmethod=put+", "application/x-www-form-urlencoded", .method("put")),
            ("/x", "--b\r\nname=\"_method\"", "multipart/form-data; boundary=b", .unreadable),
        ] as [(String, String?, String?, MethodOverride)])
    func detect(_ pathAndQuery: String, _ body: String?, _ type: String?, _ expected: MethodOverride) {
        #expect(MethodOverride.detect(pathAndQuery: pathAndQuery, body: body.map { Array($0.utf8) }, contentType: type) == expected)
    }
}

/// Every reading of `_method` some framework makes must be judged, or the request refused: the
/// second attack found four that gave a DELETE the credential a `methods: [GET, POST]` scope holds.
@Suite("Machine: _method as Rack and PHP read it")
struct MethodOverrideReadingTests {
    @Test(
        "parameter names PHP reads as _method, and an indexed _method[]: no credential",
        arguments: [".method=DELETE", "[method=DELETE", "%2Emethod=DELETE", "_method[]=DELETE", "_method[x]=GET"])
    func phpNames(_ query: String) {
        var p = Playbook(Configs.methodsLimited)
        p.requested(["POST https://m.example/v1/users/7?\(query) HTTP/1.1", "Host: m.example"], to: limited)
        p.on(
            .upstreamConnected(hop(1), reused: false),
            [.send(hop(1), startingWith: "POST /v1/users/7?", excluding: ["M-INJECTED"]), .arm(.responseHead)])
    }

    @Test(
        "names that only look like it are not overrides",
        arguments: ["x_method=DELETE", "_methods=DELETE", "__method=DELETE", "+method=DELETE"])
    func notOverrides(_ query: String) {
        var p = Playbook(Configs.methodsLimited)
        p.requested(["POST https://m.example/v1/users/7?\(query) HTTP/1.1", "Host: m.example"], to: limited)
        p.on(
            .upstreamConnected(hop(1), reused: false),
            [.send(hop(1), startingWith: "POST ", containing: [MethodOverrideTests.mToken]), .arm(.responseHead)])
    }

    @Test("a body with no Content-Type is read first (Rack reads it as a form): _method=DELETE gets nothing")
    func bodyWithoutContentType() {
        var p = Playbook(Configs.methodsLimited)
        p.start([.arm(.clientHead)])
        p.on(
            p.head("POST https://m.example/v1/users/7 HTTP/1.1", "Host: m.example", "Content-Length: 14"),
            [.cancelTimer, .exactly(.collectRequestBody(.contentLength(14), limit: p.settings.limits.maxInspectedBody)), .arm(.stall)])
        p.on(
            .collectedBody(.complete(Array("_method=DELETE".utf8))),
            [.cancelTimer, .arm(.connect), .connect(hop(1), limited, .tls, reusePooled: true)])
        p.on(
            .upstreamConnected(hop(1), reused: true),
            [
                .send(hop(1), startingWith: "POST /v1/users/7 HTTP/1.1\r\n", excluding: ["M-INJECTED"]),
                .arm(.responseHead),
            ])
    }

    @Test(
        "a Content-Type listing two media types, or a Connection option naming Content-Type: 400, nothing sent",
        arguments: [
            ["Content-Type: application/x-www-form-urlencoded, text/plain"],
            ["Content-Type: text/plain", "Connection: Content-Type"],
            ["Content-Type: text/plain", "Connection: keep-alive, content-type"],
            ["Content-Length: 14", "Connection: Content-Length"],
        ])
    func ambiguousReadings(_ fields: [String]) {
        var p = Playbook(Configs.methodsLimited)
        p.start([.arm(.clientHead)])
        let lines =
            ["POST https://m.example/v1/users/7 HTTP/1.1", "Host: m.example"] + fields
            + (fields.contains { $0.hasPrefix("Content-Length") } ? [] : ["Content-Length: 14"])
        let returned = p.feed(p.head(lines))
        let written = returned.compactMap { if case .writeToClient(let bytes) = $0 { text(bytes) } else { nil } }.joined()
        #expect(written.hasPrefix("HTTP/1.1 400 "), "\(fields)")
        #expect(p.connected.isEmpty)
    }

    @Test("a quoted comma in a parameter is not a list")
    func quotedComma() {
        var p = Playbook(Configs.methodsLimited)
        p.start([.arm(.clientHead)])
        let returned = p.feed(
            p.head(
                "POST https://m.example/v1/users/7 HTTP/1.1", "Host: m.example",
                "Content-Type: multipart/form-data; boundary=\"a,b\"", "Content-Length: 4"))
        let written = returned.compactMap { if case .writeToClient(let bytes) = $0 { text(bytes) } else { nil } }.joined()
        #expect(!written.hasPrefix("HTTP/1.1 400 "))
    }
}

/// The third attack's readings: names PHP and Rack 2 normalise, a JSON body (Laravel reads its
/// members), a multipart part name, a body a framework decompresses first.
@Suite("Machine: _method in every place a framework reads it")
struct MethodOverrideEverywhereTests {
    /// Sends a POST with this body to the methods-limited scope; true when the credential went.
    func injected(_ fields: [String], body: String, query: String = "") -> Bool {
        var p = Playbook(Configs.methodsLimited)
        p.start([.arm(.clientHead)])
        let returned = p.feed(
            p.head(
                ["POST https://m.example/v1/users/7\(query) HTTP/1.1", "Host: m.example"] + fields
                    + ["Content-Length: \(body.utf8.count)"]))
        if returned.contains(where: { if case .collectRequestBody = $0 { true } else { false } }) {
            _ = p.feed(.collectedBody(.complete(Array(body.utf8))))
        }
        _ = p.feed(.upstreamConnected(hop(1), reused: false))
        return p.sent(to: hop(1))?.contains("M-INJECTED") ?? false
    }

    @Test(
        "query and form names PHP and Rack read as _method: no credential",
        arguments: [
            "+_method=DELETE", "%20_method=DELETE", "_method%00=DELETE", "_method%00x=DELETE", "[_method]=DELETE",
            "%5B_method%5D=DELETE", "]_method=DELETE", "_method]=DELETE", "[[_method=DELETE", "_method%00%5B%5D=DELETE",
        ])
    func normalisedNames(_ pair: String) {
        #expect(!injected([], body: "", query: "?" + pair), "query \(pair)")
        #expect(!injected(["Content-Type: application/x-www-form-urlencoded"], body: pair), "form \(pair)")
    }

    @Test(
        "a JSON body with a _method key (escaped or not, any +json type): no credential",
        arguments: [#"{"_method":"DELETE"}"#, #"{"\u005fmethod":"DELETE"}"#, #"{"a":{"_method" : "DELETE"}}"#, #"{".method":"GET"}"#])
    func jsonBodies(_ json: String) {
        #expect(!injected(["Content-Type: application/json"], body: json))
        #expect(!injected(["Content-Type: application/vnd.api+json"], body: json))
        #expect(!injected(["Content-Type: text/plain; x=/json"], body: json))
    }

    @Test("a JSON body without one keeps the credential (payment_method is not _method)")
    func jsonWithoutOverride() {
        #expect(injected(["Content-Type: application/json"], body: #"{"payment_method":"card","method":"x"}"#))
    }

    @Test(
        "a multipart part named as _method is read, quoted or not; other names are not",
        arguments: [
            ("name=\".method\"", false), ("name=\"_method\"", false), ("name=_method", false), ("name*=utf-8''%5Fmethod", false),
            ("name=\"payment_method\"", true),
        ])
    func multipartNames(_ disposition: String, _ keeps: Bool) {
        let body = "--b\r\nContent-Disposition: form-data; \(disposition)\r\n\r\nDELETE\r\n--b--\r\n"
        #expect(injected(["Content-Type: multipart/form-data; boundary=b"], body: body) == keeps, "\(disposition)")
    }

    @Test("a form or JSON body with a Content-Encoding cannot be read: no credential; a plain upload keeps it")
    func encodedBodies() {
        #expect(!injected(["Content-Type: application/x-www-form-urlencoded", "Content-Encoding: gzip"], body: "compressed"))
        #expect(!injected(["Content-Type: application/json", "Content-Encoding: deflate"], body: "compressed"))
        #expect(injected(["Content-Type: application/octet-stream", "Content-Encoding: gzip"], body: "compressed"))
    }
}
