import CLibevent
import COpenSSL
import HTTP1Codec
import ProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// One CA file whose certificates the TLS client listener accepts on client certificates.
public struct ClientCAFile: Sendable, Equatable {
    /// As written in the config: what `ClientCertificate.verifiedBy` holds, so a `tls_client` entry
    /// can ask "did my own CA issue this certificate".
    public var name: String
    /// The file to read (relative names resolved next to the config).
    public var path: String

    public init(name: String, path: String) {
        self.name = name
        self.path = path
    }
}

/// `tls.client_listen`: a second listener that speaks TLS before HTTP and asks for a client
/// certificate. Inside, it is the same forward proxy as `listen`.
public struct ClientListener: Sendable, Equatable {
    public var listen: ListenAddress
    /// Every CA a `tls_client` client names. A certificate that none of them verifies fails the
    /// handshake; a client that sends none is still served (other rules may recognise it).
    public var caFiles: [ClientCAFile]

    public init(listen: ListenAddress, caFiles: [ClientCAFile]) {
        self.listen = listen
        self.caFiles = caFiles
    }
}

/// The TLS side of the client listener, shared by every worker: one server context that asks for
/// a client certificate and verifies it against all configured client CAs together, one store per
/// CA file to tell which of them vouch for a certificate, and the local CA's minter for the
/// listener's own certificate.
final class ClientListenerTLS: @unchecked Sendable {
    private let context: OpaquePointer
    private let minter: LeafMinter
    /// One store per configured CA file, holding only that file's certificates.
    private let authorities: [(name: String, store: OpaquePointer)]

    init(caFiles: [ClientCAFile], minter: LeafMinter) throws(TLSError) {
        var stores: [(name: String, store: OpaquePointer)] = []
        var failure: TLSError?
        guard let context = SSL_CTX_new(TLS_server_method()) else { throw TLSError(description: "cannot create a TLS context") }
        sp_ssl_ctx_set_min_proto_version(context, sp_tls1_2_version())
        sp_ssl_ctx_select_http11(context)
        sp_ssl_ctx_set_session_cache_off(context)
        // No resumption: every connection shows its certificate and is verified afresh.
        _ = sp_ssl_ctx_no_tickets(context)
        let sessionContext = Array("scopeproxy-client-listener".utf8)
        _ = SSL_CTX_set_session_id_context(context, sessionContext, UInt32(sessionContext.count))
        // Ask for a certificate, do not require one: a client without one may be recognised
        // otherwise. One that is sent must verify against the configured CAs (fail closed).
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        for file in caFiles {
            do throws(TLSError) {
                let certificates = try Self.readCertificates(file)
                defer { for certificate in certificates { X509_free(certificate) } }
                guard let store = X509_STORE_new() else { throw TLSError(description: "out of memory") }
                stores.append((file.name, store))
                let shared = SSL_CTX_get_cert_store(context)
                for certificate in certificates {
                    X509_STORE_add_cert(store, certificate)
                    X509_STORE_add_cert(shared, certificate)
                    // The CertificateRequest names the acceptable issuers (clients may pick by them).
                    SSL_CTX_add_client_CA(context, certificate)
                }
            } catch {
                failure = error
                break
            }
        }
        ERR_clear_error()  // duplicate certificates across files are harmless
        if let failure {
            for (_, store) in stores { X509_STORE_free(store) }
            SSL_CTX_free(context)
            throw failure
        }
        self.context = context
        self.minter = minter
        authorities = stores
    }

    deinit {
        for (_, store) in authorities { X509_STORE_free(store) }
        SSL_CTX_free(context)
    }

    /// Every certificate in a PEM file; at least one, or an error naming the file.
    private static func readCertificates(_ file: ClientCAFile) throws(TLSError) -> [OpaquePointer] {
        guard access(file.path, R_OK) == 0, let bio = BIO_new_file(file.path, "r") else {
            throw TLSError(description: "client CA \(file.name): cannot read \(file.path) (\(String(cString: strerror(errno))))")
        }
        defer { BIO_free(bio) }
        var certificates: [OpaquePointer] = []
        while let certificate = PEM_read_bio_X509(bio, nil, nil, nil) { certificates.append(certificate) }
        ERR_clear_error()  // the end of the file reads as "no start line"
        guard !certificates.isEmpty else {
            throw TLSError(description: "client CA \(file.name): \(file.path) holds no PEM certificate")
        }
        return certificates
    }

    /// A server session for a connection accepted on `fd`, with a certificate the local CA minted
    /// for the address the client connected to (and `localhost` on loopback): whatever the listen
    /// address (0.0.0.0 too), the name the client dialled by IP is in the certificate.
    func session(fd: Int32) throws(TLSError) -> OpaquePointer {
        let names = Self.localNames(fd)
        guard !names.isEmpty else { throw TLSError(description: "cannot read the local address") }
        let certificate = try minter.certificate(forNames: names)
        defer { X509_free(certificate) }
        guard let ssl = SSL_new(context) else { throw TLSError(description: "cannot create a TLS session") }
        guard SSL_use_certificate(ssl, certificate) == 1, SSL_use_PrivateKey(ssl, minter.key) == 1 else {
            SSL_free(ssl)
            throw TLSError(description: "cannot use the minted certificate")
        }
        return ssl
    }

