import ProxyCore
import SecretScan

/// What a pump that inspects its bytes keeps between pieces: the response scrubber or the request
/// egress guard, with the buffers both reuse for every piece.
///
/// A class, not a struct: the pump lives in an optional on the leg and is mutated in place, and
/// the scrubber's and guard's buffers must be too (a copied struct would copy them per piece).
final class BodyFilter {
    enum Kind {
        /// Response: values this exchange injected or substituted are masked with `*`.
        case scrub
        /// Request: values (and placeholders) the hop's origin may not receive stop the body.
        case guardEgress
    }

    let kind: Kind
    let watch: SecretWatch
    var scrubber: SecretScrubber?
    var egressGuard: EgressGuard?
    /// Guard: body bytes taken from the source and inspected but not yet forwarded: the body's
    /// last `watch.holdBack` bytes at most (see `EgressGuard`).
    var held: [UInt8] = []
    /// Scrub: one piece's output, reused (at most `BodyPump.filterPiece` + the hold-back).
    var scratch: [UInt8] = []
    /// The value that stopped a guarded body, once found.
    var leak: SecretFinding?

    /// Scrub findings not yet reported. Each pattern (a secret in one encoding) is reported once per
    /// body, so a response that echoes a value a million times makes one finding, not a million;
    /// the repeats are only counted (per secret, for the metric), never kept.
    /// Both allocated at the first match: most bodies have none, and a filtered body should cost
    /// as few allocations as it can (the filter exists for every response of a scoped exchange).
    private var unreported: [SecretFinding] = []
    private var reportedPattern: [Bool] = []
    private var repeats: [UInt64] = []
    private var hasRepeats = false

    init(_ kind: Kind, watch: SecretWatch) {
        self.kind = kind
        self.watch = watch
        switch kind {
        case .scrub:
            scrubber = SecretScrubber(scanner: watch.scanner, holdBack: watch.holdBack)
            scratch.reserveCapacity(BodyPump.filterPiece + watch.holdBack)
        case .guardEgress:
            egressGuard = EgressGuard(scanner: watch.scanner, holdBack: watch.holdBack)
            held.reserveCapacity(watch.holdBack)
        }
    }

    /// A match the scrubber masked.
    func masked(_ match: SecretMatch) {
        if reportedPattern.isEmpty {
            reportedPattern = [Bool](repeating: false, count: watch.scanner.patterns.count)
            repeats = [UInt64](repeating: 0, count: watch.secrets.count)
        }
        if reportedPattern[match.pattern.id] {
            repeats[match.pattern.secret] += 1
            hasRepeats = true
        } else {
            reportedPattern[match.pattern.id] = true
            unreported.append(watch.finding(match))
        }
    }

    /// Values masked outside the body (its trailers): reported with the body's findings.
    func noteFindings(_ findings: [SecretFinding]) {
        unreported.append(contentsOf: findings)
    }

    /// The findings since the last call, if any.
    func takeFindings() -> [SecretFinding]? {
        guard !unreported.isEmpty else { return nil }
        defer { unreported.removeAll() }
        return unreported
    }

    /// Matches of patterns already reported, per secret name, since the last call: the metric
    /// counts every match masked, the record names each form once.
    func takeRepeats(_ body: (_ secret: String, _ count: UInt64) -> Void) {
        guard hasRepeats else { return }
        hasRepeats = false
        for (secret, count) in repeats.enumerated() where count > 0 {
            body(watch.secrets[secret], count)
            repeats[secret] = 0
        }
    }
}
