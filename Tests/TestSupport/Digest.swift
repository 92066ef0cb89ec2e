import COpenSSL
import Foundation

/// Incremental SHA-256 over OpenSSL, for comparing large streamed bodies end to end.
public final class SHA256Digest: @unchecked Sendable {
    private let context: OpaquePointer

    public init() {
        context = EVP_MD_CTX_new()
        EVP_DigestInit_ex(context, EVP_sha256(), nil)
    }

    deinit { EVP_MD_CTX_free(context) }

    public func update(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { _ = EVP_DigestUpdate(context, $0.baseAddress, $0.count) }
    }

    public func update(_ bytes: UnsafeRawBufferPointer) {
        _ = EVP_DigestUpdate(context, bytes.baseAddress, bytes.count)
    }

    public func hexDigest() -> String {
        var output = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        EVP_DigestFinal_ex(context, &output, &length)
        return output.map { String(format: "%02x", $0) }.joined()
    }
}

/// Deterministic pseudo-random bytes (xorshift), so big-body tests need no fixture files.
public func pseudoRandomBlock(count: Int, seed: UInt64) -> [UInt8] {
    var state = seed | 1
    var result = [UInt8](repeating: 0, count: count)
    result.withUnsafeMutableBytes { raw in
        let words = raw.bindMemory(to: UInt64.self)
        for index in words.indices {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            words[index] = state
        }
    }
    return result
}
