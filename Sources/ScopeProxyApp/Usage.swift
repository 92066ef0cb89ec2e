/// Everything printed about the command line, generated from `CommandTable`: `--help` for each
/// command, the top-level usage, the man page and the bash completion.
enum Usage {
    /// Text that is about the program rather than one command; shared by the top-level help and the man page.
    static let environment: [(String, String)] = [
        ("SCOPEPROXY_CONFIG", "the config file when --config is not given (an empty value counts as unset)"),
        ("NO_COLOR", "when set to a non-empty value, the access log on a terminal has no colour"),
        ("HOME", "where the default store_dir (~/.local/share/scopeproxy/secrets) and ca_dir (~/.local/share/scopeproxy/ca) live"),
    ]

    static let exitStatus: [(String, String)] = [
        ("0", "success (and 'check' on a structurally valid file, even with warnings)"),
        ("1", "a runtime failure: a secret, TLS or placeholder key file run cannot use, a port it cannot bind, an unhealthy proxy"),
        ("2", "a usage error (unknown command, option or argument; a missing value) or an invalid config"),
    ]

    static let signals: [(String, String)] = [
        ("SIGHUP", "reload config and secrets atomically (a bad file keeps the old config serving) and reopen a log file"),
        ("SIGTERM, SIGINT", "stop accepting, let exchanges in flight finish (10 s grace), exit 0"),
    ]

    static let files: [(String, String)] = [
        ("~/.config/scopeproxy/config.yaml", "a conventional config location (the systemd user unit uses it)"),
        ("~/.local/share/scopeproxy/secrets/", "the default secret store (store_dir)"),
        ("~/.local/share/scopeproxy/ca/scopeproxy-ca.pem", "the local CA certificate (default ca_dir), its key next to it"),
        ("~/.local/share/scopeproxy/ca/placeholder.key", "the per-install key placeholders are derived from (0600; created on first use)"),
    ]

    // MARK: --help

    /// `usage:` lines, the command's description, its subcommands or options and arguments, examples.
    static func help(_ command: CommandSpec) -> String {
        var out = ""
        let synopsis = command.path.isEmpty ? ["scopeproxy [COMMAND] [OPTIONS]"] : command.synopsis
        for (index, line) in synopsis.enumerated() { out += (index == 0 ? "usage: " : "       ") + line + "\n" }
        out += "\n" + capitalized(command.summary) + ".\n"
        for paragraph in command.details { out += "\n" + wrap(paragraph, width: 78, indent: "") }
        if !command.subcommands.isEmpty {
            out += "\ncommands:\n" + table(command.subcommands.map { ($0.name, $0.summary) })
        }
        if !command.arguments.isEmpty {
            out += "\narguments:\n" + table(command.arguments.map { ($0.name, $0.summary) })
        }
        out += "\noptions:\n" + table(command.allOptions.map { ($0.display, $0.summary) })
        if command.path.isEmpty {
            out += "\nenvironment:\n" + table(environment)
        }
        if !command.examples.isEmpty {
            out += "\nexamples:\n" + command.examples.map { "  " + $0 + "\n" }.joined()
        }
        if !command.subcommands.isEmpty {
            let next = command.path.isEmpty ? "COMMAND" : command.path.joined(separator: " ") + " COMMAND"
            out += "\nRun 'scopeproxy help \(next)' (or 'scopeproxy \(next) --help') for a command's options.\n"
        }
        return out
    }

    /// Two columns, the second wrapped and aligned.
    static func table(_ rows: [(String, String)]) -> String {
        let width = min(26, (rows.map(\.0.count).max() ?? 0) + 2)
        var out = ""
        for (left, right) in rows {
            let indent = String(repeating: " ", count: 2 + width)
            let wrapped = wrap(right, width: 78, indent: indent)
            // Side by side when the left column leaves at least two spaces, else on its own line.
            if left.count <= width - 2 {
                out += "  " + left + String(repeating: " ", count: width - left.count) + wrapped.dropFirst(indent.count)
            } else {
                out += "  " + left + "\n" + wrapped
            }
        }
        return out
    }

