import HTTP1Codec
import ScopePolicy
import Synchronization

/// Everything the data path needs from the scope layer, as one immutable value. A reload builds a
/// new one and swaps it in whole: an exchange keeps the context it started with.
public final class ScopeContext: Sendable {
    public let policy: ScopePolicy
    public let redirects: RedirectPolicy
    public let secrets: any SecretLookup
    /// Name of the secret holding the proxy password; nil: no proxy authentication.
    public let proxyAuthSecret: String?

    public init(policy: ScopePolicy, redirects: RedirectPolicy = RedirectPolicy(), secrets: any SecretLookup = StaticSecrets([:]),
                proxyAuthSecret: String? = nil) {
        self.policy = policy
        self.redirects = redirects
        self.secrets = secrets
        self.proxyAuthSecret = proxyAuthSecret
    }

    /// The embedded default: no scope, every sensitive header stripped everywhere.
    public static let stripEverything = ScopeContext(policy: .stripEverything)

    /// Proxy-Authorization check: `Basic base64(any-user:secret)` or `Bearer secret`, compared in
    /// constant time. True when no proxy password is configured.
    func acceptsProxyAuthorization(_ value: String?) -> Bool {
        guard let proxyAuthSecret else { return true }
        guard let expected = secrets.value(of: proxyAuthSecret)?.exposedValue, let value else { return false }
        let presented: String
        if value.count > 7, value.prefix(7).lowercased() == "bearer " {
            presented = String(value.dropFirst(7)).trimmingSpaces()
        } else if value.count > 6, value.prefix(6).lowercased() == "basic ",
                  let decoded = Base64.decode(String(value.dropFirst(6)).trimmingSpaces()),
                  let colon = decoded.firstIndex(of: UInt8(ascii: ":")) {
            presented = String(decoding: decoded[(colon + 1)...], as: UTF8.self)
        } else {
            return false
        }
        return Self.constantTimeEqual(Array(presented.utf8), Array(expected.utf8))
    }

    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var difference = UInt8(a.count == b.count ? 0 : 1)
        for index in 0..<max(a.count, b.count) {
            difference |= (index < a.count ? a[index] : 0) ^ (index < b.count ? b[index] : 0)
        }
        return difference == 0
    }
}

/// The current context, read by every worker at the start of each exchange.
public final class ScopeContextHolder: Sendable {
    private let current: Mutex<ScopeContext>

    public init(_ context: ScopeContext = .stripEverything) {
        current = Mutex(context)
    }

    public var context: ScopeContext { current.withLock { $0 } }

    public func replace(with context: ScopeContext) {
        current.withLock { $0 = context }
    }
}

extension String {
    func trimmingSpaces() -> String {
        var slice = Substring(self)
        while slice.first == " " { slice.removeFirst() }
        while slice.last == " " { slice.removeLast() }
        return String(slice)
    }
}

/// RFC 4648 base64, for Basic credentials (no Foundation on the data path).
enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
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

    static func decode(_ text: String) -> [UInt8]? {
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
