import COpenSSL

/// The JWS algorithms a credential source signs with (RFC 7518 §3.1): RS256 (RSASSA-PKCS1-v1_5 with
/// SHA-256, what GitHub Apps and most RFC 7523 issuers use) and ES256 (ECDSA P-256 with SHA-256).
public enum JWTAlgorithm: String, Sendable, CaseIterable {
    case rs256 = "RS256"
    case es256 = "ES256"
}

/// Why a private key cannot be used. Fixed texts only: never a byte of the key, never OpenSSL's
/// error strings (they can carry offsets and data from the input).
public enum SigningKeyError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No `-----BEGIN ... PRIVATE KEY-----` block, or the input is larger than `SigningKey.maxPEMBytes`.
    case notPEMPrivateKey
    case encrypted
    /// Only a public key or a certificate: the file holds no private key.
    case publicKeyOrCertificate
    case multiplePrivateKeys
    /// `-----BEGIN OPENSSH PRIVATE KEY-----`: ssh-keygen's own format, which OpenSSL does not read.
    case openSSHFormat
    /// A private-key block OpenSSL could not read (damaged base64 or DER).
    case unreadable
    /// A key type other than RSA and EC (Ed25519, DSA, RSA-PSS, ...).
    case unsupportedKeyType
    case rsaTooSmall(bits: Int)
    /// The curve's name as OpenSSL names it (`secp384r1`), or nil for explicit parameters.
    case ecCurveNotP256(curve: String?)
    case algorithmMismatch(key: JWTAlgorithm, requested: JWTAlgorithm)
    /// GitHub signs App JWTs with RS256 only (docs.github.com, "Generating a JSON Web Token (JWT)
    /// for a GitHub App"): the app's key is RSA.
    case gitHubAppNeedsRSA
    /// OpenSSL refused to sign (a key that loaded but cannot sign: a damaged key).
    case signingFailed

    public var description: String {
        switch self {
        case .notPEMPrivateKey:
            "not a PEM private key (expected -----BEGIN PRIVATE KEY-----, RSA PRIVATE KEY or EC PRIVATE KEY)"
        case .encrypted: "encrypted private keys are not supported: decrypt it (openssl pkey -in K -out K2)"
        case .publicKeyOrCertificate: "a public key or certificate, not a private key"
        case .multiplePrivateKeys: "more than one private key in the PEM: keep only the one to sign with"
        case .openSSHFormat: "an OpenSSH private key: convert it to PEM (ssh-keygen -p -m PKCS8 -f K)"
        case .unreadable: "the PEM private key is damaged: OpenSSL cannot read it"
        case .unsupportedKeyType: "unsupported key type: RS256 needs an RSA key, ES256 an EC P-256 key"
        case .rsaTooSmall(let bits): "RSA key of \(bits) bits: at least 2048"
        case .ecCurveNotP256(let curve): "EC key on curve \(curve ?? "(explicit parameters)"): ES256 needs P-256"
        case .algorithmMismatch(let key, let requested):
            "a key for \(key.rawValue) (\(key == .rs256 ? "RSA" : "EC P-256")) cannot sign \(requested.rawValue)"
        case .gitHubAppNeedsRSA: "GitHub App JWTs are RS256: the app's private key must be RSA (this one is EC)"
        case .signingFailed: "the private key could not sign (OpenSSL refused it)"
        }
    }
}

/// One parsed private key (an `EVP_PKEY`, freed with the object) that signs JWS inputs. Immutable
/// after parsing; OpenSSL 3 allows concurrent signing with one `EVP_PKEY` (each signature has its
/// own context), hence Sendable.
public final class SigningKey: @unchecked Sendable {
    /// Larger input is refused before any parsing: an RSA 16384-bit PKCS#1 PEM is about 12 KiB, and
    /// a key file with a certificate chain beside it stays far below this.
    public static let maxPEMBytes = 256 * 1024
    /// NIST SP 800-131A and RFC 7518 §3.3 ("A key of size 2048 bits or larger MUST be used").
    public static let minimumRSABits = 2048

    private let key: OpaquePointer
    /// The key type's algorithm: RS256 for RSA, ES256 for EC P-256.
    public let algorithm: JWTAlgorithm
    /// RSA modulus size or EC field size.
    public let bits: Int

    private init(key: OpaquePointer, algorithm: JWTAlgorithm, bits: Int) {
        self.key = key
        self.algorithm = algorithm
        self.bits = bits
    }

    deinit { EVP_PKEY_free(key) }