    /// Greedy word wrap; every line starts with `indent`.
    static func wrap(_ text: String, width: Int, indent: String) -> String {
        var lines: [String] = []
        var line = indent
        for word in text.split(separator: " ", omittingEmptySubsequences: true) {
            if line.count > indent.count && line.count + 1 + word.count > width {
                lines.append(line)
                line = indent
            }
            line += (line.count > indent.count ? " " : "") + word
        }
        lines.append(line)
        return lines.joined(separator: "\n") + "\n"
    }

    static func capitalized(_ text: String) -> String { text.prefix(1).uppercased() + text.dropFirst() }

    // MARK: Man page

    /// scopeproxy(1) in roff, from the table (`make install` writes it to share/man/man1).
    static func manPage(version: String) -> String {
        let root = CommandTable.root
        var out = """
            .\\" Generated by `scopeproxy --man` from the command table; do not edit.
            .TH SCOPEPROXY 1 "" "scopeproxy \(roff(version))" "User Commands"
            .SH NAME
            scopeproxy \\- \(roff(root.summary))
            .SH SYNOPSIS
            .nf

            """
        out += "\\fBscopeproxy\\fR [\\fB\\-\\-version\\fR | \\fB\\-\\-help\\fR]\n"
        for command in root.subcommands {
            for line in command.synopsis { out += synopsisLine(line) + "\n" }
        }
        out += ".fi\n.SH DESCRIPTION\n"
        out += root.details.map { roff($0) + "\n" }.joined(separator: ".PP\n")
        out += ".SH OPTIONS\n"
        for option in root.allOptions { out += optionItem(option) }
        out += ".SH COMMANDS\n"
        for command in root.subcommands.flatMap(\.all) {
            out += ".SS \"\(roff(command.path.joined(separator: " ")))\"\n"
            out += roff(capitalized(command.summary)) + ".\n"
            for paragraph in command.details { out += ".PP\n" + roff(paragraph) + "\n" }
            guard command.action != nil else { continue }
            out += ".PP\n.nf\n" + command.synopsis.map(synopsisLine).joined(separator: "\n") + "\n.fi\n"
            for argument in command.arguments {
                out += ".TP\n\\fI\(roff(argument.name))\\fR\(argument.required ? "" : " (optional)")\n\(roff(argument.summary))\n"
            }
            for option in command.allOptions { out += optionItem(option) }
            if !command.examples.isEmpty {
                out += ".PP\nExample:\n.PP\n.nf\n.RS 4\n" + command.examples.map { roff($0) + "\n" }.joined() + ".RE\n.fi\n"
            }
        }
        out += ".SH ENVIRONMENT\n" + definitions(environment)
        out += ".SH FILES\n" + definitions(files)
        out += ".SH SIGNALS\n" + definitions(signals)
        out += ".SH EXIT STATUS\n" + definitions(exitStatus)
        out += ".SH EXAMPLES\n.nf\n" + root.examples.map { roff($0) + "\n" }.joined() + ".fi\n"
        out += ".SH SEE ALSO\n\\fBcurl\\fR(1), \\fBsystemctl\\fR(1)\n"
        return out
    }

    private static func optionItem(_ option: OptionSpec) -> String {
        let names = option.spellings.map { "\\fB\(roff($0))\\fR" }.joined(separator: ", ")
        let value = option.value.map { " \\fI\(roff($0))\\fR" } ?? ""
        let repeatable = option.repeatable ? " ..." : ""
        return ".TP\n\(names)\(value)\(repeatable)\n\(roff(capitalized(option.summary))).\n"
    }

    private static func definitions(_ rows: [(String, String)]) -> String {
        rows.map { ".TP\n\\fB\(roff($0.0))\\fR\n\(roff(capitalized($0.1))).\n" }.joined()
    }

    /// `scopeproxy check [--config FILE]` with the command in bold.
    private static func synopsisLine(_ line: String) -> String {
        let words = line.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        var out: [String] = []
        var inCommand = true
        for word in words {
            if inCommand, word.first?.isLetter == true, word.lowercased() == word {
                out.append("\\fB\(roff(word))\\fR")
            } else {
                inCommand = false
                out.append(roff(word))
            }
        }
        return out.joined(separator: " ")
    }

