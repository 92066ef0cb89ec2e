import Foundation

#if canImport(Glibc)
    import Glibc
#endif

public struct SupportFailed: Error, CustomStringConvertible {
    public let description: String
}

/// Private keys of every shape a user may hand the proxy, made for one test with the openssl command
/// line in a scratch directory (removed with the object). Each is made on first use only: RSA key
/// generation is the slow part.
public final class TestKeys: @unchecked Sendable {
    public enum Kind: String, CaseIterable, Sendable {
        case rsaPKCS1 = "rsa-pkcs1"
        case rsaPKCS8 = "rsa-pkcs8"
        case ecSEC1 = "ec-sec1"
        case ecPKCS8 = "ec-pkcs8"
        case rsa1024 = "rsa-1024"
        case ecP384 = "ec-p384"
        case ed25519
        case encryptedPKCS8 = "encrypted-pkcs8"
        case encryptedLegacy = "encrypted-legacy"
        case certificate
        case publicKey = "public-key"
    }

    public let directory = ScratchDirectory()

    public init() {}
    private var made: Set<String> = []

    /// The PEM file of `kind`, made now if it was not.
    public func path(_ kind: Kind) throws -> String {
        let file = directory.path + "/" + kind.rawValue + ".pem"
        guard !made.contains(kind.rawValue) else { return file }
        switch kind {
        case .rsaPKCS1: try openssl(["genrsa", "-traditional", "-out", file, "2048"])
        case .rsaPKCS8: try openssl(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", file])
        case .ecSEC1: try openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", file])
        case .ecPKCS8: try openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", file])
        case .rsa1024: try openssl(["genrsa", "-traditional", "-out", file, "1024"])
        case .ecP384: try openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384", "-out", file])
        case .ed25519: try openssl(["genpkey", "-algorithm", "ed25519", "-out", file])
        case .encryptedPKCS8:
            try openssl(["pkey", "-in", try path(.ecPKCS8), "-aes256", "-passout", "pass:CANARY-passphrase", "-out", file])
        case .encryptedLegacy:
            try openssl(["rsa", "-in", try path(.rsaPKCS1), "-aes256", "-traditional", "-passout", "pass:CANARY-passphrase", "-out", file])
        case .certificate:
            try openssl(["req", "-x509", "-key", try path(.ecPKCS8), "-subj", "/CN=scopeproxy jwt test", "-days", "1", "-out", file])
        case .publicKey: try openssl(["pkey", "-in", try path(.rsaPKCS8), "-pubout", "-out", file])
        }
        made.insert(kind.rawValue)
        return file
    }

    public func bytes(_ kind: Kind) throws -> [UInt8] { Array(try Data(contentsOf: URL(fileURLWithPath: try path(kind)))) }

    /// The public key of a private key file, for the verifiers.
    public func publicKey(of kind: Kind) throws -> String {
        let file = directory.path + "/" + kind.rawValue + ".pub"
        if !FileManager.default.fileExists(atPath: file) { try openssl(["pkey", "-in", try path(kind), "-pubout", "-out", file]) }
        return file
    }

    private func openssl(_ arguments: [String]) throws {
        try runOpenSSL(arguments, in: directory.path)
    }
}

public enum PyJWTPython {
    public static var fixturesDirectory: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fixtures").path
    }

    /// The first python3 that imports pyjwt and cryptography: $SCOPEPROXY_PYJWT_PYTHON when set (to
    /// run against another pyjwt release), Debian's (python3-jwt, python3-cryptography), else the
    /// python3 on PATH.
    public static let path: String? = {
        var candidates = ["/usr/bin/python3"]
        if let chosen = ProcessInfo.processInfo.environment["SCOPEPROXY_PYJWT_PYTHON"] { candidates = [chosen] }
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            candidates.append("\(directory)/python3")
        }
        for candidate in candidates where FileManager.default.isExecutableFile(atPath: candidate) {
            if let result = try? SigV4Origin.runBounded(candidate, ["-c", "import jwt, cryptography"], seconds: 30), result.status == 0 {
                return candidate
            }
        }
        return nil
    }()

    public static func require() throws -> String {
        guard let python = path else { throw SupportFailed(description: "no python3 here imports jwt and cryptography") }
        return python
    }

    /// Runs a fixture script with `input` on stdin to its end; its stdout, bounded in time.
    public static func run(_ script: String, input: [UInt8], seconds: Int = 120) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try require())
        process.arguments = [fixturesDirectory + "/" + script]
        let stdin = Pipe()
        let stdout = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = FileHandle.nullDevice
        try process.run()
        final class Box: @unchecked Sendable { var data = Data() }
        let box = Box()
        let drained = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            box.data = stdout.fileHandleForReading.readDataToEndOfFile()
            drained.signal()
        }
        stdin.fileHandleForWriting.write(Data(input))
        try stdin.fileHandleForWriting.close()
        guard drained.wait(timeout: .now() + .seconds(seconds)) == .success else {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            throw SupportFailed(description: "\(script) did not finish in \(seconds) s")
        }
        process.waitUntilExit()
        return String(decoding: box.data, as: UTF8.self)
    }
}

/// One JWT's verdict from pyjwt (Tests/Fixtures/jwt_verify.py).
public struct PyJWTVerdict {
    public let ok: Bool
    public let why: String?
    public let header: [String: Any]
    public let claims: [String: Any]
    public let signatureLength: Int

