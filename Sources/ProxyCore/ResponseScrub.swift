import HTTP1Codec
import SecretScan

/// The response half of "secrets that cannot leave": values the proxy sent in an exchange, masked
/// wherever the response carries them back (an origin that echoes request headers, a debug page).
/// Bodies are masked by the engine as they stream (`relayResponseBody(scrub:)`); heads here.
public enum ResponseScrub {
    /// Masks every match in a response head: status reason, field names and values (same length,
    /// `*`; a masked name is still a token). Returns what was found.
    public static func scrubHead(_ head: inout ResponseHead, with watch: SecretWatch) -> [SecretFinding] {
        var findings = scrubFields(&head.fields, with: watch)
        var reason = HTTPField.wireBytes(of: head.reason)
        let matches = watch.matches(in: reason)
        if !matches.isEmpty {
            for match in matches {
                for offset in match.range { reason[offset] = SecretScrubber.mask }
                findings.append(watch.finding(match))
            }
            head.reason = HTTPField.value(wireBytes: reason)
        }
        return findings
    }

    /// Masks every match in the header values (same length, `*`). Returns what was found.
    public static func scrubFields(_ fields: inout HTTPFields, with watch: SecretWatch) -> [SecretFinding] {
        var findings: [SecretFinding] = []
        var scrubbed: HTTPFields?
        for (index, field) in fields.enumerated() {
            // Most values are ASCII, whose UTF-8 is their wire bytes: scanned in place, no copy.
            let clean =
                field.value.utf8.withContiguousStorageIfAvailable { utf8 in
                    HTTPField.isASCII(utf8) && watch.firstMatch(in: utf8) == nil
                } == true && field.name.utf8.withContiguousStorageIfAvailable { watch.firstMatch(in: $0) == nil } != false
            if clean {
                scrubbed?.append(name: field.name, value: field.value)
                continue
            }
            var bytes = HTTPField.wireBytes(of: field.value)
            var name = Array(field.name.utf8)
            let nameMatches = watch.matches(in: name)
            let matches = watch.matches(in: bytes)
            if matches.isEmpty && nameMatches.isEmpty {
                scrubbed?.append(name: field.name, value: field.value)
                continue
            }
            for match in nameMatches {
                // `*` is a token character: the masked name is still a valid field name.
                for offset in match.range { name[offset] = SecretScrubber.mask }
                findings.append(watch.finding(match))
            }
            if scrubbed == nil {
                scrubbed = HTTPFields()
                for earlier in fields.prefix(index) { scrubbed!.append(name: earlier.name, value: earlier.value) }
            }
            for match in matches {
                for offset in match.range { bytes[offset] = SecretScrubber.mask }
                findings.append(watch.finding(match))
            }
            scrubbed!.append(name: String(decoding: name, as: UTF8.self), value: HTTPField.value(wireBytes: bytes))
        }
        if let scrubbed { fields = scrubbed }
        return findings
    }

    /// Masks every match in bytes the proxy wrote itself (an error answer), same length.
    public static func mask(_ bytes: inout [UInt8], with watch: SecretWatch) {
        for match in watch.matches(in: bytes) {
            for offset in match.range { bytes[offset] = SecretScrubber.mask }
        }
    }

    /// The Content-Encoding of a body the scrub cannot read in flight (anything but identity).
    public static func unscannableEncoding(_ fields: HTTPFields) -> String? {
        let codings = fields.listMembers("content-encoding").map { $0.lowercased() }.filter { $0 != "identity" }
        return codings.isEmpty ? nil : codings.joined(separator: ", ")
    }
}
