import HTTP1Codec
import SecretScan

// The vocabulary of the connection state machine: the events the engine reports and the actions it
// carries out. Nothing here touches a socket.

/// One upstream connection attempt of a connection's life. Every upstream event carries the hop it
/// is about; the machine ignores events of any hop but the current one, so a hop it has let go of
/// can never feed the client again.
public struct HopID: Hashable, Sendable, CustomStringConvertible {
    public let value: UInt32

    public init(_ value: UInt32) {
        self.value = value
    }

    public var description: String { "hop\(value)" }
}

public enum TimerPurpose: Sendable, Equatable {
    /// A request head must arrive whole in time (slowloris).
    case clientHead
    /// Keep-alive between requests.
    case idle
    /// Upstream DNS + TCP (+ TLS).
    case connect
    /// The request is sent; its response head must arrive in time.
    case responseHead
    /// A body (either way) or a tunnel made no progress for `idle`.
    case stall
}

/// How the engine reaches a hop's origin.
public enum UpstreamTransport: Sendable, Equatable {
    case plain
    /// Verified TLS (https origins).
    case tls
    /// CONNECT tunnels: TCP only; the client's TLS passes through untouched.
    case raw
}

public enum TunnelSide: Sendable, Equatable {
    case client
    case upstream
}

/// A change in a body being moved by the engine, as deltas since the last report.
public enum BodyProgress: Sendable, Equatable {
    /// `payload` body bytes went out; `consumed` bytes (payload and framing) were taken from the source.
    case moved(payload: UInt64, consumed: UInt64)
    /// The body ended. `captured`: the whole request body when it was kept for a replay (follow mode,
    /// within the limit); `observed`: its first bytes for the log (`log.bodies`).
    case complete(payload: UInt64, consumed: UInt64, captured: [UInt8]?, observed: ExchangeRecord.ObservedBody?)
    /// Framing the codec refuses (a bad chunk size): the message cannot be completed.
    case invalid
    /// The source closed before the body ended.
    case cut
    /// Response scrub: these secrets were found (and masked) in the bytes moved since the last
    /// report. Reported before the `moved`/`complete` that carries those bytes.
    case scrubbed([SecretFinding])
    /// Egress guard: a secret the hop's origin may not receive was found in the request body. The
    /// engine forwarded only the bytes before it and stopped pumping; the hop must be cut.
    /// `bytesSent`: whether any byte of the request (its head first) had left for the origin; when
    /// none had, nothing was injected anywhere.
    case blocked(SecretFinding, bytesSent: Bool)
}

/// A secret value (or a placeholder) found in traffic: by name and form, never by value.
public struct SecretFinding: Sendable, Equatable {
    public let secret: String
    public let encoding: SecretEncoding
    /// The match was a placeholder of `secret`, not its value.
    public let isPlaceholder: Bool

    public init(secret: String, encoding: SecretEncoding, isPlaceholder: Bool) {
        self.secret = secret
        self.encoding = encoding
        self.isPlaceholder = isPlaceholder
    }
}

/// A compiled set of secret values (and placeholders) to look for in a body, with the name of each.
/// Built once per set and shared by every exchange that needs it (compared by identity).
public final class SecretWatch: Sendable, Equatable {
    public let scanner: SecretScanner
    /// Indexed by `SecretPattern.secret`.
    public let secrets: [String]
    /// Indexed like `secrets`: the pattern is that secret's placeholder, not its value.
    public let placeholders: [Bool]
    /// How many trailing bytes of a body the scrub or the guard holds back with this watch: the
    /// configuration's (`SecretValueIndex.holdBack`, from the values' lengths only), never less
    /// than this scanner needs.
    public let holdBack: Int

    public init(scanner: SecretScanner, secrets: [String], placeholders: [Bool], holdBack: Int = 0) {
        precondition(secrets.count == placeholders.count)
        self.scanner = scanner
        self.secrets = secrets
        self.placeholders = placeholders
        self.holdBack = max(holdBack, scanner.longestPattern - 1)
    }

    public func finding(_ match: SecretMatch) -> SecretFinding {
        SecretFinding(
            secret: secrets[match.pattern.secret], encoding: match.pattern.encoding,
            isPlaceholder: placeholders[match.pattern.secret])
    }

    public static func == (lhs: SecretWatch, rhs: SecretWatch) -> Bool { lhs === rhs }
}

/// What the engine knows when a request head arrives.
public struct Arrival: Sendable {
    /// Monotonic microseconds.
    public var now: UInt64
    /// The scope context in force (a reload swaps it; an exchange keeps the one it started with).
    public var scope: ScopeContext
    /// Seconds since 1970, UTC: the time signatures are made at (the engine reads the clock; tables
    /// that sign nothing leave it 0).
    public var wallClock: Int64

    public init(now: UInt64, scope: ScopeContext, wallClock: Int64 = 0) {
        self.now = now
        self.scope = scope
        self.wallClock = wallClock
    }
}

/// A request body being read whole before its hop is planned (`collectRequestBody`).
public enum CollectedBody: Sendable, Equatable {
    /// More bytes arrived.
    case progressed
    case complete([UInt8])
    /// Larger than the limit: the engine stopped reading.
    case tooLarge
    /// Framing the codec refuses.
    case invalid
}

