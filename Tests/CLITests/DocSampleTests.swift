import Foundation
import TestSupport
import Testing

/// The `explain` samples the README and getting-started show are what the binary prints for the
/// config shown beside them: a reworded message fails here, not in a newcomer's terminal.
@Suite("Docs: the explain samples are the binary's output")
struct DocSampleTests {
    struct Sample: Sendable, CustomStringConvertible {
        let document: String
        /// The text that precedes the config's yaml block (the block right after it is the config).
        let configAnchor: String
        let configName: String
        /// Store entries the doc has its reader set first (`scopeproxy secret set NAME`).
        var storeEntries: [String] = []
        var description: String { "\(document) (\(configName))" }
    }

    static let samples = [
        Sample(document: "README.md", configAnchor: "Save this as `github.yaml`", configName: "github.yaml", storeEntries: ["github"]),
        Sample(document: "docs/getting-started.md", configAnchor: "## A minimal config", configName: "my.yaml"),
    ]

    /// The first yaml block after `anchor`.
    static func yamlBlock(_ text: String, after anchor: String) -> String? {
        guard let anchorRange = text.range(of: anchor),
            let open = text.range(of: "```yaml\n", range: anchorRange.upperBound..<text.endIndex),
            let close = text.range(of: "```", range: open.upperBound..<text.endIndex)
        else { return nil }
        return String(text[open.upperBound..<close.lowerBound])
    }

    @Test("each explain sample, run as printed on the config shown, prints exactly the sample", arguments: samples)
    func explainSample(_ sample: Sample) throws {
        let text = try String(contentsOfFile: repositoryRoot + "/" + sample.document, encoding: .utf8)
        let config = try #require(Self.yamlBlock(text, after: sample.configAnchor), "no yaml block after the anchor")
        // The sample: the `$ scopeproxy explain` line, then the output up to the block's end.
        let command = "$ scopeproxy explain --config \(sample.configName) "
        let start = try #require(text.range(of: command), "no explain sample in \(sample.document)")
        let lineEnd = try #require(text.range(of: "\n", range: start.upperBound..<text.endIndex))
        let url = String(text[start.upperBound..<lineEnd.lowerBound])
        let close = try #require(text.range(of: "```", range: lineEnd.upperBound..<text.endIndex))
        let shown = String(text[lineEnd.upperBound..<close.lowerBound])

        let scratch = ScratchDirectory()
        scratch.write(sample.configName, config)
        let environment = ["HOME": scratch.path, "DEMO_TOKEN": "docs-sample-token-0001"]
        for entry in sample.storeEntries {
            let set = try runBinary(
                ["secret", "set", entry, "--config", sample.configName], stdin: "docs-sample-token-0002\n",
                environment: environment, workingDirectory: scratch.path)
            #expect(set.status == 0, "\(set.stderr)")
        }
        let outcome = try runBinary(["explain", "--config", sample.configName, url], environment: environment, workingDirectory: scratch.path)
        #expect(outcome.status == 0, "\(outcome.stderr)")
        #expect(outcome.stdout == shown, "\(sample.document) shows:\n\(shown)\nthe binary prints:\n\(outcome.stdout)")
    }

    /// Every `sh`, `python` and `yaml` block of a section, in order.
    static func blocks(_ text: String, section: String, until next: String) -> [(language: String, body: String)] {
        guard let start = text.range(of: section), let end = text.range(of: next, range: start.upperBound..<text.endIndex) else { return [] }
        var found: [(String, String)] = []
        var rest = text[start.upperBound..<end.lowerBound]
        while let open = rest.range(of: "```"), let lineEnd = rest.range(of: "\n", range: open.upperBound..<rest.endIndex),
            let close = rest.range(of: "```", range: lineEnd.upperBound..<rest.endIndex)
        {
            found.append((String(rest[open.upperBound..<lineEnd.lowerBound]), String(rest[lineEnd.upperBound..<close.lowerBound])))
            rest = rest[close.upperBound...]
        }
        return found
    }

    @Test("getting-started's 'Try it without GitHub', pasted as printed, shows the token at the stand-in and stars at the client")
    func standInAsPrinted() throws {
        let text = try String(contentsOfFile: repositoryRoot + "/docs/getting-started.md", encoding: .utf8)
        let blocks = Self.blocks(text, section: "## Try it without GitHub", until: "\n## ")
        let shell = blocks.filter { $0.language == "sh" }.map(\.body)
        let python = try #require(blocks.first { $0.language == "python" }?.body)
        let config = try #require(blocks.first { $0.language == "yaml" }?.body)
        let shown = try #require(blocks.last { $0.language == "" }?.body)
        #expect(shell.count == 2, "the certificates, then the run")
        let scratch = ScratchDirectory()
        scratch.write("echo_origin.py", python)
        scratch.write("github-standin.yaml", config)
        // `scopeproxy` on PATH is the binary under test; the store entry is the quickstart's.
        let bin = scratch.path + "/bin"
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: bin + "/scopeproxy", withDestinationPath: ProxyProcess.binaryPath)
        let environment = ["HOME": scratch.path, "PATH": bin + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")]
        let token = "ghp_exampleexampleexample0123456789"
        let set = try runBinary(
            ["secret", "set", "github", "--config", "github-standin.yaml"], stdin: token + "\n",
            environment: environment, workingDirectory: scratch.path)
        #expect(set.status == 0, "\(set.stderr)")
        // The two blocks as a reader pastes them, then the page's own way to stop both.
        let script = shell.joined(separator: "\n") + "\nkill %1 %2; wait\n"
        scratch.write("pasted.sh", script)
        let process = Process()
        // A reader's shell has no signal blocked; the test runner's children inherit a blocked
        // SIGTERM, which would make the page's `kill` a no-op and `wait` hang: cleared first.
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [
            "-c", "import os, signal, sys; signal.pthread_sigmask(signal.SIG_SETMASK, []); os.execv('/bin/bash', sys.argv[1:])",
            "bash", "-c", "timeout -k 5 60 bash pasted.sh > pasted.out 2> pasted.err",
        ]
        process.currentDirectoryURL = URL(fileURLWithPath: scratch.path)
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        try process.run()
        process.waitUntilExit()
        let output = (try? String(contentsOfFile: scratch.path + "/pasted.out", encoding: .utf8)) ?? ""
        #expect(output == shown, "the page shows:\n\(shown)\nthe commands printed:\n\(output)")
        #expect(output.contains("Bearer " + token), "the stand-in got the token")
        #expect(!output.components(separatedBy: "\n").first!.contains(token), "the client saw stars, not the token")
    }
}
