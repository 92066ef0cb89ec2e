import ScopeConfig

#if canImport(Glibc)
    import Glibc
#endif

/// A parsed command line: which command, its option values and its arguments (all checked against
/// the command table; nothing here is unknown).
struct Invocation: Sendable {
    let command: CommandSpec
    /// Long option name -> every value given, in order (a flag has one empty value).
    var values: [String: [String]] = [:]
    var arguments: [String] = []

    init(command: CommandSpec) {
        self.command = command
    }

    func value(_ long: String) -> String? { values[long]?.last }
    func all(_ long: String) -> [String] { values[long] ?? [] }
    func flag(_ long: String) -> Bool { values[long] != nil }

    /// `--config`, else a non-empty SCOPEPROXY_CONFIG, else nil (the embedded default).
    var configPath: ConfigPath? {
        if let path = value("config") { return ConfigPath(path: path, fromEnvironment: false) }
        if let raw = getenv("SCOPEPROXY_CONFIG"), raw.pointee != 0 {
            return ConfigPath(path: String(cString: raw), fromEnvironment: true)
        }
        return nil
    }
}

/// Where the config comes from, so messages can say "from SCOPEPROXY_CONFIG" when the user did not
/// type the path themselves.
struct ConfigPath: Sendable {
    let path: String
    let fromEnvironment: Bool

    var described: String { fromEnvironment ? "\(path) (from SCOPEPROXY_CONFIG)" : path }
}

/// What the command line asks for.
enum ParseOutcome {
    case run(Invocation)
    case help(CommandSpec)
    case version
    case manPage
    case bashCompletion
    /// Exit 2: the message, then the usage of `command` (the top-level usage when nil).
    case usageError(String, CommandSpec?)
}

/// Turns argv into an invocation by the command table, refusing everything it does not know.
enum CommandLineParser {
    static func parse(_ words: [String]) -> ParseOutcome {
        let root = CommandTable.root
        guard let first = words.first else { return .run(Invocation(command: CommandTable.run)) }
        // scopeproxy's own options stand alone: `scopeproxy --version extra` is a mistake.
        if let option = root.option(named: first) {
            // `scopeproxy --help secret set` reads as `scopeproxy help secret set`.
            if option.long == "help" && words.count > 1 { return parse(["help"] + words.dropFirst()) }
            if words.count > 1 {
                return .usageError("unexpected argument '\(words[1])' after \(first)", nil)
            }
            switch option.long {
            case "version": return .version
            case "man": return .manPage
            case "bash-completion": return .bashCompletion
            default: return .help(root)
            }
        }
        // `scopeproxy --config FILE` is `scopeproxy run --config FILE`.
        if first.hasPrefix("-") && first != "-" { return parseCommand(CommandTable.run, words[...], implicit: true) }
        guard let command = root.subcommand(first) else {
            return .usageError("unknown command '\(first)'\(commandSuggestion(first, in: root))", nil)
        }
        return descend(command, words.dropFirst())
    }

    /// Walks down a group (`secret`, `config`) to the subcommand named next.
    private static func descend(_ command: CommandSpec, _ words: ArraySlice<String>) -> ParseOutcome {
        guard !command.subcommands.isEmpty else { return parseCommand(command, words, implicit: false) }
        let names = command.subcommands.map(\.name)
        guard let next = words.first else {
            return .usageError("'\(command.path.joined(separator: " "))' needs a subcommand: \(list(names))", command)
        }
        if next == "--help" || next == "-h" {
            guard words.count > 1 else { return .help(command) }
            let stray = command.argumentsMayBeSecrets ? "in position 2" : "'\(words[words.startIndex + 1])'"
            return .usageError("unexpected argument \(stray) after \(next)", command)
        }
        guard let subcommand = command.subcommand(next) else {
            let what =
                next.hasPrefix("-")
                ? "'\(command.path.joined(separator: " "))' needs a subcommand (\(list(names))) before options, got '\(next)'"
                : "unknown command '\(command.path.joined(separator: " ")) \(next)'\(commandSuggestion(next, in: command))"
            return .usageError(what, command)
        }
        return descend(subcommand, words.dropFirst())
    }

