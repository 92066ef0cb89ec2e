/// The AWS shared config and credentials files (`~/.aws/config`, `~/.aws/credentials`) read as
/// botocore reads them: Python's `configparser.RawConfigParser` with its defaults, then botocore's
/// `configloader.raw_config_parse` / `build_profile_map` (docs/ has no copy; botocore is the
/// reference the SDK docs defer to for the INI dialect):
/// - `[name]` starts a section: the text between the first `[` and the last `]` of the stripped
///   line; a name repeated in one file is an error (`strict=True`). `[DEFAULT]` is not a section:
///   its keys are every section's fallbacks (configparser's default section).
/// - `key = value` or `key: value` (the first `=` or `:` splits), key lowercased, both trimmed;
///   no inline comments (`a = b # c` is the value `b # c`); a repeated key in a section is an error.
/// - a line whose first non-blank byte is `#` or `;` is a comment; blank lines are skipped.
/// - a line indented deeper than the key line before it continues that value (joined with
///   "\n"); a key with an empty value followed by such lines is a nested sub-section
///   (`s3 =\n  addressing_style = path`): botocore parses it into a dictionary, none of which is
///   a credential setting, so it is checked (each line needs `=`) and dropped.
/// - anything else (a line before any section, a line without `=`/`:`) is a parse error, which
///   botocore raises too: the file is refused as a whole, never half-read.
/// Bounded: at most `maxFileBytes` and `maxLines`, UTF-8 only. Errors name the file and line,
/// never a byte of the line (a misplaced secret must not reach a log).
public struct AWSSharedConfigFile: Sendable, Equatable {
    /// Sections by name, as written (case kept), `[DEFAULT]`'s keys merged in as fallbacks.
    public let sections: [String: [String: String]]
    /// Section names in file order (botocore's dictionaries keep it: a later section wins).
    public let order: [String]

    public static let maxFileBytes = 1 << 20
    public static let maxLines = 20_000

    public init(sections: [String: [String: String]], order: [String]) {
        self.sections = sections
        self.order = order
    }

