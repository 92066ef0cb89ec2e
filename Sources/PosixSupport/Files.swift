#if canImport(Glibc)
    import Glibc
#endif

/// Reads a file that is expected to be small (configs, secrets), refusing to slurp anything larger.
public enum SmallFile {
    public enum Failure: Error, Equatable {
        case missing
        /// A directory (`fopen` would "open" one and read it as empty: a config of nothing).
        case isDirectory
        case notARegularFile
        /// Why, in the system's words (`Permission denied`).
        case unreadable(String)
        case tooLarge

        /// For an error message about `path`.
        public func describe(_ path: String) -> String {
            switch self {
            case .missing: "\(path) does not exist"
            case .isDirectory: "\(path) is a directory, not a file"
            case .notARegularFile: "\(path) is not a regular file"
            case .unreadable(let reason): "cannot read \(path): \(reason)"
            case .tooLarge: "\(path) is too large"
            }
        }
    }

    public static func read(_ path: String, limit: Int) -> Result<[UInt8], Failure> {
        var info = stat()
        guard stat(path, &info) == 0 else {
            return .failure(errno == ENOENT || errno == ENOTDIR ? .missing : .unreadable(String(cString: strerror(errno))))
        }
        if info.st_mode & S_IFMT == S_IFDIR { return .failure(.isDirectory) }
        guard info.st_mode & S_IFMT == S_IFREG else { return .failure(.notARegularFile) }
        // Opened without blocking and checked again on the open file (fstat): the path could have
        // become a FIFO since the stat above, and opening one would wait for a writer, forever,
        // holding the reading thread (the credential fetcher's: docs/credentials.md).
        let descriptor = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else {
            return .failure(errno == ENOENT || errno == ENOTDIR ? .missing : .unreadable(String(cString: strerror(errno))))
        }
        guard fstat(descriptor, &info) == 0 else {
            let why = String(cString: strerror(errno))
            close(descriptor)
            return .failure(.unreadable(why))
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            close(descriptor)
            return .failure(info.st_mode & S_IFMT == S_IFDIR ? .isDirectory : .notARegularFile)
        }
        guard let handle = fdopen(descriptor, "rb") else {
            let why = String(cString: strerror(errno))
            close(descriptor)
            return .failure(.unreadable(why))
        }
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
