import Foundation
import HTTP1Codec
import ProxyCore
import Redaction
import ScopePolicy
import Testing

@testable import RecordRendering

private func origin(_ text: String) -> Origin { try! Origin.parse(text) }

private let naming = SecretNaming(redactor: Redactor(rules: RedactionRules()), watch: Canary.index.everything)
private let entrance = CurlEntrance(listen: ListenAddress(host: "0.0.0.0", port: 8080), configPath: "/etc/it's/config.yaml")

private func curl(_ record: ExchangeRecord, rules: [ViewRule] = []) -> String? {
    CurlText.render(record, rules: rules, naming: naming, entrance: entrance)
}

/// `bash -n`: the text parses as a script (comments and one command).
private func bashAccepts(_ script: String) throws -> Bool {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/bash")
    process.arguments = ["-n"]
    let input = Pipe()
    process.standardInput = input
    process.standardError = FileHandle.nullDevice
    try process.run()
    input.fileHandleForWriting.write(Data(script.utf8))
    try input.fileHandleForWriting.close()
    process.waitUntilExit()
    return process.terminationStatus == 0
}

/// What bash makes of one quoted word (`printf %s WORD`).
private func bashWord(_ quoted: String) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/bash")
    process.arguments = ["-c", "printf %s " + quoted]
    let output = Pipe()
    process.standardOutput = output
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return String(decoding: data, as: UTF8.self)
}

@Suite("View record: Copy as curl")
struct CurlTextTests {
    @Test(
        "shell words: single quotes, ' as '\\'', control characters in $'...', each read back by bash as it was",
        arguments: [
            ("plain", "'plain'"),
            ("it's", "'it'\\''s'"),
            ("$(touch /tmp/x) `id` ${HOME} \"q\" \\", "'$(touch /tmp/x) `id` ${HOME} \"q\" \\'"),
            ("tab\there", "$'tab\\x09here'"),
            ("new\nline's \\", "$'new\\x0aline\\'s \\\\'"),
            ("", "''"),
        ])
    func quoting(text: String, quoted: String) throws {
        #expect(CurlText.quoted(text) == quoted)
        #expect(!CurlText.quoted(text).contains("\n"))
        #expect(try bashWord(CurlText.quoted(text)) == text)
    }

    @Test("a forward request: the proxy, the CA, -X, the headers the log shows, comments for the rest, never a value")
    func forward() throws {
        var record = Records.base("POST", "https://api.github.com", path: "/repos/o/r/issues?page=2&token=abc")
        record.requestFields = HTTPFields([
            HTTPField(name: "Host", value: "api.github.com"), HTTPField(name: "Accept", value: "it's */*"),
            HTTPField(name: "Cookie", value: "sid=CANARYcookie"), HTTPField(name: "X-Api-Key", value: Canary.placeholder),
            HTTPField(name: "User-Agent", value: "agent \(Canary.token)"), HTTPField(name: "Content-Type", value: "application/json"),
            HTTPField(name: "Content-Length", value: "42"),
        ])
        let rules: [ViewRule] = [
            .inject(header: "Authorization", scope: "github", secrets: ["gh_token"]), .sign(kind: "aws_sigv4", scope: "s3"),
        ]
        let text = try #require(curl(record, rules: rules))
        #expect(
            text == """
                # scopeproxy ca --config '/etc/it'\\''s/config.yaml' > scopeproxy-ca.pem
                # the URL is as the log shows it: the parts it hides (:redacted, :token, ...) are not the client's
                # injected: Authorization <- ${gh_token} (scope github)
                # signed: aws_sigv4 (scope s3)
                # left out: Cookie (its value is not shown)
                # left out: User-Agent (it carries the value of secret gh_token)
                # ${npm_token}: the client's placeholder for secret npm_token (`scopeproxy env` prints it); put it in its place
                # the request had a body of 42 bytes, not kept
                curl --proxy http://127.0.0.1:8080 --cacert scopeproxy-ca.pem -X 'POST' -H 'Accept: it'\\''s */*' -H 'X-Api-Key: ${npm_token}' -H 'Content-Type: application/json' 'https://api.github.com/repos/o/r/issues?page=2&token=:redacted'
                """)
        for form in Canary.everyForm { #expect(!text.contains(form)) }
        #expect(!text.contains("CANARYcookie"))
        #expect(try bashAccepts(text))
    }

    @Test("the way in: a route's listener, the transparent capture, an http origin without the CA, HEAD, a chunked body")
    func entrances() throws {
        var routed = Records.base("GET", "http://backend.internal:9000", path: "/v1/x")
        routed.mode = .route(upstream: origin("http://backend.internal:9000"), publicOrigin: origin("http://127.0.0.1:9001"))
        #expect(curl(routed) == "curl -H 'Accept: */*' 'http://127.0.0.1:9001/v1/x'")

        var captured = Records.base("HEAD", "http://example.test", path: "/")
        captured.mode = .transparent(TransparentTarget(origin: origin("http://example.test"), firstHost: nil))
        let transparent = try #require(curl(captured))
        #expect(transparent.hasPrefix("# transparent capture"))
        #expect(transparent.hasSuffix("curl --head -H 'Accept: */*' 'http://example.test/'"))

        var plain = Records.base("DELETE", "http://127.0.0.1:5000", path: "/it's")
        plain.requestFields = HTTPFields([HTTPField(name: "Transfer-Encoding", value: "chunked")])
        let text = try #require(curl(plain))
        #expect(text == "# the request had a chunked body, not kept\ncurl --proxy http://127.0.0.1:8080 -X 'DELETE' 'http://127.0.0.1:5000/it'\\''s'")
        #expect(try bashAccepts(text))
    }

    @Test("a CONNECT line, a followed hop, a line that names no request")
    func others() throws {
        var connect = Records.base("CONNECT", "https://api.github.com:443", path: "")
        connect.pathAndQuery = nil
        connect.tunnel = .tunnel
        let tunnel = try #require(curl(connect))
        #expect(tunnel.hasSuffix("curl --proxy http://127.0.0.1:8080 'https://api.github.com/'"))
        #expect(try bashAccepts(tunnel))

        var hop = Records.base(path: "/next")
        hop.hop = 2
        #expect(try #require(curl(hop)).hasPrefix("# hop 2 of a redirect the proxy followed"))

        #expect(curl(ExchangeRecord(id: "x", client: "127.0.0.1:1", method: nil, startedAt: 0)) == nil)
    }
}
