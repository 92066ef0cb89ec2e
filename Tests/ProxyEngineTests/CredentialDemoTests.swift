import Foundation
import TestSupport
import Testing

@Suite("make demo-credentials")
struct CredentialDemoTests {
    @Test("a command secret runs once for three concurrent requests and a GitHub App's token reaches its API; no value in the log; exit 0")
    func demoScript() throws {
        let scratch = ScratchDirectory()
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let script = root.appendingPathComponent("config/demo/credentials.sh").path
        let (status, output) = try runProgram([
            "/bin/bash", "-c", "SCOPEPROXY_BINARY=\"$0\" DEMO_DIR=\"$1\" exec \"$2\" 2>&1", ProxyProcess.binaryPath, scratch.path + "/demo", script,
        ])
        #expect(status == 0, "\(output.suffix(1500))")
        #expect(output.contains("the command ran 1 time(s)"))
        #expect(output.contains("{\"authorized\": true, \"scheme\": \"Bearer\", \"token_number\": 1}"))
        #expect(output.contains("demo-credentials: every step showed what it claims."))
    }
}
