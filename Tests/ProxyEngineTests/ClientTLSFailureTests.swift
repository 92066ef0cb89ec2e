import COpenSSL
import Foundation
import HTTP1Codec
import ProxyCore
import Testing

@testable import ProxyEngine

#if canImport(Glibc)
    import Glibc
#endif

private let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

/// An error code as OpenSSL 3 packs it for the SSL library (ERR_PACK is a macro Swift cannot see).
private func sslError(_ reason: Int32) -> UInt { (UInt(ERR_LIB_SSL) << 23) | UInt(reason) }
/// A system error (errno) as OpenSSL 3 queues it: ERR_SYSTEM_FLAG set.
private func systemError(_ code: Int32) -> UInt { (UInt(UInt32(Int32.max) + 1)) | UInt(code) }

@Suite("Client TLS failures: one classification for the interception path and the TLS client listener")
struct ClientTLSFailureTests {
    struct Row: Sendable, CustomTestStringConvertible {
        let name: String
        let queued: [UInt]
        let failure: ClientTLSFailure
        var testDescription: String { name }
    }

    /// What OpenSSL can queue for a failed server-side handshake, and the failure it is.
    static let rows: [Row] = [
        Row(
            name: "alert unknown_ca (the client does not trust the local CA)", queued: [sslError(SSL_R_TLSV1_ALERT_UNKNOWN_CA)],
            failure: .clientRejectedCertificate),
        Row(name: "alert bad_certificate", queued: [sslError(SSL_R_SSLV3_ALERT_BAD_CERTIFICATE)], failure: .clientRejectedCertificate),
        Row(name: "alert certificate_unknown", queued: [sslError(SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN)], failure: .clientRejectedCertificate),
        Row(name: "alert access_denied", queued: [sslError(SSL_R_TLSV1_ALERT_ACCESS_DENIED)], failure: .clientRejectedCertificate),
        Row(
            name: "the client's certificate does not verify", queued: [sslError(SSL_R_CERTIFICATE_VERIFY_FAILED)], failure: .clientCertificateRejected
        ),
        Row(name: "plain HTTP where TLS was due", queued: [sslError(SSL_R_HTTP_REQUEST)], failure: .notTLS),
        Row(name: "a proxy request where TLS was due", queued: [sslError(SSL_R_HTTPS_PROXY_REQUEST)], failure: .notTLS),
        Row(name: "bytes that are no TLS record", queued: [sslError(SSL_R_WRONG_VERSION_NUMBER)], failure: .notTLS),
        Row(name: "no shared cipher", queued: [sslError(SSL_R_NO_SHARED_CIPHER)], failure: .noCommonProtocol),
        Row(name: "a TLS version below 1.2", queued: [sslError(SSL_R_UNSUPPORTED_PROTOCOL)], failure: .noCommonProtocol),
        Row(name: "alert protocol_version", queued: [sslError(SSL_R_TLSV1_ALERT_PROTOCOL_VERSION)], failure: .noCommonProtocol),
        Row(name: "nothing queued: the client hung up", queued: [], failure: .closedDuringHandshake),
        Row(name: "a reset (system error)", queued: [systemError(ECONNRESET)], failure: .closedDuringHandshake),
        Row(name: "SSL_ERROR_SYSCALL from libevent", queued: [UInt(SSL_ERROR_SYSCALL)], failure: .closedDuringHandshake),
        Row(name: "EOF inside a record", queued: [sslError(SSL_R_UNEXPECTED_EOF_WHILE_READING)], failure: .closedDuringHandshake),
        Row(name: "any other TLS error", queued: [sslError(SSL_R_BAD_PACKET_LENGTH)], failure: .tlsError),
        Row(name: "the first error decides", queued: [sslError(SSL_R_HTTP_REQUEST), sslError(SSL_R_TLSV1_ALERT_UNKNOWN_CA)], failure: .notTLS),
    ]

    /// Failures decided outside OpenSSL's queue: a timer, and the local CA before any handshake.
    static let decidedElsewhere: Set<ClientTLSFailure> = [.handshakeTimeout, .certificateUnavailable]

    @Test(
        "each OpenSSL outcome is one failure, and the intercepted tunnel's log reason and the listener's metric label say the same code",
        arguments: rows)
    func sameOutcomeSameFailure(_ row: Row) throws {
        let classified = ClientTLSFailure.classify(openSSLErrors: row.queued)
        #expect(classified.failure == row.failure)
        // The interception path: the CONNECT's log line carries the failure as `reason`.
        let interception = ExchangeFailure.proxy(.interceptionFailed(try Origin.parse("https://a.example"), classified.failure))
        #expect(interception.reason == row.failure.rawValue)
        // The listener path: `client_tls_failed` and the metric label carry the same raw value.
        let metrics = Metrics()
        metrics.increment(.clientTLSFailure(classified.failure))
        #expect(metrics.value(.clientTLSFailures, [("reason", row.failure.rawValue)]) == 1)
    }

    @Test("every failure is classified from OpenSSL or decided elsewhere, has a hint for both places, and is documented for both")
    func everyFailureHasItsCode() throws {
        let classified = Set(Self.rows.map(\.failure))
        let errors = try String(contentsOf: repositoryRoot.appendingPathComponent("docs/errors.md"), encoding: .utf8)
        let https = try String(contentsOf: repositoryRoot.appendingPathComponent("docs/https.md"), encoding: .utf8)
        var codes: Set<String> = []
        for failure in ClientTLSFailure.allCases {
            #expect(classified.contains(failure) != Self.decidedElsewhere.contains(failure), "\(failure)")
            #expect(codes.insert(failure.rawValue).inserted, "\(failure.rawValue) is one code")
            #expect(failure.rawValue.allSatisfy { $0.isLowercase || $0 == "_" }, "\(failure.rawValue)")
            for place in ClientTLSFailure.Place.allCases { #expect(!failure.hint(at: place).isEmpty) }
            #expect(errors.contains("| `\(failure.rawValue)` |"), "docs/errors.md lists \(failure.rawValue)")
            #expect(https.contains("| `\(failure.rawValue)` |"), "docs/https.md lists \(failure.rawValue)")
        }
    }

    @Test("an unclassified TLS error carries OpenSSL's reason as its detail; a classified one needs none")
    func detail() {
        let other = ClientTLSFailure.classify(openSSLErrors: [sslError(SSL_R_BAD_PACKET_LENGTH)])
        #expect(other.detail?.isEmpty == false)
        #expect(ClientTLSFailure.classify(openSSLErrors: [sslError(SSL_R_HTTP_REQUEST)]).detail == nil)
    }
}
