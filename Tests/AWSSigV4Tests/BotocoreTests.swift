import Foundation
import HTTP1Codec
import Testing

@testable import AWSSigV4

/// Differential test against botocore's signer (`botocore_sign.py`): the same requests, credentials
/// and time; the Authorization, X-Amz-Date, X-Amz-Security-Token and X-Amz-Content-Sha256 values
/// must be equal byte for byte. Every python3 that imports botocore is asked (Debian's
/// `python3-botocore` under /usr/bin/python3, and a `python3` on PATH with its own botocore), so one
/// run checks more than one botocore release. `make packages-test` installs python3-botocore.
private let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("botocore_sign.py").path

struct BotocoreCase {
    let name: String
    let service: String
    let region: String
    let method: String
    let authority: String
    let path: String
    let query: String
    let fields: [(String, String)]
    let body: [UInt8]
    let unsignedPayload: Bool
    let token: String?
    /// The path botocore is given when it differs from the one sent: a raw path from a plain HTTP
    /// client must sign as botocore signs the key it means, which botocore's serializer escapes.
    var botocorePath: String? = nil

    static let accessKey = "AKIAIOSFODNN7EXAMPLE"
    static let secretKey = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    static let time = AWSSigV4Timestamp(secondsSinceEpoch: 1_796_036_645)  // 2026-11-30T11:04:05Z
    static let sessionToken = "IQoJb3JpZ2luX2VjEXAMPLE//////////wEaCWV1LXdlc3QtMSJHMEUCIQDEXAMPLE+token/with=padding=="
}

