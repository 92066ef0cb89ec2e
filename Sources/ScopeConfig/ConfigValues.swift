import HTTP1Codec
import PosixSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The value types every section reads: mappings with their allowed keys, lists, strings, numbers,
/// durations, header names, addresses and paths.
extension Decoder {
    func mapping(_ node: YAMLNode, allowed: [String], context: String) throws(ConfigError) -> [String: YAMLNode] {
        if node.isNull { return [:] }
        guard case .mapping(let pairs) = node.value else { throw error(node, "\(context) must be a mapping") }
        var result: [String: YAMLNode] = [:]
        for (keyNode, value) in pairs {
            guard case .scalar(let key, _) = keyNode.value else { throw error(keyNode, "keys must be strings") }
            guard allowed.contains(key) else {
                // A key one edit from an allowed one is a misspelling (`secrets` for proxy_auth's
                // `secret`); otherwise a key that belongs elsewhere says where.
                let closeMisspelling = allowed.contains { Self.editDistance(key, $0) <= 1 }
                let hint = closeMisspelling ? "" : placementHint(key, context: context)
                throw error(keyNode, "unknown key '\(key)' in \(context)" + (hint.isEmpty ? suggestion(key, Set(allowed)) : hint))
            }
            result[key] = value
        }
        return result
    }

    func list(_ node: YAMLNode) throws(ConfigError) -> [YAMLNode] {
        if node.isNull { return [] }
        guard case .sequence(let items) = node.value else { throw error(node, "expected a list") }
        return items
    }

    func string(_ node: YAMLNode) throws(ConfigError) -> String {
        guard case .scalar(let text, _) = node.value else { throw error(node, "expected a string") }
        return text
    }

    func nonEmptyString(_ node: YAMLNode) throws(ConfigError) -> String {
        let text = try string(node)
        guard !text.isEmpty else { throw error(node, "expected a non-empty string") }
        return text
    }

    func bool(_ node: YAMLNode) throws(ConfigError) -> Bool {
        guard case .scalar(let text, plain: true) = node.value else { throw error(node, "expected true or false") }
        switch text {
        case "true", "True", "TRUE": return true
        case "false", "False", "FALSE": return false
        default: throw error(node, "expected true or false")
        }
    }

    /// One word of a closed set (`scrub: strict`). Plain `on`/`off` stay words: YAMLDocument keeps
    /// scalars as written, so YAML 1.1's boolean reading of them never happens here.
    func word<Word: RawRepresentable & CaseIterable>(_ node: YAMLNode, key: String, as: Word.Type) throws(ConfigError) -> Word
    where Word.RawValue == String {
        let allowed = Word.allCases.map(\.rawValue)
        let wordList = allowed.dropLast().joined(separator: ", ") + " or " + allowed.last!
        guard case .scalar(let text, _) = node.value else { throw error(node, "\(key) must be \(wordList)") }
        guard let value = Word(rawValue: text) else {
            let hint =
                ["true", "yes"].contains(text.lowercased())
                ? " (for \(text) write on)"
                : ["false", "no"].contains(text.lowercased()) ? " (for \(text) write off)" : ""
            throw error(node, "\(key) must be \(wordList), not '\(text)'\(hint)")
        }
        return value
    }

    func int(_ node: YAMLNode) throws(ConfigError) -> Int {
        guard case .scalar(let text, plain: true) = node.value, let value = Int(text) else { throw error(node, "expected a whole number") }
        return value
    }

    /// "250ms", "2s", "1m" -> milliseconds (at least 1 ms, at most a day). The number is bounded
    /// by the unit's share of a day before it is multiplied: `9223372036854776s` is refused, not
    /// an overflow (docs/security-model.md, "Strict parsing").
    func duration(_ node: YAMLNode) throws(ConfigError) -> Int {
        let text = try string(node)
        let units: [(String, Int)] = [("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000)]
        for (suffix, factor) in units where text.hasSuffix(suffix) {
            if let number = BoundedDecimal.parse(text.utf8.dropLast(suffix.utf8.count), maximum: 86_400_000 / factor), number > 0 {
                return number * factor
            }
            break
        }
        throw error(node, "invalid duration '\(text)': use a whole number with ms, s, m or h, like 250ms or 2s")
    }

    func headerName(_ node: YAMLNode) throws(ConfigError) -> String {
        let name = try nonEmptyString(node)
        guard HTTPField.isValidName(name) else { throw error(node, "'\(name)' is not a valid header name") }
        return name
    }

    func hostPort(_ node: YAMLNode) throws(ConfigError) -> HostPort {
        let text = try string(node)
        guard let address = ListenAddress.parse(text) else { throw error(node, ListenAddress.problem(text)) }
        if let problem = address.hostProblem { throw error(node, problem) }
        return address
    }

    /// `~/x` -> home; relative paths -> next to the config file (when `relativeTo` is given), made
    /// absolute against the working directory when the config file was named relatively: every
    /// path in a `ProxyConfiguration` is absolute, so `config print` writes a config that means the
    /// same saved anywhere (the keys: `ConfigLoader.pathKeys`).
    func expand(_ path: String, relativeTo configFile: String?) -> String {
        if path == "~" { return home }
        if path.hasPrefix("~/") { return home + path.dropFirst() }
        if path.hasPrefix("/") { return path }
        guard let configFile else { return path }
        let directory = configFile.lastIndex(of: "/").map { String(configFile[...$0]) } ?? ""
        return directory.hasPrefix("/") ? directory + path : Self.workingDirectory() + "/" + directory + path
    }

    static func workingDirectory() -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buffer, buffer.count) != nil else { return "." }
        return String(cString: buffer)
    }

    /// ", did you mean 'x'?" for the closest candidate within edit distance 2.
    func suggestion(_ word: String, _ candidates: Set<String>) -> String {
        let best = candidates.map { ($0, Self.editDistance(word, $0)) }.min { $0.1 < $1.1 || ($0.1 == $1.1 && $0.0 < $1.0) }
        guard let best, best.1 <= 2 else { return "" }
        return ", did you mean '\(best.0)'?"
    }

    /// See `EditDistance`: `pahts` is 1 from `paths` and 2 from `pass`.
    static func editDistance(_ a: String, _ b: String) -> Int { EditDistance.between(a, b) }
}
