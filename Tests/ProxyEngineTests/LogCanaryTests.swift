import Foundation
import TestSupport
import Testing

@Suite("Access log: canaries everywhere a secret can hide, and none in the log, /metrics or stderr", .serialized)
struct LogCanaryTests {
    @Test("real exchanges through the binary leak no canary and still say what happened")
    func canaries() throws {
        func canary(_ label: String) -> String { "CANARY\(label)\(String(UInt64.random(in: 0...UInt64.max), radix: 16))" }
        let userinfo = canary("pw"), emailLocal = canary("mail"), pathToken = canary("tok") + "abcdefghijklmnop"
        let queryValue = canary("q"), authorization = canary("auth"), cookie = canary("cookie"), customHeader = canary("hdr")
        let requestBody = canary("reqbody"), setCookie = canary("setcookie"), responseHeader = canary("resphdr")
        let responseBody = canary("accesstoken"), locationToken = canary("loc"), upstreamError = canary("err")
        let injected = canary("injected")
        let all = [
            userinfo, emailLocal, pathToken, queryValue, authorization, cookie, customHeader, requestBody, setCookie,
            responseHeader, responseBody, locationToken, upstreamError, injected,
        ]

        let api = try FixtureOrigin(host: "127.0.0.1") { connection in
            while connection.readRequest() != nil {
                connection.respond(
                    headers: [
                        ("Content-Type", "application/json"), ("Set-Cookie", "session=\(setCookie); HttpOnly"),
                        ("X-Internal-Trace", responseHeader),
                    ],
                    body: #"{"id":"resp-1","access_token":"\#(responseBody)","items":[1,2,3,4]}"#)
            }
        }
        let redirecting = try FixtureOrigin(host: "127.0.0.2") { connection in
            while connection.readRequest() != nil {
                connection.respond(status: 302, headers: [("Location", "https://cdn.example/file?token=\(locationToken)")], body: "")
            }
        }
        let broken = try FixtureOrigin(host: "127.0.0.1") { connection in
            guard connection.readRequest() != nil else { return }
            connection.send("XHTTP/9 500 \(upstreamError)\r\n\r\n")
        }
        defer { [api, redirecting, broken].forEach { $0.stop() } }

        let configured = try ConfiguredProxy(environment: ["INJECTED": injected]) { logPath in
            """
            secrets: { token: { env: INJECTED } }
            scopes: [{ name: api, origins: ["\(api.url)"], require_https: false, inject: { X-Service-Token: "${token}" } }]
            log: { output: \(logPath), bodies: true }
            """
        }
        let (proxy, adminPort, logPath) = (configured.process, configured.adminPort, configured.logPath)
        defer { proxy.terminate() }

        let socket = try TestSocket.connect(port: proxy.port)
        let reader = HTTPReader(socket)
        let body = #"{"id":"req-1","password":"\#(requestBody)"}"#
        try socket.send(
            "POST http://user:\(userinfo)@\(api.authority)/users/\(emailLocal)%40example.com/files/\(pathToken)?limit=20&api_key=\(queryValue) HTTP/1.1\r\n"
                + "Host: \(api.authority)\r\nAuthorization: Bearer \(authorization)\r\nCookie: sid=\(cookie)\r\nX-Custom-Secret: \(customHeader)\r\n"
                + "X-Request-ID: trace-42\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)")
        #expect(try reader.readResponse()?.status == 200)
        try socket.send("GET \(redirecting.url)/start HTTP/1.1\r\nHost: \(redirecting.authority)\r\n\r\n")
        #expect(try reader.readResponse()?.status == 302)
        try socket.send("GET \(broken.url)/x HTTP/1.1\r\nHost: \(broken.authority)\r\n\r\n")
        let failed = try #require(try reader.readResponse())
        #expect(failed.status == 502)
        #expect(!failed.bodyText.contains(upstreamError), "error messages name the origin, never what the upstream said")

        let metrics = try #require(try adminGet(adminPort, "/metrics")).bodyText
        #expect(proxy.terminate() == 0)
        let log = try String(contentsOfFile: logPath, encoding: .utf8)
        let lines = log.split(separator: "\n").map(String.init)
        #expect(lines.count == 3)
        for item in all {
            #expect(!log.contains(item), "log leaked \(item.prefix(12))")
            #expect(!metrics.contains(item), "/metrics leaked \(item.prefix(12))")
            #expect(!proxy.standardError.contains(item), "stderr leaked \(item.prefix(12))")
        }
        #expect(metrics.contains("scopeproxy_log_tripwire_hits_total 0"), "the design held; the tripwire never fired")

        // Still useful: one line tells the endpoint, status, time, scope, what was injected and stripped, and the id.
        let first = try #require(lines.first)
        #expect(first.contains(#""method":"POST""#))
        #expect(first.contains(#""url":"http://\#(api.authority)/users/:email/files/:token?limit=20&api_key=:redacted""#))
        #expect(first.contains(#""status":200"#))
        #expect(first.contains(#""duration_ms":"#))
        #expect(first.contains(#""scope":"api""#))
        #expect(first.contains(#""injected":["X-Service-Token"]"#))
        #expect(first.contains(#""stripped":["Authorization","Cookie"]"#))
        #expect(first.contains(#""id":"trace-42""#))
        #expect(api.requests.first?.header("x-request-id") == "trace-42", "the origin saw the same id")
        #expect(first.contains(#""resp_body":"{\"id\":\"resp-1\",\"access_token\":\"<redacted>\""#))
        #expect(first.contains(#""req_body":"{\"id\":\"req-1\",\"password\":\"<redacted>\"}""#))
        #expect(first.contains(#""set-cookie":"<redacted>""#))
        #expect(
            lines[1].contains(
                #""redirect":{"location":"https://cdn.example/file?token=:redacted","origin":"https://cdn.example:443","decision":"pass"}"#))
        #expect(lines[2].contains(#""error":"bad_upstream_response""#))
    }

    @Test("a generated X-Request-ID reaches the origin and the client; a malformed one is replaced")
    func requestIDs() throws {
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let proxy = try ProxyHarness()
        defer { proxy.stop() }
        let generated = try #require(try proxy.exchange("GET \(origin.url)/a HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n"))
        let id = try #require(generated.header("x-request-id"))
        #expect(id.count == 16)
        #expect(origin.requests.last?.header("x-request-id") == id)
        let tooLong = String(repeating: "a", count: 65)
        let replaced = try #require(
            try proxy.exchange("GET \(origin.url)/b HTTP/1.1\r\nHost: \(origin.authority)\r\nX-Request-ID: \(tooLong)\r\n\r\n"))
        #expect(replaced.header("x-request-id") != tooLong)
        #expect(origin.requests.last?.headers("x-request-id") == [replaced.header("x-request-id")!])
        let kept = try #require(try proxy.exchange("GET \(origin.url)/c HTTP/1.1\r\nHost: \(origin.authority)\r\nX-Request-ID: Ab.9_z-1\r\n\r\n"))
        #expect(kept.header("x-request-id") == "Ab.9_z-1")
        let error = try #require(try proxy.exchange("GET /not-a-proxy-request HTTP/1.1\r\nHost: x\r\n\r\n"))
        #expect(error.header("x-request-id")?.count == 16, "error responses carry an id too")
    }

    @Test("hostile bytes (obs-text, C1 controls, percent-encoded invalid UTF-8, refused heads) leave every log line valid UTF-8 JSON")
    func hostileBytesKeepTheLogValid() throws {
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let configured = try ConfiguredProxy { logPath in "log: { output: \(logPath), format: json }\n" }
        let proxy = configured.process
        defer { proxy.terminate() }
        let requests: [[UInt8]] = [
            Array("GET \(origin.url)/caf%E9/%FF%FE?q=%C3%28&limit=%00 HTTP/1.1\r\nHost: \(origin.authority)\r\nUser-Agent: caf".utf8)
                + [0xE9, 0x20, 0xFF, 0xFE, 0x80, 0x9F] + Array("\r\nAccept: \"quoted\\\" \\u0000\r\n\r\n".utf8),
            Array("GET \(origin.url)/x HTTP/1.1\r\nHost: \(origin.authority)\r\nX-Bad: a".utf8) + [0x01] + Array("b\r\n\r\n".utf8),
            [0xFF, 0xFE, 0x00, 0x22, 0x5C] + Array("\r\n\r\n".utf8),
        ]
        for request in requests {
            let socket = try TestSocket.connect(port: proxy.port)
            try socket.send(request)
            _ = try HTTPReader(socket).readResponse()
        }
        #expect(proxy.terminate() == 0)
        let bytes = try #require(FileManager.default.contents(atPath: configured.logPath))
        let lines = bytes.split(separator: UInt8(ascii: "\n"))
        #expect(lines.count == requests.count, "one line per exchange, refused ones included")
        for line in lines {
            #expect(String(validating: line, as: UTF8.self) != nil, "a log line is not valid UTF-8")
            #expect(
                (try? JSONSerialization.jsonObject(with: Data(line))) is [String: Any],
                "not one JSON object: \(String(decoding: line, as: UTF8.self))")
        }
    }

