import HTTP1Codec
import ScopePolicy
import SecretScan

/// Where a placeholder sits decides how the value that replaces it is written: as it is in a
/// header, percent-encoded in a target or a form, escaped inside a JSON string.
public enum PlaceholderSite: Sendable, Equatable {
    case header(String)
    case target
    case jsonBody
    case formBody

    /// For errors and the log: "target", "body", or the header's name.
    public var label: String {
        switch self {
        case .header(let name): "header \(name)"
        case .target: "target"
        case .jsonBody, .formBody: "body"
        }
    }

    /// The body types placeholders are substituted in (by media type; parameters ignored).
    /// The site of a request body with these fields: its Content-Type (one value: admission refuses
    /// two different ones) and every Content-Encoding field's codings.
    public static func body(of fields: HTTPFields) -> PlaceholderSite? {
        let codings = fields.listMembers("content-encoding").filter { $0 != "identity" }
        return body(contentType: fields.singleValue(of: "content-type").agreed, contentEncoding: codings.first)
    }

    public static func body(contentType: String?, contentEncoding: String?) -> PlaceholderSite? {
        // A compressed body's placeholders cannot be seen, let alone replaced.
        if let contentEncoding, !contentEncoding.isEmpty, contentEncoding.lowercased() != "identity" { return nil }
        guard let contentType else { return nil }
        let media = (contentType.split(separator: ";", maxSplits: 1).first ?? "")
            .trimmingCharacters(in: " \t").lowercased()
        if media == "application/json" || (media.hasPrefix("application/") && media.hasSuffix("+json")) { return .jsonBody }
        if media == "application/x-www-form-urlencoded" { return .formBody }
        return nil
    }
}

/// Replaces placeholders by secret values in one request, for the secrets its origin's scopes
/// `substitute`, and refuses any other placeholder: fail closed, before anything is sent.
public struct PlaceholderSubstitution {
    public enum Outcome: Equatable {
        case unchanged
        case rewritten([UInt8], secrets: [String])
        /// A placeholder of `secret` this request may not carry (or one the proxy cannot replace
        /// where it sits: only its plain form, or inside `Basic` credentials, is replaced).
        case refused(secret: String)
        /// A substituted secret has no value right now.
        case unavailable(secret: String)
        /// The rewritten bytes would pass `limit` (long values, many placeholders): refused, never built.
        case tooLarge
    }

    /// Placeholders only (every encoding of each: a base64 one is seen, and refused if it cannot be replaced).
    let watch: SecretWatch
    let substitutable: Set<String>
    let secrets: any SecretLookup
    let texts: [String: String]

    public init?(index: SecretValueIndex, substitutable: Set<String>, secrets: any SecretLookup) {
        guard let watch = index.guardWatch(allowed: [], values: false, placeholders: true) else { return nil }
        self.watch = watch
        self.substitutable = substitutable
        self.secrets = secrets
        texts = index.placeholders.texts
    }

    public func rewrite(_ bytes: [UInt8], at site: PlaceholderSite, limit: Int = .max) -> Outcome {
        var matches = watch.matches(in: bytes)
        guard !matches.isEmpty else { return .unchanged }
        var input = bytes
        var substituted: [String] = []
        // `Authorization: Basic base64(user:placeholder)` (git, many CLIs): decode, replace, re-encode.
        if case .header = site, let inner = Self.basicCredentials(bytes) {
            switch rewrite(inner, at: .header(""), limit: limit) {
            case .rewritten(let replaced, let names):
                input = Array("Basic ".utf8) + Array(Base64.encode(replaced).utf8)
                substituted += names
                matches = watch.matches(in: input)
            case .refused(let secret): return .refused(secret: secret)
            case .unavailable(let secret): return .unavailable(secret: secret)
            case .tooLarge: return .tooLarge
            case .unchanged: break
            }
        }
        var output: [UInt8] = []
        output.reserveCapacity(input.count)
        var copied = 0
        for match in matches.sorted(by: { $0.range.lowerBound < $1.range.lowerBound }) {
            let secret = watch.secrets[match.pattern.secret]
            guard substitutable.contains(secret), match.pattern.bytes.elementsEqual(texts[secret]?.utf8 ?? "".utf8) else {
                return .refused(secret: secret)
            }
            guard match.range.lowerBound >= copied else { continue }  // the same text found as two forms
            guard let value = secrets.value(of: secret) else { return .unavailable(secret: secret) }
            // Worst case 6 bytes per value byte (`\u00XX`): checked before anything is built.
            guard output.count + (match.range.lowerBound - copied) + value.exposedBytes.count * 6 <= limit else { return .tooLarge }
            output += input[copied..<match.range.lowerBound]
            Self.append(value.exposedBytes, escapedFor: site, to: &output)
            copied = match.range.upperBound
            if !substituted.contains(secret) { substituted.append(secret) }
        }
        output += input[copied...]
        guard output.count <= limit else { return .tooLarge }
        return .rewritten(output, secrets: substituted)
    }

    /// The decoded credentials of a `Basic` header value, when it is one.
    static func basicCredentials(_ value: [UInt8]) -> [UInt8]? {
        let scheme = Array("basic ".utf8)
        guard value.count > scheme.count,
            value.prefix(scheme.count).map({ $0 >= 0x41 && $0 <= 0x5a ? $0 | 0x20 : $0 }).elementsEqual(scheme)
        else { return nil }
        let encoded = String(decoding: value.dropFirst(scheme.count), as: UTF8.self)
        return Base64.decode(encoded.trimmingCharacters(in: " \t"))
    }

    static func append(_ value: [UInt8], escapedFor site: PlaceholderSite, to output: inout [UInt8]) {
        switch site {
        case .header:
            output += value
        case .target, .formBody:
            output += PercentEncoding.encode(value).utf8
        case .jsonBody:
            let hex = Array("0123456789abcdef".utf8)
            for byte in value {
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): output += [UInt8(ascii: "\\"), byte]
                case 0..<0x20: output += Array("\\u00".utf8) + [hex[Int(byte >> 4)], hex[Int(byte & 0x0f)]]
                default: output.append(byte)
                }
            }
        }
    }
}

extension StringProtocol {
    /// Without the leading and trailing characters of `set` (spaces and tabs, for header values).
    func trimmingCharacters(in set: String) -> String {
        let scalars = Set(set.unicodeScalars)
        let trimmed = drop { $0.unicodeScalars.allSatisfy(scalars.contains) }
        return String(trimmed.reversed().drop { $0.unicodeScalars.allSatisfy(scalars.contains) }.reversed())
    }
}
