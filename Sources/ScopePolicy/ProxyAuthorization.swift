import HTTP1Codec

/// A Proxy-Authorization value, read strictly (RFC 9110 §11.6.2, RFC 7617, RFC 6750 §2.1). The
/// bytes are kept as bytes: a header value holds one scalar per byte, so a non-ASCII password is
/// compared with the secret's bytes unchanged.
public enum ProxyAuthorization: Sendable, Equatable {
    case basic(user: [UInt8], password: [UInt8])
    case bearer(token: [UInt8])
    /// Sent, but not a credential this proxy reads: an unknown scheme, bad base64, no colon, too
    /// long. Never a reason to try another way of recognising the client.
    case malformed(Malformation)

    public enum Malformation: String, Sendable, Equatable {
        case unknownScheme = "unknown_scheme"
        case badBase64 = "bad_base64"
        case missingColon = "missing_colon"
        case empty = "empty_credentials"
        case tooLong = "too_long"
    }

    /// The scheme of a credential this proxy reads; nil when malformed.
    public var scheme: ProxyAuthScheme? {
        switch self {
        case .basic: .basic
        case .bearer: .bearer
        case .malformed: nil
        }
    }

    /// Longer values are refused before any decoding (the head limit already bounds them; this
    /// keeps the constant-time comparison's work small and fixed).
    public static let maxLength = 4096

    public static func parse(_ value: String) -> ProxyAuthorization {
        let bytes = HTTPField.wireBytes(of: value)
        guard bytes.count <= maxLength else { return .malformed(.tooLong) }
        var slice = bytes[...]
        while slice.first == 0x20 || slice.first == 0x09 { slice.removeFirst() }
        while slice.last == 0x20 || slice.last == 0x09 { slice.removeLast() }
        guard let space = slice.firstIndex(where: { $0 == 0x20 || $0 == 0x09 }) else {
            let scheme = String(decoding: slice, as: UTF8.self).lowercased()
            return .malformed(slice.isEmpty || scheme == "basic" || scheme == "bearer" ? .empty : .unknownScheme)
        }
        let scheme = String(decoding: slice[..<space], as: UTF8.self).lowercased()
        var credentials = slice[space...]
        while credentials.first == 0x20 || credentials.first == 0x09 { credentials.removeFirst() }
        guard !credentials.isEmpty else { return .malformed(.empty) }
        switch scheme {
        case "bearer":
            // b64token (RFC 6750 §2.1): no spaces inside.
            guard !credentials.contains(where: { $0 == 0x20 || $0 == 0x09 }) else { return .malformed(.unknownScheme) }
            return .bearer(token: Array(credentials))
        case "basic":
            guard let decoded = strictBase64(credentials) else { return .malformed(.badBase64) }
            guard let colon = decoded.firstIndex(of: UInt8(ascii: ":")) else { return .malformed(.missingColon) }
            return .basic(user: Array(decoded[..<colon]), password: Array(decoded[(colon + 1)...]))
        default:
            return .malformed(.unknownScheme)
        }
    }

    /// RFC 4648 §4 base64 with its padding: a length that is a multiple of 4, `=` only at the end
    /// (at most two), no other characters. Lenient decoders disagree on the rest, and a credential
    /// must mean one thing.
    static func strictBase64(_ text: ArraySlice<UInt8>) -> [UInt8]? {
        guard !text.isEmpty, text.count % 4 == 0 else { return nil }
        func value(_ byte: UInt8) -> UInt8? {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): byte - UInt8(ascii: "A")
            case UInt8(ascii: "a")...UInt8(ascii: "z"): byte - UInt8(ascii: "a") + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0") + 52
            case UInt8(ascii: "+"): 62
            case UInt8(ascii: "/"): 63
            default: nil
            }
        }
        let padding = text.reversed().prefix { $0 == UInt8(ascii: "=") }.count
        guard padding <= 2 else { return nil }
        var output: [UInt8] = []
        output.reserveCapacity(text.count / 4 * 3)
        var group: UInt32 = 0
        var count = 0
        for byte in text.dropLast(padding) {
            guard let v = value(byte) else { return nil }
            group = group << 6 | UInt32(v)
            count += 1
            if count == 4 {
                output += [UInt8(group >> 16 & 0xFF), UInt8(group >> 8 & 0xFF), UInt8(group & 0xFF)]
                group = 0
                count = 0
            }
        }
        switch count {
        case 0: break
        case 2:
            guard group & 0xF == 0 else { return nil }  // non-canonical trailing bits
            output.append(UInt8(group >> 4 & 0xFF))
        case 3:
            guard group & 0x3 == 0 else { return nil }
            output += [UInt8(group >> 10 & 0xFF), UInt8(group >> 2 & 0xFF)]
        default:
            return nil
        }
        return output
    }

    /// Compares in time that depends only on the lengths, never on where the bytes differ.
    public static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var difference = UInt8(a.count == b.count ? 0 : 1)
        for index in 0..<max(a.count, b.count) {
            difference |= (index < a.count ? a[index] : 0) ^ (index < b.count ? b[index] : 0)
        }
        return difference == 0
    }
}

extension ProxyAuthorization: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// Never the credential: test failures and logs print the scheme only.
    public var description: String {
        switch self {
        case .basic: "Basic <redacted>"
        case .bearer: "Bearer <redacted>"
        case .malformed(let why): "malformed(\(why.rawValue))"
        }
    }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: [:]) }
}
