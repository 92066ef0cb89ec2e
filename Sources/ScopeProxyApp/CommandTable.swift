import HTTP1Codec
import ProxyCore

/// How a shell completes an option's value or an argument (bash completion is generated from this).
enum ValueCompletion: Sendable {
    case none
    case file
    /// A fixed set of words; for an option they are also the only values parsing accepts.
    case words([String])
    /// Names in the local secret store (`scopeproxy secret list`).
    case secretNames
    /// Command names (for `help COMMAND`).
    case commands
}

/// One option of a command. Parsing, `--help`, the man page and the completion all read this.
struct OptionSpec: Sendable {
    /// Without the dashes: "config".
    let long: String
    /// A one-letter alias: "X" for `-X`.
    let short: Character?
    /// The value's placeholder ("FILE"); nil for a flag that takes no value.
    let value: String?
    let summary: String
    let repeatable: Bool
    let completion: ValueCompletion
    /// Checks a value; returns why it is not acceptable (the message says what was expected).
    let validate: (@Sendable (String) -> String?)?

    init(
        _ long: String, short: Character? = nil, value: String? = nil, _ summary: String, repeatable: Bool = false,
        completion: ValueCompletion = .none, validate: (@Sendable (String) -> String?)? = nil
    ) {
        self.long = long
        self.short = short
        self.value = value
        self.summary = summary
        self.repeatable = repeatable
        self.completion = completion
        self.validate = validate
    }

    /// `-X, --request METHOD` as help shows it.
    var display: String {
        let names = (short.map { "-\($0), " } ?? "") + "--\(long)"
        return value.map { "\(names) \($0)" } ?? names
    }

    /// `[--config FILE]` or `[-H 'Name: value']...` for a synopsis.
    var synopsis: String {
        let name = short.map { "-\($0)" } ?? "--\(long)"
        let body = value.map { "\(name) \($0)" } ?? name
        return "[\(body)]" + (repeatable ? "..." : "")
    }

    var spellings: [String] { (short.map { ["-\($0)"] } ?? []) + ["--\(long)"] }

    static let help = OptionSpec("help", short: "h", "show this help and exit")
}

/// A positional argument.
struct ArgumentSpec: Sendable {
    let name: String
    let summary: String
    let required: Bool
    let completion: ValueCompletion

    init(_ name: String, _ summary: String, required: Bool = true, completion: ValueCompletion = .none) {
        self.name = name
        self.summary = summary
        self.required = required
        self.completion = completion
    }
}

/// One command (or a group such as `secret`, whose subcommands do the work).
struct CommandSpec: Sendable {
    /// ["secret", "set"]; empty for scopeproxy itself.
    let path: [String]
    let summary: String
    /// Paragraphs for `--help` and the man page.
    let details: [String]
    let options: [OptionSpec]
    let arguments: [ArgumentSpec]
    let subcommands: [CommandSpec]
    let examples: [String]
    /// Runs the parsed command; nil for a group.
    let action: (@Sendable (Invocation) -> Int32)?
    /// A word on this command line may be a secret (`secret set NAME VALUE`: the value typed where
    /// it is never read): refusals name a word by its position, never by its text, so a secret
    /// typed by mistake does not land on a terminal, in a CI log or in a bug report.
    let argumentsMayBeSecrets: Bool

    init(
        _ path: [String], _ summary: String, details: [String] = [], options: [OptionSpec] = [], arguments: [ArgumentSpec] = [],
        subcommands: [CommandSpec] = [], examples: [String] = [], argumentsMayBeSecrets: Bool = false,
        action: (@Sendable (Invocation) -> Int32)? = nil
    ) {
        self.argumentsMayBeSecrets = argumentsMayBeSecrets
        self.path = path
        self.summary = summary
        self.details = details
        self.options = options
        self.arguments = arguments
        self.subcommands = subcommands
        self.examples = examples
        self.action = action
    }

    var name: String { path.last ?? "scopeproxy" }
    var fullName: String { (["scopeproxy"] + path).joined(separator: " ") }
    /// Options as parsed and documented: the command's own, then `-h, --help` (every command has it).
    var allOptions: [OptionSpec] { options + [.help] }

