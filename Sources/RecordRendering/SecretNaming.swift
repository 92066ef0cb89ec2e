import HTTP1Codec
import ProxyCore
import Redaction
import SecretScan

/// Header values for the live view (docs/view.md): each shown as the access log shows it (a safe
/// header's value as it is, a Location through the URL redactor, anything else `<redacted>`),
/// except that every known secret value or placeholder in it, in every encoding the scanner knows,
/// is named instead (`${github_token}`). A header the log hides shows nothing but those names and a
/// leading authentication scheme (`Bearer ${github_token}`). A value the log hides never appears.
public struct SecretNaming: Sendable {
    public let redactor: Redactor
    /// Every secret value and every placeholder (`SecretValueIndex.everything`); nil: none known.
    public let watch: SecretWatch?

    public init(redactor: Redactor, watch: SecretWatch?) {
        self.redactor = redactor
        self.watch = watch
    }

    /// How the view shows one field's value. `name` must be lowercase.
    public func shown(_ name: String, _ value: String) -> String {
        shownAndNamed(name, value).shown
    }

    /// `shown`, and the secrets named in it (one scan for both).
    public func shownAndNamed(_ name: String, _ value: String) -> (shown: String, named: [(name: String, isPlaceholder: Bool)]) {
        // Nearly every value names nothing: checked in place, without the copies below.
        if isPlainlyClean(value) { return (redactor.shownValue(value, lowercaseName: name), []) }
        let wire = HTTPField.wireBytes(of: value)
        let regions = Self.regions(in: wire, watch: watch)
        return (shown(name, value, wire: wire, regions: regions), regions.flatMap(\.names))
    }

    /// Whether `text` is ASCII (its UTF-8 is its wire bytes) and holds no known value or
    /// placeholder, scanned where it lies: the common case, decided with no copy and no list.
    private func isPlainlyClean(_ text: String) -> Bool {
        guard let watch else { return true }
        return text.utf8.withContiguousStorageIfAvailable { utf8 in
            HTTPField.isASCII(utf8) && watch.firstMatch(in: utf8) == nil
        } ?? false
    }

    private func shown(_ name: String, _ value: String, wire: [UInt8], regions: [Region]) -> String {
        // A value that names nothing is shown as the access log shows it.
        guard !regions.isEmpty else { return redactor.shownValue(value, lowercaseName: name) }
        if redactor.showsValue(lowercaseName: name) {
            let text = HTTPField.value(wireBytes: Self.splice(wire, regions))
            return Redactor.isLocation(name) ? redactor.url(text) : text
        }
        // A hidden header: its scheme word, its references, and `<redacted>` for every other run.
        var shown = ""
        var position = 0
        if let scheme = Self.leadingScheme(wire), scheme.end <= regions[0].range.lowerBound {
            shown = scheme.word + " "
            position = scheme.end
        }
        for region in regions {
            if position < region.range.lowerBound { shown += Redactor.redacted }
            shown += Self.reference(region.names)
            position = region.range.upperBound
        }
        if position < wire.count { shown += Redactor.redacted }
        return shown
    }

    /// A header name for the view: as it is, except that a known value or placeholder in it is
    /// named (an origin that echoes a token as `X-Seen-<token>` shows `x-seen-${token}`).
    public func shownName(_ name: String) -> String {
        if isPlainlyClean(name) { return name }
        let wire = Array(name.utf8)
        let regions = Self.regions(in: wire, watch: watch)
        return regions.isEmpty ? name : String(decoding: Self.splice(wire, regions), as: UTF8.self)
    }

    /// `wire` with each region replaced by its `${name}` references.
    static func splice(_ wire: [UInt8], _ regions: [Region]) -> [UInt8] {
        var named: [UInt8] = []
        var position = 0
        for region in regions {
            named += wire[position..<region.range.lowerBound]
            named += reference(region.names).utf8
            position = region.range.upperBound
        }
        named += wire[position...]
        return named
    }

    /// The fields as `[name, value]` pairs for the view: names lowercased, wire order, repeated
    /// names kept.
    public func shown(_ fields: HTTPFields) -> [(name: String, value: String)] {
        fields.map { field in
            let name = field.lowercasedName
            return (name, shown(name, field.value))
        }
    }

    /// Whether the value carries a known secret value or placeholder, and whose (in order).
    public func names(in value: String) -> [(name: String, isPlaceholder: Bool)] {
        Self.regions(in: HTTPField.wireBytes(of: value), watch: watch).flatMap(\.names)
    }

    /// `${a}`, or `${a}${b}` where the values of two secrets overlap.
    static func reference(_ names: [(name: String, isPlaceholder: Bool)]) -> String {
        names.map { "${\($0.name)}" }.joined()
    }

    /// One run of bytes that some known value covers (overlapping matches merged: every byte of
    /// every match is inside a region), with the secrets matched in it, each once.
    struct Region {
        var range: Range<Int>
        var names: [(name: String, isPlaceholder: Bool)]
    }

    static func regions(in wire: [UInt8], watch: SecretWatch?) -> [Region] {
        guard let watch, !wire.isEmpty else { return [] }
        let matches = watch.matches(in: wire).sorted { $0.range.lowerBound < $1.range.lowerBound }
        var regions: [Region] = []
        for match in matches {
            let finding = watch.finding(match)
            let named = (finding.secret, finding.isPlaceholder)
            if var last = regions.last, match.range.lowerBound < last.range.upperBound {
                last.range = last.range.lowerBound..<max(last.range.upperBound, match.range.upperBound)
                if !last.names.contains(where: { $0.name == named.0 }) { last.names.append(named) }
                regions[regions.count - 1] = last
            } else {
                regions.append(Region(range: match.range, names: [named]))
            }
        }
        return regions
    }

    /// Authentication schemes a hidden header may show (RFC 9110 §11.1 and common vendors'): a fixed
    /// list, so a first word that is itself a credential is never taken for one.
    static let schemes: Set<String> = [
        "basic", "bearer", "token", "digest", "negotiate", "ntlm", "aws4-hmac-sha256", "bot", "apikey", "oauth", "dpop", "ssws",
        "splunk", "sharedkey", "sso-key", "geniekey", "key", "hoba", "mutual", "vapid", "scram-sha-256", "gnap",
    ]

    /// The value's first word and where what follows it starts, when the word is a known scheme.
    static func leadingScheme(_ wire: [UInt8]) -> (word: String, end: Int)? {
        guard let space = wire.firstIndex(of: UInt8(ascii: " ")), space > 0, space <= 32 else { return nil }
        let word = String(decoding: wire[..<space], as: UTF8.self)
        guard schemes.contains(word.lowercased()) else { return nil }
        var end = space
        while end < wire.count, wire[end] == UInt8(ascii: " ") { end += 1 }
        return (word, end)
    }
}

extension SecretValueIndex {
    /// Every secret value and every placeholder, by name (the live view's naming of header values).
    public var everything: SecretWatch? {
        guardWatch(allowed: [], values: true, placeholders: true)
    }
}
