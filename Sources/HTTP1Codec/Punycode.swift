/// RFC 3492 Punycode, for internationalized host names in configuration (`https://bücher.example`
/// becomes `https://xn--bcher-kva.example`). Request targets are ASCII on the wire, so only the
/// config needs it. Labels are lowercased first; Unicode normalization (NFC) is not applied.
public enum Punycode {
    /// RFC 1035 §2.3.4: a label is at most 63 octets, and the encoded label is never shorter than
    /// its code points, so a longer input is refused before Punycode's arithmetic runs on it.
    static let maxLabelLength = 63
    private static let base = 36, tMin = 1, tMax = 26, skew = 38, damp = 700, initialBias = 72, initialN = 128

    /// `xn--` + the encoded label, or the label itself when it is ASCII.
    public static func toASCII(label: String) -> String? {
        let scalars = Array(label.lowercased().unicodeScalars)
        if scalars.allSatisfy({ $0.isASCII }) { return String(String.UnicodeScalarView(scalars)) }
        guard scalars.count <= maxLabelLength else { return nil }
        guard let encoded = encode(scalars.map { Int($0.value) }), encoded.utf8.count + 4 <= maxLabelLength else { return nil }
        return "xn--" + encoded
    }

    static func encode(_ input: [Int]) -> String? {
        var output = input.filter { $0 < 0x80 }.map { Character(Unicode.Scalar(UInt8($0))) }
        let basicCount = output.count
        var handled = basicCount
        if basicCount > 0 { output.append("-") }
        var n = initialN, delta = 0, bias = initialBias
        while handled < input.count {
            guard let next = input.filter({ $0 >= n }).min() else { return nil }
            let (product, overflow) = (next - n).multipliedReportingOverflow(by: handled + 1)
            guard !overflow else { return nil }
            delta += product
            n = next
            for codePoint in input {
                if codePoint < n { delta += 1 }
                if codePoint == n {
                    var q = delta
                    var k = base
                    while true {
                        let t = k <= bias ? tMin : (k >= bias + tMax ? tMax : k - bias)
                        if q < t { break }
                        output.append(digit(t + (q - t) % (base - t)))
                        q = (q - t) / (base - t)
                        k += base
                    }
                    output.append(digit(q))
                    bias = adapt(delta, handled + 1, handled == basicCount)
                    delta = 0
                    handled += 1
                }
            }
            delta += 1
            n += 1
        }
        return String(output)
    }

    private static func digit(_ value: Int) -> Character {
        Character(Unicode.Scalar(UInt8(value < 26 ? value + 97 : value + 22)))
    }

    private static func adapt(_ delta: Int, _ count: Int, _ first: Bool) -> Int {
        var delta = first ? delta / damp : delta / 2
        delta += delta / count
        var k = 0
        while delta > ((base - tMin) * tMax) / 2 {
            delta /= base - tMin
            k += base
        }
        return k + (base - tMin + 1) * delta / (delta + skew)
    }
}