/// Requests that exercise what differs between services and encodings: GET with a query, PUT with
/// a body, S3 and three other services, with and without a session token, paths needing encoding
/// (space, UTF-8, `~`, `+`, `=`, `$`, `!`, `'`, `(`), dot segments and `//` (normalized except for S3),
/// repeated and empty query keys, `+` and `%20` in the query, repeated fields with runs of spaces,
/// and fields that the default selection leaves unsigned.
let botocoreCases: [BotocoreCase] = [
    BotocoreCase(
        name: "execute-api GET, query needing encoding", service: "execute-api", region: "eu-west-1", method: "GET",
        authority: "abc123.execute-api.eu-west-1.amazonaws.com",
        path: "/prod/items/a%20b/caf%C3%A9/~user/x%2By/k%3Dv/%24delete/it's(1)!",
        query: "b=2&a=1&a=0&empty=&flag&sp=a%20b&plus=1+1&enc=1%2B1&tilde=~x&uni=%E2%82%AC&Z=last&%7E=t",
        fields: [("Accept", "application/json"), ("User-Agent", "curl/8.5.0"), ("X-Request-Id", "r-1")],
        body: [], unsignedPayload: false, token: nil),
    BotocoreCase(
        name: "execute-api PUT JSON body with session token, dot segments", service: "execute-api", region: "us-east-1",
        method: "PUT", authority: "api.example.internal:8443", path: "/stage/./a/b/../c//d/",
        query: "",
        fields: [
            ("Content-Type", "application/json; charset=utf-8"), ("X-Amz-Meta-Note", "  two   spaces  "),
            ("Content-Length", "27"),
        ],
        body: Array(#"{"name":"caf\u00e9","n":42}"#.utf8), unsignedPayload: false, token: BotocoreCase.sessionToken),
    BotocoreCase(
        name: "sts POST form body with session token", service: "sts", region: "us-east-1", method: "POST",
        authority: "sts.amazonaws.com", path: "/", query: "",
        fields: [("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")],
        body: Array("Action=GetCallerIdentity&Version=2011-06-15".utf8), unsignedPayload: false, token: BotocoreCase.sessionToken),
    BotocoreCase(
        name: "dynamodb POST with X-Amz-Target", service: "dynamodb", region: "eu-central-1", method: "POST",
        authority: "dynamodb.eu-central-1.amazonaws.com", path: "", query: "",
        fields: [("Content-Type", "application/x-amz-json-1.0"), ("X-Amz-Target", "DynamoDB_20120810.ListTables")],
        body: Array("{}".utf8), unsignedPayload: false, token: nil),
    BotocoreCase(
        name: "s3 PUT object, unsigned payload, metadata, session token", service: "s3", region: "eu-west-1", method: "PUT",
        authority: "my-bucket.s3.eu-west-1.amazonaws.com",
        path: "/photos/2026%20trip/caf%C3%A9%20%2B%20%3D%20~%21.jpg", query: "",
        fields: [
            ("Content-Type", "image/jpeg"), ("Content-MD5", "1B2M2Y8AsgTpgAmY7PhCfg=="), ("x-amz-acl", "private"),
            ("X-Amz-Meta-Owner", "Ana  María"), ("X-Amz-Meta-Tag", "a   b"), ("X-Amz-Meta-Tag", " c "),
            ("Expect", "100-continue"), ("User-Agent", "aws-cli/2"),
        ],
        body: Array("not really a jpeg".utf8), unsignedPayload: true, token: BotocoreCase.sessionToken),
    BotocoreCase(
        name: "s3 GET list, query with slashes, no token", service: "s3", region: "eu-west-1", method: "GET",
        authority: "s3.eu-west-1.amazonaws.com", path: "/my-bucket",
        query: "list-type=2&prefix=photos%2F2026+trip%2F&delimiter=%2F&encoding-type=url",
        fields: [("Accept-Encoding", "identity")], body: [], unsignedPayload: true, token: nil),
    BotocoreCase(
        name: "s3 key with // and dot segments is not normalized", service: "s3", region: "us-west-2", method: "GET",
        authority: "localhost:9000", path: "/bucket/a//b/./c/../d~e", query: "versionId=3%2F4",
        fields: [], body: [], unsignedPayload: true, token: nil),
    BotocoreCase(
        name: "s3 PUT with a signed payload hash", service: "s3", region: "us-east-1", method: "PUT",
        authority: "bucket.s3.amazonaws.com", path: "/key%20with%20spaces", query: "",
        fields: [("Content-Type", "text/plain")], body: Array("hello\n".utf8), unsignedPayload: false, token: nil),
    BotocoreCase(
        name: "s3 GET of a key a plain client sent with raw sub-delimiters", service: "s3", region: "eu-west-1", method: "GET",
        authority: "bucket.s3.eu-west-1.amazonaws.com", path: "/reports/q1(final)!=$1,000;v2@x:y*.pdf", query: "",
        fields: [], body: [], unsignedPayload: true, token: nil,
        botocorePath: "/reports/q1%28final%29%21%3D%241%2C000%3Bv2%40x%3Ay%2A.pdf"),
]

private struct BotocoreRun {
    let version: String
    let python: String
    /// (case name, mode) -> signing field name (lowercase) -> value
    let results: [String: [String: String]]
}

private func request(for testCase: BotocoreCase) -> AWSSigV4Request {
    var fields = HTTPFields(testCase.fields.map { HTTPField(name: $0.0, value: HTTPField.value(wireBytes: Array($0.1.utf8))) })
    AWSSigV4.removeClientSigningFields(from: &fields)
    return AWSSigV4Request(
        method: testCase.method, authority: testCase.authority, path: testCase.path, query: testCase.query,
        fields: fields,
        payloadHash: testCase.unsignedPayload ? AWSSigV4.unsignedPayload : AWSSigV4.payloadHash(body: testCase.body))
}

private func runBotocore(_ interpreter: [String]) throws -> BotocoreRun? {
    var cases: [[String: Any]] = []
    for testCase in botocoreCases {
        for mode in ["all", "aws_required"] {
            var entry: [String: Any] = [
                "name": testCase.name, "mode": mode, "service": testCase.service, "region": testCase.region, "method": testCase.method,
                "authority": testCase.authority, "path": testCase.botocorePath ?? testCase.path, "query": testCase.query,
                "headers": testCase.fields.map { [$0.0, $0.1] }, "body_hex": testCase.body.map { String(format: "%02x", $0) }.joined(),
                "unsigned_payload": testCase.unsignedPayload, "access_key": BotocoreCase.accessKey, "secret_key": BotocoreCase.secretKey,
                "time": BotocoreCase.time.amzDate,
            ]
            if let token = testCase.token { entry["token"] = token }
            cases.append(entry)
        }
    }
    let input = try JSONSerialization.data(withJSONObject: ["cases": cases])
    let process = Process()
    process.executableURL = URL(fileURLWithPath: interpreter[0])
    process.arguments = Array(interpreter.dropFirst()) + [script]
    let stdin = Pipe(), stdout = Pipe(), stderr = Pipe()
    process.standardInput = stdin
    process.standardOutput = stdout
    process.standardError = stderr
    try process.run()
    stdin.fileHandleForWriting.write(input)
    try stdin.fileHandleForWriting.close()
    let output = stdout.fileHandleForReading.readDataToEndOfFile()
    let errors = stderr.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else {
        let message = String(decoding: errors, as: UTF8.self)
        if message.contains("No module named 'botocore'") { return nil }
        throw BotocoreFailure(message: "\(interpreter.joined(separator: " ")) failed: \(message)")
    }
    let json = try #require(try JSONSerialization.jsonObject(with: output) as? [String: Any])
    var results: [String: [String: String]] = [:]
    for result in try #require(json["results"] as? [[String: Any]]) {
        let key = "\(result["name"] as? String ?? "")|\(result["mode"] as? String ?? "")"
        results[key] = result["headers"] as? [String: String] ?? [:]
    }
    return BotocoreRun(version: json["botocore"] as? String ?? "?", python: json["python"] as? String ?? "?", results: results)
}

struct BotocoreFailure: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}

