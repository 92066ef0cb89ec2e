import Testing

@testable import ScopeConfig

private func loadError(_ yaml: String) -> String? {
    do {
        _ = try ConfigLoader.parse(yaml, file: "t.yaml", home: "/home/tester")
        return nil
    } catch {
        return error.description
    }
}

@Suite("Config: messages that point at the fix")
struct ConfigMessageTests {
    /// A misspelt scope key and the key the message must suggest.
    struct Typo: Sendable, CustomStringConvertible {
        let typed: String
        let meant: String
        var description: String { "\(typed) -> \(meant)" }
    }

    static let scopeKeys = ["name", "origins", "require_https", "inject", "pass", "methods", "paths", "clients", "substitute", "sign"]

    /// Every scope key, each misspelt by a transposition, a dropped letter and a doubled one.
    static let typos: [Typo] = [
        Typo(typed: "pahts", meant: "paths"), Typo(typed: "pths", meant: "paths"), Typo(typed: "pathss", meant: "paths"),
        Typo(typed: "nmae", meant: "name"), Typo(typed: "nam", meant: "name"), Typo(typed: "namee", meant: "name"),
        Typo(typed: "orgiins", meant: "origins"), Typo(typed: "orgins", meant: "origins"), Typo(typed: "oriigins", meant: "origins"),
        Typo(typed: "require_htpts", meant: "require_https"), Typo(typed: "require_http", meant: "require_https"),
        Typo(typed: "requiree_https", meant: "require_https"),
        Typo(typed: "injcet", meant: "inject"), Typo(typed: "injec", meant: "inject"), Typo(typed: "innject", meant: "inject"),
        Typo(typed: "psas", meant: "pass"), Typo(typed: "pas", meant: "pass"), Typo(typed: "passs", meant: "pass"),
        Typo(typed: "mehtods", meant: "methods"), Typo(typed: "method", meant: "methods"), Typo(typed: "metthods", meant: "methods"),
        Typo(typed: "cleints", meant: "clients"), Typo(typed: "client", meant: "clients"), Typo(typed: "cliients", meant: "clients"),
        Typo(typed: "substiute", meant: "substitute"), Typo(typed: "substitue", meant: "substitute"),
        Typo(typed: "substitutte", meant: "substitute"),
        Typo(typed: "sgin", meant: "sign"), Typo(typed: "sig", meant: "sign"), Typo(typed: "siign", meant: "sign"),
    ]

    @Test("the table covers every scope key")
    func everyKeyHasTypos() {
        #expect(Set(Self.typos.map(\.meant)) == Set(Self.scopeKeys))
    }

    @Test("a misspelt scope key suggests the closest key, a transposition counting as one edit", arguments: typos)
    func scopeKeyTypo(_ typo: Typo) {
        let message = loadError("scopes:\n  - name: s\n    origins: [\"https://a.example\"]\n    \(typo.typed): x\n")
        #expect(message?.hasSuffix("unknown key '\(typo.typed)' in a scope, did you mean '\(typo.meant)'?") == true, "\(message ?? "loaded")")
    }

    @Test(
        "edit distance: optimal string alignment (transpositions cost 1)",
        arguments: [
            ("pahts", "paths", 1), ("pahts", "pass", 2), ("ab", "ba", 1), ("abc", "ca", 3), ("", "abc", 3), ("abc", "", 3), ("same", "same", 0),
            ("kitten", "sitting", 3),
        ])
    func editDistance(_ a: String, _ b: String, _ distance: Int) {
        #expect(Decoder.editDistance(a, b) == distance)
        #expect(Decoder.editDistance(b, a) == distance)
    }

    @Test(
        "a port outside 1-65535 is named as such (0 where a free port may be picked)",
        arguments: [
            ("listen", "127.0.0.1:99999", "port 99999 is out of range: use 1-65535 (or 0 for a free port)"),
            ("listen", "127.0.0.1:-1", "port '-1' is not a number: use 1-65535 (or 0 for a free port)"),
            ("admin", "127.0.0.1:65536", "port 65536 is out of range: use 1-65535 (or 0 for a free port)"),
            ("listen", "127.0.0.1", "expected HOST:PORT, got '127.0.0.1'"),
        ])
    func portOutOfRange(_ key: String, _ value: String, _ expected: String) {
        let message = loadError("\(key): \"\(value)\"\n")
        #expect(message?.hasSuffix(expected) == true, "\(message ?? "loaded")")
    }

    @Test(
        "an origin with a path says origins have none and suggests paths:",
        arguments: [
            ("https://api.example.com/v1", "paths: [\"/v1/\"]"),
            ("https://api.example.com/v1/", "paths: [\"/v1/\"]"),
            ("https://api.example.com:8443/v1/users?x=1", "paths: [\"/v1/users/\"]"),
        ])
    func originWithPath(_ origin: String, _ suggested: String) {
        let message = loadError("scopes:\n  - name: s\n    origins: [\"\(origin)\"]\n")
        #expect(message?.contains("an origin has no path") == true, "\(message ?? "loaded")")
        #expect(message?.contains(suggested) == true, "\(message ?? "loaded")")
    }
}
