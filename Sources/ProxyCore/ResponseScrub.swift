import HTTP1Codec
import SecretScan

/// The response half of "secrets that cannot leave": values the proxy sent in an exchange, masked
/// wherever the response carries them back (an origin that echoes request headers, a debug page).
/// Bodies are masked by the engine as they stream (`relayResponseBody(scrub:)`); heads here.
public enum ResponseScrub {
    /// Masks every match in the header values (same length, `*`). Returns what was found.
    public static func scrubFields(_ fields: inout HTTPFields, with watch: SecretWatch) -> [SecretFinding] {
        var findings: [SecretFinding] = []
        var scrubbed: HTTPFields?
        for (index, field) in fields.enumerated() {
            // Most values are ASCII, whose UTF-8 is their wire bytes: scanned in place, no copy.
            let clean = field.value.utf8.withContiguousStorageIfAvailable { utf8 in
                utf8.allSatisfy { $0 < 0x80 } && watch.firstMatch(in: utf8) == nil
            }
            if clean == true {
                scrubbed?.append(name: field.name, value: field.value)
                continue
            }
            var bytes = HTTPField.wireBytes(of: field.value)
            let matches = watch.matches(in: bytes)
            if matches.isEmpty {
                scrubbed?.append(name: field.name, value: field.value)
                continue
            }
            if scrubbed == nil {
                scrubbed = HTTPFields()
                for earlier in fields.prefix(index) { scrubbed!.append(name: earlier.name, value: earlier.value) }
            }
            for match in matches {
                for offset in match.range { bytes[offset] = SecretScrubber.mask }
                findings.append(watch.finding(match))
            }
            scrubbed!.append(name: field.name, value: HTTPField.value(wireBytes: bytes))
        }
        if let scrubbed { fields = scrubbed }
        return findings
    }

    /// The Content-Encoding of a body the scrub cannot read in flight (anything but identity).
    public static func unscannableEncoding(_ fields: HTTPFields) -> String? {
        let codings = fields.listMembers("content-encoding").map { $0.lowercased() }.filter { $0 != "identity" }
        return codings.isEmpty ? nil : codings.joined(separator: ", ")
    }
}