    /// Options and arguments of one command, in any order; `--` ends the options.
    private static func parseCommand(_ command: CommandSpec, _ words: ArraySlice<String>, implicit: Bool) -> ParseOutcome {
        var invocation = Invocation(command: command)
        var remaining = words
        var optionsEnded = false
        while let word = remaining.popFirst() {
            if optionsEnded || !word.hasPrefix("-") || word == "-" {
                invocation.arguments.append(word)
                continue
            }
            if word == "--" {
                optionsEnded = true
                continue
            }
            // `--config=FILE`, and `-XPOST` for a one-letter option that takes a value.
            var name = word
            var attached: String?
            if word.hasPrefix("--"), let equals = word.firstIndex(of: "=") {
                name = String(word[..<equals])
                attached = String(word[word.index(after: equals)...])
            } else if !word.hasPrefix("--"), word.count > 2 {
                name = String(word.prefix(2))
                attached = String(word.dropFirst(2))
            }
            guard let option = command.option(named: name) else {
                // `-Xvalue`: the part after the letter may be a secret where arguments may be.
                let shown = word.hasPrefix("--") || command.argumentsMayBeSecrets ? name : word
                return .usageError(unknownOption(shown, command, implicit: implicit), command)
            }
            if option.long == "help" {
                guard attached == nil else { return .usageError("--help takes no value", command) }
                return .help(command)
            }
            guard let placeholder = option.value else {
                if attached != nil { return .usageError("option \(name) takes no value", command) }
                if invocation.values[option.long] != nil { return .usageError("option \(name) given twice", command) }
                invocation.values[option.long] = [""]
                continue
            }
            let value: String
            if let attached {
                value = attached
            } else if let next = remaining.first, !(next.hasPrefix("-") && next.count > 1) {
                value = remaining.removeFirst()
            } else {
                // The next word is another option (or nothing): the value was left out. A value that
                // really starts with '-' can be given as --name=VALUE.
                return .usageError("option \(name) needs a value: \(name) \(placeholder)", command)
            }
            if value.isEmpty { return .usageError("option \(name) needs a value: \(name) \(placeholder)", command) }
            if !option.repeatable && invocation.values[option.long] != nil {
                return .usageError("option \(name) given twice (\(name) \(invocation.values[option.long]![0]) and \(name) \(value))", command)
            }
            if case .words(let choices) = option.completion, !choices.contains(value) {
                return .usageError("option \(name) expects \(list(choices, joiner: "or")), got '\(value)'", command)
            }
            if let problem = option.validate?(value) {
                return .usageError("option \(name) \(problem), got '\(value)'", command)
            }
            invocation.values[option.long, default: []].append(value)
        }
        let accepted = command.arguments.count
        if invocation.arguments.count > accepted {
            let stray = invocation.arguments[accepted]
            guard !command.argumentsMayBeSecrets else {
                // Counted among the positional arguments (options and their values left out); the
                // word itself is never shown: `secret set NAME VALUE` puts a secret there.
                let takes = command.arguments.isEmpty ? "no arguments" : command.arguments.map(\.name).joined(separator: " ") + " only"
                let hint = command.path == ["secret", "set"] ? "; the value is read from standard input, never from the command line" : ""
                return .usageError(
                    "unexpected argument in position \(accepted + 1) (not shown: it may be a secret); "
                        + "\(command.fullName) takes \(takes)\(hint)", command)
            }
            return .usageError("unexpected argument '\(stray)'\(argumentSuggestion(stray, command))", command)
        }
        if let missing = command.arguments.dropFirst(invocation.arguments.count).first(where: \.required) {
            return .usageError("'\(command.path.joined(separator: " "))' needs \(missing.name)", command)
        }
        return .run(invocation)
    }

