import Foundation
import TestSupport
import Testing

@Suite("CLI: secret set from a pipe and from a terminal", .serialized)
struct SecretInputTests {
    func storeConfig(_ scratch: ScratchDirectory) -> String {
        // The entries these tests set are ones the config reads (others are set with a warning).
        scratch.write("c.yaml", "store_dir: \(scratch.path)/store\nsecrets: { gh: { store: github }, p: { store: plain } }\n")
    }

    func stored(_ scratch: ScratchDirectory, _ name: String) -> [UInt8]? {
        FileManager.default.contents(atPath: "\(scratch.path)/store/\(name)").map(Array.init)
    }

    @Test("from a pipe: every byte, one trailing newline removed, no prompt")
    func pipe() throws {
        let scratch = ScratchDirectory()
        let config = storeConfig(scratch)
        let value = "CANARY-pipe \t$x=\"y\" é"
        let outcome = try runBinary(["secret", "set", "github", "--config", config], stdin: value + "\n")
        #expect(outcome.status == 0, "\(outcome.stderr)")
        #expect(outcome.stderr.isEmpty, "no prompt when stdin is not a terminal: \(outcome.stderr)")
        #expect(stored(scratch, "github") == Array(value.utf8))
        let unterminated = try runBinary(["secret", "set", "plain", "--config", config], stdin: "abc")
        #expect(unterminated.status == 0)
        #expect(stored(scratch, "plain") == Array("abc".utf8))
        let listed = try runBinary(["secret", "list", "--config", config])
        #expect(listed.stdout == "github\nplain\n")
        let badName = try runBinary(["secret", "set", "../evil", "--config", config], stdin: "x")
        #expect(badName.status == 2)
        #expect(badName.stderr.contains("invalid secret name"))
    }

    /// Starts `secret set NAME` with a pseudo-terminal as stdin; stderr is a pipe the test reads.
    func startOnTerminal(_ terminal: PseudoTerminal, _ config: String, _ name: String) throws -> (Process, PipeReader) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: ProxyProcess.binaryPath)
        process.arguments = ["secret", "set", name, "--config", config]
        process.standardInput = terminal.followerHandle
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        let reader = PipeReader(errors)
        try process.run()
        return (process, reader)
    }

    @Test("on a terminal: a prompt on stderr, the typed value not echoed, the terminal restored")
    func terminal() throws {
        let scratch = ScratchDirectory()
        let config = storeConfig(scratch)
        let terminal = try PseudoTerminal()
        #expect(terminal.echoes, "a fresh terminal echoes")
        let (process, stderr) = try startOnTerminal(terminal, config, "github")
        #expect(stderr.wait(for: "Value for github: "), "the prompt: \(stderr.contents)")
        // The prompt comes after echo is turned off: what is typed now must not show.
        #expect(!terminal.echoes, "echo is off while the value is typed")
        let canary = "CANARY-typed-\(UInt32.random(in: 0...UInt32.max))"
        terminal.type(canary + "\n")
        #expect(waitBounded(process), "the typed line did not end the prompt")
        #expect(process.terminationStatus == 0, "\(stderr.contents)")
        let shown = terminal.read(seconds: 0.5)
        #expect(!shown.contains(canary), "the terminal echoed the secret: \(shown)")
        #expect(stored(scratch, "github") == Array(canary.utf8), "one line, without its newline")
        #expect(terminal.echoes, "echo is back on after the command")
        #expect(!stderr.contents.contains(canary))
    }

    @Test("on a terminal, interrupted at the prompt (SIGINT): the terminal echoes again and nothing is stored")
    func interrupted() throws {
        let scratch = ScratchDirectory()
        let config = storeConfig(scratch)
        let terminal = try PseudoTerminal()
        let (process, stderr) = try startOnTerminal(terminal, config, "github")
        #expect(stderr.wait(for: "Value for github: "))
        #expect(!terminal.echoes)
        kill(process.processIdentifier, SIGINT)
        #expect(waitBounded(process), "SIGINT did not end the prompt")
        #expect(process.terminationReason == .uncaughtSignal, "the signal still ends the command")
        #expect(process.terminationStatus == SIGINT)
        #expect(terminal.echoes, "the handler restored the terminal before dying")
        #expect(stored(scratch, "github") == nil)
    }
    /// A value typed on the command line where the secret commands never read it. Each word a
    /// command line may hold a secret in: the refusal says where, never what.
    static let canary = "CANARY-argv-5f0e1d"
    static let misplacedSecrets: [[String]] = [
        ["secret", "set", "github", canary],  // the value after the name
        ["secret", "set", "github", "--", canary],  // after `--`
        ["secret", "set", "github", "extra", canary],
        ["secret", "set", "\(canary)/x"],  // in the name's place, not a valid name
        ["secret", "set", "-p\(canary)", "github"],  // glued to an unknown option
        ["secret", "rm", "github", canary],
        ["secret", "rm", "\(canary)+="],
        ["secret", "list", canary],
        ["secret", "--help", canary],
    ]

    @Test(
        "a value typed on a secret command's line is never echoed: the refusal names its position, exit 2",
        arguments: misplacedSecrets)
    func misplacedValueNotEchoed(arguments: [String]) throws {
        let scratch = ScratchDirectory()
        let outcome = try runBinary(arguments + ["--config", storeConfig(scratch)], stdin: "")
        #expect(outcome.status == 2, "\(outcome.stderr)")
        #expect(!outcome.stderr.contains(Self.canary), "stderr shows the value")
        #expect(!outcome.stdout.contains(Self.canary), "stdout shows the value")
        #expect(
            outcome.stderr.contains("position") || outcome.stderr.contains("argument 1") || outcome.stderr.contains("unknown option '-p'"),
            "the refusal still says what was wrong")
        #expect(stored(scratch, "github") == nil, "nothing stored")
    }
}
