import ProxyCore
import ScopePolicy
import Testing

// A 407 for a client nothing recognised says what could recognise it, from the kinds of rule
// configured: Proxy-Authorization only when some client uses `auth`, and never a rule's value.

struct RecognitionHintRow: Sendable, CustomStringConvertible {
    let name: String
    let rules: [ClientRule]
    let says: [String]
    let never: [String]
    var description: String { name }
}

private let certificate = TLSClientMatch(caFile: "/etc/tools-ca.pem", subject: SubjectMatch.parse("CN=tool")!)

private let hintRows: [RecognitionHintRow] = [
    .init(
        name: "only tls_client: the TLS client listener, never Proxy-Authorization",
        rules: [ClientRule(name: "tool", tlsClient: certificate)],
        says: ["present a client certificate on the TLS client listener (tls.client_listen 127.0.0.1:8443)"],
        never: ["Proxy-Authorization", "tool", "CN=tool", "tools-ca"]),
    .init(
        name: "only uid", rules: [ClientRule(name: "builder", uid: 1000)],
        says: ["connect over loopback as a configured uid"], never: ["Proxy-Authorization", "1000", "builder"]),
    .init(
        name: "only source", rules: [ClientRule(name: "lan", sources: [try! CIDR.parse("10.1.0.0/16").get()])],
        says: ["connect from a configured source network"], never: ["Proxy-Authorization", "10.1", "lan"]),
    .init(
        name: "auth and tls_client: both ways",
        rules: [ClientRule(name: "agent", auth: .bearer(tokenSecret: "agent_key")), ClientRule(name: "tool", tlsClient: certificate)],
        says: ["send Proxy-Authorization (Bearer)", "present a client certificate"], never: ["agent_key", "agent'", "tool"]),
    .init(
        name: "auth only: as before", rules: [ClientRule(name: "agent", auth: .basic(user: "agent", passwordSecret: "agent_key"))],
        says: ["this proxy does not recognise this client: send Proxy-Authorization (Basic)"], never: ["certificate", "uid", "source"]),
]

@Suite("407 messages: say what can recognise this client, given the configured kinds of rule")
struct RecognitionHintTests {
    @Test("each combination of client kinds names only its own ways, never a value", arguments: hintRows)
    func hintPerKinds(_ row: RecognitionHintRow) {
        let directory = ClientDirectory(row.rules, tlsClientListen: "127.0.0.1:8443")
        let recognition = directory.recognize(
            ConnectionFacts(peer: "192.0.2.9:4000", peerIP: "192.0.2.9"), proxyAuthorization: nil, secrets: StaticSecrets([:]))
        guard case .refused(let refusal) = recognition else { Issue.record("recognised: \(recognition)"); return }
        #expect(refusal.reason == .clientNotRecognised)
        let message = ProxyError.proxyAuthenticationRequired(refusal).message
        for text in row.says { #expect(message.contains(text), "\(message)") }
        for text in row.never { #expect(!message.contains(text), "\(message)") }
        // The 407 still offers a challenge (RFC 9110 §11.7.1).
        #expect(!refusal.schemes.isEmpty)
    }
}
