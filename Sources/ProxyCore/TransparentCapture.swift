import HTTP1Codec
import ScopePolicy

/// Where a connection redirected to the transparent listener (nftables/iptables REDIRECT) was going:
/// the kernel's `SO_ORIGINAL_DST`. The proxy always connects there, whatever the client names in
/// Host or SNI (docs/transparent.md).
public struct TransparentDestination: Sendable, Hashable, CustomStringConvertible {
    public let address: IPAddress
    public let port: UInt16

    public init(address: IPAddress, port: UInt16) {
        self.address = address
        self.port = port
    }

    /// `10.0.0.1:80`, `[fd00::1]:443`: the log's `original_dst`.
    public var description: String { address.isIPv4 ? "\(address):\(port)" : "[\(address)]:\(port)" }

    /// The destination as an origin of `scheme`, its host the address literal (`http://10.0.0.1`).
    public func literalOrigin(_ scheme: Scheme) -> Origin {
        let text = address.isIPv4 ? address.description : "[\(address)]"
        // An IPAddress always prints as a literal Host.parse takes; the fallback is unreachable.
        let host = (try? Host.parse(Substring(text))) ?? (try! Host.parse("0.0.0.0"))
        return Origin(scheme: scheme, host: host, port: port)
    }
}

/// What the engine knows of a connection accepted on the transparent listener, before any byte
/// is read as a request (part of `ConnectionFacts`).
public struct CapturedConnection: Sendable, Equatable {
    public var destination: TransparentDestination
    /// The client speaks TLS (its first byte was a handshake record): the connection's one CONNECT
    /// is the proxy's own reading of its ClientHello, and nothing of HTTP is ever written to it
    /// (no `200 Connection Established`, no error page: a refusal closes).
    public var tls: Bool
    /// The original destination is one of the proxy's own listeners, or the connection was not
    /// redirected at all (its original destination is the transparent listener itself): refused
    /// with `loop_refused` (docs/security-model.md, "Clients").
    public var loopsBack: Bool

    public init(destination: TransparentDestination, tls: Bool, loopsBack: Bool) {
        self.destination = destination
        self.tls = tls
        self.loopsBack = loopsBack
    }
}

/// The origin a transparent connection is scoped as, fixed by its first request (plain HTTP) or its
/// ClientHello (TLS), like an intercepted tunnel's.
public struct TransparentTarget: Sendable, Equatable {
    /// What scopes match and what the log names: the client's name when it resolves to the
    /// destination, else the destination's address literal.
    public let origin: Origin
    /// The Host the first request named (as `http://host:port`, port 80 when absent); a later
    /// request on the connection naming another is 400 `host_mismatch`. Nil: the first request had
    /// no Host (HTTP/1.0), and the origin is the address literal whatever later ones name.
    public let firstHost: Origin?

    public init(origin: Origin, firstHost: Origin?) {
        self.origin = origin
        self.firstHost = firstHost
    }

    /// Whether a later request's Host (`host`, `port`) is the one the connection was fixed by.
    func admitsHost(_ host: Host, port: UInt16?) -> Bool {
        guard let firstHost else { return true }
        return Origin(scheme: .http, host: host, port: port) == firstHost
    }
}

/// The name rule of transparent capture (docs/transparent.md, "Which origin"): a name the client
/// chose counts only when it resolves to the address the connection was going to. Otherwise a
/// client could redirect a connection to an address of its choosing and write a scoped host's name
/// in Host or SNI, and the scope's credentials would go to that address.
public enum TransparentOrigin {
    /// `name`: the Host's or SNI's host (nil when the client sent none); `resolved`: the addresses
    /// that name resolved to (empty when the lookup failed). An address literal as the name counts
    /// only when it is the destination itself.
    public static func choose(scheme: Scheme, name: Host?, resolved: [IPAddress], destination: TransparentDestination) -> Origin {
        guard let name else { return destination.literalOrigin(scheme) }
        let named = Origin(scheme: scheme, host: name, port: destination.port)
        switch name.kind {
        case .name:
            return resolved.contains(destination.address) ? named : destination.literalOrigin(scheme)
        case .ipv4, .ipv6:
            // The literal already is an address; no lookup, and it counts only as the destination.
            return named == destination.literalOrigin(scheme) ? named : destination.literalOrigin(scheme)
        }
    }

    /// Whether the proxy may look up the name a captured client chose (Host, SNI) at all: only when
    /// the egress policy lets a client this connection could be reach that name by name. A lookup
    /// is traffic too: the query carries the name to the resolver and on to the name's own servers,
    /// so a client the policy keeps from `x.example` could otherwise spell data into names
    /// (`<data>.x.example`) and send them out through the proxy's resolver. A denied name is then
    /// never the origin: the connection is scoped as the destination's address literal, as when the
    /// name does not resolve there (and the answer says nothing of what the name resolves to).
    ///
    /// The clients are those the connection could turn out to be: the one its facts recognise
    /// without a Proxy-Authorization, and, on plain HTTP (whose first request may carry one), every
    /// client recognised by one. More candidates only mean a lookup; never a name wrongly dropped.
    public static func mayLookUp(
        _ name: Host, scheme: Scheme, destination: TransparentDestination, facts: ConnectionFacts, scope: ScopeContext
    ) -> Bool {
        let origin = Origin(scheme: scheme, host: name, port: destination.port)
        var candidates: [ClientIdentity] = []
        if case .client(let client) = scope.recognize(facts, proxyAuthorization: nil) { candidates.append(client) }
        if scheme == .http {
            candidates += scope.clients.rules.filter { $0.auth != nil }.map { ClientIdentity(name: $0.name) }
        }
        return candidates.contains { client in
            if case .success = EgressClearance.clear(origin, client: client, scope: scope) { return true }
            return false
        }
    }

