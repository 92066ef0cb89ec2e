import HTTP1Codec

/// What the engine and the tests may ask a connection machine between events. Read-only: only
/// events change the machine.
extension ConnectionMachine {
    /// The state by name, with the exchange's phase spelled out (for walks and tests).
    public enum Phase: Sendable, Equatable {
        case awaitingHead(HeadWait)
        case handshaking
        case collecting
        case awaitingToken
        case exchange
        case tunnel
        case multiplexed
        case closing
        case closed
    }

    /// Whether the engine should parse a response head from this hop now. False once the hop's
    /// final head was handled: its remaining bytes are never parsed for this client.
    @inlinable
    public func expectsResponseHead(from hop: HopID) -> Bool {
        guard case .exchange(let exchange) = state else { return false }
        return exchange.expectsResponseHead(from: hop)
    }

    /// The current hop asks its origin for an HTTP/1.1 upgrade (the engine then speaks HTTP/1.1 to it).
    public var currentHopIsUpgrade: Bool {
        guard case .exchange(let exchange) = state else { return false }
        return exchange.currentHopIsUpgrade
    }

    /// The hop whose bytes may currently move (body relay or splice), if any.
    public var currentHop: HopID? {
        switch state {
        case .exchange(let exchange): exchange.currentHop
        case .tunnel(let tunnel): tunnel.hopID
        default: nil
        }
    }

    public var phase: Phase {
        switch state {
        case .awaitingHead(let wait): .awaitingHead(wait)
        case .handshaking: .handshaking
        case .exchange(let exchange):
            switch exchange.phase {
            case .collecting: .collecting
            case .awaitingToken: .awaitingToken
            case .hop, .done: .exchange
            }
        case .tunnel: .tunnel
        case .multiplexed: .multiplexed
        case .closing: .closing
        case .closed: .closed
        }
    }

    /// A request body is being read before its hop is planned (`collectRequestBody`).
    public var isCollectingBody: Bool { phase == .collecting }

    /// The client's TLS handshake inside an intercepted CONNECT is under way.
    public var isHandshaking: Bool { phase == .handshaking }

    /// The secret whose access token the current request waits for, if it waits.
    public var awaitedToken: String? {
        if case .exchange(let exchange) = state { return exchange.awaitedToken }
        return nil
    }

    public var isAwaitingHead: Bool {
        if case .awaitingHead = state { return true }
        return false
    }
}
