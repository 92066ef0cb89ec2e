import Foundation
import ProxyCore
import ScopePolicy
import TestSupport
import Testing

/// The AWS credential chain against independent references on loopback: an STS that re-signs
/// every AssumeRole with botocore and checks AssumeRoleWithWebIdentity's token
/// (Tests/Fixtures/aws_sts.py), and an IMDSv2 / container endpoint that refuses what EC2 and ECS
/// refuse (Tests/Fixtures/aws_metadata.py). Each test pins AWS_ENDPOINT_URL_STS and
/// AWS_EC2_METADATA_SERVICE_ENDPOINT (or disables IMDS), and the driver refuses any origin but
/// 127.0.0.1: nothing here ever reaches 169.254.169.254 or a real STS.
@Suite(.serialized) struct AWSCredentialChainFixtureTests {
    static let sourceKey = "AKIASOURCECANARY"
    static let sourceSecret = "SOURCE-SECRET-CANARY"
    static let roleKey = "ASIAROLECANARY"
    static let roleSecret = "ROLE-SECRET-CANARY"
    static let roleToken = "ROLE-TOKEN-CANARY"

    static func stsFixture(extra: [String] = []) throws -> AWSCredentialFixture {
        try AWSCredentialFixture(
            script: "aws_sts.py",
            arguments: [
                "--source", sourceKey, sourceSecret, "-", "--region", "eu-west-1",
                "--role", "arn:aws:iam::123456789012:role/dev", roleKey, roleSecret, roleToken,
                "--role", "arn:aws:iam::123456789012:role/top", "ASIATOPCANARY", "TOP-SECRET-CANARY", "TOP-TOKEN-CANARY",
            ] + extra)
    }

    static func chain(_ selection: AWSCredentialSelection, env: [String: String], directory: ScratchDirectory) -> AWSCredentialChain {
        var environment = [
            "HOME": directory.path, "AWS_EC2_METADATA_DISABLED": "true", "AWS_REGION": "eu-west-1",
            "AWS_CONFIG_FILE": directory.path + "/config", "AWS_SHARED_CREDENTIALS_FILE": directory.path + "/credentials",
        ]
        environment.merge(env) { _, new in new }
        return AWSCredentialChain(
            selection: selection, environment: environment,
            readFile: { FileManager.default.contents(atPath: $0).map { Array($0) } },
            now: Int64(Date().timeIntervalSince1970))
    }

    static func finished(_ step: AWSChainStep, sourceLocation: SourceLocation = #_sourceLocation) -> (AWSTemporaryCredentials, AWSCredentialOrigin)? {
        guard case .finished(let credentials, let origin) = step else {
            Issue.record("expected finished, got \(step)", sourceLocation: sourceLocation)
            return nil
        }
        return (credentials, origin)
    }

    // MARK: STS AssumeRole

    @Test func assumeRoleIsSignedAsBotocoreSignsIt() throws {
        let sts = try Self.stsFixture()
        defer { sts.stop() }
        let directory = ScratchDirectory()
        _ = directory.write(
            "config",
            "[profile dev]\nrole_arn = arn:aws:iam::123456789012:role/dev\nsource_profile = base\nrole_session_name = fixture\nexternal_id = ext-7\nduration_seconds = 900\n"
        )
        _ = directory.write("credentials", "[base]\naws_access_key_id = \(Self.sourceKey)\naws_secret_access_key = \(Self.sourceSecret)\n")
        var chain = Self.chain(.profile("dev"), env: ["AWS_ENDPOINT_URL_STS": sts.url], directory: directory)
        let (steps, result) = try AWSChainDriver.run(&chain)
        #expect(steps == ["STS AssumeRole"])
        guard let (credentials, origin) = Self.finished(result) else { return }
        #expect(origin == .assumedRole(profile: "dev"))
        #expect(credentials.accessKeyID == SecretValue(Self.roleKey))
        #expect(credentials.secretAccessKey == SecretValue(Self.roleSecret))
        #expect(credentials.sessionToken == SecretValue(Self.roleToken))
        #expect((credentials.expiration ?? 0) > Int64(Date().timeIntervalSince1970))
        let verdicts = sts.verdicts
        #expect(verdicts.count == 1)
        #expect(verdicts.first?["verified"] as? Bool == true, "\(verdicts)")
        #expect(verdicts.first?["signed_by"] as? String == Self.sourceKey)
        #expect(verdicts.first?["region"] as? String == "eu-west-1")
        #expect(verdicts.first?["role_session_name"] as? String == "fixture")
        #expect(verdicts.first?["external_id"] as? String == "ext-7")
        #expect(verdicts.first?["duration_seconds"] as? String == "900")
    }

