import Foundation

/// Certificates made for a test with the openssl command line: a test origin CA, a valid leaf for
/// localhost/127.0.0.1, one for the wrong host, and an expired one. Removed with the directory.
public final class TestPKI: @unchecked Sendable {
    public let directory: String
    public var caPath: String { directory + "/origin-ca.pem" }

    public init() throws {
        directory = NSTemporaryDirectory() + "scopeproxy-pki-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try run([
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "origin-ca.key",
            "-out", "origin-ca.pem", "-days", "2", "-subj", "/CN=scopeproxy test origin CA",
        ])
        try issue("valid", san: "DNS:localhost,IP:127.0.0.1")
        try issue("wronghost", san: "DNS:elsewhere.example")
        try """
        [ ca ]
        default_ca = test
        [ test ]
        dir = \(directory)
        database = \(directory)/index.txt
        new_certs_dir = \(directory)
        serial = \(directory)/serial
        default_md = sha256
        policy = anything
        unique_subject = no
        [ anything ]
        commonName = supplied
        """.write(toFile: directory + "/ca.cnf", atomically: true, encoding: .utf8)
        precondition(FileManager.default.createFile(atPath: directory + "/index.txt", contents: Data()), "cannot create index.txt")
        try "01\n".write(toFile: directory + "/serial", atomically: true, encoding: .utf8)
        try run([
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "expired.key", "-out", "expired.csr", "-subj",
            "/CN=localhost",
        ])
        try "subjectAltName=DNS:localhost,IP:127.0.0.1\n".write(toFile: directory + "/expired.ext", atomically: true, encoding: .utf8)
        try run([
            "ca", "-batch", "-config", "ca.cnf", "-cert", "origin-ca.pem", "-keyfile", "origin-ca.key", "-in", "expired.csr",
            "-out", "expired.pem", "-startdate", "20200101000000Z", "-enddate", "20200102000000Z", "-notext", "-extfile", "expired.ext",
        ])
    }

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    public func certificate(_ name: String) -> (cert: String, key: String) {
        (directory + "/\(name).pem", directory + "/\(name).key")
    }

    /// A leaf named `name` (`name.pem`, `name.key`) for `san` (`DNS:api.example`), signed by the origin CA.
    public func issueLeaf(_ name: String, san: String) throws { try issue(name, san: san) }

    private func issue(_ name: String, san: String) throws {
        try run([
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "\(name).key", "-out", "\(name).csr", "-subj",
            "/CN=localhost",
        ])
        try "subjectAltName=\(san)\n".write(toFile: directory + "/\(name).ext", atomically: true, encoding: .utf8)
        try run([
            "x509", "-req", "-in", "\(name).csr", "-CA", "origin-ca.pem", "-CAkey", "origin-ca.key", "-CAcreateserial",
            "-out", "\(name).pem", "-days", "1", "-extfile", "\(name).ext",
        ])
    }

    private func run(_ arguments: [String]) throws { try runOpenSSL(arguments, in: directory) }
}

/// The Python HTTPS origin (Tests/Fixtures/https_origin.py) on 127.0.0.1:0, stopped with the test.
public final class HTTPSOrigin: @unchecked Sendable {
    public let port: UInt16
    public let logPath: String
    private let process: Process

    public init(certificate: (cert: String, key: String), redirectTo: String? = nil) throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        logPath = NSTemporaryDirectory() + "scopeproxy-https-origin-" + UUID().uuidString + ".log"
        precondition(FileManager.default.createFile(atPath: logPath, contents: Data()), "cannot create \(logPath)")
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments =
            ["python3", root.appendingPathComponent("Fixtures/https_origin.py").path, certificate.cert, certificate.key, logPath]
            + (redirectTo.map { [$0] } ?? [])
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        guard let port = readPortLine(output) else {
            process.terminate()
            throw TestSocketError("https origin did not start")
        }
        self.port = port
    }

    /// What the origin received, one JSON object per request (empty when nothing arrived).
    public var received: [String] {
        ((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// SIGKILL: the child inherits the test thread's blocked-signal mask, so SIGTERM may never land.
    public func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: logPath)
    }

    deinit { stop() }
}

/// Runs `openssl` with `arguments` in `directory` (output discarded); throws when it fails. The
/// test CAs (`TestPKI`, `ClientPKI`) are made with it.
func runOpenSSL(_ arguments: [String], in directory: String) throws {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
    process.arguments = arguments
    process.currentDirectoryURL = URL(fileURLWithPath: directory)
    process.standardInput = FileHandle.nullDevice
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    try process.run()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else { throw TestSocketError("openssl \(arguments.prefix(2).joined(separator: " ")) failed") }
}
