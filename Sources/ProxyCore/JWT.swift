import Digests
import HTTP1Codec
import JSONText

/// One claim value of a JWT the proxy makes: every claim it sets is a string or a NumericDate /
/// number (RFC 7519 §2, §4.1).
public enum JWTClaim: Sendable, Equatable {
    case string(String)
    case integer(Int64)
}

/// Compact JWS (RFC 7515 §7.1) signed JWTs (RFC 7519 §7.1): `BASE64URL(header) . BASE64URL(claims)
/// . BASE64URL(signature)`, the header `{"alg","typ":"JWT","kid"?}`. The JSON is written by
/// JSONText, in the order given (a verifier reads members by name; the order only makes the
/// output reproducible for tests).
public enum JWT {
    /// base64url without padding (RFC 7515 §2, RFC 4648 §5).
    public static func base64URL(_ bytes: [UInt8]) -> String { Base64.encodeURLSafe(bytes) }

    public static func sign(
        claims: [(String, JWTClaim)], key: SigningKey, algorithm: JWTAlgorithm, keyID: String?
    ) throws(SigningKeyError) -> String {
        let signingInput = signingInput(claims: claims, algorithm: algorithm, keyID: keyID)
        let signature = try key.sign(Array(signingInput.utf8), algorithm: algorithm)
        return signingInput + "." + base64URL(signature)
    }

    /// The JWS Signing Input (RFC 7515 §5.1 step 5): the encoded header and payload, dot-joined.
    static func signingInput(claims: [(String, JWTClaim)], algorithm: JWTAlgorithm, keyID: String?) -> String {
        var header = JSONLine()
        header.string("alg", algorithm.rawValue)
        header.string("typ", "JWT")
        header.optionalString("kid", keyID)
        var payload = JSONLine()
        for (name, value) in claims {
            switch value {
            case .string(let text): payload.string(name, text)
            case .integer(let number): payload.raw(name, String(number))
            }
        }
        return base64URL(header.finish()) + "." + base64URL(payload.finish())
    }
}
