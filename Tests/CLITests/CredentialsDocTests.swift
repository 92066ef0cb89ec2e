import Foundation
import ScopeConfig
import TestSupport
import Testing

/// docs/credentials.md: every config it shows loads, and each `explain` sample's lines are what the
/// binary prints for the config above it (the doc elides the other lines with `...`).
@Suite("Docs: credentials.md")
struct CredentialsDocTests {
    static func text() throws -> String { try String(contentsOfFile: repositoryRoot + "/docs/credentials.md", encoding: .utf8) }

    static func yamlBlocks(_ text: String) -> [String] {
        text.components(separatedBy: "```yaml\n").dropFirst().compactMap { $0.components(separatedBy: "```").first }
    }

    @Test("every yaml block is a config the loader accepts")
    func blocksLoad() throws {
        let blocks = Self.yamlBlocks(try Self.text())
        #expect(blocks.count >= 6)
        for (index, block) in blocks.enumerated() {
            do { _ = try ConfigLoader.parse(block, file: "credentials-\(index).yaml", home: "/home/me") } catch {
                Issue.record("block \(index): \(error)\n\(block)")
            }
        }
    }

    @Test("the explain samples: the command secret (gh.yaml) and the AWS profile (aws.yaml)")
    func explainSamples() throws {
        let text = try Self.text()
        let blocks = Self.yamlBlocks(text)
        let scratch = ScratchDirectory()
        try FileManager.default.createDirectory(atPath: scratch.path + "/.aws", withIntermediateDirectories: true)
        // The doc's reader has a profile 'dev' assuming a role from 'base' (as the sample says).
        scratch.write(".aws/config", "[profile dev]\nrole_arn = arn:aws:iam::123456789012:role/dev\nsource_profile = base\n")
        scratch.write(".aws/credentials", "[base]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = example\n")
        for (name, block) in [("gh.yaml", blocks[0]), ("aws.yaml", blocks[5])] {
            scratch.write(name, block)
            let command = "$ scopeproxy explain --config \(name) "
            let start = try #require(text.range(of: command), "no explain sample for \(name)")
            let lineEnd = try #require(text.range(of: "\n", range: start.upperBound..<text.endIndex))
            let url = String(text[start.upperBound..<lineEnd.lowerBound])
            let close = try #require(text.range(of: "```", range: lineEnd.upperBound..<text.endIndex))
            let shown = text[lineEnd.upperBound..<close.lowerBound].split(separator: "\n").filter { $0 != "..." }
            let outcome = try runBinary(
                ["explain", "--config", name, url], environment: ["HOME": scratch.path, "AWS_EC2_METADATA_DISABLED": "true"],
                workingDirectory: scratch.path)
            #expect(outcome.status == 0, "\(outcome.stderr)")
            // The sample's path is the doc reader's home; the scratch directory stands in for it.
            let printed = outcome.stdout.replacingOccurrences(of: scratch.path, with: "/home/me")
            for line in shown { #expect(printed.contains(line + "\n"), "\(name): the doc shows\n\(line)\nthe binary prints\n\(printed)") }
        }
    }
}