    @Test func aRoleChainIsSignedWithEachPreviousRolesSessionCredentials() throws {
        let sts = try Self.stsFixture()
        defer { sts.stop() }
        let directory = ScratchDirectory()
        _ = directory.write(
            "config",
            "[default]\nrole_arn = arn:aws:iam::123456789012:role/top\nsource_profile = dev\n[profile dev]\nrole_arn = arn:aws:iam::123456789012:role/dev\ncredential_source = Environment\n"
        )
        var chain = Self.chain(
            .defaultChain, env: ["AWS_ENDPOINT_URL_STS": sts.url, "AWS_ACCESS_KEY_ID": ""], directory: directory)
        // credential_source Environment with no keys in the environment is a failure, said plainly.
        let (_, missing) = try AWSChainDriver.run(&chain)
        guard case .failed(let failure) = missing else {
            Issue.record("expected a failure, got \(missing)")
            return
        }
        #expect(failure.description.contains("credential_source Environment but AWS_ACCESS_KEY_ID is not set"))
        // With the keys, an explicit profile reaches the role (the default chain would use the keys).
        var withKeys = Self.chain(
            .profile("default"),
            env: ["AWS_ENDPOINT_URL_STS": sts.url, "AWS_ACCESS_KEY_ID": Self.sourceKey, "AWS_SECRET_ACCESS_KEY": Self.sourceSecret],
            directory: directory)
        let (steps, result) = try AWSChainDriver.run(&withKeys)
        #expect(steps == ["STS AssumeRole", "STS AssumeRole"])
        guard let (credentials, origin) = Self.finished(result) else { return }
        #expect(origin == .assumedRole(profile: "default"))
        #expect(credentials.accessKeyID == SecretValue("ASIATOPCANARY"))
        let verdicts = sts.verdicts
        #expect(verdicts.map { $0["verified"] as? Bool } == [true, true], "\(verdicts)")
        #expect(verdicts.map { $0["signed_by"] as? String } == [Self.sourceKey, Self.roleKey])
        #expect(verdicts.map { $0["role_arn"] as? String } == ["arn:aws:iam::123456789012:role/dev", "arn:aws:iam::123456789012:role/top"])
    }

    @Test func aWrongSignatureIsRefusedAndOnlyTheCodeIsSaid() throws {
        let sts = try Self.stsFixture()
        defer { sts.stop() }
        let directory = ScratchDirectory()
        _ = directory.write("config", "[profile dev]\nrole_arn = arn:aws:iam::123456789012:role/dev\nsource_profile = base\n")
        _ = directory.write("credentials", "[base]\naws_access_key_id = \(Self.sourceKey)\naws_secret_access_key = WRONG-SECRET-CANARY\n")
        var chain = Self.chain(.profile("dev"), env: ["AWS_ENDPOINT_URL_STS": sts.url], directory: directory)
        let (_, result) = try AWSChainDriver.run(&chain)
        guard case .failed(let failure) = result else {
            Issue.record("expected a failure, got \(result)")
            return
        }
        #expect(failure.reason == .response(.rejected(status: 403, code: .accessDenied)))
        #expect(!failure.description.contains("CANARY"))
        #expect(sts.verdicts.first?["verified"] as? Bool == false)
    }

    // MARK: Web identity

    @Test func webIdentitySendsTheTokenFromTheFile() throws {
        let sts = try Self.stsFixture(extra: ["--web-identity-token", "eyJ.JWT-CANARY.sig"])
        defer { sts.stop() }
        let directory = ScratchDirectory()
        let tokenPath = directory.write("token", "eyJ.JWT-CANARY.sig")
        var chain = Self.chain(
            .defaultChain,
            env: ["AWS_ENDPOINT_URL_STS": sts.url, "AWS_WEB_IDENTITY_TOKEN_FILE": tokenPath, "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/dev"],
            directory: directory)
        let (steps, result) = try AWSChainDriver.run(&chain)
        #expect(steps == ["STS AssumeRoleWithWebIdentity"])
        guard let (credentials, origin) = Self.finished(result) else { return }
        #expect(origin == .webIdentity(profile: nil))
        #expect(credentials.accessKeyID == SecretValue(Self.roleKey))
        #expect(sts.verdicts.first?["verified"] as? Bool == true, "\(sts.verdicts)")
        #expect((sts.verdicts.first?["role_session_name"] as? String)?.hasPrefix("scopeproxy-session-") == true)

        // Another token: refused with InvalidIdentityToken, the Message never repeated.
        _ = directory.write("token", "eyJ.OTHER-CANARY.sig")
        var other = Self.chain(
            .defaultChain,
            env: ["AWS_ENDPOINT_URL_STS": sts.url, "AWS_WEB_IDENTITY_TOKEN_FILE": tokenPath, "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/dev"],
            directory: directory)
        let (_, refused) = try AWSChainDriver.run(&other)
        guard case .failed(let failure) = refused else {
            Issue.record("expected a failure, got \(refused)")
            return
        }
        #expect(failure.reason == .response(.rejected(status: 403, code: .invalidIdentityToken)))
        #expect(!failure.description.contains("CANARY"))
    }