    public static func parse(_ bytes: [UInt8], path: String) -> Result<AWSSharedConfigFile, AWSSharedConfigError> {
        func failure(_ line: Int, _ problem: AWSSharedConfigError.Problem) -> Result<AWSSharedConfigFile, AWSSharedConfigError> {
            .failure(AWSSharedConfigError(path: path, line: line, problem: problem))
        }
        guard bytes.count <= maxFileBytes else { return failure(0, .tooLarge(limit: maxFileBytes)) }
        guard String(validating: bytes, as: UTF8.self) != nil else { return failure(0, .notUTF8) }
        let lines = splitLines(bytes)
        guard lines.count <= maxLines else { return failure(0, .tooManyLines(limit: maxLines)) }

        var order: [String] = []
        var sections: [String: [(key: String, lines: [String], line: Int)]] = [:]
        var defaults: [(key: String, lines: [String], line: Int)] = []
        var current: String?  // nil: before any section; "\u{0}DEFAULT" for the default section
        let defaultMarker = "\u{0}DEFAULT"
        var hasKey = false
        var keyIndent = 0

        func appendToLast(_ text: String) {
            guard let current else { return }
            if current == defaultMarker {
                defaults[defaults.count - 1].lines.append(text)
            } else {
                sections[current]![sections[current]!.count - 1].lines.append(text)
            }
        }

        for (index, raw) in lines.enumerated() {
            let number = index + 1
            let stripped = trim(raw)
            if stripped.isEmpty {
                // configparser (`empty_lines_in_values`): a blank line belongs to the value being
                // read, in case an indented line continues it; trailing ones are trimmed at the end.
                if current != nil, hasKey { appendToLast("") }
                continue
            }
            if stripped.first == UInt8(ascii: "#") || stripped.first == UInt8(ascii: ";") { continue }
            let indent = raw.prefix { isBlank($0) }.count
            if current != nil, hasKey, indent > keyIndent {
                appendToLast(String(decoding: stripped, as: UTF8.self))
                continue
            }
            keyIndent = indent
            if stripped.first == UInt8(ascii: "["), let close = stripped.lastIndex(of: UInt8(ascii: "]")), close > stripped.startIndex + 1 {
                let name = String(decoding: stripped[(stripped.startIndex + 1)..<close], as: UTF8.self)
                hasKey = false
                if name == "DEFAULT" {
                    current = defaultMarker
                    continue
                }
                guard sections[name] == nil else { return failure(number, .duplicateSection) }
                sections[name] = []
                order.append(name)
                current = name
                continue
            }
            guard let section = current else { return failure(number, .missingSectionHeader) }
            guard let split = stripped.firstIndex(where: { $0 == UInt8(ascii: "=") || $0 == UInt8(ascii: ":") }) else {
                return failure(number, .noDelimiter)
            }
            let key = String(decoding: trim(stripped[..<split]), as: UTF8.self).lowercased()
            guard !key.isEmpty else { return failure(number, .emptyKey) }
            let value = String(decoding: trim(stripped[(split + 1)...]), as: UTF8.self)
            if section == defaultMarker {
                guard !defaults.contains(where: { $0.key == key }) else { return failure(number, .duplicateKey) }
                defaults.append((key, [value], number))
            } else {
                guard !sections[section]!.contains(where: { $0.key == key }) else { return failure(number, .duplicateKey) }
                sections[section]!.append((key, [value], number))
            }
            hasKey = true
        }

        // Values: a nested sub-section (empty first line, continuation lines) is checked, dropped.
        func resolve(_ entries: [(key: String, lines: [String], line: Int)]) -> Result<[String: String], AWSSharedConfigError> {
            var values: [String: String] = [:]
            for entry in entries {
                // configparser joins the lines with "\n" and strips trailing whitespace; botocore
                // reads a value that then starts with "\n" as a nested sub-section.
                var lines = entry.lines
                while let last = lines.last, last.isEmpty, lines.count > 1 { lines.removeLast() }
                if lines.count > 1, lines[0].isEmpty {
                    for nested in lines.dropFirst() where !nested.isEmpty && !nested.utf8.contains(UInt8(ascii: "=")) {
                        return .failure(AWSSharedConfigError(path: path, line: entry.line, problem: .nestedWithoutDelimiter))
                    }
                    continue
                }
                values[entry.key] = lines.joined(separator: "\n")
            }
            return .success(values)
        }
        let fallback: [String: String]
        switch resolve(defaults) {
        case .success(let values): fallback = values
        case .failure(let error): return .failure(error)
        }
        var result: [String: [String: String]] = [:]
        for name in order {
            switch resolve(sections[name] ?? []) {
            case .success(let values): result[name] = values.merging(fallback) { own, _ in own }
            case .failure(let error): return .failure(error)
            }
        }
        return .success(AWSSharedConfigFile(sections: result, order: order))
    }

    /// Python's universal newlines: "\r\n", "\n" and "\r" each end a line.
    static func splitLines(_ bytes: [UInt8]) -> [ArraySlice<UInt8>] {
        var lines: [ArraySlice<UInt8>] = []
        var start = 0
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == 0x0A || byte == 0x0D {
                lines.append(bytes[start..<index])
                if byte == 0x0D, index + 1 < bytes.count, bytes[index + 1] == 0x0A { index += 1 }
                start = index + 1
            }
            index += 1
        }
        if start < bytes.count { lines.append(bytes[start...]) }
        return lines
    }

    static func isBlank(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0B || byte == 0x0C }

    static func trim(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
        var slice = bytes
        while let first = slice.first, isBlank(first) { slice = slice.dropFirst() }
        while let last = slice.last, isBlank(last) { slice = slice.dropLast() }
        return slice
    }
}

/// Why a shared file was refused: its path and line (0: the file as a whole), never its content.
public struct AWSSharedConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Problem: Sendable, Equatable {
        case tooLarge(limit: Int)
        case tooManyLines(limit: Int)
        case notUTF8
        case missingSectionHeader
        case duplicateSection
        case duplicateKey
        case noDelimiter
        case emptyKey
        case nestedWithoutDelimiter
    }

    public let path: String
    public let line: Int
    public let problem: Problem

    public init(path: String, line: Int, problem: Problem) {
        self.path = path
        self.line = line
        self.problem = problem
    }

    public var description: String {
        let what: String
        switch problem {
        case .tooLarge(let limit): what = "the file is larger than \(limit) bytes"
        case .tooManyLines(let limit): what = "the file has more than \(limit) lines"
        case .notUTF8: what = "the file is not UTF-8"
        case .missingSectionHeader: what = "a setting before any [section]"
        case .duplicateSection: what = "a [section] repeated in one file"
        case .duplicateKey: what = "a key repeated in one section"
        case .noDelimiter: what = "a line that is neither a [section], a 'key = value' nor a comment"
        case .emptyKey: what = "a setting without a key"
        case .nestedWithoutDelimiter: what = "a nested setting without '='"
        }
        return line > 0 ? "\(path):\(line): \(what)" : "\(path): \(what)"
    }
}