    func option(named word: String) -> OptionSpec? {
        allOptions.first { $0.spellings.contains(word) }
    }

    func subcommand(_ name: String) -> CommandSpec? { subcommands.first { $0.name == name } }

    /// Every command below this one, depth first (this one included).
    var all: [CommandSpec] { [self] + subcommands.flatMap(\.all) }

    /// `scopeproxy check [--config FILE]`, one line per leaf command for a group.
    var synopsis: [String] {
        if !subcommands.isEmpty { return subcommands.flatMap(\.synopsis) }
        var parts = [fullName] + options.map(\.synopsis)
        for argument in arguments { parts.append(argument.required ? argument.name : "[\(argument.name)]") }
        return [parts.joined(separator: " ")]
    }
}

/// The one description of the command line: parsing, per-command help, `scopeproxy help`, the
/// top-level usage, the man page and the bash completion are all generated from it, so they
/// cannot disagree.
enum CommandTable {
    static let configOption = OptionSpec(
        "config", value: "FILE", "the YAML config file (default: $SCOPEPROXY_CONFIG; with neither, the embedded safe default)",
        completion: .file)

    /// check validates a file, so unlike the other commands it has no embedded-default fallback:
    /// `Commands.check` exits 2 without --config or SCOPEPROXY_CONFIG.
    static let checkConfigOption = OptionSpec(
        "config", value: "FILE", "the YAML config file to validate (default: $SCOPEPROXY_CONFIG; with neither, check exits 2)",
        completion: .file)

    static let root = CommandSpec(
        [], "a local forwarding HTTP proxy that keeps credentials in their scope",
        details: [
            "scopeproxy decides, per request, which credentials may reach the request's origin: it strips sensitive headers "
                + "outside a credential's scope, injects scoped tokens so the client holds no secret, re-scopes redirects, "
                + "intercepts TLS with a local CA where configured, and writes redacted access logs.",
            "Without a command, scopeproxy runs the proxy (the same as 'scopeproxy run'). Unknown commands, options and "
                + "arguments are refused with exit status 2; they never start a proxy.",
        ],
        options: [
            OptionSpec("version", "print the version and exit"),
            OptionSpec("man", "print the manual page (roff) and exit; used by 'make install'"),
            OptionSpec("bash-completion", "print the bash completion script and exit; used by 'make install'"),
        ],
        subcommands: [run, check, secret, placeholders, env, ca, health, tail, config, explain, help],
        examples: [
            "scopeproxy check --config ~/.config/scopeproxy/config.yaml",
            "scopeproxy run --config ~/.config/scopeproxy/config.yaml",
            "printf %s \"$TOKEN\" | scopeproxy secret set github",
        ])

    static let run = CommandSpec(
        ["run"], "start the proxy (the default command)",
        details: [
            "Loads the config (or the embedded safe default: 127.0.0.1:8080, no scopes, every sensitive header stripped "
                + "everywhere) and every secret, prints what it is about to do, then 'listening on HOST:PORT' on standard error "
                + "once it accepts connections. An invalid config exits 2; a secret or TLS file it cannot use exits 1, naming "
                + "it (never its value). SIGHUP reloads config and secrets; SIGTERM and SIGINT stop it gracefully."
        ],
        options: [
            configOption,
            OptionSpec(
                "listen", value: "HOST:PORT", "listen here instead of the config's 'listen' (port 0 picks a free port)",
                validate: { text in
                    guard let address = ListenAddress.parse(text) else {
                        let problem = ListenAddress.problem(text)
                        return "expects HOST:PORT, like 127.0.0.1:8080" + (problem.hasPrefix("expected") ? "" : ", but \(problem)")
                    }
                    return address.hostProblem
                }),
            OptionSpec(
                "threads", value: "N", "event-loop threads, 1 to 256 (default: one per core)",
                validate: { Int($0).map { (1...256).contains($0) } == true ? nil : "expects a number from 1 to 256" }),
            OptionSpec(
                "tunnel", value: "allow|deny",
                "override tls.tunnel: splice (allow) or refuse with 403 (deny) CONNECT to hosts that are not intercepted",
                completion: .words(TunnelPolicy.allCases.map(\.rawValue))),
            OptionSpec("no-access-log", "write no access log (for measuring the log's cost in benchmarks only)"),
        ],
        examples: ["scopeproxy run --config config.yaml --listen 127.0.0.1:0"],
        action: Commands.run)

