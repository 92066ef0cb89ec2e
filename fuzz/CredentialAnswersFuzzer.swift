// CredentialAnswers: what a credential source answers is untrusted input (docs/credentials.md,
// docs/security-model.md "Credentials the proxy computes"): a command's stdout, a GitHub
// installation token response, STS XML, the container and IMDS JSON, `credential_process` output,
// and the AWS shared files. No input may trap; a canary planted anywhere never shows in what went
// wrong (the 502, the log); what is accepted is a header-safe value.

private let canary = Array("CANARYk3x".utf8)

func fuzzCredentialAnswers(_ data: UnsafePointer<UInt8>, _ size: Int) {
    guard size >= 2 else { return }
    let selector = Int(data[0])
    var input = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    if selector & 0x80 != 0 { input.insert(contentsOf: canary, at: min(input.count, (selector >> 3) % (input.count + 1))) }
    let status = [200, 201, 400, 401, 403, 404, 500][selector % 7]
    func clean(_ text: String, _ what: String) {
        fuzzCheck(!Array(text.utf8).containsCanary(), "\(what) repeats its input: \(text)")
    }
    func headerSafe(_ bytes: [UInt8], _ what: String) {
        fuzzCheck(!bytes.contains { $0 < 0x20 || $0 == 0x7F }, "\(what) holds a control byte")
    }
    switch (selector >> 1) % 6 {
    case 0:
        switch CommandOutput.parse(input, now: 1_796_206_946) {
        case .success(let credential): headerSafe(credential.value.exposedBytes, "a command's value")
        case .failure(let problem): clean(problem.description, "a command output problem")
        }
    case 1:
        switch GitHubInstallationTokenResponse.parse(status: status, body: input) {
        case .success(let answer): headerSafe(answer.token.exposedBytes, "a GitHub token")
        case .failure(let reason): clean(reason.explanation, "a GitHub response failure")
        }
    case 2:
        switch AWSCredentialResponse.sts(selector & 0x40 == 0 ? .assumeRole : .assumeRoleWithWebIdentity, status: status, body: input) {
        case .success(let credentials): headerSafe(credentials.packed.exposedBytes.filter { $0 != 0x0A }, "STS credentials")
        case .failure(let problem): clean(problem.description, "an STS problem")
        }
    case 3:
        switch AWSCredentialResponse.metadata(status: status, body: input, requiresSuccessCode: selector & 0x40 != 0) {
        case .success(let credentials): headerSafe(credentials.packed.exposedBytes.filter { $0 != 0x0A }, "metadata credentials")
        case .failure(let problem): clean(problem.description, "a metadata problem")
        }
    case 4:
        switch AWSCredentialResponse.process(output: input) {
        case .success(let credentials): headerSafe(credentials.packed.exposedBytes.filter { $0 != 0x0A }, "process credentials")
        case .failure(let problem): clean(problem.description, "a credential_process problem")
        }
    default:
        if case .failure(let error) = AWSSharedConfigFile.parse(input, path: "/h/.aws/config") {
            clean(error.description, "a shared-file error")
        }
    }
}

extension Array where Element == UInt8 {
    fileprivate func containsCanary() -> Bool {
        guard count >= canary.count else { return false }
        return (0...(count - canary.count)).contains { self[$0..<($0 + canary.count)].elementsEqual(canary) }
    }
}
