/// The environment a `command:` secret's program runs with: what a program needs to find itself
/// and its configuration, and nothing else of the proxy's (which may hold other secrets given as
/// environment variables). The secret's `env:` names add what one program needs (`GH_HOST`).
public enum CommandEnvironment {
    /// Passed through whenever the proxy has them.
    public static let baseNames: Set<String> = ["PATH", "HOME", "USER", "LANG"]

    /// PATH, HOME, USER, LANG, every `XDG_*`, and those of `extra` that are set: the others are
    /// left out, not set empty.
    public static func minimal(from processEnvironment: [String: String], passing extra: [String]) -> [String: String] {
        let wanted = Set(extra)
        return processEnvironment.filter { name, _ in
            baseNames.contains(name) || name.hasPrefix("XDG_") || wanted.contains(name)
        }
    }
}

/// Why a command gave no output to read. Every text is the proxy's own: the program's name and
/// fixed words, never its output or its other arguments (which may carry a secret).
public enum CommandRunFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// It could not be started: strerror-style words from the proxy (`no such program 'gh' in PATH`).
    case notStarted(String)
    /// It exited with a status other than 0. `stderrFirstLine` is bounded and printable
    /// (`CommandStandardError`) but not scrubbed: the caller scrubs secrets before logging it.
    case exited(status: Int32, stderrFirstLine: String?)
    /// A signal ended it (not one the runner sent).
    case signaled(Int32)
    /// Still running after the timeout: its process group was killed.
    case timedOut(milliseconds: Int)
    /// It printed more than the limit: its process group was killed.
    case outputTooLarge(limit: Int)

    /// A short fixed text for the log's `reason` and metrics labels.
    public var code: String {
        switch self {
        case .notStarted: "not_started"
        case .exited: "exited"
        case .signaled: "signaled"
        case .timedOut: "timed_out"
        case .outputTooLarge: "output_too_large"
        }
    }

    /// Names the program (`argv[0]`, what the configuration says) and nothing the program said but
    /// the status; the first line of standard error is the caller's to scrub and log.
    public func description(program: String) -> String {
        "command '\(program)': \(description)"
    }

    /// Without the program's name (`description(program:)` adds it).
    public var description: String {
        switch self {
        case .notStarted(let why): "could not start: \(why)"
        case .exited(let status, _): "exited with status \(status)"
        case .signaled(let signal): "killed by signal \(signal)"
        case .timedOut(let milliseconds): "still running after \(milliseconds) ms (killed)"
        case .outputTooLarge(let limit): "printed more than \(limit) bytes (killed)"
        }
    }
}

/// The first line of what a command wrote to standard error, made safe to log: at most
/// `maximumBytes` bytes, every byte outside printable ASCII replaced by `?` (a terminal escape or a
/// CR must not reach a log reader). Fed in pieces as they are read; everything after the first
/// line is discarded unread.
///
/// Up to `capturedBytes` of the line are kept as the command wrote them, so that secret values
/// are replaced (`firstLine(scrubbing:)`) before the line is cut to `maximumBytes` or made
/// printable: cut first, a value straddling byte 200 would leave its first bytes in the log, and a
/// value with a non-ASCII byte would no longer match once that byte became `?`.
public struct CommandStandardError: Sendable, Equatable {
    public static let maximumBytes = 200
    /// The longest value any credential source gives (a command's output bound) fits.
    public static let capturedBytes = 64 * 1024

    private var bytes: [UInt8] = []
    /// The first line ended (or reached the bound): later input is dropped.
    public private(set) var isComplete = false

    public init() {}

    public mutating func receive(_ chunk: UnsafeRawBufferPointer) {
        for byte in chunk {
            if isComplete { return }
            if byte == 0x0A {
                isComplete = true
            } else if bytes.count == Self.capturedBytes {
                isComplete = true
            } else {
                bytes.append(byte)
            }
        }
    }

    public mutating func receive(_ chunk: [UInt8]) {
        chunk.withUnsafeBytes { receive($0) }
    }

    /// The line without a trailing CR or spaces, nil when it is empty.
    public var firstLine: String? { firstLine(scrubbing: { $0 }) }

    /// The line as `firstLine` gives it, `scrub` applied first to the bytes as the command wrote
    /// them (every secret value replaced), then cut to `maximumBytes` and made printable.
    public func firstLine(scrubbing scrub: ([UInt8]) -> [UInt8]) -> String? {
        var line = Array(scrub(bytes).prefix(Self.maximumBytes))
        while let last = line.last, last == 0x0D || last == 0x20 || last == 0x09 { line.removeLast() }
        guard !line.isEmpty else { return nil }
        return String(decoding: line.map { $0 >= 0x20 && $0 <= 0x7E ? $0 : UInt8(ascii: "?") }, as: UTF8.self)
    }
}