    /// Reads one unencrypted private key: PKCS#8 `PRIVATE KEY`, PKCS#1 `RSA PRIVATE KEY` (what
    /// GitHub hands out) or SEC1 `EC PRIVATE KEY`. Text around the block is ignored (OpenSSL's own
    /// reading); certificates beside the key are too, but two private keys are refused (which one
    /// signs would be a guess).
    public static func parsePEM(_ pem: [UInt8]) throws(SigningKeyError) -> SigningKey {
        guard pem.count <= maxPEMBytes else { throw .notPEMPrivateKey }
        let blocks = PEMBlocks.find(in: pem)
        let privateBlocks = blocks.filter { PEMBlocks.privateKeyLabels.contains($0.label) }
        if blocks.contains(where: { $0.label == "ENCRYPTED PRIVATE KEY" }) { throw .encrypted }
        guard let block = privateBlocks.first else {
            if blocks.contains(where: { $0.label == "OPENSSH PRIVATE KEY" }) { throw .openSSHFormat }
            // `DSA PRIVATE KEY` and the like: a private key, of a type JWS here does not sign with.
            if blocks.contains(where: { $0.label.hasSuffix("PRIVATE KEY") }) { throw .unsupportedKeyType }
            if blocks.contains(where: { PEMBlocks.publicLabels.contains($0.label) }) { throw .publicKeyOrCertificate }
            throw .notPEMPrivateKey
        }
        guard privateBlocks.count == 1 else { throw .multiplePrivateKeys }
        // RFC 1421 legacy encryption (`Proc-Type: 4,ENCRYPTED` inside a PKCS#1 or SEC1 block).
        if PEMBlocks.contains(Array("Proc-Type:".utf8), in: pem[block.range]) { throw .encrypted }
        // Only the block goes to OpenSSL: it reads exactly the key that was counted.
        let text = Array(pem[block.range])
        guard let key = readPrivateKey(text) else { throw .unreadable }
        do {
            let (algorithm, bits) = try classify(key)
            return SigningKey(key: key, algorithm: algorithm, bits: bits)
        } catch {
            EVP_PKEY_free(key)
            throw error
        }
    }

    public static func parsePEM(_ pem: String) throws(SigningKeyError) -> SigningKey { try parsePEM(Array(pem.utf8)) }

    /// RS256: RSASSA-PKCS1-v1_5 over SHA-256 (RFC 7518 §3.3). ES256: ECDSA P-256 over SHA-256, as
    /// the 64-byte `R || S` JWS uses (RFC 7518 §3.4), not OpenSSL's DER `ECDSA-Sig-Value`.
    public func sign(_ message: [UInt8], algorithm requested: JWTAlgorithm) throws(SigningKeyError) -> [UInt8] {
        guard requested == algorithm else { throw .algorithmMismatch(key: algorithm, requested: requested) }
        guard let context = EVP_MD_CTX_new() else { throw .signingFailed }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, key) == 1 else {
            ERR_clear_error()
            throw .signingFailed
        }
        var length = 0
        let sized = message.withUnsafeBufferPointer { EVP_DigestSign(context, nil, &length, $0.baseAddress, $0.count) }
        guard sized == 1, length > 0, length <= 4096 else {
            ERR_clear_error()
            throw .signingFailed
        }
        var signature = [UInt8](repeating: 0, count: length)
        let signed = message.withUnsafeBufferPointer { input in
            signature.withUnsafeMutableBufferPointer { EVP_DigestSign(context, $0.baseAddress, &length, input.baseAddress, input.count) }
        }
        guard signed == 1, length <= signature.count else {
            ERR_clear_error()
            throw .signingFailed
        }
        signature.removeLast(signature.count - length)
        switch algorithm {
        case .rs256: return signature
        case .es256:
            guard let raw = Self.rawECDSASignature(fromDER: signature) else { throw .signingFailed }
            return raw
        }
    }

    /// `PEM_read_bio_PrivateKey` with a passphrase callback that answers nothing: OpenSSL's default
    /// would prompt on the terminal for an encrypted key.
    private static func readPrivateKey(_ text: [UInt8]) -> OpaquePointer? {
        let key: OpaquePointer? = text.withUnsafeBufferPointer { buffer in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, { _, _, _, _ in 0 }, nil)
        }
        // A read leaves entries on this thread's error queue when it fails (and OpenSSL 3's decoders
        // can leave some when it succeeds after trying others), which a TLS call on the same thread
        // would later read as its own failure (SSL_get_error consults the queue).
        ERR_clear_error()
        return key
    }

    private static func classify(_ key: OpaquePointer) throws(SigningKeyError) -> (JWTAlgorithm, Int) {
        let bits = Int(EVP_PKEY_get_bits(key))
        switch EVP_PKEY_get_base_id(key) {
        case EVP_PKEY_RSA:
            guard bits >= minimumRSABits else { throw .rsaTooSmall(bits: bits) }
            return (.rs256, bits)
        case EVP_PKEY_EC:
            let curve = groupName(key)
            // OpenSSL's name for P-256 (RFC 5480 §2.1.1.1 secp256r1) is prime256v1.
            guard curve == "prime256v1" || curve == "P-256" else { throw .ecCurveNotP256(curve: curve) }
            return (.es256, bits)
        default:
            throw .unsupportedKeyType
        }
    }

    /// The curve's short name, kept only when it is a plain identifier of sane length (it reaches
    /// an error text).
    private static func groupName(_ key: OpaquePointer) -> String? {
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        let ok = name.withUnsafeMutableBufferPointer { EVP_PKEY_get_group_name(key, $0.baseAddress, $0.count, &length) }
        guard ok == 1, length > 0, length < name.count else {
            ERR_clear_error()
            return nil
        }
        let bytes = name[..<length].map { UInt8(bitPattern: $0) }
        let isIdentifier = bytes.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) || byte == 0x2D || byte == 0x5F
        }
        return isIdentifier ? String(decoding: bytes, as: UTF8.self) : nil
    }

    /// DER `SEQUENCE { r INTEGER, s INTEGER }` to `r || s`, each left-padded to 32 bytes.
    static func rawECDSASignature(fromDER der: [UInt8]) -> [UInt8]? {
        der.withUnsafeBufferPointer { buffer -> [UInt8]? in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            guard let signature = d2i_ECDSA_SIG(nil, &cursor, buffer.count) else {
                ERR_clear_error()
                return nil
            }
            defer { ECDSA_SIG_free(signature) }
            guard let r = ECDSA_SIG_get0_r(signature), let s = ECDSA_SIG_get0_s(signature) else { return nil }
            var raw = [UInt8](repeating: 0, count: 64)
            let written = raw.withUnsafeMutableBufferPointer { output in
                (BN_bn2binpad(r, output.baseAddress, 32), BN_bn2binpad(s, output.baseAddress! + 32, 32))
            }
            guard written.0 == 32, written.1 == 32 else {
                ERR_clear_error()
                return nil
            }
            return raw
        }
    }
}

