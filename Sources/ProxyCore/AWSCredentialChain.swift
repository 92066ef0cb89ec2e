import AWSSigV4
import HTTP1Codec
import ScopePolicy

/// The link of the chain that gave the credentials (for `explain`, logs, and failures).
public enum AWSCredentialOrigin: Sendable, Equatable, CustomStringConvertible {
    /// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY [/ AWS_SESSION_TOKEN].
    case environment
    /// STS AssumeRoleWithWebIdentity; the profile when the token file came from one, nil for
    /// AWS_WEB_IDENTITY_TOKEN_FILE.
    case webIdentity(profile: String?)
    /// Static keys of a profile of the shared files.
    case profile(String)
    /// A profile's `credential_process`.
    case process(profile: String)
    /// STS AssumeRole for a profile's `role_arn`.
    case assumedRole(profile: String)
    /// AWS_CONTAINER_CREDENTIALS_RELATIVE_URI / _FULL_URI.
    case container
    /// EC2 instance metadata (IMDSv2).
    case instanceMetadata

    public var description: String {
        switch self {
        case .environment: "environment"
        case .webIdentity(let profile?): "web identity (profile '\(profile)')"
        case .webIdentity(nil): "web identity (environment)"
        case .profile(let name): "profile '\(name)'"
        case .process(let name): "credential_process of profile '\(name)'"
        case .assumedRole(let name): "assumed role of profile '\(name)'"
        case .container: "container endpoint"
        case .instanceMetadata: "EC2 instance metadata"
        }
    }
}

/// One HTTP exchange the chain needs: connect to `origin` (TLS for https), write `bytes` (a whole
/// HTTP/1.1 request with `Connection: close`; it may hold a secret, so never log it), read the
/// response, and `resume` with `.response` or `.requestFailed`.
public struct AWSChainRequest: Sendable, Equatable, CustomStringConvertible, CustomReflectable {
    public let origin: Origin
    public let bytes: [UInt8]
    /// What it is, for logs: "STS AssumeRole", "IMDSv2 token", ...
    public let purpose: String
    /// A bound on connecting and on the answer, tighter than the proxy's timeouts: the instance
    /// metadata service answers within a second where it exists (botocore waits 1 s), and off EC2
    /// the chain's last link must not hold every request for the connect timeout.
    public var timeoutMilliseconds: Int?

    public init(origin: Origin, bytes: [UInt8], purpose: String, timeoutMilliseconds: Int? = nil) {
        self.origin = origin
        self.bytes = bytes
        self.purpose = purpose
        self.timeoutMilliseconds = timeoutMilliseconds
    }

    /// The instance metadata service's bound.
    public static let instanceMetadataTimeoutMilliseconds = 1000

    public var description: String { "\(purpose) at \(origin)" }
    /// `dump` and test failures show what and where, never the bytes (a signature, a token).
    public var customMirror: Mirror { Mirror(self, children: ["purpose": purpose, "origin": origin]) }
}

/// What the chain asks of its runner next.
public enum AWSChainStep: Sendable, Equatable {
    case finished(AWSTemporaryCredentials, source: AWSCredentialOrigin)
    case failed(AWSChainFailure)
    case send(AWSChainRequest)
    /// Run a `credential_process` (argv[0] looked up on PATH, never through a shell) with a
    /// timeout, and resume with its stdout (`.commandOutput`) or `.commandFailed`.
    case run(argv: [String])
}

/// Steps and inputs print without their payloads: credentials, request bytes, a command's
/// arguments (which may carry a secret) and answers are never in a log line or a test failure.
extension AWSChainStep: CustomStringConvertible, CustomReflectable {
    public var description: String {
        switch self {
        case .finished(_, let source): "finished(\(source))"
        case .failed(let failure): "failed(\(failure))"
        case .send(let request): "send(\(request))"
        case .run(let argv): "run(\(argv.count) words)"
        }
    }
    public var customMirror: Mirror { Mirror(self, children: ["step": description]) }
}

extension AWSChainInput: CustomStringConvertible, CustomReflectable {
    public var description: String {
        switch self {
        case .response(let status, let body): "response(\(status), \(body.count) bytes)"
        case .requestFailed(let reason): "requestFailed(\(reason.code))"
        case .commandOutput(let output): "commandOutput(\(output.count) bytes)"
        case .commandFailed(let words): "commandFailed(\(words))"
        }
    }
    public var customMirror: Mirror { Mirror(self, children: ["input": description]) }
}

/// What the runner reports back.
public enum AWSChainInput: Sendable, Equatable {
    case response(status: Int, body: [UInt8])
    case requestFailed(TokenFailure.Reason)
    case commandOutput([UInt8])
    /// Fixed words (`exited with status 1`, `timed out`), never the command's output.
    case commandFailed(String)
}

/// Why no credentials: fixed texts, paths, profile and variable names, never a value.
public struct AWSChainFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Reason: Sendable, Equatable {
        /// Nothing configured anywhere: what was looked at.
        case noCredentials(lookedAt: [String])
        case profileNotFound(String)
        case sourceProfileNotFound(profile: String, sourceProfile: String)
        /// A `source_profile` cycle: the profiles in the order they were visited.
        case sourceProfileLoop([String])
        case roleChainTooLong(limit: Int)
        /// A profile's settings do not make sense (the proxy's words).
        case invalidProfile(profile: String, problem: String)
        /// An environment variable's value is not usable (named, not shown).
        case invalidSetting(variable: String, problem: String)
        /// One of a pair of settings without the other (e.g. the key id without the secret).
        case partialCredentials(missing: String)
        /// Credentials that were there but cannot be sent (characters, length).
        case invalidCredentials(String)
        case sharedConfig(AWSSharedConfigError)
        case unreadableFile(path: String, setting: String)
        case request(TokenFailure.Reason)
        case response(AWSCredentialResponse.Problem)
        case commandFailed(String)
        case commandOutput(AWSCredentialResponse.Problem)
        /// The source answered credentials that had already expired.
        case expired
        /// The runner resumed with an input this step did not ask for.
        case unexpectedInput