public enum ConnectionEvent: Sendable {
    /// The first bytes of a request head arrived (the head-timeout starts to matter).
    case headStarted
    case requestHead(RequestHead, headBytes: Int, Arrival)
    case requestHeadInvalid(HTTPParseError, Arrival)
    /// The client half-closed (EOF). The engine has handed over every complete head and as much of
    /// a body as it could; `bufferedBytes` were received but not taken yet (a body held back by
    /// backpressure, or an incomplete head). The engine reports again when a body it holds runs out.
    case clientInputClosed(bufferedBytes: Int)
    /// The client connection failed (reset, TLS error): nothing more can be written to it.
    case clientFailed
    /// The client's TLS handshake inside an intercepted CONNECT completed.
    case clientTLSEstablished
    /// The client chose HTTP/2 (ALPN `h2` in an intercepted tunnel, or the h2c preface on the plain
    /// listener) before sending any request: its streams are the engine's HTTP/2 connection's, each
    /// with a `StreamMachine`; this machine only waits for the connection to close.
    case switchedToHTTP2
    /// ... or failed, and why (the engine reads the TLS alert or error).
    case clientTLSFailed(ClientTLSFailure)
    /// `peer`: where the connection goes (nil from tables that do not care).
    case upstreamConnected(HopID, reused: Bool, peer: UpstreamPeer? = nil)
    case upstreamConnectFailed(HopID, ProxyError)
    case requestBody(HopID, BodyProgress)
    case collectedBody(CollectedBody)
    /// `clientPipelined`: the client has sent bytes after its request that are still unread (a
    /// pipelined request); it matters only for a 101, which would hand them to the origin.
    case responseHead(HopID, ResponseHead, clientPipelined: Bool = false)
    case responseHeadInvalid(HopID, reason: String)
    case responseBody(HopID, BodyProgress)
    /// The upstream hung up. `sawResponseBytes`: any byte of a response had arrived on it.
    case upstreamClosed(HopID, sawResponseBytes: Bool)
    case tunnelBytes(HopID, fromClient: UInt64, fromUpstream: UInt64)
    /// The WebSocket frame relay stopped: a value (or placeholder) the origin may not receive, or
    /// frames that are not RFC 6455. Close frames went to both sides.
    case webSocketStopped(HopID, WebSocketFrameFilter.Stop, sender: WebSocketSender)
    /// The scrub masked values in origin frames (each form once per WebSocket): the line names them.
    case webSocketScrubbed(HopID, [SecretFinding])
    case timerFired(TimerPurpose)
    /// The worker stops: idle connections close now, busy ones after their exchange.
    case drain
    /// The client connection is gone (after a close the machine asked for, or any other way).
    case connectionClosed
    /// The access token the machine asked for (`acquireToken`) is here, or could not be had.
    case tokenReady(secret: String, AccessToken)
    /// `reason`: typed; only its fixed code (`refused`, `rejected`, ...) is ever said, never what the
    /// endpoint answered.
    case tokenFailed(secret: String, provider: TokenProvider?, reason: TokenFailure.Reason)
}

public enum ClientClose: Sendable, Equatable {
    /// Write what is queued, then half-close and linger briefly before freeing.
    case afterFlush
    /// Free now (timeouts, aborts, client errors).
    case now
}

public enum ConnectionAction: Sendable, Equatable {
    case writeToClient([UInt8])
    /// After `200 Connection Established` to an intercepted CONNECT: terminate the client's TLS.
    case startClientTLS(Origin)
    /// Parse a request head already buffered (pipelining), if any.
    case readNextRequest
    case closeClient(ClientClose)
    /// Open (or, with `reusePooled`, take from the pool) a connection for the hop, to an address
    /// the hop's egress clearance admits (docs/egress.md).
    case connect(HopID, Origin, UpstreamTransport, reusePooled: Bool, egress: EgressClearance)
    case sendToUpstream(HopID, [UInt8])
    /// Read the client's request body whole (at most `limit` bytes) before any hop exists: the
    /// scope decision depends on it. Progress comes back as `collectedBody`.
    case collectRequestBody(BodyFraming, limit: Int)
    /// Stream the client's request body to the hop. `capture`: keep up to that many bytes for a
    /// replay; `observe`: keep the first bytes for the log.
    /// `guard`: the egress guard's watch for this hop (values its origin may not receive): only bytes
    /// known not to start one are forwarded; a complete one stops the pump (`blocked`).
    case pumpRequestBody(HopID, BodyFraming, capture: Int?, observe: Int?, guard: SecretWatch? = nil)
    /// Stream the hop's response body to the client, decoded from `inbound` and re-framed as `outbound`.
    /// `scrub`: values this exchange injected or substituted, masked with `*` (same length) in the
    /// body as it passes, found across any piece boundary (`scrubbed` reports them).
    case relayResponseBody(HopID, inbound: BodyFraming, outbound: BodyFraming, observe: Int?, scrub: SecretWatch? = nil)
    /// Move bytes both ways between the client and the hop (CONNECT, or an upgrade after 101).
    case splice(HopID)
    /// After a WebSocket 101: read frames both ways under this plan (guard and placeholders on the
    /// client's, scrub on the origin's), re-framed, instead of splicing.
    case relayWebSocket(HopID, WebSocketFramePlan)
    /// One side of a tunnel hung up: hand the other side what was sent, then close everything.
    case finishTunnel(HopID, closedSide: TunnelSide)
    /// Let go of the hop: with `reuse`, back to the pool (the engine still checks it is clean);
    /// otherwise closed. Its callbacks stop at once either way.
    case releaseUpstream(HopID, reuse: Bool)
    case armTimer(TimerPurpose, milliseconds: Int)
    case cancelTimer
    /// Get `secret`'s access token from the context's token source (`tokenReady`/`tokenFailed`
    /// come back, possibly at once when it is cached). The request waits; no loop blocks.
    case acquireToken(secret: String, from: ScopeContext)
    /// A 401 came back from an origin this token went to: the next request gets a new one.
    case markTokenStale(secret: String, AccessToken, from: ScopeContext)
    /// One access-log line (and its metrics). Boxed: the record is far larger than every other
    /// action, and would otherwise set the size of all of them.
    indirect case emit(ExchangeRecord)
}
