import Digests
import PosixSupport
import ScopeConfig
import ScopePolicy

#if canImport(Glibc)
    import Glibc
#endif

/// Why the per-install placeholder key cannot be used. Each case names the file and the fix; none
/// carries a byte of the key.
public enum PlaceholderKeyError: Error, Equatable, CustomStringConvertible {
    /// A directory, a device, a symbolic link...: something else sits where the key belongs.
    case notARegularFile(path: String)
    /// Owned by another user: whoever owns it chose the placeholders.
    case wrongOwner(path: String, owner: UInt32)
    /// Group or other may read or write it (`mode` is the permission bits).
    case tooOpen(path: String, mode: UInt32)
    /// Not exactly `Placeholder.keyLength` bytes: truncated, or not a key at all.
    case wrongLength(path: String, length: Int)
    case unreadable(path: String, reason: String)
    case cannotCreate(path: String, reason: String)

    public var description: String {
        switch self {
        case .notARegularFile(let path):
            "the placeholder key \(path) is not a regular file: remove it (a new key gives every placeholder a new value)"
        case .wrongOwner(let path, let owner):
            "the placeholder key \(path) is owned by uid \(owner), not by this user (uid \(geteuid())): "
                + "run scopeproxy as its owner, or remove it to start a new key (every placeholder changes)"
        case .tooOpen(let path, let mode):
            "the placeholder key \(path) has mode \(Self.octal(mode)); others could read it and compute every placeholder: chmod 600 \(path)"
        case .wrongLength(let path, let length):
            "the placeholder key \(path) holds \(length) bytes, not \(Placeholder.keyLength): it is damaged; "
                + "restore it from a backup, or remove it to start a new key (every placeholder changes)"
        case .unreadable(let path, let reason):
            "cannot read the placeholder key \(path): \(reason)"
        case .cannotCreate(let path, let reason):
            "cannot create the placeholder key \(path): \(reason) (it lives in tls.ca_dir)"
        }
    }

    static func octal(_ mode: UInt32) -> String {
        let digits = String(mode & 0o7777, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }
}

/// The per-install key placeholders are derived from (`Placeholder.text`): 32 random bytes in
/// `placeholder.key` beside the local CA, 0600 in a 0700 directory. It is created once, on first
/// need, and never replaced: a placeholder handed to a client (an `export` in its environment)
/// must mean the same secret after every restart.
public enum PlaceholderKey {
    /// The key, or nil when the file does not exist yet (nothing is created).
    public static func load(path: String) throws(PlaceholderKeyError) -> [UInt8]? {
        // O_NOFOLLOW: a symbolic link planted where the key belongs is refused, not followed.
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK)
        guard fd >= 0 else {
            switch errno {
            case ENOENT: return nil
            case ELOOP: throw .notARegularFile(path: path)
            default: throw .unreadable(path: path, reason: String(cString: strerror(errno)))
            }
        }
        defer { close(fd) }
        // Checked on the open descriptor, so the file judged is the file read.
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .unreadable(path: path, reason: String(cString: strerror(errno))) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw .notARegularFile(path: path) }
        guard info.st_uid == geteuid() else { throw .wrongOwner(path: path, owner: info.st_uid) }
        guard info.st_mode & 0o077 == 0 else { throw .tooOpen(path: path, mode: info.st_mode & 0o7777) }
        // One byte more than a key: enough to tell a longer file from a key.
        var bytes = [UInt8](repeating: 0, count: Placeholder.keyLength + 1)
        var count = 0
        while count < bytes.count {
            let got = bytes.withUnsafeMutableBufferPointer { read(fd, $0.baseAddress! + count, $0.count - count) }
            if got < 0 && errno == EINTR { continue }
            if got < 0 { throw .unreadable(path: path, reason: String(cString: strerror(errno))) }
            if got == 0 { break }
            count += got
        }
        guard count == Placeholder.keyLength else {
            throw .wrongLength(path: path, length: count > Placeholder.keyLength ? Int(info.st_size) : count)
        }
        return Array(bytes.prefix(Placeholder.keyLength))
    }

    /// The key, created (with its directory) when the file does not exist yet.
    public static func loadOrCreate(path: String) throws(PlaceholderKeyError) -> [UInt8] {
        if let key = try load(path: path) { return key }
        try create(path: path)
        // Read back through the same checks: what is used is what a restart will find.
        guard let key = try load(path: path) else { throw .cannotCreate(path: path, reason: "it vanished after it was written") }
        return key
    }

    /// Writes a new key beside the final name, then links it into place. `link` (unlike
    /// `rename`) never replaces an existing file: when two processes create the key at once, the
    /// first one's key stays and the other reads it, so both hand out the same placeholders.
    static func create(path: String) throws(PlaceholderKeyError) {
        let directory = path.lastIndex(of: "/").map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        if let problem = PrivateDirectory.create(directory) { throw .cannotCreate(path: path, reason: problem) }
        let temporary = "\(path).tmp.\(getpid())"
        unlink(temporary)  // a leftover of this pid's earlier crash; O_EXCL below refuses anything else
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw .cannotCreate(path: path, reason: String(cString: strerror(errno))) }
        defer { unlink(temporary) }
        let key = RandomBytes.generate(Placeholder.keyLength)
        // Exactly 0600 whatever the umask (a umask could leave the owner unable to read it back).
        let written = fchmod(fd, 0o600) == 0 ? key.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } : -1
        let synced = fsync(fd) == 0
        close(fd)
        guard written == key.count, synced else { throw .cannotCreate(path: path, reason: "writing \(temporary) failed") }
        if link(temporary, path) != 0 && errno != EEXIST {
            throw .cannotCreate(path: path, reason: String(cString: strerror(errno)))
        }
        // The new name survives a crash only once the directory entry is on disk.
        let directoryFD = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directoryFD >= 0 {
            fsync(directoryFD)
            close(directoryFD)
        }
    }
}

extension Runtime {
    /// Every placeholder of the config, derived with the per-install key. With no `placeholder:
    /// true` secret the key is neither read nor created: a config without placeholders leaves no
    /// file behind. `run` calls this before it listens, so an unusable key stops it with the
    /// file's name and the fix.
    /// `keyPath` is the key of the directory the proxy started with, on a reload too (`tls.ca_dir`
    /// is restart-only): a placeholder a client holds keeps standing for the same secret.
    public static func placeholderTable(_ config: ProxyConfiguration, keyPath: String? = nil) throws(PlaceholderKeyError) -> PlaceholderTable {
        guard !config.placeholders.isEmpty else { return .empty }
        let key = try PlaceholderKey.loadOrCreate(path: keyPath ?? config.placeholderKeyPath)
        return PlaceholderTable(config.placeholders, key: key)
    }
}
