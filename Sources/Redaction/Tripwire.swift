import HTTP1Codec
import SecretScan

#if canImport(Glibc)
    import Glibc
#endif

/// The second, independent layer: before a log line is written it is scanned for every secret value
/// the store holds, raw, percent-encoded, base64 and base64url. A hit is replaced and counted; the
/// count should stay 0. It is a tripwire, not the design.
public struct Tripwire: Sendable {
    private let needles: [[UInt8]]

    /// `secrets`: each secret's exact bytes (`SecretValue.exposedBytes`).
    public init(secrets: [[UInt8]]) {
        var needles: Set<[UInt8]> = []
        for raw in secrets where raw.count >= 4 {
            // How the bytes can look in a line (which is UTF-8): as themselves (text decoded as
            // UTF-8, a JSON body), and as a header value puts them, one scalar per byte, so a
            // non-ASCII byte is widened to two (`é` = C3 A9 becomes C3 83 C2 A9).
            var forms = [raw, Array(HTTPField.value(wireBytes: raw).utf8)]
            // The JSON writer escapes `"`, `\` and tab, which would split a needle; a value inside a
            // body summary (a JSON string inside the line's JSON string) is escaped twice.
            let escaped = forms.map(Self.jsonEscaped)
            forms += escaped + escaped.map(Self.jsonEscaped)
            for form in forms { needles.insert(form) }
            let percent = Array(PercentEncoding.encode(raw).utf8)
            needles.insert(percent)
            needles.insert(SecretEncoding.lowercasingHex(percent))  // %c3%a9 is as valid as %C3%A9
            needles.insert(Array(Base64.encode(raw).utf8))
            needles.insert(Array(Base64.encodeURLSafe(raw).utf8))
            // Base64 of a value inside a longer plaintext shifts by position: the unpadded core of
            // each of the three alignments still appears.
            for shift in 1...2 {
                let shifted = Base64.encode([UInt8](repeating: 0, count: shift) + raw)
                let core = String(shifted.dropFirst(4).dropLast(4))
                if core.utf8.count >= 8 { needles.insert(Array(core.utf8)) }
            }
        }
        self.needles = needles.filter { !$0.isEmpty }.sorted { $0.count > $1.count }
    }

    static func jsonEscaped(_ bytes: [UInt8]) -> [UInt8] {
        var output: [UInt8] = []
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): output += [UInt8(ascii: "\\"), byte]
            case 0x09: output += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
            default: output.append(byte)
            }
        }
        return output
    }

    /// The line with every hit replaced by `<tripwire>`, and how many hits there were.
    public func scrub(_ line: String) -> (line: String, hits: Int) {
        let (bytes, hits) = scrub(Array(line.utf8))
        return hits == 0 ? (line, 0) : (String(decoding: bytes, as: UTF8.self), hits)
    }

    /// The log line as bytes: every needle found is replaced by `<tripwire>` (the line is only
    /// copied when something is found, which should be never).
    public func scrub(_ line: [UInt8]) -> (line: [UInt8], hits: Int) {
        guard !needles.isEmpty else { return (line, 0) }
        var bytes = line
        var hits = 0
        for needle in needles {
            while let range = Self.find(needle, in: bytes) {
                bytes.replaceSubrange(range, with: Self.marker)
                hits += 1
            }
        }
        return (bytes, hits)
    }

    static let marker = Array("<tripwire>".utf8)

    static func find(_ needle: [UInt8], in bytes: [UInt8]) -> Range<Int>? {
        bytes.withUnsafeBufferPointer { find(needle, in: $0) }
    }

    /// memchr + memcmp over contiguous bytes: no copy on the (normal) path where nothing is found.
    static func find(_ needle: [UInt8], in haystack: UnsafeBufferPointer<UInt8>) -> Range<Int>? {
        needle.withUnsafeBytes { pattern -> Range<Int>? in
            guard let base = haystack.baseAddress, let first = pattern.first, haystack.count >= pattern.count else { return nil }
            var offset = 0
            let last = haystack.count - pattern.count
            while offset <= last {
                // memchr finds candidates for the first byte; memcmp confirms the rest.
                guard let hit = memchr(base + offset, Int32(first), last - offset + 1) else { return nil }
                let position = UnsafeRawPointer(hit) - UnsafeRawPointer(base)
                if memcmp(base + position, pattern.baseAddress!, pattern.count) == 0 { return position..<(position + pattern.count) }
                offset = position + 1
            }
            return nil
        }
    }
}
