import PosixSupport
import ScopePolicy

#if canImport(Glibc)
    import Glibc
#endif

/// Why a secret could not be loaded. Names the secret and the reason, never a value.
public struct SecretError: Error, Equatable, CustomStringConvertible, Sendable {
    /// At start-up every kind makes `run` refuse to start (`load` throws). The kind says what a
    /// proxy that is already running does when a re-read (`refresh`) meets the same problem, so
    /// `explain` can say it without guessing from the reason's text.
    public enum Kind: Sendable, Equatable {
        /// An `env` secret whose variable is not set. Variables are read once, at start-up.
        case environmentUnset
        /// A `file` or `store` secret whose file cannot be reached (missing, or its path cannot be
        /// searched): a running proxy keeps the last value it read, since a rotation that is not
        /// atomic looks like this for a moment.
        case fileUnreachable
        /// The file is there but refused (permissions, owner, type, size), or the value is not one
        /// a header can carry: a running proxy drops the value, and requests that need it are
        /// answered 502 credential_unavailable.
        case refused
    }

    public let name: String
    public let reason: String
    public let kind: Kind

    public init(name: String, reason: String, kind: Kind) {
        self.name = name
        self.reason = reason
        self.kind = kind
    }

    public var description: String { "secret '\(name)': \(reason)" }
}

/// The current values of every configured secret. `env` values are read once; `file` and `store`
/// values are re-read when the file changes (`refresh`, called about once a second off the event
/// loops), including a Kubernetes `..data` symlink swap, since stat follows links.
public final class SecretStore: SecretLookup, @unchecked Sendable {
    private struct FileState: Equatable {
        var device: UInt64
        var inode: UInt64
        var size: Int64
        var modified: Int
        var modifiedNanoseconds: Int
        var changed: Int
        var changedNanoseconds: Int
    }

    let sources: [String: SecretSource]  // internal: SecretStore+Rotation.swift reads it
    private let storeDirectory: String
    /// The config file these sources come from, named in the `secret set` hint: without
    /// `--config` that command writes to the default store, not to this config's `store_dir`.
    private let configPath: String?
    /// Secrets holding a PEM private key: their value spans lines (it is signed with, never put in
    /// a header), so the header-value rule does not apply to them.
    private let privateKeys: Set<String>
    private let values = Locked<[String: SecretValue]>([:])
    private var fileStates: [String: FileState] = [:]  // touched only by load/refresh (one caller)

    public init(sources: [String: SecretSource], storeDirectory: String, configPath: String? = nil, privateKeys: Set<String> = []) {
        self.sources = sources
        self.privateKeys = privateKeys
        self.storeDirectory = storeDirectory
        self.configPath = configPath
    }

    public func value(of name: String) -> SecretValue? {
        values.withLock { $0[name] }
    }

    public var currentValues: [String: SecretValue] { values.withLock { $0 } }

    /// The values the response scrub and the egress guard look for: every one but the private
    /// keys, which the proxy never sends (a 2 KiB PEM would make every body's hold-back 3 KiB);
    /// the log tripwire still knows them (`allValues`).
    public var scannedValues: [String: SecretValue] { values.withLock { $0.filter { !privateKeys.contains($0.key) } } }

    /// Every secret's value as it is now (the redactor scans log lines for them).
    public var allValues: [SecretValue] { values.withLock { Array($0.values) } }

    /// Loads everything; the first failure is thrown (and `run` refuses to start).
    public func load() throws(SecretError) {
        var loaded: [String: SecretValue] = [:]
        for name in sources.keys.sorted() {
            let (value, state) = try read(name, sources[name]!)
            loaded[name] = value
            if let state { fileStates[name] = state }
        }
        values.withLock { $0 = loaded }
    }

    /// Every secret that cannot be loaded, each with its reason (`check` lists them all, where
    /// `load` stops at the first). Values read along the way are dropped, never kept.
    public func problems() -> [SecretError] {
        var found: [SecretError] = []
        for name in sources.keys.sorted() {
            do { _ = try read(name, sources[name]!) } catch { found.append(error) }
        }
        return found
    }

    /// Re-reads file and store secrets whose file changed. Returns the names that changed and the
    /// errors met (a secret whose file became unsafe is dropped: fail closed).
    @discardableResult
    public func refresh() -> (changed: [String], errors: [SecretError]) {
        var changed: [String] = []
        var errors: [SecretError] = []
        for (name, source) in sources {
            let path: String
            switch source {
            case .env: continue
            case .file(let filePath, _): path = filePath
            case .store(let storeName): path = storePath(storeName)
            }
            let state = Self.fileState(path)
            if let state, state == fileStates[name] { continue }
            do {
                let (value, newState) = try read(name, source)
                fileStates[name] = newState
                if values.withLock({ $0[name] }) != value {
                    values.withLock { $0[name] = value }
                    changed.append(name)
                }
            } catch {
                if error.kind == .fileUnreachable {
                    // Missing for a moment is what a non-atomic rotation looks like: keep the last
                    // good value and report it; a permission problem drops the value below.
                    errors.append(error)
                    continue
                }
                fileStates[name] = state
                values.withLock { $0[name] = nil }
                errors.append(error)
            }
        }
        return (changed, errors)
    }

