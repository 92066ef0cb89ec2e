import HTTP1Codec
import ProxyCore

/// Everything the engine needs to run, already validated. The executable (and later the YAML
/// config) builds one; the engine never reads files or the environment itself.
public struct EngineConfiguration: Sendable {
    public var listen: ListenAddress
    /// Event-loop threads, each with its own event_base. Each address is bound once and every
    /// thread's listener watches a duplicate of that one socket; no SO_REUSEPORT (see
    /// `ListeningSocket` for why).
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
    /// /healthz and /metrics (and the live view, `/view`); nil serves none.
    public var admin: ListenAddress?
    /// The live decision view's records (docs/view.md): set with `admin`; nil keeps none.
    public var viewFeed: ViewFeed?
    /// What the view's records are written with besides the feed (explain, curl's way in); nil:
    /// records without `explain`, curl through the configured `listen`.
    public var viewRecorder: ViewRecorder?
    /// Who may open the view (`admin_token`); swapped on reload through its own `replace`.
    public var viewAccess = ViewAccess()
    /// TLS for upstreams and interception; nil: made at start with the system trust store and no CA.
    public var tls: TLSContexts?
    /// Sidecar mode for clients that cannot use a proxy: origin-form requests on each route's
    /// listener go to its upstream, scoped as that origin.
    public var routes: [Route] = []
    /// `transparent.listen`: connections redirected here by nftables/iptables REDIRECT go to their
    /// original destination (docs/transparent.md). Nil: none.
    public var transparentListen: ListenAddress?
    /// `tls.client_listen`: a second listener that speaks TLS (its certificate from the local CA,
    /// so `tls` must carry one) and asks clients for a certificate. Nil: none.
    public var clientListener: ClientListener?
    /// Called on the worker thread with each client connection's facts as its machine starts
    /// (tests watch what a TLS client listener verified; nothing else should need it).
    public var connectionObserver: (@Sendable (ConnectionFacts) -> Void)?
    /// The proxy's own listening sockets and outgoing connections, shared by every copy of this
    /// configuration (the workers, the token fetcher): the proxy never connects to itself.
    public var ownSockets = OwnSockets()

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

#if canImport(Glibc)
    import Glibc
#endif
