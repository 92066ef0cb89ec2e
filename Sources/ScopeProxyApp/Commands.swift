import HTTP1Codec
import ProxyCore
import ProxyEngine
import ScopeConfig
import ScopePolicy
import SecretStore

#if canImport(Glibc)
    import Glibc
#endif

/// The command line (docs/configuration.md and `scopeproxy --help`): `run` (default), `check`, `secret set|list|rm`,
/// `placeholders`, `env`, `ca`, `health`, `config print`, `explain`, `help`. What each accepts is
/// `CommandTable`; this file runs them.
public enum Commands {
    /// Runs a command and returns the process exit status.
    public static func main(_ arguments: [String]) -> Int32 {
        switch CommandLineParser.parse(arguments) {
        case .run(let invocation):
            return invocation.command.action!(invocation)
        case .help(let command):
            writeStandardOutput(Usage.help(command))
            return 0
        case .version:
            writeStandardOutput("scopeproxy \(Version.current)\n")
            return 0
        case .manPage:
            writeStandardOutput(Usage.manPage(version: Version.current))
            return 0
        case .bashCompletion:
            writeStandardOutput(Usage.bashCompletion())
            return 0
        case .usageError(let message, let command):
            usageError(message, command)
            return 2
        }
    }

    /// What was not understood first, then how the command is used and where to read more.
    static func usageError(_ message: String, _ command: CommandSpec?) {
        let command = command ?? CommandTable.root
        let lines = command.path.isEmpty ? CommandTable.root.subcommands.filter { $0.name != "help" }.flatMap(\.synopsis) : command.synopsis
        var text = "scopeproxy: \(message)\n"
        for (index, line) in lines.enumerated() { text += (index == 0 ? "usage: " : "       ") + line + "\n" }
        let more = command.path.isEmpty ? "scopeproxy help" : "scopeproxy help \(command.path.joined(separator: " "))"
        text += "Run '\(more)' for more.\n"
        writeStandardError(text)
    }

    static func fail(_ message: String) {
        writeStandardError("scopeproxy: \(message)\n")
    }

    /// The config, or nil after saying why (the caller exits 2): a path that is missing, a
    /// directory or unreadable is named as such before the loader reads it, and a file that does not
    /// validate gets its `FILE:LINE:COLUMN: message`. `run` therefore never starts half-configured.
    static func loadConfig(_ source: ConfigPath?) -> ProxyConfiguration? {
        if let source, let problem = configFileProblem(source.path) {
            fail("config file \(source.described) \(problem)")
            return nil
        }
        do {
            return try Runtime.loadConfiguration(path: source?.path)
        } catch {
            writeStandardError(error.description + "\n")
            return nil
        }
    }