        /// A short fixed text for a log field or metric label.
        public var code: String {
            switch self {
            case .noCredentials: "no_credentials"
            case .profileNotFound: "profile_not_found"
            case .sourceProfileNotFound: "source_profile_not_found"
            case .sourceProfileLoop: "source_profile_loop"
            case .roleChainTooLong: "role_chain_too_long"
            case .invalidProfile: "invalid_profile"
            case .invalidSetting: "invalid_setting"
            case .partialCredentials: "partial_credentials"
            case .invalidCredentials: "invalid_credentials"
            case .sharedConfig: "shared_config"
            case .unreadableFile: "unreadable_file"
            case .request(let reason): reason.code
            case .response(let problem): problem.code
            case .commandFailed: "command_failed"
            case .commandOutput: "command_output"
            case .expired: "expired"
            case .unexpectedInput: "unexpected_input"
            }
        }
    }

    /// The link that failed; nil before one was chosen (a profile missing, a file unreadable).
    public let link: AWSCredentialOrigin?
    public let reason: Reason

    public init(link: AWSCredentialOrigin?, reason: Reason) {
        self.link = link
        self.reason = reason
    }

    public var description: String {
        let why: String
        switch reason {
        case .noCredentials(let places): why = "no credentials found (looked at: \(places.joined(separator: "; ")))"
        case .profileNotFound(let name): why = "profile '\(name)' is in neither the config nor the credentials file"
        case .sourceProfileNotFound(let profile, let source): why = "profile '\(profile)' names source_profile '\(source)', which does not exist"
        case .sourceProfileLoop(let visited): why = "source_profile loop: \(visited.map { "'\($0)'" }.joined(separator: " -> "))"
        case .roleChainTooLong(let limit): why = "more than \(limit) profiles chained through source_profile"
        case .invalidProfile(let profile, let problem): why = "profile '\(profile)' \(problem)"
        case .invalidSetting(let variable, let problem): why = "\(variable) \(problem)"
        case .partialCredentials(let missing): why = "\(missing) is missing"
        case .invalidCredentials(let what): why = "\(what): a value is empty, too long or holds characters a header cannot carry"
        case .sharedConfig(let error): why = error.description
        case .unreadableFile(let path, let setting): why = "cannot read \(path) (\(setting))"
        case .request(let reason): why = Self.describe(reason)
        case .response(let problem): why = problem.description
        case .commandFailed(let words): why = "credential_process \(words)"
        case .commandOutput(let problem): why = "credential_process output: \(problem.description)"
        case .expired: why = "the credentials it gave have already expired"
        case .unexpectedInput: why = "the runner answered a step that was not asked for"
        }
        return "aws credentials" + (link.map { " (\($0))" } ?? "") + ": " + why
    }

    static func describe(_ reason: TokenFailure.Reason) -> String {
        switch reason {
        case .dnsFailure: "cannot resolve the endpoint"
        case .refused: "cannot connect to the endpoint"
        case .connectTimeout: "connecting to the endpoint timed out"
        case .responseTimeout: "the endpoint did not answer in time"
        case .tlsVerification(let detail): "the endpoint's certificate failed verification: \(detail)"
        case .tlsHandshake: "the TLS handshake with the endpoint failed"
        case .closedEarly: "the endpoint closed the connection before its response ended"
        case .responseTooLarge(let limit): "the response is larger than \(limit) bytes"
        default: "the request failed (\(reason.code))"
        }
    }
}

/// The AWS SDKs' credential chain as a pure state machine: it reads the environment and the
/// shared files it is given (never the process's), decides which link applies, and asks its runner
/// for each HTTP exchange or command; it never opens a socket, runs anything, or reads a clock.
///
/// Order and rules follow botocore (`credentials.create_credential_resolver`), which the AWS SDK
/// docs ("Standardized credential providers") describe and where they differ botocore wins:
/// 1. environment: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY [+ AWS_SESSION_TOKEN or
///    AWS_SECURITY_TOKEN]; a key id without the secret is an error.
/// 2. the profile (AWS_DEFAULT_PROFILE, AWS_PROFILE, else `default`; a variable that names no
///    profile is an error, as botocore's session raises ProfileNotFound) with `role_arn` and no
///    `web_identity_token_file`: STS AssumeRole, signed with the credentials of its
///    `source_profile` (resolved by that profile's own links, recursively when it has a `role_arn`
///    of its own; a cycle is refused, a profile may name itself only when it has static keys) or
///    of its `credential_source` (Environment, EcsContainer, Ec2InstanceMetadata).
/// 3. web identity: AWS_WEB_IDENTITY_TOKEN_FILE / AWS_ROLE_ARN / AWS_ROLE_SESSION_NAME, each
///    falling back to the profile's `web_identity_token_file` / `role_arn` / `role_session_name`:
///    STS AssumeRoleWithWebIdentity, unsigned, the token file's bytes as they are (botocore does
///    not trim them).
/// 4. the credentials file's section for the profile (aws_access_key_id, aws_secret_access_key,
///    aws_session_token), then the profile's `credential_process` (shell words, `AWSShellWords`),
///    then the config file's static keys.
/// 5. the container endpoint (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI on http://169.254.170.2, or
///    AWS_CONTAINER_CREDENTIALS_FULL_URI: https, or http to loopback / 169.254.170.2 /
///    169.254.170.23 / [fd00:ec2::23]), Authorization from AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE
///    (read as is, CR/LF refused, as botocore does) else AWS_CONTAINER_AUTHORIZATION_TOKEN.
/// 6. IMDSv2 unless AWS_EC2_METADATA_DISABLED is `true`: PUT /latest/api/token, then the role
///    name, then its credentials (no IMDSv1 fallback: a token is always asked for).
/// A link that is configured but fails ends the chain with that failure (botocore raises rather
/// than fall through). `.profile(NAME)` uses steps 2 to 4 for that profile only (environment
/// variables ignored, as botocore does for an explicit profile), and NAME must exist.
///
/// STS: AWS_ENDPOINT_URL_STS, else AWS_ENDPOINT_URL, else https://sts.REGION.amazonaws.com when
/// a region is known (AWS_REGION, AWS_DEFAULT_REGION, the profile's `region`), else
/// https://sts.amazonaws.com; requests are signed for REGION, or us-east-1 when none is known.
public struct AWSCredentialChain: Sendable {
    public static let maxRoleChain = 8
    /// The IMDSv2 session lifetime asked for: botocore's 21600 seconds (6 hours).
    public static let imdsTokenTTLSeconds = 21_600
    public static let maxTokenFileBytes = 16 * 1024

