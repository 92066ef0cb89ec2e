import CLibevent
import PosixSupport
import ProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// libevent's pthread locking must be on before a base that other threads poke is created; the
/// proxy turns it on at start (`ProxyServer`), and a loop made before that (or without a server,
/// in tests) does it here. Calling it again with the same callbacks is a no-op.
private let mailboxThreadingConfigured: Bool = {
    signal(SIGPIPE, SIG_IGN)  // an endpoint that hangs up must cost an EPIPE, not the process
    return evthread_use_pthreads() == 0
}()

/// Jobs posted from any thread, run in order on the thread of one event loop: how a token fetched
/// on the fetcher's thread reaches the worker whose request waits for it. A locked queue and one
/// event that `post` makes active (libevent's pthread locking is on: see `ProxyServer`).
///
/// The owner closes it on the loop's thread before freeing the base (`close`); posts after that
/// are refused, never run: the lock orders every `event_active` before the `event_free`.
final class EventMailbox: TokenMailbox, @unchecked Sendable {
    private struct Queue {
        var jobs: [@Sendable () -> Void] = []
        var isOpen = true
    }

    private let queue = Locked(Queue())
    private var event: OpaquePointer?

    init?(base: OpaquePointer) {
        let context = Unmanaged.passUnretained(self).toOpaque()
        guard
            let event = event_new(
                base, -1, 0,
                { _, _, context in
                    Unmanaged<EventMailbox>.fromOpaque(context!).takeUnretainedValue().runJobs()
                }, context)
        else { return nil }
        self.event = event
    }

    deinit { close() }

    /// Thread-safe. False when the mailbox is closed (the job is dropped, unrun).
    @discardableResult
    func post(_ job: @escaping @Sendable () -> Void) -> Bool {
        queue.withLock { queue in
            guard queue.isOpen, let event else { return false }
            queue.jobs.append(job)
            event_active(event, 0, 0)
            return true
        }
    }

    /// On the loop's thread, before its base is freed. Jobs still queued are dropped.
    func close() {
        queue.withLock { queue in
            guard queue.isOpen else { return }
            queue.isOpen = false
            queue.jobs.removeAll()
            if let event { event_free(event) }
            event = nil
        }
    }

    private func runJobs() {
        let jobs = queue.withLock { queue in
            defer { queue.jobs.removeAll() }
            return queue.jobs
        }
        for job in jobs { job() }
    }
}

/// An event loop on its own thread with nothing to do but what is posted to its mailbox: the token
/// fetcher's loop (tests also use them as stand-ins for workers). It is a `Worker` without
/// listeners, so `UpstreamConnector` works on it unchanged (resolver, verified upstream TLS).
final class MailboxLoop: @unchecked Sendable {
    let worker: Worker
    let mailbox: EventMailbox
    private var thread: PosixThread?
    private let stopped = Locked(false)

    init(name: String, configuration: EngineConfiguration) throws(EngineError) {
        precondition(mailboxThreadingConfigured, "evthread_use_pthreads failed")
        worker = try Worker(index: -1, configuration: configuration, slots: ConnectionSlots(limit: 1))
        guard let mailbox = EventMailbox(base: worker.base) else { throw .eventBase }
        self.mailbox = mailbox
        thread = PosixThread(name: name) { [worker, mailbox] in
            worker.run()
            mailbox.close()
        }
    }

    /// Stops the loop (after `beforeStop` ran on it, to release what lives there) and joins it.
    func stop(beforeStop: @escaping @Sendable () -> Void = {}) {
        guard
            stopped.withLock({ wasStopped in
                defer { wasStopped = true }
                return !wasStopped
            })
        else { return }
        let worker = worker
        if !mailbox.post({
            beforeStop()
            worker.post(.drain(graceMilliseconds: 0))
        }) {
            worker.post(.drain(graceMilliseconds: 0))
        }
        thread?.join()
        thread = nil
    }

    deinit { stop() }
}
