import HTTP1Codec
import Testing

@testable import AWSSigV4

private func credentials(token: String? = nil) throws -> AWSCredentials {
    try AWSCredentials(
        accessKeyID: Array("AKIDEXAMPLE".utf8), secretAccessKey: Array("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".utf8),
        sessionToken: token.map { Array($0.utf8) })
}

private let time = AWSSigV4Timestamp(year: 2015, month: 8, day: 30, hour: 12, minute: 36, second: 0)

@Suite("AWSSigV4: the signer's own rules")
struct SignerTests {
    @Test(
        "POSIX seconds to the X-Amz-Date form (values from Python's datetime)",
        arguments: [
            (Int64(0), "19700101T000000Z"), (951_782_400, "20000229T000000Z"), (951_868_799, "20000229T235959Z"),
            (1_796_036_645, "20261130T110405Z"), (4_102_444_799, "20991231T235959Z"), (-1, "19691231T235959Z"),
            (253_402_300_799, "99991231T235959Z"),
        ])
    func timestamp(_ seconds: Int64, _ expected: String) {
        let time = AWSSigV4Timestamp(secondsSinceEpoch: seconds)
        #expect(time.amzDate == expected)
        #expect(time.dateStamp == String(expected.prefix(8)))
    }

    @Test("the payload hash of an empty body and of bytes")
    func payloadHash() {
        #expect(AWSSigV4.payloadHash(body: []) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(AWSSigV4.payloadHash(body: Array("Param1=value1".utf8)) == "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e")
        #expect(AWSSigV4.unsignedPayload == "UNSIGNED-PAYLOAD")
    }

    @Test("the client's signing fields are removed, its other x-amz-* fields kept")
    func removal() {
        var fields = HTTPFields([
            HTTPField(name: "Authorization", value: "AWS4-HMAC-SHA256 Credential=CLIENT"), HTTPField(name: "X-Amz-Date", value: "20000101T000000Z"),
            HTTPField(name: "x-amz-security-token", value: "client-token"), HTTPField(name: "X-AMZ-CONTENT-SHA256", value: "abc"),
            HTTPField(name: "authorization", value: "second"), HTTPField(name: "X-Amz-Meta-Owner", value: "ana"),
            HTTPField(name: "X-Amz-Target", value: "DynamoDB_20120810.ListTables"), HTTPField(name: "Accept", value: "*/*"),
        ])
        let removed = AWSSigV4.removeClientSigningFields(from: &fields)
        #expect(removed == ["authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256"])
        #expect(fields.map(\.name) == ["X-Amz-Meta-Owner", "X-Amz-Target", "Accept"])
        #expect(AWSSigV4.removeClientSigningFields(from: &fields).isEmpty)
    }

    @Test("the fields added: date, token, content hash for S3 only, Authorization last")
    func addedFields() throws {
        let request = AWSSigV4Request(
            method: "GET", authority: "bucket.s3.amazonaws.com", path: "/k", query: "",
            fields: HTTPFields([HTTPField(name: "X-Amz-Meta-A", value: "1"), HTTPField(name: "Accept", value: "*/*")]),
            payloadHash: AWSSigV4.unsignedPayload)
        let s3 = try AWSSigV4Signer(service: "s3", region: "us-east-1", credentials: try credentials(token: "TOKEN"))
        let signed = try s3.sign(request, at: time)
        #expect(signed.fields.map(\.name) == ["X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-Sha256", "Authorization"])
        #expect(signed.fields[2].value == "UNSIGNED-PAYLOAD")
        #expect(signed.signedHeaders == ["host", "x-amz-content-sha256", "x-amz-date", "x-amz-meta-a", "x-amz-security-token"])

        let sts = try AWSSigV4Signer(service: "sts", region: "us-east-1", credentials: try credentials())
        let plain = try sts.sign(request, at: time)
        #expect(plain.fields.map(\.name) == ["X-Amz-Date", "Authorization"])
        #expect(plain.signedHeaders == ["host", "x-amz-date", "x-amz-meta-a"])
        #expect(
            plain.fields[1].value.hasPrefix(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/sts/aws4_request, SignedHeaders=host;x-amz-date;x-amz-meta-a, Signature=")
        )
    }