    /// Why `path` cannot be a config file, or nil when it can be read.
    static func configFileProblem(_ path: String) -> String? {
        var info = stat()
        guard stat(path, &info) == 0 else {
            return errno == ENOENT ? "does not exist" : "cannot be read: \(String(cString: strerror(errno)))"
        }
        if info.st_mode & S_IFMT == S_IFDIR { return "is a directory, not a config file" }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return "cannot be read: \(String(cString: strerror(errno)))" }
        close(fd)
        return nil
    }

    // MARK: check

    static func check(_ invocation: Invocation) -> Int32 {
        guard let source = invocation.configPath else {
            usageError("check needs --config FILE (or SCOPEPROXY_CONFIG)", invocation.command)
            return 2
        }
        guard let config = loadConfig(source) else { return 2 }
        writeStandardOutput(config.summary + "\n")
        // Structurally valid is exit 0 (CI without the secrets); what run would refuse is named.
        for warning in config.warnings { writeStandardError("warning: \(warning)\n") }
        for problem in Preflight.problems(config) + placeholderWarnings(config) + unscannedSecretWarnings(config)
            + CredentialSourceText.problems(config)
        {
            writeStandardError("warning: \(problem)\n")
        }
        return 0
    }

    /// The secrets run would log as `secret_not_scanned` (too short, or too long, for the scrub
    /// and the guard), decided by the same index run builds: one rule, said by both. Each secret
    /// that can be read is read alone (one that cannot is already named by Preflight); its value
    /// never leaves this function, only its name and length.
    static func unscannedSecretWarnings(_ config: ProxyConfiguration) -> [String] {
        var values: [String: [UInt8]] = [:]
        for (name, source) in config.secrets {
            let store = SecretStore(
                sources: [name: source], storeDirectory: config.storeDirectory, configPath: config.sourcePath,
                privateKeys: config.privateKeySecrets)
            guard (try? store.load()) != nil, let value = store.value(of: name) else { continue }
            values[name] = value.exposedBytes
        }
        return SecretValueIndex(values: values).exclusions.map { "\($0.description) (run starts anyway)" }
    }

    /// A placeholder no scope substitutes is refused everywhere (valid, but likely a forgotten
    /// `substitute:`); a key file run would refuse. Nothing is created here.
    static func placeholderWarnings(_ config: ProxyConfiguration) -> [String] {
        var found: [String] = []
        let substituted = config.policy.scopes.reduce(into: Set<String>()) { $0.formUnion($1.substitute) }
        for declared in config.placeholders where !substituted.contains(declared.secret) {
            found.append(
                "secret '\(declared.secret)' has a placeholder but no scope substitutes it: every request carrying it "
                    + "is refused (403 placeholder_out_of_scope); list it in a scope's substitute")
        }
        if !config.placeholders.isEmpty {
            do { _ = try PlaceholderKey.load(path: config.placeholderKeyPath) } catch {
                found.append("\(error.description); run would refuse to start")
            }
        }
        return found
    }

    // MARK: run

    static func run(_ invocation: Invocation) -> Int32 {
        // SIGTERM, SIGINT and SIGHUP wait (blocked, pending) until the main loop handles them:
        // every thread started from here on inherits the mask, and `runUntilSignalled` unblocks
        // them on this thread once its handlers are in place. Before, a SIGHUP or SIGTERM sent
        // right after `listening on` (a reload, a quick stop) met the default action and killed the
        // proxy without draining or flushing its log.
        ProxyServer.holdStopSignals()
        // Before any secret is read or any command runs: no other process of this user (a
        // `command:` program among them) may read the proxy's environment or memory.
        ProcessInspection.forbid()
        let source = invocation.configPath
        guard let config = loadConfig(source) else { return 2 }
        let secrets = Runtime.secretStore(config)
        do {
            try secrets.load()
        } catch {
            // Every secret that is not usable, not only the first: one round of fixes, not several.
            let problems = secrets.problems()
            for problem in problems.isEmpty ? [error] : problems { fail(problem.description) }
            return 1
        }
        // Before anything listens: placeholders handed out earlier must keep their meaning, so a
        // key that cannot be trusted stops the start instead of being replaced.
        let placeholders: PlaceholderTable
        do {
            placeholders = try Runtime.placeholderTable(config)
        } catch {
            fail(error.description)
            return 1
        }
        let logEnabled = !invocation.flag("no-access-log")
        let presentation = LogPresentation.forProcess(config.log)
        let holder = ScopeContextHolder(Runtime.scopeContext(config, secrets: secrets, placeholders: placeholders))
        Runtime.reportExclusions(holder.context.values)
        var engine = EngineConfiguration()
        do {
            engine = try Runtime.engineConfiguration(config, scope: holder, secrets: secrets, accessLog: logEnabled, presentation: presentation)
            engine.tls = try Runtime.tlsContexts(config)
        } catch let error as CustomStringConvertible {
            fail(error.description)
            return 1
        } catch {
            fail("unexpected error: \(error)")
            return 1
        }
        if let listen = invocation.value("listen").flatMap(ListenAddress.parse) { engine.listen = listen }
        if let threads = invocation.value("threads").flatMap({ Int($0) }) { engine.threads = threads }
        if let tunnel = invocation.value("tunnel").flatMap(TunnelPolicy.init(rawValue:)) { engine.tunnel = tunnel }
        // OAuth2 tokens are fetched when first needed (never at start), over the upstream TLS above.
        let minted = MintedTokens()
        var tokens: CredentialSources?
        do {
            tokens = try Runtime.tokenSource(config, secrets: secrets, engine: engine, holder: holder, minted: minted)
        } catch {
            fail(error.description)
            return 1
        }
        if tokens != nil {
            holder.replace(with: Runtime.scopeContext(config, secrets: secrets, placeholders: placeholders, tokens: tokens, minted: minted))
        }

        let server = ProxyServer(configuration: engine)
        let address: ListenAddress
        do {
            address = try server.start()
        } catch {
            fail(error.description)
            return 1
        }
        let banner = Banner(
            config: config, source: source, listen: address, routes: server.routeAddresses,
            adminPort: server.adminPort, tunnel: engine.tunnel, log: logEnabled ? presentation : nil,
            caCertificate: Runtime.interceptHosts(config).isEmpty ? nil : config.tls.caDirectory + "/" + CertificateAuthority.certificateFile,
            clientListen: server.clientListenAddress, transparentListen: server.transparentListenAddress)
        // The banner, the config's warnings under it, then the `listening on` line last: scripts and
        // tests wait for that exact line.
        writeStandardError(banner.text)
        Runtime.logWarnings(config)
        // A format the file did not fix became text here (stdout is a terminal): the loader could not know.
        if logEnabled, !config.log.formatIsExplicit, config.log.bodiesWithoutEffect(format: presentation.format) {
            Diagnostics.warning(
                "config_warning", [("warning", LogSettings.bodiesWithoutEffectMessage + " (text was chosen because stdout is a terminal)")])
        }
        writeStandardError("listening on \(address)\n")
        let running = RunningProxy(
            configPath: source?.path, started: config, secrets: secrets, holder: holder, engine: engine, tokens: tokens, minted: minted)
        // The running proxy owns the first source now: after a reload replaces it, it stops once
        // the last exchange waiting on it lets go (its commands killed), as every later one does.
        tokens = nil
        server.runUntilSignalled(hooks: .init(tick: { running.rotateSecrets() }, hangup: { running.reload() }))
        running.stop()
        return 0
    }

    // MARK: placeholders, env

    /// `NAME PLACEHOLDER` per placeholder secret, in name order.
    static func placeholders(_ invocation: Invocation) -> Int32 {
        guard let config = loadConfig(invocation.configPath) else { return 2 }
        guard !config.placeholders.isEmpty else {
            fail("no secret has `placeholder: true` in \(invocation.configPath?.described ?? "the embedded default"): nothing to print")
            return 0
        }
        guard let table = placeholderTable(config) else { return 1 }
        var out = ""
        for declared in config.placeholders {
            guard let text = shellSafe(table, declared.secret) else { return 1 }
            out += "\(declared.secret) \(text)\n"
        }
        writeStandardOutput(out)
        return 0
    }

    /// `export VARIABLE=PLACEHOLDER` per secret with `env_var`, in secret name order, for `eval`.
    static func environment(_ invocation: Invocation) -> Int32 {
        guard let config = loadConfig(invocation.configPath) else { return 2 }
        let exported = config.placeholders.filter { $0.environmentVariable != nil }
        guard !exported.isEmpty else {
            fail(
                "no secret declares `env_var` (with `placeholder: true`) in \(invocation.configPath?.described ?? "the embedded default"): "
                    + "nothing to export")
            return 0
        }
        guard let table = placeholderTable(config) else { return 1 }
        var out = ""
        for declared in exported {
            guard let variable = declared.environmentVariable, let text = shellSafe(table, declared.secret) else { return 1 }
            out += "export \(variable)=\(text)\n"
        }
        writeStandardOutput(out)
        return 0
    }

    /// The table, or nil after saying why the key cannot be used (the caller exits 1).
    private static func placeholderTable(_ config: ProxyConfiguration) -> PlaceholderTable? {
        do {
            return try Runtime.placeholderTable(config)
        } catch {
            fail(error.description)
            return nil
        }
    }

    /// The secret's placeholder when it needs no quoting in a shell (letters, digits, `_`, `.`,
    /// `-`: what secret names and lowercase hex are made of), else nil after saying so. Printed
    /// unquoted for `eval`, so this is checked, not assumed.
    private static func shellSafe(_ table: PlaceholderTable, _ secret: String) -> String? {
        guard let text = table.texts[secret], !text.isEmpty,
            text.utf8.allSatisfy({ byte in
                (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x30 && byte <= 0x39)
                    || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-")
            })
        else {
            fail("the placeholder of secret '\(secret)' is not shell-safe; nothing printed")
            return nil
        }
        return text
    }

    // MARK: ca

    /// Creates the local CA if missing and prints its certificate (PEM) on stdout.
    static func certificateAuthority(_ invocation: Invocation) -> Int32 {
        guard let config = loadConfig(invocation.configPath) else { return 2 }
        do {
            let authority = try CertificateAuthority.loadOrCreate(directory: config.tls.caDirectory)
            writeStandardOutput(authority.certificatePEM)
            return 0
        } catch {
            fail(error.description)
            return 1
        }
    }

    // MARK: health

    /// The admin address a command (`health`, `tail`) asks, or nil after saying why there is none
    /// to ask. Port 0 is a free port the running proxy chose at start: nothing here can know
    /// which, so asking port 0 would only ever say "nothing answers" while the proxy is up.
    static func adminAddress(of config: ProxyConfiguration, for command: String, _ invocation: Invocation) -> HostPort? {
        guard let admin = config.admin else {
            fail("\(command) needs an 'admin' address in the config (\(invocation.configPath?.described ?? "the embedded default has none"))")
            return nil
        }
        guard admin.port != 0 else {
            fail(
                "admin \(admin) listens on a free port chosen at start (its banner's admin line names it): \(command) cannot "
                    + "find it; give admin a fixed port, e.g. admin: \"\(HostPort(host: admin.host, port: 9090))\"")
            return nil
        }
        return admin
    }

    /// Asks the admin endpoint's /healthz (for container HEALTHCHECKs without curl): 0 and
    /// `healthy (admin HOST:PORT)` when it answers 200, 1 and the reason otherwise.
    static func health(_ invocation: Invocation) -> Int32 {
        guard let config = loadConfig(invocation.configPath),
            let admin = adminAddress(of: config, for: "health", invocation)
        else { return 2 }
        switch HealthProbe.ask(admin) {
        case .healthy:
            writeStandardOutput("healthy (admin \(admin))\n")
            return 0
        case .unhealthy(let reason):
            fail("unhealthy: \(reason)")
            return 1
        }
    }

    // MARK: secret

    /// Not echoing the name: a value typed where the name goes (`secret set "$TOKEN"`) is the secret.
    private static let invalidNameMessage =
        "invalid secret name (argument 1, not shown: it may be a secret): use letters, digits, '_', '.' and '-'"

    static func secretSet(_ invocation: Invocation) -> Int32 {
        guard let config = loadConfig(invocation.configPath) else { return 2 }
        let name = invocation.arguments[0]
        let store = LocalSecretDirectory(path: config.storeDirectory)
        // Refuse a bad name before asking for the value: typing a secret for nothing is annoying.
        guard SecretSource.isValidStoreName(name) else {
            fail(invalidNameMessage)
            return 2
        }
        let readers = storeReaders(config)
        if invocation.configPath != nil, readers[name] == nil {
            // The secret's name typed for its store entry: storing it would leave the secret unset.
            if case .store(let entry)? = config.secrets[name] {
                fail("secret '\(name)' reads store entry '\(entry)': scopeproxy secret set \(entry) --config \(invocation.configPath!.path)")
                return 2
            }
            // An entry for a config not written yet is legitimate: stored, but said.
            writeStandardError(
                "warning: no secret of \(invocation.configPath!.described) reads store entry '\(name)'"
                    + (readers.isEmpty ? "" : " (store entries read: \(readers.keys.sorted().joined(separator: ", ")))") + "\n")
        }
        let bytes: [UInt8]
        switch SecretInput.read(name: name) {
        case .success(let value): bytes = value
        case .failure(let failure):
            fail(failure.message)
            return 1
        }
        do {
            try store.set(name, bytes: bytes)
        } catch {
            fail(error.description)
            return 1
        }
        return 0
    }

    /// Store entry -> the secrets of the config that read it.
    static func storeReaders(_ config: ProxyConfiguration) -> [String: [String]] {
        var readers: [String: [String]] = [:]
        for (name, source) in config.secrets {
            if case .store(let entry) = source { readers[entry, default: []].append(name) }
        }
        return readers
    }

    static func secretList(_ invocation: Invocation) -> Int32 {
        guard let config = loadConfig(invocation.configPath) else { return 2 }
        for name in LocalSecretDirectory(path: config.storeDirectory).list() { writeStandardOutput(name + "\n") }
        return 0
    }

    static func secretRemove(_ invocation: Invocation) -> Int32 {
        guard let config = loadConfig(invocation.configPath) else { return 2 }
        guard SecretSource.isValidStoreName(invocation.arguments[0]) else {
            fail(invalidNameMessage)
            return 2
        }
        let name = invocation.arguments[0]
        do {
            try LocalSecretDirectory(path: config.storeDirectory).remove(name)
        } catch {
            // The secret's name typed for its store entry, as `secret set` refuses it: say the entry.
            var hint = ""
            if let path = invocation.configPath?.path, storeReaders(config)[name] == nil, case .store(let entry)? = config.secrets[name] {
                hint = " (secret '\(name)' reads store entry '\(entry)': scopeproxy secret rm \(entry) --config \(path))"
            }
            fail(error.description + hint)
            return 1
        }
        return 0
    }

    // MARK: config print

    static func configPrint(_ invocation: Invocation) -> Int32 {
        guard let config = loadConfig(invocation.configPath) else { return 2 }
        writeStandardOutput(ConfigPrinter.yaml(config, formatIsExplicit: LogPresentation.formatIsExplicit(config.log)))
        return 0
    }

    // MARK: explain

    static func explain(_ invocation: Invocation) -> Int32 {
        guard let config = loadConfig(invocation.configPath) else { return 2 }
        let headers = invocation.all("header").compactMap(splitHeader)
        let request = Explanation.Request(
            method: invocation.value("request") ?? "GET", headers: headers.map { (name: $0.0, value: $0.1) },
            url: invocation.arguments[0], location: invocation.value("location"),
            client: invocation.value("client"))
        let (text, status) = Explanation.render(config, request)
        writeStandardOutput(text)
        return status
    }

    /// `Name: value` -> ("Name", "value"), as curl's -H reads it; nil without a colon or a name.
    static func splitHeader(_ text: String) -> (String, String)? {
        guard let colon = text.firstIndex(of: ":") else { return nil }
        let name = String(text[..<colon])
        guard !name.isEmpty, !name.contains(" ") else { return nil }
        let value = text[text.index(after: colon)...].drop { $0 == " " || $0 == "\t" }
        return (name, String(value))
    }

    // MARK: help

    static func help(_ invocation: Invocation) -> Int32 {
        var command = CommandTable.root
        for word in invocation.arguments {
            guard let next = command.subcommand(word) else {
                let shown = (command.path + [word]).joined(separator: " ")
                let suggestion = CommandLineParser.commandSuggestion(word, in: command)
                usageError("no command '\(shown)' to show help for\(suggestion)", command.path.isEmpty ? nil : command)
                return 2
            }
            command = next
        }
        writeStandardOutput(Usage.help(command))
        return 0
    }
}
