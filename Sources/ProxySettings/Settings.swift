import HTTP1Codec

// The settings the data path runs on, one definition each: the YAML loader produces them, the
// engine consumes them, and the exchange state machine reads the ones that shape its decisions.

/// The `timeouts:` keys (docs/configuration.md), in milliseconds.
public struct Timeouts: Sendable, Equatable {
    /// Upstream DNS + TCP (+ TLS) connect; exceeded -> 502.
    public var connect: Int
    /// Waiting for the upstream's response head once the request was sent; exceeded -> 504.
    public var upstream: Int
    /// Keep-alive idle on either side, and a stalled body in either direction.
    public var idle: Int
    /// A client's request head must arrive whole within this (slowloris).
    public var clientHeader: Int

    public init(connect: Int = 5_000, upstream: Int = 30_000, idle: Int = 60_000, clientHeader: Int = 10_000) {
        self.connect = connect
        self.upstream = upstream
        self.idle = idle
        self.clientHeader = clientHeader
    }
}

/// `tls.tunnel`: what happens to a CONNECT whose host is not intercepted.
public enum TunnelPolicy: String, Sendable, CaseIterable {
    /// Splice the bytes (the proxy sees nothing inside).
    case allow
    /// Refuse with 403.
    case deny
}

/// Bounds that keep memory per connection fixed whatever the peers do.
public struct Limits: Sendable, Equatable {
    /// A request body kept for replay when the proxy follows a 307/308 (follow mode only).
    public var maxReplayBody = 1024 * 1024
    /// A request body read whole before it is scoped (a form to a scope that limits `methods:`,
    /// which may carry `_method`); larger ones are refused with 413.
    public var maxInspectedBody = 64 * 1024
    /// A JSON or form request body read whole to replace placeholders in it (`substitute:`).
    public var maxSubstitutedBody = 1024 * 1024
    /// With `log.bodies`: how much of each body is kept to summarize (the summary itself is <= 2 KB).
    public var maxObservedBody = 16 * 1024
    /// Per direction: the most a bufferevent reads ahead, and the output level at which the proxy
    /// stops moving more body bytes into it (backpressure).
    public var bufferHighWatermark: Int
    public var maxIdleUpstreamPerOrigin: Int
    public var maxIdleUpstreamTotal: Int
    /// Interim (1xx) responses accepted before the final one.
    public var maxInformationalResponses: Int
    /// Open client connections across all workers (`limits.max_connections`). At the limit the
    /// proxy stops accepting: new connections wait in the kernel's listen backlog (then the client's
    /// SYN retries), never refused with a reset, and are served as slots free up.
    public var maxClientConnections: Int
    /// Streams an HTTP/2 client may have open at once on one connection
    /// (`limits.h2_max_concurrent_streams`, sent as SETTINGS_MAX_CONCURRENT_STREAMS); a stream past
    /// it is refused (REFUSED_STREAM, RFC 9113 §5.1.2) and the client may retry it.
    public var h2MaxConcurrentStreams = Limits.defaultH2MaxConcurrentStreams

    public static let defaultMaxClientConnections = 10_000
    public static let defaultH2MaxConcurrentStreams = 100
    /// The bounds `limits.h2_max_concurrent_streams` is read within: at least one stream, and at
    /// most as many as a connection's buffers (256 KiB per direction per stream) can bear.
    public static let h2MaxConcurrentStreamsRange = 1...1_000

    public init(
        bufferHighWatermark: Int = 256 * 1024, maxIdleUpstreamPerOrigin: Int = 256,
        maxIdleUpstreamTotal: Int = 1024, maxInformationalResponses: Int = 16,
        maxClientConnections: Int = Limits.defaultMaxClientConnections
    ) {
        self.maxClientConnections = maxClientConnections
        self.bufferHighWatermark = bufferHighWatermark
        self.maxIdleUpstreamPerOrigin = maxIdleUpstreamPerOrigin
        self.maxIdleUpstreamTotal = maxIdleUpstreamTotal
        self.maxInformationalResponses = maxInformationalResponses
    }
}

/// `routes:` (sidecar mode): origin-form requests on `listen` go to `upstream`, scoped as that origin.
public struct Route: Sendable, Equatable {
    public var listen: ListenAddress
    public var upstream: Origin

    public init(listen: ListenAddress, upstream: Origin) {
        self.listen = listen
        self.upstream = upstream
    }
}

/// `log.format`.
public enum LogFormat: String, Sendable, CaseIterable {
    /// One JSON object per line.
    case json
    /// One human-readable line per exchange.
    case text
}

/// `log.output`.
public enum LogOutput: Sendable, Equatable {
    case standardOutput
    case standardError
    /// Appended to; reopened on SIGHUP (log rotation).
    case file(String)
    /// Lines are formatted, then dropped (the benchmark measures the formatting cost with this).
    case discard
}

/// `scrub:`: what happens to the values the proxy injected or substituted when a response carries
/// them back to the client.
public enum ScrubMode: String, Sendable, CaseIterable {
    /// Header values and identity-encoded bodies are scrubbed; compressed bodies pass as they are.
    case on
    /// As `on`, and requests to scoped origins ask for `Accept-Encoding: identity`, so bodies arrive
    /// in a form that can be scanned.
    case strict
    case off
}

/// `guard:`: whether known secret values may leave for origins outside their scopes.
public enum GuardMode: String, Sendable, CaseIterable {
    case on
    case off
}

/// `scrub:` and `guard:` together: the protections that work on secret *values* in traffic.
public struct SecretProtection: Sendable, Equatable {
    public var scrub: ScrubMode
    public var guardMode: GuardMode

    public init(scrub: ScrubMode = .on, guardMode: GuardMode = .on) {
        self.scrub = scrub
        self.guardMode = guardMode
    }
}
