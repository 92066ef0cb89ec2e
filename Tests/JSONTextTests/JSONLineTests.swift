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

    @Test("every byte that needs escaping is found at every offset of an 8-byte word")
    func escapesAtEveryOffset() throws {
        // The scan skips eight clean bytes at a time: a special byte in any lane, and in the tail
        // after the last whole word, must still be escaped.
        for special: UInt8 in Array(0..<0x20) + [0x22, 0x5C, 0x7F] {
            for length in 1...19 {
                for position in 0..<length {
                    var bytes = [UInt8](repeating: UInt8(ascii: "a"), count: length)
                    bytes[position] = special
                    try roundTrip(String(decoding: bytes, as: UTF8.self))
                }
            }
        }
        var clean: [UInt8] = []
        JSONLine.appendQuoted("é日本 plain text of some length \u{1F600}", to: &clean)
        #expect(String(decoding: clean, as: UTF8.self) == "\"é日本 plain text of some length \u{1F600}\"")
    }

    @Test("decimals, with and without leading zeros")
    func decimals() {
        for (value, digits, expected) in [
            (0, 1, "0"), (7, 3, "007"), (1234, 2, "1234"), (UInt64.max, 1, "18446744073709551615"), (10, 1, "10"), (5, 0, "5"),
        ] {
            var bytes: [UInt8] = []
            JSONLine.appendDecimal(UInt64(value), minimumDigits: digits, to: &bytes)
            #expect(String(decoding: bytes, as: UTF8.self) == expected)
        }
    }

    private func roundTrip(_ text: String) throws {
        var line = JSONLine()
        line.string("k", text)
        let parsed = try JSONSerialization.jsonObject(with: Data(line.finishLine())) as? [String: String]
        #expect(parsed?["k"] == text, "\(text.debugDescription)")
    }
}
