import Foundation
import HTTP1Codec
import Testing

@testable import AWSSigV4

/// The AWS SigV4 test suite (Vectors/, see its README): each case's raw request (`.req`) is signed
/// and the canonical request (`.creq`), string to sign (`.sts`) and Authorization (`.authz`) must
/// match byte for byte. The suite signs every header, so these run with `.allButBotocoreExclusions`.
private let vectors = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Vectors")

/// The suite's fixed inputs (from its documentation and botocore's `test_sigv4.py`).
enum SuiteConstants {
    static let accessKeyID = "AKIDEXAMPLE"
    static let secretKey = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
    static let region = "us-east-1"
    static let service = "service"
    static let time = AWSSigV4Timestamp(year: 2015, month: 8, day: 30, hour: 12, minute: 36, second: 0)
}

/// Every directory holding a `.req`, as a path relative to Vectors/ (`normalize-path/get-space`).
private func vectorCases() -> [String] {
    guard let walker = FileManager.default.enumerator(atPath: vectors.path) else { return [] }
    var cases: [String] = []
    while let entry = walker.nextObject() as? String {
        guard entry.hasSuffix(".req") else { continue }
        cases.append(String(entry.dropLast(".req".count).split(separator: "/").dropLast().joined(separator: "/")))
    }
    return cases.sorted()
}

private func file(_ testCase: String, _ suffix: String) throws -> String {
    let name = String(testCase.split(separator: "/").last!)
    return try String(contentsOf: vectors.appendingPathComponent(testCase).appendingPathComponent(name + suffix), encoding: .utf8)
        .replacingOccurrences(of: "\r", with: "")
}

/// A raw `.req`: request line, fields (continuation lines folded in with a newline, which Trimall
/// turns into one space), blank line, body.
struct RawVectorRequest {
    let method: String
    let path: String
    let query: String
    let host: String
    let fields: HTTPFields
    let body: [UInt8]

    init(_ text: String) {
        let (head, body) = text.range(of: "\n\n").map { (String(text[..<$0.lowerBound]), String(text[$0.upperBound...])) } ?? (text, "")
        var lines = head.split(separator: "\n", omittingEmptySubsequences: false)[...]
        let requestLine = lines.removeFirst()
        let firstSpace = requestLine.firstIndex(of: " ")!, lastSpace = requestLine.lastIndex(of: " ")!
        method = String(requestLine[..<firstSpace])
        let target = requestLine[requestLine.index(after: firstSpace)..<lastSpace]
        if let question = target.firstIndex(of: "?") {
            path = String(target[..<question])
            query = String(target[target.index(after: question)...])
        } else {
            path = String(target)
            query = ""
        }
        var fields: [HTTPField] = []
        for line in lines where !line.isEmpty {
            if line.first == " " || line.first == "\t" {
                fields[fields.count - 1].value += "\n" + line
                continue
            }
            let colon = line.firstIndex(of: ":")!
            // Values as wire bytes (one scalar per byte), as the codec holds them.
            fields.append(HTTPField(name: String(line[..<colon]), value: HTTPField.value(wireBytes: Array(line[line.index(after: colon)...].utf8))))
        }
        var all = HTTPFields(fields)
        host = all.values("host").first ?? ""
        all.removeAll("host")
        self.fields = all
        self.body = Array(body.utf8)
    }
}

@Suite("AWSSigV4: the AWS SigV4 test suite vectors")
struct TestSuiteVectorTests {
    @Test("the vectors are there (the whole suite as botocore vendors it)")
    func vectorsPresent() {
        let cases = vectorCases()
        #expect(cases.count == 34)
        for required in [
            "get-vanilla", "get-vanilla-query-order-key-case", "post-x-www-form-urlencoded", "normalize-path/get-space",
            "normalize-path/get-slashes", "get-utf8", "post-sts-token/post-sts-header-before",
        ] {
            #expect(cases.contains(required), "missing vector \(required)")
        }
    }

    @Test("canonical request, string to sign and Authorization match byte for byte", arguments: vectorCases())
    func vector(_ testCase: String) throws {
        let raw = RawVectorRequest(try file(testCase, ".req"))
        let expectedCanonical = try file(testCase, ".creq")
        // Like botocore's runner: a vector whose canonical request carries a token was signed with one.
        let token = expectedCanonical.split(separator: "\n").first { $0.hasPrefix("x-amz-security-token:") }
            .map { Array($0.dropFirst("x-amz-security-token:".count).utf8) }
        let credentials = try AWSCredentials(
            accessKeyID: Array(SuiteConstants.accessKeyID.utf8),
            secretAccessKey: Array(SuiteConstants.secretKey.utf8), sessionToken: token)
        let signer = try AWSSigV4Signer(
            service: SuiteConstants.service, region: SuiteConstants.region, credentials: credentials,
            headerSelection: .allButBotocoreExclusions)
        var fields = raw.fields
        AWSSigV4.removeClientSigningFields(from: &fields)
        let request = AWSSigV4Request(
            method: raw.method, authority: raw.host, path: raw.path, query: raw.query, fields: fields,
            payloadHash: AWSSigV4.payloadHash(body: raw.body))

        let added = signer.sign(fieldsOf: request, at: SuiteConstants.time)
        let canonical = signer.canonicalRequest(request, adding: added)
        #expect(String(decoding: canonical.bytes, as: UTF8.self) == expectedCanonical)
        let stringToSign = AWSSigV4Signer.stringToSign(
            amzDate: SuiteConstants.time.amzDate,
            scope: "20150830/us-east-1/service/aws4_request", canonicalRequest: canonical.bytes)
        #expect(String(decoding: stringToSign, as: UTF8.self) == (try file(testCase, ".sts")))

        let signature = try signer.sign(request, at: SuiteConstants.time)
        #expect(signature.fields.last?.name == "Authorization")
        #expect(signature.fields.last?.value == (try file(testCase, ".authz")))
    }
}

extension AWSSigV4Signer {
    /// The fields `sign` adds before Authorization (to rebuild the canonical request in tests).
    func sign(fieldsOf request: AWSSigV4Request, at time: AWSSigV4Timestamp) -> [HTTPField] {
        (try? sign(request, at: time))?.fields.dropLast().map { $0 } ?? []
    }
}
