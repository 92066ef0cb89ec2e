import CLibevent
import COpenSSL
import PosixSupport

#if canImport(Glibc)
    import Glibc
#endif

public struct TLSError: Error, CustomStringConvertible, Sendable {
    public let description: String
}

/// OpenSSL's error queue as text (library reasons only: no data from the peer).
func openSSLErrorText() -> String {
    var text = ""
    while case let code = ERR_get_error(), code != 0 {
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        text += (text.isEmpty ? "" : "; ") + String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
    return text.isEmpty ? "unknown OpenSSL error" : text
}

/// A host as `Origin.hostForLookup` gives it is an IP literal: IPv6 (has a colon) or IPv4 (the
/// target parser admits only dotted-quad digits there). Certificates name IPs and names differently.
func isIPLiteral(_ host: String) -> Bool {
    host.contains(":") || host.allSatisfy { $0.isNumber || $0 == "." }
}

/// A fresh EC P-256 key.
func generateP256Key() throws(TLSError) -> OpaquePointer {
    guard let context = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else { throw TLSError(description: "cannot create a key context") }
    defer { EVP_PKEY_CTX_free(context) }
    var key: OpaquePointer?
    guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_CTX_set_group_name(context, "P-256") == 1,
        EVP_PKEY_keygen(context, &key) == 1, let key
    else { throw TLSError(description: "cannot generate a P-256 key: \(openSSLErrorText())") }
    return key
}

/// The local CA that signs leaf certificates for intercepted hosts. Created on first use in
/// `directory` (0700; key 0600), reused afterwards.
public final class CertificateAuthority: @unchecked Sendable {
    let certificate: OpaquePointer
    let key: OpaquePointer
    public let certificatePEM: String
    public static let certificateFile = "scopeproxy-ca.pem"

    deinit {
        X509_free(certificate)
        EVP_PKEY_free(key)
    }
    public static let keyFile = "scopeproxy-ca-key.pem"

    public static func loadOrCreate(directory: String) throws(TLSError) -> CertificateAuthority {
        let certificatePath = directory + "/" + certificateFile
        let keyPath = directory + "/" + keyFile
        if access(certificatePath, R_OK) == 0, access(keyPath, R_OK) == 0 {
            return try load(certificatePath: certificatePath, keyPath: keyPath)
        }
        try makeDirectory(directory)
        let key = try generateP256Key()
        guard let certificate = X509_new() else { throw TLSError(description: "cannot allocate a certificate") }
        var hostname = [CChar](repeating: 0, count: 256)
        gethostname(&hostname, hostname.count - 1)
        let machine = String(decoding: hostname.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        X509_set_version(certificate, 2)
        ASN1_INTEGER_set_int64(X509_get_serialNumber(certificate), Int64.random(in: 1...Int64.max))
        X509_gmtime_adj(X509_getm_notBefore(certificate), -3600)
        X509_gmtime_adj(X509_getm_notAfter(certificate), 10 * 365 * 86400)
        X509_set_pubkey(certificate, key)
        let name = X509_get_subject_name(certificate)
        X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, "scopeproxy", -1, -1, 0)
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, "scopeproxy local CA (\(machine.prefix(40)))", -1, -1, 0)
        X509_set_issuer_name(certificate, name)
        try addExtension(certificate, NID_basic_constraints, "critical,CA:TRUE,pathlen:0")
        try addExtension(certificate, NID_key_usage, "critical,keyCertSign,cRLSign")
        try addKeyIdentifiers(certificate, issuer: certificate)
        guard X509_sign(certificate, key, EVP_sha256()) > 0 else { throw TLSError(description: "cannot sign the CA: \(openSSLErrorText())") }
        try writePEM(keyPath, mode: 0o600) { PEM_write_bio_PrivateKey($0, key, nil, nil, 0, nil, nil) }
        try writePEM(certificatePath, mode: 0o644) { PEM_write_bio_X509($0, certificate) }
        return CertificateAuthority(certificate: certificate, key: key, pem: try pem(certificate))
    }

    private init(certificate: OpaquePointer, key: OpaquePointer, pem: String) {
        self.certificate = certificate
        self.key = key
        certificatePEM = pem
    }

    private static func load(certificatePath: String, keyPath: String) throws(TLSError) -> CertificateAuthority {
        var info = stat()
        if fstatat(AT_FDCWD, keyPath, &info, 0) == 0, info.st_mode & 0o077 != 0 {
            throw TLSError(description: "the CA key \(keyPath) is readable by others (chmod 600)")
        }
        guard let certificateBIO = BIO_new_file(certificatePath, "r"), let keyBIO = BIO_new_file(keyPath, "r") else {
            throw TLSError(description: "cannot read the CA in \(certificatePath)")
        }
        defer { BIO_free(certificateBIO); BIO_free(keyBIO) }
        guard let certificate = PEM_read_bio_X509(certificateBIO, nil, nil, nil), let key = PEM_read_bio_PrivateKey(keyBIO, nil, nil, nil) else {
            throw TLSError(description: "invalid CA files in \(certificatePath)")
        }
        return CertificateAuthority(certificate: certificate, key: key, pem: try pem(certificate))
    }

    private static func makeDirectory(_ path: String) throws(TLSError) {
        if let problem = PrivateDirectory.create(path) { throw TLSError(description: problem) }
    }

    static func addExtension(_ certificate: OpaquePointer, _ nid: Int32, _ value: String) throws(TLSError) {
        guard let ext = X509V3_EXT_conf_nid(nil, nil, nid, value) else { throw TLSError(description: "invalid extension \(value)") }
        defer { X509_EXTENSION_free(ext) }
        X509_add_ext(certificate, ext, -1)
    }

    /// Subject and authority key identifiers: strict verifiers (Python 3.13+, Go) want them.
    static func addKeyIdentifiers(_ certificate: OpaquePointer, issuer: OpaquePointer) throws(TLSError) {
        var context = X509V3_CTX()
        X509V3_set_ctx(&context, issuer, certificate, nil, nil, 0)
        for (nid, value) in [(NID_subject_key_identifier, "hash"), (NID_authority_key_identifier, "keyid:always")] {
            guard let ext = X509V3_EXT_conf_nid(nil, &context, nid, value) else { throw TLSError(description: "cannot add key identifiers") }
            X509_add_ext(certificate, ext, -1)
            X509_EXTENSION_free(ext)
        }
    }

    private static func writePEM(_ path: String, mode: mode_t, _ write: (OpaquePointer) -> Int32) throws(TLSError) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else { throw TLSError(description: "cannot write \(path)") }
        close(fd)
        chmod(path, mode)
        guard let bio = BIO_new_file(path, "w") else { throw TLSError(description: "cannot write \(path)") }
        defer { BIO_free(bio) }
        guard write(bio) == 1 else { throw TLSError(description: "cannot write \(path)") }
    }

    static func pem(_ certificate: OpaquePointer) throws(TLSError) -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { throw TLSError(description: "out of memory") }
        defer { BIO_free(bio) }
        PEM_write_bio_X509(bio, certificate)
        var data: UnsafeMutablePointer<CChar>?
        let length = BIO_ctrl(bio, BIO_CTRL_INFO, 0, &data)
        guard length > 0, let data else { throw TLSError(description: "cannot encode the CA") }
        return String(decoding: UnsafeRawBufferPointer(start: data, count: length), as: UTF8.self)
    }
}

