import Foundation
import TestSupport
import Testing

/// `sign: { aws_sigv4: { ..., credentials: default | { profile: NAME } } }` end to end, through the
/// binary run as a child process: its environment is the chain's input (docs/configuration.md, AWS
/// SigV4). For each link of the chain a client holding no AWS credential sends a plain request, and
/// the origin (Tests/Fixtures/sigv4_origin.py) recomputes the signature with botocore over what
/// arrived, accepting only the credentials that link should yield. STS, IMDSv2 and the container
/// endpoint are loopback fixtures (Tests/Fixtures/aws_sts.py, aws_metadata.py) that count every call.
///
/// Every test starts from `AWSHome`: every AWS_* variable the chain reads is emptied (an empty one
/// counts as unset), HOME and the shared files point into a scratch directory, instance metadata is
/// disabled and its endpoint, STS's and the global endpoint point to a closed loopback port unless
/// the test gives a fixture: nothing here reads the real ~/.aws or tries 169.254.169.254 or a real STS.
private final class AWSHome: @unchecked Sendable {
    let scratch = ScratchDirectory()
    var environment: [String: String]

    static let cleared = [
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_CREDENTIAL_EXPIRATION",
        "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
        "AWS_DEFAULT_REGION",
    ]

    init(_ extra: [String: String] = [:]) throws {
        let closed = "http://127.0.0.1:\(try TestListener.freePort())"
        var environment = Dictionary(uniqueKeysWithValues: Self.cleared.map { ($0, "") })
        environment.merge([
            "HOME": scratch.path, "AWS_CONFIG_FILE": scratch.path + "/config", "AWS_SHARED_CREDENTIALS_FILE": scratch.path + "/credentials",
            "AWS_EC2_METADATA_DISABLED": "true", "AWS_EC2_METADATA_SERVICE_ENDPOINT": closed, "AWS_ENDPOINT_URL_STS": closed,
            "AWS_ENDPOINT_URL": closed, "AWS_REGION": "eu-west-1",
        ]) { $1 }
        environment.merge(extra) { $1 }
        self.environment = environment
        config("")
        credentials("")
    }

    func config(_ text: String) { scratch.write("config", text) }
    func credentials(_ text: String) { scratch.write("credentials", text) }

    /// The binary with one s3 scope on `origin`'s port 0 signed with `credentials` (port 1 is in
    /// no scope), its access log and an admin endpoint.
    func proxy(_ origin: SigV4Origin, credentials: String = "default") throws -> ConfiguredProxy {
        try ConfiguredProxy(environment: environment) { logPath in
            """
            scopes:
              - name: bucket
                origins: ["\(origin.url(0))"]
                require_https: false
                sign: { aws_sigv4: { service: s3, region: eu-west-1, credentials: \(credentials) } }
            log: { output: \(logPath) }
            """
        }
    }
}

private func canary(_ label: String) -> String { "CANARY\(label)\(String(UInt64.random(in: 0...UInt64.max), radix: 16))" }

/// A credential whose every part is a canary (a secret key with `/` and `+`, a long session token).
private func canaryCredential(_ label: String, token: Bool = true) -> SigV4Origin.Credential {
    SigV4Origin.Credential(
        accessKeyID: "ASIA" + label.uppercased() + "EXAMPLE", secretAccessKey: canary(label + "secret") + "/K7MDENG+bPxRfiCY",
        sessionToken: token ? canary(label + "session") + "//////////wEa+token" : nil)
}

/// One exchange through the proxy, and what the origin said and received.
private struct Signed {
    let response: TestResponse
    let document: [String: Any]
    let received: SigV4Origin.Received?

    var verified: Bool { document["verified"] as? Bool == true }
    var why: String { document["why"] as? String ?? response.bodyText }
}

/// `method` to `origin`'s port `index` through the proxy on a fresh connection, tagged with
/// X-Test-Case so the origin's record of it can be found.
private func send(
    _ proxyPort: UInt16, _ origin: SigV4Origin, _ index: Int = 0, _ method: String = "GET", _ target: String = "/bucket/key",
    fields: [(String, String)] = []
) throws -> Signed {
    let id = UUID().uuidString
    var head = "\(method) \(origin.url(index))\(target) HTTP/1.1\r\nHost: \(origin.authority(index))\r\nX-Test-Case: \(id)\r\n"
    for (name, value) in fields { head += "\(name): \(value)\r\n" }
    head += "Connection: close\r\n\r\n"
    let socket = try TestSocket.connect(port: proxyPort)
    try socket.send(head)
    let response = try #require(try HTTPReader(socket).readResponse(requestMethod: method))
    let document = (try? JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]) ?? [:]
    let received = origin.received.first { $0.header("x-test-case") == id }
    return Signed(response: response, document: document, received: received)
}