    let plan: Result<Plan, AWSChainFailure>
    let now: Int64
    private var phase: Phase = .notStarted
    private var imdsToken: [UInt8] = []

    public init(selection: AWSCredentialSelection, environment: [String: String], readFile: (String) -> [UInt8]?, now: Int64) {
        plan = withoutActuallyEscaping(readFile) { reader in
            var planner = Planner(environment: environment, readFile: reader, now: now)
            return planner.plan(selection)
        }
        self.now = now
    }

    /// Which link would be used, without fetching anything: for `explain` and `check`. Names,
    /// paths, role ARNs and endpoints; never a key, token or command.
    public static func describe(selection: AWSCredentialSelection, environment: [String: String], readFile: (String) -> [UInt8]?) -> String {
        let outcome = withoutActuallyEscaping(readFile) { reader in
            var planner = Planner(environment: environment, readFile: reader, now: 0)
            return planner.plan(selection)
        }
        switch outcome {
        case .success(let plan): return plan.description
        case .failure(let failure): return "none: \(failure.description)"
        }
    }

    /// A configuration problem `scopeproxy check` should report (a profile that does not exist, a
    /// source_profile loop, an unreadable file); nil when the chain can be tried.
    public static func validate(selection: AWSCredentialSelection, environment: [String: String], readFile: (String) -> [UInt8]?) -> AWSChainFailure?
    {
        let outcome = withoutActuallyEscaping(readFile) { reader in
            var planner = Planner(environment: environment, readFile: reader, now: 0)
            return planner.plan(selection)
        }
        if case .failure(let failure) = outcome { return failure }
        return nil
    }

    // MARK: Running the plan

    enum Phase: Sendable {
        case notStarted
        case awaitingProcess(profile: String)
        case awaitingWebIdentity(AWSCredentialOrigin)
        case awaitingContainer
        case awaitingIMDSToken(Origin)
        case awaitingIMDSRole(Origin)
        case awaitingIMDSCredentials
        case awaitingAssumeRole(index: Int)
        case done
    }

    public mutating func start() -> AWSChainStep {
        guard case .notStarted = phase else { return fail(nil, .unexpectedInput) }
        let plan: Plan
        switch self.plan {
        case .success(let value): plan = value
        case .failure(let failure):
            phase = .done
            return .failed(failure)
        }
        switch plan.base {
        case .ready(let credentials, let origin):
            return obtained(credentials, from: origin)
        case .process(let argv, let profile):
            phase = .awaitingProcess(profile: profile)
            return .run(argv: argv)
        case .webIdentity(let identity):
            let origin = AWSCredentialOrigin.webIdentity(profile: identity.profile)
            guard let token = identity.readToken() else {
                return fail(origin, .unreadableFile(path: identity.tokenFile, setting: identity.tokenFileSetting))
            }
            phase = .awaitingWebIdentity(origin)
            return .send(Requests.assumeRoleWithWebIdentity(identity, token: token, sts: plan.sts, now: now))
        case .container(let target):
            phase = .awaitingContainer
            return .send(Requests.container(target))
        case .instanceMetadata(let endpoint):
            phase = .awaitingIMDSToken(endpoint)
            return .send(Requests.imdsToken(endpoint))
        }
    }

    public mutating func resume(_ input: AWSChainInput) -> AWSChainStep {
        guard case .success(let plan) = plan else { return fail(nil, .unexpectedInput) }
        switch (phase, input) {
        case (.awaitingProcess(let profile), .commandOutput(let output)):
            switch AWSCredentialResponse.process(output: output) {
            case .success(let credentials): return obtained(credentials, from: .process(profile: profile))
            case .failure(let problem): return fail(.process(profile: profile), .commandOutput(problem))
            }
        case (.awaitingProcess(let profile), .commandFailed(let words)):
            return fail(.process(profile: profile), .commandFailed(words))
        case (.awaitingWebIdentity(let origin), .response(let status, let body)):
            switch AWSCredentialResponse.sts(.assumeRoleWithWebIdentity, status: status, body: body) {
            case .success(let credentials): return obtained(credentials, from: origin)
            case .failure(let problem): return fail(origin, .response(problem))
            }
        case (.awaitingContainer, .response(let status, let body)):
            switch AWSCredentialResponse.metadata(status: status, body: body, requiresSuccessCode: false) {
            case .success(let credentials): return obtained(credentials, from: .container)
            case .failure(let problem): return fail(.container, .response(problem))
            }
        case (.awaitingIMDSToken(let endpoint), .response(let status, let body)):
            switch AWSCredentialResponse.instanceMetadataToken(status: status, body: body) {
            case .success(let token):
                imdsToken = token
                phase = .awaitingIMDSRole(endpoint)
                return .send(Requests.imdsGet(endpoint, path: Requests.imdsCredentialsPath, token: token, purpose: "IMDS role name"))
            case .failure(let problem): return fail(.instanceMetadata, .response(problem))
            }
        case (.awaitingIMDSRole(let endpoint), .response(let status, let body)):
            switch AWSCredentialResponse.instanceRoleName(status: status, body: body) {
            case .success(let role):
                phase = .awaitingIMDSCredentials
                return .send(Requests.imdsGet(endpoint, path: Requests.imdsCredentialsPath + role, token: imdsToken, purpose: "IMDS credentials"))
            case .failure(let problem): return fail(.instanceMetadata, .response(problem))
            }
        case (.awaitingIMDSCredentials, .response(let status, let body)):
            imdsToken = []
            switch AWSCredentialResponse.metadata(status: status, body: body, requiresSuccessCode: true) {
            case .success(let credentials): return obtained(credentials, from: .instanceMetadata)
            case .failure(let problem): return fail(.instanceMetadata, .response(problem))
            }
        case (.awaitingAssumeRole(let index), .response(let status, let body)):
            let origin = AWSCredentialOrigin.assumedRole(profile: plan.roles[index].profile)
            switch AWSCredentialResponse.sts(.assumeRole, status: status, body: body) {
            case .success(let credentials): return obtained(credentials, from: origin, afterRole: index)
            case .failure(let problem): return fail(origin, .response(problem))
            }
        case (_, .requestFailed(let reason)):
            guard let link = currentLink(plan) else { return fail(nil, .unexpectedInput) }
            return fail(link, .request(reason))
        default:
            return fail(currentLink(plan), .unexpectedInput)
        }
    }