    func storePath(_ name: String) -> String { storeDirectory + "/" + name }

    /// The command that writes `name` into this store, ready to paste into a shell.
    func setCommand(_ name: String) -> String {
        guard let configPath else { return "scopeproxy secret set \(name)" }
        return "scopeproxy secret set \(name) --config \(Self.shellWord(configPath))"
    }

    /// `path` as one shell word: as it is when it holds only characters no shell treats specially,
    /// else in single quotes (a `'` inside becomes `'\''`).
    static func shellWord(_ path: String) -> String {
        let plain =
            !path.isEmpty
            && path.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
                case UInt8(ascii: "/"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: "+"), UInt8(ascii: ","),
                    UInt8(ascii: ":"), UInt8(ascii: "@"), UInt8(ascii: "%"):
                    true
                default: false
                }
            }
        if plain { return path }
        return "'" + path.split(separator: "'", omittingEmptySubsequences: false).joined(separator: "'\\''") + "'"
    }

    private func read(_ name: String, _ source: SecretSource) throws(SecretError) -> (SecretValue, FileState?) {
        switch source {
        case .env(let variable):
            guard let raw = getenv(variable) else {
                throw SecretError(name: name, reason: "environment variable \(variable) is not set", kind: .environmentUnset)
            }
            // The variable's bytes as they are: String(cString:) would replace non-UTF-8 bytes.
            let length = strlen(raw)
            let bytes = raw.withMemoryRebound(to: UInt8.self, capacity: length) { Array(UnsafeBufferPointer(start: $0, count: length)) }
            return (try Self.validate(name, bytes, privateKey: privateKeys.contains(name)), nil)
        case .file(let path, let allowGroupRead):
            return try Self.readFile(name, path: path, allowGroupRead: allowGroupRead, privateKey: privateKeys.contains(name))
        case .store(let storeName):
            let path = storePath(storeName)
            if access(path, F_OK) != 0 && errno == ENOENT {
                // The usual first-run case: say how to add it.
                throw SecretError(
                    name: name, reason: "store entry '\(storeName)' is missing from \(storeDirectory) (add it with: \(setCommand(storeName)))",
                    kind: .fileUnreachable)
            }
            return try Self.readFile(name, path: path, allowGroupRead: false, privateKey: privateKeys.contains(name))
        }
    }

    private static func readFile(_ name: String, path: String, allowGroupRead: Bool, privateKey: Bool) throws(SecretError)
        -> (SecretValue, FileState?)
    {
        var info = Glibc.stat()
        guard fstatat(AT_FDCWD, path, &info, 0) == 0 else {
            let reason = errno == ENOENT ? "file \(path) is missing" : "file \(path) cannot be accessed: \(String(cString: strerror(errno)))"
            throw SecretError(name: name, reason: reason, kind: .fileUnreachable)
        }
        let mode = info.st_mode
        guard mode & S_IFMT == S_IFREG else { throw SecretError(name: name, reason: "\(path) is not a regular file", kind: .refused) }
        if mode & 0o007 != 0 { throw SecretError(name: name, reason: "file \(path) is world-accessible (chmod o-rwx)", kind: .refused) }
        if mode & 0o020 != 0 { throw SecretError(name: name, reason: "file \(path) is group-writable (chmod g-w)", kind: .refused) }
        if mode & 0o040 != 0 && !allowGroupRead {
            throw SecretError(
                name: name, reason: "file \(path) is group-readable; chmod g-r, or set allow_group_read: true for a Kubernetes fsGroup mount",
                kind: .refused)
        }
        if info.st_uid != geteuid() && info.st_uid != 0 {
            throw SecretError(name: name, reason: "file \(path) is owned by another user", kind: .refused)
        }
        var bytes: [UInt8]
        switch SmallFile.read(path, limit: 64 * 1024) {
        case .success(let read): bytes = read
        case .failure(.tooLarge): throw SecretError(name: name, reason: "\(path) is larger than 64 KiB", kind: .refused)
        case .failure(let failure): throw SecretError(name: name, reason: failure.describe(path), kind: .refused)
        }
        if bytes.last == 0x0A { bytes.removeLast() }  // one trailing newline, as editors and echo add
        // The bytes as read: decoding them as UTF-8 here is what turned a non-UTF-8 byte into
        // U+FFFD, and the Latin-1 serializer then wrote `é` as one byte.
        return (try validate(name, bytes, privateKey: privateKey), Self.fileState(path))
    }

    /// A value must be a valid header field value (RFC 9110 §5.5): no CR, LF or NUL (header
    /// injection), and no other control byte (C0 but HTAB, and DEL) either. Bytes 0x80-0xFF
    /// (obs-text, which is what UTF-8 text is on the wire) are fine. The error names the secret,
    /// never a byte of it, not even which control byte or where.
    ///
    /// A private key (`privateKey`) is a PEM block: lines are its shape, so only NUL is refused
    /// (docs/credentials.md; the key is parsed when it is first signed with, and by `check`).
    static func validate(_ name: String, _ bytes: [UInt8], privateKey: Bool = false) throws(SecretError) -> SecretValue {
        if bytes.isEmpty { throw SecretError(name: name, reason: "the value is empty", kind: .refused) }
        if privateKey {
            if bytes.contains(0) { throw SecretError(name: name, reason: "the private key contains NUL: it is not a PEM file", kind: .refused) }
            return SecretValue(bytes: bytes)
        }
        if bytes.starts(with: Array("-----BEGIN ".utf8)), bytes.contains(0x0A) {
            throw SecretError(
                name: name,
                reason: "the value is a PEM block (several lines), which a header cannot carry: name it as the private_key of a "
                    + "github_app or oauth2 secret, which signs with it",
                kind: .refused)
        }
        if bytes.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0 }) {
            throw SecretError(name: name, reason: "the value contains CR, LF or NUL", kind: .refused)
        }
        if bytes.contains(where: { ($0 < 0x20 && $0 != 0x09) || $0 == 0x7F }) {
            throw SecretError(
                name: name, reason: "the value contains a control character (a C0 control other than tab, or DEL), which a header cannot carry",
                kind: .refused)
        }
        return SecretValue(bytes: bytes)
    }

    private static func fileState(_ path: String) -> FileState? {
        var info = Glibc.stat()
        guard fstatat(AT_FDCWD, path, &info, 0) == 0 else { return nil }
        return FileState(
            device: UInt64(info.st_dev), inode: UInt64(info.st_ino), size: Int64(info.st_size),
            modified: info.st_mtim.tv_sec, modifiedNanoseconds: info.st_mtim.tv_nsec,
            changed: info.st_ctim.tv_sec, changedNanoseconds: info.st_ctim.tv_nsec)
    }
}