/// Leaf certificates for intercepted hosts: one shared leaf key (minting costs ~0.6 ms, mostly the
/// key; mitmproxy shares one too), backdated an hour, valid 30 days, cached up to `capacity` hosts.
final class LeafMinter: @unchecked Sendable {
    private let authority: CertificateAuthority
    private let leafKey: OpaquePointer
    /// An X509 shared across worker threads: immutable once minted, freed only on eviction.
    private struct Certificate: @unchecked Sendable { let pointer: OpaquePointer }
    private let cache = Locked<[String: Certificate]>([:])
    private let capacity = 1024

    init(authority: CertificateAuthority) throws(TLSError) {
        self.authority = authority
        leafKey = try generateP256Key()
    }

    deinit {
        cache.withLock { cache in
            for entry in cache.values { X509_free(entry.pointer) }
            cache.removeAll()
        }
        EVP_PKEY_free(leafKey)
    }

    var key: OpaquePointer { leafKey }

    /// The certificate for `host` (a DNS name, or an IP literal without brackets), with a reference
    /// the caller owns (X509_free it once the SSL holds its own): eviction can then free safely.
    func certificate(for host: String) throws(TLSError) -> OpaquePointer {
        try certificate(forNames: [host])
    }

    /// The certificate naming every one of `names` (the first is its CN): the TLS client listener's
    /// certificate names the local IP and, on loopback, `localhost`.
    func certificate(forNames names: [String]) throws(TLSError) -> OpaquePointer {
        let host = names.joined(separator: ",")
        if let cached = cache.withLock({ cache -> OpaquePointer? in
            guard let entry = cache[host] else { return nil }
            X509_up_ref(entry.pointer)
            return entry.pointer
        }) {
            return cached
        }
        guard let certificate = X509_new() else { throw TLSError(description: "cannot allocate a certificate") }
        X509_set_version(certificate, 2)
        ASN1_INTEGER_set_int64(X509_get_serialNumber(certificate), Int64.random(in: 1...Int64.max))
        X509_gmtime_adj(X509_getm_notBefore(certificate), -3600)
        X509_gmtime_adj(X509_getm_notAfter(certificate), 30 * 86400)
        X509_set_pubkey(certificate, leafKey)
        let name = X509_get_subject_name(certificate)
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, String((names.first ?? host).prefix(64)), -1, -1, 0)
        X509_set_issuer_name(certificate, X509_get_subject_name(authority.certificate))
        let alternativeNames = names.map { (isIPLiteral($0) ? "IP:" : "DNS:") + $0 }.joined(separator: ",")
        try CertificateAuthority.addExtension(certificate, NID_subject_alt_name, alternativeNames)
        try CertificateAuthority.addExtension(certificate, NID_basic_constraints, "critical,CA:FALSE")
        try CertificateAuthority.addExtension(certificate, NID_ext_key_usage, "serverAuth")
        try CertificateAuthority.addKeyIdentifiers(certificate, issuer: authority.certificate)
        guard X509_sign(certificate, authority.key, EVP_sha256()) > 0 else {
            throw TLSError(description: "cannot sign a leaf: \(openSSLErrorText())")
        }
        let minted = Certificate(pointer: certificate)
        cache.withLock { cache in
            if cache.count >= capacity, let victim = cache.keys.first, let evicted = cache.removeValue(forKey: victim) {
                X509_free(evicted.pointer)
            }
            if let raced = cache[host] { X509_free(raced.pointer) }
            X509_up_ref(certificate)  // the cache's reference; the one from X509_new goes to the caller
            cache[host] = minted
        }
        return certificate
    }
}

