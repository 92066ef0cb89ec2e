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
        let described = Dictionary(uniqueKeysWithValues: loaded.policy.scopes.map { ($0.name, Banner.credentials($0, tokens: tokens)) })
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
