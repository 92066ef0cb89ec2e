import HTTP1Codec

/// How a secret's bytes can appear in a stream other than as themselves. This is the one place
/// that knows the encodings; the log tripwire and the body scanner both expand secrets here.
public enum SecretEncoding: Sendable, Hashable, CustomStringConvertible {
    case raw
    case percentUppercase
    /// `%c3%a9` is as valid as `%C3%A9` (RFC 3986 §2.1), and some clients write it.
    case percentLowercase
    /// The secret starting at byte `alignment` (0, 1 or 2) of a 3-byte base64 group: inside a
    /// longer plaintext (`user:secret` in Basic credentials) its characters shift with its position.
    case base64(alignment: Int)
    case base64URL(alignment: Int)

    public static let all: [SecretEncoding] =
        [.raw, .percentUppercase, .percentLowercase]
        + (0...2).map { .base64(alignment: $0) } + (0...2).map { .base64URL(alignment: $0) }

    /// Shorter base64 runs are dropped: fewer than 48 bits would turn up by chance in large base64
    /// bodies (a 36-bit run appears about once per 64 GiB of random base64 per pattern; 48 bits
    /// once per 256 TiB).
    public static let minimumBase64Length = 8

    public var description: String {
        switch self {
        case .raw: "raw"
        case .percentUppercase: "percent"
        case .percentLowercase: "percent-lowercase"
        case .base64(let alignment): "base64+\(alignment)"
        case .base64URL(let alignment): "base64url+\(alignment)"
        }
    }

    /// The bytes this encoding of `secret` always shows, whatever surrounds it; nil when the form
    /// is too short to mean anything (a base64 run under `minimumBase64Length`).
    public func encode(_ secret: [UInt8]) -> [UInt8]? {
        switch self {
        case .raw: return secret
        case .percentUppercase: return Array(PercentEncoding.encode(secret).utf8)
        case .percentLowercase: return Self.lowercasingHex(Array(PercentEncoding.encode(secret).utf8))
        case .base64(let alignment): return Self.base64Run(secret, alignment: alignment, urlSafe: false)
        case .base64URL(let alignment): return Self.base64Run(secret, alignment: alignment, urlSafe: true)
        }
    }

    /// Every encoding of `secret` with its bytes, an encoding that gives the same bytes as an
    /// earlier one left out (an all-unreserved secret is its own percent-encoding).
    /// A base64 form comes twice: the run any surrounding text leaves intact, and that run with the
    /// last character added for when the value ends the encoded text (`finalBase64Run`).
    public static func forms(of secret: [UInt8]) -> [(encoding: SecretEncoding, bytes: [UInt8])] {
        var forms: [(encoding: SecretEncoding, bytes: [UInt8])] = []
        func add(_ encoding: SecretEncoding, _ bytes: [UInt8]?) {
            guard let bytes, !bytes.isEmpty, !forms.contains(where: { $0.bytes == bytes }) else { return }
            forms.append((encoding, bytes))
        }
        for encoding in all {
            add(encoding, encoding.encode(secret))
            switch encoding {
            case .base64(let alignment): add(encoding, finalBase64Run(secret, alignment: alignment, urlSafe: false))
            case .base64URL(let alignment): add(encoding, finalBase64Run(secret, alignment: alignment, urlSafe: true))
            case .raw, .percentUppercase, .percentLowercase: break
            }
        }
        return forms
    }

    /// The base64 characters whose six bits all come from the secret when it starts `alignment`
    /// bytes into a group: character k covers bits [6k, 6k+6) of the group-aligned plaintext, so
    /// those with 8·alignment <= 6k and 6k+6 <= 8·(alignment+count). Its neighbours' bits change
    /// the characters at either edge, which are left out.
    static func base64Run(_ secret: [UInt8], alignment: Int, urlSafe: Bool) -> [UInt8]? {
        precondition((0...2).contains(alignment))
        let startBit = 8 * alignment, endBit = 8 * (alignment + secret.count)
        let first = (startBit + 5) / 6, end = endBit / 6
        guard end - first >= minimumBase64Length else { return nil }
        let encoded =
            urlSafe
            ? Base64.encodeURLSafe([UInt8](repeating: 0, count: alignment) + secret)
            : Base64.encode([UInt8](repeating: 0, count: alignment) + secret)
        return Array(Array(encoded.utf8)[first..<end])
    }

    /// `base64Run` when the value ends the encoded text (a token encoded alone, the password that
    /// closes `Basic` credentials): the character after the run holds the value's last bits and
    /// zeros, which every encoder writes, so it is known as well; without it the scrub would leave
    /// up to four bits of the last byte showing. Padding (`=`) is not part of it: it tells only the
    /// length, which the mask shows anyway. nil when the value ends on a character boundary (then
    /// the run already ends the text) or the form is too short.
    static func finalBase64Run(_ secret: [UInt8], alignment: Int, urlSafe: Bool) -> [UInt8]? {
        precondition((0...2).contains(alignment))
        let startBit = 8 * alignment, endBit = 8 * (alignment + secret.count)
        guard endBit % 6 != 0 else { return nil }
        let first = (startBit + 5) / 6, end = endBit / 6 + 1
        guard end - first >= minimumBase64Length else { return nil }
        let plaintext = [UInt8](repeating: 0, count: alignment) + secret
        let encoded = Array((urlSafe ? Base64.encodeURLSafe(plaintext) : Base64.encode(plaintext)).utf8)
        return Array(encoded[first..<end])
    }

    /// `%XX` escapes with lowercase hex digits; other bytes unchanged (also the log tripwire's).
    public static func lowercasingHex(_ encoded: [UInt8]) -> [UInt8] {
        var output = encoded
        var index = 0
        while index < output.count {
            if output[index] == UInt8(ascii: "%"), index + 2 < output.count {
                for digit in (index + 1)...(index + 2) where output[digit] >= 0x41 && output[digit] <= 0x46 { output[digit] |= 0x20 }
                index += 3
            } else {
                index += 1
            }
        }
        return output
    }
}
