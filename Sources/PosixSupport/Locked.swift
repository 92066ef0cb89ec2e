#if canImport(Glibc)
    import Glibc
#endif

/// A value behind a pthread mutex, with the same `withLock` shape as `Synchronization.Mutex`.
///
/// Why not `Mutex`: on Linux it locks with futex calls inside the (uninstrumented) standard library,
/// so ThreadSanitizer cannot see it and reports every access it protects as a race (measured: a
/// two-thread counter under `Mutex` gives three reports and the right total). pthread mutexes are
/// intercepted by the sanitizer, so `make sanitize` reports only real races; uncontended, they cost
/// the same.
public final class Locked<Value>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    public init(_ value: Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    public func withLock<Result, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result) throws(Failure) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