    // MARK: Suggestions

    /// ` (did you mean 'check'?)`: a close spelling, a unique prefix, or a common word for a command.
    static func commandSuggestion(_ word: String, in group: CommandSpec) -> String {
        let aliases = [
            "version": "--version", "start": "run", "serve": "run", "validate": "check", "lint": "check",
            "status": "health", "show": "config print", "print": "config print",
        ]
        if group.path.isEmpty {
            if let alias = aliases[word.lowercased()] { return " (did you mean '\(group.fullName) \(alias)'?)" }
            if looksLikeConfigFile(word) { return " (did you mean --config \(word)?)" }
        }
        if let close = closest(word, among: group.subcommands.map(\.name)) { return " (did you mean '\(close)'?)" }
        return ""
    }

    /// ` (did you mean --config my.yaml?)` for a config file given without its option.
    static func argumentSuggestion(_ word: String, _ command: CommandSpec) -> String {
        if command.option(named: "--config") != nil, looksLikeConfigFile(word) { return " (did you mean --config \(word)?)" }
        if let sub = CommandTable.root.subcommand(word), command.path.isEmpty || command.path == ["run"] {
            return " (a command comes first: scopeproxy \(sub.name) ...)"
        }
        return ""
    }

    static func unknownOption(_ word: String, _ command: CommandSpec, implicit: Bool) -> String {
        let subject = implicit ? "scopeproxy (run)" : command.fullName
        var message = "unknown option '\(word)' for \(subject)"
        let spellings = command.allOptions.flatMap(\.spellings)
        if ["-v", "-V", "--v"].contains(word) {
            // Before the edit distance, which would offer -h.
            message += " (did you mean scopeproxy --version?)"
        } else if let close = closest(word, among: spellings) {
            message += " (did you mean \(close)?)"
        } else if implicit, let global = closest(word, among: CommandTable.root.allOptions.flatMap(\.spellings)) {
            message += " (did you mean scopeproxy \(global)?)"
        } else {
            let owners = CommandTable.root.all.filter { $0.action != nil && $0.options.contains { $0.spellings.contains(word) } }
            if !owners.isEmpty { message += " (\(word) is an option of \(owners.map(\.fullName).joined(separator: ", ")))" }
        }
        return message
    }

    /// A config path given where an argument does not belong.
    static func looksLikeConfigFile(_ word: String) -> Bool {
        if word.hasSuffix(".yaml") || word.hasSuffix(".yml") { return true }
        var info = stat()
        return stat(word, &info) == 0 && info.st_mode & S_IFMT == S_IFREG
    }

    /// The nearest candidate within a small edit distance (a third of the word, at least 1, at most
    /// 2), or the only one the word is a prefix of.
    static func closest(_ word: String, among candidates: [String]) -> String? {
        let limit = min(2, max(1, word.count / 3))
        let scored = candidates.map { ($0, editDistance(word.lowercased(), $0)) }.filter { $0.1 <= limit }
        if let best = scored.min(by: { $0.1 < $1.1 || ($0.1 == $1.1 && $0.0 < $1.0) }) { return best.0 }
        let stem = word.trimmingDashes
        let prefixed = candidates.filter { stem.count >= 2 && $0.trimmingDashes.hasPrefix(stem) }
        return prefixed.count == 1 ? prefixed[0] : nil
    }

    /// The config's distance (`EditDistance`): a swapped pair of letters is one edit.
    static func editDistance(_ a: String, _ b: String) -> Int { EditDistance.between(a, b) }

    /// "set, list or rm"
    static func list(_ words: [String], joiner: String = "or") -> String {
        guard words.count > 1 else { return words.first ?? "" }
        return words.dropLast().joined(separator: ", ") + " \(joiner) " + words.last!
    }
}

extension String {
    fileprivate var trimmingDashes: Substring { self.drop { $0 == "-" } }
}