    // MARK: Instance metadata and container

    static func metadataFixture(containerToken: String? = nil) throws -> AWSCredentialFixture {
        try AWSCredentialFixture(
            script: "aws_metadata.py",
            arguments: ["--role", "fixture-role", "--credentials", "ASIAMETACANARY", "META-SECRET-CANARY", "META-TOKEN-CANARY"]
                + (containerToken.map { ["--container-token", $0] } ?? []))
    }

    @Test func instanceMetadataUsesIMDSv2() throws {
        let metadata = try Self.metadataFixture()
        defer { metadata.stop() }
        let directory = ScratchDirectory()
        var chain = Self.chain(
            .defaultChain, env: ["AWS_EC2_METADATA_DISABLED": "false", "AWS_EC2_METADATA_SERVICE_ENDPOINT": metadata.url], directory: directory)
        let (steps, result) = try AWSChainDriver.run(&chain)
        #expect(steps == ["IMDSv2 token", "IMDS role name", "IMDS credentials"])
        guard let (credentials, origin) = Self.finished(result) else { return }
        #expect(origin == .instanceMetadata)
        #expect(credentials.accessKeyID == SecretValue("ASIAMETACANARY"))
        #expect(credentials.sessionToken == SecretValue("META-TOKEN-CANARY"))
        let verdicts = metadata.verdicts
        #expect(verdicts.map { $0["kind"] as? String } == ["imds-token", "imds-role", "imds-credentials"])
        #expect(verdicts.allSatisfy { $0["ok"] as? Bool == true }, "\(verdicts)")
    }

    @Test func theContainerEndpointGetsTheAuthorizationToken() throws {
        let metadata = try Self.metadataFixture(containerToken: "AUTH-CANARY")
        defer { metadata.stop() }
        let directory = ScratchDirectory()
        let tokenPath = directory.write("auth", "AUTH-CANARY")
        var chain = Self.chain(
            .defaultChain,
            env: ["AWS_CONTAINER_CREDENTIALS_FULL_URI": metadata.url + "/v2/credentials/x", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": tokenPath],
            directory: directory)
        let (steps, result) = try AWSChainDriver.run(&chain)
        #expect(steps == ["container credentials"])
        guard let (credentials, origin) = Self.finished(result) else { return }
        #expect(origin == .container)
        #expect(credentials.accessKeyID == SecretValue("ASIAMETACANARY"))
        #expect(metadata.verdicts.first?["ok"] as? Bool == true)

        var wrong = Self.chain(
            .defaultChain,
            env: ["AWS_CONTAINER_CREDENTIALS_FULL_URI": metadata.url + "/v2/credentials/x", "AWS_CONTAINER_AUTHORIZATION_TOKEN": "OTHER-CANARY"],
            directory: directory)
        let (_, refused) = try AWSChainDriver.run(&wrong)
        guard case .failed(let failure) = refused else {
            Issue.record("expected a failure, got \(refused)")
            return
        }
        #expect(failure.reason == .response(.unexpectedStatus(401)))
        #expect(failure.link == .container)
        #expect(!failure.description.contains("CANARY"))
    }

    // MARK: credential_process

    @Test func credentialProcessOutputIsRead() throws {
        let python = try #require(SigV4Origin.botocorePython, "no python3 here imports botocore")
        let directory = ScratchDirectory()
        let script = directory.write(
            "creds.py",
            "import json, sys\nprint(json.dumps({'Version': 1, 'AccessKeyId': 'ASIAPROCCANARY', 'SecretAccessKey': sys.argv[1], 'SessionToken': 'PROC-TOKEN-CANARY', 'Expiration': '2999-01-01T00:00:00Z'}))\n"
        )
        _ = directory.write("config", "[default]\ncredential_process = \(python) \(script) PROC-SECRET-CANARY 'an ignored word'\n")
        var chain = Self.chain(.defaultChain, env: [:], directory: directory)
        var ran: [[String]] = []
        let (steps, result) = try AWSChainDriver.run(&chain) { argv in
            ran.append(argv)
            guard let outcome = try? SigV4Origin.runBounded(argv[0], Array(argv.dropFirst()), seconds: 30), outcome.status == 0 else {
                return .commandFailed("exited with an error")
            }
            return .commandOutput(Array(outcome.output.utf8))
        }
        #expect(steps == ["run"])
        #expect(ran == [[python, script, "PROC-SECRET-CANARY", "an ignored word"]])
        guard let (credentials, origin) = Self.finished(result) else { return }
        #expect(origin == .process(profile: "default"))
        #expect(credentials.secretAccessKey == SecretValue("PROC-SECRET-CANARY"))
    }
}
