import Testing

@testable import ScopeConfig

private func load(_ yaml: String) -> Result<ProxyConfiguration, ConfigError> {
    do {
        return .success(try ConfigLoader.parse(yaml, file: "t.yaml", home: "/home/tester"))
    } catch {
        return .failure(error)
    }
}

private func message(_ yaml: String) -> String? {
    if case .failure(let error) = load(yaml) { return error.description }
    return nil
}

@Suite("Config: admin_token guards the live view")
struct AdminTokenConfigTests {
    @Test("admin_token names an ordinary secret; the configuration keeps the name")
    func accepted() throws {
        let config = try load("admin: \"0.0.0.0:9090\"\nadmin_token: view_token\nsecrets:\n  view_token: { env: VIEW_TOKEN }\n").get()
        #expect(config.adminToken == "view_token")
        #expect(try load("admin: \"127.0.0.1:9090\"\n").get().adminToken == nil)
        #expect(try load("admin: \"[::1]:9090\"\n").get().admin != nil)
        #expect(try load("admin: \"localhost:9090\"\n").get().admin != nil)
    }

    @Test("an unknown secret name points at the key, with the name it probably meant")
    func unknownSecret() {
        let text = message("admin: \"127.0.0.1:9090\"\nadmin_token: view_tokne\nsecrets:\n  view_token: { env: VIEW_TOKEN }\n")
        #expect(text?.hasPrefix("t.yaml:2:14: 'view_tokne' names no secret in 'secrets'") == true, "\(text ?? "accepted")")
        #expect(text?.contains("view_token") == true)
    }

    @Test("a computed secret is refused: the listener reads the value from the store at each request")
    func computedSecret() {
        let text = message(
            "admin: \"127.0.0.1:9090\"\nadmin_token: gh\nsecrets:\n  gh: { command: [\"gh\", \"auth\", \"token\"] }\n")
        #expect(text?.hasPrefix("t.yaml:2:14: admin_token 'gh' is a computed secret") == true, "\(text ?? "accepted")")
    }

    @Test("a non-loopback admin address without admin_token is an error at the address, saying what to add")
    func nonLoopbackNeedsToken() {
        for address in ["0.0.0.0:9090", "10.0.0.5:9090", "[::]:9090"] {
            let text = message("admin: \"\(address)\"\n")
            #expect(text?.hasPrefix("t.yaml:1:8: admin ") == true, "\(address): \(text ?? "accepted")")
            #expect(text?.contains("set admin_token") == true)
        }
    }
}
