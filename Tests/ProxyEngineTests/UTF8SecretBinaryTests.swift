import Foundation
import TestSupport
import Testing

/// Secret loading is a property of the process (environment, files): against the built binary.
@Suite("The built binary: a UTF-8 secret from the environment or a file arrives at the origin byte for byte", .serialized)
struct UTF8SecretBinaryTests {
    @Test("a UTF-8 secret (env and file) arrives at the origin byte for byte")
    func utf8SecretBytes() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let envSecret = Wire.canary("env") + "-ü-€-日本-🔑"
        let fileSecret = Wire.canary("file") + "-é-Ж-中文"
        let scratch = ScratchDirectory()
        scratch.write("token", fileSecret + "\n")
        let path = scratch.write(
            "c.yaml",
            """
            secrets: { env_token: { env: UTF8_TOKEN }, file_token: { file: token } }
            scopes: [{ name: api, origins: ["\(origin.url)"], require_https: false,
                       inject: { X-Env-Token: "${env_token}", X-File-Token: "tok ${file_token}" } }]
            """)
        let proxy = try ProxyProcess(arguments: ["--config", path], environment: ["UTF8_TOKEN": envSecret])
        defer { proxy.terminate() }
        let socket = try TestSocket.connect(port: proxy.port)
        try socket.send("GET \(origin.url)/v1 HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        _ = LenientResponse.read(HTTPReader(socket))
        let arrived = try #require(origin.requests.first, "the request was forwarded")
        #expect(
            Wire.contains(arrived.rawHead, Array("X-Env-Token: \(envSecret)\r\n".utf8)),
            "env secret altered on the wire: \(arrived.rawHead.count) head bytes")
        #expect(
            Wire.contains(arrived.rawHead, Array("X-File-Token: tok \(fileSecret)\r\n".utf8)),
            "file secret altered on the wire")
        #expect(!proxy.standardError.contains(envSecret) && !proxy.standardError.contains(fileSecret))
    }
}