    @Test("the default selection signs host, x-amz-*, content-type and content-md5 only")
    func defaultSelection() throws {
        let signer = try AWSSigV4Signer(service: "execute-api", region: "eu-west-1", credentials: try credentials())
        for name in ["x-amz-meta-x", "x-amz-acl", "x-amz-target", "content-type", "content-md5"] { #expect(signer.isSigned(name)) }
        for name in ["accept", "user-agent", "content-length", "x-amzn-trace-id", "date", "range", "host", "authorization", "x-amz-date"] {
            #expect(!signer.isSigned(name), "\(name) should not be signed from the request's fields")
        }
    }

    @Test(
        "S3 encodes the key once, unnormalized; other services normalize the path and encode it again",
        arguments: [
            ("/a//b/./c/../d", "/a/b/d", "/a//b/./c/../d"),
            ("/a%20b/caf%C3%A9", "/a%2520b/caf%25C3%25A9", "/a%20b/caf%C3%A9"),
            ("", "/", "/"),
            ("/..", "/", "/.."),
            ("/a/b/", "/a/b/", "/a/b/"),
            ("/~x/a+b=c$d", "/~x/a%2Bb%3Dc%24d", "/~x/a%20b%3Dc%24d"),
            ("/b/file(1)!.txt", "/b/file%281%29%21.txt", "/b/file%281%29%21.txt"),
            ("/b/a%2fb%7e%2B%25", "/b/a%252fb%257e%252B%2525", "/b/a/b~%2B%25"),
            ("/b/caf%c3%a9", "/b/caf%25c3%25a9", "/b/caf%C3%A9"),
        ])
    func canonicalURI(_ path: String, _ other: String, _ s3: String) {
        #expect(AWSSigV4Canonical.normalizedURI(path) == other)
        #expect(AWSSigV4Canonical.s3URI(path) == s3)
    }

    @Test(
        "the canonical query: decoded, re-encoded, sorted by name then value",
        arguments: [
            ("", ""),
            ("b=2&a=1&a=0", "a=0&a=1&b=2"),
            ("flag&empty=&&x=", "empty=&flag=&x="),
            ("q=a+b&r=a%20b&s=1%2B1", "q=a%20b&r=a%20b&s=1%2B1"),
            ("%7e=~&k=%2f/", "k=%2F%2F&~=~"),
            ("B=1&a=1&_=1", "B=1&_=1&a=1"),
        ])
    func canonicalQuery(_ query: String, _ expected: String) {
        #expect(AWSSigV4Canonical.query(query) == expected)
    }

    @Test("header values: trimmed, runs collapsed, repeated names joined with ',' in order")
    func canonicalHeaders() {
        let block = AWSSigV4Canonical.headers([
            HTTPField(name: "X-Amz-Meta-B", value: "  a   b \t c  "), HTTPField(name: "x-amz-meta-a", value: "z"),
            HTTPField(name: "X-AMZ-META-B", value: "second"), HTTPField(name: "Host", value: "h"),
            HTTPField(name: "x-amz-meta-c", value: HTTPField.value(wireBytes: [0x63, 0x61, 0x66, 0xC3, 0xA9])),
        ])
        #expect(block.names == ["host", "x-amz-meta-a", "x-amz-meta-b", "x-amz-meta-c"])
        #expect(block.block == Array("host:h\nx-amz-meta-a:z\nx-amz-meta-b:a b c,second\nx-amz-meta-c:caf".utf8) + [0xC3, 0xA9, 0x0A])
    }

    @Test("invalid inputs are refused with errors that show no value")
    func refusals() throws {
        let secret = Array("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".utf8)
        #expect(throws: AWSSigV4Error.invalidAccessKeyID) {
            try AWSCredentials(accessKeyID: Array("AKID/x".utf8), secretAccessKey: secret, sessionToken: nil)
        }
        #expect(throws: AWSSigV4Error.invalidAccessKeyID) { try AWSCredentials(accessKeyID: [], secretAccessKey: secret, sessionToken: nil) }
        #expect(throws: AWSSigV4Error.emptySecretAccessKey) {
            try AWSCredentials(accessKeyID: Array("AKID".utf8), secretAccessKey: [], sessionToken: nil)
        }
        #expect(throws: AWSSigV4Error.invalidSessionToken) {
            try AWSCredentials(accessKeyID: Array("AKID".utf8), secretAccessKey: secret, sessionToken: Array("tok\r\nX-Evil: 1".utf8))
        }
        #expect(throws: AWSSigV4Error.invalidRegion) { try AWSSigV4Signer(service: "s3", region: "EU/west", credentials: try credentials()) }
        #expect(throws: AWSSigV4Error.invalidService) { try AWSSigV4Signer(service: "", region: "eu-west-1", credentials: try credentials()) }
        let signer = try AWSSigV4Signer(service: "s3", region: "eu-west-1", credentials: try credentials())
        let request = AWSSigV4Request(method: "GET", authority: "h", path: "/", query: "", fields: HTTPFields(), payloadHash: "ABC")
        #expect(throws: AWSSigV4Error.invalidPayloadHash) { try signer.sign(request, at: time) }
    }

    @Test("no secret in any description, error or dump")
    func redaction() throws {
        let token = "SESSIONTOKENVALUE"
        let creds = try credentials(token: token)
        let signer = try AWSSigV4Signer(service: "s3", region: "eu-west-1", credentials: creds)
        let signature = try signer.sign(
            AWSSigV4Request(
                method: "GET", authority: "h", path: "/", query: "", fields: HTTPFields(),
                payloadHash: AWSSigV4.unsignedPayload), at: time)
        var dumped = ""
        dump(creds, to: &dumped)
        dump(signer, to: &dumped)
        dump(signature, to: &dumped)
        let texts =
            [String(describing: creds), String(reflecting: creds), "\(signer)", String(reflecting: signer), "\(signature)", dumped]
            + [AWSSigV4Error.invalidAccessKeyID, .emptySecretAccessKey, .invalidSessionToken, .invalidRegion, .invalidService, .invalidPayloadHash]
            .map(\.description)
        for text in texts {
            #expect(!text.contains("wJalrXUtn"), "secret key in: \(text)")
            #expect(!text.contains(token), "session token in: \(text)")
            #expect(!text.contains("AKIDEXAMPLE"), "access key id in: \(text)")
        }
    }
}
