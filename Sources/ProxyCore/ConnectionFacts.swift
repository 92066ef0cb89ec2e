/// What the engine knows about a client connection when it accepts it, before any byte: where it
/// comes from, and what the kernel or a TLS handshake vouches for. The client rules (`clients:`)
/// decide on these facts and on each request's Proxy-Authorization; the engine only gathers them.
public struct ConnectionFacts: Sendable, Equatable {
    /// `ip:port` (`[v6]:port`), as the access log's `client` shows it.
    public var peer: String
    /// The peer's IP address as text (`127.0.0.1`, `::1`), for `source` CIDRs; nil when unknown.
    public var peerIP: String?
    /// Who owns the client's socket, for `uid` clients (loopback TCP on Linux only).
    public var owner: SocketOwner
    /// The client certificate a TLS client listener verified; nil on a plain listener.
    public var certificate: ClientCertificate?
    /// The peer is one of the proxy's own outgoing sockets (its local address and port, connected
    /// to this listener): the proxy reached itself. Such a connection is never any client
    /// (docs/security-model.md, "Clients"); every request on it is refused with `loop_refused`.
    public var isProxyOwnConnection: Bool
    /// Accepted on the transparent listener: where it was going (`SO_ORIGINAL_DST`) and what it speaks.
    public var captured: CapturedConnection?

    public init(
        peer: String, peerIP: String? = nil, owner: SocketOwner = .notLookedUp, certificate: ClientCertificate? = nil,
        isProxyOwnConnection: Bool = false, captured: CapturedConnection? = nil
    ) {
        self.captured = captured
        self.peer = peer
        self.peerIP = peerIP
        self.owner = owner
        self.certificate = certificate
        self.isProxyOwnConnection = isProxyOwnConnection
    }
}

/// The owner of a client's socket, as `/proc/net/tcp*` shows it (what `ss -tp` reads).
public enum SocketOwner: Sendable, Equatable {
    /// No configured client is recognised by uid: nobody looked.
    case notLookedUp
    case uid(UInt32)
    /// Looked, and could not tell (not loopback, another network namespace, no /proc): such a
    /// client is never recognised by uid (fail closed), and the reason is logged.
    case unknown(reason: String)
}

/// A verified client certificate, reduced to what `tls_client` rules match on.
public struct ClientCertificate: Sendable, Equatable {
    /// The subject's common names (usually one).
    public var commonNames: [String]
    /// Subject alternative names as `DNS:name`, `email:addr`, `URI:uri`, `IP:addr`.
    public var subjectAltNames: [String]
    /// The configured CA files (as written in the config) that each verify the certificate's chain:
    /// a client entry matches only a certificate its own CA issued.
    public var verifiedBy: Set<String>

    public init(commonNames: [String], subjectAltNames: [String], verifiedBy: Set<String>) {
        self.commonNames = commonNames
        self.subjectAltNames = subjectAltNames
        self.verifiedBy = verifiedBy
    }
}