    static let check = CommandSpec(
        ["check"], "validate a config file",
        details: [
            "Exit 0 and a one-line summary on standard output when the file is valid; exit 2 and FILE:LINE:COLUMN: message "
                + "on standard error when it is not. It also loads the secrets and TLS files the way 'run' would and prints one "
                + "warning line per secret or file that 'run' would refuse (missing, unsafe permissions, unset variable), still "
                + "exiting 0 for a structurally valid file, so CI without the secrets can use it.",
            "The file is --config FILE, else $SCOPEPROXY_CONFIG. With neither, check exits 2: it does not validate the "
                + "embedded default.",
        ],
        options: [checkConfigOption],
        examples: ["scopeproxy check --config config/scopeproxy.example.yaml"],
        action: Commands.check)

    static let secret = CommandSpec(
        ["secret"], "manage the local secret store ({ store: NAME } secrets)",
        details: ["The store is the config's store_dir (0700; files 0600, written atomically). Values are never printed."],
        subcommands: [
            CommandSpec(
                ["secret", "set"], "store a secret read from standard input",
                details: [
                    "The value is read from standard input, never from the command line (argv is visible to every local user "
                        + "in /proc, and lands in shell history). On a terminal it asks for the value with echo off and reads one "
                        + "line (at most 4095 bytes there: pipe longer values in); from a pipe or file it takes every byte, with "
                        + "one trailing newline removed."
                ],
                options: [configOption],
                arguments: [ArgumentSpec("NAME", "the store name (letters, digits, '_', '.', '-')")],
                examples: ["printf %s \"$TOKEN\" | scopeproxy secret set github", "scopeproxy secret set github   # asks for the value"],
                argumentsMayBeSecrets: true,
                action: Commands.secretSet),
            CommandSpec(
                ["secret", "list"], "list the names in the store (never values)", options: [configOption], argumentsMayBeSecrets: true,
                action: Commands.secretList),
            CommandSpec(
                ["secret", "rm"], "remove a secret from the store", options: [configOption],
                arguments: [ArgumentSpec("NAME", "the store name", completion: .secretNames)], argumentsMayBeSecrets: true,
                action: Commands.secretRemove),
        ],
        argumentsMayBeSecrets: true)

    static let placeholders = CommandSpec(
        ["placeholders"], "print each placeholder secret's placeholder (NAME PLACEHOLDER lines)",
        details: [
            "One line per secret declared with 'placeholder: true', in name order: the secret's name, a space, its placeholder. "
                + "A client holds the placeholder instead of the value; the proxy replaces it with the value in requests to the "
                + "origins of scopes that list the secret in 'substitute', and refuses it (403 placeholder_out_of_scope) everywhere else.",
            "A placeholder is derived from the secret's name and a per-install key (placeholder.key in tls.ca_dir, mode 0600), never "
                + "from the value: it stays the same across restarts and value rotations. The key is created on first use; a key file "
                + "that is not a 32-byte regular file of this user with mode 0600 is refused (exit 1). With no placeholder secret "
                + "configured nothing is printed and a hint goes to standard error.",
        ],
        options: [configOption],
        examples: ["scopeproxy placeholders --config config.yaml"],
        action: Commands.placeholders)

    static let env = CommandSpec(
        ["env"], "print export lines that give clients placeholders instead of secrets",
        details: [
            "One 'export VARIABLE=PLACEHOLDER' line per secret that declares 'env_var' (with 'placeholder: true'), in secret name "
                + "order, ready for eval in a POSIX shell: placeholders consist of letters, digits, '_', '.' and '-' only. Tools "
                + "that refuse to start without a token (GITHUB_TOKEN, OPENAI_API_KEY) get one that is worthless outside the proxy.",
            "The key is the one 'scopeproxy placeholders' uses (created on first use). With no env_var configured nothing is "
                + "printed and a hint goes to standard error.",
        ],
        options: [configOption],
        examples: ["eval \"$(scopeproxy env --config config.yaml)\""],
        action: Commands.environment)

