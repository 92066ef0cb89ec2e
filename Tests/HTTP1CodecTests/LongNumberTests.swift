import Foundation
import Testing

@testable import HTTP1Codec

/// Numbers from outside are read with a bound before any arithmetic (docs/security-model.md,
/// "Strict parsing"): a long run of digits is refused, never an overflow that ends the process.
/// A trap here crashes the test process, so each table is one input per argument.
enum LongNumbers {
    /// Digit runs past every integer width, the edges of Int64 and UInt64, leading zeros, signs
    /// and exponents.
    static let forms = [
        String(repeating: "7", count: 25), String(repeating: "9", count: 40), "9223372036854775807",
        "9223372036854775808", "18446744073709551615", "18446744073709551616", "0000000000000000000000001",
        "00000000000000000000000000000000256", "-1", "+1", "1e999", "1E400", "0x" + String(repeating: "f", count: 20),
    ]
}

@Suite("Long numbers in targets, hosts and ports")
struct LongNumberTests {
    @Test(
        "a bounded decimal stops at its maximum: 1*DIGIT only, any length, never past the bound",
        arguments: [
            ("0", 255, 0), ("255", 255, 255), ("256", 255, nil), ("007", 255, 7), ("", 255, nil), ("+1", 255, nil),
            ("-1", 255, nil), (" 1", 255, nil), ("1 ", 255, nil), ("1e3", 65535, nil), ("9", 5, nil), ("5", 5, 5),
            ("9223372036854775807", Int.max, Int.max), ("9223372036854775808", Int.max, nil),
            ("18446744073709551616", Int.max, nil), (String(repeating: "7", count: 25), Int.max, nil),
            (String(repeating: "0", count: 40) + "42", 65535, 42),
        ] as [(String, Int, Int?)])
    func boundedDecimal(_ text: String, _ maximum: Int, _ expected: Int?) {
        #expect(BoundedDecimal.parse(text.utf8, maximum: maximum) == expected, "\(text)")
    }

    @Test("a bounded decimal agrees with comparing digit strings, for 3 000 seeded random runs and bounds")
    func boundedDecimalProperty() {
        var generator = SeededGenerator(seed: 0x5EED_D1)
        for _ in 0..<3000 {
            let length = Int.random(in: 0...40, using: &generator)
            let digits = String((0..<length).map { _ in Character(Unicode.Scalar(UInt8.random(in: 0x30...0x39, using: &generator))) })
            let maximum = [Int.max, 65535, 255, 86_400, Int.random(in: 0...Int.max, using: &generator)].randomElement(using: &generator)!
            // The reference never does arithmetic: leading zeros dropped, then length and text compared.
            let significant = String(digits.drop { $0 == "0" })
            let bound = String(maximum)
            let fits = significant.count < bound.count || (significant.count == bound.count && significant <= bound)
            let expected = digits.isEmpty || !fits ? nil : Int(significant.isEmpty ? "0" : significant)
            #expect(BoundedDecimal.parse(digits.utf8, maximum: maximum) == expected, "\(digits) <= \(maximum)")
            #expect(BoundedDecimal.parseClamped(digits.utf8, maximum: maximum) == (digits.isEmpty ? nil : expected ?? maximum), "\(digits)")
        }
    }

    @Test(
        "a clamped decimal reads any run of digits, a value past the bound as the bound",
        arguments: [
            ("0", 0), ("31536000", 31_536_000), ("31536001", 31_536_000), ("9223372036854775808", 31_536_000),
            (String(repeating: "9", count: 40), 31_536_000), ("0000000000000000000000001", 1),
        ] as [(String, Int)])
    func clampedDecimal(_ text: String, _ expected: Int) {
        #expect(BoundedDecimal.parseClamped(text.utf8, maximum: 31_536_000) == expected, "\(text)")
    }

    @Test(
        "a clamped decimal still refuses what is not 1*DIGIT", arguments: ["", "-1", "+1", "1e999", "12a", String(repeating: "9", count: 30) + "x"])
    func clampedRefuses(_ text: String) {
        #expect(BoundedDecimal.parseClamped(text.utf8, maximum: 100) == nil, "\(text)")
    }

    /// Every place a number sits in a host or authority, with every long form in it.
    /// A form inside the host, then the numeric forms as its last label (which makes the whole
    /// host a number to a browser; `1.2.3.1e999` is a DNS name, rightly accepted).
    static let hosts: [String] =
        LongNumbers.forms.flatMap { n in ["128.0.\(n).1", "\(n).0.0.1", "[\(n)]"] }
        + LongNumbers.forms.filter { Host.endsInNumber(Array($0.utf8)[...]) }.flatMap { n in
            ["1.2.3.\(n)", "\(n)", "a.\(n)", "\(n).\(n).\(n).\(n)", "1.2.\(n)", "0x7f.\(n)"]
        }

