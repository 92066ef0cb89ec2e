import Foundation
import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

/// The 403 `egress_denied` answer tells a client what it can act on and nothing it could not know
/// (docs/errors.md): its fields are a fixed list, and what a name resolved to is never among them
/// (the log's `egress` field carries it).
@Suite("Egress refusal answer: fixed fields, never the resolved address")
struct EgressAnswerTests {
    static let addresses = ["10.1.2.3", "192.168.77.9", "127.0.0.1", "169.254.169.254", "::1", "fd00:ec2::254", "2002:a01:203::"]

    static func refusal(address: String?, client: String?, ownDenyIPs: Bool) throws -> EgressRefusal {
        let rules = EffectiveEgress(
            defaultAction: .allow, mode: .enforce, allow: [], denyIPs: .standard, client: client, ownRules: client != nil,
            ownDenyIPs: ownDenyIPs)
        let destination = try Origin.parse("http://internal.example:8080")
        return EgressRefusal(destination: destination, rule: "deny_ips: private", rules: rules, address: address)
    }

    @Test("every refusal's JSON has exactly error, message, id, destination, rule, client, hint, and no resolved address in any of them")
    func fixedFieldsNoAddress() throws {
        for address in Self.addresses.map(Optional.some) + [nil] {
            for client in [nil, "agent"] as [String?] {
                for own in [false, true] {
                    let answer = ProxyError.egressDenied(try Self.refusal(address: address, client: client, ownDenyIPs: own)).answer(requestID: "r1")
                    #expect(answer.status == 403)
                    let object = try #require(try JSONSerialization.jsonObject(with: Data(answer.body)) as? [String: Any])
                    #expect(Set(object.keys) == ["error", "message", "id", "destination", "rule", "client", "hint"], "\(object.keys.sorted())")
                    let text = String(decoding: answer.body, as: UTF8.self)
                    if let address { #expect(!text.contains(address), "\(address) in \(text)") }
                    #expect(object["destination"] as? String == "internal.example:8080")
                }
            }
        }
    }
}
