import ProxyCore
import ProxyEngine
import ScopeConfig

#if canImport(Glibc)
    import Glibc
#endif

/// `secret set`'s value: from a pipe or file every byte (one trailing newline removed); from a
/// terminal one line typed with echo off after a prompt on stderr.
enum SecretInput {
    struct Failure: Error {
        let message: String
    }

    static let limit = 64 * 1024

    static func read(name: String) -> Result<[UInt8], Failure> {
        isatty(0) == 1 ? readFromTerminal(prompt: "Value for \(name): ") : readAll()
    }

    /// Everything on stdin. The bytes as given: decoding them as UTF-8 would replace any that are not.
    static func readAll() -> Result<[UInt8], Failure> {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = Glibc.read(0, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            bytes += buffer[..<count]
            if bytes.count > limit { return .failure(Failure(message: "the value is larger than 64 KiB")) }
        }
        if bytes.last == 0x0A { bytes.removeLast() }  // the one echo or a here-string adds
        return .success(bytes)
    }

    /// One line from the terminal on fd 0 with echo off. The terminal is restored on every way out:
    /// normally, on a read error, and on SIGINT/SIGTERM/SIGHUP/SIGQUIT (the handler restores it, then
    /// the signal does what it would have done). Ctrl-Z is ignored meanwhile: a shell resuming the
    /// job later would find echo off with nobody to turn it back on.
    static func readFromTerminal(prompt: String) -> Result<[UInt8], Failure> {
        guard tcgetattr(0, savedTerminal) == 0 else {
            return .failure(Failure(message: "cannot read the terminal settings: \(String(cString: strerror(errno)))"))
        }
        let signals = [SIGINT, SIGTERM, SIGHUP, SIGQUIT]
        var previous: [sigaction] = []
        for number in signals {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { number in
                tcsetattr(0, TCSANOW, savedTerminal)
                signal(number, SIG_DFL)
                raise(number)
            }
            var old = sigaction()
            sigaction(number, &action, &old)
            previous.append(old)
        }
        let previousStop = signal(SIGTSTP, SIG_IGN)
        // A parent may hand down these signals blocked (Foundation's Process does): then Ctrl-C
        // would stay pending and the prompt could not be interrupted. Unblocked for the prompt only.
        var unblock = sigset_t(), previousMask = sigset_t()
        sigemptyset(&unblock)
        for number in signals { sigaddset(&unblock, number) }
        pthread_sigmask(SIG_UNBLOCK, &unblock, &previousMask)
        defer {
            tcsetattr(0, TCSANOW, savedTerminal)
            for (number, old) in zip(signals, previous) {
                var old = old
                sigaction(number, &old, nil)
            }
            signal(SIGTSTP, previousStop)
            pthread_sigmask(SIG_SETMASK, &previousMask, nil)
        }
        quietTerminal.copyMemory(from: savedTerminal, byteCount: terminalSettingsBytes)
        quietTerminal.assumingMemoryBound(to: termios.self).pointee.c_lflag &= ~tcflag_t(ECHO)
        // TCSAFLUSH: anything typed before the prompt (with echo still on) is discarded, not taken.
        guard tcsetattr(0, TCSAFLUSH, quietTerminal.assumingMemoryBound(to: termios.self)) == 0 else {
            return .failure(Failure(message: "cannot turn terminal echo off: \(String(cString: strerror(errno)))"))
        }
        writeStandardError(prompt)
        var line: [UInt8] = []
        var byte: UInt8 = 0
        var sawNewline = false
        while line.count <= limit {
            let count = Glibc.read(0, &byte, 1)
            if count < 0 && errno == EINTR { continue }
            if count < 0 { return .failure(Failure(message: "cannot read from the terminal: \(String(cString: strerror(errno)))")) }
            if count == 0 { break }
            if byte == 0x0A {
                sawNewline = true
                break
            }
            line.append(byte)
        }
        // The Enter key was not echoed: end the prompt's line ourselves.
        writeStandardError("\n")
        if !sawNewline && line.isEmpty { return .failure(Failure(message: "no value given")) }
        if line.count > limit { return .failure(Failure(message: "the value is larger than 64 KiB")) }
        return .success(line)
    }
}

/// The terminal settings in force before echo was turned off; global so the signal handler (a C
/// function, which can capture nothing) can put them back. Not a Swift `termios` value: the C
/// library's struct is larger than the imported one (tcgetattr wrote 60 bytes into the 57 of a
/// `termios()` global; AddressSanitizer found it), so both settings live in buffers sized for
/// whatever the C library writes.
private let terminalSettingsBytes = 256
nonisolated(unsafe) private let savedTerminal = UnsafeMutableRawPointer.allocate(byteCount: terminalSettingsBytes, alignment: 16)
    .bindMemory(to: termios.self, capacity: 1)
/// Echo off: a copy of the saved settings.
nonisolated(unsafe) private let quietTerminal = UnsafeMutableRawPointer.allocate(byteCount: terminalSettingsBytes, alignment: 16)

/// How the access log looks: the config's `log.format` when it sets one; otherwise text when the
/// log goes to a terminal (a person reads it) and JSON when it goes to a file or pipe (a program
/// does). Colour only on a terminal, and never with NO_COLOR set.
public struct LogPresentation: Sendable, Equatable {
    public var format: LogFormat
    public var colour: Bool

    public init(format: LogFormat, colour: Bool) {
        self.format = format
        self.colour = colour
    }

    public static func choose(format: LogFormat, formatIsExplicit: Bool, outputIsTerminal: Bool, noColor: Bool) -> LogPresentation {
        let chosen = formatIsExplicit ? format : (outputIsTerminal ? .text : .json)
        return LogPresentation(format: chosen, colour: chosen == .text && outputIsTerminal && !noColor)
    }

    /// Whether the config itself said `format:` (then it is kept whatever the output is).
    public static func formatIsExplicit(_ settings: LogSettings) -> Bool {
        settings.formatIsExplicit
    }

    /// For this process: is the log's destination a terminal, and is NO_COLOR set (non-empty, as
    /// no-color.org defines it)?
    public static func forProcess(_ settings: LogSettings) -> LogPresentation {
        let terminal: Bool
        switch settings.output {
        case .standardOutput: terminal = isatty(1) == 1
        case .standardError: terminal = isatty(2) == 1
        case .file, .discard: terminal = false
        }
        let noColor = getenv("NO_COLOR").map { $0.pointee != 0 } ?? false
        return choose(format: settings.format, formatIsExplicit: formatIsExplicit(settings), outputIsTerminal: terminal, noColor: noColor)
    }
}