    /// The connection's local IP (an IPv4-mapped IPv6 address as IPv4), plus `localhost` on loopback.
    static func localNames(_ fd: Int32) -> [String] {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard result == 0 else { return [] }
        let described = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { SocketAddress.describe($0) }
        }
        // `ip:port` or `[v6]:port`.
        guard let colon = described.lastIndex(of: ":") else { return [] }
        var ip = String(described[..<colon])
        if ip.hasPrefix("[") { ip = String(ip.dropFirst().dropLast()) }
        if ip.hasPrefix("::ffff:"), ip.dropFirst(7).allSatisfy({ $0.isNumber || $0 == "." }) { ip = String(ip.dropFirst(7)) }
        let loopback = ip.hasPrefix("127.") || ip == "::1"
        return loopback ? [ip, "localhost"] : [ip]
    }

    /// The verified client certificate of a completed handshake, or nil when the client sent none.
    func certificate(of ssl: OpaquePointer) -> ClientCertificate? {
        guard let leaf = SSL_get0_peer_certificate(ssl) else { return nil }
        var verifiedBy: Set<String> = []
        let chain = SSL_get_peer_cert_chain(ssl)  // the client's intermediates (server side: no leaf)
        for (name, store) in authorities {
            guard let check = X509_STORE_CTX_new() else { continue }
            defer { X509_STORE_CTX_free(check) }
            guard X509_STORE_CTX_init(check, store, leaf, chain) == 1 else { continue }
            // The purpose the handshake checked too: a certificate for TLS clients.
            _ = X509_STORE_CTX_set_default(check, "ssl_client")
            if X509_verify_cert(check) == 1 { verifiedBy.insert(name) }
        }
        ERR_clear_error()
        return ClientCertificate(commonNames: Self.commonNames(leaf), subjectAltNames: Self.subjectAltNames(leaf), verifiedBy: verifiedBy)
    }

    /// The subject's CNs as UTF-8; one holding a NUL or control character is left out (it could
    /// make a name that compares equal to another in C code and not here).
    static func commonNames(_ certificate: OpaquePointer) -> [String] {
        guard let subject = X509_get_subject_name(certificate) else { return [] }
        var names: [String] = []
        var index: Int32 = -1
        while case let next = X509_NAME_get_index_by_NID(subject, NID_commonName, index), next >= 0 {
            index = next
            guard let entry = X509_NAME_get_entry(subject, next), let data = X509_NAME_ENTRY_get_data(entry) else { continue }
            var utf8: UnsafeMutablePointer<UInt8>?
            let length = ASN1_STRING_to_UTF8(&utf8, data)
            guard length >= 0, let utf8 else { continue }
            defer { sp_openssl_free(utf8) }
            let bytes = UnsafeBufferPointer(start: utf8, count: Int(length))
            if let text = cleanText(bytes) { names.append(text) }
        }
        return names
    }

    /// `DNS:`, `email:`, `URI:` and `IP:` names, in certificate order; other kinds are left out.
    static func subjectAltNames(_ certificate: OpaquePointer) -> [String] {
        guard let raw = X509_get_ext_d2i(certificate, NID_subject_alt_name, nil, nil) else { return [] }
        let names = OpaquePointer(raw)
        defer { sp_general_names_free(names) }
        var result: [String] = []
        for index in 0..<sp_general_names_count(names) {
            guard let name = sp_general_names_at(names, index), let value = sp_general_name_string(name),
                let data = ASN1_STRING_get0_data(value)
            else { continue }
            let bytes = UnsafeBufferPointer(start: data, count: Int(ASN1_STRING_length(value)))
            switch sp_general_name_type(name) {
            case sp_gen_dns(): if let text = cleanText(bytes) { result.append("DNS:" + text) }
            case sp_gen_email(): if let text = cleanText(bytes) { result.append("email:" + text) }
            case sp_gen_uri(): if let text = cleanText(bytes) { result.append("URI:" + text) }
            case sp_gen_ipadd(): if let text = ipText(bytes) { result.append("IP:" + text) }
            default: break
            }
        }
        return result
    }

    private static func cleanText(_ bytes: UnsafeBufferPointer<UInt8>) -> String? {
        guard !bytes.isEmpty, !bytes.contains(where: { $0 < 0x20 || $0 == 0x7F }) else { return nil }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func ipText(_ bytes: UnsafeBufferPointer<UInt8>) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family: Int32
        switch bytes.count {
        case 4: family = AF_INET
        case 16: family = AF_INET6
        default: return nil
        }
        guard inet_ntop(family, bytes.baseAddress, &buffer, socklen_t(buffer.count)) != nil else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