    @Test("CONNECT tunnels get one line at close with origin and byte counts; /healthz answers ok")
    func tunnelLineAndHealth() throws {
        let echo = try EchoServer()
        let configured = try ConfiguredProxy { logPath in "tls: { tunnel: allow }\nlog: { output: \(logPath), format: json }\n" }
        let (proxy, adminPort, config) = (configured.process, configured.adminPort, configured.configPath)
        defer { proxy.terminate() }
        #expect(try adminGet(adminPort, "/healthz")?.bodyText == "ok\n")
        #expect(try ProxyProcess.runToCompletion(["health", "--config", config]).status == 0)
        let socket = try TestSocket.connect(port: proxy.port)
        try socket.send("CONNECT 127.0.0.1:\(echo.port) HTTP/1.1\r\nHost: 127.0.0.1:\(echo.port)\r\n\r\nhello")
        let reader = HTTPReader(socket)
        _ = try reader.readHeadBytes()
        #expect(try reader.readExactly(5) == Array("hello".utf8))
        socket.shutdownWrite()
        _ = reader.readUntilClose()
        #expect(proxy.terminate() == 0)
        let log = try String(contentsOfFile: configured.logPath, encoding: .utf8)
        #expect(log.contains(#""method":"CONNECT","url":"https://127.0.0.1:\#(echo.port)","status":200,"bytes_in":5,"bytes_out":5"#))
        #expect(log.contains(#""decision":"tunnel""#))
        #expect(!log.contains("req_headers"))
        #expect(try ProxyProcess.runToCompletion(["health", "--config", config]).status == 1, "nothing answers once stopped")
    }
}

