import Foundation
import ProxyCore
import ScopeConfig
import ScopePolicy
import TestSupport
import Testing

/// `scopeproxy placeholders` and `scopeproxy env` through the built binary, the per-install key
/// they create, and what `check`, `run`, `explain` and `config print` make of placeholders. The
/// secret values are canaries: none may appear in any output.
@Suite("CLI: placeholders, env and the placeholder key", .serialized)
struct PlaceholderCLITests {
    static let canaries = ["GITHUB_VALUE": "CANARY-gh-5a1f", "OPENAI_VALUE": "CANARY-oa-77c0", "PLAIN_VALUE": "CANARY-plain-e3d2"]

    /// A config whose CA directory (and so the key) lives in `scratch/ca`.
    static func config(_ scratch: ScratchDirectory, extra: String = "") -> String {
        scratch.write(
            "config.yaml",
            """
            secrets:
              openai_key: { env: OPENAI_VALUE, placeholder: true }
              github_token: { env: GITHUB_VALUE, placeholder: true, env_var: GITHUB_TOKEN }
              plain: { env: PLAIN_VALUE }
            tls: { ca_dir: ca, intercept: scoped }
            scopes:
              - name: github
                origins: ["https://api.github.com"]
                substitute: [github_token]
              - name: ai
                origins: ["https://api.openai.com"]
                substitute: [openai_key]
                inject: { X-Plain: "${plain}" }
            \(extra)
            """)
    }

    func run(_ arguments: [String]) throws -> Outcome {
        let outcome = try runBinary(arguments, environment: Self.canaries, removing: ["SCOPEPROXY_CONFIG"])
        #expect(!outcome.timedOut)
        for canary in Self.canaries.values {
            #expect(!(outcome.stdout + outcome.stderr).contains(canary), "a secret value in the output of \(arguments)")
        }
        return outcome
    }

    func mode(_ path: String) -> mode_t {
        var info = stat()
        return stat(path, &info) == 0 ? info.st_mode & 0o7777 : 0
    }

    @Test("placeholders: NAME PLACEHOLDER lines in name order, derived from the name and a new 0600 key, stable across runs")
    func placeholders() throws {
        let scratch = ScratchDirectory()
        let path = Self.config(scratch)
        let keyPath = scratch.path + "/ca/placeholder.key"
        #expect(access(keyPath, F_OK) != 0)
        let first = try run(["placeholders", "--config", path])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stderr.isEmpty)

        // The key: 32 bytes, 0600, in a 0700 directory, and it alone (with the name) makes the placeholder.
        #expect(mode(keyPath) == 0o600)
        #expect(mode(scratch.path + "/ca") == 0o700)
        let key = try #require(FileManager.default.contents(atPath: keyPath))
        #expect(key.count == Placeholder.keyLength)
        let github = Placeholder.text(secret: "github_token", key: Array(key))
        let openai = Placeholder.text(secret: "openai_key", key: Array(key))
        #expect(first.stdout == "github_token \(github)\nopenai_key \(openai)\n")
        #expect(github.hasPrefix("scopeproxy-ph-github_token-"))

        // Stable: a second run reads the same key (and does not rewrite it).
        let second = try run(["placeholders", "--config", path])
        #expect(second.stdout == first.stdout)
        #expect(FileManager.default.contents(atPath: keyPath) == key)

