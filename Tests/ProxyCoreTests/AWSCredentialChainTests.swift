import AWSSigV4
import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

/// The AWS credential chain, driven step by step with tables of environments and file contents:
/// which link each configuration picks, the bytes of every request it asks for, and every failure
/// (fixed words, never a value). No network: the environment pins every endpoint or disables IMDS.
@Suite struct AWSCredentialChainTests {
    static let now: Int64 = 1_796_206_946  // 2026-12-02T10:22:26Z
    static let home = "/home/t"
    static let configPath = "/home/t/.aws/config"
    static let credentialsPath = "/home/t/.aws/credentials"

    /// Canary values: each test checks where they did and did not arrive.
    static let envKey = "AKIAENVCANARY"
    static let envSecret = "ENV-SECRET-CANARY"
    static let fileKey = "AKIAFILECANARY"
    static let fileSecret = "FILE-SECRET-CANARY"

    static let stsAnswer = """
        <AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
          <AssumeRoleResult>
            <Credentials>
              <AccessKeyId>ASIAROLECANARY</AccessKeyId>
              <SecretAccessKey>ROLE-SECRET-CANARY</SecretAccessKey>
              <SessionToken>ROLE-TOKEN-CANARY</SessionToken>
              <Expiration>2026-12-02T11:22:26Z</Expiration>
            </Credentials>
          </AssumeRoleResult>
        </AssumeRoleResponse>
        """

    /// A chain over these files (absent: nil) with HOME set, IMDS disabled unless the test's
    /// environment says otherwise.
    static func chain(
        _ selection: AWSCredentialSelection = .defaultChain, env: [String: String] = [:], config: String? = nil, credentials: String? = nil,
        files: [String: String] = [:]
    ) -> AWSCredentialChain {
        var environment = ["HOME": home, "AWS_EC2_METADATA_DISABLED": "true"]
        environment.merge(env) { _, new in new }
        var all = files
        if let config { all[configPath] = config }
        if let credentials { all[credentialsPath] = credentials }
        return AWSCredentialChain(selection: selection, environment: environment, readFile: { all[$0].map { Array($0.utf8) } }, now: now)
    }

    static func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    static func expectFinished(_ step: AWSChainStep, key: String, source: AWSCredentialOrigin, sourceLocation: SourceLocation = #_sourceLocation) {
        guard case .finished(let credentials, let origin) = step else {
            Issue.record("expected finished, got \(step)", sourceLocation: sourceLocation)
            return
        }
        #expect(credentials.accessKeyID == SecretValue(key), sourceLocation: sourceLocation)
        #expect(origin == source, sourceLocation: sourceLocation)
    }

    static func failure(_ step: AWSChainStep, sourceLocation: SourceLocation = #_sourceLocation) -> AWSChainFailure? {
        guard case .failed(let failure) = step else {
            Issue.record("expected failed, got \(step)", sourceLocation: sourceLocation)
            return nil
        }
        return failure
    }

    /// Nothing secret in a failure's words.
    static func expectNoCanary(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(!text.contains("CANARY"), "\(text)", sourceLocation: sourceLocation)
    }

    // MARK: Environment

    @Test func environmentKeysComeFirst() {
        var chain = Self.chain(
            env: ["AWS_ACCESS_KEY_ID": Self.envKey, "AWS_SECRET_ACCESS_KEY": Self.envSecret, "AWS_SESSION_TOKEN": "ENV-TOKEN-CANARY"],
            credentials: "[default]\naws_access_key_id = \(Self.fileKey)\naws_secret_access_key = \(Self.fileSecret)\n")
        let step = chain.start()
        Self.expectFinished(step, key: Self.envKey, source: .environment)
        if case .finished(let credentials, _) = step {
            #expect(credentials.sessionToken == SecretValue("ENV-TOKEN-CANARY"))
            #expect(credentials.expiration == nil)
        }
    }

    @Test(arguments: [
        (["AWS_ACCESS_KEY_ID": envKey], AWSChainFailure.Reason.partialCredentials(missing: "AWS_SECRET_ACCESS_KEY")),
        (
            ["AWS_ACCESS_KEY_ID": "AKIA-NOT-AN-ID", "AWS_SECRET_ACCESS_KEY": envSecret],
            .invalidCredentials("AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY")
        ),
        (["AWS_ACCESS_KEY_ID": envKey, "AWS_SECRET_ACCESS_KEY": "SECRET\nCANARY"], .invalidCredentials("AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY")),
    ])
    func environmentFailures(env: [String: String], reason: AWSChainFailure.Reason) {
        var chain = Self.chain(env: env)
        guard let failure = Self.failure(chain.start()) else { return }
        #expect(failure.reason == reason)
        #expect(failure.link == .environment)
        Self.expectNoCanary(failure.description)
    }

    // MARK: Shared files: static keys

