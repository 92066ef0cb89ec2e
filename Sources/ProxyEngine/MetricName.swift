import ProxyCore

/// Every metric /metrics exposes, with its type, help text and label names: the one list. The
/// `# HELP` and `# TYPE` lines are rendered from it, docs/logging.md's metrics table is checked
/// against it (`MetricTableTests`), and samples name their metric through it, so a name is never
/// spelt twice. Adding a metric is adding a case here (the switches below make the rest follow).
public enum MetricName: String, CaseIterable, Sendable {
    case requests = "scopeproxy_requests_total"
    case requestsByProtocol = "scopeproxy_requests_by_protocol_total"
    case h2ConnectionsEnded = "scopeproxy_h2_connections_ended_total"
    case rateLimited = "scopeproxy_rate_limited_total"
    case clientsRefused = "scopeproxy_clients_refused_total"
    case loopRefused = "scopeproxy_loop_refused_total"
    case injected = "scopeproxy_injected_total"
    case stripped = "scopeproxy_stripped_total"
    case redirects = "scopeproxy_redirects_total"
    case upstreamErrors = "scopeproxy_upstream_errors_total"
    case bytesIn = "scopeproxy_bytes_in_total"
    case bytesOut = "scopeproxy_bytes_out_total"
    case reloads = "scopeproxy_reloads_total"
    case logTripwireHits = "scopeproxy_log_tripwire_hits_total"
    case scrubbed = "scopeproxy_scrubbed_total"
    case signed = "scopeproxy_signed_total"
    case tokenFetches = "scopeproxy_token_fetches_total"
    case refreshTokenRotations = "scopeproxy_refresh_token_rotations_total"
    case egressBlocked = "scopeproxy_egress_blocked_total"
    case egressDenied = "scopeproxy_egress_denied_total"
    case logLinesDropped = "scopeproxy_log_lines_dropped_total"
    case logWriteErrors = "scopeproxy_log_write_errors_total"
    case connectionLimitWaits = "scopeproxy_connection_limit_waits_total"
    case impossibleEvents = "scopeproxy_impossible_events_total"
    case clientTLSFailures = "scopeproxy_client_tls_failures_total"
    case viewViewersDropped = "scopeproxy_view_viewers_dropped_total"
    case viewRecordsPublished = "scopeproxy_view_records_published_total"
    case clientConnections = "scopeproxy_client_connections"
    case upstreamConnections = "scopeproxy_upstream_connections"
    case h2BufferedBytes = "scopeproxy_h2_buffered_bytes"
    case h2BufferedBytesPeak = "scopeproxy_h2_buffered_bytes_peak"
    case h2UpstreamBufferedBytes = "scopeproxy_h2_upstream_buffered_bytes"
    case h2UpstreamBufferedBytesPeak = "scopeproxy_h2_upstream_buffered_bytes_peak"
    case viewViewers = "scopeproxy_view_viewers"

    public enum Kind: String, Sendable {
        case counter, gauge
    }

    public var kind: Kind {
        switch self {
        case .clientConnections, .upstreamConnections, .h2BufferedBytes, .h2BufferedBytesPeak, .h2UpstreamBufferedBytes,
            .h2UpstreamBufferedBytesPeak, .viewViewers:
            .gauge
        default: .counter
        }
    }

    /// The label names, in the order a sample gives their values. Each is a bounded set the proxy
    /// or the configuration fixes (see `Metrics`).
    public var labels: [String] {
        switch self {
        case .requests: ["status_class", "scope", "client"]
        case .requestsByProtocol: ["proto"]
        case .h2ConnectionsEnded: ["reason"]
        case .rateLimited: ["client"]
        case .clientsRefused, .clientTLSFailures: ["reason"]
        case .loopRefused, .upstreamErrors, .signed: ["kind"]
        case .injected, .stripped: ["header"]
        case .redirects: ["decision"]
        case .reloads: ["result"]
        case .scrubbed: ["secret"]
        case .tokenFetches, .refreshTokenRotations: ["secret", "result"]
        case .egressBlocked: ["secret", "kind"]
        case .egressDenied: ["rule", "client", "decision"]
        case .bytesIn, .bytesOut, .logTripwireHits, .logLinesDropped, .logWriteErrors, .connectionLimitWaits, .impossibleEvents,
            .clientConnections, .upstreamConnections, .h2BufferedBytes, .h2BufferedBytesPeak, .h2UpstreamBufferedBytes,
            .h2UpstreamBufferedBytesPeak, .viewViewers, .viewViewersDropped, .viewRecordsPublished:
            []
        }
    }