        // Another install (another key): other placeholders for the same names and values.
        let other = ScratchDirectory()
        let elsewhere = try run(["placeholders", "--config", Self.config(other)])
        #expect(elsewhere.status == 0)
        #expect(elsewhere.stdout.hasPrefix("github_token scopeproxy-ph-github_token-"))
        #expect(elsewhere.stdout != first.stdout)
    }

    @Test("processes creating the key at once all end up with one key (the first link wins; nothing is replaced)")
    func concurrentCreation() throws {
        let scratch = ScratchDirectory()
        let path = Self.config(scratch)
        let outputs = Outputs()
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            let outcome = try? runBinary(["placeholders", "--config", path], environment: Self.canaries)
            outputs.append(outcome.map { "\($0.status) \($0.stdout)" } ?? "failed to run")
        }
        let seen = outputs.all
        #expect(seen.count == 8)
        #expect(Set(seen).count == 1, "\(Set(seen))")
        #expect(seen.first?.hasPrefix("0 github_token scopeproxy-ph-") == true)
        let left = try FileManager.default.contentsOfDirectory(atPath: scratch.path + "/ca")
        #expect(left == ["placeholder.key"], "temporary files left behind: \(left)")
    }

    @Test("env: export lines for secrets with env_var, which a POSIX shell evaluates to the placeholder")
    func environment() throws {
        let scratch = ScratchDirectory()
        let path = Self.config(scratch)
        let exported = try run(["env", "--config", path])
        #expect(exported.status == 0, "\(exported.stderr)")
        #expect(exported.stderr.isEmpty)
        let listed = try run(["placeholders", "--config", path])
        let github = try #require(listed.stdout.split(separator: "\n").first?.split(separator: " ").last.map(String.init))
        #expect(exported.stdout == "export GITHUB_TOKEN=\(github)\n")

        // What `eval "$(scopeproxy env)"` gives a client: the placeholder, byte for byte.
        let shell = Process()
        shell.executableURL = URL(fileURLWithPath: "/bin/sh")
        shell.arguments = ["-c", exported.stdout + "printf %s \"$GITHUB_TOKEN\""]
        let output = Pipe()
        shell.standardOutput = output
        try shell.run()
        shell.waitUntilExit()
        #expect(String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) == github)
    }

    @Test("no placeholder secret (or no env_var): nothing on stdout, a hint on stderr, exit 0, and no key created")
    func nothingToPrint() throws {
        let scratch = ScratchDirectory()
        let bare = scratch.write("bare.yaml", "secrets: { plain: { env: PLAIN_VALUE } }\ntls: { ca_dir: ca }\n")
        for command in ["placeholders", "env"] {
            let outcome = try run([command, "--config", bare])
            #expect(outcome.status == 0)
            #expect(outcome.stdout.isEmpty)
            #expect(outcome.stderr.contains("placeholder: true"), "\(outcome.stderr)")
            #expect(outcome.stderr.contains(bare))
        }
        #expect(access(scratch.path + "/ca", F_OK) != 0, "a config without placeholders left a key directory")

        let noVariable = scratch.write(
            "novar.yaml",
            """
            secrets: { openai_key: { env: OPENAI_VALUE, placeholder: true } }
            tls: { ca_dir: ca }
            scopes: [{ name: ai, origins: ["https://api.openai.com"], substitute: [openai_key] }]
            """)
        let env = try run(["env", "--config", noVariable])
        #expect(env.status == 0)
        #expect(env.stdout.isEmpty)
        #expect(env.stderr.contains("env_var"), "\(env.stderr)")
    }

    @Test("a key file that is not private, not 32 bytes or not a regular file is refused with its path and the fix; nothing printed")
    func refusedKeys() throws {
        let scratch = ScratchDirectory()
        let path = Self.config(scratch)
        let keyPath = scratch.path + "/ca/placeholder.key"
        #expect(try run(["placeholders", "--config", path]).status == 0)
        let key = try #require(FileManager.default.contents(atPath: keyPath))

        chmod(keyPath, 0o644)
        for command in ["placeholders", "env"] {
            let open = try run([command, "--config", path])
            #expect(open.status == 1)
            #expect(open.stdout.isEmpty)
            #expect(
                open.stderr
                    == "scopeproxy: the placeholder key \(keyPath) has mode 0644; others could read it and compute every placeholder: chmod 600 \(keyPath)\n"
            )
        }
        // Left as it was: refusing never repairs or replaces the key.
        #expect(mode(keyPath) == 0o644)
        #expect(FileManager.default.contents(atPath: keyPath) == key)
        chmod(keyPath, 0o640)
        #expect(try run(["placeholders", "--config", path]).stderr.contains("has mode 0640"))

        scratch.write("ca/placeholder.key", "short", mode: 0o600)
        let short = try run(["placeholders", "--config", path])
        #expect(short.status == 1)
        #expect(short.stderr.contains("the placeholder key \(keyPath) holds 5 bytes, not 32"), "\(short.stderr)")
        scratch.write("ca/placeholder.key", String(repeating: "k", count: 100), mode: 0o600)
        #expect(try run(["placeholders", "--config", path]).stderr.contains("holds 100 bytes, not 32"))

        unlink(keyPath)
        symlink(scratch.path + "/config.yaml", keyPath)
        let link = try run(["placeholders", "--config", path])
        #expect(link.status == 1)
        #expect(link.stderr.contains("the placeholder key \(keyPath) is not a regular file"), "\(link.stderr)")

        unlink(keyPath)
        mkdir(keyPath, 0o700)
        #expect(try run(["placeholders", "--config", path]).stderr.contains("is not a regular file"))
        rmdir(keyPath)

        // Another user's key: only root can make one to show it.
        if geteuid() == 0 {
            _ = FileManager.default.createFile(atPath: keyPath, contents: key, attributes: [.posixPermissions: 0o600])
            chown(keyPath, 65534, 65534)
            let foreign = try run(["placeholders", "--config", path])
            #expect(foreign.status == 1)
            #expect(foreign.stderr.contains("is owned by uid 65534, not by this user"), "\(foreign.stderr)")
        }
    }

    @Test("run refuses to start on a key it cannot trust (exit 1, before listening); check warns and creates nothing")
    func runAndCheck() throws {
        let scratch = ScratchDirectory()
        let path = Self.config(scratch)
        let keyPath = scratch.path + "/ca/placeholder.key"

        // check on a fresh install: no key yet is fine (run creates it), and check does not create it.
        let fresh = try run(["check", "--config", path])
        #expect(fresh.status == 0)
        #expect(fresh.stderr.isEmpty, "\(fresh.stderr)")
        #expect(access(keyPath, F_OK) != 0)

        mkdir(scratch.path + "/ca", 0o700)
        scratch.write("ca/placeholder.key", String(repeating: "k", count: 32), mode: 0o644)
        let warned = try run(["check", "--config", path])
        #expect(warned.status == 0)
        #expect(
            warned.stderr.contains(
                "warning: the placeholder key \(keyPath) has mode 0644; others could read it and compute every placeholder: "
                    + "chmod 600 \(keyPath); run would refuse to start"), "\(warned.stderr)")

        let refused = try runBinary(["run", "--config", path, "--listen", "127.0.0.1:0"], environment: Self.canaries, seconds: 10)
        #expect(!refused.timedOut)
        #expect(refused.status == 1)
        #expect(!refused.stderr.contains("listening on"))
        #expect(refused.stderr.contains("the placeholder key \(keyPath) has mode 0644"), "\(refused.stderr)")
    }

    @Test("check warns about a placeholder no scope substitutes (valid: exit 0)")
    func unsubstituted() throws {
        let scratch = ScratchDirectory()
        let path = scratch.write(
            "lonely.yaml",
            """
            secrets: { lonely: { env: GITHUB_VALUE, placeholder: true, env_var: LONELY } }
            tls: { ca_dir: ca }
            """)
        let checked = try run(["check", "--config", path])
        #expect(checked.status == 0)
        #expect(checked.stdout.hasPrefix("valid: "))
        #expect(checked.stdout.contains(", 1 secret(s), 1 placeholder(s), "), "\(checked.stdout)")
        #expect(
            checked.stderr == "warning: secret 'lonely' has a placeholder but no scope substitutes it: every request carrying it is refused "
                + "(403 placeholder_out_of_scope); list it in a scope's substitute\n")
    }

    @Test("explain names the substituted secrets (never a placeholder or a value) and refuses a placeholder elsewhere")
    func explain() throws {
        let scratch = ScratchDirectory()
        let path = Self.config(scratch)
        let listed = try run(["placeholders", "--config", path])
        let github = try #require(listed.stdout.split(separator: "\n").first?.split(separator: " ").last.map(String.init))

        let here = try run(["explain", "--config", path, "-H", "Authorization: token \(github)", "https://api.github.com/user"])
        #expect(here.status == 0)
        #expect(here.stdout.contains("substituted   github_token: its placeholder is replaced by the value (scope github)\n"), "\(here.stdout)")
        #expect(here.stdout.contains("placeholders  of openai_key: refused here (403 placeholder_out_of_scope, nothing sent)\n"))
        #expect(here.stdout.contains("Authorization: kept: its value carries a placeholder substituted here"))
        #expect(here.stdout.contains("Authorization: token ${github_token}\n"))
        #expect(!here.stdout.contains(github))

        let elsewhere = try run(["explain", "--config", path, "-H", "Authorization: token \(github)", "https://api.openai.com/v1/models"])
        #expect(elsewhere.status == 0)
        #expect(elsewhere.stdout.contains("answer        403 placeholder_out_of_scope"), "\(elsewhere.stdout)")

        let none = try run(["explain", "--config", path, "https://example.org/"])
        #expect(none.stdout.contains("substituted   nothing: no scope substitutes a placeholder for this request\n"))
        #expect(none.stdout.contains("placeholders  of github_token, openai_key: refused here"))
    }

    @Test("config print round-trips placeholder, env_var, substitute, scrub and guard")
    func configPrint() throws {
        let scratch = ScratchDirectory()
        for (extra, scrub, guardMode) in [
            ("", ScrubMode.on, GuardMode.on), ("scrub: strict\nguard: off\n", .strict, .off), ("scrub: off\n", .off, .on),
        ] {
            let path = Self.config(scratch, extra: extra)
            let printed = try run(["config", "print", "--config", path])
            #expect(printed.status == 0, "\(printed.stderr)")
            #expect(printed.stdout.contains("  github_token: { env: GITHUB_VALUE, placeholder: true, env_var: GITHUB_TOKEN }\n"))
            #expect(printed.stdout.contains("  openai_key: { env: OPENAI_VALUE, placeholder: true }\n"))
            #expect(printed.stdout.contains("    substitute: [github_token]\n"))
            #expect(printed.stdout.contains("\nscrub: \"\(scrub.rawValue)\"\n") || printed.stdout.contains("\nscrub: \(scrub.rawValue)\n"))
            let original = try ConfigLoader.load(path: path, home: scratch.path)
            let reparsed = try ConfigLoader.parse(printed.stdout, file: "/elsewhere/printed.yaml", home: scratch.path)
            #expect(reparsed.placeholders == original.placeholders)
            #expect(reparsed.protection == SecretProtection(scrub: scrub, guardMode: guardMode))
            #expect(reparsed.protection == original.protection)
            #expect(reparsed.policy.scopes == original.policy.scopes)
            #expect(reparsed.secrets == original.secrets)
        }
    }

    @Test("the new commands are in the usage, the man page and the bash completion")
    func documented() throws {
        let usage = try run(["help"])
        #expect(usage.stdout.contains("placeholders") && usage.stdout.contains("env "), "\(usage.stdout)")
        let man = try run(["--man"])
        #expect(man.stdout.contains("scopeproxy placeholders") && man.stdout.contains("scopeproxy env"))
        #expect(man.stdout.contains("placeholder.key"))
        let completion = try run(["--bash-completion"])
        #expect(completion.stdout.contains("placeholders") && completion.stdout.contains(" env"))
        let help = try run(["env", "--help"])
        #expect(help.stdout.hasPrefix("usage: scopeproxy env [--config FILE]\n"))
    }
}

private final class Outputs: @unchecked Sendable {
    private let lock = NSLock()
    private var lines: [String] = []
    func append(_ line: String) { lock.withLock { lines.append(line) } }
    var all: [String] { lock.withLock { lines } }
}
