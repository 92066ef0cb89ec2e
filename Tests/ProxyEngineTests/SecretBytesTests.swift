import Foundation
import TestSupport
import Testing

/// A canary with non-ASCII in it: `é` (2 bytes in UTF-8) and `€` (3 bytes, above U+00FF, so a
/// Latin-1 serializer can only write it as `?`).
private func utf8Canary(_ label: String) -> String { "CANARY-\(label)-é€-\(UInt32.random(in: 0...UInt32.max))" }

/// Whether `needle` occurs in `haystack`, byte for byte (no decoding on either side). Called
/// outside `#expect` so a failure does not print every byte of a request head.
private func containsBytes(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
    guard needle.count <= haystack.count else { return false }
    return (0...(haystack.count - needle.count)).contains { haystack[$0..<($0 + needle.count)].elementsEqual(needle) }
}

private func request(_ origin: FixtureOrigin, _ headers: [(String, String)] = []) -> String {
    "GET \(origin.url)/v1/items HTTP/1.1\r\nHost: \(origin.authority)\r\n" + headers.map { "\($0.0): \($0.1)\r\n" }.joined() + "\r\n"
}

/// `scopeproxy ARGS` with exactly `stdin` on its standard input (bytes that need not be UTF-8).
private func runBinary(_ arguments: [String], stdin: [UInt8]) throws -> (status: Int32, stderr: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: ProxyProcess.binaryPath)
    process.arguments = arguments
    let input = Pipe(), errors = Pipe()
    process.standardInput = input
    process.standardError = errors
    process.standardOutput = FileHandle.nullDevice
    try process.run()
    input.fileHandleForWriting.write(Data(stdin))
    try input.fileHandleForWriting.close()
    let err = errors.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: err, as: UTF8.self))
}

@Suite("Secrets are bytes end to end", .serialized)
struct SecretBytesTests {
    @Test("a UTF-8 secret injected by a scope reaches the origin byte for byte")
    func utf8Injection() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let token = utf8Canary("utf8-token")
        let proxy = try ProxyHarness(
            yaml: """
                secrets: { token: { env: T } }
                scopes: [{ name: api, origins: ["\(origin.url)"], require_https: false,
                           inject: { Authorization: "Bearer ${token}", X-Token: "${token}" } }]
                """, secrets: ["token": token])
        defer { proxy.stop() }
        #expect(try proxy.exchange(request(origin))?.status == 200)
        let head = try #require(origin.requests.first).rawHead
        let authorization = containsBytes(head, Array("\r\nAuthorization: Bearer \(token)\r\n".utf8))
        let custom = containsBytes(head, Array("\r\nX-Token: \(token)\r\n".utf8))
        #expect(authorization, "the origin got the secret's UTF-8 bytes in Authorization")
        #expect(custom, "the origin got the secret's UTF-8 bytes in X-Token")
    }

    @Test("proxy_auth with a UTF-8 password: the bytes presented are compared, Bearer and Basic alike")
    func utf8ProxyAuthorization() throws {
        let origin = try FixtureOrigin(host: "127.0.0.1")
        defer { origin.stop() }
        let password = utf8Canary("utf8-proxy-password")
        let proxy = try ProxyHarness(
            yaml: """
                proxy_auth: { secret: pw }
                secrets: { pw: { env: PW } }
                """, secrets: ["pw": password])
        defer { proxy.stop() }
        // Sent as UTF-8 on the wire, which is what a client that has the password as text does.
        #expect(try proxy.exchange(request(origin, [("Proxy-Authorization", "Bearer \(password)")]))?.status == 200)
        let basic = "Basic " + Data("anyone:\(password)".utf8).base64EncodedString()
        #expect(try proxy.exchange(request(origin, [("Proxy-Authorization", basic)]))?.status == 200)
        // The same text in Latin-1 (é as one byte E9) is other bytes: refused.
        let latin1 = "Basic " + Data(("anyone:" + password).unicodeScalars.map { UInt8(truncatingIfNeeded: $0.value) }).base64EncodedString()
        #expect(try proxy.exchange(request(origin, [("Proxy-Authorization", latin1)]))?.status == 407)
        #expect(origin.requests.count == 2)
    }

    @Test("`secret set` stores stdin's bytes unchanged (one trailing newline removed), and run injects exactly those")
    func secretSetKeepsBytes() throws {
        let scratch = ScratchDirectory()
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        // UTF-8 text followed by bytes that are not UTF-8 at all (Latin-1 é, 0xFF): both stay.
        let value = Array(utf8Canary("store-bytes").utf8) + [0xE9, 0x2D, 0xFF]
        let config = scratch.write(
            "c.yaml",
            """
            store_dir: \(scratch.path)/store
            secrets: { gh: { store: github } }
            scopes: [{ name: gh, origins: ["\(origin.url)"], require_https: false, inject: { X-Token: "${gh}" } }]
            """)
        let set = try runBinary(["secret", "set", "github", "--config", config], stdin: value + [0x0A])
        #expect(set.status == 0, "\(set.stderr)")
        let stored = try [UInt8](Data(contentsOf: URL(fileURLWithPath: scratch.path + "/store/github")))
        let unchanged = stored == value
        #expect(unchanged, "the store file holds stdin's bytes less the newline")
        let proxy = try ProxyProcess(arguments: ["--config", config])
        defer { proxy.terminate() }
        let socket = try TestSocket.connect(port: proxy.port)
        try socket.send(request(origin))
        #expect(try HTTPReader(socket).readResponse()?.status == 200)
        let head = try #require(origin.requests.first).rawHead
        let exact = containsBytes(head, Array("\r\nX-Token: ".utf8) + value + [0x0D, 0x0A])
        #expect(exact, "the origin got the stored bytes unchanged")
    }
}
