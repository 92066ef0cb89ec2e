import Foundation

/// One accepted connection at a fixture origin, handed to the origin's script.
public final class FixtureConnection: @unchecked Sendable {
    public let socket: TestSocket
    public let reader: HTTPReader
    private unowned let origin: FixtureOrigin

    init(socket: TestSocket, origin: FixtureOrigin) {
        self.socket = socket
        reader = HTTPReader(socket)
        self.origin = origin
    }

    /// Reads one request and records it at the origin (nil when the proxy closed the connection).
    public func readRequest() -> TestRequest? {
        guard let request = try? reader.readRequest() else { return nil }
        origin.record(request)
        return request
    }

    public func send(_ text: String) { try? socket.send(text) }
    public func send(_ bytes: [UInt8]) { try? socket.send(bytes) }

    public func respond(status: Int = 200, headers: [(String, String)] = [], body: String) {
        respond(status: status, headers: headers, body: Array(body.utf8))
    }

    public func respond(status: Int = 200, headers: [(String, String)] = [], body: [UInt8]) {
        var head = "HTTP/1.1 \(status) Fixture\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !headers.contains(where: { $0.0.lowercased() == "content-length" || $0.0.lowercased() == "transfer-encoding" }) {
            head += "Content-Length: \(body.count)\r\n"
        }
        send(Array((head + "\r\n").utf8) + body)
    }
}

/// A scripted HTTP origin on loopback (port 0), one thread per connection. It records every
/// request it received, so tests can assert exactly what arrived, header by header.
public final class FixtureOrigin: @unchecked Sendable {
    public typealias Script = @Sendable (FixtureConnection) -> Void

    public let host: String
    public let port: UInt16
    private let listener: TestListener
    private let script: Script
    private let lock = NSLock()
    private var received: [TestRequest] = []
    private var connections: [TestSocket] = []
    private var acceptedCount = 0

    /// `port`: 0 for a free one; a given port lets two origins on different loopback addresses
    /// share one (a name resolving to either, as in the DNS-rebinding tests).
    public init(host: String = "127.0.0.1", port: UInt16 = 0, script: @escaping Script = FixtureOrigin.echo) throws {
        listener = try TestListener(host: host, port: port)
        self.host = host
        self.port = listener.port
        self.script = script
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    deinit { stop() }

    /// `http://127.0.0.1:PORT`
    public var url: String { "http://\(host):\(port)" }
    public var authority: String { "\(host):\(port)" }

    public var requests: [TestRequest] { lock.withLock { received } }
    public var acceptedConnections: Int { lock.withLock { acceptedCount } }

    func record(_ request: TestRequest) { lock.withLock { received.append(request) } }

    private func acceptLoop() {
        while let socket = listener.accept() {
            lock.withLock {
                acceptedCount += 1
                connections.append(socket)
            }
            let connection = FixtureConnection(socket: socket, origin: self)
            Thread.detachNewThread { [script] in
                script(connection)
                connection.socket.close()
            }
        }
    }

    public func stop() {
        listener.close()
        for socket in lock.withLock({ connections }) { socket.shutdownBoth() }
    }

    /// Answers every request with 200 and a body naming what it got: path, body length, and the
    /// request's X-Test-Id so concurrent tests can check they got their own answer.
    public static let echo: Script = { connection in
        while let request = connection.readRequest() {
            let id = request.header("x-test-id") ?? ""
            connection.respond(
                headers: [("Content-Type", "text/plain"), ("X-Echo-Id", id)],
                body: "target=\(request.target) id=\(id) body=\(request.body.count)")
            if request.header("connection")?.lowercased() == "close" { return }
        }
    }
}

/// A TCP echo server (for CONNECT tunnels): every byte received is sent back.
public final class EchoServer: @unchecked Sendable {
    public let port: UInt16
    private let listener: TestListener

    public init() throws {
        listener = try TestListener()
        port = listener.port
        Thread.detachNewThread { [listener] in
            while let socket = listener.accept() {
                Thread.detachNewThread {
                    while let chunk = try? socket.receive(), !chunk.isEmpty { try? socket.send(chunk) }
                    socket.close()
                }
            }
        }
    }

    deinit { listener.close() }
}
