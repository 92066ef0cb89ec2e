import Foundation
import TestSupport
import Testing

@Suite("CLI: check names what run would refuse", .serialized)
struct CheckTests {
    @Test("a directory, a missing file and an unreadable path are named as such (exit 2), for every command that reads a config")
    func configPaths() throws {
        let scratch = ScratchDirectory()
        let directory = try runBinary(["check", "--config", scratch.path])
        #expect(directory.status == 2)
        #expect(directory.stderr == "scopeproxy: config file \(scratch.path) is a directory, not a config file\n", "\(directory.stderr)")

        let missing = try runBinary(["check", "--config", scratch.path + "/nope.yaml"])
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("config file \(scratch.path)/nope.yaml does not exist"), "\(missing.stderr)")
        #expect(!missing.stderr.contains("cannot read"))

        let viaEnvironment = try runBinary(["check"], environment: ["SCOPEPROXY_CONFIG": scratch.path + "/nope.yaml"])
        #expect(viaEnvironment.status == 2)
        #expect(viaEnvironment.stderr.contains("nope.yaml (from SCOPEPROXY_CONFIG) does not exist"), "\(viaEnvironment.stderr)")

        // run refuses the same way, before anything listens.
        let run = try runBinary(["run", "--config", scratch.path, "--listen", "127.0.0.1:0"], seconds: 10)
        #expect(!run.timedOut)
        #expect(run.status == 2)
        #expect(run.stderr.contains("is a directory, not a config file"))

        // Root reads any file: the unreadable case can only be shown by another user.
        if geteuid() != 0 {
            let locked = scratch.write("locked.yaml", "listen: \"127.0.0.1:0\"\n", mode: 0o000)
            let unreadable = try runBinary(["check", "--config", locked])
            #expect(unreadable.status == 2)
            #expect(unreadable.stderr.contains("config file \(locked) cannot be read: Permission denied"), "\(unreadable.stderr)")
        }