    /// The `# HELP` text.
    public var help: String {
        switch self {
        case .requests: "Exchanges by response status class, scope and client (configured names, or none)."
        case .requestsByProtocol:
            "Exchanges by what the client spoke (http/1.0, http/1.1, h2, h2c, websocket; none when no head was read)."
        case .h2ConnectionsEnded:
            "HTTP/2 client connections the proxy ended early (GOAWAY), by reason: a flood (rapid_reset, continuation_flood, ...) or a protocol error."
        case .rateLimited: "Requests refused with 429 because their client was over its rate, by client."
        case .clientsRefused: "Requests refused with 407, by reason."
        case .loopRefused:
            "Requests refused with 403 loop_refused: a destination that is the proxy's own listener, or a connection the proxy itself opened (own_connection)."
        case .injected: "Credential headers injected, by header name."
        case .stripped: "Sensitive headers stripped, by header name."
        case .redirects: "Redirect decisions."
        case .upstreamErrors: "Exchanges that failed upstream, by kind."
        case .bytesIn: "Bytes received from clients."
        case .bytesOut: "Bytes sent to clients."
        case .reloads: "Config reloads by result."
        case .logTripwireHits: "Secret values found and scrubbed from log lines (should stay 0)."
        case .scrubbed: "Injected or substituted values masked in responses (every match), by secret name."
        case .signed: "Requests the proxy signed, by kind of signature (aws_sigv4)."
        case .tokenFetches: "OAuth2 token requests, by secret and result (ok, or why it failed)."
        case .refreshTokenRotations:
            "Rotated OAuth2 refresh tokens, by secret and what became of them (persisted, memory_only, write_failed)."
        case .egressBlocked:
            "Requests stopped because they carried a secret's value or placeholder toward an origin outside its scopes, by secret name and kind (value or placeholder)."
        case .egressDenied:
            "Destinations the egress policy denied (decision deny: 403 egress_denied) or would have denied (report_deny, mode: report), by rule (default deny, deny_ips: NAME or CIDR) and client."
        case .logLinesDropped: "Access log lines dropped because the writer fell behind."
        case .logWriteErrors: "Access log writes that failed (disk full, closed pipe); their lines are lost."
        case .connectionLimitWaits: "Accepted connections that waited because limits.max_connections was reached."
        case .impossibleEvents:
            "Events the connection state machine received that a correct engine cannot send (should stay 0; a debug build stops on the first)."
        case .clientTLSFailures: "Connections to tls.client_listen closed at the TLS handshake, by reason."
        case .clientConnections: "Open client connections."
        case .upstreamConnections: "Open upstream connections (in use and pooled)."
        case .h2BufferedBytes:
            "Bytes held now for HTTP/2 client connections (their socket buffers, their streams' request and response buffers and those streams' upstream buffers), all together."
        case .h2BufferedBytesPeak: "The most bytes one HTTP/2 client connection has held at once since the start."
        case .h2UpstreamBufferedBytes:
            "Bytes held now for HTTP/2 connections to origins (their socket buffers and their streams' request and response buffers), all together."
        case .h2UpstreamBufferedBytesPeak: "The most bytes one HTTP/2 connection to an origin has held at once since the start."
        case .viewViewers: "Live view viewers connected to /view/events now."
        case .viewViewersDropped:
            "Live view viewers closed for falling more than 1 MiB behind the records (or behind the admin thread)."
        case .viewRecordsPublished: "Exchange records published to the live view's feed."
        }
    }
}

/// One event a counter counts, outside the per-exchange counters (`Metrics.count`): each case fixes
/// its metric and the values of exactly that metric's labels, so a counter cannot be given a label
/// it does not declare (and `MetricTableTests` checks every case against the table).
public enum CounterEvent: Sendable {
    /// A token request ended: the `result` label is `ok`, or the failure's code.
    case tokenFetch(secret: String, failure: TokenFailure.Reason?)
    case refreshTokenRotation(secret: String, RefreshTokenRotationResult)
    case reload(ok: Bool)
    case clientTLSFailure(ClientTLSFailure)
    case logTripwireHits
    case logLineDropped
    case logWriteError
    case connectionLimitWait
    /// Events a connection's machine counted as impossible (`ImpossibleEvent`), added when it closes.
    case impossibleEvents
    /// An HTTP/2 client connection ended early: a flood's code (`H2Violation.code`) or the session
    /// failure's (`h2_flood`, `h2_bad_preface`, ...), a fixed set.
    case h2ConnectionEnded(reason: String)

    public enum RefreshTokenRotationResult: String, Sendable, CaseIterable {
        case persisted
        case memoryOnly = "memory_only"
        case writeFailed = "write_failed"
    }

    public var metric: MetricName {
        switch self {
        case .tokenFetch: .tokenFetches
        case .refreshTokenRotation: .refreshTokenRotations
        case .reload: .reloads
        case .clientTLSFailure: .clientTLSFailures
        case .logTripwireHits: .logTripwireHits
        case .logLineDropped: .logLinesDropped
        case .logWriteError: .logWriteErrors
        case .connectionLimitWait: .connectionLimitWaits
        case .impossibleEvents: .impossibleEvents
        case .h2ConnectionEnded: .h2ConnectionsEnded
        }
    }

    /// The label values, in the order of `metric.labels`.
    var labelValues: [String] {
        switch self {
        case .tokenFetch(let secret, let failure): [secret, failure?.code ?? "ok"]
        case .refreshTokenRotation(let secret, let result): [secret, result.rawValue]
        case .reload(let ok): [ok ? "ok" : "failed"]
        case .clientTLSFailure(let failure): [failure.rawValue]
        case .h2ConnectionEnded(let reason): [reason]
        case .logTripwireHits, .logLineDropped, .logWriteError, .connectionLimitWait, .impossibleEvents: []
        }
    }
}
