import Foundation
import TestSupport
import Testing

/// Computed secrets obtained by signing (RFC 7523) through the built binary, end to end: a client
/// holding nothing sends plain requests, the proxy signs a JWT with a private key from a 0600 file,
/// trades it for a token at a loopback fixture that verifies it with pyjwt against the public half
/// (Tests/Fixtures/github_app_api.py, jwt_token_endpoint.py; proven in FixtureProofTests), and
/// injects the token it got into the scoped request. Every token and key is a canary: the tests
/// assert where each arrived and that none reached the access log, the error log (stderr),
/// /metrics or another origin.
@Suite("Credential sources through the proxy: GitHub App tokens, jwt_bearer, private_key_jwt", .serialized)
struct CredentialSourceEngineTests {
    // MARK: GitHub App (docs/credentials.md, "A GitHub App")

    @Test("GitHub App: a client holding nothing gets a scoped API answer made with the installation token the proxy obtained")
    func gitHubAppToken() throws {
        let rig = try GitHubRig()
        defer { rig.stop() }
        let answer = try rig.get("/repos/octo/scopeproxy")
        #expect(answer.status == 200, "\(answer.bodyText)")
        #expect(answer.document["authorized"] as? Bool == true, "the scoped request carried the issued token")
        #expect(answer.document["scheme"] as? String == "Bearer")
        #expect(answer.document["token_number"] as? Int == 1)

        let tokenRequests = rig.tokenRequests
        #expect(tokenRequests.count == 1)
        let entry = try #require(tokenRequests.first)
        #expect(entry["verified"] as? Bool == true, "pyjwt verified the app JWT: \(entry["why"] ?? "")")
        #expect(entry["alg"] as? String == "RS256")
        #expect((entry["claims"] as? [String: Any])?["iss"] as? Int == 12345)
        #expect(entry["path"] as? String == "/app/installations/678/access_tokens")
        #expect(entry["permissions"] as? [String: String] == ["contents": "read"], "the permissions narrowing reached GitHub")
        #expect(entry["repositories"] as? [String] == ["scopeproxy"], "the repositories narrowing reached GitHub")
        #expect(entry["accept"] as? String == "application/vnd.github+json")
        #expect(entry["api_version"] as? String == "2022-11-28")

        let api = try #require(rig.apiRequests.last)
        #expect(api["authorization_count"] as? Int == 1, "one Authorization, the proxy's")
        #expect(api["path"] as? String == "/repos/octo/scopeproxy")

        // The token is cached: a second request asks GitHub for nothing.
        #expect(try rig.get("/repos/octo/scopeproxy/issues").document["authorized"] as? Bool == true)
        #expect(rig.tokenRequests.count == 1)
    }

    @Test("GitHub App: 20 concurrent requests on 20 connections cause one token request, and each carries the token")
    func gitHubAppSingleFlight() throws {
        let rig = try GitHubRig()
        defer { rig.stop() }
        let results = ResultBox()
        DispatchQueue.concurrentPerform(iterations: 20) { index in
            let answer = try? rig.get("/repos/octo/scopeproxy/contents/\(index)")
            results.append((answer?.status ?? -1, answer?.document["authorized"] as? Bool ?? false))
        }
        let all = results.items
        #expect(all.count == 20)
        #expect(all.allSatisfy { $0.status == 200 && $0.expected }, "\(all)")
        #expect(rig.tokenRequests.count == 1, "one token request for all of them")
        #expect(rig.apiRequests.count == 20)
        #expect(rig.apiRequests.allSatisfy { $0["token_number"] as? Int == 1 })
    }

