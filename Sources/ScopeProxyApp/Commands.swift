import HTTP1Codec
import ProxyCore
import ProxyEngine
import ScopeConfig
import SecretStore
#if canImport(Glibc)
import Glibc
#endif

/// The command line of the contract: `run` (default), `check`, `secret set|list|rm`, `ca`, `health`.
public enum Commands {
    static let usage = """
        usage: scopeproxy [run] [--config FILE] [--listen HOST:PORT] [--threads N] [--tunnel allow|deny]
               scopeproxy check --config FILE
               scopeproxy secret set NAME      (the value is read from standard input, never from argv)
               scopeproxy secret list | rm NAME [--config FILE]
               scopeproxy ca --config FILE
               scopeproxy health --config FILE
        SCOPEPROXY_CONFIG is used when --config is not given; with neither, the embedded safe default runs.

        """

    struct Options {
        var configPath: String?
        var listen: ListenAddress?
        var threads: Int?
        var tunnel: TunnelPolicy?
        var accessLog = true
        var positional: [String] = []
    }

    struct UsageError: Error {
        let message: String
    }

    /// Runs a command and returns the process exit status.
    public static func main(_ arguments: [String]) -> Int32 {
        var words = arguments[...]
        let command: String
        switch words.first {
        case "run", "check", "secret", "ca", "health":
            command = words.removeFirst()
        case "-h", "--help", "help":
            writeStandardOutput(usage)
            return 0
        default:
            command = "run"
        }
        let options: Options
        do {
            options = try parse(words)
        } catch {
            fail(error.message)
            return 2
        }
        switch command {
        case "check": return check(options)
        case "secret": return secret(options)
        case "health": return health(options)
        case "ca": return certificateAuthority(options)
        default: return run(options)
        }
    }

    static func parse(_ words: ArraySlice<String>) throws(UsageError) -> Options {
        var options = Options()
        var remaining = words
        func value(_ option: String) throws(UsageError) -> String {
            guard let next = remaining.popFirst() else { throw UsageError(message: "\(option) needs a value") }
            return next
        }
        while let word = remaining.popFirst() {
            switch word {
            case "--config":
                options.configPath = try value(word)
            case "--listen":
                let text = try value(word)
                guard let address = ListenAddress.parse(text) else { throw UsageError(message: "--listen expects HOST:PORT, got \(text)") }
                options.listen = address
            case "--threads":
                guard let threads = Int(try value(word)), (1...256).contains(threads) else {
                    throw UsageError(message: "--threads expects a number from 1 to 256")
                }
                options.threads = threads
            case "--tunnel":
                guard let policy = TunnelPolicy(rawValue: try value(word)) else { throw UsageError(message: "--tunnel expects allow or deny") }
                options.tunnel = policy
            case "--no-access-log":
                // For measuring the log's cost in the benchmark; not for production use.
                options.accessLog = false
            case _ where word.hasPrefix("-"):
                throw UsageError(message: "unknown option \(word)\n\(usage)")
            default:
                options.positional.append(word)
            }
        }
        if options.configPath == nil, let fromEnvironment = getenv("SCOPEPROXY_CONFIG"), fromEnvironment.pointee != 0 {
            options.configPath = String(cString: fromEnvironment)
        }
        return options
    }

    /// The config, or nil after printing its `FILE:LINE:COLUMN: message` (the caller exits 2). `run`
    /// therefore never starts half-configured.
    static func loadOrReport(_ path: String?) -> ProxyConfiguration? {
        do {
            return try Runtime.loadConfiguration(path: path)
        } catch {
            writeStandardError(error.description + "\n")
            return nil
        }
    }

    static func fail(_ message: String) {
        writeStandardError("scopeproxy: \(message)\n")
    }

    // MARK: check

    static func check(_ options: Options) -> Int32 {
        guard let path = options.configPath else {
            fail("check needs --config FILE")
            return 2
        }
        guard let config = loadOrReport(path) else { return 2 }
        writeStandardOutput(config.summary + "\n")
        if let problem = AccessLog.outputProblem(config.log.output) { writeStandardOutput("problem: \(problem)\n") }
        return 0
    }

    // MARK: run

