import Foundation

/// Runs curl (never with -k) with a 10 s limit: its exit status and stdout. The environment's proxy
/// variables are removed, so only the proxy a test names (`-x`, `--proxy`) is used.
public func curl(_ arguments: [String]) throws -> (status: Int32, body: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
    process.arguments = ["-sS", "--max-time", "10"] + arguments
    process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.lowercased().hasSuffix("_proxy") }
    let output = Pipe()
    process.standardOutput = output
    process.standardError = FileHandle.nullDevice
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: data, as: UTF8.self))
}
