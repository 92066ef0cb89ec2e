import Foundation

/// A fresh directory for a test's config, secret and log files, removed with the object.
public final class ScratchDirectory: @unchecked Sendable {
    public let path = NSTemporaryDirectory() + "scopeproxy-test-" + UUID().uuidString

    public init() {
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    /// Writes a file atomically (temp + rename, as a rotation tool would) with `mode`; returns its path.
    @discardableResult
    public func write(_ name: String, _ text: String, mode: Int = 0o600) -> String {
        let file = path + "/" + name
        let temporary = file + ".tmp"
        precondition(FileManager.default.createFile(atPath: temporary, contents: Data(text.utf8)), "cannot create \(temporary)")
        chmod(temporary, mode_t(mode))
        rename(temporary, file)
        return file
    }
}