/// Where the PEM blocks of a file are (RFC 7468 §2): each `-----BEGIN LABEL-----` with its label and
/// the byte range through its `-----END LABEL-----`. Labels are read, never the base64 between.
enum PEMBlocks {
    struct Block {
        let label: String
        let range: Range<Int>
    }

    static let privateKeyLabels: Set<String> = ["PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"]
    static let publicLabels: Set<String> = [
        "PUBLIC KEY", "RSA PUBLIC KEY", "CERTIFICATE", "TRUSTED CERTIFICATE", "X509 CERTIFICATE", "CERTIFICATE REQUEST",
        "NEW CERTIFICATE REQUEST",
    ]

    static func find(in bytes: [UInt8]) -> [Block] {
        let begin = Array("-----BEGIN ".utf8)
        let dashes = Array("-----".utf8)
        var blocks: [Block] = []
        var index = 0
        while let start = firstIndex(of: begin, in: bytes, from: index) {
            let labelStart = start + begin.count
            guard let labelEnd = firstIndex(of: dashes, in: bytes, from: labelStart), labelEnd - labelStart <= 64 else {
                index = labelStart
                continue
            }
            let labelBytes = bytes[labelStart..<labelEnd]
            guard labelBytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else {
                index = labelStart
                continue
            }
            let label = String(decoding: labelBytes, as: UTF8.self)
            let end = Array("-----END \(label)-----".utf8)
            guard let endStart = firstIndex(of: end, in: bytes, from: labelEnd + dashes.count) else {
                // An unterminated block still names what the file meant to hold (a truncated key
                // is "damaged", not "not a key").
                blocks.append(Block(label: label, range: start..<bytes.count))
                break
            }
            blocks.append(Block(label: label, range: start..<(endStart + end.count)))
            index = endStart + end.count
        }
        return blocks
    }

    static func contains(_ needle: [UInt8], in haystack: ArraySlice<UInt8>) -> Bool {
        firstIndex(of: needle, in: Array(haystack), from: 0) != nil
    }

    private static func firstIndex(of needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
        guard !needle.isEmpty, start >= 0, haystack.count >= needle.count, start <= haystack.count - needle.count else { return nil }
        var index = start
        while index <= haystack.count - needle.count {
            if haystack[index] == needle[0], haystack[index..<(index + needle.count)].elementsEqual(needle) { return index }
            index += 1
        }
        return nil
    }
}
