import PosixSupport
import ScopePolicy

#if canImport(Glibc)
    import Glibc
#endif

/// Refresh tokens that the token endpoint rotated (RFC 6749 §6: "the authorization server MAY
/// issue a new refresh token, in which case the client MUST discard the old refresh token").
extension SecretStore: RefreshTokenSink {
    /// A `store:` secret is rewritten atomically (a 0600 temporary file in the store directory,
    /// fsync, rename over the old one); the next `refresh` reads it back. Other sources cannot be
    /// written: the caller keeps the value in memory. Called off the event loops (file I/O).
    public func storeRotatedRefreshToken(secret: String, value: SecretValue) -> RefreshTokenPersistence {
        guard case .store(let storeName)? = sources[secret] else { return .notAStoreSecret }
        do { _ = try Self.validate(secret, value.exposedBytes) } catch { return .failed(error.description) }
        let path = storePath(storeName)
        let directory = path.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
        let temporary = "\(directory)/.\(storeName).rotated.\(getpid()).\(UInt32.random(in: 0...UInt32.max))"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return .failed("cannot write \(temporary): \(String(cString: strerror(errno)))") }
        let bytes = value.exposedBytes
        var written = 0
        while written < bytes.count {
            let count = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + written, $0.count - written) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            written += count
        }
        // The umask cannot widen 0600, but an inherited ACL default could: set it explicitly.
        let secured = fchmod(fd, 0o600) == 0
        let synced = fsync(fd) == 0
        close(fd)
        guard written == bytes.count, secured, synced, rename(temporary, path) == 0 else {
            unlink(temporary)
            return .failed("cannot replace \(path)")
        }
        // The rename is durable once the directory entry is.
        let directoryFD = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directoryFD >= 0 {
            fsync(directoryFD)
            close(directoryFD)
        }
        return .persisted
    }
}
