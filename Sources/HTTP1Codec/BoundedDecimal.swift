/// Decimal numbers from outside (request heads, Locations, config, a token endpoint's answer, a
/// listen address) read with a bound before any arithmetic: the value never passes `maximum`, so
/// nothing computed from it can overflow, whatever the length of the digit run. Swift traps on
/// overflow, and one trap ends the process for every client (docs/security-model.md, "Strict
/// parsing").
public enum BoundedDecimal {
    /// 1*DIGIT (ASCII `0`-`9` only: no sign, space, exponent or radix prefix) as a value in
    /// `0...maximum`; nil when there is no digit, a byte is not a digit, or the value passes
    /// `maximum`. Leading zeros are read (`007` is 7): callers that refuse them, or cap the
    /// number of digits, check that themselves.
    @inlinable
    public static func parse<Digits: Sequence>(_ digits: Digits, maximum: Int) -> Int? where Digits.Element == UInt8 {
        var value = 0, any = false
        for byte in digits {
            guard let next = step(value, byte), next <= maximum else { return nil }
            value = next
            any = true
        }
        return any ? value : nil
    }

    /// 1*DIGIT as above, but a value past `maximum` is read as `maximum` (for lifetimes, where
    /// "longer than we keep anything" means "as long as we keep anything"); still nil for no
    /// digit or a byte that is not one.
    @inlinable
    public static func parseClamped<Digits: Sequence>(_ digits: Digits, maximum: Int) -> Int? where Digits.Element == UInt8 {
        var value = 0, any = false
        for byte in digits {
            guard byte >= 0x30, byte <= 0x39 else { return nil }
            any = true
            // Past the bound the value stays there; the remaining bytes are only checked.
            if value < maximum { value = min(maximum, step(value, byte) ?? maximum) }
        }
        return any ? value : nil
    }

    /// `value * 10 + digit`, nil for a byte that is not a digit or on overflow. Inlinable with its
    /// callers, so a port or an octet read on every request is specialized where it is read.
    @inlinable @inline(__always)
    static func step(_ value: Int, _ byte: UInt8) -> Int? {
        guard byte >= 0x30, byte <= 0x39 else { return nil }
        let (times, overflowed) = value.multipliedReportingOverflow(by: 10)
        let (next, carried) = times.addingReportingOverflow(Int(byte - 0x30))
        return overflowed || carried ? nil : next
    }
}