/// The two TLS roles: terminating intercepted client connections, and verified upstream connections.
public final class TLSContexts: @unchecked Sendable {
    let server: OpaquePointer
    let client: OpaquePointer
    let minter: LeafMinter?
    public let authority: CertificateAuthority?

    /// `authority` nil: no interception (upstream TLS only). `upstreamCA`: an extra PEM bundle.
    public init(authority: CertificateAuthority?, upstreamCA: String?) throws(TLSError) {
        guard let server = SSL_CTX_new(TLS_server_method()), let client = SSL_CTX_new(TLS_client_method()) else {
            throw TLSError(description: "cannot create TLS contexts")
        }
        for context in [server, client] {
            sp_ssl_ctx_set_min_proto_version(context, sp_tls1_2_version())
        }
        sp_ssl_ctx_select_h2_or_http11(server)
        sp_ssl_ctx_set_session_cache_off(server)
        SSL_CTX_set_default_verify_paths(client)
        if let upstreamCA, SSL_CTX_load_verify_locations(client, upstreamCA, nil) != 1 {
            SSL_CTX_free(server)
            SSL_CTX_free(client)
            throw TLSError(description: "cannot load upstream_ca \(upstreamCA)")
        }
        SSL_CTX_set_verify(client, SSL_VERIFY_PEER, nil)
        let alpn: [UInt8] = [8] + Array("http/1.1".utf8)
        _ = SSL_CTX_set_alpn_protos(client, alpn, UInt32(alpn.count))
        self.server = server
        self.client = client
        self.authority = authority
        minter = try authority.map { authority throws(TLSError) in try LeafMinter(authority: authority) }
    }

    // Sessions made from these contexts hold their own references (SSL_new up-refs the SSL_CTX).
    deinit {
        SSL_CTX_free(server)
        SSL_CTX_free(client)
    }

    /// An SSL for an intercepted client connection to `host`.
    func serverSession(for host: String) throws(TLSError) -> OpaquePointer {
        guard let minter else { throw TLSError(description: "interception is not configured") }
        let certificate = try minter.certificate(for: host)
        defer { X509_free(certificate) }
        guard let ssl = SSL_new(server) else { throw TLSError(description: "cannot create a TLS session") }
        guard SSL_use_certificate(ssl, certificate) == 1, SSL_use_PrivateKey(ssl, minter.key) == 1 else {
            SSL_free(ssl)
            throw TLSError(description: "cannot use the minted certificate")
        }
        return ssl
    }

    /// ALPN `h2, http/1.1` (RFC 7301 wire form): what a leg that can speak HTTP/2 offers an origin.
    private static let alpnH2OrHTTP11: [UInt8] = [2] + Array("h2".utf8) + [8] + Array("http/1.1".utf8)

    /// An SSL for an upstream connection: SNI and hostname (or IP) verification. `offerH2`: ALPN
    /// offers `h2` before `http/1.1` (the origin chooses; docs/architecture.md, "Upstream
    /// protocol"); otherwise only `http/1.1` (the context's default: an upgrade cannot ride HTTP/2).
    func clientSession(for host: String, offerH2: Bool = false) -> OpaquePointer? {
        guard let ssl = SSL_new(client) else { return nil }
        if offerH2 {
            _ = Self.alpnH2OrHTTP11.withUnsafeBufferPointer { SSL_set_alpn_protos(ssl, $0.baseAddress, UInt32($0.count)) }
        }
        let isIP = isIPLiteral(host)
        if isIP {
            X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host)
        } else {
            _ = sp_ssl_set_tlsext_host_name(ssl, host)
            SSL_set1_host(ssl, host)
        }
        return ssl
    }

    /// Why a verification failed, in words a user can act on.
    static func verifyReason(_ code: Int) -> String {
        switch Int32(code) {
        case X509_V_ERR_CERT_HAS_EXPIRED: "certificate expired"
        case X509_V_ERR_CERT_NOT_YET_VALID: "certificate not yet valid"
        case X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH: "certificate name mismatch"
        case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT,
            X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT, X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
            "unknown issuer"
        default:
            String(cString: X509_verify_cert_error_string(code))
        }
    }
}