    /// Text safe inside a roff line: backslashes and hyphens escaped, no control word at the start.
    static func roff(_ text: String) -> String {
        var out = text.replacingOccurrences("\\", "\\e").replacingOccurrences("-", "\\-")
        if out.hasPrefix(".") || out.hasPrefix("'") { out = "\\&" + out }
        return out
    }

    // MARK: Bash completion

    /// A bash completion function: commands, subcommands, each command's options, and option values
    /// (fixed choices, file names, store names).
    static func bashCompletion() -> String {
        let root = CommandTable.root
        let commands = root.subcommands.flatMap(\.all)
        func id(_ command: CommandSpec) -> String { command.path.isEmpty ? "root" : command.path.joined(separator: "_") }
        func words(_ completion: ValueCompletion) -> String? {
            switch completion {
            case .none: return nil
            case .file: return "compopt -o filenames 2>/dev/null; COMPREPLY=( $(compgen -f -- \"$cur\") )"
            case .words(let list): return "COMPREPLY=( $(compgen -W \"\(list.joined(separator: " "))\" -- \"$cur\") )"
            case .secretNames: return "COMPREPLY=( $(compgen -W \"$(scopeproxy secret list 2>/dev/null)\" -- \"$cur\") )"
            case .commands: return "COMPREPLY=( $(compgen -W \"\(root.subcommands.map(\.name).joined(separator: " "))\" -- \"$cur\") )"
            }
        }
        var transitions = ""
        for command in [root] + commands {
            for sub in command.subcommands {
                transitions += "            \"\(id(command)) \(sub.name)\") path=\(id(sub)) ;;\n"
            }
        }
        var values = ""
        var optionWords = ""
        var arguments = ""
        for command in [root] + commands {
            let withValues = command.allOptions.filter { $0.value != nil }
            if !withValues.isEmpty {
                values += "        \(id(command)))\n            case \"$prev\" in\n"
                for option in withValues {
                    let action = words(option.completion) ?? "COMPREPLY=()"
                    values += "                \(option.spellings.joined(separator: "|"))) \(action); return ;;\n"
                }
                values += "            esac ;;\n"
            }
            // At the top, an option means `run` (`scopeproxy --config FILE`): offer run's options too.
            let offered = command.path.isEmpty ? command.allOptions + CommandTable.run.options : command.allOptions
            optionWords += "        \(id(command))) options=\"\(offered.flatMap(\.spellings).joined(separator: " "))\" ;;\n"
            if !command.subcommands.isEmpty {
                arguments +=
                    "        \(id(command))) COMPREPLY=( $(compgen -W \"\(command.subcommands.map(\.name).joined(separator: " "))\" -- \"$cur\") ) ;;\n"
            } else if let first = command.arguments.first, let action = words(first.completion) {
                arguments += "        \(id(command))) \(action) ;;\n"
            }
        }
        return """
            # bash completion for scopeproxy; generated by `scopeproxy --bash-completion` from its command table.
            _scopeproxy() {
                local cur prev path options i
                cur="${COMP_WORDS[COMP_CWORD]}"
                prev="${COMP_WORDS[COMP_CWORD-1]}"
                path=root
                # The command path: leading words that name commands (an option first means 'run').
                for ((i = 1; i < COMP_CWORD; i++)); do
                    case "$path ${COMP_WORDS[i]}" in
            \(transitions)            "root -"*) path=run; break ;;
                        *) break ;;
                    esac
                done
                case "$path" in
            \(values)    esac
                if [[ "$cur" == -* ]]; then
                    case "$path" in
            \(optionWords)        esac
                    COMPREPLY=( $(compgen -W "$options" -- "$cur") )
                    return
                fi
                case "$path" in
            \(arguments)    esac
            }
            complete -F _scopeproxy scopeproxy

            """
    }
}

extension String {
    /// Without Foundation's `replacingOccurrences(of:with:)`.
    func replacingOccurrences(_ target: String, _ replacement: String) -> String {
        guard !target.isEmpty else { return self }
        var out = ""
        var rest = self[...]
        while let range = rest.firstRange(of: target) {
            out += rest[..<range.lowerBound] + replacement
            rest = rest[range.upperBound...]
        }
        return out + rest
    }
}