    /// The Host of a plain connection's first request: `(host, port)`, or nil when it has none or
    /// one that does not parse (admission then refuses the request itself).
    public static func firstHost(of head: RequestHead) -> (host: Host, port: UInt16?)? {
        guard case .one(let value) = head.fields.singleValue(of: "host"),
            let (host, port) = try? RequestTarget.parseAuthority(Substring(value))
        else { return nil }
        return (host, port)
    }

    /// The head the TLS path admits as a CONNECT: every CONNECT rule (client recognition, rate
    /// limits, `tls.intercept`, `tls.tunnel`, egress) applies to it as to a client's own.
    public static func connectHead(for origin: Origin) -> RequestHead {
        var fields = HTTPFields()
        fields.append(name: "Host", value: "\(origin.host):\(origin.port)")
        return RequestHead(method: "CONNECT", target: "\(origin.host):\(origin.port)", version: .http1_1, fields: fields)
    }
}

/// What the first bytes of a captured connection say, read without consuming them (the engine
/// peeks): TLS with the ClientHello's name, or HTTP with its first request's Host.
public enum CapturedFirstBytes: Sendable, Equatable {
    /// Fewer bytes than a decision needs (and fewer than `peekLimit`).
    case incomplete
    /// A ClientHello, whole; its server name if it sent a valid one.
    case tls(serverName: Host?)
    /// Bytes that start like TLS but are no ClientHello the proxy can read (the reason is a fixed phrase).
    case unreadableTLS(String)
    /// Anything else is HTTP: the first request's Host, when its head is whole, parses and has one
    /// (otherwise the connection's own head reader refuses the head as usual).
    case http(host: Host?, port: UInt16?)

    /// The most bytes a decision reads: a whole ClientHello, or a whole request head.
    public static let peekLimit = max(ClientHello.maxBytes, HeadLimits.request.maxHeadBytes + 2)

    /// One look at `bytes` (a reader of its own: nothing carried from an earlier look).
    public static func classify(_ bytes: [UInt8]) -> CapturedFirstBytes {
        var reader = CapturedFirstBytesReader()
        return reader.read(bytes)
    }
}

/// Reads a captured connection's first bytes as they accumulate: the engine peeks at the whole
/// prefix each time more arrives, and hands each one here.
public struct CapturedFirstBytesReader: Sendable {
    private var scanner = HeadScanner(limits: .request)
    /// Bytes of head the scanner examined, over every read: what a dribbled head has cost.
    public private(set) var headBytesScanned = 0
    /// After an `.incomplete` read: how long the prefix must grow before reading it again can say
    /// more (the end of the ClientHello's record under way; for HTTP, any new byte).
    public private(set) var bytesWanted = 1

    public init() {}

    /// `bytes`: everything that arrived so far (each call's bytes start with the previous call's).
    public mutating func read(_ bytes: [UInt8]) -> CapturedFirstBytes {
        guard let first = bytes.first else { return .incomplete }
        if first == 0x16 {
            switch ClientHello.read(bytes) {
            case .incomplete:
                bytesWanted = ClientHello.bytesNeeded(bytes)
                return .incomplete
            case .hello(let name): return .tls(serverName: name)
            case .malformed(let reason): return .unreadableTLS(reason)
            }
        }
        enum Scan {
            case incomplete
            case refused
            case head(RequestHead)
        }
        // The scanner is the reader's, kept between reads: it resumes where the last prefix ended
        // (HeadScanner's contract), so a head dribbled a byte at a time is scanned once, not once per byte.
        let before = scanner.scannedThrough
        defer { headBytesScanned += scanner.scannedThrough - before }
        let peekLimit = CapturedFirstBytes.peekLimit
        let scan: Scan = bytes.withUnsafeBytes { raw in
            do {
                guard let boundary = try scanner.scan(raw) else { return bytes.count >= peekLimit ? .refused : .incomplete }
                return .head(try HeadParser.parseRequest(UnsafeRawBufferPointer(rebasing: raw[boundary.start..<boundary.end])))
            } catch {
                return .refused  // the connection's own head reader refuses it the same way
            }
        }
        switch scan {
        case .incomplete:
            bytesWanted = bytes.count + 1
            return .incomplete
        case .refused: return .http(host: nil, port: nil)
        case .head(let head):
            guard let (host, port) = TransparentOrigin.firstHost(of: head) else { return .http(host: nil, port: nil) }
            return .http(host: host, port: port)
        }
    }
}
