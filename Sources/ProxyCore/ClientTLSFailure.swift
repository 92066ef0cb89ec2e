/// Why a client's TLS handshake with the proxy failed, on either of the two places the proxy is a
/// TLS server to a client: the tunnel of an intercepted CONNECT, and the TLS client listener
/// (`tls.client_listen`). One enum for both, because one OpenSSL outcome is one failure whichever
/// listener saw it; the engine classifies OpenSSL's error queue into it in one function
/// (`ClientTLSFailure.classify` in ProxyEngine).
///
/// The raw values are user-visible codes: the access log's `reason` next to
/// `"error":"interception_failed"` (docs/errors.md), and the `client_tls_failed` diagnostics line and
/// the `scopeproxy_client_tls_failures_total{reason}` label (docs/https.md). Never rename one.
public enum ClientTLSFailure: String, Sendable, Equatable, CaseIterable {
    /// The client's certificate does not verify against any configured client CA (another issuer,
    /// expired, not for TLS clients). Only the client listener asks for a certificate.
    case clientCertificateRejected = "client_certificate_rejected"
    /// The client refused the certificate the local CA minted (TLS alert unknown_ca,
    /// bad_certificate or certificate_unknown). The first-hour trap: a client that does not trust
    /// the local CA.
    case clientRejectedCertificate = "client_rejected_certificate"
    /// The client spoke plain HTTP (or something else that is not TLS).
    case notTLS = "not_tls"
    /// No protocol version or cipher both sides support.
    case noCommonProtocol = "no_common_protocol"
    /// The client closed during the handshake without saying why (often also a trust failure).
    case closedDuringHandshake = "closed_during_handshake"
    /// The handshake did not complete within `client_header`.
    case handshakeTimeout = "handshake_timeout"
    /// The proxy could not make the certificate (the local CA is unusable).
    case certificateUnavailable = "certificate_unavailable"
    /// Any other TLS failure.
    case tlsError = "tls_error"

    /// Where the handshake failed: the hint says what to do there.
    public enum Place: Sendable, Equatable, CaseIterable {
        /// Inside an intercepted CONNECT tunnel.
        case interception
        /// On `tls.client_listen`, before the first HTTP byte.
        case clientListener
    }

    /// What the user should do, for a log line or the diagnostics line. Fixed text only.
    public func hint(at place: Place) -> String {
        switch (self, place) {
        case (.clientCertificateRejected, _):
            "the client's certificate does not verify against the CA of any configured tls_client client (detail says why): the connection is refused"
        case (.clientRejectedCertificate, .interception):
            "the client does not trust the scopeproxy CA: give it the certificate `scopeproxy ca` prints (see docs/https.md)"
        case (.clientRejectedCertificate, .clientListener):
            "the client does not trust the scopeproxy CA that signs this listener's certificate: give it the certificate `scopeproxy ca` prints (curl --proxy-cacert)"
        case (.notTLS, .interception): "the client sent plain HTTP inside the CONNECT tunnel, not TLS"
        case (.notTLS, .clientListener): "the client did not speak TLS to tls.client_listen: use an https:// proxy URL"
        case (.noCommonProtocol, _): "the client and the proxy share no TLS version or cipher (the proxy needs TLS 1.2 or later)"
        case (.closedDuringHandshake, .interception):
            "the client closed the connection during the TLS handshake (often: it does not trust the scopeproxy CA; `scopeproxy ca` prints it)"
        case (.closedDuringHandshake, .clientListener): "the client closed the connection during the TLS handshake"
        case (.handshakeTimeout, _): "the client did not complete the TLS handshake within timeouts.client_header"
        case (.certificateUnavailable, .interception): "the local CA could not issue a certificate for this host"
        case (.certificateUnavailable, .clientListener): "the local CA could not issue the listener's certificate"
        case (.tlsError, _): "the TLS handshake with the client failed"
        }
    }
}