/// Verified by botocore with `credential`: its key id in the Authorization's scope, its session
/// token (or none) in X-Amz-Security-Token.
private func expectSigned(
    _ result: Signed, with credential: SigV4Origin.Credential, sourceLocation: SourceLocation = #_sourceLocation
) {
    #expect(result.response.status == 200, "\(result.why)", sourceLocation: sourceLocation)
    #expect(result.verified, "\(result.why)", sourceLocation: sourceLocation)
    let authorization = result.received?.header("authorization") ?? ""
    #expect(
        authorization.hasPrefix("AWS4-HMAC-SHA256 Credential=\(credential.accessKeyID)/"), "\(authorization)", sourceLocation: sourceLocation)
    #expect(
        result.received?.headers("x-amz-security-token") == (credential.sessionToken.map { [$0] } ?? []), sourceLocation: sourceLocation)
}

/// `count` requests at once from as many threads, each verified as signed with `credential`.
private func sendConcurrently(
    _ count: Int, _ port: UInt16, _ origin: SigV4Origin, _ credential: SigV4Origin.Credential,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    final class Results: @unchecked Sendable {
        let lock = NSLock()
        var items: [Result<Signed, any Error>] = []
    }
    let results = Results()
    // A thread each (concurrentPerform would run only as many at once as there are cores), all
    // released together.
    let go = DispatchSemaphore(value: 0)
    let done = DispatchGroup()
    for index in 0..<count {
        done.enter()
        Thread.detachNewThread {
            go.wait()
            let result = Result { try send(port, origin, 0, "GET", "/bucket/concurrent-\(index)") }
            results.lock.withLock { results.items.append(result) }
            done.leave()
        }
    }
    for _ in 0..<count { go.signal() }
    done.wait()
    #expect(results.items.count == count, sourceLocation: sourceLocation)
    for item in results.items {
        switch item {
        case .success(let signed): expectSigned(signed, with: credential, sourceLocation: sourceLocation)
        case .failure(let error): Issue.record("a request failed: \(error)", sourceLocation: sourceLocation)
        }
    }
}

private func kinds(_ fixture: AWSCredentialFixture) -> [String] { fixture.verdicts.compactMap { $0["kind"] as? String } }

private let roleARN = "arn:aws:iam::123456789012:role/dev"

/// The first line of the proxy's error log (stderr) holding every one of `parts`. The test's reader
/// thread may be behind the proxy, so it is looked for a bounded number of times (not a timed
/// assertion: a line that is there is found at once).
private func errorLogLine(_ proxy: ConfiguredProxy, containing parts: [String]) -> String? {
    for _ in 0..<100 {
        let line = proxy.process.standardError.split(separator: "\n").first { line in parts.allSatisfy { line.contains($0) } }
        if let line { return String(line) }
        Thread.sleep(forTimeInterval: 0.05)
    }
    return nil
}

