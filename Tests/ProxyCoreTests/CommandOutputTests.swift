import ProxyCore
import ScopePolicy
import Testing

/// What a `command:` secret's program prints, read as a credential (pure: bytes and a clock in).
@Suite struct CommandOutputTests {
    /// 2026-12-02T10:22:26Z.
    static let now: Int64 = 1_796_206_946
    static let canary = "CANARY-cmd-\(UInt32.random(in: 0...UInt32.max))"

    static func parse(_ text: String, now: Int64 = now) -> Result<CommandCredential, CommandOutputProblem> {
        CommandOutput.parse(Array(text.utf8), now: now)
    }

    @Test(arguments: [
        ("ghp_abc123", "ghp_abc123", nil as Int?),
        ("ghp_abc123\n", "ghp_abc123", nil),
        ("  \t ghp_abc123 \r\n\n", "ghp_abc123", nil),
        ("a value with inner spaces\n", "a value with inner spaces", nil),
        ("caf\u{E9}-token", "caf\u{E9}-token", nil),
        (#"{"value": "tok"}"#, "tok", nil),
        ("\n  {\"value\":\"tok\",\"expires_in\":3600}\n", "tok", 3600),
        (#"{"value": "tok", "expires_in": 0}"#, "tok", 0),
        (#"{"value": "tok", "expires_in": 99999999999999999999999999999}"#, "tok", 365 * 86_400),
        (#"{"value": "tok", "expires_at": "2026-12-02T11:22:26Z"}"#, "tok", 3600),
        (#"{"value": "tok", "expires_at": "2026-12-02T11:22:26+01:00"}"#, "tok", 0),
        (#"{"value": "tok", "expires_at": "9999-12-31T23:59:59Z"}"#, "tok", 365 * 86_400),
        (#"{"value": "t\u00e9\/k"}"#, "t\u{E9}/k", nil),
        // Only an object is JSON: any other line is the value as it is.
        (#"["tok"]"#, #"["tok"]"#, nil),
    ])
    func reads(output: String, value: String, expiresIn: Int?) throws {
        let credential = try Self.parse(output).get()
        #expect(credential.value == SecretValue(value))
        #expect(credential.expiresIn == expiresIn)
    }

    @Test(arguments: [
        ("", CommandOutputProblem.empty),
        (" \n\t\r\n", .empty),
        ("line one\nline two", .multipleLines),
        ("tok\n\nmore\n", .multipleLines),
        ("tok\rmore", .controlCharacter),
        ("tok\u{0}more", .controlCharacter),
        ("tok\u{1B}[31m", .controlCharacter),
        ("tok\u{7F}", .controlCharacter),
        ("tok\tmore", .controlCharacter),
        (String(repeating: "a", count: 16 * 1024 + 1), .valueTooLarge),
        (String(repeating: "a", count: 64 * 1024 + 1), .outputTooLarge),
        ("{", .invalidJSON),
        (#"{"value": "tok"} trailing"#, .invalidJSON),
        (#"{"value": "tok", "value": "other"}"#, .invalidJSON),
        ("{\"value\": \"tok\"}\n{\"value\": \"tok\"}", .invalidJSON),
        (#"{}"#, .missingValue),
        (#"{"value": ""}"#, .missingValue),
        (#"{"value": 42}"#, .missingValue),
        (#"{"value": null}"#, .missingValue),
        (#"{"value": "tok", "expiresAt": "2027-01-01T00:00:00Z"}"#, .unknownMember),
        (#"{"value": "t\nk"}"#, .controlCharacter),
        (#"{"value": "t\u0000k"}"#, .controlCharacter),
        (#"{"value": "tok", "expires_at": "2027-01-01T00:00:00Z", "expires_in": 60}"#, .conflictingExpiry),
        (#"{"value": "tok", "expires_at": "tomorrow"}"#, .invalidExpiresAt),
        (#"{"value": "tok", "expires_at": 1796206946}"#, .invalidExpiresAt),
        (#"{"value": "tok", "expires_at": "2026-12-02T10:22:25Z"}"#, .expired),
        (#"{"value": "tok", "expires_in": -5}"#, .invalidExpiresIn),
        (#"{"value": "tok", "expires_in": 3600.5}"#, .invalidExpiresIn),
        (#"{"value": "tok", "expires_in": 36e2}"#, .invalidExpiresIn),
        (#"{"value": "tok", "expires_in": "3600"}"#, .invalidExpiresIn),
    ])
    func refuses(output: String, problem: CommandOutputProblem) {
        #expect(Self.parse(output) == .failure(problem))
    }

    /// The caller's clock is any Int64: no subtraction traps, whatever it says.
    @Test(arguments: [Int64.min, -1, 0, Int64.max])
    func anyClock(now: Int64) {
        let result = Self.parse(#"{"value": "tok", "expires_at": "2026-12-02T11:22:26Z"}"#, now: now)
        switch result {
        case .success(let credential): #expect((0...365 * 86_400).contains(credential.expiresIn ?? -1))
        case .failure(let problem): #expect(problem == .expired)
        }
    }

    /// The output may be the secret: no problem's words ever carry a byte of it.
    @Test func problemsNeverCarryTheOutput() {
        let canary = Self.canary
        let outputs = [
            "\(canary)\nsecond line", "\(canary)\rmore", "\(canary)\u{0}", String(repeating: canary, count: 2000), "{\(canary)",
            #"{"value": "\#(canary)", "\#(canary)": 1}"#, #"{"value": "\#(canary)", "expires_at": "\#(canary)"}"#,
            #"{"value": "\#(canary)", "expires_in": "\#(canary)"}"#, #"{"value": "\#(canary)\n"}"#,
            #"{"value": "\#(canary)", "expires_at": "2000-01-01T00:00:00Z"}"#,
        ]
        var refused = 0
        for output in outputs {
            guard case .failure(let problem) = Self.parse(output) else { continue }
            refused += 1
            #expect(!problem.description.contains("CANARY"))
            #expect(!problem.code.contains("CANARY"))
            #expect(!String(describing: Self.parse(output)).contains("CANARY"))
            #expect(!String(reflecting: problem).contains("CANARY"))
        }
        #expect(refused == outputs.count)
        // A value read prints as <redacted> wherever it is interpolated.
        #expect(!String(describing: Self.parse(canary)).contains("CANARY"))
        for problem in CommandOutputProblem.allCases {
            #expect(!problem.description.isEmpty)
        }
    }

    @Test func minimalEnvironment() {
        let proxy = [
            "PATH": "/usr/bin", "HOME": "/home/p", "USER": "p", "LANG": "C.UTF-8", "XDG_CONFIG_HOME": "/home/p/.config",
            "XDG_RUNTIME_DIR": "/run/user/1", "GH_HOST": "github.example", "AWS_SECRET_ACCESS_KEY": Self.canary,
            "SCOPEPROXY_TOKEN": Self.canary, "LC_ALL": "C",
        ]
        let environment = CommandEnvironment.minimal(from: proxy, passing: ["GH_HOST", "NOT_SET"])
        #expect(
            environment == [
                "PATH": "/usr/bin", "HOME": "/home/p", "USER": "p", "LANG": "C.UTF-8", "XDG_CONFIG_HOME": "/home/p/.config",
                "XDG_RUNTIME_DIR": "/run/user/1", "GH_HOST": "github.example",
            ])
        #expect(CommandEnvironment.minimal(from: [:], passing: ["GH_HOST"]).isEmpty)
    }

    @Test(arguments: [
        ("error: not logged in\nsecond line", "error: not logged in" as String?),
        ("bad\u{1B}[31m red\r\n", "bad?[31m red"),
        ("\ncaf\u{E9}", nil),
        ("", nil),
        (String(repeating: "x", count: 500), String(repeating: "x", count: 200)),
    ])
    func standardErrorFirstLine(input: String, expected: String?) {
        var stderr = CommandStandardError()
        for byte in input.utf8 { stderr.receive([byte]) }  // byte by byte: pieces never matter
        #expect(stderr.firstLine == expected)
        var whole = CommandStandardError()
        whole.receive(Array(input.utf8))
        #expect(whole.firstLine == expected)
    }

    @Test func runFailureWordsNameOnlyTheProgram() {
        let failures: [CommandRunFailure] = [
            .notStarted("no such program 'gh' in PATH"), .exited(status: 1, stderrFirstLine: Self.canary), .signaled(9),
            .timedOut(milliseconds: 300), .outputTooLarge(limit: 65536),
        ]
        for failure in failures {
            let text = failure.description(program: "gh")
            #expect(text.hasPrefix("command 'gh': "))
            #expect(!text.contains("CANARY"))
        }
    }
}