/// Both files as botocore's session sees them (`Session.full_config`).
public struct AWSSharedProfiles: Sendable, Equatable {
    /// The config file's profiles: `[profile NAME]` and `[default]` (`build_profile_map`).
    public let configProfiles: [String: [String: String]]
    /// The credentials file's sections, by their plain names (`[dev]`, no `profile ` prefix).
    public let credentialsProfiles: [String: [String: String]]

    public init(config: AWSSharedConfigFile?, credentials: AWSSharedConfigFile?) {
        var profiles: [String: [String: String]] = [:]
        // `build_profile_map`: a section name starting with "profile" that splits (shell words) into
        // two parts names the second; `default` is the default profile. In file order: the later
        // of two sections naming one profile (`[default]`, `[profile default]`) wins.
        for name in config?.order ?? [] {
            guard let values = config?.sections[name] else { continue }
            if name == "default" {
                profiles[name] = values
            } else if name.hasPrefix("profile"), let words = try? AWSShellWords.split(name), words.count == 2 {
                profiles[words[1]] = values
            }
        }
        configProfiles = profiles
        credentialsProfiles = credentials?.sections ?? [:]
    }

    /// `full_config`'s profile: the config file's, each key overridden by the credentials file's.
    public func merged(_ name: String) -> [String: String]? {
        switch (configProfiles[name], credentialsProfiles[name]) {
        case (nil, nil): nil
        case (let config?, nil): config
        case (nil, let credentials?): credentials
        case (let config?, let credentials?): config.merging(credentials) { _, fromCredentials in fromCredentials }
        }
    }

    public func exists(_ name: String) -> Bool { configProfiles[name] != nil || credentialsProfiles[name] != nil }
}

/// POSIX `shlex.split` (Python, `posix=True`, no comments): how botocore splits
/// `credential_process` on Linux (`compat_shell_split`). Never a shell: the words are the argv.
public enum AWSShellWords {
    public enum Invalid: Error, Equatable, Sendable {
        case unclosedQuote
        case danglingEscape
        case tooLong
    }

    public static let maxBytes = 16 * 1024

    public static func split(_ text: String) throws(Invalid) -> [String] {
        let bytes = Array(text.utf8)
        guard bytes.count <= maxBytes else { throw .tooLong }
        var words: [String] = []
        var word: [UInt8] = []
        var inWord = false
        var index = 0
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D }
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            switch byte {
            case _ where isSpace(byte):
                if inWord {
                    words.append(String(decoding: word, as: UTF8.self))
                    word = []
                    inWord = false
                }
            case UInt8(ascii: "\\"):
                // Outside quotes a backslash takes the next character literally.
                guard index < bytes.count else { throw .danglingEscape }
                word.append(bytes[index])
                index += 1
                inWord = true
            case UInt8(ascii: "'"):
                // Single quotes: everything literal up to the next quote.
                inWord = true
                guard let close = bytes[index...].firstIndex(of: UInt8(ascii: "'")) else { throw .unclosedQuote }
                word += bytes[index..<close]
                index = close + 1
            case UInt8(ascii: "\""):
                // Double quotes: a backslash escapes only `"` and `\` (shlex's `escapedquotes`).
                inWord = true
                var closed = false
                while index < bytes.count {
                    let inner = bytes[index]
                    index += 1
                    if inner == UInt8(ascii: "\"") {
                        closed = true
                        break
                    }
                    if inner == UInt8(ascii: "\\"), index < bytes.count,
                        bytes[index] == UInt8(ascii: "\"") || bytes[index] == UInt8(ascii: "\\")
                    {
                        word.append(bytes[index])
                        index += 1
                        continue
                    }
                    word.append(inner)
                }
                guard closed else { throw .unclosedQuote }
            default:
                word.append(byte)
                inWord = true
            }
        }
        if inWord { words.append(String(decoding: word, as: UTF8.self)) }
        return words
    }
}
