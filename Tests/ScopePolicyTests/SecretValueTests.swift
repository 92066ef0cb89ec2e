import HTTP1Codec
import Testing

@testable import ScopePolicy

/// `é` in UTF-8, `€` in UTF-8 (above U+00FF), then bytes that are not UTF-8 at all.
private let secretBytes: [UInt8] =
    Array("CANARY-bytes-".utf8) + [0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0xE9, 0xFF] + Array("-\(UInt32.random(in: 0...UInt32.max))".utf8)

@Suite("Secret values are bytes")
struct SecretValueTests {
    @Test("a rendered template serializes to the literal's bytes and the secret's exact bytes")
    func renderedBytesOnTheWire() throws {
        let template = try HeaderTemplate.parse("Bearer ${token}")
        let rendered = try template.render(StaticSecrets(bytes: ["token": secretBytes])).get()
        #expect(rendered.exposedBytes == Array("Bearer ".utf8) + secretBytes)
        let head = RequestHead(
            method: "GET", target: "/", version: .http1_1,
            fields: HTTPFields([HTTPField(name: "Authorization", value: rendered.exposedFieldValue)]))
        let wire = head.serialized()
        let expected = Array("Authorization: Bearer ".utf8) + secretBytes + [0x0D, 0x0A]
        let found = (0...(wire.count - expected.count)).contains { wire[$0..<($0 + expected.count)].elementsEqual(expected) }
        #expect(found, "the serialized head carries the secret's bytes unchanged")
        #expect(HTTPField.wireBytes(of: rendered.exposedFieldValue) == rendered.exposedBytes)
    }

    @Test("text given to SecretValue and StaticSecrets is its UTF-8 bytes")
    func textIsUTF8() {
        #expect(SecretValue("é€").exposedBytes == [0xC3, 0xA9, 0xE2, 0x82, 0xAC])
        #expect(StaticSecrets(["a": "é"]).value(of: "a")?.exposedBytes == [0xC3, 0xA9])
    }

    @Test("neither description, debug description nor reflection shows a byte of the value")
    func nothingShown() {
        let value = SecretValue(bytes: secretBytes)
        #expect("\(value)" == "<redacted>")
        #expect(String(reflecting: value) == "<redacted>")
        var dumped = ""
        dump(value, to: &dumped)
        #expect(!dumped.contains("CANARY"), "dump shows no children")
        #expect(Mirror(reflecting: value).children.isEmpty)
    }
}
