/// A secret's value. Its description never shows the value, so a secret interpolated into a log
/// line, an error or a test failure prints `<redacted>`.
public struct SecretValue: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The bytes to put on the wire. Read this only where the value is really needed.
    public let exposedValue: String

    public init(_ value: String) {
        exposedValue = value
    }

    public var description: String { "<redacted>" }
    public var debugDescription: String { "<redacted>" }
}

/// Where the policy gets current secret values; the store re-reads rotated files behind it.
public protocol SecretLookup: Sendable {
    func value(of name: String) -> SecretValue?
}

/// A fixed set of values (tests, and the `env` source, which never changes while running).
public struct StaticSecrets: SecretLookup {
    private let values: [String: SecretValue]

    public init(_ values: [String: String]) {
        self.values = values.mapValues(SecretValue.init)
    }

    public func value(of name: String) -> SecretValue? { values[name] }
}
