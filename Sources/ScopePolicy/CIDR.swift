#if canImport(Glibc)
    import Glibc
#endif

/// An IP address as 16 bytes: IPv4 as its IPv4-mapped IPv6 form (`::ffff:a.b.c.d`), so that a
/// client that reaches a dual-stack listener over IPv4 (and shows as `::ffff:10.0.0.1`) is matched
/// by `10.0.0.0/8` exactly as one on an IPv4 listener.
public struct IPAddress: Sendable, Hashable, CustomStringConvertible {
    public let bytes: [UInt8]

    init(bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// From raw network-order bytes: 4 (IPv4) or 16 (IPv6; an IPv4-mapped one is IPv4).
    public init?(raw: [UInt8]) {
        switch raw.count {
        case 4: bytes = Self.mappedPrefix + raw
        case 16: bytes = raw
        default: return nil
        }
    }

    public var isIPv4: Bool { bytes.prefix(12).elementsEqual(Self.mappedPrefix) }

    static let mappedPrefix: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF]

    public static func ipv4(_ a: UInt8, _ b: UInt8, _ c: UInt8, _ d: UInt8) -> IPAddress {
        IPAddress(bytes: mappedPrefix + [a, b, c, d])
    }

    /// `10.0.0.1`, `::1`, `::ffff:10.0.0.1` (no brackets). Strict: IPv4 in exactly four decimal parts
    /// of 0-255 without leading zeros (`010.0.0.1` is octal to inet_aton and decimal to others:
    /// refused rather than guessed), no zone ids, nothing around it.
    public static func parse(_ text: String) -> IPAddress? {
        let text = Substring(text)
        guard !text.isEmpty, text.utf8.count <= 45 else { return nil }
        if !text.contains(":") { return parseIPv4(text) }
        #if canImport(Glibc)
            var raw = in6_addr()
            let parsed = String(text).withCString { inet_pton(AF_INET6, $0, &raw) }
            guard parsed == 1 else { return nil }
            return IPAddress(bytes: withUnsafeBytes(of: raw) { Array($0) })
        #else
            return nil
        #endif
    }

    static func parseIPv4(_ text: Substring) -> IPAddress? {
        var parts: [UInt8] = []
        var value = 0, digits = 0, leadingZero = false
        for byte in text.utf8 {
            if byte == UInt8(ascii: ".") {
                guard digits > 0, parts.count < 3 else { return nil }
                parts.append(UInt8(value))
                value = 0; digits = 0; leadingZero = false
                continue
            }
            guard byte >= 0x30, byte <= 0x39, digits < 3, !leadingZero else { return nil }
            if digits == 0, byte == 0x30 { leadingZero = true }
            value = value * 10 + Int(byte - 0x30)
            digits += 1
            guard value <= 255 else { return nil }
        }
        guard digits > 0, parts.count == 3 else { return nil }
        parts.append(UInt8(value))
        return .ipv4(parts[0], parts[1], parts[2], parts[3])
    }

    /// 127.0.0.0/8, ::1, and IPv4-mapped 127/8.
    public var isLoopback: Bool {
        if isIPv4 { return bytes[12] == 127 }
        return bytes == [UInt8](repeating: 0, count: 15) + [1]
    }

    public var description: String {
        if isIPv4 { return bytes[12...].map(String.init).joined(separator: ".") }
        #if canImport(Glibc)
            var raw = in6_addr()
            withUnsafeMutableBytes(of: &raw) { $0.copyBytes(from: bytes) }
            var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            guard inet_ntop(AF_INET6, &raw, &buffer, socklen_t(buffer.count)) != nil else { return "?" }
            return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        #else
            return "?"
        #endif
    }
}

/// `10.0.0.0/8`, `fd00::/8`, or a single address (`/32`, `/128`). Host bits must be zero
/// (`10.0.0.1/8` is refused: it usually means a typo, and silently widening it would let in more
/// clients than written).
public struct CIDR: Sendable, Hashable, CustomStringConvertible {
    public let network: IPAddress
    /// Over the 16-byte form: an IPv4 /8 is 96 + 8.
    public let prefixLength: Int
    public let text: String

    public enum ParseError: Error, Equatable, Sendable {
        case invalidAddress
        case invalidPrefix
        case hostBitsSet
    }

    public static func parse(_ text: String) -> Result<CIDR, ParseError> {
        guard text.utf8.count <= 64 else { return .failure(.invalidAddress) }
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = IPAddress.parse(String(parts[0])) else { return .failure(.invalidAddress) }
        let maximum = address.isIPv4 ? 32 : 128
        var length = maximum
        if parts.count == 2 {
            let digits = parts[1]
            guard !digits.isEmpty, digits.utf8.count <= 3, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                digits == "0" || !digits.hasPrefix("0"), let value = Int(digits), value <= maximum
            else {
                return .failure(.invalidPrefix)
            }
            length = value
        }
        let total = address.isIPv4 ? 96 + length : length
        guard Self.masked(address.bytes, total) == address.bytes else { return .failure(.hostBitsSet) }
        return .success(CIDR(network: address, prefixLength: total, text: text))
    }

    public func contains(_ address: IPAddress) -> Bool {
        // An IPv4 network never matches a non-mapped IPv6 address, and the reverse, by construction:
        // the mapped prefix is part of the compared bits. Byte by byte, without a masked copy: the
        // egress check runs this for every connect and every reuse of a pooled connection.
        let candidate = address.bytes, network = network.bytes
        var remaining = prefixLength
        for index in 0..<16 where remaining > 0 {
            let bits = min(8, remaining)
            let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - bits))
            if candidate[index] & mask != network[index] { return false }
            remaining -= bits
        }
        return true
    }

    static func masked(_ bytes: [UInt8], _ length: Int) -> [UInt8] {
        bytes.enumerated().map { index, byte in
            let bits = max(0, min(8, length - index * 8))
            return bits == 8 ? byte : bits == 0 ? 0 : byte & UInt8(0xFF << (8 - bits) & 0xFF)
        }
    }

    public var description: String { text }
}
