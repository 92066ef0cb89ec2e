// swift-tools-version:6.0
// scopeproxy: a credential-scoping forward proxy. Layers, bottom up:
//   C system libraries (libevent, OpenSSL, libyaml) -> pure Swift core (HTTP1Codec, later policy,
//   redaction, config) -> ProxyEngine (libevent I/O) -> the thin `scopeproxy` executable.
import PackageDescription

let package = Package(
    name: "scopeproxy",
    products: [
        .executable(name: "scopeproxy", targets: ["scopeproxy"])
    ],
    targets: [
        // C at the edge: one system-library target per C library, macros wrapped in each shim.h.
        .systemLibrary(name: "CLibevent", pkgConfig: "libevent", providers: [.apt(["libevent-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CYAML", pkgConfig: "yaml-0.1", providers: [.apt(["libyaml-dev"])]),
        // HTTP/2 framing, HPACK and flow control (decisions stay in Swift).
        .systemLibrary(name: "CNGHTTP2", pkgConfig: "libnghttp2", providers: [.apt(["libnghttp2-dev"])]),

        // POSIX helpers shared by the I/O layers: a pthread lock ThreadSanitizer can see
        // (Synchronization.Mutex it cannot, on Linux), small-file reads, private directories.
        .target(name: "PosixSupport"),
        // One kernel question in C (its structs live in linux/ headers Swift does not import): who
        // owns a given TCP socket (NETLINK_SOCK_DIAG), for `uid` clients.
        .target(name: "CSocketDiag"),
        // The secret scanner's vector prefilter (AVX2 byte shuffles, chosen at run time): Swift's
        // SIMD types have no byte shuffle.
        .target(name: "CScanPrefilter"),

        // Pure core: no sockets, no libevent. Each is testable alone.
        // The one JSON writer (log lines, error bodies, diagnostics, redacted summaries).
        .target(name: "JSONText"),
        .target(name: "HTTP1Codec"),
        // SHA-256, HMAC and random bytes over OpenSSL (placeholders, AWS SigV4).
        .target(name: "Digests", dependencies: ["COpenSSL"]),
        .target(name: "ScopePolicy", dependencies: ["HTTP1Codec", "Digests"]),
        // AWS Signature Version 4: canonical request, signing key, the fields to add (no clock).
        .target(name: "AWSSigV4", dependencies: ["Digests", "HTTP1Codec"]),
        // Secret values found in byte streams in all their encodings (one automaton per secret set),
        // for response scrubbing and the egress guard. The log tripwire takes its encodings from
        // here but keeps its own search.
        .target(name: "SecretScan", dependencies: ["HTTP1Codec", "CScanPrefilter"]),
        .target(name: "Redaction", dependencies: ["HTTP1Codec", "JSONText", "SecretScan"]),
        // The settings the data path runs on (timeouts, limits, routes, log, scrub and guard): what
        // ScopeConfig produces and ProxyCore (which re-exports them) and the engine consume.
        .target(name: "ProxySettings", dependencies: ["HTTP1Codec"]),
        .target(name: "ScopeConfig", dependencies: ["ProxySettings", "ScopePolicy", "HTTP1Codec", "CYAML", "PosixSupport"]),
        // Reads secret files and the environment (I/O, but no sockets); re-reads rotated files.
        .target(name: "SecretStore", dependencies: ["ScopePolicy", "PosixSupport"]),

        // The exchange core: request admission, hop planning, response direction and the connection
        // state machine (events in, actions out), plus the records they share.
        .target(
            name: "ProxyCore",
            dependencies: ["ProxySettings", "HTTP1Codec", "ScopePolicy", "JSONText", "PosixSupport", "SecretScan", "AWSSigV4", "Digests"]),

        // An exchange's record as text: the access log's JSON fields (one implementation for the log
        // line and the live view) and the live view's record (heads with secrets by name, rules, curl).
        .target(name: "RecordRendering", dependencies: ["ProxyCore", "Redaction", "SecretScan", "JSONText", "HTTP1Codec", "ScopePolicy"]),

        // The libevent engine: carries out what the core decides.
        .target(
            name: "ProxyEngine",
            dependencies: [
                "ProxyCore", "HTTP1Codec", "ScopePolicy", "Redaction", "SecretScan", "JSONText", "CLibevent", "COpenSSL", "CNGHTTP2", "CSocketDiag",
                "PosixSupport", "Digests", "RecordRendering",
            ]),

        // The composition root: config + secrets -> engine, the commands, reload. The executable
        // only hands it the command line.
        .target(
            name: "ScopeProxyApp",
            dependencies: [
                "HTTP1Codec", "ProxyEngine", "ProxyCore", "ScopeConfig", "SecretStore", "ScopePolicy", "Redaction", "Digests", "PosixSupport",
                "RecordRendering",
            ]),
        .executableTarget(name: "scopeproxy", dependencies: ["ScopeProxyApp"]),

        // Test fixtures: loopback origins and raw clients (blocking sockets on their own threads).
        .target(
            name: "TestSupport", dependencies: ["HTTP1Codec", "ProxyCore", "ProxyEngine", "ScopeProxyApp", "ScopeConfig", "COpenSSL"],
            path: "Tests/TestSupport"),
        .testTarget(name: "HTTP1CodecTests", dependencies: ["HTTP1Codec"]),
        .testTarget(name: "JSONTextTests", dependencies: ["JSONText"]),
        // The AWS SigV4 test suite's vectors (Vectors/) and botocore's signer (python3) as references.
        .testTarget(name: "AWSSigV4Tests", dependencies: ["AWSSigV4", "HTTP1Codec"], exclude: ["Vectors", "botocore_sign.py"]),
        .testTarget(name: "SecretStoreTests", dependencies: ["SecretStore", "ScopeConfig", "ScopePolicy", "PosixSupport"]),
        .testTarget(name: "SecretScanTests", dependencies: ["SecretScan", "HTTP1Codec", "CScanPrefilter"]),
        .testTarget(name: "RedactionTests", dependencies: ["Redaction", "HTTP1Codec"]),
        .testTarget(name: "ScopePolicyTests", dependencies: ["ScopePolicy", "HTTP1Codec"]),
        // The live view's record, rendered from tables of records (no sockets).
        .testTarget(
            name: "RecordRenderingTests",
            dependencies: ["RecordRendering", "ProxyCore", "Redaction", "SecretScan", "HTTP1Codec", "ScopePolicy", "JSONText"]),
        .testTarget(
            name: "ScopeConfigTests", dependencies: ["ProxyCore", "ScopeConfig", "ScopePolicy", "HTTP1Codec"],
            resources: [.copy("Fixtures")]),
        // The exchange core's state machine, driven by tables of events (no sockets).
        .testTarget(name: "ProxyCoreTests", dependencies: ["ProxyCore", "HTTP1Codec", "ScopePolicy", "ScopeConfig", "AWSSigV4"]),
        .testTarget(name: "ScopeProxyAppTests", dependencies: ["ScopeProxyApp", "ScopeConfig", "ScopePolicy", "HTTP1Codec", "RecordRendering"]),
        .testTarget(
            name: "ProxyEngineTests",
            dependencies: [
                "ProxyEngine", "ProxyCore", "HTTP1Codec", "SecretScan", "Redaction", "CLibevent", "COpenSSL", "TestSupport", "SecretStore",
                "ScopePolicy", "RecordRendering",
            ]),
        // Private-key signing and the JWTs of credential sources (GitHub App, RFC 7523), each
        // verified by pyjwt (Tests/Fixtures/jwt_verify.py), and the loopback fixtures that check them.
        .testTarget(
            name: "CredentialSigningTests", dependencies: ["Digests", "ProxyCore", "HTTP1Codec", "ScopePolicy", "TestSupport"]),
        // The command line through the built binary (and the pieces it is generated from).
        .testTarget(name: "CLITests", dependencies: ["ScopeProxyApp", "ScopeConfig", "ScopePolicy", "ProxyCore", "HTTP1Codec", "TestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
