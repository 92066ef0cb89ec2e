import Foundation

/// Runs curl (never with -k) with a 10 s limit: its exit status and stdout. The environment's proxy
/// variables are removed, so only the proxy a test names (`-x`, `--proxy`) is used.
public func curl(_ arguments: [String]) throws -> (status: Int32, body: String) {
    try runProgram(["/usr/bin/curl", "-sS", "--max-time", "10"] + arguments)
}

/// Runs a program (`arguments[0]` is its path) without the environment's proxy variables: its exit
/// status and stdout (stderr discarded).
public func runProgram(_ arguments: [String]) throws -> (status: Int32, body: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: arguments[0])
    process.arguments = Array(arguments.dropFirst())
    process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.lowercased().hasSuffix("_proxy") }
    let output = Pipe()
    process.standardOutput = output
    process.standardError = FileHandle.nullDevice
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}

/// The port a fixture process prints on its first line of stdout (nil if it printed none).
public func readPortLine(_ output: Pipe) -> UInt16? {
    var text = ""
    while !text.contains("\n") {
        let data = output.fileHandleForReading.availableData
        if data.isEmpty { break }
        text += String(decoding: data, as: UTF8.self)
    }
    return UInt16(text.trimmingCharacters(in: .whitespacesAndNewlines))
}
