// Byte classes from RFC 9110 §5.6.2 (tchar) and §5.5 (field values), as lookup tables so the
// head parser never allocates to classify a byte.

@usableFromInline
enum ASCII {
    static let cr: UInt8 = 0x0D
    static let lf: UInt8 = 0x0A
    static let space: UInt8 = 0x20
    static let tab: UInt8 = 0x09
    static let colon: UInt8 = 0x3A

    /// tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA
    /// (a switch, not a lookup table: a static table costs a `swift_once` check on every byte).
    @inline(__always)
    static func isTokenChar(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: true
        case 0x21, 0x23, 0x24, 0x25, 0x26, 0x27, 0x2A, 0x2B, 0x2D, 0x2E, 0x5E, 0x5F, 0x60, 0x7C, 0x7E: true
        default: false
        }
    }

    /// RFC 3986 unreserved: ALPHA / DIGIT / "-" / "." / "_" / "~".
    @inline(__always)
    static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A, 0x2D, 0x2E, 0x5F, 0x7E: true
        default: false
        }
    }

    /// field-vchar / SP / HTAB, with obs-text (0x80-0xFF) allowed as RFC 9110 permits.
    /// Everything else (NUL, CR, LF, other controls, DEL) is refused.
    @inline(__always)
    static func isFieldValueChar(_ byte: UInt8) -> Bool {
        byte == tab || (byte >= 0x20 && byte != 0x7F)
    }

    @inline(__always)
    static func lowercased(_ byte: UInt8) -> UInt8 {
        (byte >= 0x41 && byte <= 0x5A) ? byte | 0x20 : byte
    }

    /// A field name ASCII-lowercased (names are tokens: no Unicode case mapping needed), without a
    /// new string when it already is.
    static func lowercasedName(_ name: String) -> String {
        withUTF8(name) { bytes in
            guard bytes.contains(where: { $0 >= 0x41 && $0 <= 0x5A }) else { return name }
            // Written in place: no intermediate array (names of up to 15 bytes stay off the heap).
            return String(unsafeUninitializedCapacity: bytes.count) { buffer in
                for index in bytes.indices { buffer[index] = lowercased(bytes[index]) }
                return bytes.count
            }
        }
    }

    /// `body` over the string's UTF-8 as one buffer. Native strings (small ones included) have
    /// one, so this is a pointer, not a copy; the per-request field lookups run on it instead of
    /// on String.UTF8View's index-checked iterators (which cost several times as much per byte).
    @inline(__always)
    static func withUTF8<R>(_ string: String, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        if let result = string.utf8.withContiguousStorageIfAvailable(body) { return result }
        var native = string
        return native.withUTF8(body)
    }

    /// Case-insensitive ASCII equality without allocating; `lowercase` must already be lowercase.
    @inline(__always)
    static func equalsIgnoringCase(_ value: String, lowercase: String) -> Bool {
        guard value.utf8.count == lowercase.utf8.count else { return false }
        return withUTF8(value) { bytes in equalsIgnoringCase(bytes, lowercase: lowercase) }
    }

    static func equalsIgnoringCase<C: Collection>(_ bytes: C, lowercase: String) -> Bool where C.Element == UInt8 {
        if let result = bytes.withContiguousStorageIfAvailable({ buffer in
            withUTF8(lowercase) { expected in
                guard buffer.count == expected.count else { return false }
                for index in 0..<buffer.count where lowercased(buffer[index]) != expected[index] { return false }
                return true
            }
        }) {
            return result
        }
        var rhs = lowercase.utf8.makeIterator()
        for byte in bytes {
            guard let expected = rhs.next(), lowercased(byte) == expected else { return false }
        }
        return rhs.next() == nil
    }

    /// Calls `body` with each comma-separated member of a list value (RFC 9110 §5.6.1), OWS
    /// trimmed and empty members skipped, as a byte slice; stops early when `body` returns false.
    @inline(__always)
    static func forEachListMember(_ value: String, _ body: (UnsafeBufferPointer<UInt8>.SubSequence) -> Bool) {
        withUTF8(value) { bytes in
            var start = 0
            while start <= bytes.count {
                var end = start
                while end < bytes.count, bytes[end] != UInt8(ascii: ",") { end += 1 }
                var lower = start, upper = end
                while lower < upper, bytes[lower] == space || bytes[lower] == tab { lower += 1 }
                while upper > lower, bytes[upper - 1] == space || bytes[upper - 1] == tab { upper -= 1 }
                if upper > lower, !body(bytes[lower..<upper]) { return }
                start = end + 1
            }
        }
    }

    /// Bytes -> String, one Unicode scalar per byte (ISO-8859-1), so obs-text round-trips unchanged.
    @inlinable
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
        let appended: Bool = withUTF8(string) { bytes in
            var high: UInt8 = 0
            for byte in bytes { high |= byte }
            guard high < 0x80 else { return false }
            buffer.append(contentsOf: bytes)
            return true
        }
        if appended { return }
        for scalar in string.unicodeScalars {
            buffer.append(scalar.value <= 0xFF ? UInt8(scalar.value) : UInt8(ascii: "?"))
        }
    }
}
