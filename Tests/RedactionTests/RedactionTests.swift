import Foundation
import HTTP1Codec
import Testing

@testable import Redaction

private let redactor = Redactor()

@Suite("Redaction: allowlists that fail closed")
struct RedactionTests {
    static let paths: [(String, String)] = [
        ("/v1/books?limit=20", "/v1/books?limit=20"),
        ("/users/alice%40example.com/orders", "/users/:email/orders"),
        ("/users/bob@example.org", "/users/:email"),
        ("/orders/12345678/items/42", "/orders/:number/items/42"),
        ("/files/550e8400-e29b-41d4-a716-446655440000", "/files/:uuid"),
        ("/blobs/deadbeefcafe0123456789ab", "/blobs/:uuid"),
        ("/reset/eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig_-abc", "/reset/:token"),
        ("/t/AAAAAAAAAAAAAAAAAAAAAAAAAA", "/t/:token"),
        ("/v2/repos/scopeproxy/issues/7", "/v2/repos/scopeproxy/issues/7"),
        ("/search?q=secret+stuff&page=2&token=abc", "/search?q=:redacted&page=2&token=:redacted"),
        ("/cb?code=xyz&state=1#frag", "/cb?code=:redacted&state=:redacted"),
        ("/a?limit=alice%40example.com", "/a?limit=:email"),
        ("/a?flag", "/a?flag"),
        ("/%00x", "/:token"),
    ]

    @Test("paths and queries", arguments: paths)
    func path(_ input: String, _ expected: String) {
        #expect(redactor.pathAndQuery(input) == expected)
    }

    @Test("`;` separates query pairs as `&` does: a key behind it is redacted even after a safe one")
    func semicolonSeparatedQuery() {
        // Letters only: a run of digits would be classified `:number` and hide the leak by luck.
        let secret = "CANARY-semicolon-" + String((0..<8).map { _ in "ghjkmnpqrstvwxyz".randomElement()! })
        let cases: [(String, String)] = [
            ("/v1/books?limit=20;api_key=\(secret)", "/v1/books?limit=20;api_key=:redacted"),
            ("/v1/books?page=2;token=\(secret)&sort=asc", "/v1/books?page=2;token=:redacted&sort=asc"),
            ("/v1/books?api_key=\(secret);limit=5", "/v1/books?api_key=:redacted;limit=5"),
            ("/v1/books?limit=1;;&", "/v1/books?limit=1;;&"),
        ]
        for (input, expected) in cases {
            let logged = redactor.pathAndQuery(input)
            #expect(logged == expected)
            #expect(!logged.contains(secret))
        }
        let location = redactor.url("https://cdn.example/dl?format=zip;sig=\(secret)")
        #expect(location == "https://cdn.example/dl?format=zip;sig=:redacted")
        #expect(!location.contains(secret))
    }

    @Test("path parameters after `;` (a URL-rewritten session id) are pairs too: values only for safe names")
    func pathParameters() {
        let session = "CANARY-jsession-" + String((0..<8).map { _ in "ghjkmnpqrstvwxyz".randomElement()! })
        let cases: [(String, String)] = [
            ("/shop;jsessionid=\(session)/cart", "/shop;jsessionid=:redacted/cart"),
            ("/shop;version=2;sid=\(session)?limit=5", "/shop;version=2;sid=:redacted?limit=5"),
            ("/users/alice%40example.com;x/orders", "/users/:email;x/orders"),
        ]
        for (input, expected) in cases {
            let logged = redactor.pathAndQuery(input)
            #expect(logged == expected)
            #expect(!logged.contains(session))
        }
    }

    @Test("a form-encoded body is summarized by size and type only, whatever its separators")
    func formBodies() {
        let secret = "CANARY-form-\(UInt32.random(in: 0...UInt32.max))"
        let body = Array("limit=20;password=\(secret)&page=1".utf8)
        let summary = redactor.bodySummary(body, totalBytes: UInt64(body.count), contentType: "application/x-www-form-urlencoded", truncated: false)
        #expect(summary == "<\(body.count) bytes application/x-www-form-urlencoded>")
        #expect(!summary.contains(secret))
    }

