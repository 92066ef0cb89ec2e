import HTTP1Codec

/// Everything the engine needs to run, already validated. The executable (and later the YAML
/// config) builds one; the engine never reads files or the environment itself.
public struct EngineConfiguration: Sendable {
    public var listen: ListenAddress
    /// Event-loop threads, each with its own event_base and listener (SO_REUSEPORT).
    public var threads: Int
    public var timeouts: Timeouts
    /// CONNECT to hosts that are not intercepted: splice bytes, or refuse with 403.
    public var tunnel: TunnelPolicy
    /// How long SIGTERM waits for in-flight exchanges before closing them.
    public var shutdownGraceMilliseconds: Int
    public var limits: Limits
    /// The scope rules, redirect policy, secrets and proxy auth; swapped whole on reload.
    public var scope: ScopeContextHolder
    /// One line per exchange; nil writes none.
    public var accessLog: AccessLog?
    public var metrics: Metrics
    /// /healthz and /metrics; nil serves none.
    public var admin: ListenAddress?
    /// TLS for upstreams and interception; nil: made at start with the system trust store and no CA.
    public var tls: TLSContexts?
    /// Sidecar mode for clients that cannot use a proxy: origin-form requests on each route's
    /// listener go to its upstream, scoped as that origin.
    public var routes: [RouteListener] = []

    public init(
        listen: ListenAddress = ListenAddress(host: "127.0.0.1", port: 8080),
        threads: Int = EngineConfiguration.defaultThreads,
        timeouts: Timeouts = Timeouts(),
        tunnel: TunnelPolicy = .deny,
        shutdownGraceMilliseconds: Int = 10_000,
        limits: Limits = Limits(),
        scope: ScopeContextHolder = ScopeContextHolder(),
        accessLog: AccessLog? = nil,
        metrics: Metrics = Metrics(),
        admin: ListenAddress? = nil
    ) {
        self.scope = scope
        self.accessLog = accessLog
        self.metrics = metrics
        self.admin = admin
        self.listen = listen
        self.threads = threads
        self.timeouts = timeouts
        self.tunnel = tunnel
        self.shutdownGraceMilliseconds = shutdownGraceMilliseconds
        self.limits = limits
    }

    public static var defaultThreads: Int { max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))) }
}

public struct RouteListener: Sendable, Equatable {
    public var listen: ListenAddress
    public var upstream: Origin

    public init(listen: ListenAddress, upstream: Origin) {
        self.listen = listen
        self.upstream = upstream
    }
}

/// The contract's `timeouts:` keys, in milliseconds.
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

public enum TunnelPolicy: String, Sendable {
    case allow
    case deny
}

/// Bounds that keep memory per connection fixed whatever the peers do.
public struct Limits: Sendable, Equatable {
    /// A request body kept for replay when the proxy follows a 307/308 (follow mode only).
    public var maxReplayBody = 1024 * 1024
    /// With `log.bodies`: how much of each body is kept to summarize (the summary itself is <= 2 KB).
    public var maxObservedBody = 16 * 1024
    /// Per direction: the most a bufferevent reads ahead, and the output level at which the proxy
    /// stops moving more body bytes into it (backpressure).
    public var bufferHighWatermark: Int
    public var maxIdleUpstreamPerOrigin: Int
    public var maxIdleUpstreamTotal: Int
    /// Interim (1xx) responses accepted before the final one.
    public var maxInformationalResponses: Int
    /// Open client connections across all workers. At the limit the proxy stops accepting: new
    /// connections wait in the kernel's listen backlog (then the client's SYN retries), never refused
    /// with a reset, and are served as slots free up.
    public var maxClientConnections: Int

    public static let defaultMaxClientConnections = 10_000

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

#if canImport(Glibc)
import Glibc
#endif