    @Test(arguments: [
        // The credentials file's section, by its plain name.
        ([:], nil as String?, "[default]\naws_access_key_id = \(fileKey)\naws_secret_access_key = \(fileSecret)\n", "default"),
        // The config file's [default].
        ([:], "[default]\naws_access_key_id = \(fileKey)\naws_secret_access_key = \(fileSecret)\n", nil, "default"),
        // AWS_PROFILE picks [profile dev] of the config file; keys are case-insensitive.
        (
            ["AWS_PROFILE": "dev"], "[profile dev]\nAWS_ACCESS_KEY_ID=\(fileKey)\n; comment\n# comment\nAws_Secret_Access_Key: \(fileSecret)\n", nil,
            "dev"
        ),
        // The credentials file wins over the config file for the same profile.
        (
            ["AWS_PROFILE": "dev"], "[profile dev]\naws_access_key_id = AKIAOTHER\naws_secret_access_key = other\n",
            "[dev]\naws_access_key_id = \(fileKey)\naws_secret_access_key = \(fileSecret)\n", "dev"
        ),
        // Files elsewhere.
        (
            ["AWS_SHARED_CREDENTIALS_FILE": "/etc/aws/creds", "AWS_PROFILE": "x"], nil, nil, "x"
        ),
    ])
    func staticKeysOfAProfile(env: [String: String], config: String?, credentials: String?, profile: String) {
        let files = ["/etc/aws/creds": "[x]\naws_access_key_id = \(Self.fileKey)\naws_secret_access_key = \(Self.fileSecret)\n"]
        var chain = Self.chain(env: env, config: config, credentials: credentials, files: files)
        Self.expectFinished(chain.start(), key: Self.fileKey, source: .profile(profile))
    }

    @Test func aProfileWithoutTheSecretIsAnError() {
        var chain = Self.chain(credentials: "[default]\naws_access_key_id = \(Self.fileKey)\n")
        let failure = Self.failure(chain.start())
        #expect(failure?.reason == .partialCredentials(missing: "aws_secret_access_key in \(Self.credentialsPath)"))
    }

    @Test func anAWSProfileThatDoesNotExistIsAnError() {
        var chain = Self.chain(env: ["AWS_PROFILE": "nope"], config: "[default]\nregion = us-east-1\n")
        #expect(Self.failure(chain.start())?.reason == .profileNotFound("nope"))
    }

    @Test func aBrokenFileIsAnErrorWithItsLineAndNoValue() {
        var chain = Self.chain(config: "[default]\nregion = x\nAKIAFILECANARY FILE-SECRET-CANARY\n")
        guard let failure = Self.failure(chain.start()) else { return }
        #expect(failure.reason == .sharedConfig(AWSSharedConfigError(path: Self.configPath, line: 3, problem: .noDelimiter)))
        #expect(failure.description.contains("/home/t/.aws/config:3"))
        Self.expectNoCanary(failure.description)
    }

    // MARK: Profile selection

    @Test func anExplicitProfileIgnoresTheEnvironment() {
        var chain = Self.chain(
            .profile("dev"), env: ["AWS_ACCESS_KEY_ID": Self.envKey, "AWS_SECRET_ACCESS_KEY": Self.envSecret],
            credentials: "[dev]\naws_access_key_id = \(Self.fileKey)\naws_secret_access_key = \(Self.fileSecret)\n")
        Self.expectFinished(chain.start(), key: Self.fileKey, source: .profile("dev"))
    }

    @Test func anExplicitProfileMustExist() {
        let env = ["HOME": Self.home]
        let files = [Self.credentialsPath: "[dev]\naws_access_key_id = A\naws_secret_access_key = B\n"]
        var chain = AWSCredentialChain(selection: .profile("prod"), environment: env, readFile: { files[$0].map { Array($0.utf8) } }, now: Self.now)
        #expect(Self.failure(chain.start())?.reason == .profileNotFound("prod"))
        let problem = AWSCredentialChain.validate(selection: .profile("prod"), environment: env, readFile: { files[$0].map { Array($0.utf8) } })
        #expect(problem?.reason == .profileNotFound("prod"))
        #expect(problem?.description == "aws credentials: profile 'prod' is in neither the config nor the credentials file")
        #expect(AWSCredentialChain.validate(selection: .profile("dev"), environment: env, readFile: { files[$0].map { Array($0.utf8) } }) == nil)
    }

    @Test func anExplicitProfileWithNothingUsableSaysWhereItLooked() {
        var chain = Self.chain(.profile("dev"), config: "[profile dev]\nregion = eu-west-1\n")
        let failure = Self.failure(chain.start())
        #expect(failure?.reason == .noCredentials(lookedAt: ["profile 'dev' in \(Self.configPath) and \(Self.credentialsPath)"]))
    }

    // MARK: credential_process

