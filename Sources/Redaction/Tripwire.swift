import HTTP1Codec
import SecretScan

/// The second, independent layer: before a log line is written it is scanned for every secret value
/// the store holds, in every `SecretEncoding` and as a log line renders it. A hit is replaced and
/// counted; the count should stay 0. It is a tripwire, not the design.
public struct Tripwire: Sendable {
    private let needles: PatternAutomaton

    /// `secrets`: each secret's exact bytes (`SecretValue.exposedBytes`); those under 4 bytes are
    /// not looked for (they would match ordinary text).
    public init(secrets: [[UInt8]]) {
        var needles: Set<[UInt8]> = []
        for raw in secrets where raw.count >= 4 {
            // How the bytes can look in a line (which is UTF-8): as themselves (text decoded as
            // UTF-8, a JSON body), and as a header value puts them, one scalar per byte, so a
            // non-ASCII byte is widened to two (`é` = C3 A9 becomes C3 83 C2 A9).
            var renderings = [raw, Array(HTTPField.value(wireBytes: raw).utf8)]
            // The JSON writer escapes `"`, `\` and tab, which would split a needle; a value inside a
            // body summary (a JSON string inside the line's JSON string) is escaped twice.
            let escaped = renderings.map(Self.jsonEscaped)
            renderings += escaped + escaped.map(Self.jsonEscaped)
            needles.formUnion(renderings)
            needles.formUnion(SecretEncoding.forms(of: raw).map(\.bytes))
        }
        self.needles = PatternAutomaton(patterns: needles.sorted { $0.lexicographicallyPrecedes($1) })
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

    /// The log line as bytes: each run of overlapping needles found is one hit, replaced whole by
    /// `<tripwire>` (so no part of an overlapping value stays). The line is only copied when
    /// something is found, which should be never.
    public func scrub(_ line: [UInt8]) -> (line: [UInt8], hits: Int) {
        // Matches arrive in the order of their ends; a later one can start earlier (a longer
        // needle), so runs are merged as they come.
        var hits: [Range<Int>] = []
        line.withUnsafeBufferPointer { bytes in
            needles.forEachMatch(in: bytes) { _, range in
                var merged = range
                while let last = hits.last, last.upperBound > merged.lowerBound {
                    merged = min(last.lowerBound, merged.lowerBound)..<max(last.upperBound, merged.upperBound)
                    hits.removeLast()
                }
                hits.append(merged)
            }
        }
        guard !hits.isEmpty else { return (line, 0) }
        var bytes = line
        for range in hits.reversed() { bytes.replaceSubrange(range, with: Self.marker) }
        return (bytes, hits.count)
    }

    static let marker = Array("<tripwire>".utf8)
}