@Suite("AWSSigV4: byte for byte against botocore's signer")
struct BotocoreTests {
    @Test("Authorization and the signing fields equal botocore's, in both header selections")
    func againstBotocore() throws {
        var interpreters: [[String]] = []
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") { interpreters.append(["/usr/bin/python3"]) }
        interpreters.append(["/usr/bin/env", "python3"])
        var runs: [BotocoreRun] = []
        for interpreter in interpreters {
            guard let run = try runBotocore(interpreter) else { continue }
            if !runs.contains(where: { $0.python == run.python && $0.version == run.version }) { runs.append(run) }
        }
        guard !runs.isEmpty else {
            Issue.record("no python3 here imports botocore: install python3-botocore (make packages-test) to run the reference")
            return
        }
        let credentials = try AWSCredentials(
            accessKeyID: Array(BotocoreCase.accessKey.utf8),
            secretAccessKey: Array(BotocoreCase.secretKey.utf8), sessionToken: nil)
        for run in runs {
            print("AWSSigV4 botocore reference: botocore \(run.version) (\(run.python))")
            for testCase in botocoreCases {
                let caseCredentials =
                    try testCase.token.map { token throws(AWSSigV4Error) in
                        try AWSCredentials(
                            accessKeyID: Array(BotocoreCase.accessKey.utf8), secretAccessKey: Array(BotocoreCase.secretKey.utf8),
                            sessionToken: Array(token.utf8))
                    } ?? credentials
                for (mode, selection) in [("all", AWSSigV4Signer.HeaderSelection.allButBotocoreExclusions), ("aws_required", .awsRequired)] {
                    let signer = try AWSSigV4Signer(
                        service: testCase.service, region: testCase.region, credentials: caseCredentials,
                        headerSelection: selection)
                    let signature = try signer.sign(request(for: testCase), at: BotocoreCase.time)
                    var mine: [String: String] = [:]
                    for field in signature.fields { mine[field.lowercasedName] = field.value }
                    let theirs = try #require(run.results["\(testCase.name)|\(mode)"])
                    #expect(mine == theirs, "\(testCase.name) [\(mode)] differs from botocore \(run.version)")
                }
            }
        }
    }
}
