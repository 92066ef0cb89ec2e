import PosixSupport
import ScopePolicy
import SecretScan

/// The secret values and placeholders the proxy looks for in traffic (response scrub, egress
/// guard, placeholder refusal), compiled into `SecretWatch`es on demand and cached per set. The
/// values change when the store re-reads a rotated file (`update`); watches built from older
/// values are never handed out again after that.
public final class SecretValueIndex: Sendable {
    /// The most one watch's transition table may take. A set of secrets that would need more
    /// (long values in many encodings) is cut down, largest first, and each left out is named in
    /// `update`'s answer, which the proxy logs: never silently unguarded.
    public static let tableLimit = 64 * 1024 * 1024

    /// What a set of secret names is cached under: the bit set of the scopes it comes from (made
    /// per request without allocating), or the names themselves.
    public enum SetKey: Hashable, Sendable {
        case scopes(UInt64)
        case names([String])
    }

    private enum WatchKey: Hashable {
        /// Values of every secret but the `allowed` set's (when `values`), and every placeholder (when `placeholders`).
        case guarding(allowed: SetKey, values: Bool, placeholders: Bool)
        /// The values of the set's secrets.
        case scrubbing(SetKey)
    }

    private final class Snapshot: Sendable {
        let values: [String: [UInt8]]
        let exclusions: [Exclusion]
        let watches = Locked<[WatchKey: SecretWatch?]>([:])

        init(values: [String: [UInt8]], exclusions: [Exclusion]) {
            self.values = values
            self.exclusions = exclusions
        }
    }

    public let placeholders: PlaceholderTable
    private let current: Locked<Snapshot>

    public init(placeholders: PlaceholderTable = .empty, values: [String: [UInt8]] = [:]) {
        self.placeholders = placeholders
        current = Locked(Snapshot(values: [:], exclusions: []))
        _ = update(values: values)
    }

    /// A secret left out of scanning, and why (said in the log at start and at each change).
    public struct Exclusion: Sendable, Equatable, CustomStringConvertible {
        public let secret: String
        public let length: Int

        public var description: String {
            guard length >= SecretValueIndex.minimumScannedLength else {
                return "secret '\(secret)' (\(length) bytes) is too short for the response scrub and the egress guard to look for "
                    + "(under \(SecretValueIndex.minimumScannedLength) bytes it would match ordinary traffic): it is neither scrubbed nor guarded"
            }
            return "secret '\(secret)' (\(length) bytes) is too long for the response scrub and the egress guard to look for "
                + "with the other secrets (their tables would exceed \(SecretValueIndex.tableLimit / 1024 / 1024) MiB): "
                + "it is neither scrubbed nor guarded; shorten it, or set `scrub: off` and `guard: off` to say so"
        }
    }

    /// Values shorter than this are not looked for: a two-letter secret is in half of all traffic,
    /// and the guard would block it everywhere (each left out is named at start, as too long ones are).
    public static let minimumScannedLength = 8

    /// New values (after a load or a rotation). Returns the secrets that cannot be scanned.
    @discardableResult
    public func update(values: [String: [UInt8]]) -> [Exclusion] {
        var kept = values.filter { !$0.value.isEmpty }
        var excluded: [Exclusion] = []
        for (name, value) in kept.sorted(by: { $0.key < $1.key }) where value.count < Self.minimumScannedLength {
            excluded.append(Exclusion(secret: name, length: value.count))
            kept[name] = nil
        }
        // The widest watch holds every value and every placeholder: if it fits, every watch fits.
        while !kept.isEmpty, Self.estimatedTableBytes(kept.values.flatMap(Self.variants) + placeholders.secrets.keys) > Self.tableLimit {
            let largest = kept.max { ($0.value.count, $1.key) < ($1.value.count, $0.key) }!
            excluded.append(Exclusion(secret: largest.key, length: largest.value.count))
            kept[largest.key] = nil
        }
        let snapshot = Snapshot(values: kept, exclusions: excluded)
        current.withLock { $0 = snapshot }
        return excluded
    }

