import Foundation

/// Client certificates for the TLS client listener, made with the openssl command line: a "tools"
/// CA and a second CA the proxy trusts, a rogue CA it does not, and a client certificate from each
/// (CN and SANs of every kind the proxy reports). Removed with the directory.
public final class ClientPKI: @unchecked Sendable {
    public let directory: String
    /// The subject alternative names `tool` is issued with, as the proxy reports them.
    public static let toolSANs = ["DNS:tool.internal", "email:tool@example.com", "URI:spiffe://example.org/tool", "IP:10.1.2.3"]

    public init() throws {
        directory = NSTemporaryDirectory() + "scopeproxy-client-pki-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        for authority in ["tools-ca", "other-ca", "rogue-ca"] {
            try run([
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "\(authority).key",
                "-out", "\(authority).pem", "-days", "2", "-subj", "/CN=scopeproxy test \(authority)",
            ])
        }
        try issue("tool", by: "tools-ca", subject: "/O=example/CN=tool", san: Self.toolSANs.joined(separator: ","))
        try issue("other", by: "other-ca", subject: "/CN=other-tool", san: "DNS:other.internal")
        try issue("rogue", by: "rogue-ca", subject: "/CN=tool", san: "DNS:tool.internal")
        // The right CA, but a certificate for TLS servers only.
        try issue("server-only", by: "tools-ca", subject: "/CN=tool", san: "DNS:tool.internal", usage: "serverAuth")
    }

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    public func caPath(_ name: String) -> String { directory + "/\(name).pem" }

    /// A client's certificate and key files.
    public func client(_ name: String) -> (cert: String, key: String) {
        (directory + "/\(name).pem", directory + "/\(name).key")
    }

    private func issue(_ name: String, by authority: String, subject: String, san: String, usage: String = "clientAuth") throws {
        try run([
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "\(name).key", "-out", "\(name).csr",
            "-subj", subject,
        ])
        try "subjectAltName=\(san)\nextendedKeyUsage=\(usage)\nbasicConstraints=critical,CA:FALSE\n"
            .write(toFile: directory + "/\(name).ext", atomically: true, encoding: .utf8)
        try run([
            "x509", "-req", "-in", "\(name).csr", "-CA", "\(authority).pem", "-CAkey", "\(authority).key", "-CAcreateserial",
            "-out", "\(name).pem", "-days", "1", "-extfile", "\(name).ext",
        ])
    }

    private func run(_ arguments: [String]) throws { try runOpenSSL(arguments, in: directory) }
}