/// `scopeproxy secret set|list|rm`: the local store directory (0700, files 0600, atomic writes).
public struct LocalSecretDirectory: Sendable {
    public let path: String

    public init(path: String) {
        self.path = path
    }

    public enum Failure: Error, CustomStringConvertible {
        case invalidName(String)
        case io(String)
        case notFound(String)

        public var description: String {
            switch self {
            case .invalidName(let name): "invalid secret name '\(name)': use letters, digits, '_', '.' and '-'"
            case .io(let message): message
            case .notFound(let name): "no secret named '\(name)' in the store"
            }
        }
    }

    /// Creates the directory (and parents) 0700, and tightens it if it exists.
    func ensureDirectory() throws(Failure) {
        if let problem = PrivateDirectory.create(path) { throw .io(problem) }
    }

    /// Stores `bytes` exactly (the caller has removed a trailing newline if it wants to): the
    /// store reads them back unchanged, so what is injected is what was given.
    public func set(_ name: String, bytes: [UInt8]) throws(Failure) {
        guard SecretSource.isValidStoreName(name) else { throw .invalidName(name) }
        // A PEM block (a private key) is stored as it is: the config decides whether a secret is a key.
        let isPEM = bytes.starts(with: Array("-----BEGIN ".utf8)) && bytes.contains(0x0A)
        do { _ = try SecretStore.validate(name, bytes, privateKey: isPEM) } catch { throw .io(error.description) }
        try ensureDirectory()
        let temporary = "\(path)/.\(name).tmp.\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .io("cannot write \(temporary): \(String(cString: strerror(errno)))") }
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let synced = fsync(fd) == 0
        close(fd)
        guard written == bytes.count, synced, rename(temporary, "\(path)/\(name)") == 0 else {
            unlink(temporary)
            throw .io("cannot store secret '\(name)'")
        }
    }

    public func list() -> [String] {
        guard let directory = opendir(path) else { return [] }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if SecretSource.isValidStoreName(name) { names.append(name) }
        }
        return names.sorted()
    }

    public func remove(_ name: String) throws(Failure) {
        guard SecretSource.isValidStoreName(name) else { throw .invalidName(name) }
        guard unlink("\(path)/\(name)") == 0 else { throw .notFound(name) }
    }
}
