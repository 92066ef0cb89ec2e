import CLibevent
import COpenSSL
import ProxyCore

extension ClientTLSFailure {
    /// A failed server-side handshake as OpenSSL reported it. `detail`: what the failure alone does
    /// not say (why a client certificate did not verify, OpenSSL's reason for `tls_error`); library
    /// text, never bytes from the peer.
    struct Classified: Equatable {
        var failure: ClientTLSFailure
        var detail: String?
    }

    /// The one classification of a failed handshake, for both places the proxy is a TLS server to a
    /// client (an intercepted CONNECT and the TLS client listener). Drains the bufferevent's queue
    /// of OpenSSL errors.
    static func classify(_ bev: OpaquePointer) -> Classified {
        var codes: [UInt] = []
        while case let code = bufferevent_get_openssl_error(bev), code != 0 { codes.append(code) }
        var classified = classify(openSSLErrors: codes)
        if classified.failure == .clientCertificateRejected {
            let result = bufferevent_openssl_get_ssl(bev).map { SSL_get_verify_result($0) } ?? Int(X509_V_OK)
            classified.detail = result == Int(X509_V_OK) ? nil : TLSContexts.verifyReason(result)
        }
        return classified
    }

    /// The codes libevent queued for the handshake, oldest first: the first one decides. None at all
    /// is the peer hanging up (or resetting) mid-handshake without an alert.
    static func classify(openSSLErrors codes: [UInt]) -> Classified {
        guard let code = codes.first else { return Classified(failure: .closedDuringHandshake) }
        // A system error (a reset) is the peer hanging up, not a TLS failure. libevent queues
        // SSL_get_error's own result (SSL_ERROR_SYSCALL) when the socket failed.
        if ERR_GET_LIB(code) == ERR_LIB_SYS || code == UInt(SSL_ERROR_SYSCALL) || code == UInt(SSL_ERROR_ZERO_RETURN) {
            return Classified(failure: .closedDuringHandshake)
        }
        switch Int32(ERR_GET_REASON(code)) {
        // The client sent an alert about our certificate.
        case SSL_R_TLSV1_ALERT_UNKNOWN_CA, SSL_R_SSLV3_ALERT_BAD_CERTIFICATE, SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN,
            SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE, SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED, SSL_R_TLSV1_ALERT_ACCESS_DENIED:
            return Classified(failure: .clientRejectedCertificate)
        // We asked for a certificate and the one sent did not verify (only the client listener asks).
        case SSL_R_CERTIFICATE_VERIFY_FAILED, SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
            return Classified(failure: .clientCertificateRejected)
        case SSL_R_HTTP_REQUEST, SSL_R_HTTPS_PROXY_REQUEST, SSL_R_WRONG_VERSION_NUMBER:
            return Classified(failure: .notTLS)
        case SSL_R_UNEXPECTED_EOF_WHILE_READING:
            return Classified(failure: .closedDuringHandshake)  // OpenSSL 3: the peer hung up inside a record
        case SSL_R_UNSUPPORTED_PROTOCOL, SSL_R_NO_SHARED_CIPHER, SSL_R_TLSV1_ALERT_PROTOCOL_VERSION, SSL_R_VERSION_TOO_LOW,
            SSL_R_NO_PROTOCOLS_AVAILABLE, SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
            return Classified(failure: .noCommonProtocol)
        default:
            let reason = ERR_reason_error_string(code).map { String(cString: $0) } ?? "error \(ERR_GET_REASON(code))"
            return Classified(failure: .tlsError, detail: reason)
        }
    }
}