    private func currentLink(_ plan: Plan) -> AWSCredentialOrigin? {
        switch phase {
        case .notStarted, .done, .awaitingProcess: nil
        case .awaitingWebIdentity(let origin): origin
        case .awaitingContainer: .container
        case .awaitingIMDSToken, .awaitingIMDSRole, .awaitingIMDSCredentials: .instanceMetadata
        case .awaitingAssumeRole(let index): .assumedRole(profile: plan.roles[index].profile)
        }
    }

    private mutating func fail(_ link: AWSCredentialOrigin?, _ reason: AWSChainFailure.Reason) -> AWSChainStep {
        phase = .done
        imdsToken = []
        return .failed(AWSChainFailure(link: link, reason: reason))
    }

    /// Credentials from a link (`afterRole`: the index of the role hop that gave them, nil for the
    /// base link): either the answer, or the source for the next AssumeRole.
    private mutating func obtained(_ credentials: AWSTemporaryCredentials, from origin: AWSCredentialOrigin, afterRole: Int? = nil) -> AWSChainStep {
        guard !credentials.isExpired(at: now), case .success(let plan) = plan else { return fail(origin, .expired) }
        let next = afterRole.map { $0 + 1 } ?? 0
        guard next < plan.roles.count else {
            phase = .done
            return .finished(credentials, source: origin)
        }
        let hop = plan.roles[next]
        switch Requests.assumeRole(hop, signedWith: credentials, sts: plan.sts, now: now) {
        case .success(let request):
            phase = .awaitingAssumeRole(index: next)
            return .send(request)
        case .failure:
            return fail(origin, .invalidCredentials("the source credentials cannot sign"))
        }
    }
}

// MARK: The plan: which link, decided from the environment and files alone

struct WebIdentity: Sendable {
    let roleArn: String
    let sessionName: String?
    let tokenFile: String
    /// Where the path came from: AWS_WEB_IDENTITY_TOKEN_FILE or web_identity_token_file.
    let tokenFileSetting: String
    let profile: String?
    let tokenBytes: [UInt8]?

    func readToken() -> [UInt8]? {
        guard let tokenBytes, !tokenBytes.isEmpty, tokenBytes.count <= AWSCredentialChain.maxTokenFileBytes else { return nil }
        return tokenBytes
    }
}

struct ContainerTarget: Sendable {
    let origin: Origin
    let pathAndQuery: String
    let authorization: SecretValue?
}

struct RoleHop: Sendable {
    let profile: String
    let roleArn: String
    let sessionName: String?
    let externalID: String?
    let durationSeconds: Int?
    /// How its source credentials are found, for `describe`.
    let via: String
}

struct STSEndpoint: Sendable {
    let origin: Origin
    let region: String
}

enum BaseLink: Sendable {
    case ready(AWSTemporaryCredentials, AWSCredentialOrigin)
    case process(argv: [String], profile: String)
    case webIdentity(WebIdentity)
    case container(ContainerTarget)
    case instanceMetadata(Origin)
}

struct Plan: Sendable, CustomStringConvertible {
    var base: BaseLink
    var baseDescription: String
    /// Applied in order: roles[0] is assumed with the base link's credentials, each next one with
    /// the previous role's.
    var roles: [RoleHop] = []
    /// Where STS is (only when the plan calls it).
    var sts: STSEndpoint

    var callsSTS: Bool {
        if case .webIdentity = base { return true }
        return !roles.isEmpty
    }

    var description: String {
        var text = baseDescription
        for hop in roles { text = "profile '\(hop.profile)' (role_arn \(hop.roleArn) via \(hop.via): \(text))" }
        return callsSTS ? text + " at STS \(sts.origin)" : text
    }
}

struct Planner {
    let environment: [String: String]
    let readFile: (String) -> [UInt8]?
    let now: Int64
    private var profiles: AWSSharedProfiles?
    private var configPath = ""
    private var credentialsPath = ""
    private var selectedProfile = "default"

    init(environment: [String: String], readFile: @escaping (String) -> [UInt8]?, now: Int64) {
        self.environment = environment
        self.readFile = readFile
        self.now = now
    }

    /// A variable's value; an empty one counts as unset (botocore reads `os.environ.get(...)` and
    /// tests truthiness for the key variables).
    func env(_ name: String) -> String? {
        guard let value = environment[name], !value.isEmpty else { return nil }
        return value
    }

    typealias Outcome = Result<Plan, AWSChainFailure>

    /// The plan, or why there is none. A bad STS setting (region, endpoint) fails only a plan
    /// that calls STS: static keys do not depend on it.
    mutating func plan(_ selection: AWSCredentialSelection) -> Outcome {
        let outcome = planLinks(selection)
        if case .success(let plan) = outcome, plan.callsSTS, let stsProblem { return .failure(stsProblem) }
        return outcome
    }

    private var stsProblem: AWSChainFailure?

    mutating func resolveSTS() -> STSEndpoint {
        switch stsEndpoint() {
        case .success(let endpoint): return endpoint
        case .failure(let failure):
            stsProblem = failure
            return Self.globalSTS
        }
    }

