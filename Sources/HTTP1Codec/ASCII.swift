// Byte classes from RFC 9110 §5.6.2 (tchar) and §5.5 (field values), as lookup tables so the
// head parser never allocates to classify a byte.

enum ASCII {
    static let cr: UInt8 = 0x0D
    static let lf: UInt8 = 0x0A
    static let space: UInt8 = 0x20
    static let tab: UInt8 = 0x09
    static let colon: UInt8 = 0x3A

    /// tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA
    static let isTokenChar: [Bool] = {
        var table = [Bool](repeating: false, count: 256)
        for byte in UInt8(ascii: "0")...UInt8(ascii: "9") { table[Int(byte)] = true }
        for byte in UInt8(ascii: "a")...UInt8(ascii: "z") { table[Int(byte)] = true }
        for byte in UInt8(ascii: "A")...UInt8(ascii: "Z") { table[Int(byte)] = true }
        for char in "!#$%&'*+-.^_`|~".utf8 { table[Int(char)] = true }
        return table
    }()

    /// field-vchar / SP / HTAB, with obs-text (0x80-0xFF) allowed as RFC 9110 permits.
    /// Everything else (NUL, CR, LF, other controls, DEL) is refused.
    static let isFieldValueChar: [Bool] = {
        var table = [Bool](repeating: false, count: 256)
        table[Int(tab)] = true
        for byte in 0x20...0x7E { table[byte] = true }
        for byte in 0x80...0xFF { table[byte] = true }
        return table
    }()

    @inline(__always)
    static func lowercased(_ byte: UInt8) -> UInt8 {
        (byte >= 0x41 && byte <= 0x5A) ? byte | 0x20 : byte
    }

    /// Case-insensitive ASCII equality without allocating; `lowercase` must already be lowercase.
    @inline(__always)
    static func equalsIgnoringCase(_ value: String, lowercase: String) -> Bool {
        var lhs = value.utf8.makeIterator()
        var rhs = lowercase.utf8.makeIterator()
        while true {
            switch (lhs.next(), rhs.next()) {
            case (nil, nil): return true
            case let (a?, b?): if lowercased(a) != b { return false }
            default: return false
            }
        }
    }

    /// Bytes -> String, one Unicode scalar per byte (ISO-8859-1), so obs-text round-trips unchanged.
    static func latin1String<C: Collection>(_ bytes: C) -> String where C.Element == UInt8 {
        if bytes.allSatisfy({ $0 < 0x80 }) {
            return String(decoding: bytes, as: UTF8.self)
        }
        var result = String.UnicodeScalarView()
        for byte in bytes { result.append(Unicode.Scalar(byte)) }
        return String(result)
    }

    /// The inverse of `latin1String`. Scalars above 0xFF cannot come from the wire; they are
    /// written as `?` rather than silently widened.
    static func appendLatin1(_ string: String, to buffer: inout [UInt8]) {
        var allASCII = true
        for byte in string.utf8 where byte >= 0x80 { allASCII = false; break }
        if allASCII {
            buffer.append(contentsOf: string.utf8)
            return
        }
        for scalar in string.unicodeScalars {
            buffer.append(scalar.value <= 0xFF ? UInt8(scalar.value) : UInt8(ascii: "?"))
        }
    }
}
