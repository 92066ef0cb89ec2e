import HTTP1Codec
import ScopePolicy
import Testing

/// `ScopePolicy.metricLabel(forHeader:)`: the only way a header name becomes a metric label.
@Suite("Metric labels for header names: canonical, and from a set the configuration fixes")
struct MetricLabelTests {
    static let policy = ScopePolicy(
        scopes: [
            Scope(
                name: "s", origins: [try! Origin.parse("https://api.example")],
                inject: [.init(header: "X-Injected_Key", template: try! HeaderTemplate.parse("${k}"))])
        ],
        extraSensitiveHeaders: ["X-Custom-Secret"])

    @Test("every known name in any spelling gets its canonical name; anything else 'other'")
    func table() {
        let rows: [(String, String)] = [
            ("Authorization", "authorization"), ("AUTHORIZATION", "authorization"), ("x_API_key", "x-api-key"),
            ("X-Custom-Secret", "x-custom-secret"), ("x_custom_SECRET", "x-custom-secret"), ("x-injected-key", "x-injected-key"),
            ("X-HTTP-Method-Override", "x-http-method-override"), ("X-Injected_Key", "x-injected-key"),
            ("Ocp-Apim-Subscription-Key", "ocp-apim-subscription-key"),
            ("X-Unrelated", "other"), ("Accept", "other"), ("", "other"), ("authorization ", "other"), ("x-api-key\n", "other"),
        ]
        for (name, label) in rows { #expect(Self.policy.metricLabel(forHeader: name) == label, "\(name)") }
    }

    @Test("property: for 20,000 random names and spellings, the label is in the configured set or 'other', and the same for every spelling of a name")
    func bounded() {
        var random = SystemRandomNumberGenerator()
        let allowed = Self.policy.metricHeaderNames.union([ScopePolicy.otherHeaderLabel])
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!~")
        let known = Array(Self.policy.metricHeaderNames)
        for round in 0..<20_000 {
            // Half the time a known name, half a random one.
            let base: String =
                round % 2 == 0
                ? known.randomElement(using: &random)!
                : String((0..<Int.random(in: 1...24, using: &random)).map { _ in alphabet.randomElement(using: &random)! })
            let respelt = String(
                base.map { character -> Character in
                    if character == "-" && Bool.random(using: &random) { return "_" }
                    return Bool.random(using: &random) ? Character(character.uppercased()) : Character(character.lowercased())
                })
            let label = Self.policy.metricLabel(forHeader: respelt)
            #expect(allowed.contains(label), "\(respelt) -> \(label)")
            #expect(label == Self.policy.metricLabel(forHeader: base), "\(base) and \(respelt) got different labels")
            if round % 2 == 0 { #expect(label == SensitiveHeaders.canonicalName(base)) }
        }
        #expect(Self.policy.metricHeaderNames.allSatisfy { $0 == SensitiveHeaders.canonicalName($0) }, "labels are canonical")
    }
}