@Suite("Access log: text format, rotation on SIGHUP, metric values", .serialized)
struct LogFormatTests {
    @Test("format: text writes one human line per exchange (never JSON); output PATH is reopened on SIGHUP; metrics count what happened")
    func textRotationMetrics() throws {
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let configured = try ConfiguredProxy(environment: ["TOKEN": "CANARY-text-token-5a"]) { logPath in
            """
            secrets: { token: { env: TOKEN } }
            scopes: [{ name: api, origins: ["\(origin.url)"], require_https: false, inject: { Authorization: "Bearer ${token}" } }]
            log: { format: text, output: \(logPath) }
            """
        }
        let (proxy, adminPort, logPath) = (configured.process, configured.adminPort, configured.logPath)
        defer { proxy.terminate() }
        func get(_ path: String, id: String) throws {
            let socket = try TestSocket.connect(port: proxy.port)
            try socket.send("GET \(origin.url)\(path) HTTP/1.1\r\nHost: \(origin.authority)\r\nX-API-Key: k\r\nX-Request-ID: \(id)\r\n\r\n")
            _ = try HTTPReader(socket).readResponse()
        }
        try get("/one?limit=5", id: "text-one")
        // Log rotation: move the file away, SIGHUP, and the next line lands in a new file.
        var appeared = false
        for _ in 0..<50 where !appeared {
            usleep(50_000)
            appeared = ((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "").contains("id=text-one")
        }
        #expect(appeared)
        #expect(rename(logPath, logPath + ".1") == 0)
        proxy.signal(SIGHUP)
        var reopened = false
        for _ in 0..<50 where !reopened {
            usleep(100_000)
            reopened = FileManager.default.fileExists(atPath: logPath)
        }
        #expect(reopened)
        try get("/two", id: "text-two")
        let metrics = try #require(try adminGet(adminPort, "/metrics")).bodyText
        #expect(proxy.terminate() == 0)
        let rotated = try String(contentsOfFile: logPath + ".1", encoding: .utf8)
        let current = try String(contentsOfFile: logPath, encoding: .utf8)
        #expect(rotated.split(separator: "\n").count == 1)
        #expect(rotated.contains(" GET \(origin.url)/one?limit=5 200 "))
        #expect(rotated.contains("scope=api injected=Authorization stripped=X-API-Key upstream=127.0.0.1:\(origin.port) id=text-one"))
        #expect(!rotated.contains("{"), "text, not JSON")
        #expect(current.contains("id=text-two"))
        #expect(!(rotated + current).contains("CANARY-text-token-5a"))
        #expect(metrics.contains(#"scopeproxy_requests_total{status_class="2xx",scope="api",client="none"} 2"#))
        #expect(metrics.contains(#"scopeproxy_injected_total{header="authorization"} 2"#))
        #expect(metrics.contains(#"scopeproxy_stripped_total{header="x-api-key"} 2"#))
        #expect(metrics.contains(#"scopeproxy_reloads_total{result="ok"} 1"#))
        #expect(metrics.contains("# TYPE scopeproxy_client_connections gauge"))
    }
}
