import Foundation
import HTTP1Codec
import ProxyCore
import ProxyEngine
import ScopeConfig
import ScopePolicy
import ScopeProxyApp

/// An in-process proxy on 127.0.0.1:0 with its own worker threads, stopped when the test ends.
public final class ProxyHarness: @unchecked Sendable {
    public let server: ProxyServer
    public let port: UInt16

    public init(threads: Int = 2, _ adjust: (inout EngineConfiguration) -> Void = { _ in }) throws {
        var configuration = EngineConfiguration(listen: ListenAddress(host: "127.0.0.1", port: 0), threads: threads)
        configuration.shutdownGraceMilliseconds = 2_000
        adjust(&configuration)
        server = ProxyServer(configuration: configuration)
        port = try server.start().port
    }

    /// A proxy running a YAML config (parsed by the real loader) with the given secret values.
    public convenience init(
        yaml: String, secrets: [String: String], threads: Int = 2,
        _ adjust: (inout EngineConfiguration) -> Void = { _ in }
    ) throws {
        let config = try ConfigLoader.parse(yaml, file: "test.yaml", home: "/nonexistent")
        let context = Runtime.scopeContext(
            config, secrets: StaticSecrets(secrets),
            placeholders: PlaceholderTable(config.placeholders, key: Self.placeholderKey))
        try self.init(threads: threads) { engine in
            engine.scope = ScopeContextHolder(context)
            adjust(&engine)
        }
    }

    /// The per-install key of in-process proxies (fixed: `Placeholder.text(secret:key:)` gives their placeholders).
    public static let placeholderKey = [UInt8](repeating: 42, count: 32)

    /// A scope context from YAML, for swapping into a running harness (reload tests).
    public static func context(yaml: String, secrets: [String: String]) throws -> ScopeContext {
        let config = try ConfigLoader.parse(yaml, file: "test.yaml", home: "/nonexistent")
        return Runtime.scopeContext(config, secrets: StaticSecrets(secrets))
    }

    public func connect() throws -> TestSocket { try TestSocket.connect(port: port) }

    /// Sends one request on a fresh connection and reads one response.
    public func exchange(_ request: String, method: String = "GET") throws -> TestResponse? {
        let socket = try connect()
        try socket.send(request)
        return try HTTPReader(socket).readResponse(requestMethod: method)
    }

    public func stop() { server.shutdown(graceMilliseconds: 500) }
}
