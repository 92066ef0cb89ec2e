import HTTP1Codec
import ProxyCore
import ScopePolicy

// Origins and configurations shared by the suites.

/// http, in no scope.
let plain = origin("http://plain.example")
/// https, scope `a`: injects X-A-Key, passes Authorization and Cookie.
let a = origin("https://a.example")
/// https, scope `b`: injects X-B-Key, passes Authorization and Cookie.
let b = origin("https://b.example")
/// https, in no scope.
let unscoped = origin("https://unscoped.example")

/// What a client sends, planted so a leak shows.
let clientAuthorization = "Authorization: Bearer CLIENT-AUTH-CANARY"
let clientCookie = "Cookie: sid=CLIENT-COOKIE-CANARY"
let aToken = "X-A-Key: A-INJECTED-7c1e"
let bToken = "X-B-Key: B-INJECTED-42d9"

let established = "HTTP/1.1 200 Connection Established\r\n\r\n"

enum Configs {
    static let scopes = """
        secrets:
          a_token: { env: A_TOKEN }
          b_token: { env: B_TOKEN }
          proxy_password: { env: PROXY_PASSWORD }
          missing: { env: MISSING }
        scopes:
          - name: a
            origins: ["https://a.example"]
            inject: { X-A-Key: "${a_token}" }
            pass: [Authorization, Cookie]
          - name: b
            origins: ["https://b.example"]
            inject: { X-B-Key: "${b_token}" }
            pass: [Authorization, Cookie]
          - name: broken
            origins: ["https://broken.example"]
            inject: { X-Broken: "${missing}" }

        """

    static func redirects(_ mode: String, maxHops: Int = 3, allow: String = "[]") -> String {
        """
        redirects:
          cross_origin: \(mode)
          allow: \(allow)
          max_hops: \(maxHops)

        """
    }

    /// Both scopes, redirects passed to the client.
    static let pass = Fixture(scopes + redirects("pass"))
    /// Both scopes, redirects followed by the proxy (at most 3 hops).
    static let follow = Fixture(scopes + redirects("follow"))
    /// Follow mode with a single hop allowed.
    static let followOneHop = Fixture(scopes + redirects("follow", maxHops: 1))
    /// Both scopes, cross-origin redirects blocked unless to b.
    static let block = Fixture(scopes + redirects("block", allow: "[\"https://b.example\"]"))
    /// CONNECT tunnels allowed.
    static let tunnelAllowed = Fixture(scopes + "tls: { tunnel: allow }\n")
    /// CONNECT to a.example intercepted; other tunnels denied.
    static let intercept = Fixture(scopes + "tls: { intercept: [\"a.example\"], tunnel: deny }\n")
    /// Clients: `agent` (Bearer let-me-in) is served by scope a only, `ci` (uid 1001) by scope b only;
    /// `agent` may send 2 requests a second (a fresh fixture each time: the rate buckets live in it).
    /// CONNECT to a.example intercepted.
    static var clients: Fixture {
        Fixture(
            scopes.replacing(
                "    pass: [Authorization, Cookie]\n  - name: b",
                with: "    pass: [Authorization, Cookie]\n    clients: [agent]\n  - name: b")
                    + """
                    clients:
                      - { name: agent, auth: { bearer: proxy_password }, rate: "2/s" }
                      - { name: ci, uid: 1001 }
                    tls: { intercept: ["a.example"] }

                    """)
    }
    /// Proxy authentication, and CONNECT to a.example intercepted.
    static let proxyAuth = Fixture(scopes + "proxy_auth: { secret: proxy_password }\ntls: { intercept: [\"a.example\"] }\n")
}

extension Configs {
    /// Scope `m` on https://m.example: injects X-M-Key for GET and POST only.
    static let methodsLimited = Fixture(
        """
        secrets: { m_token: { env: M_TOKEN } }
        scopes:
          - name: m
            origins: ["https://m.example"]
            inject: { X-M-Key: "${m_token}" }
            methods: [GET, POST]

        """)
}

let limited = origin("https://m.example")
