import Foundation

/// Tests/Fixtures/netns_run.py from Swift: a network namespace built from a JSON spec (addresses on
/// `lo`, /etc/hosts and /etc/resolv.conf, nftables or iptables rules, origins, a DNS server,
/// background processes, commands run as another user), and its report. The fixture's docstring
/// lists the spec's keys.
public enum NetnsRun {
    public struct Command: Sendable {
        public let name: String
        public let rc: Int
        public let stdout: String
        public let stderr: String
    }

    /// One request an origin of the spec received.
    public struct Request: Sendable {
        public let method: String
        public let path: String
        /// Header names as the origin read them (case as sent), values as sent.
        public let headers: [String: String]
        /// The address and port the request's connection came from (one per TCP connection).
        public let peer: String

        /// A header's value, the name compared without case.
        public func header(_ name: String) -> String? {
            headers.first { $0.key.lowercased() == name.lowercased() }?.value
        }
    }

    public struct Report: Sendable {
        public let commands: [Command]
        public let origins: [String: [Request]]
        /// Each background process's stderr, by name.
        public let background: [String: String]
        /// Set when the namespace could not be built or a step failed.
        public let error: String?
        /// Every name the spec's DNS servers were asked, in order (lowercase, no trailing dot).
        public let dnsQueries: [String]

        public func command(_ name: String) -> Command? { commands.first { $0.name == name } }
        /// Every request any origin received.
        public var allRequests: [Request] { origins.values.flatMap { $0 } }
    }

    public enum Outcome: Sendable {
        case ran(Report)
        /// Not root, or a tool is missing: the reason, for the test to print.
        case skipped(String)
    }

    public static var fixturePath: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/netns_run.py").path
    }

    /// Writes `spec` to `directory`, runs the fixture and reads its report.
    public static func run(_ spec: [String: Any], in directory: String) throws -> Outcome {
        let specPath = directory + "/netns-spec-\(UUID().uuidString).json"
        try JSONSerialization.data(withJSONObject: spec).write(to: URL(fileURLWithPath: specPath))
        defer { try? FileManager.default.removeItem(atPath: specPath) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", fixturePath, specPath]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard let object = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw NetnsRunError(description: "netns_run.py printed no report: \(String(decoding: data, as: UTF8.self))")
        }
        if let reason = object["skipped"] as? String { return .skipped(reason) }
        let commands = (object["commands"] as? [[String: Any]] ?? []).map {
            Command(
                name: $0["name"] as? String ?? "", rc: $0["rc"] as? Int ?? -1, stdout: $0["stdout"] as? String ?? "",
                stderr: $0["stderr"] as? String ?? "")
        }
        var origins: [String: [Request]] = [:]
        for (name, list) in object["origins"] as? [String: [[String: Any]]] ?? [:] {
            origins[name] = list.map {
                Request(
                    method: $0["method"] as? String ?? "", path: $0["path"] as? String ?? "", headers: $0["headers"] as? [String: String] ?? [:],
                    peer: $0["peer"] as? String ?? "")
            }
        }
        var background: [String: String] = [:]
        for entry in object["background"] as? [[String: Any]] ?? [] {
            background[entry["name"] as? String ?? ""] = entry["stderr"] as? String ?? ""
        }
        return .ran(
            Report(
                commands: commands, origins: origins, background: background, error: object["error"] as? String,
                dnsQueries: object["dns_queries"] as? [String] ?? []))
    }
}

public struct NetnsRunError: Error, CustomStringConvertible {
    public let description: String
}