    /// A value as the scanner looks for it (each then in every `SecretEncoding`): as it is; in
    /// lowercase (a host name carries it so, after a redirect or DNS); escaped inside a JSON string
    /// (how the proxy itself writes a substituted value into a JSON body).
    public static func variants(of value: [UInt8]) -> [[UInt8]] {
        var variants = [value]
        let lowercase = value.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }
        if lowercase != value { variants.append(lowercase) }
        var json: [UInt8] = []
        PlaceholderSubstitution.append(value, escapedFor: .jsonBody, to: &json)
        if json != value { variants.append(json) }
        return variants
    }

    /// An upper bound of the table `SecretScanner` would build: states <= pattern bytes + 1, and
    /// one column per distinct byte (+1), 4 bytes per entry.
    static func estimatedTableBytes(_ secrets: [[UInt8]]) -> Int {
        var states = 1
        var distinct = Set<UInt8>()
        for secret in secrets {
            let forms = SecretEncoding.forms(of: secret).map(\.bytes)
            for (index, form) in forms.enumerated() {
                // A base64 form's final run extends the run before it: one more state, not a path.
                let shared = index > 0 && form.starts(with: forms[index - 1]) ? forms[index - 1].count : 0
                states += form.count - shared
                distinct.formUnion(form)
            }
        }
        return states * (distinct.count + 1) * 4
    }

    /// What the egress guard looks for in a request to an origin whose scopes send `allowed`:
    /// the value of every other secret (`values`), and every placeholder (`placeholders`). nil
    /// when there is nothing to look for.
    public func guardWatch(allowed: Set<String>, values: Bool, placeholders: Bool) -> SecretWatch? {
        guardWatch(allowedKey: .names(values ? allowed.sorted() : []), allowed: { allowed }, values: values, placeholders: placeholders)
    }

    /// `guardWatch`, cached under `allowedKey`; `allowed` is asked only when the watch is built.
    public func guardWatch(allowedKey: SetKey, allowed computeAllowed: () -> Set<String>, values: Bool,
                           placeholders: Bool) -> SecretWatch? {
        guard values || (placeholders && !self.placeholders.isEmpty) else { return nil }
        let snapshot = current.withLock { $0 }
        let key = WatchKey.guarding(allowed: values ? allowedKey : .names([]), values: values, placeholders: placeholders)
        return watch(key, snapshot) {
            let allowed = values ? computeAllowed() : []
            var names: [String] = []
            var bytes: [[UInt8]] = []
            var isPlaceholder: [Bool] = []
            if values {
                for (name, value) in snapshot.values.sorted(by: { $0.key < $1.key }) where !allowed.contains(name) {
                    for variant in Self.variants(of: value) { names.append(name); bytes.append(variant); isPlaceholder.append(false) }
                }
            }
            if placeholders {
                for (name, text) in self.placeholders.texts.sorted(by: { $0.key < $1.key }) {
                    names.append(name); bytes.append(Array(text.utf8)); isPlaceholder.append(true)
                }
            }
            return (names, bytes, isPlaceholder)
        }
    }

    /// What the response scrub masks after an exchange that sent the values of `secrets`.
    public func scrubWatch(_ secrets: Set<String>) -> SecretWatch? {
        guard !secrets.isEmpty else { return nil }
        return scrubWatch(key: .names(secrets.sorted()), secrets: { secrets })
    }

    /// `scrubWatch`, cached under `key`; `secrets` is asked only when the watch is built.
    public func scrubWatch(key: SetKey, secrets computeSecrets: () -> Set<String>) -> SecretWatch? {
        let snapshot = current.withLock { $0 }
        return watch(.scrubbing(key), snapshot) {
            let secrets = computeSecrets()
            var names: [String] = []
            var bytes: [[UInt8]] = []
            for name in secrets.sorted() {
                guard let value = snapshot.values[name] else { continue }
                for variant in Self.variants(of: value) { names.append(name); bytes.append(variant) }
            }
            return (names, bytes, names.map { _ in false })
        }
    }

    /// The secrets the current values leave out of scanning (too long; see `Exclusion`).
    public var exclusions: [Exclusion] { current.withLock { $0 }.exclusions }

    private func watch(_ key: WatchKey, _ snapshot: Snapshot,
                       build: () -> (names: [String], bytes: [[UInt8]], placeholders: [Bool])) -> SecretWatch? {
        if let cached = snapshot.watches.withLock({ $0[key] }) { return cached }
        // Built outside the lock (a large set takes milliseconds); two threads may both build the
        // same watch once, and the first stored wins.
        let parts = build()
        let built: SecretWatch? = parts.names.isEmpty ? nil
            : SecretWatch(scanner: SecretScanner(secrets: parts.bytes), secrets: parts.names, placeholders: parts.placeholders)
        return snapshot.watches.withLock { watches in
            if let existing = watches[key] { return existing }
            watches[key] = built
            return built
        }
    }
}

extension SecretWatch {
    /// The first match in one complete buffer (a header value, a target, a collected body).
    public func firstMatch(in bytes: UnsafeBufferPointer<UInt8>) -> SecretMatch? {
        var stream = scanner.makeStream()
        var found: SecretMatch?
        stream.scan(bytes) { match in if found == nil { found = match } }
        return found
    }

    public func firstMatch(in bytes: [UInt8]) -> SecretMatch? {
        bytes.withUnsafeBufferPointer { firstMatch(in: $0) }
    }

    /// Every match in one complete buffer.
    public func matches(in bytes: [UInt8]) -> [SecretMatch] { scanner.matches(in: bytes) }
}
