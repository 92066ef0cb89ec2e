#if canImport(Glibc)
import Glibc
#endif

/// Reads a file that is expected to be small (configs, secrets), refusing to slurp anything larger.
public enum SmallFile {
    public enum Failure: Error { case unreadable, tooLarge }

    public static func read(_ path: String, limit: Int) -> Result<[UInt8], Failure> {
        guard let handle = fopen(path, "rb") else { return .failure(.unreadable) }
        defer { fclose(handle) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = fread(&buffer, 1, buffer.count, handle)
            if count <= 0 { break }
            bytes += buffer[..<count]
            if bytes.count > limit { return .failure(.tooLarge) }
        }
        return .success(bytes)
    }
}

/// Directories that hold secrets or keys.
public enum PrivateDirectory {
    /// Creates `path` and any missing parents with mode 0700 and tightens the last one to 0700 if
    /// it already existed. Returns nil, or why it failed (naming the directory, never contents).
    public static func create(_ path: String) -> String? {
        var current = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            current += "/" + component
            if mkdir(current, 0o700) != 0 && errno != EEXIST {
                return "cannot create \(current): \(String(cString: strerror(errno)))"
            }
        }
        chmod(path, 0o700)
        return nil
    }
}