        let none = try runBinary(["check"], removing: ["SCOPEPROXY_CONFIG"])
        #expect(none.status == 2)
        #expect(none.stderr.contains("check needs --config FILE"))
    }

    @Test("check with clients: valid, counted in the summary; a tls_client CA that cannot be loaded is named; a client error points at it")
    func clients() throws {
        let scratch = ScratchDirectory()
        scratch.write("bad-ca.pem", "not a certificate\n", mode: 0o644)
        let config = scratch.write(
            "c.yaml",
            """
            secrets: { key: { env: SCOPEPROXY_TEST_CLIENT_KEY } }
            clients:
              - { name: agent, auth: { bearer: key } }
              - { name: tool, tls_client: { ca: bad-ca.pem, subject: "CN=tool" } }
            scopes: [{ name: api, origins: ["https://api.example"], clients: [agent] }]
            """)
        let outcome = try runBinary(["check", "--config", config], environment: ["SCOPEPROXY_TEST_CLIENT_KEY": "CANARY-client-key"])
        #expect(outcome.status == 0)
        #expect(outcome.stdout.contains("2 client(s)"))
        #expect(
            outcome.stderr.contains("warning: client 'tool' tls_client.ca: \(scratch.path)/bad-ca.pem holds no PEM certificate"), "\(outcome.stderr)")
        #expect(!(outcome.stdout + outcome.stderr).contains("CANARY"))

        let wrong = scratch.write(
            "wrong.yaml",
            """
            clients: [{ name: agent, source: ["10.0.0.0/8"] }]
            scopes: [{ name: api, origins: ["https://api.example"], clients: [agnt] }]
            """)
        let refused = try runBinary(["check", "--config", wrong])
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("\(wrong):2:67: 'agnt' names no client in 'clients', did you mean 'agent'?"), "\(refused.stderr)")
    }

    @Test("check exits 0 for a valid file and names each secret and TLS file run would refuse, never a value")
    func warnings() throws {
        let scratch = ScratchDirectory()
        let canary = "CANARY-check-\(UInt32.random(in: 0...UInt32.max))"
        let worldReadable = scratch.write("library_key", canary + "\n", mode: 0o644)
        scratch.write("bad-bundle.pem", "not a certificate\n", mode: 0o644)
        let config = scratch.write(
            "c.yaml",
            """
            store_dir: \(scratch.path)/store
            secrets:
              library_key: { file: library_key }
              api_token: { env: SCOPEPROXY_TEST_UNSET_TOKEN }
              cdn: { store: cdn }
            scopes:
              - { name: library, origins: ["https://api.library.example"], inject: { X-Key: "${library_key}", Authorization: "Bearer ${api_token}" } }
              - { name: cdn, origins: ["https://cdn.library.example"], inject: { X-CDN-Token: "${cdn}" } }
            tls: { upstream_ca: missing-ca.pem, intercept: scoped, ca_dir: \(scratch.path)/ca }
            """)
        let outcome = try runBinary(["check", "--config", config], removing: ["SCOPEPROXY_TEST_UNSET_TOKEN"])
        #expect(outcome.status == 0, "structurally valid: usable in CI without the secrets")
        #expect(outcome.stdout.hasPrefix("valid: "))
        #expect(outcome.stdout.split(separator: "\n").count == 1)
        let lines = outcome.stderr.split(separator: "\n").map(String.init)
        #expect(lines.count == 4, "one line per problem: \(lines)")
        #expect(
            lines.contains("warning: secret 'library_key': file \(worldReadable) is world-accessible (chmod o-rwx); run would refuse to start"),
            "\(lines)")
        #expect(lines.contains("warning: secret 'api_token': environment variable SCOPEPROXY_TEST_UNSET_TOKEN is not set; run would refuse to start"))
        #expect(lines.contains { $0.hasPrefix("warning: secret 'cdn': store entry 'cdn' is missing") && $0.contains("scopeproxy secret set cdn") })
        #expect(lines.contains("warning: tls.upstream_ca: \(scratch.path)/missing-ca.pem does not exist; run would refuse to start"), "\(lines)")
        #expect(!outcome.stderr.contains(canary) && !outcome.stdout.contains(canary))

        // A bundle that exists but holds no certificate is named for that.
        let garbage = scratch.write("g.yaml", "tls: { upstream_ca: bad-bundle.pem }\n")
        let unparsable = try runBinary(["check", "--config", garbage])
        #expect(unparsable.status == 0)
        #expect(
            unparsable.stderr
                == "warning: tls.upstream_ca: \(scratch.path)/bad-bundle.pem holds no PEM certificate OpenSSL can load; run would refuse to start\n")

        // And run does refuse, naming all three secrets at once.
        let run = try runBinary(["run", "--config", config, "--listen", "127.0.0.1:0"], removing: ["SCOPEPROXY_TEST_UNSET_TOKEN"], seconds: 10)
        #expect(!run.timedOut)
        #expect(run.status == 1)
        for name in ["library_key", "api_token", "cdn"] { #expect(run.stderr.contains("secret '\(name)'"), "\(run.stderr)") }
        #expect(!run.stderr.contains(canary))
    }

    @Test("the shipped configs are valid: the example, the sidecar's and the one the docker examples mount")
    func shippedConfigs() throws {
        for path in ["config/scopeproxy.example.yaml", "config/sidecar.yaml", "config/docker/scopeproxy.yaml"] {
            let outcome = try runBinary(["check", "--config", repositoryRoot + "/" + path])
            #expect(outcome.status == 0, "\(path): \(outcome.stderr)")
            #expect(outcome.stdout.hasPrefix("valid: "), "\(path)")
        }
        // On the host the docker config's secret is not mounted: check says so and still passes.
        let docker = try runBinary(["check", "--config", repositoryRoot + "/config/docker/scopeproxy.yaml"])
        if !FileManager.default.fileExists(atPath: "/run/secrets/scopeproxy/library_token") {
            #expect(
                docker.stderr == "warning: secret 'library_token': file /run/secrets/scopeproxy/library_token is missing; run would refuse to start\n"
            )
        }
    }

    @Test("a relative ca_dir that does not exist yet, with the config named without a directory, is creatable: no warning, and run creates it")
    func relativeAuthorityDirectory() throws {
        let scratch = ScratchDirectory()
        scratch.write(
            "cfg.yaml",
            """
            tls: { intercept: [a.example], ca_dir: ca }
            """)
        scratch.write(
            "nested.yaml",
            """
            tls: { intercept: [a.example], ca_dir: state/ca }
            """)
        for name in ["cfg.yaml", "nested.yaml"] {
            let outcome = try runBinary(["check", "--config", name], workingDirectory: scratch.path)
            #expect(outcome.status == 0, "\(name): \(outcome.stderr)")
            #expect(outcome.stderr.isEmpty, "\(name): the current directory is writable: \(outcome.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: scratch.path + "/ca"), "check creates nothing")

        // What check promised: run creates the CA there (it starts, so the test stops it).
        let run = try runBinary(["run", "--config", "cfg.yaml", "--listen", "127.0.0.1:0"], seconds: 3, workingDirectory: scratch.path)
        #expect(run.timedOut, "run started: \(run.stderr)")
        #expect(FileManager.default.fileExists(atPath: scratch.path + "/ca/scopeproxy-ca.pem"))
    }

    @Test("a missing store entry's hint names the config in use (--config, quoted for the shell), and pasting it fills that config's store_dir")
    func storeHintNamesTheConfig() throws {
        let scratch = ScratchDirectory()
        let home = scratch.path + "/home"
        try FileManager.default.createDirectory(atPath: scratch.path + "/my configs", withIntermediateDirectories: true)
        let config = scratch.write(
            "my configs/c.yaml",
            """
            store_dir: \(scratch.path)/custom-store
            secrets: { cdn: { store: cdn } }
            scopes: [{ name: cdn, origins: ["https://cdn.example"], inject: { X-CDN-Token: "${cdn}" } }]
            tls: { intercept: scoped, ca_dir: \(scratch.path)/ca }
            """)
        let hint = "scopeproxy secret set cdn --config '\(config)'"
        let before = try runBinary(["check", "--config", config], environment: ["HOME": home])
        #expect(before.stderr.contains("(add it with: \(hint))"), "\(before.stderr)")
        let run = try runBinary(["run", "--config", config, "--listen", "127.0.0.1:0"], environment: ["HOME": home])
        #expect(run.status == 1)
        #expect(run.stderr.contains("(add it with: \(hint))"), "\(run.stderr)")

        // The hint, pasted into a shell, writes where this config reads (not HOME's default store).
        let binaryDirectory = (ProxyProcess.binaryPath as NSString).deletingLastPathComponent
        let shell = Process()
        shell.executableURL = URL(fileURLWithPath: "/bin/sh")
        shell.arguments = ["-c", "printf %s CANARY-hint-value | " + hint]
        var environment = ProcessInfo.processInfo.environment
        environment["HOME"] = home
        environment["PATH"] = binaryDirectory + ":" + (environment["PATH"] ?? "/usr/bin:/bin")
        shell.environment = environment
        try shell.run()
        shell.waitUntilExit()
        #expect(shell.terminationStatus == 0)
        #expect(FileManager.default.fileExists(atPath: scratch.path + "/custom-store/cdn"))
        #expect(!FileManager.default.fileExists(atPath: home + "/.local/share/scopeproxy/secrets/cdn"))
        let after = try runBinary(["check", "--config", config], environment: ["HOME": home])
        #expect(after.stderr.isEmpty, "\(after.stderr)")

        let viaEnvironment = try runBinary(["check"], environment: ["HOME": home, "SCOPEPROXY_CONFIG": config])
        #expect(viaEnvironment.stderr.isEmpty, "the config from SCOPEPROXY_CONFIG reads the same store: \(viaEnvironment.stderr)")
    }

    @Test("a config whose secrets and files are all usable gives no warning")
    func clean() throws {
        let scratch = ScratchDirectory()
        let pki = try TestPKI()
        scratch.write("key", "CANARY-clean-value\n", mode: 0o600)
        let config = scratch.write(
            "c.yaml",
            """
            secrets: { key: { file: key }, env: { env: SCOPEPROXY_TEST_SET_TOKEN } }
            scopes: [{ name: a, origins: ["https://a.example"], inject: { X-Key: "${key}", X-Env: "${env}" } }]
            tls: { upstream_ca: \(pki.caPath), intercept: [a.example], ca_dir: \(scratch.path)/ca }
            """)
        let outcome = try runBinary(["check", "--config", config], environment: ["SCOPEPROXY_TEST_SET_TOKEN": "CANARY-set-token"])
        #expect(outcome.status == 0)
        #expect(outcome.stderr.isEmpty, "\(outcome.stderr)")
        #expect(!FileManager.default.fileExists(atPath: scratch.path + "/ca"), "check creates nothing: the CA is made by run")
    }
}