    mutating func planLinks(_ selection: AWSCredentialSelection) -> Outcome {
        let sts: STSEndpoint
        var lookedAt: [String] = []
        switch selection {
        case .defaultChain:
            switch environmentCredentials() {
            case .failure(let failure): return .failure(failure)
            case .success(let credentials?):
                return .success(
                    Plan(base: .ready(credentials, .environment), baseDescription: "environment (AWS_ACCESS_KEY_ID)", sts: Self.globalSTS))
            case .success(nil): lookedAt.append("environment (AWS_ACCESS_KEY_ID)")
            }
            if let failure = loadFiles() { return .failure(failure) }
            // botocore's `profile` setting: AWS_DEFAULT_PROFILE, then AWS_PROFILE.
            let named = env("AWS_DEFAULT_PROFILE") ?? env("AWS_PROFILE")
            selectedProfile = named ?? "default"
            if named != nil, !profiles!.exists(selectedProfile) {
                return .failure(AWSChainFailure(link: nil, reason: .profileNotFound(selectedProfile)))
            }
            sts = resolveSTS()
            switch profileLinks(selectedProfile, environmentEnabled: true, sts: sts) {
            case .failure(let failure): return .failure(failure)
            case .success(let plan?): return .success(plan)
            case .success(nil):
                lookedAt.append("AWS_WEB_IDENTITY_TOKEN_FILE")
                lookedAt.append("profile '\(selectedProfile)' in \(configPath) and \(credentialsPath)")
            }
            switch containerLink() {
            case .failure(let failure): return .failure(failure)
            case .success(let target?):
                return .success(Plan(base: .container(target), baseDescription: "container endpoint \(target.origin)", sts: sts))
            case .success(nil): lookedAt.append("container endpoint (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI, AWS_CONTAINER_CREDENTIALS_FULL_URI)")
            }
            switch instanceMetadataLink() {
            case .failure(let failure): return .failure(failure)
            case .success(let endpoint?):
                return .success(Plan(base: .instanceMetadata(endpoint), baseDescription: "EC2 instance metadata \(endpoint)", sts: sts))
            case .success(nil): lookedAt.append("EC2 instance metadata (disabled by AWS_EC2_METADATA_DISABLED)")
            }
            return .failure(AWSChainFailure(link: nil, reason: .noCredentials(lookedAt: lookedAt)))
        case .profile(let name):
            if let failure = loadFiles() { return .failure(failure) }
            selectedProfile = name
            guard profiles!.exists(name) else { return .failure(AWSChainFailure(link: nil, reason: .profileNotFound(name))) }
            sts = resolveSTS()
            switch profileLinks(name, environmentEnabled: false, sts: sts) {
            case .failure(let failure): return .failure(failure)
            case .success(let plan?): return .success(plan)
            case .success(nil):
                return .failure(
                    AWSChainFailure(
                        link: .profile(name),
                        reason: .noCredentials(lookedAt: ["profile '\(name)' in \(configPath) and \(credentialsPath)"])))
            }
        }
    }

    static let globalSTS = STSEndpoint(origin: Requests.origin("https://sts.amazonaws.com")!, region: "us-east-1")

    // MARK: Environment

    func environmentCredentials() -> Result<AWSTemporaryCredentials?, AWSChainFailure> {
        guard let keyID = env("AWS_ACCESS_KEY_ID") else { return .success(nil) }
        guard let secret = env("AWS_SECRET_ACCESS_KEY") else {
            return .failure(AWSChainFailure(link: .environment, reason: .partialCredentials(missing: "AWS_SECRET_ACCESS_KEY")))
        }
        let token = env("AWS_SESSION_TOKEN") ?? env("AWS_SECURITY_TOKEN")
        // botocore `EnvProvider`: AWS_CREDENTIAL_EXPIRATION, when set, is when these expire.
        var expiration: Int64?
        if let text = env("AWS_CREDENTIAL_EXPIRATION") {
            guard let seconds = RFC3339.secondsSinceEpoch(text) else {
                return .failure(
                    AWSChainFailure(
                        link: .environment, reason: .invalidSetting(variable: "AWS_CREDENTIAL_EXPIRATION", problem: "is not an RFC 3339 time")))
            }
            expiration = seconds
        }
        guard
            let credentials = AWSTemporaryCredentials(
                accessKeyID: Array(keyID.utf8), secretAccessKey: Array(secret.utf8), sessionToken: token.map { Array($0.utf8) },
                expiration: expiration)
        else { return .failure(AWSChainFailure(link: .environment, reason: .invalidCredentials("AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"))) }
        return .success(credentials)
    }

    // MARK: Shared files

    func expandHome(_ path: String) -> String? {
        guard path.hasPrefix("~") else { return path }
        guard path == "~" || path.hasPrefix("~/"), let home = env("HOME") else { return nil }
        return home + path.dropFirst()
    }

    /// Reads both files (a missing one is empty, as botocore's ConfigNotFound is ignored).
    mutating func loadFiles() -> AWSChainFailure? {
        if profiles != nil { return nil }
        configPath = env("AWS_CONFIG_FILE") ?? "~/.aws/config"
        credentialsPath = env("AWS_SHARED_CREDENTIALS_FILE") ?? "~/.aws/credentials"
        var files: [AWSSharedConfigFile?] = []
        for path in [configPath, credentialsPath] {
            guard let expanded = expandHome(path), let bytes = readFile(expanded) else {
                files.append(nil)
                continue
            }
            switch AWSSharedConfigFile.parse(bytes, path: expanded) {
            case .success(let file): files.append(file)
            case .failure(let error): return AWSChainFailure(link: nil, reason: .sharedConfig(error))
            }
        }
        configPath = expandHome(configPath) ?? configPath
        credentialsPath = expandHome(credentialsPath) ?? credentialsPath
        profiles = AWSSharedProfiles(config: files[0], credentials: files[1])
        return nil
    }

    /// Steps 2 to 4 for one profile; nil when it configures none of them.
    mutating func profileLinks(_ name: String, environmentEnabled: Bool, sts: STSEndpoint) -> Result<Plan?, AWSChainFailure> {
        let profile = profiles!.merged(name) ?? [:]
        if profile["role_arn"] != nil, profile["web_identity_token_file"] == nil {
            var visited = [name]
            return assumeRole(name, visited: &visited, sts: sts).map { $0 }
        }
        return sourceLinks(name, environmentEnabled: environmentEnabled, sts: sts)
    }