    @Test("Proxy-Connection is shown (keep-alive or close: it never carries a credential); Proxy-Authorization is not")
    func proxyConnection() {
        let shown = redactor.headers(
            HTTPFields([
                HTTPField(name: "Proxy-Connection", value: "keep-alive"),
                HTTPField(name: "Proxy-Authorization", value: "Basic c2VjcmV0"),
            ]))
        #expect(shown.first { $0.name == "proxy-connection" }?.value == "keep-alive")
        #expect(shown.first { $0.name == "proxy-authorization" }?.value == Redactor.redacted)
    }

    @Test("absolute URLs (Location) lose userinfo and fragment")
    func urls() {
        #expect(
            redactor.url("https://user:pw@CDN.example:8443/dl/aGVsbG8taGVsbG8taGVsbG8taGVsbG8?sig=abc#x")
                == "https://cdn.example:8443/dl/:token?sig=:redacted")
        #expect(redactor.url("/relative?limit=5") == "/relative?limit=5")
        #expect(redactor.url("javascript:alert(1)") == "javascript:alert(1)", "no authority: treated as a path, no secrets in it")
    }

    @Test("a plain path logged as it is takes the shortcut only where the general redaction agrees")
    func plainPathShortcut() {
        var generator = SystemRandomNumberGenerator()
        let parts = [
            "/", "api", "v1", "users", "alice@x.io", "1234567", "0123456789abcdef0123", "%41", "+", "?", "#", ";", "=", "&",
            "aGVsbG8taGVsbG8taGVsbG8taGVsbG8", "550e8400-e29b-41d4-a716-446655440000", "é", "\u{01}", "x.json", "~me", "-",
        ]
        for _ in 0..<3000 {
            let text = (0..<Int.random(in: 0..<8, using: &generator)).map { _ in parts.randomElement(using: &generator)! }.joined()
            #expect(redactor.pathAndQuery(text) == redactor.redactedPathAndQuery(text), "\(text.debugDescription)")
        }
        #expect(Redactor.isPlainPathKeptAsIs("/api/v1/books/12"))
        #expect(!Redactor.isPlainPathKeptAsIs("/api/v1/books/1234567"), "a 6-digit run is data")
        #expect(!Redactor.isPlainPathKeptAsIs("/a?b=c"))
    }

    @Test("headers: values only on the allowlist; Location through the URL redactor; Set-Cookie never")
    func headers() {
        let fields = HTTPFields([
            HTTPField(name: "Content-Type", value: "application/json"), HTTPField(name: "Authorization", value: "Bearer secret"),
            HTTPField(name: "Set-Cookie", value: "sid=1"), HTTPField(name: "X-New-Header", value: "v"),
            HTTPField(name: "Location", value: "https://a.example/x?token=t"), HTTPField(name: "Accept", value: "a"),
            HTTPField(name: "accept", value: "b"),
        ])
        let result = redactor.headers(fields)
        #expect(result.map(\.name) == ["content-type", "authorization", "set-cookie", "x-new-header", "location", "accept"])
        #expect(result.map(\.value) == ["application/json", "<redacted>", "<redacted>", "<redacted>", "https://a.example/x?token=:redacted", "a, b"])
        let repeated = HTTPFields([
            HTTPField(name: "Vary", value: "a"), HTTPField(name: "Authorization", value: "x"), HTTPField(name: "VARY", value: "a"),
            HTTPField(name: "vary", value: "b"), HTTPField(name: "authorization", value: "y"),
        ])
        #expect(
            redactor.headers(repeated).map { "\($0.name)=\($0.value)" } == ["vary=a, b", "authorization=<redacted>"],
            "a repeated name is one entry where it first appears; the same shown value is not repeated")
        let extended = Redactor(rules: RedactionRules(extraHeaders: ["X-New-Header"]))
        #expect(extended.headers(fields)[3].value == "v")
    }

    @Test("JSON bodies keep their shape; values only under safe keys; arrays cut to 3; capped at 2 KB")
    func jsonBodies() {
        let body = Array(
            #"{"id":7,"access_token":"tok","status":"ok","user":{"email":"a@b.c","id":"u1"},"items":[1,2,3,4,5],"alice@x.io":true}"#.utf8)
        let summary = redactor.bodySummary(body, totalBytes: UInt64(body.count), contentType: "application/json; charset=utf-8", truncated: false)
        #expect(
            summary
                == #"{"id":7,"access_token":"<redacted>","status":"ok","user":{"email":"<redacted>","id":"u1"},"items":["<redacted>","<redacted>","<redacted>","...(5 items)"],":email":"<redacted>"}"#
        )
        #expect(redactor.bodySummary(Array("hello".utf8), totalBytes: 5, contentType: "text/plain", truncated: false) == "<5 bytes text/plain>")
        #expect(
            redactor.bodySummary(Array("{broken".utf8), totalBytes: 7, contentType: "application/json", truncated: false)
                == "<7 bytes application/json>")
        // An empty or parameter-only Content-Type used to index an empty split and crash the log
        // writer (found re-reading the code); now it is a media type like any other.
        #expect(redactor.bodySummary(Array("x".utf8), totalBytes: 1, contentType: "", truncated: false) == "<1 bytes >")
        #expect(redactor.bodySummary(Array("x".utf8), totalBytes: 1, contentType: ";charset=x", truncated: false) == "<1 bytes >")
        #expect(redactor.bodySummary(Array("{}".utf8), totalBytes: 2, contentType: " Application/JSON ; q=1", truncated: false) == "{}")
        let big = Array(("[" + (0..<2000).map { _ in #"{"id":"0123456789"}"# }.joined(separator: ",") + "]").utf8)
        #expect(redactor.bodySummary(big, totalBytes: UInt64(big.count), contentType: "application/json", truncated: false).utf8.count <= 2048)
        let nested = Array(String(repeating: "[", count: 100).utf8)
        #expect(redactor.bodySummary(nested, totalBytes: 100, contentType: "application/json", truncated: false) == "<100 bytes application/json>")
    }

    @Test("the tripwire finds a secret raw, percent-encoded, base64 and base64url, and counts each hit")
    func tripwire() {
        let secret = "s3cr3t/value+with=odd?chars"
        let tripwire = Tripwire(secrets: [Array(secret.utf8)])
        // Encoded here with Foundation, not with the encoders the tripwire itself uses.
        let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        let base64 = Data(secret.utf8).base64EncodedString()
        let base64URL = base64.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        let encodings = [
            secret, secret.addingPercentEncoding(withAllowedCharacters: unreserved)!, base64, base64URL,
            Data(("user:" + secret).utf8).base64EncodedString(),
        ]
        for encoded in encodings {
            let (line, hits) = tripwire.scrub("{\"x\":\"\(encoded)\"}")
            #expect(hits >= 1, "\(encoded)")
            #expect(!line.contains(secret))
        }
        #expect(tripwire.scrub("{\"clean\":true}").hits == 0)
    }

    @Test("the tripwire finds a non-ASCII secret as UTF-8 text, as a header value's Latin-1 scalars, and JSON-escaped")
    func tripwireBytes() {
        let raw: [UInt8] = Array("CANARY-trip-".utf8) + [0xC3, 0xA9, 0xE2, 0x82, 0xAC] + Array("\"q\\-\(UInt32.random(in: 0...UInt32.max))".utf8)
        let tripwire = Tripwire(secrets: [raw])
        let asText = String(decoding: raw, as: UTF8.self)
        // A header value holds one scalar per wire byte; interpolated into a line, each byte >= 0x80
        // becomes two UTF-8 bytes.
        let asHeaderValue = HTTPField.value(wireBytes: raw)
        let jsonEscaped = asHeaderValue.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
        // A value echoed into a JSON body under a safe key lands in the line escaped twice: once
        // in the body summary, once as the summary's own JSON string.
        let escapedTwice = asText.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
        let percentLowercase = raw.map { byte -> String in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x2D
                ? String(UnicodeScalar(byte)) : "%" + String(byte, radix: 16).leftPadded(to: 2)
        }.joined()
        for (label, form) in [
            ("text", asText), ("header value", asHeaderValue), ("JSON-escaped", jsonEscaped), ("JSON-escaped twice", escapedTwice),
            ("percent, lowercase", percentLowercase),
        ] {
            let (line, hits) = tripwire.scrub("x=\(form) y")
            #expect(hits == 1, "\(label)")
            #expect(line == "x=<tripwire> y", "\(label)")
        }
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}
