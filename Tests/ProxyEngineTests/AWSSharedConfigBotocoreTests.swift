import Foundation
import ProxyCore
import TestSupport
import Testing

/// The shared-file reader against botocore itself (Tests/Fixtures/aws_config_parse.py): for each
/// file, botocore and AWSSharedConfigFile must agree on whether it is refused and, when it is not,
/// on every profile's settings (nested sub-sections aside, which both leave out).
@Suite struct AWSSharedConfigBotocoreTests {
    static let files: [String] = [
        "[default]\nregion = eu-west-1\naws_access_key_id=AKIA\n",
        "# comment\n; comment\n  # indented comment\n[default]\nKEY = Value\nother: x = y\nnote = a # b ; c\n",
        "[default]\nmulti = first\n  second\n\n  third\n\n[profile dev]\na = 1\n",
        "[default]\ns3 =\n  addressing_style = path\n\n  signature_version = s3v4\nregion = x\n",
        "[profile dev]\nrole_arn = r\n[profile \"my dev\"]\na = 2\n[profile  spaced ]\nb = 3\n[preview]\nc = 4\n[profilex y]\nd = 5\n",
        "[default]\na = 1\n[profile default]\na = 2\n",
        "[profile default]\na = 1\n[default]\na = 2\n",
        "[DEFAULT]\nregion = fallback\n[default]\na = 1\n[profile dev]\nregion = own\n",
        "[default]\r\na = 1\r\n  b\r\n[profile x]\rc = 2\r",
        "  [default]\n  a = 1\n    b = 2\n  c = 3\n",
        "[default]\n\ta = 1\n\t\tcontinued\n",
        "[a] trailing\nk = v\n",
        "[default]\nempty =\nafter = 1\n",
        "[default]\na = b = c\nd: e: f\n",
        // Refused by both.
        "a = 1\n[default]\n",
        "[default]\na = 1\n[default]\nb = 2\n",
        "[default]\na = 1\nA = 2\n",
        "[default]\nno delimiter here\n",
        "[default]\n= value\n",
        "[default]\ns3 =\n  not nested\n",
        "[]\n",
    ]

    @Test func agreesWithBotocore() throws {
        let python = try #require(SigV4Origin.botocorePython, "no python3 here imports botocore")
        let directory = ScratchDirectory()
        var paths: [String] = []
        for (index, text) in Self.files.enumerated() { paths.append(directory.write("config\(index)", text)) }
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/aws_config_parse.py").path
        let outcome = try SigV4Origin.runBounded(python, [script] + paths, seconds: 60)
        try #require(outcome.status == 0, "\(outcome.output)")
        let lines = outcome.output.split(separator: "\n")
        try #require(lines.count == Self.files.count, "\(outcome.output)")
        for (index, line) in lines.enumerated() {
            let reference = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            let ours = AWSSharedConfigFile.parse(Array(Self.files[index].utf8), path: paths[index])
            let botocoreAccepts = reference["ok"] as? Bool == true
            switch ours {
            case .failure(let error):
                #expect(!botocoreAccepts, "file \(index): we refuse (\(error)), botocore accepts")
            case .success(let file):
                #expect(botocoreAccepts, "file \(index): we accept, botocore refuses")
                guard botocoreAccepts else { continue }
                let expected = reference["profiles"] as? [String: [String: String]] ?? [:]
                let profiles = AWSSharedProfiles(config: file, credentials: nil).configProfiles
                #expect(profiles == expected, "file \(index)")
            }
        }
    }

    /// credential_process words against Python's shlex.split (what botocore's compat_shell_split is on Linux).
    @Test func shellWordsAgreeWithShlex() throws {
        let python = try #require(SigV4Origin.botocorePython, "no python3 here imports botocore")
        let inputs = [
            "a b  c", "'a b' \"c d\"", #"a\ b "x\"y" 'x\y' "p\q" "p\\q""#, "a'b'c \"\"", "#not a comment", "",
            "  lead and trail  ", "tab\tseparated\nnewline", #"mixed"quo'te'"s"#, "$HOME `cmd` ; | & > <", "unicode é ü",
        ]
        let code = "import json, shlex, sys\nfor text in json.loads(sys.argv[1]): print(json.dumps(shlex.split(text)))"
        let argument = String(decoding: try JSONSerialization.data(withJSONObject: inputs), as: UTF8.self)
        let outcome = try SigV4Origin.runBounded(python, ["-c", code, argument], seconds: 60)
        try #require(outcome.status == 0, "\(outcome.output)")
        let lines = outcome.output.split(separator: "\n")
        try #require(lines.count == inputs.count, "\(outcome.output)")
        for (index, line) in lines.enumerated() {
            let expected = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String])
            #expect(try AWSShellWords.split(inputs[index]) == expected, "\(inputs[index])")
        }
    }
}