    static let ca = CommandSpec(
        ["ca"], "print the local CA certificate (PEM), creating the CA if missing",
        details: ["Clients must trust this certificate for the hosts in tls.intercept. The CA lives in tls.ca_dir (key 0600)."],
        options: [configOption],
        examples: ["scopeproxy ca --config config.yaml > scopeproxy-ca.pem"],
        action: Commands.certificateAuthority)

    static let health = CommandSpec(
        ["health"], "ask a running proxy's admin endpoint whether it is healthy",
        details: [
            "Requests /healthz from the config's 'admin' address: exit 0 and 'healthy' when it answers 200, exit 1 and the "
                + "reason otherwise (for container health checks without curl)."
        ],
        options: [configOption],
        action: Commands.health)

    /// A filter's value goes into the stream's query: printable, one line.
    @Sendable static func filterProblem(_ text: String) -> String? {
        if text.isEmpty { return "expects a value" }
        return text.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value != 0x7F }) ? nil : "expects one word (no spaces or control characters)"
    }

    static let tail = CommandSpec(
        ["tail"], "print the running proxy's live view as access log lines, as they happen",
        details: [
            "Connects to the config's 'admin' address (GET /view/events, with the token of the secret named by the config's "
                + "admin_token when it has one) and prints one line per exchange as it ends, in the access log's text format "
                + "(coloured like it when standard output is a terminal and NO_COLOR is unset), each followed by the view's "
                + "decision word. The most recent records are shown first, as the view replays them.",
            "A dropped connection is said on standard error and retried (0.25 s, doubling to 5 s), resuming after the last "
                + "record seen. Ctrl-C or SIGTERM exit 0; exit 1 when nothing answers at first, the token is refused (401) or "
                + "what answers is not the view's event stream; exit 2 when the config has no fixed admin address.",
        ],
        options: [
            configOption,
            OptionSpec(
                "client", value: "C", "only exchanges of this client: a configured client name or the client's address",
                validate: CommandTable.filterProblem),
            OptionSpec(
                "origin", value: "O", "only exchanges with this origin: HOST:PORT, HOST (any port) or scheme://HOST:PORT",
                validate: CommandTable.filterProblem),
        ],
        examples: ["scopeproxy tail --config config.yaml", "scopeproxy tail --config config.yaml --origin api.github.com"],
        action: Commands.tail)

    static let config = CommandSpec(
        ["config"], "show the effective configuration",
        subcommands: [
            CommandSpec(
                ["config", "print"], "print the effective configuration as YAML, defaults filled in",
                details: ["Every key of the schema, with secrets as their sources (never values). The output is itself a valid config."],
                options: [configOption],
                examples: ["scopeproxy config print > effective.yaml"],
                action: Commands.configPrint)
        ])

    static let explain = CommandSpec(
        ["explain"], "show what the proxy would do with one request",
        details: ["Nothing is sent: the request is judged against the config's scopes and the decision is printed."],
        options: [
            configOption,
            OptionSpec("request", short: "X", value: "METHOD", "the request method (default: GET)"),
            OptionSpec(
                "header", short: "H", value: "'Name: value'", "a request header, as the client would send it (repeatable)",
                repeatable: true,
                validate: { Commands.splitHeader($0) == nil ? "expects 'Name: value'" : nil }),
            OptionSpec("location", value: "URL", "also show what a 3xx from this origin with this Location would get"),
            OptionSpec("client", value: "NAME", "explain for this configured client (clients:); an unknown name exits 2"),
        ],
        arguments: [ArgumentSpec("URL", "the request's absolute URL")],
        examples: [
            "scopeproxy explain -X POST -H 'Cookie: sid=1' https://api.library.example/v1/books",
            "scopeproxy explain --location https://cdn.library.example/b.pdf https://api.library.example/v1/books/1/pdf",
        ],
        action: Commands.explain)

    static let help = CommandSpec(
        ["help"], "show the usage of scopeproxy or of one command",
        arguments: [
            ArgumentSpec("COMMAND", "a command (and subcommand), like 'secret set'", required: false, completion: .commands),
            ArgumentSpec("SUBCOMMAND", "a subcommand", required: false),
        ],
        action: Commands.help)
}
