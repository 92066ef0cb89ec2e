import Foundation
import JSONText
import Testing

@Suite("JSONLine: strings are escaped so that any JSON parser reads back the same text")
struct JSONLineTests {
    @Test("fixed cases: quotes, backslashes, every control byte, DEL, non-ASCII")
    func fixedCases() throws {
        var cases = ["", "plain", "a\"b", "back\\slash", "line\nbreak\r\ttab", "\u{7F}", "é日本\u{1F600}", "\"\\\"\\"]
        cases += (0..<0x20).map { String(UnicodeScalar(UInt8($0))) + "x" }
        for text in cases { try roundTrip(text) }
        var bytes: [UInt8] = []
        JSONLine.appendQuoted("\u{01}\"", to: &bytes)
        #expect(String(decoding: bytes, as: UTF8.self) == #""\u0001\"""#)
    }

    @Test("random strings round-trip through JSONSerialization")
    func randomStrings() throws {
        var generator = SystemRandomNumberGenerator()
        let alphabet: [Character] = ["a", "Z", "\"", "\\", "\n", "\r", "\t", "\u{0}", "\u{1F}", "\u{7F}", " ", "é", "日", "\u{1F600}", "/"]
        for _ in 0..<2000 {
            let length = Int.random(in: 0..<40, using: &generator)
            try roundTrip(String((0..<length).map { _ in alphabet.randomElement(using: &generator)! }))
        }
    }

    private func roundTrip(_ text: String) throws {
        var line = JSONLine()
        line.string("k", text)
        let parsed = try JSONSerialization.jsonObject(with: Data(line.finishLine())) as? [String: String]
        #expect(parsed?["k"] == text, "\(text.debugDescription)")
    }
}
