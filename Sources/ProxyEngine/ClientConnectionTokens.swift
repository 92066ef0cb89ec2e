import ProxyCore

// Access tokens: what `acquireToken` and `markTokenStale` do, through the context's
// `AccessTokenSource` whatever kind it is. Changes when the token source protocol does.
extension ClientConnection {
    /// The token comes back as an event on this loop (at once when cached, else from the worker's
    /// mailbox once the one fetch in flight ends); a connection gone by then ignores it. Whatever
    /// kind of source the context holds, only `AccessTokenSource` is used.
    func acquireToken(_ secret: String, from scope: ScopeContext) {
        let requested = scope.tokens?.acquire(secret: secret, mailbox: worker.tokenMailbox) { [weak self] result in
            guard let self, !self.isClosed else { return }
            self.awaitedToken = nil
            // From the mailbox this is a loop callback of its own: it flushes what it wrote, as the
            // socket callbacks do (at once, inside `execute`, the running callback does).
            let fromMailbox = !self.dispatching
            switch result {
            case .success(let token): self.deliver(.tokenReady(secret: secret, token))
            case .failure(let failure): self.deliver(.tokenFailed(secret: secret, endpoint: failure.endpoint, reason: failure.reason))
            }
            if fromMailbox, !self.isClosed { self.flushOutputs() }
        }
        switch requested {
        case .answered:
            break
        case .waiting(let waiterID):
            if let tokens = scope.tokens { awaitedToken = (tokens, secret, waiterID) }
        case nil:
            // The context's source does not know the secret (a reload removed it): fail closed.
            deliver(.tokenFailed(secret: secret, endpoint: scope.tokens?.endpoint(of: secret), reason: .noTokenSource))
        }
    }

    /// A 401 came back from an origin `token` went to: the source drops it if it is still current.
    func markTokenStale(_ secret: String, _ token: AccessToken, from scope: ScopeContext) {
        scope.tokens?.markStale(secret: secret, token: token)
    }

    /// The connection closes while its request waits for a token: the fetch drops its answer (and
    /// this connection, which the answer's closure holds).
    func withdrawFromTokenWait() {
        guard let (tokens, secret, waiterID) = awaitedToken else { return }
        awaitedToken = nil
        tokens.withdraw(secret: secret, waiterID: waiterID)
    }
}