    /// botocore `ProfileProviderBuilder.providers`: web identity, the credentials file's keys,
    /// credential_process, the config file's keys.
    func sourceLinks(_ name: String, environmentEnabled: Bool, sts: STSEndpoint) -> Result<Plan?, AWSChainFailure> {
        let profile = profiles!.merged(name) ?? [:]
        func setting(_ variable: String, _ key: String) -> (value: String, from: String)? {
            if environmentEnabled, let value = env(variable) { return (value, variable) }
            return profile[key].map { ($0, key) }
        }
        if let tokenFile = setting("AWS_WEB_IDENTITY_TOKEN_FILE", "web_identity_token_file") {
            let origin = AWSCredentialOrigin.webIdentity(profile: tokenFile.from == "web_identity_token_file" ? name : nil)
            guard let roleArn = setting("AWS_ROLE_ARN", "role_arn") else {
                return .failure(AWSChainFailure(link: origin, reason: .partialCredentials(missing: "AWS_ROLE_ARN (or role_arn)")))
            }
            guard Requests.isPrintable(roleArn.value) else {
                return .failure(AWSChainFailure(link: origin, reason: .invalidSetting(variable: roleArn.from, problem: "is not printable ASCII")))
            }
            let path = expandHome(tokenFile.value) ?? tokenFile.value
            let identity = WebIdentity(
                roleArn: roleArn.value, sessionName: setting("AWS_ROLE_SESSION_NAME", "role_session_name")?.value,
                tokenFile: path, tokenFileSetting: tokenFile.from, profile: tokenFile.from == "web_identity_token_file" ? name : nil,
                tokenBytes: readFile(path))
            let where_ = identity.profile.map { "profile '\($0)'" } ?? "environment"
            return .success(
                Plan(
                    base: .webIdentity(identity), baseDescription: "web identity (\(where_): role_arn \(roleArn.value), token file \(path))", sts: sts
                ))
        }
        if let section = profiles!.credentialsProfiles[name] {
            switch staticKeys(section, profile: name, file: credentialsPath) {
            case .failure(let failure): return .failure(failure)
            case .success(let plan?): return .success(plan)
            case .success(nil): break
            }
        }
        if let command = profile["credential_process"] {
            let argv: [String]
            do { argv = try AWSShellWords.split(command) } catch {
                return .failure(
                    AWSChainFailure(
                        link: .process(profile: name),
                        reason: .invalidProfile(profile: name, problem: "has a credential_process that does not split into words")))
            }
            guard !argv.isEmpty else {
                return .failure(
                    AWSChainFailure(link: .process(profile: name), reason: .invalidProfile(profile: name, problem: "has an empty credential_process"))
                )
            }
            return .success(Plan(base: .process(argv: argv, profile: name), baseDescription: "profile '\(name)' (credential_process)", sts: sts))
        }
        if let section = profiles!.configProfiles[name] {
            return staticKeys(section, profile: name, file: configPath)
        }
        return .success(nil)
    }

    /// botocore `SharedCredentialProvider` / `ConfigProvider`: `aws_access_key_id` makes it this
    /// link, and then the secret is required.
    func staticKeys(_ section: [String: String], profile: String, file: String) -> Result<Plan?, AWSChainFailure> {
        guard let keyID = section["aws_access_key_id"] else { return .success(nil) }
        guard let secret = section["aws_secret_access_key"] else {
            return .failure(AWSChainFailure(link: .profile(profile), reason: .partialCredentials(missing: "aws_secret_access_key in \(file)")))
        }
        let token = section["aws_session_token"] ?? section["aws_security_token"]
        guard
            let credentials = AWSTemporaryCredentials(
                accessKeyID: Array(keyID.utf8), secretAccessKey: Array(secret.utf8), sessionToken: token.map { Array($0.utf8) }, expiration: nil)
        else { return .failure(AWSChainFailure(link: .profile(profile), reason: .invalidCredentials("the keys in \(file)"))) }
        return .success(
            Plan(base: .ready(credentials, .profile(profile)), baseDescription: "profile '\(profile)' (static keys in \(file))", sts: Self.globalSTS))
    }

    /// botocore `AssumeRoleProvider`: the role's source, then the role.
    mutating func assumeRole(_ name: String, visited: inout [String], sts: STSEndpoint) -> Result<Plan, AWSChainFailure> {
        let link = AWSCredentialOrigin.assumedRole(profile: name)
        func invalid(_ problem: String) -> Result<Plan, AWSChainFailure> {
            .failure(AWSChainFailure(link: link, reason: .invalidProfile(profile: name, problem: problem)))
        }
        let profile = profiles!.merged(name) ?? [:]
        guard let roleArn = profile["role_arn"], Requests.isPrintable(roleArn) else { return invalid("has a role_arn that is not printable ASCII") }
        var duration: Int?
        if let text = profile["duration_seconds"] {
            // botocore drops a value int() cannot read; STS allows 900 to 43200 seconds.
            if let seconds = BoundedDecimal.parseClamped(Array(text.utf8), maximum: 43_200) { duration = seconds }
        }
        for key in ["role_session_name", "external_id"] where profile[key].map({ !Requests.isPrintable($0) }) ?? false {
            return invalid("has a \(key) that is not printable ASCII")
        }
        var hop = RoleHop(
            profile: name, roleArn: roleArn, sessionName: profile["role_session_name"], externalID: profile["external_id"],
            durationSeconds: duration, via: "")
        switch (profile["source_profile"], profile["credential_source"]) {
        case (_?, _?):
            return invalid("has both source_profile and credential_source")
        case (nil, nil):
            return invalid("has role_arn but neither source_profile nor credential_source")
        case (nil, let source?):
            hop = RoleHop(
                profile: hop.profile, roleArn: hop.roleArn, sessionName: hop.sessionName, externalID: hop.externalID,
                durationSeconds: hop.durationSeconds, via: "credential_source \(source)")
            var plan: Plan
            switch source {
            case "Environment":
                switch environmentCredentials() {
                case .failure(let failure): return .failure(failure)
                case .success(nil): return invalid("has credential_source Environment but AWS_ACCESS_KEY_ID is not set")
                case .success(let credentials?):
                    plan = Plan(base: .ready(credentials, .environment), baseDescription: "environment (AWS_ACCESS_KEY_ID)", sts: sts)
                }
            case "EcsContainer":
                switch containerLink() {
                case .failure(let failure): return .failure(failure)
                case .success(nil): return invalid("has credential_source EcsContainer but no container endpoint is set")
                case .success(let target?): plan = Plan(base: .container(target), baseDescription: "container endpoint \(target.origin)", sts: sts)
                }
            case "Ec2InstanceMetadata":
                switch instanceMetadataLink() {
                case .failure(let failure): return .failure(failure)
                case .success(nil): return invalid("has credential_source Ec2InstanceMetadata but AWS_EC2_METADATA_DISABLED is true")
                case .success(let endpoint?):
                    plan = Plan(base: .instanceMetadata(endpoint), baseDescription: "EC2 instance metadata \(endpoint)", sts: sts)
                }
            default:
                return invalid("has a credential_source that is not Environment, EcsContainer or Ec2InstanceMetadata")
            }
            plan.roles.append(hop)
            plan.sts = sts
            return .success(plan)
        case (let sourceName?, nil):
            hop = RoleHop(
                profile: hop.profile, roleArn: hop.roleArn, sessionName: hop.sessionName, externalID: hop.externalID,
                durationSeconds: hop.durationSeconds, via: "source_profile '\(sourceName)'")
            guard profiles!.exists(sourceName), let source = profiles!.merged(sourceName) else {
                return .failure(AWSChainFailure(link: link, reason: .sourceProfileNotFound(profile: name, sourceProfile: sourceName)))
            }
            let hasStaticKeys = source["aws_access_key_id"] != nil || source["aws_secret_access_key"] != nil
            if visited.contains(sourceName) {
                // botocore `_validate_source_profile`: only a profile naming itself, with static keys.
                guard sourceName == name, hasStaticKeys else {
                    return .failure(AWSChainFailure(link: link, reason: .sourceProfileLoop(visited + [sourceName])))
                }
            }
            visited.append(sourceName)
            guard visited.count <= AWSCredentialChain.maxRoleChain else {
                return .failure(AWSChainFailure(link: link, reason: .roleChainTooLong(limit: AWSCredentialChain.maxRoleChain)))
            }
            var plan: Plan
            if hasStaticKeys || source["role_arn"] == nil || source["web_identity_token_file"] != nil {
                switch sourceLinks(sourceName, environmentEnabled: false, sts: sts) {
                case .failure(let failure): return .failure(failure)
                case .success(nil): return invalid("names source_profile '\(sourceName)', which has no credentials")
                case .success(let found?): plan = found
                }
            } else {
                switch assumeRole(sourceName, visited: &visited, sts: sts) {
                case .failure(let failure): return .failure(failure)
                case .success(let found): plan = found
                }
            }
            plan.roles.append(hop)
            plan.sts = sts
            return .success(plan)
        }
    }

