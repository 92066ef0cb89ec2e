import COpenSSL

/// SHA-256 and HMAC-SHA-256 over OpenSSL's EVP one-shot calls: placeholders are derived with them,
/// AWS SigV4 signs with them. Bytes in, bytes out; nothing is kept.
public enum SHA256 {
    public static let digestLength = 32

    public static func hash(_ bytes: [UInt8]) -> [UInt8] { evpDigest(bytes, EVP_sha256(), length: digestLength) }

    public static func hash(_ text: String) -> [UInt8] { hash(Array(text.utf8)) }
}

/// SHA-1, for one use only: the WebSocket handshake's Sec-WebSocket-Accept (RFC 6455 §4.2.2),
/// which is fixed by the protocol and protects nothing (never use it for a secret).
public enum SHA1 {
    public static let digestLength = 20

    public static func hash(_ bytes: [UInt8]) -> [UInt8] { evpDigest(bytes, EVP_sha1(), length: digestLength) }
}

/// One EVP one-shot digest of `bytes` with `md`, which yields `length` bytes.
private func evpDigest(_ bytes: [UInt8], _ md: OpaquePointer?, length expected: Int) -> [UInt8] {
    var digest = [UInt8](repeating: 0, count: expected)
    var length: UInt32 = 0
    let ok = bytes.withUnsafeBufferPointer { input in
        digest.withUnsafeMutableBufferPointer { output in
            EVP_Digest(input.baseAddress, input.count, output.baseAddress, &length, md, nil)
        }
    }
    precondition(ok == 1 && length == UInt32(expected), "EVP_Digest failed")
    return digest
}

public enum HMAC {
    public static func sha256(key: [UInt8], message: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: SHA256.digestLength)
        var length: UInt32 = 0
        let result = key.withUnsafeBufferPointer { keyBytes in
            message.withUnsafeBufferPointer { input in
                digest.withUnsafeMutableBufferPointer { output in
                    COpenSSL.HMAC(
                        EVP_sha256(), keyBytes.baseAddress, Int32(keyBytes.count), input.baseAddress, input.count,
                        output.baseAddress, &length)
                }
            }
        }
        precondition(result != nil && length == UInt32(SHA256.digestLength), "HMAC(sha256) failed")
        return digest
    }

    public static func sha256(key: [UInt8], message: String) -> [UInt8] { sha256(key: key, message: Array(message.utf8)) }
}

public enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    /// Lowercase hex, two digits per byte.
    public static func lowercase(_ bytes: [UInt8]) -> String {
        var text = [UInt8]()
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}

/// Bytes from OpenSSL's CSPRNG (a per-install key).
public enum RandomBytes {
    public static func generate(_ count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        let ok = bytes.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32(count)) }
        precondition(ok == 1, "RAND_bytes failed")
        return bytes
    }
}
