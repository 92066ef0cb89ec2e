import Foundation
import TestSupport
import Testing

/// Helpers for the egress suites (EgressEngineTests, EgressAttackTests, EgressDNSTests): the binary
/// under its own config, canary listeners that count accepted connections, and a private view of
/// /etc/hosts and /etc/resolv.conf for names (`unshare -m`, root only).
enum Egress {
    /// A listener on `host` that counts accepts and answers every request with 200 `reached HOST`:
    /// a denied destination must never see even an accepted connection. `closing`: one request per
    /// connection (`Connection: close`), so the proxy pools nothing and resolves the name again.
    static func canary(_ host: String, port: UInt16 = 0, closing: Bool = false) throws -> FixtureOrigin {
        try FixtureOrigin(host: host, port: port) { connection in
            while let request = connection.readRequest() {
                let close: [(String, String)] = closing ? [("Connection", "close")] : []
                connection.respond(headers: [("Content-Type", "text/plain")] + close, body: "reached \(host) \(request.target)")
                if closing { return }
            }
        }
    }

    /// Canaries on `hosts` sharing one port (a name that resolves to any of them, one port).
    static func canaries(_ hosts: [String], closing: Bool = false) throws -> [FixtureOrigin] {
        var attempt = 0
        while true {
            attempt += 1
            let first = try canary(hosts[0], closing: closing)
            do {
                return try [first] + hosts.dropFirst().map { try canary($0, port: first.port, closing: closing) }
            } catch  where attempt < 5 {
                first.stop()  // that port is taken on another address: another free one
            }
        }
    }

    /// Why the binary cannot get a private /etc/hosts here (nil: it can).
    static var namespaceUnavailable: String? {
        if getuid() != 0 { return "not root (a private /etc/hosts needs unshare -m and mount --bind)" }
        if !FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare") { return "no /usr/bin/unshare" }
        return nil
    }

    /// A launcher for `ProxyProcess`: the proxy in a mount namespace of its own where `/etc/hosts`
    /// (and, when given, `/etc/resolv.conf`) are the files written here. The network is the
    /// machine's: loopback listeners of the test are reachable.
    static func launcher(_ scratch: ScratchDirectory, hosts: [(String, String)], resolvConf: String? = nil) -> [String] {
        let hostsPath = scratch.write("hosts", hosts.map { "\($0.1) \($0.0)" }.joined(separator: "\n") + "\n")
        var mounts = "mount --bind \(hostsPath) /etc/hosts"
        if let resolvConf { mounts += " && mount --bind \(scratch.write("resolv.conf", resolvConf)) /etc/resolv.conf" }
        return ["/usr/bin/unshare", "-m", "/bin/sh", "-c", mounts + " && exec \"$0\" \"$@\""]
    }

    /// The binary on `yaml` (its log path given), JSON access log.
    static func proxy(
        environment: [String: String] = [:], launcher: [String] = [], threads: Int = 2, _ yaml: @escaping (_ logPath: String) -> String
    ) throws -> ConfiguredProxy {
        try ConfiguredProxy(arguments: ["--threads", "\(threads)"], environment: environment, launcher: launcher) { log in
            "log: { output: \(log) }\n" + yaml(log)
        }
    }

    /// One request on a fresh connection, read leniently (nil: the proxy closed without answering).
    static func send(_ port: UInt16, _ text: String) throws -> LenientResponse? {
        let socket = try TestSocket.connect(port: port)
        defer { socket.close() }
        try socket.send(text)
        return LenientResponse.read(HTTPReader(socket))
    }

    /// `GET url` through the proxy, Host from the URL's authority unless given.
    static func get(_ port: UInt16, _ url: String, host: String? = nil, _ headers: [(String, String)] = []) throws -> LenientResponse? {
        let authority = host ?? authority(of: url)
        return try send(port, Wire.request(url, host: authority, headers))
    }

    static func authority(of url: String) -> String {
        let rest = url.components(separatedBy: "://").last ?? url
        return String(rest.prefix { $0 != "/" })
    }

    static func json(_ response: LenientResponse?) -> [String: Any] {
        guard let body = response?.body else { return [:] }
        return (try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any]) ?? [:]
    }

    /// The access log's JSON lines once there are `count`.
    static func lines(_ proxy: ConfiguredProxy, _ count: Int) -> [[String: Any]] { Wire.jsonLogLines(proxy, waitingFor: count) }

    /// SIGHUP after writing `yaml` (admin line kept) and wait for the `reloaded` event.
    static func reload(_ proxy: ConfiguredProxy, _ yaml: String, reloads: Int) -> Bool {
        let text = "admin: \"127.0.0.1:\(proxy.adminPort)\"\nlog: { output: \(proxy.logPath) }\n" + yaml
        guard (try? text.write(toFile: proxy.configPath, atomically: true, encoding: .utf8)) != nil else { return false }
        proxy.process.signal(SIGHUP)
        for _ in 0..<100 {
            if proxy.process.standardError.components(separatedBy: #""event":"reloaded""#).count - 1 >= reloads { return true }
            usleep(50_000)
        }
        return false
    }
}

/// Tests/Fixtures/rebinding_dns.py as a child process on 127.0.0.153, port 0: each A query for a
/// listed name gets the next address of its list (TTL 0). `answers` is what it answered, in order.
final class RebindingDNS: @unchecked Sendable {
    let port: UInt16
    private let process = Process()
    private let lock = NSLock()
    private var lines: [String] = []

    init(_ names: [String: [String]], scratch: ScratchDirectory) throws {
        let data = try JSONSerialization.data(withJSONObject: ["listen": "127.0.0.153", "names": names])
        let plan = scratch.write("dns.json", String(decoding: data, as: UTF8.self))
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/rebinding_dns.py").path
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script, plan]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let handle = output.fileHandleForReading
        var buffered = ""
        var found: UInt16?
        while found == nil {
            let chunk = handle.availableData
            if chunk.isEmpty { break }
            buffered += String(decoding: chunk, as: UTF8.self)
            found = buffered.split(separator: "\n").first.flatMap { $0.hasPrefix("port ") ? UInt16($0.dropFirst(5)) : nil }
        }
        guard let found else {
            process.terminate()
            throw FixtureDidNotStart(output: buffered)
        }
        port = found
        Thread.detachNewThread { [self] in
            while case let chunk = handle.availableData, !chunk.isEmpty {
                lock.withLock { lines += String(decoding: chunk, as: UTF8.self).split(separator: "\n").map(String.init) }
            }
        }
    }

    /// `A NAME ADDRESS` for every A answer so far.
    var answers: [String] { lock.withLock { lines.filter { $0.hasPrefix("A ") } } }

    /// A resolv.conf naming this server (evdns reads `ADDRESS:PORT` on a nameserver line).
    var resolvConf: String { "nameserver 127.0.0.153:\(port)\noptions timeout:2 attempts:2\n" }

    /// SIGKILL: the test runner's threads block SIGTERM, and a child inherits that mask.
    func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    deinit { stop() }
}

struct FixtureDidNotStart: Error, CustomStringConvertible {
    let output: String
    var description: String { "rebinding_dns.py did not start: \(output)" }
}