    // MARK: STS endpoint

    func stsEndpoint() -> Result<STSEndpoint, AWSChainFailure> {
        var region: String?
        var regionSetting = ""
        for variable in ["AWS_REGION", "AWS_DEFAULT_REGION"] where region == nil {
            if let value = env(variable) {
                region = value
                regionSetting = variable
            }
        }
        if region == nil, let value = profiles?.merged(selectedProfile)?["region"], !value.isEmpty {
            region = value
            regionSetting = "region of profile '\(selectedProfile)'"
        }
        if let region, !AWSSigV4Signer.isScopeComponent(region) {
            return .failure(AWSChainFailure(link: nil, reason: .invalidSetting(variable: regionSetting, problem: "is not a region name")))
        }
        // botocore's configured endpoints: the service's variable, then the global one, unless
        // AWS_IGNORE_CONFIGURED_ENDPOINT_URLS is true.
        let endpointVariables =
            env("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")?.lowercased() == "true" ? [] : ["AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL"]
        for variable in endpointVariables {
            guard let text = env(variable) else { continue }
            guard let origin = Requests.origin(text) else {
                return .failure(AWSChainFailure(link: nil, reason: .invalidSetting(variable: variable, problem: "is not scheme://host[:port]")))
            }
            return .success(STSEndpoint(origin: origin, region: region ?? "us-east-1"))
        }
        guard let region else { return .success(Self.globalSTS) }
        guard let origin = Requests.origin("https://sts.\(region).amazonaws.com") else {
            return .failure(AWSChainFailure(link: nil, reason: .invalidSetting(variable: regionSetting, problem: "is not a region name")))
        }
        return .success(STSEndpoint(origin: origin, region: region))
    }

    // MARK: Container and instance metadata

    /// botocore `ContainerProvider` / `ContainerMetadataFetcher`.
    func containerLink() -> Result<ContainerTarget?, AWSChainFailure> {
        func invalid(_ variable: String, _ problem: String) -> Result<ContainerTarget?, AWSChainFailure> {
            .failure(AWSChainFailure(link: .container, reason: .invalidSetting(variable: variable, problem: problem)))
        }
        let origin: Origin
        let pathAndQuery: String
        if let relative = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
            guard relative.hasPrefix("/"), case .origin(let target)? = try? RequestTarget.parse(relative, method: "GET") else {
                return invalid("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "is not a path")
            }
            origin = Requests.origin("http://169.254.170.2")!
            pathAndQuery = target
        } else if let full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI") {
            guard case .absolute(let parsed, let target, nil)? = try? RequestTarget.parse(full, method: "GET") else {
                return invalid("AWS_CONTAINER_CREDENTIALS_FULL_URI", "is not an http(s) URL")
            }
            // botocore `_check_if_whitelisted_host`: clear text only to this machine or the
            // container agents' link-local addresses.
            let allowedHosts = ["169.254.170.2", "169.254.170.23", "[fd00:ec2::23]"]
            guard parsed.scheme == .https || parsed.isLoopback || allowedHosts.contains(parsed.host) else {
                return invalid(
                    "AWS_CONTAINER_CREDENTIALS_FULL_URI", "is http to a host other than loopback, 169.254.170.2, 169.254.170.23 or [fd00:ec2::23]")
            }
            origin = parsed
            pathAndQuery = target
        } else {
            return .success(nil)
        }
        var authorization: [UInt8]?
        if let path = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE") {
            guard let bytes = readFile(expandHome(path) ?? path), bytes.count <= AWSCredentialChain.maxTokenFileBytes else {
                return .failure(
                    AWSChainFailure(link: .container, reason: .unreadableFile(path: path, setting: "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")))
            }
            authorization = bytes
        } else if let token = env("AWS_CONTAINER_AUTHORIZATION_TOKEN") {
            authorization = Array(token.utf8)
        }
        if let token = authorization {
            guard !token.isEmpty, token.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else {
                return invalid("the container authorization token", "holds characters a header cannot carry")
            }
        }
        return .success(ContainerTarget(origin: origin, pathAndQuery: pathAndQuery, authorization: authorization.map { SecretValue(bytes: $0) }))
    }

    /// botocore `InstanceMetadataFetcher`: the endpoint, or nil when disabled.
    func instanceMetadataLink() -> Result<Origin?, AWSChainFailure> {
        if environment["AWS_EC2_METADATA_DISABLED"]?.lowercased() == "true" { return .success(nil) }
        if let text = env("AWS_EC2_METADATA_SERVICE_ENDPOINT") {
            guard let origin = Requests.origin(text) else {
                return .failure(
                    AWSChainFailure(
                        link: .instanceMetadata,
                        reason: .invalidSetting(variable: "AWS_EC2_METADATA_SERVICE_ENDPOINT", problem: "is not scheme://host[:port]")))
            }
            return .success(origin)
        }
        switch env("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE")?.lowercased() {
        case nil, "ipv4"?: return .success(Requests.origin("http://169.254.169.254")!)
        case "ipv6"?: return .success(Requests.origin("http://[fd00:ec2::254]")!)
        default:
            return .failure(
                AWSChainFailure(
                    link: .instanceMetadata,
                    reason: .invalidSetting(variable: "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", problem: "is neither IPv4 nor IPv6")))
        }
    }
}

