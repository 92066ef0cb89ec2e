import HTTP1Codec

/// A secret's value: the exact bytes it was read as (a file or store entry minus one trailing
/// newline, an environment variable's bytes), never re-encoded. Its description never shows the
/// value, so a secret interpolated into a log line, an error or a test failure prints `<redacted>`;
/// it has no reflected children either, so `dump` and test-failure expansions show nothing.
public struct SecretValue: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The bytes to put on the wire. Read this only where the value is really needed.
    public let exposedBytes: [UInt8]

    public init(bytes: [UInt8]) {
        exposedBytes = bytes
    }

    /// A value given as text (tests, the environment of a test harness): its UTF-8 bytes.
    public init(_ text: String) {
        exposedBytes = Array(text.utf8)
    }

    /// The value as a header field value for `HTTPFields`: one scalar per byte, so the codec's
    /// serializer writes `exposedBytes` unchanged (see `HTTPField.value(wireBytes:)`). Not for
    /// display, and not UTF-8: `Array(exposedFieldValue.utf8)` is not the secret's bytes.
    public var exposedFieldValue: String { HTTPField.value(wireBytes: exposedBytes) }

    public var description: String { "<redacted>" }
    public var debugDescription: String { "<redacted>" }
    public var customMirror: Mirror { Mirror(self, children: [:]) }
}

/// Where the policy gets current secret values; the store re-reads rotated files behind it.
public protocol SecretLookup: Sendable {
    func value(of name: String) -> SecretValue?
    /// Every value there is now, by name (the scrub and the egress guard compile them).
    var currentValues: [String: SecretValue] { get }
}

/// A fixed set of values (tests, and the `env` source, which never changes while running).
public struct StaticSecrets: SecretLookup {
    private let values: [String: SecretValue]

    /// Values given as text are their UTF-8 bytes.
    public init(_ values: [String: String]) {
        self.values = values.mapValues(SecretValue.init)
    }

    public init(bytes values: [String: [UInt8]]) {
        self.values = values.mapValues(SecretValue.init(bytes:))
    }

    public func value(of name: String) -> SecretValue? { values[name] }
    public var currentValues: [String: SecretValue] { values }
}