    @Test func credentialProcessRunsTheSplitWordsAndReadsItsOutput() {
        var chain = Self.chain(config: #"[default]\#ncredential_process = /usr/bin/get-creds --profile 'my dev' "a \"b\"" c\ d\#n"#)
        #expect(chain.start() == .run(argv: ["/usr/bin/get-creds", "--profile", "my dev", #"a "b""#, "c d"]))
        let output =
            #"{"Version": 1, "AccessKeyId": "ASIAPROCCANARY", "SecretAccessKey": "PROC-SECRET-CANARY", "SessionToken": "PROC-TOKEN-CANARY", "Expiration": "2026-12-02T11:00:00Z"}"#
        let step = chain.resume(.commandOutput(Array(output.utf8)))
        Self.expectFinished(step, key: "ASIAPROCCANARY", source: .process(profile: "default"))
        if case .finished(let credentials, _) = step { #expect(credentials.expiration == 1_796_209_200) }
    }

    @Test(arguments: [
        (
            AWSChainInput.commandFailed("exited with status 1"),
            "aws credentials (credential_process of profile 'default'): credential_process exited with status 1"
        ),
        (
            .commandOutput(Array(#"{"Version": 2, "AccessKeyId": "A", "SecretAccessKey": "SECRET-CANARY"}"#.utf8)),
            "credential_process output: invalid response: Version is not 1"
        ),
        (.commandOutput(Array("SECRET-CANARY".utf8)), "credential_process output: invalid response"),
        (
            .commandOutput(Array(#"{"Version": 1, "AccessKeyId": "A", "SecretAccessKey": "S", "Expiration": "2020-01-01T00:00:00Z"}"#.utf8)),
            "already expired"
        ),
        (.response(status: 200, body: []), "the runner answered a step that was not asked for"),
    ])
    func credentialProcessFailures(input: AWSChainInput, words: String) {
        var chain = Self.chain(config: "[default]\ncredential_process = get-creds\n")
        #expect(chain.start() == .run(argv: ["get-creds"]))
        guard let failure = Self.failure(chain.resume(input)) else { return }
        #expect(failure.description.contains(words), "\(failure.description)")
        Self.expectNoCanary(failure.description)
    }

    @Test func anUnsplittableCredentialProcessIsAnError() {
        var chain = Self.chain(config: "[default]\ncredential_process = get-creds 'unclosed\n")
        #expect(
            Self.failure(chain.start())?.reason
                == .invalidProfile(profile: "default", problem: "has a credential_process that does not split into words"))
    }

    // MARK: AssumeRole

    static let roleConfig = """
        [profile dev]
        role_arn = arn:aws:iam::123456789012:role/dev
        source_profile = base
        role_session_name = me
        external_id = ext-1
        duration_seconds = 1800
        region = eu-west-1
        """
    static let baseCredentials = "[base]\naws_access_key_id = \(fileKey)\naws_secret_access_key = \(fileSecret)\n"

    @Test func roleArnWithSourceProfileSendsASignedAssumeRole() throws {
        var chain = Self.chain(.profile("dev"), config: Self.roleConfig, credentials: Self.baseCredentials)
        guard case .send(let request) = chain.start() else {
            Issue.record("expected a request")
            return
        }
        #expect(request.origin.description == "https://sts.eu-west-1.amazonaws.com")
        #expect(request.purpose == "STS AssumeRole")
        let text = Self.text(request.bytes)
        let body =
            "Action=AssumeRole&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fdev&RoleSessionName=me&ExternalId=ext-1&DurationSeconds=1800"
        #expect(text.hasPrefix("POST / HTTP/1.1\r\nHost: sts.eu-west-1.amazonaws.com\r\n"))
        #expect(text.hasSuffix("\r\n\r\n" + body))
        #expect(text.contains("Content-Length: \(body.utf8.count)\r\n"))
        #expect(text.contains("Connection: close\r\n"))
        #expect(text.contains("X-Amz-Date: 20261202T102226Z\r\n"))
        #expect(text.contains("Authorization: AWS4-HMAC-SHA256 Credential=\(Self.fileKey)/20261202/eu-west-1/sts/aws4_request, "))
        #expect(!text.contains(Self.fileSecret))
        #expect(!text.contains("X-Amz-Security-Token"))
        // The signature is the signer's over these exact fields (botocore checks it in the fixture test).
        let signer = try AWSSigV4Signer(
            service: "sts", region: "eu-west-1",
            credentials: try AWSCredentials(accessKeyID: Array(Self.fileKey.utf8), secretAccessKey: Array(Self.fileSecret.utf8), sessionToken: nil))
        var fields = HTTPFields()
        fields.append(name: "Content-Type", value: "application/x-www-form-urlencoded; charset=utf-8")
        let signature = try signer.sign(
            AWSSigV4Request(
                method: "POST", authority: "sts.eu-west-1.amazonaws.com", path: "/", query: "", fields: fields,
                payloadHash: AWSSigV4.payloadHash(body: Array(body.utf8))),
            at: AWSSigV4Timestamp(secondsSinceEpoch: Self.now))
        let authorization = try #require(signature.fields.first { $0.name == "Authorization" })
        #expect(text.contains("Authorization: \(authorization.value)\r\n"))

        let step = chain.resume(.response(status: 200, body: Array(Self.stsAnswer.utf8)))
        Self.expectFinished(step, key: "ASIAROLECANARY", source: .assumedRole(profile: "dev"))
        if case .finished(let credentials, _) = step {
            #expect(credentials.sessionToken == SecretValue("ROLE-TOKEN-CANARY"))
            #expect(credentials.expiration == Self.now + 3600)
        }
    }

    @Test func aRoleChainAssumesEachRoleWithThePreviousOnesCredentials() {
        let config = """
            [profile top]
            role_arn = arn:aws:iam::1:role/top
            source_profile = middle
            [profile middle]
            role_arn = arn:aws:iam::1:role/middle
            source_profile = base
            """
        var chain = Self.chain(.profile("top"), config: config, credentials: Self.baseCredentials)
        guard case .send(let first) = chain.start() else {
            Issue.record("expected a request")
            return
        }
        // No region anywhere: the global endpoint, signed for us-east-1; the default session name.
        #expect(first.origin.description == "https://sts.amazonaws.com")
        let firstText = Self.text(first.bytes)
        #expect(firstText.contains("RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fmiddle&RoleSessionName=scopeproxy-session-\(Self.now)"))
        #expect(firstText.contains("Credential=\(Self.fileKey)/20261202/us-east-1/sts/aws4_request"))
        guard case .send(let second) = chain.resume(.response(status: 200, body: Array(Self.stsAnswer.utf8))) else {
            Issue.record("expected a second request")
            return
        }
        let secondText = Self.text(second.bytes)
        #expect(secondText.contains("RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Ftop"))
        #expect(secondText.contains("Credential=ASIAROLECANARY/"))
        #expect(secondText.contains("X-Amz-Security-Token: ROLE-TOKEN-CANARY\r\n"))
        Self.expectFinished(
            chain.resume(.response(status: 200, body: Array(Self.stsAnswer.utf8))), key: "ASIAROLECANARY", source: .assumedRole(profile: "top"))
    }

    @Test(arguments: [
        // a -> b -> a
        (
            "[profile a]\nrole_arn = arn:r\nsource_profile = b\n[profile b]\nrole_arn = arn:r\nsource_profile = a\n",
            AWSChainFailure.Reason.sourceProfileLoop(["a", "b", "a"])
        ),
        // a names itself without static keys.
        ("[profile a]\nrole_arn = arn:r\nsource_profile = a\n", .sourceProfileLoop(["a", "a"])),
        ("[profile a]\nrole_arn = arn:r\nsource_profile = gone\n", .sourceProfileNotFound(profile: "a", sourceProfile: "gone")),
        ("[profile a]\nrole_arn = arn:r\n", .invalidProfile(profile: "a", problem: "has role_arn but neither source_profile nor credential_source")),
        (
            "[profile a]\nrole_arn = arn:r\nsource_profile = b\ncredential_source = Environment\n[profile b]\n",
            .invalidProfile(profile: "a", problem: "has both source_profile and credential_source")
        ),
        (
            "[profile a]\nrole_arn = arn:r\ncredential_source = Somewhere\n",
            .invalidProfile(profile: "a", problem: "has a credential_source that is not Environment, EcsContainer or Ec2InstanceMetadata")
        ),
        (
            "[profile a]\nrole_arn = arn:r\ncredential_source = Environment\n",
            .invalidProfile(profile: "a", problem: "has credential_source Environment but AWS_ACCESS_KEY_ID is not set")
        ),
        (
            "[profile a]\nrole_arn = arn:r\ncredential_source = Ec2InstanceMetadata\n",
            .invalidProfile(profile: "a", problem: "has credential_source Ec2InstanceMetadata but AWS_EC2_METADATA_DISABLED is true")
        ),
        (
            "[profile a]\nrole_arn = arn:r\nsource_profile = b\n[profile b]\nregion = x\n",
            .invalidProfile(profile: "a", problem: "names source_profile 'b', which has no credentials")
        ),
    ])
    func roleConfigurationFailures(config: String, reason: AWSChainFailure.Reason) {
        var chain = Self.chain(.profile("a"), config: config)
        #expect(Self.failure(chain.start())?.reason == reason)
        let env = ["HOME": Self.home, "AWS_EC2_METADATA_DISABLED": "true"]
        #expect(
            AWSCredentialChain.validate(selection: .profile("a"), environment: env, readFile: { $0 == Self.configPath ? Array(config.utf8) : nil })?
                .reason == reason)
    }

    @Test func aLongRoleChainIsRefused() {
        var config = ""
        for index in 0..<12 { config += "[profile p\(index)]\nrole_arn = arn:r\(index)\nsource_profile = p\(index + 1)\n" }
        config += "[profile p12]\naws_access_key_id = A\naws_secret_access_key = B\n"
        var chain = Self.chain(.profile("p0"), config: config)
        #expect(Self.failure(chain.start())?.reason == .roleChainTooLong(limit: AWSCredentialChain.maxRoleChain))
    }

    @Test func aProfileMayNameItselfWhenItHasStaticKeys() {
        let config =
            "[profile a]\nrole_arn = arn:r\nsource_profile = a\naws_access_key_id = \(Self.fileKey)\naws_secret_access_key = \(Self.fileSecret)\n"
        var chain = Self.chain(.profile("a"), config: config)
        guard case .send(let request) = chain.start() else {
            Issue.record("expected a request")
            return
        }
        #expect(Self.text(request.bytes).contains("Credential=\(Self.fileKey)/"))
    }

    @Test func credentialSourceEnvironmentSignsWithTheEnvironmentKeys() {
        let config = "[default]\nrole_arn = arn:r\ncredential_source = Environment\n"
        // In the default chain, environment keys come first: an explicit profile reaches the role.
        var chain = Self.chain(.profile("default"), env: ["AWS_ACCESS_KEY_ID": Self.envKey, "AWS_SECRET_ACCESS_KEY": Self.envSecret], config: config)
        guard case .send(let request) = chain.start() else {
            Issue.record("expected a request")
            return
        }
        #expect(Self.text(request.bytes).contains("Credential=\(Self.envKey)/"))
    }

    @Test func credentialSourceEcsContainerFetchesThenAssumes() {
        let config = "[default]\nrole_arn = arn:r\ncredential_source = EcsContainer\n"
        var chain = Self.chain(.profile("default"), env: ["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/creds"], config: config)
        guard case .send(let container) = chain.start() else {
            Issue.record("expected a request")
            return
        }
        #expect(container.origin.description == "http://169.254.170.2")
        let answer =
            #"{"AccessKeyId": "ASIACONTAINER", "SecretAccessKey": "C-SECRET-CANARY", "Token": "C-TOKEN-CANARY", "Expiration": "2026-12-02T11:22:26Z"}"#
        guard case .send(let sts) = chain.resume(.response(status: 200, body: Array(answer.utf8))) else {
            Issue.record("expected STS")
            return
        }
        #expect(Self.text(sts.bytes).contains("Credential=ASIACONTAINER/"))
        Self.expectFinished(
            chain.resume(.response(status: 200, body: Array(Self.stsAnswer.utf8))), key: "ASIAROLECANARY", source: .assumedRole(profile: "default"))
    }

    @Test(arguments: [
        (
            403, #"<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>SECRET-CANARY</Message></Error></ErrorResponse>"#,
            "refused (403 AccessDenied)"
        ),
        (400, #"<ErrorResponse><Error><Code>SECRET-CANARY</Code></Error></ErrorResponse>"#, "refused (400)"),
        (500, "SECRET-CANARY", "refused (500)"),
        (302, "", "answered 302"),
        (200, "<AssumeRoleResponse><AssumeRoleResult></AssumeRoleResult></AssumeRoleResponse>", "no Credentials element"),
        (200, "<AssumeRoleResponse><!DOCTYPE x></AssumeRoleResponse>", "XML comments, CDATA, DTDs"),
    ])
    func stsFailuresSayTheCodeNeverTheMessage(status: Int, body: String, words: String) {
        var chain = Self.chain(.profile("dev"), config: Self.roleConfig, credentials: Self.baseCredentials)
        _ = chain.start()
        guard let failure = Self.failure(chain.resume(.response(status: status, body: Array(body.utf8)))) else { return }
        #expect(failure.link == .assumedRole(profile: "dev"))
        #expect(failure.description.contains(words), "\(failure.description)")
        Self.expectNoCanary(failure.description)
    }

    @Test func aTransportFailureNamesTheLink() {
        var chain = Self.chain(.profile("dev"), config: Self.roleConfig, credentials: Self.baseCredentials)
        _ = chain.start()
        let failure = Self.failure(chain.resume(.requestFailed(.connectTimeout)))
        #expect(failure?.reason == .request(.connectTimeout))
        #expect(failure?.reason.code == "connect_timeout")
        #expect(failure?.description == "aws credentials (assumed role of profile 'dev'): connecting to the endpoint timed out")
    }

    // MARK: Web identity

    @Test func webIdentityFromTheEnvironmentSendsTheTokenUnsigned() {
        let env = [
            "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/token", "AWS_ROLE_ARN": "arn:aws:iam::1:role/web", "AWS_ROLE_SESSION_NAME": "pod",
            "AWS_ENDPOINT_URL_STS": "http://127.0.0.1:9", "AWS_REGION": "eu-central-1",
        ]
        var chain = Self.chain(env: env, files: ["/var/run/token": "JWT-TOKEN-CANARY"])
        guard case .send(let request) = chain.start() else {
            Issue.record("expected a request")
            return
        }
        #expect(request.origin.description == "http://127.0.0.1:9")
        let text = Self.text(request.bytes)
        #expect(text.hasPrefix("POST / HTTP/1.1\r\nHost: 127.0.0.1:9\r\n"))
        #expect(
            text.hasSuffix(
                "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fweb&RoleSessionName=pod&WebIdentityToken=JWT-TOKEN-CANARY"
            ))
        #expect(!text.contains("Authorization"))
        let answer = Self.stsAnswer.replacingOccurrences(of: "AssumeRoleResponse", with: "AssumeRoleWithWebIdentityResponse")
            .replacingOccurrences(of: "AssumeRoleResult", with: "AssumeRoleWithWebIdentityResult")
        Self.expectFinished(chain.resume(.response(status: 200, body: Array(answer.utf8))), key: "ASIAROLECANARY", source: .webIdentity(profile: nil))
    }

    @Test func webIdentityFailures() {
        var missingRole = Self.chain(env: ["AWS_WEB_IDENTITY_TOKEN_FILE": "/t"])
        #expect(Self.failure(missingRole.start())?.reason == .partialCredentials(missing: "AWS_ROLE_ARN (or role_arn)"))
        var unreadable = Self.chain(env: ["AWS_WEB_IDENTITY_TOKEN_FILE": "/t", "AWS_ROLE_ARN": "arn:r"])
        #expect(Self.failure(unreadable.start())?.reason == .unreadableFile(path: "/t", setting: "AWS_WEB_IDENTITY_TOKEN_FILE"))
        // The AssumeRole response of the wrong action is not taken.
        var wrong = Self.chain(env: ["AWS_WEB_IDENTITY_TOKEN_FILE": "/t", "AWS_ROLE_ARN": "arn:r"], files: ["/t": "jwt"])
        _ = wrong.start()
        #expect(
            Self.failure(wrong.resume(.response(status: 200, body: Array(Self.stsAnswer.utf8))))?.reason
                == .response(.malformed("not an AssumeRoleWithWebIdentity response")))
    }

    @Test func webIdentityInAProfile() {
        let config = "[profile w]\nweb_identity_token_file = ~/token\nrole_arn = arn:aws:iam::1:role/w\n"
        var chain = Self.chain(.profile("w"), config: config, files: ["/home/t/token": "jwt"])
        guard case .send(let request) = chain.start() else {
            Issue.record("expected a request")
            return
        }
        #expect(Self.text(request.bytes).contains("WebIdentityToken=jwt"))
        #expect(request.purpose == "STS AssumeRoleWithWebIdentity")
    }

    // MARK: Container

    @Test func containerRelativeURIWithATokenFile() {
        let env = ["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/abc?x=1", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": "/var/token"]
        var chain = Self.chain(env: env, files: ["/var/token": "AUTH-TOKEN-CANARY"])
        guard case .send(let request) = chain.start() else {
            Issue.record("expected a request")
            return
        }
        #expect(request.origin.description == "http://169.254.170.2")
        #expect(
            Self.text(request.bytes)
                == "GET /v2/credentials/abc?x=1 HTTP/1.1\r\nHost: 169.254.170.2\r\nAccept: application/json\r\nAuthorization: AUTH-TOKEN-CANARY\r\nUser-Agent: scopeproxy\r\nConnection: close\r\n\r\n"
        )
        let answer = #"{"AccessKeyId": "ASIACONTAINER", "SecretAccessKey": "s", "Token": "t", "Expiration": "2026-12-02T11:22:26Z"}"#
        Self.expectFinished(chain.resume(.response(status: 200, body: Array(answer.utf8))), key: "ASIACONTAINER", source: .container)
    }

    @Test(arguments: [
        ("https://creds.example/x", "https://creds.example"),
        ("http://127.0.0.1:8080/creds", "http://127.0.0.1:8080"),
        ("http://localhost/creds", "http://localhost"),
        ("http://169.254.170.23/v1/credentials", "http://169.254.170.23"),
        ("http://[fd00:ec2::23]/v1/credentials", "http://[fd00:ec2::23]"),
    ])
    func containerFullURIsThatAreAllowed(uri: String, origin: String) {
        var chain = Self.chain(env: ["AWS_CONTAINER_CREDENTIALS_FULL_URI": uri, "AWS_CONTAINER_AUTHORIZATION_TOKEN": "tok"])
        guard case .send(let request) = chain.start() else {
            Issue.record("expected a request")
            return
        }
        #expect(request.origin.description == origin)
        #expect(Self.text(request.bytes).contains("Authorization: tok\r\n"))
    }

    @Test(arguments: [
        (["AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://creds.example/x"], "AWS_CONTAINER_CREDENTIALS_FULL_URI is http to a host other than"),
        (["AWS_CONTAINER_CREDENTIALS_FULL_URI": "ftp://x/"], "AWS_CONTAINER_CREDENTIALS_FULL_URI is not an http(s) URL"),
        (["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "v2/x"], "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI is not a path"),
        (
            ["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/x", "AWS_CONTAINER_AUTHORIZATION_TOKEN": "a\r\nX-Injected: SECRET"],
            "holds characters a header cannot carry"
        ),
        (["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/x", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": "/missing"], "cannot read /missing"),
    ])
    func containerFailures(env: [String: String], words: String) {
        var chain = Self.chain(env: env)
        guard let failure = Self.failure(chain.start()) else { return }
        #expect(failure.description.contains(words), "\(failure.description)")
        #expect(failure.link == .container)
        Self.expectNoCanary(failure.description)
    }

    // MARK: Instance metadata

    @Test func instanceMetadataAsksForATokenThenTheRoleThenItsCredentials() {
        var chain = Self.chain(env: ["AWS_EC2_METADATA_DISABLED": "false", "AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://127.0.0.1:9"])
        guard case .send(let put) = chain.start() else {
            Issue.record("expected a request")
            return
        }
        #expect(
            Self.text(put.bytes)
                == "PUT /latest/api/token HTTP/1.1\r\nHost: 127.0.0.1:9\r\nX-aws-ec2-metadata-token-ttl-seconds: 21600\r\nContent-Length: 0\r\nUser-Agent: scopeproxy\r\nConnection: close\r\n\r\n"
        )
        guard case .send(let list) = chain.resume(.response(status: 200, body: Array("IMDS-TOKEN".utf8))) else {
            Issue.record("expected the role list")
            return
        }
        #expect(
            Self.text(list.bytes)
                == "GET /latest/meta-data/iam/security-credentials/ HTTP/1.1\r\nHost: 127.0.0.1:9\r\nX-aws-ec2-metadata-token: IMDS-TOKEN\r\nUser-Agent: scopeproxy\r\nConnection: close\r\n\r\n"
        )
        guard case .send(let get) = chain.resume(.response(status: 200, body: Array("my-role\n".utf8))) else {
            Issue.record("expected the credentials")
            return
        }
        #expect(Self.text(get.bytes).hasPrefix("GET /latest/meta-data/iam/security-credentials/my-role HTTP/1.1\r\n"))
        #expect(Self.text(get.bytes).contains("X-aws-ec2-metadata-token: IMDS-TOKEN\r\n"))
        let answer = #"{"Code": "Success", "AccessKeyId": "ASIAIMDS", "SecretAccessKey": "s", "Token": "t", "Expiration": "2026-12-02T16:22:26Z"}"#
        Self.expectFinished(chain.resume(.response(status: 200, body: Array(answer.utf8))), key: "ASIAIMDS", source: .instanceMetadata)
    }

    @Test func instanceMetadataEndpointModes() {
        var ipv6 = Self.chain(env: ["AWS_EC2_METADATA_DISABLED": "", "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE": "IPv6"])
        guard case .send(let request) = ipv6.start() else {
            Issue.record("expected a request")
            return
        }
        #expect(request.origin.description == "http://[fd00:ec2::254]")
        // Described, not started: the default IPv4 address (nothing here ever connects).
        #expect(
            AWSCredentialChain.describe(selection: .defaultChain, environment: [:], readFile: { _ in nil })
                == "EC2 instance metadata http://169.254.169.254")
        var bad = Self.chain(env: ["AWS_EC2_METADATA_DISABLED": "", "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE": "IPv5"])
        #expect(
            Self.failure(bad.start())?.reason
                == .invalidSetting(variable: "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", problem: "is neither IPv4 nor IPv6"))
    }

    @Test(arguments: [
        (401, "", "answered 401"),
        (200, "role/../../x", "not an IAM role name"),
    ])
    func instanceMetadataRoleFailures(status: Int, body: String, words: String) {
        var chain = Self.chain(env: ["AWS_EC2_METADATA_DISABLED": "no", "AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://127.0.0.1:9"])
        _ = chain.start()
        _ = chain.resume(.response(status: 200, body: Array("t".utf8)))
        let failure = Self.failure(chain.resume(.response(status: status, body: Array(body.utf8))))
        #expect(failure?.description.contains(words) == true, "\(failure?.description ?? "")")
        #expect(failure?.link == .instanceMetadata)
    }

    @Test func nothingConfiguredSaysWhereItLooked() {
        var chain = Self.chain(env: ["AWS_PROFILE": ""])
        let failure = Self.failure(chain.start())
        #expect(
            failure?.description
                == "aws credentials: no credentials found (looked at: environment (AWS_ACCESS_KEY_ID); AWS_WEB_IDENTITY_TOKEN_FILE; profile 'default' in /home/t/.aws/config and /home/t/.aws/credentials; container endpoint (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI, AWS_CONTAINER_CREDENTIALS_FULL_URI); EC2 instance metadata (disabled by AWS_EC2_METADATA_DISABLED))"
        )
    }

    // MARK: Order (botocore's)

    @Test func aProfileRoleComesBeforeWebIdentityAndWebIdentityBeforeFileKeys() {
        let env = ["AWS_WEB_IDENTITY_TOKEN_FILE": "/t", "AWS_ROLE_ARN": "arn:web"]
        var role = Self.chain(
            env: env, config: "[default]\nrole_arn = arn:r\nsource_profile = base\n", credentials: Self.baseCredentials, files: ["/t": "jwt"])
        guard case .send(let first) = role.start() else { return }
        #expect(first.purpose == "STS AssumeRole")
        var web = Self.chain(env: env, credentials: "[default]\naws_access_key_id = A\naws_secret_access_key = B\n", files: ["/t": "jwt"])
        guard case .send(let second) = web.start() else { return }
        #expect(second.purpose == "STS AssumeRoleWithWebIdentity")
        // File keys before the container endpoint.
        var keys = Self.chain(
            env: ["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/x"], credentials: "[default]\naws_access_key_id = A\naws_secret_access_key = B\n")
        Self.expectFinished(keys.start(), key: "A", source: .profile("default"))
    }

    // MARK: STS endpoint and region

    @Test(arguments: [
        (["AWS_DEFAULT_REGION": "ap-south-1"], "https://sts.ap-south-1.amazonaws.com", "ap-south-1"),
        (["AWS_REGION": "eu-north-1", "AWS_DEFAULT_REGION": "ap-south-1"], "https://sts.eu-north-1.amazonaws.com", "eu-north-1"),
        (["AWS_ENDPOINT_URL": "http://127.0.0.1:7"], "http://127.0.0.1:7", "us-east-1"),
        (
            ["AWS_ENDPOINT_URL_STS": "http://127.0.0.1:8", "AWS_ENDPOINT_URL": "http://127.0.0.1:7", "AWS_REGION": "eu-west-3"], "http://127.0.0.1:8",
            "eu-west-3"
        ),
        (["AWS_ENDPOINT_URL_STS": "http://127.0.0.1:8", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"], "https://sts.amazonaws.com", "us-east-1"),
    ])
    func stsEndpointAndSigningRegion(env: [String: String], origin: String, region: String) {
        var chain = Self.chain(env: env, config: "[default]\nrole_arn = arn:r\nsource_profile = base\n", credentials: Self.baseCredentials)
        guard case .send(let request) = chain.start() else {
            Issue.record("expected a request")
            return
        }
        #expect(request.origin.description == origin)
        #expect(Self.text(request.bytes).contains("/20261202/\(region)/sts/aws4_request"))
    }

    @Test func aBadRegionFailsOnlyWhatCallsSTS() {
        let env = ["AWS_REGION": "EU WEST"]
        var keys = Self.chain(env: env, credentials: Self.baseCredentials.replacingOccurrences(of: "[base]", with: "[default]"))
        Self.expectFinished(keys.start(), key: Self.fileKey, source: .profile("default"))
        var role = Self.chain(env: env, config: "[default]\nrole_arn = arn:r\nsource_profile = base\n", credentials: Self.baseCredentials)
        #expect(Self.failure(role.start())?.reason == .invalidSetting(variable: "AWS_REGION", problem: "is not a region name"))
        var endpoint = Self.chain(
            env: ["AWS_ENDPOINT_URL_STS": "sts.example"], config: "[default]\nrole_arn = arn:r\nsource_profile = base\n",
            credentials: Self.baseCredentials)
        #expect(Self.failure(endpoint.start())?.reason == .invalidSetting(variable: "AWS_ENDPOINT_URL_STS", problem: "is not scheme://host[:port]"))
    }

    @Test func environmentExpiration() {
        var chain = Self.chain(env: ["AWS_ACCESS_KEY_ID": "A", "AWS_SECRET_ACCESS_KEY": "S", "AWS_CREDENTIAL_EXPIRATION": "2026-12-02T11:00:00Z"])
        guard case .finished(let credentials, _) = chain.start() else {
            Issue.record("expected finished")
            return
        }
        #expect(credentials.expiration == 1_796_209_200)
        var past = Self.chain(env: ["AWS_ACCESS_KEY_ID": "A", "AWS_SECRET_ACCESS_KEY": "S", "AWS_CREDENTIAL_EXPIRATION": "2020-01-01T00:00:00Z"])
        #expect(Self.failure(past.start())?.reason == .expired)
        var bad = Self.chain(env: ["AWS_ACCESS_KEY_ID": "A", "AWS_SECRET_ACCESS_KEY": "S", "AWS_CREDENTIAL_EXPIRATION": "soon"])
        #expect(Self.failure(bad.start())?.reason == .invalidSetting(variable: "AWS_CREDENTIAL_EXPIRATION", problem: "is not an RFC 3339 time"))
    }

    @Test func awsDefaultProfileComesBeforeAWSProfile() {
        let credentials = "[a]\naws_access_key_id = AKIAA\naws_secret_access_key = s\n[b]\naws_access_key_id = AKIAB\naws_secret_access_key = s\n"
        var chain = Self.chain(env: ["AWS_DEFAULT_PROFILE": "b", "AWS_PROFILE": "a"], credentials: credentials)
        Self.expectFinished(chain.start(), key: "AKIAB", source: .profile("b"))
    }

    /// Every configuration kind, resumed with fixed-seed garbage: the chain ends (finished or
    /// failed) within a few steps and never traps.
    @Test func garbageAnswersNeverTrap() {
        var state: UInt64 = 0xC0FF_EE00_1234_ABCD
        func next() -> UInt64 {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return state
        }
        let configurations: [([String: String], String?)] = [
            (["AWS_EC2_METADATA_DISABLED": "", "AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://127.0.0.1:9"], nil),
            (["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/x"], nil),
            ([:], "[default]\ncredential_process = x\n"),
            (
                ["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/x"],
                "[default]\nrole_arn = arn:r\nsource_profile = b\n[profile b]\nrole_arn = arn:s\ncredential_source = EcsContainer\n"
            ),
        ]
        let pieces = [
            Self.stsAnswer, #"{"Code": "Success", "AccessKeyId": "A", "SecretAccessKey": "S", "Token": "T", "Expiration": "2026-12-02T16:22:26Z"}"#,
            "role",
            "<ErrorResponse><Error><Code>Throttling</Code></Error></ErrorResponse>", "",
        ]
        for round in 0..<600 {
            let (env, config) = configurations[round % configurations.count]
            var chain = Self.chain(env: env, config: config)
            var step = chain.start()
            var steps = 0
            while steps < 10 {
                steps += 1
                var body = Array(pieces[Int(next() % UInt64(pieces.count))].utf8)
                if !body.isEmpty, next() % 2 == 0 { body[Int(next() % UInt64(body.count))] = UInt8(truncatingIfNeeded: next()) }
                let input: AWSChainInput
                switch next() % 5 {
                case 0: input = .requestFailed(.refused)
                case 1: input = .commandOutput(body)
                case 2: input = .commandFailed("timed out")
                default: input = .response(status: [200, 200, 403, 500][Int(next() % 4)], body: body)
                }
                switch step {
                case .finished, .failed: steps = 99
                case .send, .run: step = chain.resume(input)
                }
            }
            #expect(steps == 99)
        }
    }

    // MARK: describe

    @Test func describeNamesTheLinkNeverAValue() {
        let files = [Self.configPath: Self.roleConfig, Self.credentialsPath: Self.baseCredentials]
        let read: (String) -> [UInt8]? = { files[$0].map { Array($0.utf8) } }
        let text = AWSCredentialChain.describe(selection: .profile("dev"), environment: ["HOME": Self.home], readFile: read)
        #expect(
            text
                == "profile 'dev' (role_arn arn:aws:iam::123456789012:role/dev via source_profile 'base': profile 'base' (static keys in /home/t/.aws/credentials)) at STS https://sts.eu-west-1.amazonaws.com"
        )
        Self.expectNoCanary(text)
        let env = AWSCredentialChain.describe(
            selection: .defaultChain, environment: ["AWS_ACCESS_KEY_ID": Self.envKey, "AWS_SECRET_ACCESS_KEY": Self.envSecret], readFile: read)
        #expect(env == "environment (AWS_ACCESS_KEY_ID)")
        let process = AWSCredentialChain.describe(
            selection: .profile("p"), environment: ["HOME": Self.home],
            readFile: { $0 == Self.configPath ? Array("[profile p]\ncredential_process = get --secret SECRET-CANARY\n".utf8) : nil })
        #expect(process == "profile 'p' (credential_process)")
        let missing = AWSCredentialChain.describe(selection: .profile("x"), environment: ["HOME": Self.home], readFile: read)
        #expect(missing == "none: aws credentials: profile 'x' is in neither the config nor the credentials file")
    }

    @Test func aStartedChainRefusesInputsItDidNotAskFor() {
        var chain = Self.chain(credentials: "[default]\naws_access_key_id = A\naws_secret_access_key = B\n")
        _ = chain.start()
        #expect(Self.failure(chain.resume(.commandOutput([])))?.reason == .unexpectedInput)
        #expect(Self.failure(chain.start())?.reason == .unexpectedInput)
    }
}