    /// A slow GitHub keeps the one fetch in flight while all 20 requests arrive: every one waits
    /// for it inside the proxy (none is sent without its token, none starts a second fetch).
    @Test("GitHub App: 20 requests arriving while a slow token request is in flight all wait for that one")
    func gitHubAppSlowSingleFlight() throws {
        let issued = IssuedCount()
        let api = try FixtureOrigin { connection in
            while let request = connection.readRequest() {
                if request.method == "POST" {
                    usleep(500_000)  // slow on purpose: the requests below all arrive meanwhile
                    connection.respond(
                        status: 201, body: #"{"token": "CANARY-ghs-slow-\#(issued.next())", "expires_at": "2099-01-01T00:00:00Z"}"#)
                } else {
                    connection.respond(body: "ok")
                }
            }
        }
        defer { api.stop() }
        let rig = try GitHubRig(api: api.url)
        defer { rig.stop() }
        let results = ResultBox()
        DispatchQueue.concurrentPerform(iterations: 20) { index in
            let answer = try? rig.get("/repos/o/r/\(index)", origin: api.url)
            results.append((answer?.status ?? -1, answer?.bodyText == "ok"))
        }
        #expect(results.items.count == 20 && results.items.allSatisfy { $0.status == 200 && $0.expected }, "\(results.items)")
        #expect(api.requests.filter { $0.method == "POST" }.count == 1)
        let authorizations = api.requests.filter { $0.method == "GET" }.map { $0.header("authorization") ?? "" }
        #expect(authorizations.count == 20 && authorizations.allSatisfy { $0 == "Bearer CANARY-ghs-slow-1" })
    }

    @Test("GitHub Enterprise Server: an api_url with /api/v3 puts the token request under it")
    func gitHubEnterpriseServerPrefix() throws {
        let rig = try GitHubRig(pathPrefix: "/api/v3")
        defer { rig.stop() }
        let answer = try rig.get("/repos/octo/scopeproxy")
        #expect(answer.document["authorized"] as? Bool == true, "\(answer.bodyText)")
        let entry = try #require(rig.tokenRequests.first)
        #expect(entry["path"] as? String == "/api/v3/app/installations/678/access_tokens")
        #expect(entry["verified"] as? Bool == true, "\(entry["why"] ?? "")")
        #expect(rig.fixture.log.allSatisfy { $0["kind"] as? String != "other" }, "nothing went to an unprefixed path")
    }

    /// GitHub's tokens last an hour and are renewed 5 minutes before `expires_at`; one that is given
    /// less than twice that keeps half its life (docs/configuration.md, the OAuth2 "When" rule), and
    /// the cache never asks more than once a second. The margin itself (an hour's token renewed after
    /// 55 minutes) is the cache's unit tests' (TokenCachePolicy): here the proxy has no clock to move.
    @Test("GitHub App: a token near its expires_at is renewed: the next request after it fetches a new one")
    func gitHubAppRenewal() throws {
        let rig = try GitHubRig()
        defer { rig.stop() }
        // 301 s: inside twice the 5-minute margin, so kept for half of it (150 s), not renewed at once.
        rig.control(#"{"lifetime": 301}"#)
        #expect(try rig.get("/repos/o/r").document["token_number"] as? Int == 1)
        #expect(try rig.get("/repos/o/r").document["token_number"] as? Int == 1)
        #expect(rig.tokenRequests.count == 1)

        // A token that ends in 2 s: kept for the one-second floor, then renewed by the next request.
        let short = try GitHubRig()
        defer { short.stop() }
        short.control(#"{"lifetime": 2}"#)
        #expect(try short.get("/repos/o/r").document["token_number"] as? Int == 1)
        usleep(1_300_000)  // past the one-second floor (a wait, not an assertion on time)
        let renewed = try short.get("/repos/o/r")
        #expect(renewed.document["authorized"] as? Bool == true)
        #expect(renewed.document["token_number"] as? Int == 2, "the request after expiry carried a new token")
        #expect(short.tokenRequests.count == 2)
        #expect(short.tokenRequests.allSatisfy { $0["verified"] as? Bool == true }, "each renewal signs a fresh JWT")
    }

    // MARK: Canaries

    @Test(
        "the installation token and the key never reach the access log, the error log, /metrics or an out-of-scope origin; the guard blocks the token elsewhere"
    )
    func canaries() throws {
        let rig = try GitHubRig()
        defer { rig.stop() }
        let outside = try FixtureOrigin(script: Self.echoHeaders)
        defer { outside.stop() }

        #expect(try rig.get("/repos/octo/scopeproxy").document["authorized"] as? Bool == true)
        let token = rig.issuedToken(1)

        // Out of scope: nothing is injected, the answer (which echoes every header) holds no token.
        let plain = try #require(try rig.proxy.process.exchangeAbsolute(outside, "/echo"))
        #expect(plain.status == 200)
        #expect(!plain.bodyText.contains(token))
        #expect(!plain.bodyText.lowercased().contains("authorization"), "no Authorization was sent there")
        for (label, value) in rig.secretMarks { #expect(!plain.bodyText.contains(value), "the answer holds the \(label)") }

        // A client that learned the token and sends it elsewhere as its own Authorization: a
        // sensitive header out of every scope is stripped, the token does not leave.
        let stripped = try #require(
            try rig.proxy.process.exchangeAbsolute(outside, "/forward", fields: [("Authorization", "Bearer \(token)")]))
        #expect(stripped.status == 200)
        #expect(!stripped.bodyText.contains(token))
        #expect(outside.requests.last?.header("authorization") == nil)

        // Anywhere else (another header, the query): the guard knows the token the proxy obtained
        // and refuses before anything is sent.
        let before = outside.requests.count
        for (target, fields) in [("/exfiltrate", [("X-Forwarded-Token", token)]), ("/x?t=\(token)", [])] {
            let blocked = try #require(try rig.proxy.process.exchangeAbsolute(outside, target, fields: fields))
            #expect(blocked.status == 403, "\(target)")
            #expect(blocked.bodyText.contains("secret_egress_blocked") && blocked.bodyText.contains("gh_app"), "\(blocked.bodyText)")
            #expect(!blocked.bodyText.contains(token))
        }
        #expect(outside.requests.count == before, "the blocked requests never reached the origin")

        let metrics = try rig.proxy.metrics()
        #expect(metrics.contains(#"scopeproxy_token_fetches_total{secret="gh_app",result="ok"} 1"#), "\(metrics)")
        #expect(rig.proxy.process.terminate() == 0)
        let log = try String(contentsOfFile: rig.proxy.logPath, encoding: .utf8)
        #expect(log.split(separator: "\n").count == 5, "every request has its line")
        let stderr = rig.proxy.process.standardError
        for (place, text) in [("access log", log), ("error log", stderr), ("metrics", metrics)] {
            for (label, value) in rig.secretMarks {
                #expect(!text.contains(value), "\(place) leaked the \(label)")
            }
            #expect(!text.contains("PRIVATE KEY"), "\(place) holds a PEM")
        }
        #expect(log.contains("secret_egress_blocked"), "the log says what was refused, by name")
    }

    /// Answers with every request header, as httpbin's /headers does.
    static let echoHeaders: FixtureOrigin.Script = { connection in
        while let request = connection.readRequest() {
            let text = request.headers.map { "\($0.0): \($0.1)" }.joined(separator: "\n")
            connection.respond(headers: [("Content-Type", "text/plain")], body: text)
        }
    }

    // MARK: Failures

    enum APIFailure: String, CaseIterable, Sendable {
        case unauthorized, unprocessable, serverError, garbage, wrongKey, unknownInstallation

        /// The reason code the 502 names.
        var code: String {
            switch self {
            case .unauthorized, .unprocessable, .wrongKey, .unknownInstallation: "rejected"
            case .serverError: "unexpected_status"
            case .garbage: "malformed_response"
            }
        }
    }

    @Test(
        "GitHub answers 401, 422, 500, garbage, refuses the JWT or the installation: 502 credential_unavailable naming the secret and the API origin, nothing of the body",
        arguments: APIFailure.allCases)
    func gitHubAppFailure(_ failure: APIFailure) throws {
        let bodyCanary = canary("body")
        let api: (url: String, stop: () -> Void, tokenRequests: () -> Int, scopedRequests: () -> Int)
        let rig: GitHubRig
        switch failure {
        case .wrongKey:
            // The real fixture, holding the public half of another key: pyjwt refuses the JWT (401).
            rig = try GitHubRig(verifyingKey: .rsaPKCS8)
            api = (rig.url, {}, { rig.tokenRequests.count }, { rig.apiRequests.count })
        case .unknownInstallation:
            // The real fixture knows installation 678 only: a verified JWT for 679 is 404.
            rig = try GitHubRig(installationID: "679")
            api = (rig.url, {}, { rig.tokenRequests.count }, { rig.apiRequests.count })
        default:
            let origin = try FixtureOrigin { connection in
                while connection.readRequest() != nil {
                    switch failure {
                    case .unauthorized: connection.respond(status: 401, body: #"{"message":"\#(bodyCanary)"}"#)
                    case .unprocessable: connection.respond(status: 422, body: #"{"message":"\#(bodyCanary)"}"#)
                    case .serverError: connection.respond(status: 500, body: "<html>\(bodyCanary)</html>")
                    default: connection.respond(status: 201, body: #"{"token": ["\#(bodyCanary)"], "expires_at": 7"#)
                    }
                }
            }
            rig = try GitHubRig(api: origin.url)
            api = (
                origin.url, { origin.stop() }, { origin.requests.filter { $0.method == "POST" }.count },
                { origin.requests.filter { $0.method == "GET" }.count }
            )
        }
        defer {
            rig.stop()
            api.stop()
        }
        let answer = try rig.get("/repos/octo/scopeproxy", origin: api.url)
        #expect(answer.status == 502)
        #expect(answer.bodyText.contains("credential_unavailable"), "\(answer.bodyText)")
        #expect(answer.bodyText.contains("'gh_app'"), "names the secret: \(answer.bodyText)")
        #expect(answer.bodyText.contains(api.url), "names the API origin: \(answer.bodyText)")
        #expect(answer.bodyText.contains("(\(failure.code))"), "\(answer.bodyText)")
        #expect(api.tokenRequests() == 1)
        #expect(api.scopedRequests() == 0, "nothing reaches the scoped origin without its token")
        let metrics = try rig.proxy.metrics()
        #expect(metrics.contains(#"scopeproxy_token_fetches_total{secret="gh_app",result="\#(failure.code)"} 1"#), "\(metrics)")
        rig.proxy.process.terminate()
        let log = try String(contentsOfFile: rig.proxy.logPath, encoding: .utf8)
        let stderr = rig.proxy.process.standardError
        let errorLine = stderr.split(separator: "\n").first { $0.contains("credential_fetch_failed") }
        #expect(errorLine?.contains(#""reason":"\#(failure.code)""#) == true, "the error log says why: \(errorLine ?? "none")")
        for (place, text) in [("answer", answer.bodyText), ("access log", log), ("error log", stderr), ("metrics", metrics)] {
            #expect(!text.contains(bodyCanary), "\(place) holds what the API answered")
            #expect(!text.contains("JSON web token"), "\(place) holds what the API answered")
            for (label, value) in rig.secretMarks { #expect(!text.contains(value), "\(place) leaked the \(label)") }
        }
    }

    @Test("a key file that is not a PEM key: 502 credential_unavailable with key_unusable, GitHub is not asked, the file's bytes are not shown")
    func keyNotPEM() throws {
        let notAKey = canary("notakey") + "\n"
        let rig = try GitHubRig(keyFileText: notAKey)
        defer { rig.stop() }
        let answer = try rig.get("/repos/octo/scopeproxy")
        #expect(answer.status == 502)
        #expect(answer.bodyText.contains("credential_unavailable") && answer.bodyText.contains("(key_unusable)"), "\(answer.bodyText)")
        #expect(answer.bodyText.contains("'gh_app'"))
        #expect(rig.fixture.log.isEmpty, "no request reached GitHub")
        let metrics = try rig.proxy.metrics()
        #expect(metrics.contains(#"scopeproxy_token_fetches_total{secret="gh_app",result="key_unusable"} 1"#), "\(metrics)")
        rig.proxy.process.terminate()
        let log = try String(contentsOfFile: rig.proxy.logPath, encoding: .utf8)
        #expect(log.contains("key_unusable"), "the access log says why: \(log)")
        let errorLine = rig.proxy.process.standardError.split(separator: "\n").first { $0.contains("credential_fetch_failed") }
        #expect(errorLine?.contains(#""secret":"gh_app""#) == true, "the error log names the secret: \(errorLine ?? "none")")
        #expect(errorLine?.contains(#""reason":"key_unusable""#) == true, "\(errorLine ?? "none")")
        #expect(errorLine?.contains("not a PEM private key") == true, "and says why: \(errorLine ?? "none")")
        for text in [answer.bodyText, log, rig.proxy.process.standardError] {
            #expect(!text.contains(notAKey.dropLast()))
        }
    }

    /// The key kept in the proxy's store (`scopeproxy secret set gh_app_key < key.pem`, as
    /// docs/credentials.md says): stored as it was piped in, lines and all, and signed with.
    @Test("the app key stored with scopeproxy secret set (a store: secret) signs the JWT GitHub verifies")
    func storeKey() throws {
        let keys = TestKeys()
        let store = keys.directory.path + "/store"
        let pem = String(decoding: try keys.bytes(.rsaPKCS1), as: UTF8.self)
        let setter = keys.directory.write("set.yaml", "store_dir: \(store)\nsecrets: { gh_app_key: { store: gh_app_key } }\n")
        let set = try ProxyProcess.runToCompletion(["secret", "set", "--config", setter, "gh_app_key"], stdin: pem)
        #expect(set.status == 0, "\(set.stderr)")
        let fixture = try PythonFixtureServer.gitHubAppAPI(
            publicKeyPath: try keys.publicKey(of: .rsaPKCS1), appID: "12345", installationID: "678", canary: canary("ghs"),
            logPath: keys.directory.path + "/github.jsonl")
        defer { fixture.stop() }
        let url = "http://127.0.0.1:\(fixture.port)"
        let proxy = try ConfiguredProxy { logPath in
            """
            store_dir: \(store)
            secrets:
              gh_app_key: { store: gh_app_key }
              gh_app:
                github_app: { app_id: "12345", installation_id: "678", private_key: gh_app_key, api_url: "\(url)" }
            scopes:
              - { name: gh, origins: ["\(url)"], inject: { Authorization: "Bearer ${gh_app}" } }
            log: { output: \(logPath) }
            """
        }
        defer { proxy.process.terminate() }
        let socket = try TestSocket.connect(port: proxy.port)
        defer { socket.close() }
        try socket.send("GET \(url)/repos/o/r HTTP/1.1\r\nHost: 127.0.0.1:\(fixture.port)\r\nConnection: close\r\n\r\n")
        let answer = try #require(try HTTPReader(socket).readResponse())
        #expect(answer.status == 200 && answer.bodyText.contains(#""authorized": true"#), "\(answer.bodyText)")
        #expect(fixture.log.first?["verified"] as? Bool == true)
    }

    /// Keys are read from their secret at each fetch: a key file replaced (atomically, as a
    /// rotation tool does) is signed with from the next token request on, without a reload.
    @Test("a rotated key file: the app key replaced on disk is used by the next token request (no reload)")
    func keyRotation() throws {
        let rig = try GitHubRig(keyKind: .rsaPKCS8)  // GitHub knows the PKCS#1 key's public half only
        defer { rig.stop() }
        let refused = try rig.get("/repos/o/r")
        #expect(refused.status == 502 && refused.bodyText.contains("(rejected)"), "\(refused.bodyText)")
        rig.keys.directory.write("app-key.pem", String(decoding: try rig.keys.bytes(.rsaPKCS1), as: UTF8.self))
        // The proxy notices a changed file within about a second and retries a failed fetch after
        // one: poll (bounded) until the new key is in use, then check what GitHub saw.
        var answer = refused
        for _ in 0..<40 where answer.status != 200 {
            usleep(250_000)
            answer = try rig.get("/repos/o/r")
        }
        #expect(answer.document["authorized"] as? Bool == true, "\(answer.bodyText)")
        #expect(rig.tokenRequests.first?["verified"] as? Bool == false)
        #expect(rig.tokenRequests.last?["verified"] as? Bool == true)
        #expect(rig.tokenRequests.filter { $0["verified"] as? Bool == true }.count == 1)
    }

    /// GitHub signs app JWTs with RS256 only: an EC key (fine for jwt_bearer) cannot be used, and
    /// neither can an encrypted key (the proxy has no passphrase). Both fail before GitHub is asked.
    @Test(
        "a GitHub App key that cannot sign RS256 (EC, encrypted, a public key): 502 key_unusable, GitHub not asked",
        arguments: [TestKeys.Kind.ecPKCS8, .encryptedPKCS8, .publicKey])
    func gitHubAppKeyThatCannotSign(_ kind: TestKeys.Kind) throws {
        let rig = try GitHubRig(keyKind: kind)
        defer { rig.stop() }
        let answer = try rig.get("/repos/o/r")
        #expect(answer.status == 502)
        #expect(answer.bodyText.contains("(key_unusable)") && answer.bodyText.contains("'gh_app'"), "\(answer.bodyText)")
        #expect(rig.fixture.log.isEmpty)
        rig.proxy.process.terminate()
        let log = try String(contentsOfFile: rig.proxy.logPath, encoding: .utf8)
        let why: String =
            switch kind {
            case .encryptedPKCS8: "encrypted private keys are not supported"
            case .publicKey: "a public key or certificate, not a private key"
            default: "cannot sign RS256"
            }
        #expect(rig.proxy.process.standardError.contains(why), "the error log says why: \(rig.proxy.process.standardError)")
        for text in [answer.bodyText, log, rig.proxy.process.standardError] {
            for (label, value) in rig.secretMarks { #expect(!text.contains(value), "leaked the \(label)") }
            #expect(!text.contains("CANARY-passphrase"))
        }
    }

    /// A key saved with Windows line endings is the same key.
    @Test("a PEM key file with CRLF line endings signs as well")
    func crlfKey() throws {
        let keys = TestKeys()
        let crlf = String(decoding: try keys.bytes(.rsaPKCS1), as: UTF8.self).replacingOccurrences(of: "\n", with: "\r\n")
        let rig = try GitHubRig(keyFileText: crlf, keys: keys)
        defer { rig.stop() }
        let answer = try rig.get("/repos/o/r")
        #expect(answer.document["authorized"] as? Bool == true, "\(answer.bodyText)")
    }

    /// An installation token GitHub stops accepting (revoked, the app's permissions changed): the
    /// origin's 401 marks it stale and the next request asks for a new one (docs/configuration.md,
    /// "A 401").
    @Test("the scoped API answers 401 to the installation token: the next request carries a new one")
    func unauthorizedRenews() throws {
        let issued = IssuedCount()
        let api = try FixtureOrigin { connection in
            while let request = connection.readRequest() {
                if request.method == "POST" {
                    let number = issued.next()
                    connection.respond(
                        status: 201, headers: [("Content-Type", "application/json")],
                        body: #"{"token": "CANARY-ghs-revoked-\#(number)", "expires_at": "2099-01-01T00:00:00Z"}"#)
                } else if request.target.hasPrefix("/repos/echo") {
                    // An API that echoes the request's credential (a debug page): the scrub masks it.
                    connection.respond(body: "you sent: \(request.header("authorization") ?? "")")
                } else {
                    let refuse = request.target.hasPrefix("/repos/refuse")
                    connection.respond(status: refuse ? 401 : 200, body: refuse ? #"{"message": "Bad credentials"}"# : "ok")
                }
            }
        }
        defer { api.stop() }
        let rig = try GitHubRig(api: api.url)
        defer { rig.stop() }
        #expect(try rig.get("/repos/o/r", origin: api.url).status == 200)
        usleep(1_100_000)  // a token is dropped for a 401 only once it is a second old (a wait, not an assertion on time)
        #expect(try rig.get("/repos/refuse", origin: api.url).status == 401)
        #expect(try rig.get("/repos/o/r", origin: api.url).status == 200)
        let gets = api.requests.filter { $0.method == "GET" }.map { $0.header("authorization") ?? "" }
        #expect(gets == ["Bearer CANARY-ghs-revoked-1", "Bearer CANARY-ghs-revoked-1", "Bearer CANARY-ghs-revoked-2"])
        #expect(api.requests.filter { $0.method == "POST" }.count == 2)
        // The scoped origin echoing the token back: the client reads stars, never the token.
        let echoed = try rig.get("/repos/echo", origin: api.url)
        #expect(echoed.status == 200)
        #expect(!echoed.bodyText.contains("CANARY-ghs-revoked"), "the response scrub masks the installation token")
        #expect(echoed.bodyText.hasPrefix("you sent: Bearer ****"), "\(echoed.bodyText.prefix(20))")
    }

    /// A reload (SIGHUP) makes a new token source over the same key file: the next request after it
    /// gets a token the new source asked for (docs/configuration.md: "A reload makes a new token source").
    @Test("SIGHUP: the reloaded config signs with the same key file and fetches a new installation token")
    func reloadFetchesAgain() throws {
        let rig = try GitHubRig()
        defer { rig.stop() }
        #expect(try rig.get("/repos/o/r").document["token_number"] as? Int == 1)
        rig.proxy.process.signal(SIGHUP)
        // The reload happens on the main loop: poll (bounded) until a request carries the second token.
        var answer = try rig.get("/repos/o/r")
        for _ in 0..<40 where answer.document["token_number"] as? Int != 2 {
            usleep(250_000)
            answer = try rig.get("/repos/o/r")
        }
        #expect(answer.document["token_number"] as? Int == 2, "\(answer.bodyText) stderr: \(rig.proxy.process.standardError)")
        #expect(answer.document["authorized"] as? Bool == true)
        #expect(rig.tokenRequests.count == 2)
        #expect(rig.tokenRequests.allSatisfy { $0["verified"] as? Bool == true })
        #expect(!rig.proxy.process.standardError.contains("reload_failed"), "\(rig.proxy.process.standardError)")
    }

    /// GitHub is https: the installation token request goes over the same verified TLS as every
    /// upstream (`tls.upstream_ca` trusted besides the system store). A certificate for another
    /// host stops it before the JWT is sent.
    @Test(
        "GitHub over https: the token request is verified TLS; a certificate for another host: 502 tls_verification, no JWT sent",
        arguments: ["valid", "wronghost"])
    func gitHubAppOverTLS(_ certificate: String) throws {
        let pki = try TestPKI()
        let keys = TestKeys()
        let prefix = canary("ghs")
        let (cert, certKey) = pki.certificate(certificate)
        let api = try PythonFixtureServer(
            script: "github_app_api_tls.py",
            arguments: [cert, certKey, "--public-key", try keys.publicKey(of: .rsaPKCS1), "--app-id", "12345", "--canary", prefix],
            logPath: keys.directory.path + "/github.jsonl")
        defer { api.stop() }
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let keyPath = keys.directory.write("app-key.pem", String(decoding: try keys.bytes(.rsaPKCS1), as: UTF8.self))
        let proxy = try ConfiguredProxy { logPath in
            """
            secrets:
              gh_app_key: { file: \(keyPath) }
              gh_app:
                github_app: { app_id: "12345", installation_id: "678", private_key: gh_app_key, api_url: "https://127.0.0.1:\(api.port)" }
            scopes:
              - { name: gh, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${gh_app}" } }
            tls: { upstream_ca: \(pki.caPath) }
            log: { output: \(logPath) }
            """
        }
        defer { proxy.process.terminate() }
        let answer = try #require(try proxy.process.exchangeAbsolute(origin, "/repos/o/r"))
        if certificate == "valid" {
            #expect(answer.status == 200, "\(answer.bodyText)")
            #expect(origin.requests.first?.header("authorization") == "Bearer \(prefix)-1")
            #expect(api.log.first?["verified"] as? Bool == true, "\(api.log.first?["why"] ?? "")")
        } else {
            #expect(answer.status == 502)
            #expect(answer.bodyText.contains("(tls_verification)") && answer.bodyText.contains("https://127.0.0.1:\(api.port)"), "\(answer.bodyText)")
            #expect(api.log.isEmpty, "the JWT never reached a server with the wrong certificate")
            #expect(origin.requests.isEmpty)
        }
    }

    /// A GitHub that accepts the connection and never answers: the fetch ends at `timeouts.upstream`
    /// (502 response_timeout), the waiting requests all get that answer, and the next request after
    /// the one-second floor asks again (the fetch did not stay stuck).
    @Test("GitHub never answers: 502 response_timeout at timeouts.upstream for every waiting request; the next one asks again")
    func gitHubAppSilent() throws {
        let keys = TestKeys()
        let silent = try FixtureOrigin { connection in
            while connection.readRequest() != nil {}  // reads, never answers
        }
        defer { silent.stop() }
        let origin = try FixtureOrigin()
        defer { origin.stop() }
        let keyPath = keys.directory.write("app-key.pem", String(decoding: try keys.bytes(.rsaPKCS1), as: UTF8.self))
        let proxy = try ConfiguredProxy { logPath in
            """
            secrets:
              gh_app_key: { file: \(keyPath) }
              gh_app:
                github_app: { app_id: "12345", installation_id: "678", private_key: gh_app_key, api_url: "\(silent.url)" }
            scopes:
              - { name: gh, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${gh_app}" } }
            timeouts: { upstream: 1s }
            log: { output: \(logPath) }
            """
        }
        defer { proxy.process.terminate() }
        let statuses = ResultBox()
        DispatchQueue.concurrentPerform(iterations: 5) { _ in
            let answer = (try? proxy.process.exchangeAbsolute(origin, "/repos/o/r")) ?? nil
            statuses.append((answer?.status ?? -1, answer?.bodyText.contains("(response_timeout)") ?? false))
        }
        #expect(statuses.items.count == 5 && statuses.items.allSatisfy { $0.status == 502 && $0.expected }, "\(statuses.items)")
        #expect(silent.requests.count == 1, "one token request for the five")
        usleep(1_100_000)  // past the one-second retry floor (a wait, not an assertion on time)
        #expect(try proxy.process.exchangeAbsolute(origin, "/repos/o/r")?.status == 502)
        #expect(silent.requests.count == 2, "asked again")
        #expect(origin.requests.isEmpty)
    }

    /// `check` is what a user runs before deploying: a key that can never sign is named there (the
    /// secret, the computed secret it signs for, what requests would get), not discovered as a 502
    /// on the first request. `check` exits 0 for a structurally valid config (CI without the
    /// secrets) and names, as warnings, what would fail; `run` starts with such a key (the 502 above).
    @Test("scopeproxy check on a config whose key file is not a PEM key: a warning naming the key's secret, its use and the 502")
    func checkNamesAnUnusableKey() throws {
        let notAKey = canary("notakey") + "\n"
        let rig = try GitHubRig(keyFileText: notAKey)
        defer { rig.stop() }
        let result = try ProxyProcess.runToCompletion(["check", "--config", rig.proxy.configPath])
        #expect(result.status == 0, "structurally valid: \(result.stderr)")
        let warning = try #require(
            result.stderr.split(separator: "\n").first { $0.contains("gh_app_key") }.map(String.init), "stderr: \(result.stderr)")
        #expect(warning.hasPrefix("warning: secret 'gh_app_key' (private key of 'gh_app'): not a PEM private key"), "\(warning)")
        #expect(warning.contains("502"), "says what requests would get: \(warning)")
        #expect(!result.stderr.contains(notAKey.dropLast()) && !result.stdout.contains(notAKey.dropLast()), "the file's bytes are not shown")

        // A good key: no word on it.
        let good = try GitHubRig()
        defer { good.stop() }
        let clean = try ProxyProcess.runToCompletion(["check", "--config", good.proxy.configPath])
        #expect(clean.status == 0)
        #expect(!clean.stderr.contains("gh_app_key"), "\(clean.stderr)")
    }

    // MARK: jwt_bearer and private_key_jwt (RFC 7523 §2.1, §2.2; docs/credentials.md)

    @Test(
        "jwt_bearer: the endpoint verified the assertion (iss, sub, aud, exp, iat, jti, kid, signature) and the token reached the scoped origin",
        arguments: [TestKeys.Kind.rsaPKCS8, .ecSEC1])
    func jwtBearer(_ kind: TestKeys.Kind) throws {
        let rig = try JWTRig(kind: kind, mode: .jwtBearer)
        defer { rig.stop() }
        for index in 0..<2 {
            let answer = try #require(try rig.proxy.process.exchangeAbsolute(rig.origin, "/v1/items/\(index)"))
            #expect(answer.status == 200, "\(answer.bodyText)")
        }
        #expect(rig.origin.requests.map { $0.header("authorization") } == Array(repeating: "Bearer \(rig.canaryPrefix)-1", count: 2))
        let entries = rig.endpoint.log
        #expect(entries.count == 1, "one token request, then the cache")
        let entry = try #require(entries.first)
        #expect(entry["verified"] as? Bool == true, "pyjwt: \(entry["why"] ?? "")")
        #expect(entry["grant_type"] as? String == "urn:ietf:params:oauth:grant-type:jwt-bearer")
        #expect(entry["scope"] as? String == "read")
        #expect(entry["path"] as? String == "/token")
        let assertion = try #require(entry["assertion"] as? [String: Any])
        #expect(assertion["alg"] as? String == (kind == .ecSEC1 ? "ES256" : "RS256"))
        #expect(assertion["kid"] as? String == "k1")
        let claims = try #require(assertion["claims"] as? [String: Any])
        #expect(claims["iss"] as? String == "sa@x.iam")
        #expect(claims["sub"] as? String == "sa@x.iam", "sub defaults to the issuer")
        #expect(claims["aud"] as? String == rig.tokenURL, "aud defaults to the token URL")
        #expect(claims["scope"] as? String == "read")
        let iat = try #require(claims["iat"] as? Int), exp = try #require(claims["exp"] as? Int)
        #expect(exp > iat && exp - iat <= 3600)
        #expect((claims["jti"] as? String)?.isEmpty == false)
        #expect(entry["client_assertion"] is NSNull)
        // The guard knows the token the proxy obtained: in a query to another origin it is refused.
        let elsewhere = try FixtureOrigin()
        defer { elsewhere.stop() }
        let blocked = try #require(try rig.proxy.process.exchangeAbsolute(elsewhere, "/x?access_token=\(rig.canaryPrefix)-1"))
        #expect(blocked.status == 403 && blocked.bodyText.contains("secret_egress_blocked"), "\(blocked.bodyText)")
        #expect(elsewhere.requests.isEmpty)
        try rig.expectNoLeaks()
    }

    @Test("jwt_bearer with subject and audience set: the claims carry them")
    func jwtBearerSubjectAudience() throws {
        let rig = try JWTRig(kind: .ecPKCS8, mode: .jwtBearer, subject: "user@x.example", audience: "https://oauth2.example/token")
        defer { rig.stop() }
        #expect(try rig.proxy.process.exchangeAbsolute(rig.origin, "/v1")?.status == 200)
        let entry = try #require(rig.endpoint.log.first)
        #expect(entry["verified"] as? Bool == true, "pyjwt: \(entry["why"] ?? "")")
        let claims = (entry["assertion"] as? [String: Any])?["claims"] as? [String: Any]
        #expect(claims?["sub"] as? String == "user@x.example")
        #expect(claims?["aud"] as? String == "https://oauth2.example/token")
        #expect(rig.origin.requests.first?.header("authorization") == "Bearer \(rig.canaryPrefix)-1")
    }

    @Test(
        "client_credentials with client_auth: private_key_jwt: the endpoint verified the client assertion (iss = sub = client_id)",
        arguments: [TestKeys.Kind.rsaPKCS1, .ecPKCS8])
    func privateKeyJWT(_ kind: TestKeys.Kind) throws {
        let rig = try JWTRig(kind: kind, mode: .privateKeyJWT)
        defer { rig.stop() }
        let answer = try #require(try rig.proxy.process.exchangeAbsolute(rig.origin, "/v1/orders"))
        #expect(answer.status == 200, "\(answer.bodyText)")
        #expect(rig.origin.requests.first?.header("authorization") == "Bearer \(rig.canaryPrefix)-1")
        let entry = try #require(rig.endpoint.log.first)
        #expect(entry["verified"] as? Bool == true, "pyjwt: \(entry["why"] ?? "")")
        #expect(entry["grant_type"] as? String == "client_credentials")
        #expect(entry["assertion"] is NSNull)
        let client = try #require(entry["client_assertion"] as? [String: Any])
        #expect(client["alg"] as? String == (kind == .ecPKCS8 ? "ES256" : "RS256"))
        let claims = try #require(client["claims"] as? [String: Any])
        #expect(claims["iss"] as? String == "c1" && claims["sub"] as? String == "c1")
        #expect(claims["aud"] as? String == rig.tokenURL)
        try rig.expectNoLeaks()
    }

    @Test("jwt_bearer with client_auth: private_key_jwt: both assertions verified, each with its own jti")
    func jwtBearerWithClientAssertion() throws {
        let rig = try JWTRig(kind: .rsaPKCS8, mode: .both)
        defer { rig.stop() }
        #expect(try rig.proxy.process.exchangeAbsolute(rig.origin, "/v1")?.status == 200)
        let entry = try #require(rig.endpoint.log.first)
        #expect(entry["verified"] as? Bool == true, "pyjwt: \(entry["why"] ?? "")")
        let grant = (entry["assertion"] as? [String: Any])?["claims"] as? [String: Any]
        let client = (entry["client_assertion"] as? [String: Any])?["claims"] as? [String: Any]
        #expect(grant?["iss"] as? String == "sa@x.iam" && client?["iss"] as? String == "c1")
        #expect(grant?["jti"] as? String != client?["jti"] as? String)
        #expect(rig.origin.requests.first?.header("authorization") == "Bearer \(rig.canaryPrefix)-1")
    }

    /// RFC 7523 §3: a server may refuse a `jti` it has seen; each renewal signs a new assertion.
    @Test("jwt_bearer renewal: a short-lived token is renewed with a fresh assertion (new jti, accepted)")
    func jwtBearerRenewal() throws {
        let rig = try JWTRig(kind: .ecSEC1, mode: .jwtBearer, expiresIn: 1)
        defer { rig.stop() }
        #expect(try rig.proxy.process.exchangeAbsolute(rig.origin, "/v1")?.status == 200)
        usleep(1_200_000)  // past the token's one second (a wait, not an assertion on time)
        #expect(try rig.proxy.process.exchangeAbsolute(rig.origin, "/v1")?.status == 200)
        let entries = rig.endpoint.log
        #expect(entries.count == 2 && entries.allSatisfy { $0["verified"] as? Bool == true }, "\(entries.map { $0["why"] ?? "" })")
        #expect(rig.origin.requests.map { $0.header("authorization") ?? "" } == ["Bearer \(rig.canaryPrefix)-1", "Bearer \(rig.canaryPrefix)-2"])
    }

    @Test("jwt_bearer with alg: ES256 on an RSA key: 502 key_unusable, the endpoint not asked, the error log says why")
    func jwtBearerAlgorithmMismatch() throws {
        let rig = try JWTRig(kind: .rsaPKCS1, mode: .jwtBearer, algorithm: "ES256")
        defer { rig.stop() }
        let answer = try #require(try rig.proxy.process.exchangeAbsolute(rig.origin, "/v1"))
        #expect(answer.status == 502 && answer.bodyText.contains("(key_unusable)") && answer.bodyText.contains("'sa_token'"), "\(answer.bodyText)")
        #expect(rig.endpoint.log.isEmpty)
        rig.proxy.process.terminate()
        let line = rig.proxy.process.standardError.split(separator: "\n").first { $0.contains("credential_fetch_failed") }
        #expect(line?.contains(#""secret":"sa_token""#) == true && line?.contains("cannot sign ES256") == true, "\(line ?? "none")")
    }

    @Test("jwt_bearer: the endpoint refuses the assertion (another key): 502 credential_unavailable naming the secret and the endpoint")
    func jwtBearerRefused() throws {
        let rig = try JWTRig(kind: .ecSEC1, mode: .jwtBearer, verifyingKey: .ecPKCS8)
        defer { rig.stop() }
        let answer = try #require(try rig.proxy.process.exchangeAbsolute(rig.origin, "/v1"))
        #expect(answer.status == 502)
        #expect(answer.bodyText.contains("credential_unavailable") && answer.bodyText.contains("(rejected)"), "\(answer.bodyText)")
        #expect(answer.bodyText.contains("'sa_token'") && answer.bodyText.contains("http://127.0.0.1:\(rig.endpoint.port)"))
        #expect(rig.origin.requests.isEmpty)
        #expect(rig.endpoint.log.first?["verified"] as? Bool == false)
    }

    // MARK: explain

    /// `explain` should say where an injected credential comes from, never its value.
    @Test("scopeproxy explain names the source of a GitHub App token and of a jwt_bearer token")
    func explainNamesTheSource() throws {
        let keys = TestKeys()
        let key = keys.directory.write("key.pem", String(decoding: try keys.bytes(.rsaPKCS1), as: UTF8.self))
        let config = keys.directory.write(
            "explain.yaml",
            """
            secrets:
              gh_app_key: { file: \(key) }
              gh_app:
                github_app: { app_id: "12345", installation_id: "678", private_key: gh_app_key, api_url: "https://ghe.example/api/v3" }
              sa_token:
                oauth2: { grant: jwt_bearer, token_url: "https://oauth2.example/token", private_key: gh_app_key, issuer: "sa@x.iam", key_id: k1 }
            scopes:
              - { name: gh, origins: ["https://ghe.example"], inject: { Authorization: "Bearer ${gh_app}" } }
              - { name: sa, origins: ["https://storage.example"], inject: { Authorization: "Bearer ${sa_token}" } }
            """)
        let github = try ProxyProcess.runToCompletion(["explain", "--config", config, "https://ghe.example/repos/o/r"])
        #expect(github.stdout.contains("Authorization: Bearer ${gh_app}"), "\(github.stdout)\(github.stderr)")
        let bearer = try ProxyProcess.runToCompletion(["explain", "--config", config, "https://storage.example/b/o"])
        #expect(bearer.stdout.contains("oauth2.example"), "\(bearer.stdout)\(bearer.stderr)")
        #expect(github.stdout.contains("GitHub App installation token"), "\(github.stdout)")
        #expect(github.stdout.contains("app 12345, installation 678"), "\(github.stdout)")
        #expect(github.stdout.contains("https://ghe.example/api/v3"), "the API it is asked from: \(github.stdout)")
        #expect(github.stdout.contains("private key 'gh_app_key'"), "\(github.stdout)")
        #expect(bearer.stdout.contains("jwt_bearer"), "\(bearer.stdout)")
        #expect(bearer.stdout.contains("https://oauth2.example/token"), "\(bearer.stdout)")
        #expect(bearer.stdout.contains("private key 'gh_app_key'"), "\(bearer.stdout)")
        #expect(!bearer.stdout.contains("Optional("), "\(bearer.stdout)")
        let pemBody = try keys.bytes(.rsaPKCS1)
        let secondLine = String(decoding: pemBody, as: UTF8.self).split(separator: "\n")[1]
        #expect(!github.stdout.contains(secondLine) && !bearer.stdout.contains(secondLine), "the key is never shown")
    }
}

// MARK: Rigs

private func canary(_ label: String) -> String { "CANARY-\(label)-\(String(UInt64.random(in: 0...UInt64.max), radix: 16))" }

/// The marks of a PEM key that must never be shown: its base64 body whole and line by line.
private func pemMarks(_ pem: String) -> [(String, String)] {
    let lines = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.map(String.init)
    return [("key's base64", lines.joined())] + lines.filter { $0.count >= 32 }.map { ("key's base64 line", $0) }
}

struct NoAnswer: Error {}

/// A response and its JSON body (the GitHub fixture answers JSON).
struct AnswerDocument {
    let status: Int
    let bodyText: String
    let document: [String: Any]
}

final class IssuedCount: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    func next() -> Int {
        lock.withLock {
            count += 1
            return count
        }
    }
}

/// Statuses collected from concurrent requests, each with whether its answer was the expected one.
final class ResultBox: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [(status: Int, expected: Bool)] = []
    func append(_ item: (status: Int, expected: Bool)) { lock.withLock { stored.append(item) } }
    var items: [(status: Int, expected: Bool)] { lock.withLock { stored } }
}

extension ProxyProcess {
    /// One absolute-form request to `origin` through this proxy, on a fresh connection.
    func exchangeAbsolute(_ origin: FixtureOrigin, _ target: String, fields: [(String, String)] = []) throws -> TestResponse? {
        let socket = try TestSocket.connect(port: port)
        defer { socket.close() }
        var head = "GET \(origin.url)\(target) HTTP/1.1\r\nHost: \(origin.authority)\r\n"
        for (name, value) in fields { head += "\(name): \(value)\r\n" }
        try socket.send(head + "Connection: close\r\n\r\n")
        return try HTTPReader(socket).readResponse()
    }
}

/// A GitHub App behind the binary: the app's key in a 0600 file, the fixture API (verifying the
/// app JWT with pyjwt against `verifyingKey`'s public half) as both `api_url` and the scoped origin
/// (as api.github.com is), unless `api` names another API origin.
final class GitHubRig: @unchecked Sendable {
    let keys: TestKeys
    let canaryPrefix = canary("ghs")
    let fixture: PythonFixtureServer
    let proxy: ConfiguredProxy
    let keyText: String
    var controlPath: String { keys.directory.path + "/control.json" }
    var url: String { "http://127.0.0.1:\(fixture.port)" }

    /// `keyKind`: the key the proxy signs with; `keyFileText`: the key file's text instead.
    init(
        pathPrefix: String = "", keyKind: TestKeys.Kind = .rsaPKCS1, verifyingKey: TestKeys.Kind = .rsaPKCS1, keyFileText: String? = nil,
        api: String? = nil, installationID: String = "678", keys: TestKeys = TestKeys()
    ) throws {
        self.keys = keys
        keyText = try keyFileText ?? String(decoding: keys.bytes(keyKind), as: UTF8.self)
        let keyPath = keys.directory.write("app-key.pem", keyText)
        fixture = try PythonFixtureServer.gitHubAppAPI(
            publicKeyPath: try keys.publicKey(of: verifyingKey), appID: "12345", installationID: "678", pathPrefix: pathPrefix,
            canary: canaryPrefix, controlPath: keys.directory.path + "/control.json", logPath: keys.directory.path + "/github.jsonl")
        let apiURL = (api ?? "http://127.0.0.1:\(fixture.port)") + pathPrefix
        let scoped = api ?? "http://127.0.0.1:\(fixture.port)"
        proxy = try ConfiguredProxy { logPath in
            """
            secrets:
              gh_app_key: { file: \(keyPath) }
              gh_app:
                github_app:
                  app_id: "12345"
                  installation_id: "\(installationID)"
                  private_key: gh_app_key
                  api_url: "\(apiURL)"
                  permissions: { contents: read }
                  repositories: [scopeproxy]
            scopes:
              - name: gh
                origins: ["\(scoped)"]
                inject: { Authorization: "Bearer ${gh_app}" }
            log: { output: \(logPath) }
            """
        }
    }

    func control(_ json: String) { keys.directory.write("control.json", json) }

    /// The token the fixture issued `number`th.
    func issuedToken(_ number: Int) -> String { "\(canaryPrefix)-\(number)" }

    /// Every value that must never be shown (the first tokens it may have issued, the key).
    var secretMarks: [(String, String)] {
        [("installation token", canaryPrefix)] + pemMarks(keyText)
    }

    var tokenRequests: [[String: Any]] { fixture.log.filter { $0["kind"] as? String == "access_tokens" } }
    var apiRequests: [[String: Any]] { fixture.log.filter { $0["kind"] as? String == "api" } }

    /// `GET origin+path` through the proxy (the fixture by default), its JSON answer.
    func get(_ path: String, origin: String? = nil) throws -> AnswerDocument {
        let target = origin ?? url
        let authority = target.replacingOccurrences(of: "http://", with: "")
        let socket = try TestSocket.connect(port: proxy.port)
        defer { socket.close() }
        try socket.send("GET \(target)\(path) HTTP/1.1\r\nHost: \(authority)\r\nConnection: close\r\n\r\n")
        guard let response = try HTTPReader(socket).readResponse() else { throw NoAnswer() }
        let document = (try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]) ?? [:]
        return AnswerDocument(status: response.status, bodyText: response.bodyText, document: document)
    }

    func stop() {
        proxy.process.terminate()
        fixture.stop()
    }
}

/// An OAuth2 token endpoint verifying RFC 7523 JWTs (Tests/Fixtures/jwt_token_endpoint.py), a
/// scoped origin recording what it got, and the binary between them with a `jwt_bearer` or a
/// `private_key_jwt` secret signed with a `kind` key.
final class JWTRig: @unchecked Sendable {
    enum Mode { case jwtBearer, privateKeyJWT, both }

    let keys = TestKeys()
    let canaryPrefix = canary("jwt-at")
    let endpoint: PythonFixtureServer
    let origin: FixtureOrigin
    let proxy: ConfiguredProxy
    let keyText: String
    var tokenURL: String { "http://127.0.0.1:\(endpoint.port)/token" }

    /// `algorithm`: an `alg:` line; `expiresIn`: the endpoint's `expires_in`.
    init(
        kind: TestKeys.Kind, mode: Mode, subject: String? = nil, audience: String? = nil, verifyingKey: TestKeys.Kind? = nil,
        algorithm: String? = nil, expiresIn: Int = 3600
    ) throws {
        keyText = String(decoding: try keys.bytes(kind), as: UTF8.self)
        let keyPath = keys.directory.write("sa.pem", keyText)
        endpoint = try PythonFixtureServer.jwtTokenEndpoint(
            publicKeyPath: try keys.publicKey(of: verifyingKey ?? kind), issuer: mode != .privateKeyJWT ? "sa@x.iam" : nil, subject: subject,
            clientID: mode != .jwtBearer ? "c1" : nil, audience: audience, keyID: mode != .privateKeyJWT ? "k1" : nil, canary: canaryPrefix,
            expiresIn: expiresIn, logPath: keys.directory.path + "/endpoint.jsonl")
        origin = try FixtureOrigin()
        let url = "http://127.0.0.1:\(endpoint.port)/token"
        var source: String
        switch mode {
        case .jwtBearer:
            source = #"{ grant: jwt_bearer, token_url: "\#(url)", private_key: sa_key, issuer: "sa@x.iam", scope: "read", key_id: "k1""#
            if let subject { source += #", subject: "\#(subject)""# }
            if let audience { source += #", audience: "\#(audience)""# }
            if let algorithm { source += ", alg: \(algorithm)" }
            source += " }"
        case .both:
            source =
                #"{ grant: jwt_bearer, token_url: "\#(url)", private_key: sa_key, issuer: "sa@x.iam", key_id: "k1", client_id: c1, "#
                + "client_auth: private_key_jwt }"
        case .privateKeyJWT:
            source = #"{ grant: client_credentials, token_url: "\#(url)", client_id: c1, client_auth: private_key_jwt, private_key: sa_key }"#
        }
        let scoped = origin.url
        proxy = try ConfiguredProxy { logPath in
            """
            secrets:
              sa_key: { file: \(keyPath) }
              sa_token:
                oauth2: \(source)
            scopes:
              - { name: sa, origins: ["\(scoped)"], inject: { Authorization: "Bearer ${sa_token}" } }
            log: { output: \(logPath) }
            """
        }
    }

    /// The token and the key in none of the access log, the error log and /metrics.
    func expectNoLeaks(sourceLocation: SourceLocation = #_sourceLocation) throws {
        let metrics = try proxy.metrics()
        #expect(metrics.contains(#"scopeproxy_token_fetches_total{secret="sa_token",result="ok"} 1"#), sourceLocation: sourceLocation)
        proxy.process.terminate()
        let log = try String(contentsOfFile: proxy.logPath, encoding: .utf8)
        for (place, text) in [("access log", log), ("error log", proxy.process.standardError), ("metrics", metrics)] {
            for (label, value) in [("access token", canaryPrefix)] + pemMarks(keyText) {
                #expect(!text.contains(value), "\(place) leaked the \(label)", sourceLocation: sourceLocation)
            }
        }
    }

    func stop() {
        proxy.process.terminate()
        origin.stop()
        endpoint.stop()
    }
}