    static func run(_ options: Options) -> Int32 {
        guard let config = loadOrReport(options.configPath) else { return 2 }
        let secrets = SecretStore(sources: config.secrets, storeDirectory: config.storeDirectory)
        do {
            try secrets.load()
        } catch {
            fail(error.description)
            return 1
        }
        let holder = ScopeContextHolder(Runtime.scopeContext(config, secrets: secrets))
        var engine = EngineConfiguration()
        do {
            engine = try Runtime.engineConfiguration(config, scope: holder, secrets: secrets, accessLog: options.accessLog)
            engine.tls = try Runtime.tlsContexts(config)
        } catch let error as CustomStringConvertible {
            fail(error.description)
            return 1
        } catch {
            fail("unexpected error: \(error)")
            return 1
        }
        if let listen = options.listen { engine.listen = listen }
        if let threads = options.threads { engine.threads = threads }
        if let tunnel = options.tunnel { engine.tunnel = tunnel }

        let server = ProxyServer(configuration: engine)
        do {
            let address = try server.start()
            writeStandardError("listening on \(address)\n")
        } catch {
            fail(error.description)
            return 1
        }
        let running = RunningProxy(configPath: options.configPath, secrets: secrets, holder: holder, engine: engine)
        server.runUntilSignalled(hooks: .init(tick: { running.rotateSecrets() }, hangup: { running.reload() }))
        return 0
    }

    // MARK: ca

    /// Creates the local CA if missing and prints its certificate (PEM) on stdout.
    static func certificateAuthority(_ options: Options) -> Int32 {
        do {
            let config = try Runtime.loadConfiguration(path: options.configPath)
            let authority = try CertificateAuthority.loadOrCreate(directory: config.tls.caDirectory)
            writeStandardOutput(authority.certificatePEM)
            return 0
        } catch let error as ConfigError {
            writeStandardError(error.description + "\n")
            return 2
        } catch let error as TLSError {
            fail(error.description)
            return 1
        } catch {
            fail("cannot prepare the CA")
            return 1
        }
    }

    // MARK: health

    /// Asks the admin endpoint's /healthz (for container HEALTHCHECKs without curl): 0 when it
    /// answers 200, 1 otherwise.
    static func health(_ options: Options) -> Int32 {
        guard let config = loadOrReport(options.configPath) else { return 2 }
        guard let admin = config.admin else {
            fail("health needs an 'admin' address in the config")
            return 2
        }
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return 1 }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = admin.port.bigEndian
        guard inet_pton(AF_INET, admin.host == "localhost" ? "127.0.0.1" : admin.host, &address.sin_addr) == 1 else { return 1 }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            fail("admin endpoint \(admin) is not answering")
            return 1
        }
        writeAll(fd, "GET /healthz HTTP/1.0\r\nHost: \(admin)\r\n\r\n")
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = read(fd, &buffer, buffer.count)
        let statusLine = count > 0 ? String(decoding: buffer[..<count], as: UTF8.self) : ""
        return statusLine.hasPrefix("HTTP/1.1 200") || statusLine.hasPrefix("HTTP/1.0 200") ? 0 : 1
    }

    // MARK: secret

    static func secret(_ options: Options) -> Int32 {
        guard let config = loadOrReport(options.configPath) else { return 2 }
        let store = LocalSecretDirectory(path: config.storeDirectory)
        let words = options.positional
        do {
            switch (words.first, words.count) {
            case ("list", 1):
                for name in store.list() { writeStandardOutput(name + "\n") }
            case ("rm", 2):
                try store.remove(words[1])
            case ("set", 2):
                // From stdin only: argv is visible to every local user in /proc and in shell history.
                var bytes: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 4096)
                while true {
                    let count = read(0, &buffer, buffer.count)
                    if count <= 0 { break }
                    bytes += buffer[..<count]
                    if bytes.count > 64 * 1024 { throw LocalSecretDirectory.Failure.io("the value is larger than 64 KiB") }
                }
                if bytes.last == 0x0A { bytes.removeLast() }  // the one echo or a terminal adds
                // The bytes as given: decoding them as UTF-8 would replace any that are not.
                try store.set(words[1], bytes: bytes)
            default:
                fail("usage: scopeproxy secret set NAME | list | rm NAME")
                return 2
            }
        } catch {
            fail((error as? LocalSecretDirectory.Failure)?.description ?? "cannot update the secret store")
            return 1
        }
        return 0
    }
}
