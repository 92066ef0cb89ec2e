import Foundation
import TestSupport
import Testing

// Messages that point at the fix, through the built binary: what a client is answered and what the
// access log says for a refused CONNECT, a request that is not for a proxy, a TLS client on the
// plain listener and a placeholder for a client its scope does not serve.

private func logText(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }

/// The placeholder the proxy's `placeholders` command prints for the config's one placeholder secret.
private func placeholderText(_ configured: ConfiguredProxy, environment: [String: String]) throws -> String {
    let listed = try ProxyProcess.runToCompletion(["placeholders", "--config", configured.configPath], environment: environment)
    return try #require(listed.stdout.split(separator: " ").last.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) })
}

@Suite("Binary: refusals name their target and say what to do", .serialized)
struct MessageBinaryTests {
    @Test("a denied CONNECT's line names the requested host:port, in JSON and in text; a failed tunnel's too")
    func deniedConnectNamesItsTarget() throws {
        for format in ["json", "text"] {
            let configured = try ConfiguredProxy { log in "tls: { tunnel: deny }\nlog: { output: \(log), format: \(format) }\n" }
            defer { configured.process.terminate() }
            let socket = try TestSocket.connect(port: configured.port)
            try socket.send("CONNECT denied.example:8443 HTTP/1.1\r\nHost: denied.example:8443\r\n\r\n")
            let response = try #require(try HTTPReader(socket).readResponse(requestMethod: "CONNECT"))
            #expect(response.status == 403)
            #expect(configured.process.terminate() == 0)
            let log = logText(configured.logPath)
            if format == "json" {
                #expect(log.contains(#""method":"CONNECT","url":"https://denied.example:8443","status":403"#), "\(log)")
                #expect(log.contains(#""decision":"deny""#) && log.contains(#""error":"tunnel_denied""#), "\(log)")
            } else {
                #expect(log.contains(" CONNECT https://denied.example:8443 403 "), "\(log)")
                #expect(log.contains("error=tunnel_denied"), "\(log)")
            }
        }
        // Tunnels allowed, nothing listening there: the 502's line names the host:port too.
        let closedPort = try TestListener.freePort()
        let configured = try ConfiguredProxy { log in "tls: { tunnel: allow }\nlog: { output: \(log), format: json }\n" }
        defer { configured.process.terminate() }
        let socket = try TestSocket.connect(port: configured.port)
        try socket.send("CONNECT 127.0.0.1:\(closedPort) HTTP/1.1\r\nHost: 127.0.0.1:\(closedPort)\r\n\r\n")
        let response = try #require(try HTTPReader(socket).readResponse(requestMethod: "CONNECT"))
        #expect(response.status == 502)
        #expect(configured.process.terminate() == 0)
        #expect(logText(configured.logPath).contains(#""method":"CONNECT","url":"https://127.0.0.1:\#(closedPort)","status":502"#))
    }

    @Test("a request that is not for a proxy is told the lower-case http_proxy curl reads, or curl -x; never HTTP_PROXY alone")
    func notAProxyHint() throws {
        let proxy = try ProxyProcess(arguments: ["--no-access-log"], environment: ["SCOPEPROXY_CONFIG": ""])
        defer { proxy.terminate() }
        let socket = try TestSocket.connect(port: proxy.port)
        try socket.send("GET /v1/items HTTP/1.1\r\nHost: 127.0.0.1:\(proxy.port)\r\n\r\n")
        let response = try #require(try HTTPReader(socket).readResponse())
        #expect(response.status == 400)
        #expect(response.bodyText.contains("not_a_proxy_request"))
        #expect(response.bodyText.contains("curl -x http://HOST:PORT URL"), "\(response.bodyText)")
        #expect(response.bodyText.contains("export http_proxy=http://HOST:PORT in lower case"), "\(response.bodyText)")
        #expect(!response.bodyText.contains("HTTP_PROXY"), "curl ignores the upper-case variable for http:// URLs")
    }

    @Test("a TLS ClientHello on the plain listener: a TLS alert at once (not HTTP text), and a line saying to use http:// for the proxy URL")
    func tlsClientOnPlainListener() throws {
        let configured = try ConfiguredProxy { log in "log: { output: \(log), format: json }\n" }
        defer { configured.process.terminate() }
        // The first bytes of a ClientHello record (handshake 0x16, TLS 1.0 record version): the
        // proxy answers without waiting for the rest (it would never end in CRLF).
        let socket = try TestSocket.connect(port: configured.port)
        try socket.send([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC, 0x03, 0x03])
        #expect(socket.receiveUntilClose() == [0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x46], "a fatal protocol_version alert, then close")
        // curl told the proxy speaks https: its handshake fails on the alert (exit 35), not on a timeout.
        let outcome = try curl(["-x", "https://127.0.0.1:\(configured.port)", "http://origin.example/"])
        #expect(outcome.status == 35, "curl: SSL connect error")
        #expect(configured.process.terminate() == 0)
        let log = logText(configured.logPath)
        #expect(log.components(separatedBy: #""error":"tls_to_plain_listener""#).count - 1 == 2, "\(log)")
        #expect(log.contains("client spoke TLS to the plain proxy listener; use http:// for the proxy URL"), "\(log)")
        #expect(!log.contains("malformed_request"))
    }

