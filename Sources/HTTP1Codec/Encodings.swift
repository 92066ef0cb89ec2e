/// RFC 4648 base64, for Basic credentials and the log tripwire (no Foundation on the data path).
public enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    public static func encode(_ bytes: [UInt8]) -> String {
        var output: [UInt8] = []
        output.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index < bytes.count {
            let b0 = bytes[index], b1 = index + 1 < bytes.count ? bytes[index + 1] : 0, b2 = index + 2 < bytes.count ? bytes[index + 2] : 0
            output.append(alphabet[Int(b0 >> 2)])
            output.append(alphabet[Int((b0 & 0x03) << 4 | b1 >> 4)])
            output.append(index + 1 < bytes.count ? alphabet[Int((b1 & 0x0F) << 2 | b2 >> 6)] : UInt8(ascii: "="))
            output.append(index + 2 < bytes.count ? alphabet[Int(b2 & 0x3F)] : UInt8(ascii: "="))
            index += 3
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// base64url without padding (RFC 4648 §5), the form tokens and JWTs carry.
    public static func encodeURLSafe(_ bytes: [UInt8]) -> String {
        var output = Array(encode(bytes).utf8)
        while output.last == UInt8(ascii: "=") { output.removeLast() }
        for index in output.indices {
            if output[index] == UInt8(ascii: "+") { output[index] = UInt8(ascii: "-") }
            if output[index] == UInt8(ascii: "/") { output[index] = UInt8(ascii: "_") }
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Decodes standard base64 (padding optional); nil on any other character.
    public static func decode(_ text: String) -> [UInt8]? {
        var values: [UInt8] = []
        for byte in text.utf8 {
            if byte == UInt8(ascii: "=") { break }
            guard let value = alphabet.firstIndex(of: byte) else { return nil }
            values.append(UInt8(value))
        }
        var output: [UInt8] = []
        var index = 0
        while index + 1 < values.count {
            output.append(values[index] << 2 | values[index + 1] >> 4)
            if index + 2 < values.count { output.append(values[index + 1] << 4 | values[index + 2] >> 2) }
            if index + 3 < values.count { output.append(values[index + 2] << 6 | values[index + 3]) }
            index += 4
        }
        return output
    }
}

public enum PercentEncoding {
    /// `%XX` sequences decoded (invalid ones kept as they are); with `plusAsSpace`, `+` becomes a
    /// space as in form-encoded query strings.
    public static func decode(_ text: Substring, plusAsSpace: Bool = false) -> [UInt8] {
        var output: [UInt8] = []
        var bytes = Array(text.utf8)[...]
        while let byte = bytes.popFirst() {
            if byte == UInt8(ascii: "%"), bytes.count >= 2, let high = hexValue(bytes[bytes.startIndex]),
                let low = hexValue(bytes[bytes.startIndex + 1])
            {
                output.append(high << 4 | low)
                bytes = bytes.dropFirst(2)
            } else if plusAsSpace, byte == UInt8(ascii: "+") {
                output.append(UInt8(ascii: " "))
            } else {
                output.append(byte)
            }
        }
        return output
    }

    /// Every byte but RFC 3986 unreserved ones (`A-Z a-z 0-9 - . _ ~`) as `%XX`, uppercase.
    public static func encode(_ bytes: [UInt8]) -> String {
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        let hex = Array("0123456789ABCDEF".utf8)
        for byte in bytes {
            if ASCII.isUnreserved(byte) {
                output.append(byte)
            } else {
                output += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            }
        }
        return String(decoding: output, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: byte - 0x30
        case 0x41...0x46: byte - 0x41 + 10
        case 0x61...0x66: byte - 0x61 + 10
        default: nil
        }
    }
}
