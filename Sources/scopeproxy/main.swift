import ProxyEngine
#if canImport(Glibc)
import Glibc
#endif

// The executable only turns the command line into a configuration and hands it to the engine.

struct UsageError: Error {
    let message: String
}

func printError(_ message: String) {
    writeStandardError("scopeproxy: \(message)\n")
}

let usage = """
    usage: scopeproxy [run] [--config FILE] [--listen HOST:PORT] [--threads N] [--tunnel allow|deny]
           scopeproxy check --config FILE
           scopeproxy ca --config FILE
           scopeproxy secret set|list|rm NAME
           scopeproxy health --config FILE

    """

func parseRunOptions(_ arguments: ArraySlice<String>) throws(UsageError) -> EngineConfiguration {
    var configuration = EngineConfiguration()
    var remaining = arguments
    func value(for option: String) throws(UsageError) -> String {
        guard let next = remaining.popFirst() else { throw UsageError(message: "\(option) needs a value") }
        return next
    }
    while let argument = remaining.popFirst() {
        switch argument {
        case "--listen":
            let text = try value(for: argument)
            guard let address = ListenAddress.parse(text) else {
                throw UsageError(message: "--listen expects HOST:PORT, got \(text)")
            }
            configuration.listen = address
        case "--threads":
            let text = try value(for: argument)
            guard let threads = Int(text), (1...256).contains(threads) else {
                throw UsageError(message: "--threads expects a number from 1 to 256")
            }
            configuration.threads = threads
        case "--tunnel":
            let text = try value(for: argument)
            guard let policy = TunnelPolicy(rawValue: text) else {
                throw UsageError(message: "--tunnel expects allow or deny")
            }
            configuration.tunnel = policy
        case "--config":
            _ = try value(for: argument)
            throw UsageError(message: "--config: YAML configuration is not supported by this build yet")
        default:
            throw UsageError(message: "unknown option \(argument)\n\(usage)")
        }
    }
    return configuration
}

func run(_ arguments: ArraySlice<String>) -> Int32 {
    let configuration: EngineConfiguration
    do {
        configuration = try parseRunOptions(arguments)
    } catch {
        printError(error.message)
        return 2
    }
    let server = ProxyServer(configuration: configuration)
    do {
        let address = try server.start()
        writeStandardError("listening on \(address)\n")
    } catch {
        printError(error.description)
        return 1
    }
    server.runUntilSignalled()
    return 0
}

var arguments = CommandLine.arguments.dropFirst()
switch arguments.first {
case "run":
    exit(run(arguments.dropFirst()))
case "-h", "--help", "help":
    print(usage, terminator: "")
    exit(0)
case "check", "ca", "secret", "health":
    printError("'\(arguments.first!)' is not available in this build yet")
    exit(2)
default:
    exit(run(arguments))
}