@Suite("CLI: check names what is valid but cannot work", .serialized)
struct CheckWarningTests {
    @Test("an https scope nothing intercepts: check exits 0 with warning: FILE:LINE:COLUMN on stderr; intercepted, no warning")
    func unintercepted() throws {
        let scratch = ScratchDirectory()
        let config = scratch.write(
            "c.yaml",
            """
            secrets: { t: { env: SCOPEPROXY_TEST_SET_TOKEN } }
            scopes:
              - name: api
                origins: ["https://api.example"]
                inject: { X-T: "${t}" }
            """)
        let outcome = try runBinary(["check", "--config", config], environment: ["SCOPEPROXY_TEST_SET_TOKEN": "CANARY-set-token"])
        #expect(outcome.status == 0)
        #expect(outcome.stdout.hasPrefix("valid: "))
        #expect(
            outcome.stderr.hasPrefix(
                "warning: \(config):4:15: https origin https://api.example of scope 'api' is not intercepted: "
                    + "a client using HTTPS_PROXY reaches it through CONNECT, which is denied (403, tls.tunnel: deny)"), "\(outcome.stderr)")
        #expect(outcome.stderr.split(separator: "\n").count == 1)
        let intercepted = scratch.write(
            "i.yaml",
            """
            secrets: { t: { env: SCOPEPROXY_TEST_SET_TOKEN } }
            scopes: [{ name: api, origins: ["https://api.example"], inject: { X-T: "${t}" } }]
            tls: { intercept: scoped, ca_dir: \(scratch.path)/ca }
            """)
        let quiet = try runBinary(["check", "--config", intercepted], environment: ["SCOPEPROXY_TEST_SET_TOKEN": "CANARY-set-token"])
        #expect(quiet.status == 0)
        #expect(quiet.stderr.isEmpty, "\(quiet.stderr)")
    }

    @Test("log.bodies with the text format: check warns at the key that a text line carries no bodies; with json, nothing")
    func bodiesInTextLog() throws {
        let scratch = ScratchDirectory()
        let text = scratch.write("t.yaml", "log:\n  format: text\n  bodies: true\n")
        let warned = try runBinary(["check", "--config", text])
        #expect(warned.status == 0)
        #expect(
            warned.stderr == "warning: \(text):3:3: log.bodies: true has no effect on the text log (a text line carries no headers "
                + "or bodies): set log.format: json to log body summaries\n", "\(warned.stderr)")
        let json = scratch.write("j.yaml", "log:\n  format: json\n  bodies: true\n")
        let quiet = try runBinary(["check", "--config", json])
        #expect(quiet.status == 0)
        #expect(quiet.stderr.isEmpty, "\(quiet.stderr)")
        // With no format in the file, run decides (text on a terminal) and says it then.
        let unset = scratch.write("u.yaml", "log:\n  bodies: true\n")
        #expect(try runBinary(["check", "--config", unset]).stderr.isEmpty)
    }

    @Test("a scope key indented under inject: check exits 2 at the key, with the fix, instead of injecting a header named after it")
    func scopeKeyUnderInject() throws {
        let scratch = ScratchDirectory()
        let config = scratch.write(
            "c.yaml",
            """
            secrets: { t: { env: T } }
            scopes:
              - name: api
                origins: ["https://api.example"]
                inject:
                  Authorization: "Bearer ${t}"
                  paths: "/v1/"
            tls: { intercept: scoped }
            """)
        let outcome = try runBinary(["check", "--config", config])
        #expect(outcome.status == 2)
        #expect(
            outcome.stderr == "\(config):7:7: inject header 'paths' is a scope key: indent it to the scope's level, like 'inject:' "
                + "(two spaces less), or it becomes a header and the scope loses its paths\n")
    }
}