    /// Verifies every `(jwt, public key file, alg)` in one run of the script.
    public static func verify(_ tokens: [(jwt: String, publicKey: String, alg: String)]) throws -> [PyJWTVerdict] {
        var input: [UInt8] = []
        for token in tokens {
            let line = try JSONSerialization.data(withJSONObject: ["jwt": token.jwt, "public_key": token.publicKey, "alg": token.alg])
            input += Array(line) + [0x0A]
        }
        let output = try PyJWTPython.run("jwt_verify.py", input: input)
        let verdicts = try output.split(separator: "\n").map { line -> PyJWTVerdict in
            guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
                throw SupportFailed(description: "jwt_verify.py wrote a line that is not an object")
            }
            return PyJWTVerdict(
                ok: object["ok"] as? Bool ?? false, why: object["why"] as? String, header: object["header"] as? [String: Any] ?? [:],
                claims: object["claims"] as? [String: Any] ?? [:], signatureLength: object["signature_length"] as? Int ?? -1)
        }
        guard verdicts.count == tokens.count else { throw SupportFailed(description: "jwt_verify.py answered \(verdicts.count) of \(tokens.count)") }
        return verdicts
    }
}

/// A loopback fixture server (Tests/Fixtures/*.py): started with its arguments, its port read from
/// its first stdout line, its log read as JSON lines. Stopped by closing its stdin (it exits then),
/// and killed if it has not (also on deinit).
public final class PythonFixtureServer: @unchecked Sendable {
    public let port: UInt16
    public let logPath: String
    private let process: Process
    private let stdin: Pipe

    public init(script: String, arguments: [String], logPath: String) throws {
        self.logPath = logPath
        precondition(FileManager.default.createFile(atPath: logPath, contents: Data()), "cannot create \(logPath)")
        process = Process()
        process.executableURL = URL(fileURLWithPath: try PyJWTPython.require())
        process.arguments = [PyJWTPython.fixturesDirectory + "/" + script] + arguments + ["--log", logPath]
        stdin = Pipe()
        let stdout = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = FileHandle.nullDevice
        try process.run()
        let line = fixtureFirstLine(of: stdout.fileHandleForReading, seconds: 30)
        guard let port = line.flatMap({ UInt16($0.trimmingCharacters(in: .whitespaces)) }) else {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            throw SupportFailed(description: "\(script) did not start")
        }
        self.port = port
    }

    deinit { stop() }

    /// Every line of the log so far (the fixture writes a request's line before it answers).
    public var log: [[String: Any]] {
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    public func stop() {
        try? stdin.fileHandleForWriting.close()
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
        }
        process.waitUntilExit()
    }

    /// One request on a fresh connection; the response (the fixtures answer with Content-Length).
    public func exchange(_ request: [UInt8]) throws -> TestResponse {
        let socket = try TestSocket.connect(port: port)
        defer { socket.close() }
        try socket.send(request)
        guard let response = try HTTPReader(socket).readResponse(requestMethod: "POST") else {
            throw SupportFailed(description: "no response")
        }
        return response
    }
}

extension PythonFixtureServer {
    /// Tests/Fixtures/github_app_api.py: the installation token endpoint (verifies the App JWT with
    /// `publicKeyPath`, RS256) and the scoped `GET /repos/...` API; tokens are `canary-N`.
    /// `controlPath`: a JSON file read per token request ({"status": N}, {"malformed": true},
    /// {"lifetime": N}); see the script's docstring.
    public static func gitHubAppAPI(
        publicKeyPath: String, appID: String, installationID: String? = nil, pathPrefix: String = "", canary: String = "CANARY-ghs",
        lifetimeSeconds: Int = 3600, controlPath: String? = nil, logPath: String
    ) throws -> PythonFixtureServer {
        var arguments = ["--public-key", publicKeyPath, "--app-id", appID, "--prefix", pathPrefix, "--canary", canary]
        arguments += ["--lifetime", String(lifetimeSeconds)]
        if let installationID { arguments += ["--installation", installationID] }
        if let controlPath { arguments += ["--control", controlPath] }
        return try PythonFixtureServer(script: "github_app_api.py", arguments: arguments, logPath: logPath)
    }

    /// Tests/Fixtures/jwt_token_endpoint.py: an OAuth2 token endpoint verifying RFC 7523 jwt-bearer
    /// grant assertions (iss = `issuer`, sub = `subject` or the issuer) and private_key_jwt client
    /// assertions (iss = sub = `clientID`) against `publicKeyPath`; `audience` nil means the URL the
    /// request was sent to. Tokens are `canary-N`.
    public static func jwtTokenEndpoint(
        publicKeyPath: String, issuer: String? = nil, subject: String? = nil, clientID: String? = nil, audience: String? = nil,
        keyID: String? = nil, canary: String = "CANARY-jwt-at", expiresIn: Int = 3600, logPath: String
    ) throws -> PythonFixtureServer {
        var arguments = ["--public-key", publicKeyPath, "--canary", canary, "--expires-in", String(expiresIn)]
        for (flag, value) in [("--issuer", issuer), ("--subject", subject), ("--client-id", clientID), ("--audience", audience), ("--kid", keyID)] {
            if let value { arguments += [flag, value] }
        }
        return try PythonFixtureServer(script: "jwt_token_endpoint.py", arguments: arguments, logPath: logPath)
    }
}