/// The error log's `aws_credentials` line names the link that answered (`AWSCredentialOrigin`),
/// never a value.
private func expectSource(_ proxy: ConfiguredProxy, _ source: String, sourceLocation: SourceLocation = #_sourceLocation) {
    let line = errorLogLine(proxy, containing: [#""event":"aws_credentials""#, #""source":"\#(source)""#])
    #expect(line != nil, "no aws_credentials line with source \(source): \(proxy.process.standardError)", sourceLocation: sourceLocation)
}

@Suite("The AWS credential chain through the binary: each link's credentials sign, botocore verifies", .serialized)
struct AWSChainEngineTests {
    // MARK: Each link

    @Test("1. environment keys and session token")
    func environmentKeys() throws {
        let credential = canaryCredential("env")
        let origin = try SigV4Origin(credentials: [credential], ports: 2)
        defer { origin.stop() }
        let home = try AWSHome([
            "AWS_ACCESS_KEY_ID": credential.accessKeyID, "AWS_SECRET_ACCESS_KEY": credential.secretAccessKey,
            "AWS_SESSION_TOKEN": credential.sessionToken!,
        ])
        // Keys in the default profile too: the environment comes first.
        home.credentials("[default]\naws_access_key_id = AKIAPROFILEEXAMPLE\naws_secret_access_key = \(canary("profile"))\n")
        let proxy = try home.proxy(origin)
        defer { proxy.process.terminate() }
        expectSigned(try send(proxy.port, origin), with: credential)
        expectSigned(try send(proxy.port, origin, 0, "PUT", "/bucket/other"), with: credential)
        expectSource(proxy, "environment")
    }

    @Test("2. web identity: the token file and AWS_ROLE_ARN go to STS AssumeRoleWithWebIdentity, its role credentials sign")
    func webIdentity() throws {
        let role = canaryCredential("web")
        let origin = try SigV4Origin(credentials: [role], ports: 2)
        defer { origin.stop() }
        let jwt = "eyJ." + canary("jwt") + ".sig"
        let sts = try AWSCredentialFixture(
            script: "aws_sts.py",
            arguments: ["--web-identity-token", jwt, "--role", roleARN, role.accessKeyID, role.secretAccessKey, role.sessionToken!])
        defer { sts.stop() }
        let home = try AWSHome()
        let tokenFile = home.scratch.write("web-identity-token", jwt)
        home.environment.merge(["AWS_WEB_IDENTITY_TOKEN_FILE": tokenFile, "AWS_ROLE_ARN": roleARN, "AWS_ENDPOINT_URL_STS": sts.url]) { $1 }
        let proxy = try home.proxy(origin)
        defer { proxy.process.terminate() }
        expectSigned(try send(proxy.port, origin), with: role)
        expectSigned(try send(proxy.port, origin), with: role)
        let verdicts = sts.verdicts
        #expect(verdicts.count == 1, "one STS call for two requests: \(verdicts)")
        expectSource(proxy, "web identity (environment)")
        #expect(verdicts.first?["action"] as? String == "AssumeRoleWithWebIdentity")
        #expect(verdicts.first?["verified"] as? Bool == true, "\(verdicts)")
    }

    @Test("3. a profile's static keys: credentials: { profile: dev } signs with [dev], not [default], AWS_PROFILE or the environment's keys")
    func profileStaticKeys() throws {
        let credential = canaryCredential("dev", token: false)
        let origin = try SigV4Origin(credentials: [credential], ports: 2)
        defer { origin.stop() }
        // botocore: a profile named explicitly skips the environment's keys and AWS_PROFILE.
        let home = try AWSHome([
            "AWS_ACCESS_KEY_ID": "AKIAENVIRONMENTEXAMPLE", "AWS_SECRET_ACCESS_KEY": canary("environment"), "AWS_PROFILE": "default",
        ])
        home.credentials(
            """
            [default]
            aws_access_key_id = AKIADEFAULTEXAMPLE
            aws_secret_access_key = \(canary("default"))
            [dev]
            aws_access_key_id = \(credential.accessKeyID)
            aws_secret_access_key = \(credential.secretAccessKey)

            """)
        let proxy = try home.proxy(origin, credentials: "{ profile: dev }")
        defer { proxy.process.terminate() }
        expectSigned(try send(proxy.port, origin), with: credential)
        expectSource(proxy, "profile 'dev'")
    }

    @Test("4. a profile's credential_process: its JSON's keys and session token sign; it runs once for two requests")
    func credentialProcess() throws {
        let credential = canaryCredential("process")
        let origin = try SigV4Origin(credentials: [credential], ports: 2)
        defer { origin.stop() }
        let home = try AWSHome()
        let runs = home.scratch.path + "/runs"
        let expiration = ISO8601DateFormatter().string(from: Date().addingTimeInterval(3600))
        let script = home.scratch.write(
            "credential-process",
            """
            #!/bin/sh
            echo run >> \(runs)
            printf '%s' '{"Version": 1, "AccessKeyId": "\(credential.accessKeyID)", "SecretAccessKey": "\(credential.secretAccessKey)", "SessionToken": "\(credential.sessionToken!)", "Expiration": "\(expiration)"}'

            """, mode: 0o700)
        home.config("[default]\ncredential_process = \(script)\n")
        let proxy = try home.proxy(origin)
        defer { proxy.process.terminate() }
        expectSigned(try send(proxy.port, origin), with: credential)
        expectSigned(try send(proxy.port, origin), with: credential)
        let ran = (try? String(contentsOfFile: runs, encoding: .utf8)) ?? ""
        #expect(ran.split(separator: "\n").count == 1, "credential_process ran \(ran.split(separator: "\n").count) times")
        expectSource(proxy, "credential_process of profile 'default'")
    }

    @Test("5. role_arn + source_profile: the proxy's AssumeRole is signed with the source keys (botocore checks it), the role's credentials sign")
    func assumedRole() throws {
        let source = canaryCredential("source", token: false)
        let role = canaryCredential("role")
        let origin = try SigV4Origin(credentials: [role], ports: 2)
        defer { origin.stop() }
        let sts = try AWSCredentialFixture(
            script: "aws_sts.py",
            arguments: [
                "--source", source.accessKeyID, source.secretAccessKey, "-", "--region", "eu-west-1",
                "--role", roleARN, role.accessKeyID, role.secretAccessKey, role.sessionToken!,
            ])
        defer { sts.stop() }
        let home = try AWSHome(["AWS_ENDPOINT_URL_STS": sts.url])
        home.config("[profile dev]\nrole_arn = \(roleARN)\nsource_profile = base\nrole_session_name = e2e\n")
        home.credentials("[base]\naws_access_key_id = \(source.accessKeyID)\naws_secret_access_key = \(source.secretAccessKey)\n")
        let proxy = try home.proxy(origin, credentials: "{ profile: dev }")
        defer { proxy.process.terminate() }
        expectSigned(try send(proxy.port, origin), with: role)
        let verdicts = sts.verdicts
        #expect(verdicts.count == 1, "\(verdicts)")
        #expect(verdicts.first?["action"] as? String == "AssumeRole")
        #expect(verdicts.first?["verified"] as? Bool == true, "botocore verified the proxy's AssumeRole: \(verdicts)")
        #expect(verdicts.first?["signed_by"] as? String == source.accessKeyID)
        #expect(verdicts.first?["region"] as? String == "eu-west-1")
        #expect(verdicts.first?["role_session_name"] as? String == "e2e")
        expectSource(proxy, "assumed role of profile 'dev'")
    }

    @Test("6. the container endpoint (AWS_CONTAINER_CREDENTIALS_FULL_URI on loopback) with its authorization token")
    func containerEndpoint() throws {
        let credential = canaryCredential("container")
        let origin = try SigV4Origin(credentials: [credential], ports: 2)
        defer { origin.stop() }
        let authorization = canary("containerauth")
        let metadata = try AWSCredentialFixture(
            script: "aws_metadata.py",
            arguments: [
                "--role", "unused", "--credentials", credential.accessKeyID, credential.secretAccessKey, credential.sessionToken!,
                "--container-token", authorization,
            ])
        defer { metadata.stop() }
        let home = try AWSHome()
        let tokenFile = home.scratch.write("container-token", authorization)
        home.environment.merge([
            "AWS_CONTAINER_CREDENTIALS_FULL_URI": metadata.url + "/v2/credentials/x", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": tokenFile,
        ]) { $1 }
        let proxy = try home.proxy(origin)
        defer { proxy.process.terminate() }
        expectSigned(try send(proxy.port, origin), with: credential)
        #expect(kinds(metadata) == ["container"])
        expectSource(proxy, "container endpoint")
        #expect(metadata.verdicts.allSatisfy { $0["ok"] as? Bool == true }, "\(metadata.verdicts)")
    }

    @Test("7. IMDSv2: the token PUT first, then the role name and its credentials, each with the session token")
    func instanceMetadata() throws {
        let credential = canaryCredential("imds")
        let origin = try SigV4Origin(credentials: [credential], ports: 2)
        defer { origin.stop() }
        let metadata = try AWSCredentialFixture(
            script: "aws_metadata.py",
            arguments: ["--role", "e2e-role", "--credentials", credential.accessKeyID, credential.secretAccessKey, credential.sessionToken!])
        defer { metadata.stop() }
        let home = try AWSHome(["AWS_EC2_METADATA_DISABLED": "false", "AWS_EC2_METADATA_SERVICE_ENDPOINT": metadata.url])
        let proxy = try home.proxy(origin)
        defer { proxy.process.terminate() }
        expectSigned(try send(proxy.port, origin), with: credential)
        expectSigned(try send(proxy.port, origin), with: credential)
        #expect(kinds(metadata) == ["imds-token", "imds-role", "imds-credentials"], "one walk for two requests")
        expectSource(proxy, "EC2 instance metadata")
        #expect(metadata.verdicts.allSatisfy { $0["ok"] as? Bool == true }, "\(metadata.verdicts)")
    }

    // MARK: Caching

    /// The container endpoint answers credentials expiring `expiresIn` seconds from now; three
    /// requests, more than the one-second retry floor apart; the endpoint's calls counted.
    private func containerCalls(expiresIn: Int) throws -> Int {
        let credential = canaryCredential("refresh")
        let origin = try SigV4Origin(credentials: [credential], ports: 2)
        defer { origin.stop() }
        let metadata = try AWSCredentialFixture(
            script: "aws_metadata.py",
            arguments: [
                "--role", "unused", "--credentials", credential.accessKeyID, credential.secretAccessKey, credential.sessionToken!,
                "--expires-in", String(expiresIn),
            ])
        defer { metadata.stop() }
        let home = try AWSHome(["AWS_CONTAINER_CREDENTIALS_FULL_URI": metadata.url + "/v2/credentials/x"])
        let proxy = try home.proxy(origin)
        defer { proxy.process.terminate() }
        for index in 0..<3 {
            // Not a timed assertion: the pause only guarantees that the floor has passed.
            if index > 0 { Thread.sleep(forTimeInterval: 1.2) }
            expectSigned(try send(proxy.port, origin), with: credential)
        }
        return kinds(metadata).filter { $0 == "container" }.count
    }

    @Test("temporary credentials are renewed 5 minutes before their Expiration: 6 minutes ahead are kept, 4 minutes ahead are fetched again")
    func renewedFiveMinutesBeforeExpiration() throws {
        #expect(try containerCalls(expiresIn: 360) == 1, "a minute before the margin: the cached credentials sign every request")
        #expect(try containerCalls(expiresIn: 240) == 3, "inside the margin: each request after the floor fetches again")
    }

    @Test("renewed credentials that changed sign from then on, and the replaced session token and secret key stay guarded")
    func renewedCredentialsRotate() throws {
        let first = canaryCredential("first"), second = canaryCredential("second")
        let origin = try SigV4Origin(credentials: [first, second], ports: 2)
        defer { origin.stop() }
        let home = try AWSHome()
        let runs = home.scratch.path + "/runs"
        // Four minutes ahead: inside the margin, so the next request after the retry floor runs it
        // again; the first run answers `first`, every later one `second`.
        let expiration = ISO8601DateFormatter().string(from: Date().addingTimeInterval(240))
        func document(_ credential: SigV4Origin.Credential) -> String {
            #"{"Version": 1, "AccessKeyId": "\#(credential.accessKeyID)", "SecretAccessKey": "\#(credential.secretAccessKey)", "SessionToken": "\#(credential.sessionToken!)", "Expiration": "\#(expiration)"}"#
        }
        let script = home.scratch.write(
            "credential-process",
            """
            #!/bin/sh
            if [ -e \(runs) ]; then answer='\(document(second))'; else answer='\(document(first))'; fi
            echo run >> \(runs)
            printf '%s' "$answer"

            """, mode: 0o700)
        home.config("[default]\ncredential_process = \(script)\n")
        let proxy = try home.proxy(origin)
        defer { proxy.process.terminate() }
        expectSigned(try send(proxy.port, origin), with: first)
        // Not a timed assertion: the pause only guarantees that the retry floor has passed.
        Thread.sleep(forTimeInterval: 1.2)
        expectSigned(try send(proxy.port, origin), with: second)
        let ran = (try? String(contentsOfFile: runs, encoding: .utf8)) ?? ""
        #expect(ran.split(separator: "\n").count == 2)
        // `first` has not expired: the guard still knows it.
        for (value, part) in [
            (first.sessionToken!, "session_token"), (first.secretAccessKey, "secret_access_key"), (second.sessionToken!, "session_token"),
        ] {
            let leak = try send(proxy.port, origin, 1, "GET", "/elsewhere", fields: [("X-Leak", value)])
            #expect(leak.response.status == 403, "\(leak.response.bodyText)")
            #expect(leak.response.bodyText.contains("secret_egress_blocked") && leak.response.bodyText.contains("aws:default:" + part))
        }
        #expect(origin.received.filter { $0.port == origin.ports[1] }.isEmpty, "nothing reached the other origin")
    }

    @Test("10 concurrent requests on a cold proxy: one walk of the chain (one IMDS token, role and credentials call)")
    func concurrentRequestsShareOneFetch() throws {
        let credential = canaryCredential("concurrent")
        let origin = try SigV4Origin(credentials: [credential], ports: 2)
        defer { origin.stop() }
        let metadata = try AWSCredentialFixture(
            script: "aws_metadata.py",
            arguments: ["--role", "e2e-role", "--credentials", credential.accessKeyID, credential.secretAccessKey, credential.sessionToken!])
        defer { metadata.stop() }
        let home = try AWSHome(["AWS_EC2_METADATA_DISABLED": "false", "AWS_EC2_METADATA_SERVICE_ENDPOINT": metadata.url])
        let proxy = try home.proxy(origin)
        defer { proxy.process.terminate() }
        sendConcurrently(10, proxy.port, origin, credential)
        #expect(kinds(metadata) == ["imds-token", "imds-role", "imds-credentials"], "\(metadata.verdicts)")
    }

    @Test("10 concurrent requests while a slow credential_process runs: it runs once, every request waits for it and is signed")
    func concurrentRequestsWaitForOneRun() throws {
        let credential = canaryCredential("slow")
        let origin = try SigV4Origin(credentials: [credential], ports: 2)
        defer { origin.stop() }
        let home = try AWSHome()
        let runs = home.scratch.path + "/runs"
        let expiration = ISO8601DateFormatter().string(from: Date().addingTimeInterval(3600))
        // The pause holds the fetch open so the requests arrive while it is in flight (no assertion
        // depends on its length: one run is right however the requests interleave).
        let script = home.scratch.write(
            "credential-process",
            """
            #!/bin/sh
            echo run >> \(runs)
            sleep 1
            printf '%s' '{"Version": 1, "AccessKeyId": "\(credential.accessKeyID)", "SecretAccessKey": "\(credential.secretAccessKey)", "SessionToken": "\(credential.sessionToken!)", "Expiration": "\(expiration)"}'

            """, mode: 0o700)
        home.config("[default]\ncredential_process = \(script)\n")
        let proxy = try home.proxy(origin)
        defer { proxy.process.terminate() }
        sendConcurrently(10, proxy.port, origin, credential)
        let ran = (try? String(contentsOfFile: runs, encoding: .utf8)) ?? ""
        #expect(ran.split(separator: "\n").count == 1, "credential_process ran \(ran.split(separator: "\n").count) times")
        let metrics = try proxy.metrics()
        #expect(metrics.contains(#"secret="aws:default""#), "the fetch is counted under the secret's name")
    }

    // MARK: Failures

    @Test("no credentials anywhere: 502 credential_unavailable naming aws:default and aws_chain; nothing reaches the origin")
    func noCredentialsAnywhere() throws {
        let origin = try SigV4Origin(credentials: [canaryCredential("none")], ports: 2)
        defer { origin.stop() }
        let home = try AWSHome()
        // A profile the default chain does not use holds a canary: it must not be named or shown.
        let unused = canary("unusedsecret")
        home.credentials("[other]\naws_access_key_id = AKIAOTHEREXAMPLE\naws_secret_access_key = \(unused)\n")
        let proxy = try home.proxy(origin)
        defer { proxy.process.terminate() }
        let result = try send(proxy.port, origin)
        #expect(result.response.status == 502)
        let body = result.response.bodyText
        #expect(body.contains("credential_unavailable"), "\(body)")
        #expect(body.contains("aws:default"), "\(body)")
        #expect(body.contains("aws_chain"), "\(body)")
        #expect(!body.contains(unused) && !body.contains("CANARY"), "\(body)")
        #expect(result.received == nil && origin.received.isEmpty, "nothing was sent")
        #expect(proxy.process.terminate() == 0)
        let log = (try? String(contentsOfFile: proxy.logPath, encoding: .utf8)) ?? ""
        #expect(log.contains("credential_unavailable"), "\(log)")
        for text in [log, proxy.process.standardError] { #expect(!text.contains(unused)) }
        // The error log says what was looked at (names and paths, never a value).
        let failure = errorLogLine(proxy, containing: ["credential_fetch_failed"]) ?? ""
        #expect(failure.contains(#""secret":"aws:default""#) && failure.contains(#""reason":"aws_chain""#), "\(failure)")
        #expect(failure.contains("no credentials found") && failure.contains(home.scratch.path + "/credentials"), "\(failure)")
        #expect(failure.contains("disabled by AWS_EC2_METADATA_DISABLED"), "\(failure)")
    }

    @Test("STS refuses the AssumeRole: 502 credential_unavailable, neither the source secret nor STS's message in any answer or log")
    func refusedAssumeRole() throws {
        let source = canaryCredential("refsource", token: false)
        let role = canaryCredential("refrole")
        let origin = try SigV4Origin(credentials: [role], ports: 2)
        defer { origin.stop() }
        let sts = try AWSCredentialFixture(
            script: "aws_sts.py",
            arguments: [
                "--source", source.accessKeyID, "not-" + source.secretAccessKey, "-", "--role", roleARN, role.accessKeyID,
                role.secretAccessKey, role.sessionToken!,
            ])
        defer { sts.stop() }
        let home = try AWSHome(["AWS_ENDPOINT_URL_STS": sts.url, "AWS_PROFILE": "dev"])
        home.config("[profile dev]\nrole_arn = \(roleARN)\nsource_profile = base\n")
        home.credentials("[base]\naws_access_key_id = \(source.accessKeyID)\naws_secret_access_key = \(source.secretAccessKey)\n")
        let proxy = try home.proxy(origin)
        defer { proxy.process.terminate() }
        let result = try send(proxy.port, origin)
        #expect(result.response.status == 502)
        let body = result.response.bodyText
        #expect(body.contains("credential_unavailable") && body.contains("aws:default") && body.contains("aws_chain"), "\(body)")
        #expect(sts.verdicts.first?["verified"] as? Bool == false, "\(sts.verdicts)")
        #expect(origin.received.isEmpty)
        let metrics = try proxy.metrics()
        #expect(proxy.process.terminate() == 0)
        let log = (try? String(contentsOfFile: proxy.logPath, encoding: .utf8)) ?? ""
        for (name, text) in [("answer", body), ("log", log), ("stderr", proxy.process.standardError), ("metrics", metrics)] {
            #expect(!text.contains(source.secretAccessKey), "\(name) leaked the source secret")
            #expect(!text.contains("CANARY-STS-MESSAGE"), "\(name) repeated what STS said")
            #expect(!text.contains("CANARY"), "\(name) holds a canary")
        }
    }

    @Test("a source answering expired credentials, or credential_process output that is not Version 1: 502, no value in any answer or log")
    func unusableAnswersAreRefusedWithoutTheirValues() throws {
        let expired = canaryCredential("expired")
        let origin = try SigV4Origin(credentials: [expired], ports: 2)
        defer { origin.stop() }
        let metadata = try AWSCredentialFixture(
            script: "aws_metadata.py",
            arguments: [
                "--role", "unused", "--credentials", expired.accessKeyID, expired.secretAccessKey, expired.sessionToken!, "--expires-in", "-60",
            ])
        defer { metadata.stop() }
        let containerHome = try AWSHome(["AWS_CONTAINER_CREDENTIALS_FULL_URI": metadata.url + "/v2/credentials/x"])
        let containerProxy = try containerHome.proxy(origin)
        defer { containerProxy.process.terminate() }
        let refusedExpired = try send(containerProxy.port, origin)
        #expect(refusedExpired.response.status == 502 && refusedExpired.response.bodyText.contains("aws_chain"), "\(refusedExpired.why)")
        #expect(kinds(metadata) == ["container"])
        let expiredLine = errorLogLine(containerProxy, containing: ["credential_fetch_failed"]) ?? ""
        #expect(expiredLine.contains("already expired"), "\(expiredLine)")

        let processHome = try AWSHome()
        let version2 = canaryCredential("version")
        let script = processHome.scratch.write(
            "credential-process",
            """
            #!/bin/sh
            printf '%s' '{"Version": 2, "AccessKeyId": "\(version2.accessKeyID)", "SecretAccessKey": "\(version2.secretAccessKey)", "SessionToken": "\(version2.sessionToken!)"}'

            """, mode: 0o700)
        processHome.config("[default]\ncredential_process = \(script)\n")
        let processProxy = try processHome.proxy(origin)
        defer { processProxy.process.terminate() }
        let refusedOutput = try send(processProxy.port, origin)
        #expect(refusedOutput.response.status == 502 && refusedOutput.response.bodyText.contains("aws_chain"), "\(refusedOutput.why)")
        let outputLine = errorLogLine(processProxy, containing: ["credential_fetch_failed"]) ?? ""
        #expect(outputLine.contains("Version is not 1"), "\(outputLine)")
        #expect(origin.received.isEmpty, "nothing was signed with them")

        let containerLog = (try? String(contentsOfFile: containerProxy.logPath, encoding: .utf8)) ?? ""
        let processLog = (try? String(contentsOfFile: processProxy.logPath, encoding: .utf8)) ?? ""
        for text in [
            refusedExpired.response.bodyText, refusedOutput.response.bodyText, containerProxy.process.standardError,
            processProxy.process.standardError, containerLog, processLog,
        ] {
            for value in [expired.secretAccessKey, expired.sessionToken!, version2.secretAccessKey, version2.sessionToken!] {
                #expect(!text.contains(value) && !text.contains(String(value.prefix(16))), "a value in: \(text)")
            }
        }
    }

    // MARK: Canaries and the guard

    @Test("the role's secret key and session token appear in no log line, metric or answer; the guard blocks them to another origin")
    func canariesAndGuard() throws {
        let source = canaryCredential("gsource", token: false)
        let role = canaryCredential("grole")
        let origin = try SigV4Origin(credentials: [role], ports: 2)
        defer { origin.stop() }
        let sts = try AWSCredentialFixture(
            script: "aws_sts.py",
            arguments: [
                "--source", source.accessKeyID, source.secretAccessKey, "-", "--region", "eu-west-1",
                "--role", roleARN, role.accessKeyID, role.secretAccessKey, role.sessionToken!,
            ])
        defer { sts.stop() }
        // The default chain with AWS_PROFILE: the parts are learned as aws:default:*.
        let home = try AWSHome(["AWS_ENDPOINT_URL_STS": sts.url, "AWS_PROFILE": "dev"])
        home.config("[profile dev]\nrole_arn = \(roleARN)\nsource_profile = base\n")
        home.credentials("[base]\naws_access_key_id = \(source.accessKeyID)\naws_secret_access_key = \(source.secretAccessKey)\n")
        let proxy = try home.proxy(origin)
        defer { proxy.process.terminate() }

        expectSigned(try send(proxy.port, origin, 0, "PUT", "/bucket/first"), with: role)
        let before = origin.received.count
        let tokenOut = try send(proxy.port, origin, 1, "GET", "/elsewhere", fields: [("X-Forwarded-Token", role.sessionToken!)])
        let keyOut = try send(
            proxy.port, origin, 1, "GET",
            "/elsewhere?k=" + (role.secretAccessKey.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""))
        for (result, part) in [(tokenOut, "aws:default:session_token"), (keyOut, "aws:default:secret_access_key")] {
            #expect(result.response.status == 403, "\(result.response.bodyText)")
            #expect(result.response.bodyText.contains("secret_egress_blocked"), "\(result.response.bodyText)")
            #expect(result.response.bodyText.contains(part), "\(result.response.bodyText)")
        }
        #expect(origin.received.count == before, "the guard sent nothing to the other origin")
        // The session token to the scoped origin itself is the client's X-Amz-Security-Token: replaced.
        let own = try send(proxy.port, origin, 0, "GET", "/bucket/second", fields: [("X-Amz-Security-Token", canary("client"))])
        expectSigned(own, with: role)

        let metrics = try proxy.metrics()
        #expect(proxy.process.terminate() == 0)
        let log = try String(contentsOfFile: proxy.logPath, encoding: .utf8)
        #expect(log.split(separator: "\n").count == 4, "\(log)")
        #expect(log.contains("secret_egress_blocked"))
        #expect(log.split(separator: "\n").first?.contains(#""signed":"aws_sigv4""#) == true, "\(log)")
        let answers = [tokenOut, keyOut, own].map { String(decoding: $0.response.rawHead + $0.response.body, as: UTF8.self) }
        for (name, text) in [("log", log), ("/metrics", metrics), ("stderr", proxy.process.standardError)] + answers.map({ ("answer", $0) }) {
            for (what, value) in [
                ("role secret key", role.secretAccessKey), ("session token", role.sessionToken!), ("source secret key", source.secretAccessKey),
            ] {
                #expect(!text.contains(value), "\(name) leaked the \(what)")
                #expect(!text.contains(String(value.prefix(20))), "\(name) leaked part of the \(what)")
            }
        }
        #expect(metrics.contains("scopeproxy_log_tripwire_hits_total 0"), "the design held; the tripwire never fired")
    }

    // MARK: check

    /// check's rule (Sources/ScopeProxyApp/Commands.swift): structurally valid is exit 0 (CI without
    /// the secrets, or here without the profile); what would fail at run time is a warning naming it.
    @Test("`scopeproxy check` warns that credentials: { profile: missing } names no profile (exit 0), without a secret")
    func checkNamesAMissingProfile() throws {
        let home = try AWSHome()
        home.config("[profile dev]\nregion = eu-west-1\n")
        let secret = canary("dev")
        home.credentials("[dev]\naws_access_key_id = AKIADEVEXAMPLE\naws_secret_access_key = \(secret)\n")
        let yaml = """
            scopes:
              - name: bucket
                origins: ["https://s3.eu-west-1.amazonaws.com"]
                sign: { aws_sigv4: { service: s3, region: eu-west-1, credentials: { profile: PROFILE } } }

            """
        let missing = home.scratch.write("missing.yaml", yaml.replacingOccurrences(of: "PROFILE", with: "missing"))
        let check = try ProxyProcess.runToCompletion(["check", "--config", missing], environment: home.environment)
        #expect(check.status == 0, "stdout: \(check.stdout)\nstderr: \(check.stderr)")
        let warning = check.stderr.split(separator: "\n").first { $0.contains("profile 'missing'") }.map(String.init) ?? ""
        #expect(warning.hasPrefix("warning: "), "stderr: \(check.stderr)")
        #expect(warning.contains("502"), "\(warning)")
        #expect(!(check.stdout + check.stderr).contains(secret))

        let present = home.scratch.write("dev.yaml", yaml.replacingOccurrences(of: "PROFILE", with: "dev"))
        let fine = try ProxyProcess.runToCompletion(["check", "--config", present], environment: home.environment)
        #expect(fine.status == 0, "stdout: \(fine.stdout)\nstderr: \(fine.stderr)")
        #expect(!fine.stderr.contains("profile 'dev'"), "an existing profile is not warned about: \(fine.stderr)")
        #expect(!(fine.stdout + fine.stderr).contains(secret))
    }
}
