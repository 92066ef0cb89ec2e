import Foundation
import TestSupport
import Testing

/// Command lines the binary must refuse: exit 2, what was not understood on stderr, the usage, and
/// never a running proxy (a proxy that started would outlive the deadline: `timedOut`).
@Suite("CLI: refusals, version, help", .serialized)
struct CommandLineTests {
    @Test(
        "unknown commands, options and arguments exit 2 with the reason and a suggestion, never a running proxy",
        arguments: [
            (["frobnicate"], "unknown command 'frobnicate'"),
            (["chek"], "unknown command 'chek' (did you mean 'check'?)"),
            (["version"], "unknown command 'version' (did you mean 'scopeproxy --version'?)"),
            (["my.yaml"], "unknown command 'my.yaml' (did you mean --config my.yaml?)"),
            (["run", "my.yaml"], "unexpected argument 'my.yaml' (did you mean --config my.yaml?)"),
            (["--confg", "x.yaml"], "unknown option '--confg'"),
            (["run", "--lisen", "127.0.0.1:0"], "(did you mean --listen?)"),
            (["check", "--listen", "127.0.0.1:0"], "unknown option '--listen' for scopeproxy check (--listen is an option of scopeproxy run)"),
            (["-v"], "(did you mean scopeproxy --version?)"),
            (["run", "--config"], "option --config needs a value: --config FILE"),
            (["run", "--config", "--listen", "127.0.0.1:0"], "option --config needs a value"),
            (["run", "--config="], "option --config needs a value"),
            (["run", "--listen", "8080"], "option --listen expects HOST:PORT"),
            (["run", "--listen", "proxy.internal:8080"], "'proxy.internal' is not an IP address"),
            (["run", "--threads", "0"], "option --threads expects a number from 1 to 256, got '0'"),
            (["run", "--tunnel", "maybe"], "option --tunnel expects allow or deny, got 'maybe'"),
            (["run", "--no-access-log=yes"], "option --no-access-log takes no value"),
            (["run", "--config", "a.yaml", "--config", "b.yaml"], "option --config given twice"),
            (["secret"], "'secret' needs a subcommand: set, list or rm"),
            (["secret", "sett", "x"], "unknown command 'secret sett' (did you mean 'set'?)"),
            (["secret", "set"], "'secret set' needs NAME"),
            (["secret", "list", "extra"], "unexpected argument in position 1 (not shown: it may be a secret)"),
            (["config"], "'config' needs a subcommand: print"),
            (["explain"], "'explain' needs URL"),
            (["explain", "-H", "no colon here", "http://a.example/"], "option -H expects 'Name: value'"),
            (["--version", "extra"], "unexpected argument 'extra' after --version"),
            (["help", "frobnicate"], "no command 'frobnicate' to show help for"),
        ])
    func refused(arguments: [String], message: String) throws {
        // The default listen address is used by whatever else runs here: irrelevant, since nothing
        // may get as far as binding it.
        let outcome = try runBinary(arguments, removing: ["SCOPEPROXY_CONFIG"], seconds: 10)
        #expect(!outcome.timedOut, "a refused command line started something that kept running")
        #expect(outcome.status == 2)
        #expect(outcome.stderr.hasPrefix("scopeproxy: "), "\(outcome.stderr)")
        #expect(outcome.stderr.contains(message), "\(outcome.stderr)")
        #expect(outcome.stderr.contains("usage: scopeproxy"), "the usage follows the message")
        #expect(!outcome.stderr.contains("listening on"))
        #expect(outcome.stdout.isEmpty)
    }

    @Test("--version prints the version on stdout and exits 0")
    func version() throws {
        let outcome = try runBinary(["--version"])
        #expect(outcome.status == 0)
        #expect(outcome.stderr.isEmpty)
        #expect(outcome.stdout.range(of: #"^scopeproxy \d+\.\d+\.\d+\n$"#, options: .regularExpression) != nil, "\(outcome.stdout)")
    }

    /// The documented options per command (docs/configuration.md), written here by hand (not read from the table the help
    /// is generated from), so a flag dropped from the table or from the help fails.
    static let documentedOptions: [(command: [String], options: [String])] = [
        ([], ["--version", "--help", "-h"]),
        (["run"], ["--config FILE", "--listen HOST:PORT", "--threads N", "--tunnel allow|deny", "--no-access-log", "--help"]),
        (["check"], ["--config FILE", "--help"]),
        (["secret"], ["set", "list", "rm", "--help"]),
        (["secret", "set"], ["--config FILE", "NAME", "--help"]),
        (["secret", "list"], ["--config FILE", "--help"]),
        (["secret", "rm"], ["--config FILE", "NAME", "--help"]),
        (["ca"], ["--config FILE", "--help"]),
        (["health"], ["--config FILE", "--help"]),
        (["tail"], ["--config FILE", "--client C", "--origin O", "--help"]),
        (["config"], ["print", "--help"]),
        (["config", "print"], ["--config FILE", "--help"]),
        (["explain"], ["--config FILE", "-X, --request METHOD", "-H, --header 'Name: value'", "--location URL", "URL", "--help"]),
        (["help"], ["COMMAND", "--help"]),
    ]

    @Test("--help, -h and 'help COMMAND' print the same usage on stdout, exit 0, naming every option")
    func helpForEveryCommand() throws {
        for (command, options) in Self.documentedOptions {
            let long = try runBinary(command + ["--help"])
            let short = try runBinary(command + ["-h"])
            let viaHelp = try runBinary(["help"] + command)
            for outcome in [long, short, viaHelp] {
                #expect(outcome.status == 0, "\(command)")
                #expect(outcome.stderr.isEmpty, "\(command): \(outcome.stderr)")
                #expect(outcome.stdout.hasPrefix("usage: scopeproxy"), "\(command)")
            }
            #expect(long.stdout == short.stdout && long.stdout == viaHelp.stdout, "\(command)")
            for option in options {
                #expect(long.stdout.contains(option), "\(command) --help does not describe \(option)")
            }
        }
    }