    /// The fix is in the access log, which may be a file nobody watches yet: the proxy's own stderr
    /// says it too, once per process however many clients repeat the mistake.
    @Test(
        "a client speaking TLS to the plain listener: one line on the proxy's stderr saying to use http:// in the proxy URL, not one per connection")
    func tlsClientOnPlainListenerHintedOnStderrOnce() throws {
        let configured = try ConfiguredProxy { log in "log: { output: \(log), format: json }\n" }
        defer { configured.process.terminate() }
        for _ in 0..<3 {
            let outcome = try curl(["-x", "https://127.0.0.1:\(configured.port)", "http://origin.example/"])
            #expect(outcome.status == 35)
        }
        #expect(configured.process.terminate() == 0)
        let hints = configured.process.standardError.split(separator: "\n").filter { $0.contains(#""event":"client_spoke_tls_to_plain_listener""#) }
        #expect(hints.count == 1, "\(configured.process.standardError)")
        #expect(hints.first?.contains("its proxy URL says https:// where it should say http:// (HTTPS_PROXY=http://HOST:PORT") == true)
        #expect(logText(configured.logPath).components(separatedBy: #""error":"tls_to_plain_listener""#).count - 1 == 3)
    }

    @Test("a placeholder refused because its scope serves other clients says so, naming the scope and this client")
    func placeholderForClientNotServed() throws {
        let origin = try FixtureOrigin { connection in
            while connection.readRequest() != nil { connection.respond(status: 200, body: "ok\n") }
        }
        defer { origin.stop() }
        let value = "CANARY-ph-\(UInt32.random(in: 0...UInt32.max))"
        let configured = try ConfiguredProxy(environment: ["MSG_PH_VALUE": value, "MSG_AGENT_KEY": "agent-key-not-a-canary"]) { log in
            """
            secrets:
              gh: { env: MSG_PH_VALUE, placeholder: true }
              agent_key: { env: MSG_AGENT_KEY }
            clients:
              - { name: agent, auth: { bearer: agent_key } }
              - { name: local, source: ["127.0.0.0/8"] }
            scopes:
              - { name: for-agent, origins: ["\(origin.url)"], substitute: [gh], clients: [agent] }
            tls: { ca_dir: \((log as NSString).deletingLastPathComponent)/ca }
            log: { output: \(log), format: json }
            """
        }
        defer { configured.process.terminate() }
        let placeholder = try placeholderText(configured, environment: ["MSG_PH_VALUE": value, "MSG_AGENT_KEY": "x"])
        let socket = try TestSocket.connect(port: configured.port)
        try socket.send("GET \(origin.url)/?q=\(placeholder) HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        let response = try #require(try HTTPReader(socket).readResponse())
        #expect(response.status == 403)
        #expect(response.bodyText.contains("placeholder_out_of_scope"))
        #expect(response.bodyText.contains("scope 'for-agent' substitutes it here but does not serve client 'local'"), "\(response.bodyText)")
        #expect(!response.bodyText.contains("no scope lists it"))
        #expect(!response.bodyText.contains(value))
        #expect(origin.acceptedConnections == 0)
        #expect(configured.process.terminate() == 0)
        let log = logText(configured.logPath)
        #expect(log.contains(#""client_id":"local""#) && log.contains(#""error":"placeholder_out_of_scope""#), "\(log)")
        #expect(!log.contains(value))
    }

    /// `scope=-` means no scope covers the origin: a request refused for what it carries, toward an
    /// origin a scope does cover, names that scope in its line like any other request.
    @Test("a secret's value or a placeholder refused toward an origin a scope covers: the log line names that scope")
    func refusalTowardCoveredOriginNamesTheScope() throws {
        let origin = try FixtureOrigin { connection in
            while connection.readRequest() != nil { connection.respond(status: 200, body: "ok\n") }
        }
        defer { origin.stop() }
        let apiValue = "CANARY-api-\(UInt32.random(in: 0...UInt32.max))", placeholderValue = "CANARY-ph-\(UInt32.random(in: 0...UInt32.max))"
        let environment = ["MSG_API_TOKEN": apiValue, "MSG_PH_VALUE": placeholderValue]
        let configured = try ConfiguredProxy(environment: environment) { log in
            """
            secrets:
              api_token: { env: MSG_API_TOKEN }
              gh: { env: MSG_PH_VALUE, placeholder: true }
            scopes:
              - { name: internal, origins: ["\(origin.url)"], inject: { X-Internal: "1" } }
              - { name: external, origins: ["https://api.example"], inject: { Authorization: "Bearer ${api_token}" }, substitute: [gh] }
            tls: { ca_dir: \((log as NSString).deletingLastPathComponent)/ca }
            log: { output: \(log), format: json }
            """
        }
        defer { configured.process.terminate() }
        let placeholder = try placeholderText(configured, environment: environment)
        for header in ["X-Debug: \(apiValue)", "Authorization: Bearer \(placeholder)"] {
            let socket = try TestSocket.connect(port: configured.port)
            try socket.send("GET \(origin.url)/x HTTP/1.1\r\nHost: \(origin.authority)\r\n\(header)\r\n\r\n")
            #expect(try HTTPReader(socket).readResponse()?.status == 403)
        }
        #expect(origin.acceptedConnections == 0)
        #expect(configured.process.terminate() == 0)
        let lines = logText(configured.logPath).split(separator: "\n")
        #expect(lines.count == 2)
        #expect(lines.first?.contains(#""error":"secret_egress_blocked""#) == true)
        #expect(lines.last?.contains(#""error":"placeholder_out_of_scope""#) == true)
        #expect(lines.allSatisfy { $0.contains(#""scope":"internal""#) }, "\(lines)")
        #expect(!lines.joined().contains(apiValue) && !lines.joined().contains(placeholderValue))
    }

    @Test("a placeholder in a body the proxy does not rewrite is refused for that reason, naming the Content-Type")
    func placeholderInBodyNotRewritten() throws {
        let origin = try FixtureOrigin { connection in
            while connection.readRequest() != nil { connection.respond(status: 200, body: "ok\n") }
        }
        defer { origin.stop() }
        let value = "CANARY-ph-\(UInt32.random(in: 0...UInt32.max))"
        let configured = try ConfiguredProxy(environment: ["MSG_PH_VALUE": value]) { log in
            """
            secrets:
              gh: { env: MSG_PH_VALUE, placeholder: true }
            scopes:
              - { name: right, origins: ["\(origin.url)"], substitute: [gh] }
            tls: { ca_dir: \((log as NSString).deletingLastPathComponent)/ca }
            log: { output: \(log), format: json }
            """
        }
        defer { configured.process.terminate() }
        let placeholder = try placeholderText(configured, environment: ["MSG_PH_VALUE": value])
        let body = "tok=\(placeholder)"
        let socket = try TestSocket.connect(port: configured.port)
        try socket.send(
            "POST \(origin.url)/plain HTTP/1.1\r\nHost: \(origin.authority)\r\nContent-Type: text/plain\r\n"
                + "Content-Length: \(body.utf8.count)\r\n\r\n\(body)")
        let response = try #require(try HTTPReader(socket).readResponse())
        #expect(response.status == 403)
        #expect(response.bodyText.contains("placeholder_out_of_scope"))
        #expect(
            response.bodyText.contains(
                "scope 'right' substitutes it here, but not in a text/plain body: "
                    + "placeholders are replaced in headers, the query, JSON and form bodies only"), "\(response.bodyText)")
        #expect(!response.bodyText.contains("methods, paths or https rule"))
        #expect(!response.bodyText.contains(value))
        #expect(configured.process.terminate() == 0)
        #expect(!logText(configured.logPath).contains(value))
    }

    @Test("a request refused before its head left lists nothing as injected: neither its log line nor the injected metric")
    func refusedRequestIsNotCountedAsInjected() throws {
        let origin = try FixtureOrigin { connection in
            while connection.readRequest() != nil { connection.respond(status: 200, body: "ok\n") }
        }
        defer { origin.stop() }
        let value = "CANARY-ph-\(UInt32.random(in: 0...UInt32.max))"
        let configured = try ConfiguredProxy(environment: ["MSG_PH_VALUE": value]) { log in
            """
            secrets:
              gh: { env: MSG_PH_VALUE, placeholder: true }
            scopes:
              - { name: right, origins: ["https://api.example"], substitute: [gh] }
              - { name: other, origins: ["\(origin.url)"], inject: { X-Other: "1" } }
            tls: { ca_dir: \((log as NSString).deletingLastPathComponent)/ca }
            log: { output: \(log), format: text }
            """
        }
        defer { configured.process.terminate() }
        let placeholder = try placeholderText(configured, environment: ["MSG_PH_VALUE": value])
        let body = "{\"t\":\"\(placeholder)\"}"
        let socket = try TestSocket.connect(port: configured.port)
        try socket.send(
            "POST \(origin.url)/json HTTP/1.1\r\nHost: \(origin.authority)\r\nContent-Type: application/json\r\n"
                + "Content-Length: \(body.utf8.count)\r\n\r\n\(body)")
        let response = try #require(try HTTPReader(socket).readResponse())
        #expect(response.status == 403)
        #expect(response.bodyText.contains("placeholder_out_of_scope"))
        #expect(origin.requests.isEmpty, "the origin got nothing")
        let metrics = try configured.metrics()
        #expect(!metrics.contains(#"scopeproxy_injected_total{header="x-other"}"#), "\(metrics)")
        #expect(configured.process.terminate() == 0)
        let log = logText(configured.logPath)
        #expect(log.contains(" 403 ") && log.contains("scope=other") && log.contains("error=placeholder_out_of_scope"), "\(log)")
        #expect(!log.contains("injected="), "\(log)")
        #expect(!log.contains(value))
    }
}
