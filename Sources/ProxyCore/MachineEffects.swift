// What the connection machine and its exchange machine share while they handle one event: the
// actions for the engine, the one timer the connection has armed, and the hop counter. Neither
// machine touches a socket; both append here.

public struct MachineEffects {
    /// The actions of the event being handled, in order.
    public internal(set) var actions: [ConnectionAction] = []
    /// The timer as last armed (a firing of any other purpose is stale and ignored).
    public internal(set) var timer: TimerPurpose?
    let timeouts: Timeouts
    private var lastHopID: UInt32 = 0
    /// A captured connection's original destination (`ConnectionFacts.captured`): stamped on every
    /// line it emits, whatever became of the request (the log's `original_dst`).
    let originalDestination: String?

    public init(timeouts: Timeouts, originalDestination: String? = nil) {
        self.timeouts = timeouts
        self.originalDestination = originalDestination
    }

    /// The actions so far, handed over; the timer and the hop counter stay.
    public mutating func take() -> [ConnectionAction] {
        let taken = actions
        actions = []
        return taken
    }

    mutating func append(_ action: ConnectionAction) {
        actions.append(action)
    }

    mutating func emit(_ record: ExchangeRecord) {
        guard let originalDestination else { return actions.append(.emit(record)) }
        var stamped = record
        stamped.originalDestination = originalDestination
        actions.append(.emit(stamped))
    }

    mutating func release(_ hop: HopID, reuse: Bool = false) {
        actions.append(.releaseUpstream(hop, reuse: reuse))
    }

    mutating func arm(_ purpose: TimerPurpose) {
        timer = purpose
        let milliseconds =
            switch purpose {
            case .clientHead: timeouts.clientHeader
            case .idle, .stall: timeouts.idle
            case .connect: timeouts.connect
            case .responseHead: timeouts.upstream
            }
        actions.append(.armTimer(purpose, milliseconds: milliseconds))
    }

    mutating func cancelTimer() {
        guard timer != nil else { return }
        timer = nil
        actions.append(.cancelTimer)
    }

    /// The timer fired: it is no longer armed.
    mutating func timerFired() {
        timer = nil
    }

    /// A new id for the next upstream attempt of this connection (never reused).
    mutating func nextHopID() -> HopID {
        lastHopID &+= 1
        return HopID(lastHopID)
    }
}

/// An event dropped on purpose: it is stale (about something the machine has let go of, or a
/// report of what it already handled), never something a correct engine could not send.
public enum StaleEvent: Sendable, Equatable {
    /// About a hop the machine released (a follow, a retry, a failure) or that is not current:
    /// nothing of it may reach the client.
    case staleHop
    /// A timer of another purpose than the one armed last.
    case timerOfAnotherPurpose
    /// The armed timer, in a phase that does not watch it (the response-head timer of a hop whose
    /// follow-up waits for an access token: the token source has its own timeouts).
    case timerOfEarlierPhase
    /// Something the current phase no longer waits for: a second report of what was handled
    /// (a connection already made, a body already complete, a tunnel side already finishing), or
    /// a report of a step that has not started (a head before the request was sent).
    case notAwaited
    /// Request bytes while the connection is not reading a request (a pipelined one waits its turn).
    case outOfTurn
    /// The connection is closing or closed: events the engine had queued still arrive.
    case afterClose
}

/// An event a correct engine cannot deliver in the machine's state. Asserted in debug builds and
/// counted in release (`ConnectionMachine.impossibleEvents`); the machine does nothing with it.
public enum ImpossibleEvent: Sendable, Equatable {
    /// A client TLS event on a connection that never started client TLS (only an intercepted
    /// CONNECT does, with `startClientTLS`).
    case clientTLSWithoutInterception
    /// An access token the machine is not waiting for: the engine delivers one answer per
    /// `acquireToken`, and the machine leaves the wait only on that answer or a close.
    case unrequestedToken
    /// A collected body while none is collected: the engine's collector exists only between
    /// `collectRequestBody` and its final report, and the machine leaves the collection only on
    /// that report or a close.
    case uncollectedBody
    /// A body report the pump cannot make: the request pump has no scrub (`scrubbed`), the
    /// response pump no egress guard (`blocked`).
    case impossibleBodyReport
    /// A switch to HTTP/2 after bytes of an HTTP/1.1 head, or on a connection that is not
    /// waiting for its first request: the engine looks for the h2c preface or ALPN `h2` only
    /// before anything else was read.
    case http2AfterHTTP1
    /// An event only an HTTP/1 client connection has (a request head, its TLS handshake, a
    /// tunnel), delivered to an HTTP/2 stream: a stream's head comes whole with `start`, and a
    /// stream never tunnels.
    case notOnAStream
}
