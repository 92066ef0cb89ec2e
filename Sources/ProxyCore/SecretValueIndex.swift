import HTTP1Codec
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

    /// A value no longer current that may still be valid somewhere (docs/security-model.md, "No
    /// oracle"): a rotated file or store value for `retiredRetention`, a replaced access token
    /// until it expires (its source passes those as `earlier`).
    private struct Retired: Sendable {
        let value: [UInt8]
        /// Monotonic milliseconds after which it is dropped.
        let until: UInt64
    }

    private final class Snapshot: Sendable {
        /// Each secret's current value (what a hop renders).
        let current: [String: [UInt8]]
        /// Values retired from `current` by earlier updates, newest last.
        let retired: [String: [Retired]]
        /// Earlier values a source still knows valid (rotated access tokens), by secret.
        let earlier: [String: [[UInt8]]]
        /// Every value looked for, by secret: the current one first, then the still-valid earlier ones.
        let values: [String: [[UInt8]]]
        let exclusions: [Exclusion]
        /// How many trailing bytes of a body the scrub and the guard hold back (`SecretHoldBack`).
        let holdBack: Int
        let watches = Locked<[WatchKey: SecretWatch?]>([:])

        init(
            current: [String: [UInt8]], retired: [String: [Retired]], earlier: [String: [[UInt8]]],
            values: [String: [[UInt8]]], exclusions: [Exclusion], holdBack: Int
        ) {
            self.current = current
            self.retired = retired
            self.earlier = earlier
            self.values = values
            self.exclusions = exclusions
            self.holdBack = holdBack
        }

        static let empty = Snapshot(current: [:], retired: [:], earlier: [:], values: [:], exclusions: [], holdBack: 0)
    }

    public let placeholders: PlaceholderTable
    private let current: Locked<Snapshot>

    /// Secrets an origin's responses are scrubbed of beyond what its scopes send now, by origin:
    /// what the proxy itself sends there (a token endpoint gets the client secret and the refresh
    /// token, and answers with the token), and after a reload what the old configuration sent
    /// there, while those values may still be valid (`until`, monotonic milliseconds; `.max`: as
    /// long as this configuration runs).
    private struct ExtraScrub: Sendable {
        let names: Set<String>
        let until: UInt64
    }

    private let extraScrub = Locked<[Origin: [ExtraScrub]]>([:])

    public init(placeholders: PlaceholderTable = .empty, values: [String: [UInt8]] = [:]) {
        self.placeholders = placeholders
        current = Locked(.empty)
        _ = update(values: values, now: 0)
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

    /// How long a file or store value stays watched after it was replaced (or its secret left the
    /// configuration): a copy of it may still be in use where it was sent.
    public static let retiredRetentionMilliseconds: UInt64 = 10 * 60 * 1000
    /// The most earlier values kept per secret (the token sources refuse to replace a token more
    /// often than that within its lifetime, so no value they handed out goes unwatched).
    public static let maxEarlierValues = 32

    /// New values (after a load, a rotation, a new access token). `current`: each secret's value
    /// now; a value it replaces stays watched for `retiredRetentionMilliseconds`. `earlier`: older
    /// values their source knows to be valid still (rotated access tokens), watched as long as it
    /// passes them. `now`: monotonic milliseconds. Returns the secrets that cannot be scanned.
    @discardableResult
    public func update(values current: [String: [UInt8]], earlier: [String: [[UInt8]]] = [:], now: UInt64) -> [Exclusion] {
        let previous = current_()
        var retired: [String: [Retired]] = [:]
        for (name, list) in previous.retired {
            let live = list.filter { $0.until > now }
            if !live.isEmpty { retired[name] = live }
        }
        for (name, old) in previous.current where !old.isEmpty && current[name] != old {
            retired[name, default: []].append(Retired(value: old, until: now &+ Self.retiredRetentionMilliseconds))
        }
        for (name, list) in retired where list.count > Self.maxEarlierValues { retired[name] = Array(list.suffix(Self.maxEarlierValues)) }
        install(current: current, retired: retired, earlier: earlier)
        return exclusions
    }

    /// Drops retired values whose time is up, and takes the token sources' still-valid earlier
    /// values (the proxy calls it every second); rebuilds the watches only when something changed.
    public func update(expiring earlier: [String: [[UInt8]]], now: UInt64) {
        expireExtraScrub(now: now)
        let snapshot = current_()
        let expired = snapshot.retired.values.contains { $0.contains { $0.until <= now } }
        guard expired || earlier != snapshot.earlier else { return }
        var retired: [String: [Retired]] = [:]
        for (name, list) in snapshot.retired {
            let live = list.filter { $0.until > now }
            if !live.isEmpty { retired[name] = live }
        }
        install(current: snapshot.current, retired: retired, earlier: earlier)
    }

    /// A new index for a reloaded configuration starts from the old one's values: what the new
    /// values replace is retired as by `update` (a reload does not forget a value still in use),
    /// and origins keep being scrubbed of what the old configuration sent them until its time is
    /// up (`scrubFormerlySent`).
    public func inherit(from previous: SecretValueIndex) {
        let snapshot = previous.current_()
        current.withLock { $0 = snapshot }
        let formerly = previous.extraScrub.withLock { $0.mapValues { $0.filter { $0.until != .max } } }.filter { !$0.value.isEmpty }
        extraScrub.withLock { extra in extra.merge(formerly) { $0 + $1 } }
    }

    /// The origins the proxy sends secrets to by itself (token endpoints), with those secrets' names:
    /// their responses are scrubbed of them whichever client asks (docs/security-model.md, "No oracle").
    public func scrubAlways(_ names: [Origin: Set<String>]) {
        extraScrub.withLock { extra in
            for (origin, set) in names where !set.isEmpty { extra[origin, default: []].append(ExtraScrub(names: set, until: .max)) }
        }
    }

    /// After a reload: what the old configuration sent each origin and the new one does not stays in
    /// that origin's scrub until `until` (the values themselves stay watched as `update` keeps them).
    public func scrubFormerlySent(_ names: [Origin: Set<String>], until: (String) -> UInt64) {
        extraScrub.withLock { extra in
            for (origin, set) in names {
                var byTime: [UInt64: Set<String>] = [:]
                for name in set { byTime[until(name), default: []].insert(name) }
                for (time, group) in byTime { extra[origin, default: []].append(ExtraScrub(names: group, until: time)) }
            }
        }
    }

    /// What `scrubAlways` was given (a reload compares it with the new configuration's).
    public var alwaysScrubbed: [Origin: Set<String>] {
        extraScrub.withLock { extra in
            extra.compactMapValues { entries in
                let names = entries.filter { $0.until == .max }.reduce(into: Set<String>()) { $0.formUnion($1.names) }
                return names.isEmpty ? nil : names
            }
        }
    }

    /// The secrets `origin`'s responses are scrubbed of besides its scopes' (empty for almost every origin).
    public func extraScrubNames(for origin: Origin) -> Set<String> {
        extraScrub.withLock { extra in
            guard let entries = extra[origin] else { return [] }
            return entries.reduce(into: Set<String>()) { $0.formUnion($1.names) }
        }
    }

    private func expireExtraScrub(now: UInt64) {
        extraScrub.withLock { extra in
            guard extra.values.contains(where: { $0.contains { $0.until <= now } }) else { return }
            extra = extra.mapValues { $0.filter { $0.until > now } }.filter { !$0.value.isEmpty }
        }
    }

    private func current_() -> Snapshot { current.withLock { $0 } }

    private func install(current: [String: [UInt8]], retired: [String: [Retired]], earlier: [String: [[UInt8]]]) {
        var all: [String: [[UInt8]]] = [:]
        for (name, value) in current where !value.isEmpty { all[name] = [value] }
        for (name, list) in retired {
            for old in list where !old.value.isEmpty && !(all[name]?.contains(old.value) ?? false) { all[name, default: []].append(old.value) }
        }
        for (name, list) in earlier {
            for old in list.suffix(Self.maxEarlierValues) where !old.isEmpty && !(all[name]?.contains(old) ?? false) {
                all[name, default: []].append(old)
            }
        }
        var excluded: [Exclusion] = []
        for (name, list) in all.sorted(by: { $0.key < $1.key }) {
            let short = list.filter { $0.count < Self.minimumScannedLength }
            guard !short.isEmpty else { continue }
            excluded.append(Exclusion(secret: name, length: short[0].count))
            let kept = list.filter { $0.count >= Self.minimumScannedLength }
            all[name] = kept.isEmpty ? nil : kept
        }
        // The widest watch holds every value and every placeholder: if it fits, every watch fits.
        while !all.isEmpty, Self.estimatedTableBytes(all.values.joined().flatMap(Self.variants) + placeholders.secrets.keys) > Self.tableLimit {
            let largest = all.max { ($0.value.map(\.count).max()!, $1.key) < ($1.value.map(\.count).max()!, $0.key) }!
            excluded.append(Exclusion(secret: largest.key, length: largest.value.map(\.count).max()!))
            all[largest.key] = nil
        }
        // The hold-back depends on the watched values' lengths only, never on their bytes: two
        // configurations whose secrets differ only in value hold back the same (no oracle). Values
        // left out above do not count: a huge file secret must not make every body wait for megabytes.
        var longest = placeholders.texts.values.map { Self.longestFormBound(length: $0.utf8.count) }.max() ?? 0
        for list in all.values { for value in list { longest = max(longest, Self.longestFormBound(length: value.count)) } }
        let snapshot = Snapshot(
            current: current, retired: retired, earlier: earlier, values: all, exclusions: excluded,
            holdBack: SecretHoldBack.bytes(longestForm: longest))
        self.current.withLock { $0 = snapshot }
    }

    /// The longest form (`variants`, then every `SecretEncoding`) a value of `length` bytes can
    /// take, whatever its bytes: its JSON escape is at most 6 bytes a byte (`\u00XX`), and that
    /// percent-encoded at most 8 (`%5Cu00XX`), base64 of it under 8 a byte plus its edges.
    public static func longestFormBound(length: Int) -> Int { 8 &* min(length, 1 << 40) &+ 8 }

    /// The hold-back of the current values (the same for every watch built from them).
    public var holdBack: Int { current_().holdBack }

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
    public func guardWatch(
        allowedKey: SetKey, allowed computeAllowed: () -> Set<String>, values: Bool,
        placeholders: Bool
    ) -> SecretWatch? {
        guard values || (placeholders && !self.placeholders.isEmpty) else { return nil }
        let snapshot = current.withLock { $0 }
        let key = WatchKey.guarding(allowed: values ? allowedKey : .names([]), values: values, placeholders: placeholders)
        return watch(key, snapshot) {
            let allowed = values ? computeAllowed() : []
            var names: [String] = []
            var bytes: [[UInt8]] = []
            var isPlaceholder: [Bool] = []
            if values {
                for (name, values) in snapshot.values.sorted(by: { $0.key < $1.key }) where !allowed.contains(name) {
                    for value in values {
                        for variant in Self.variants(of: value) { names.append(name); bytes.append(variant); isPlaceholder.append(false) }
                    }
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
                for value in snapshot.values[name] ?? [] {
                    for variant in Self.variants(of: value) { names.append(name); bytes.append(variant) }
                }
            }
            return (names, bytes, names.map { _ in false })
        }
    }

    /// The secrets the current values leave out of scanning (too long; see `Exclusion`).
    public var exclusions: [Exclusion] { current.withLock { $0 }.exclusions }

    private func watch(
        _ key: WatchKey, _ snapshot: Snapshot,
        build: () -> (names: [String], bytes: [[UInt8]], placeholders: [Bool])
    ) -> SecretWatch? {
        if let cached = snapshot.watches.withLock({ $0[key] }) { return cached }
        // Built outside the lock (a large set takes milliseconds); two threads may both build the
        // same watch once, and the first stored wins.
        let parts = build()
        let built: SecretWatch? =
            parts.names.isEmpty
            ? nil
            : SecretWatch(
                scanner: SecretScanner(secrets: parts.bytes), secrets: parts.names, placeholders: parts.placeholders,
                holdBack: snapshot.holdBack)
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
