/// RFC 3339 §5.6 timestamps (`2026-12-02T10:22:26Z`, `2026-12-02T10:22:26.123+01:00`) as seconds
/// since the Unix epoch: the expiry a credential source states (`expires_at` of a command or of a
/// GitHub installation token, `Expiration` of AWS temporary credentials). Strict and bounded: years
/// 1970 to 9999 only, every field range-checked before arithmetic, so no input can overflow; a
/// leap second (`:60`) is read as the next second. Anything else is nil, never a guess.
public enum RFC3339 {
    public static func secondsSinceEpoch(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        guard bytes.count >= 20, bytes.count <= 40 else { return nil }
        func digits(_ start: Int, _ count: Int) -> Int? {
            guard start + count <= bytes.count else { return nil }
            var value = 0
            for byte in bytes[start..<start + count] {
                guard byte >= 0x30, byte <= 0x39 else { return nil }
                value = value * 10 + Int(byte - 0x30)
            }
            return value
        }
        func byte(_ index: Int, is expected: Character) -> Bool {
            index < bytes.count && bytes[index] == expected.asciiValue!
        }
        guard let year = digits(0, 4), byte(4, is: "-"), let month = digits(5, 2), byte(7, is: "-"), let day = digits(8, 2),
            bytes[10] == UInt8(ascii: "T") || bytes[10] == UInt8(ascii: "t") || bytes[10] == UInt8(ascii: " "),
            let hour = digits(11, 2), byte(13, is: ":"), let minute = digits(14, 2), byte(16, is: ":"), let second = digits(17, 2)
        else { return nil }
        guard (1970...9999).contains(year), (1...12).contains(month), (1...daysIn(month: month, year: year)).contains(day),
            hour <= 23, minute <= 59, second <= 60
        else { return nil }
        var index = 19
        // time-secfrac: "." 1*DIGIT (ignored: expiries are compared in whole seconds).
        if byte(index, is: ".") {
            index += 1
            let start = index
            while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39 { index += 1 }
            guard index > start else { return nil }
        }
        guard index < bytes.count else { return nil }
        var offsetSeconds = 0
        switch bytes[index] {
        case UInt8(ascii: "Z"), UInt8(ascii: "z"):
            guard index + 1 == bytes.count else { return nil }
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            guard index + 6 == bytes.count, let offsetHour = digits(index + 1, 2), byte(index + 3, is: ":"),
                let offsetMinute = digits(index + 4, 2), offsetHour <= 23, offsetMinute <= 59
            else { return nil }
            offsetSeconds = (offsetHour * 60 + offsetMinute) * 60
            if bytes[index] == UInt8(ascii: "-") { offsetSeconds = -offsetSeconds }
        default:
            return nil
        }
        let days = daysFromCivil(year: year, month: month, day: day)
        return Int64(days) * 86_400 + Int64(hour * 3600 + minute * 60 + second) - Int64(offsetSeconds)
    }

    private static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
    static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let shiftedYear = month <= 2 ? year - 1 : year
        let era = shiftedYear / 400
        let yearOfEra = shiftedYear - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}