// MARK: Request bytes

enum Requests {
    static let imdsCredentialsPath = "/latest/meta-data/iam/security-credentials/"

    static func origin(_ text: String) -> Origin? { try? Origin.parse(text) }

    static func isPrintable(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 2048 && text.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F }
    }

    static func requestFields(origin: Origin, _ extra: [(String, String)], body: [UInt8]?) -> HTTPFields {
        var fields = HTTPFields()
        fields.append(name: "Host", value: origin.authority)
        for (name, value) in extra { fields.append(name: name, value: value) }
        if let body { fields.append(name: "Content-Length", value: String(body.count)) }
        fields.append(name: "User-Agent", value: "scopeproxy")
        fields.append(name: "Connection", value: "close")
        return fields
    }

    static func bytes(_ method: String, _ target: String, _ fields: HTTPFields, body: [UInt8]) -> [UInt8] {
        RequestHead(method: method, target: target, version: .http1_1, fields: fields).serialized() + body
    }

    /// The STS query API's form body (`Action`, `Version`, parameters), form-encoded.
    static func stsBody(_ parameters: [(String, [UInt8])]) -> [UInt8] {
        Array(parameters.map { FormEncoding.encode(Array($0.0.utf8)) + "=" + FormEncoding.encode($0.1) }.joined(separator: "&").utf8)
    }

    /// botocore's default session name is `botocore-session-<time>`; the proxy's names itself.
    static func sessionName(_ given: String?, now: Int64) -> String { given ?? "scopeproxy-session-\(now)" }

    static let formType = "application/x-www-form-urlencoded; charset=utf-8"

    /// STS AssumeRoleWithWebIdentity: unsigned (the token is the authentication).
    static func assumeRoleWithWebIdentity(_ identity: WebIdentity, token: [UInt8], sts: STSEndpoint, now: Int64) -> AWSChainRequest {
        let body = stsBody([
            ("Action", Array("AssumeRoleWithWebIdentity".utf8)), ("Version", Array("2011-06-15".utf8)),
            ("RoleArn", Array(identity.roleArn.utf8)), ("RoleSessionName", Array(sessionName(identity.sessionName, now: now).utf8)),
            ("WebIdentityToken", token),
        ])
        let fields = requestFields(origin: sts.origin, [("Content-Type", formType), ("Accept", "text/xml")], body: body)
        return AWSChainRequest(origin: sts.origin, bytes: bytes("POST", "/", fields, body: body), purpose: "STS AssumeRoleWithWebIdentity")
    }

    /// STS AssumeRole, SigV4-signed (service `sts`) with the source credentials.
    static func assumeRole(_ hop: RoleHop, signedWith credentials: AWSTemporaryCredentials, sts: STSEndpoint, now: Int64) -> Result<
        AWSChainRequest, AWSSigV4Error
    > {
        var parameters: [(String, [UInt8])] = [
            ("Action", Array("AssumeRole".utf8)), ("Version", Array("2011-06-15".utf8)),
            ("RoleArn", Array(hop.roleArn.utf8)), ("RoleSessionName", Array(sessionName(hop.sessionName, now: now).utf8)),
        ]
        if let externalID = hop.externalID { parameters.append(("ExternalId", Array(externalID.utf8))) }
        if let duration = hop.durationSeconds { parameters.append(("DurationSeconds", Array(String(duration).utf8))) }
        let body = stsBody(parameters)
        var fields = requestFields(origin: sts.origin, [("Content-Type", formType), ("Accept", "text/xml")], body: body)
        do {
            let signer = try AWSSigV4Signer(service: "sts", region: sts.region, credentials: try credentials.signingCredentials())
            let signature = try signer.sign(
                AWSSigV4Request(
                    method: "POST", authority: sts.origin.authority, path: "/", query: "", fields: fields,
                    payloadHash: AWSSigV4.payloadHash(body: body)),
                at: AWSSigV4Timestamp(secondsSinceEpoch: now))
            for field in signature.fields { fields.append(name: field.name, value: field.value) }
        } catch {
            return .failure(error)
        }
        return .success(AWSChainRequest(origin: sts.origin, bytes: bytes("POST", "/", fields, body: body), purpose: "STS AssumeRole"))
    }

    static func container(_ target: ContainerTarget) -> AWSChainRequest {
        var extra = [("Accept", "application/json")]
        if let token = target.authorization { extra.append(("Authorization", token.exposedFieldValue)) }
        let fields = requestFields(origin: target.origin, extra, body: nil)
        return AWSChainRequest(origin: target.origin, bytes: bytes("GET", target.pathAndQuery, fields, body: []), purpose: "container credentials")
    }

    static func imdsToken(_ endpoint: Origin) -> AWSChainRequest {
        let fields = requestFields(
            origin: endpoint, [("X-aws-ec2-metadata-token-ttl-seconds", String(AWSCredentialChain.imdsTokenTTLSeconds))],
            body: [])
        return AWSChainRequest(
            origin: endpoint, bytes: bytes("PUT", "/latest/api/token", fields, body: []), purpose: "IMDSv2 token",
            timeoutMilliseconds: AWSChainRequest.instanceMetadataTimeoutMilliseconds)
    }

    static func imdsGet(_ endpoint: Origin, path: String, token: [UInt8], purpose: String) -> AWSChainRequest {
        let fields = requestFields(origin: endpoint, [("X-aws-ec2-metadata-token", HTTPField.value(wireBytes: token))], body: nil)
        return AWSChainRequest(
            origin: endpoint, bytes: bytes("GET", path, fields, body: []), purpose: purpose,
            timeoutMilliseconds: AWSChainRequest.instanceMetadataTimeoutMilliseconds)
    }
}
