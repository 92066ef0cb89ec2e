import HTTP1Codec
import ScopeConfig
import ScopePolicy
import Testing

@testable import ScopeProxyApp

@Suite("Banner: a scope's credentials, one description for every kind")
struct BannerCredentialTests {
    static let config = """
        secrets:
          kid: { env: A }
          skey: { env: B }
          ph: { env: D, placeholder: true }
          key: { env: E }
          cs: { env: F }
          oauth: { oauth2: { token_url: "https://auth.example/token", grant: client_credentials, client_id: me, client_secret: cs } }
        scopes:
          - { name: inject, origins: ["https://a.example"], inject: { X-Key: "${key}" } }
          - { name: literal, origins: ["https://l.example"], inject: { X-Fixed: "1" } }
          - { name: oauth, origins: ["https://o.example"], inject: { Authorization: "Bearer ${oauth}" } }
          - name: sign
            origins: ["https://s3.example"]
            sign: { aws_sigv4: { service: s3, region: eu-west-1, access_key_id: kid, secret_access_key: skey } }
          - { name: substitute, origins: ["https://p.example"], substitute: [ph] }
          - { name: none, origins: ["https://n.example"], pass: [Cookie] }
        """

    @Test("every credential action is described, and 'injects nothing' only for a scope without one")
    func everyKindDescribed() throws {
        let loaded = try ConfigLoader.parse(Self.config, file: "b.yaml", home: "/home/tester")
        let tokens = Set(loaded.oauth2.keys)
        let described = Dictionary(uniqueKeysWithValues: loaded.policy.scopes.map { ($0.name, Banner.credentials($0, computed: loaded.computed)) })
        #expect(described["inject"] == ["injects X-Key (secret key)"])
        #expect(described["literal"] == ["injects X-Fixed"])
        #expect(described["oauth"] == ["injects Authorization (OAuth2 token oauth)"])
        #expect(described["sign"] == ["signs AWS SigV4 (service s3, region eu-west-1; secrets kid, skey)"])
        #expect(described["substitute"] == ["substitutes the placeholders of secret ph"])
        #expect(described["none"] == ["injects nothing"])
        for scope in loaded.policy.scopes {
            #expect(scope.credentialActions.isEmpty == (described[scope.name] == ["injects nothing"]), "\(scope.name)")
        }
    }

    @Test("a scope's secrets are exactly those of its credential actions (so each one is described)")
    func secretsComeFromActions() throws {
        let loaded = try ConfigLoader.parse(Self.config, file: "b.yaml", home: "/home/tester")
        for scope in loaded.policy.scopes {
            #expect(Set(scope.credentialActions.flatMap(\.sentSecretNames)) == scope.secretNames, "\(scope.name)")
            #expect(Set(scope.credentialActions.filter(\.isInjection).flatMap(\.sentSecretNames)) == scope.injectedSecretNames, "\(scope.name)")
        }
        let signing = try #require(loaded.policy.scopes.first { $0.name == "sign" })
        #expect(signing.secretNames == ["kid"], "the secret key only keys the HMAC: it is not sent")
    }
}

@Suite("Banner: how to use the proxy, for every way a client authenticates")
struct BannerUseItTests {
    static let url = "http://127.0.0.1:8080"
    static let basic = ClientRule(name: "me", auth: .basic(user: "me", passwordSecret: "me_pw"))
    static let bearer = ClientRule(name: "agent", auth: .bearer(tokenSecret: "agent_key"))
    static let local = ClientRule(name: "ci", uid: 1001)

    @Test(
        "a Basic client's password goes in the proxy URL, a Bearer client's key in a header; each configured way has its line",
        arguments: [
            ([local], [false, false]),
            ([basic], [true, false]),
            ([bearer], [false, true]),
            ([basic, bearer, local], [true, true]),
        ])
    func wayPerScheme(clients: [ClientRule], shows: [Bool]) {
        let lines = Banner.useIt(Self.url, proxyAuthSecret: nil, clients: clients)
        let text = lines.joined(separator: "\n")
        #expect(text.contains("http_proxy=http://USER:PASSWORD@127.0.0.1:8080") == shows[0])
        #expect(text.contains("curl --proxy-header 'Proxy-Authorization: Bearer KEY' -x http://127.0.0.1:8080") == shows[1])
        #expect(text.contains("docs/clients.md") == shows[1])
        #expect(lines.allSatisfy { $0.hasPrefix("  use it") })
        if !shows.contains(true) { #expect(lines == ["  use it: export http_proxy=\(Self.url) https_proxy=\(Self.url)"]) }
        #expect(!text.contains("me_pw") && !text.contains("agent_key"), "secret names are not what the client types")
    }
}