    @Test("no command, or only options, means run: the proxy starts and says where it listens")
    func implicitRun() throws {
        // Still running at the deadline is what a proxy does; the test stops it (SIGTERM).
        let outcome = try runBinary(["--listen", "127.0.0.1:0", "--no-access-log"], removing: ["SCOPEPROXY_CONFIG"], seconds: 2)
        #expect(outcome.timedOut)
        #expect(outcome.stderr.contains("config embedded default"))
        #expect(outcome.stderr.range(of: #"\nlistening on 127\.0\.0\.1:\d+\n"#, options: .regularExpression) != nil, "\(outcome.stderr)")
        #expect(outcome.status == 0, "SIGTERM is a graceful stop")
    }

    @Test("--help COMMAND is help COMMAND")
    func helpFirst() throws {
        let first = try runBinary(["--help", "secret", "set"])
        #expect(first.status == 0)
        #expect(first.stdout == (try runBinary(["help", "secret", "set"])).stdout)
        #expect(first.stdout.hasPrefix("usage: scopeproxy secret set"))
    }

    @Test("help after other options still shows help; --help never starts the proxy")
    func helpDoesNotRun() throws {
        let outcome = try runBinary(["run", "--listen", "127.0.0.1:0", "--help"], seconds: 10)
        #expect(!outcome.timedOut)
        #expect(outcome.status == 0)
        #expect(outcome.stdout.contains("--no-access-log"))
        #expect(!outcome.stderr.contains("listening on"))
    }

    @Test(
        "check's help and man page say what check does without --config or SCOPEPROXY_CONFIG (exit 2), not that it uses the embedded default; and it does exit 2"
    )
    func checkHelpMatchesBehaviour() throws {
        let help = try runBinary(["help", "check"])
        #expect(help.status == 0)
        #expect(help.stdout == (try runBinary(["check", "--help"])).stdout)
        let man = try runBinary(["--man"])
        let checkSection = try #require(
            man.stdout.components(separatedBy: ".SS \"check\"").dropFirst().first?
                .components(separatedBy: ".SS ").first)
        for (source, text) in [("help check", help.stdout), ("the man page's check section", checkSection)] {
            let flat = text.split(whereSeparator: \.isWhitespace).joined(separator: " ")
            #expect(!flat.contains("embedded safe default"), "\(source) promises the embedded default: \(flat)")
            #expect(flat.contains("with neither, check exits 2"), "\(source): \(flat)")
        }
        // Other commands do fall back to the embedded default, and say so.
        #expect(
            try runBinary(["help", "run"]).stdout.split(whereSeparator: \.isWhitespace).joined(separator: " ")
                .contains("with neither, the embedded safe default"))

        let none = try runBinary(["check"], removing: ["SCOPEPROXY_CONFIG"])
        #expect(none.status == 2)
        #expect(none.stderr.contains("check needs --config FILE (or SCOPEPROXY_CONFIG)"))
    }

    @Test("--man: a roff page with every command and option; --bash-completion: valid bash that completes from the table")
    func generatedDocumentation() throws {
        let man = try runBinary(["--man"])
        #expect(man.status == 0)
        #expect(man.stdout.hasPrefix(".\\\" Generated by"))
        #expect(man.stdout.contains(".TH SCOPEPROXY 1"))
        for section in ["run", "check", "secret set", "secret list", "secret rm", "ca", "health", "tail", "config print", "explain", "help"] {
            #expect(man.stdout.contains(".SS \"\(section)\""), "man page misses \(section)")
        }
        for option in ["\\-\\-no\\-access\\-log", "\\-\\-tunnel", "\\-\\-threads", "\\-\\-listen", "\\-\\-location", "\\fB\\-X\\fR", "\\-\\-version"]
        {
            #expect(man.stdout.contains(option), "man page misses \(option)")
        }
        #expect(man.stdout.contains("SCOPEPROXY_CONFIG"))

        let completion = try runBinary(["--bash-completion"])
        #expect(completion.status == 0)
        let scratch = ScratchDirectory()
        let script = scratch.write("completion.bash", completion.stdout)
        /// COMPREPLY for a command line ending in `words.last` (the word being completed).
        func complete(_ words: [String]) throws -> [String] {
            let quoted = (["scopeproxy"] + words).map { "'\($0)'" }.joined(separator: " ")
            let probe = scratch.write(
                "probe.bash",
                """
                source '\(script)'
                COMP_WORDS=(\(quoted)); COMP_CWORD=\(words.count)
                _scopeproxy
                printf '%s\\n' "${COMPREPLY[@]}"
                """)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/bash")
            process.arguments = [probe]
            let output = Pipe()
            process.standardOutput = output
            process.currentDirectoryURL = URL(fileURLWithPath: scratch.path)
            try process.run()
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            #expect(process.terminationStatus == 0)
            return String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
        }
        #expect(try complete(["ch"]) == ["check"])
        #expect(try complete(["secret", ""]) == ["set", "list", "rm"])
        #expect(try complete(["run", "--tunnel", ""]) == ["allow", "deny"])
        #expect(try complete(["explain", "--"]).contains("--location"))
        #expect(try complete(["explain", "--co"]) == ["--config"])
        #expect(try complete(["explain", "--c"]) == ["--config", "--client"])
        let top = try complete(["--"])
        #expect(top.contains("--version") && top.contains("--config"), "at the top an option means run: \(top)")
        #expect(try complete(["check", "--config", "compl"]) == ["completion.bash"], "files for --config")
    }
}