    @Test("a long number in a dotted host is refused, in targets, Host values and config origins", arguments: hosts)
    func dottedHost(_ host: String) {
        #expect(throws: TargetParseError.self, "\(host)") { try RequestTarget.parse("http://\(host)/", method: "GET") }
        #expect(throws: TargetParseError.self, "\(host)") { try RequestTarget.parse("http://u@\(host):8080/x", method: "GET") }
        #expect(throws: TargetParseError.self, "\(host)") { try RequestTarget.parse("\(host):443", method: "CONNECT") }
        #expect(throws: TargetParseError.self, "\(host)") { try RequestTarget.parseAuthority(Substring(host)) }
        #expect(throws: TargetParseError.self, "\(host)") { try Origin.parse("https://\(host)") }
        #expect(throws: TargetParseError.self, "\(host)") { try Host.parse(Substring(host)) }
    }

    @Test("a long number as a port or inside an IPv6 literal is refused", arguments: LongNumbers.forms)
    func portAndIPv6(_ n: String) {
        #expect(throws: TargetParseError.self, "\(n)") { try RequestTarget.parse("http://a.example:\(n)/", method: "GET") }
        #expect(throws: TargetParseError.self, "\(n)") { try RequestTarget.parse("a.example:\(n)", method: "CONNECT") }
        #expect(throws: TargetParseError.self, "\(n)") { try RequestTarget.parse("http://[::\(n)]/", method: "GET") }
        #expect(throws: TargetParseError.self, "\(n)") { try RequestTarget.parse("http://[::ffff:1.2.3.\(n)]/", method: "GET") }
        #expect(ListenAddress.parse("127.0.0.1:\(n)") == nil, "\(n)")
    }

    @Test("a listen port is 1*DIGIT: no sign", arguments: ["127.0.0.1:+80", "127.0.0.1:-0", "127.0.0.1:", "[::1]:+8080"])
    func listenPortSign(_ text: String) {
        #expect(ListenAddress.parse(text) == nil, "\(text)")
    }

    @Test("an internationalized label longer than DNS allows is refused before Punycode's arithmetic")
    func longUnicodeLabel() {
        #expect(Punycode.toASCII(label: String(repeating: "ü", count: 64)) == nil)
        #expect(Punycode.toASCII(label: String(repeating: "\u{10FFFF}", count: 5000)) == nil)
        #expect(Punycode.toASCII(label: "bücher") == "xn--bcher-kva")
    }

    /// Digit accumulations in the sources (`value * 10 + digit`) outside `BoundedDecimal`, each
    /// with the bound that comes before its arithmetic. A new one fails this test: read the number
    /// with `BoundedDecimal`, or bound it first and add it here with the reason.
    static let boundedAccumulations: [String: String] = [
        "HTTP1Codec/Origin.swift": "an IPv4 octet: at most three digits, checked before the multiply",
        "HTTP1Codec/HeadParser.swift": "a status code: exactly three digits",
        "HTTP1Codec/BodyFraming.swift": "Content-Length: at most 18 digits, checked before the multiply",
        "ScopePolicy/CIDR.swift": "an IPv4 part: at most three digits, checked before the multiply",
        "ProxyCore/RFC3339.swift": "a date or time field: at most four digits (fixed positions), then range-checked",
        "ProxyCore/AWSTemporaryCredentials.swift": "a packed expiration: at most 18 digits, checked before the reduce",
    ]

    @Test("decimal numbers are accumulated only where a bound comes first")
    func accumulationsAreBounded() throws {
        let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources")
        let files = try #require(FileManager.default.enumerator(atPath: sources.path)).compactMap { $0 as? String }
            .filter { $0.hasSuffix(".swift") && $0 != "HTTP1Codec/BoundedDecimal.swift" }
        #expect(files.count > 50, "the sources were found")
        let accumulation = try Regex(#"[*]\s*(10|16)\s*[+]|reduce\(0\) *\{ *\$0 *[*]"#)
        var found: Set<String> = []
        for file in files {
            let text = try String(contentsOfFile: sources.appendingPathComponent(file).path, encoding: .utf8)
            for line in text.split(separator: "\n") where !line.trimmingCharacters(in: .whitespaces).hasPrefix("//") {
                if line.contains(accumulation) { found.insert(file) }
            }
        }
        #expect(
            found == Set(Self.boundedAccumulations.keys),
            "unbounded digit accumulation in: \(found.subtracting(Self.boundedAccumulations.keys).sorted())")
    }
}

/// xorshift64*: the same sequence every run.
private struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed == 0 ? 1 : seed }
    mutating func next() -> UInt64 {
        state ^= state >> 12
        state ^= state << 25
        state ^= state >> 27
        return state &* 2_685_821_657_736_338_717
    }
}
