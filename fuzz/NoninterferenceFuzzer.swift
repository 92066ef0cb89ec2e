// Fuzz target (fuzz/FuzzMain.swift dispatches): the scrub and the guard reveal nothing of the
// values they look for (docs/security-model.md, "No oracle"). The input is read as
//   secretCount, then per secret a length and its bytes (the first set); a byte that derives the
//   second set (each value's bytes changed, lengths kept); stepCount, then per step a kind byte
//   (an idle release, or a piece of the given length); the rest is the traffic the pieces take.
// Both sets are watched with the hold-back their lengths give. For traffic that carries no value
// of either set (whatever prefixes of them it holds), every step must let out exactly the same
// bytes (scrub) and counts (guard) for both.
func fuzzNoninterference(_ data: UnsafePointer<UInt8>, _ size: Int) {
    var input = FuzzInput(bytes: UnsafeBufferPointer(start: data, count: size))
    func take(_ count: Int) -> [UInt8] { input.take(count) }
    let secretCount = 1 + Int(take(1).first ?? 0) % 4
    let first = (0..<secretCount).map { _ in take(8 + Int(take(1).first ?? 0) % 16) }.filter { !$0.isEmpty }
    guard !first.isEmpty else { return }
    let salt = take(1).first ?? 1
    // The second set: the same lengths, every byte moved (never equal to the first's).
    let second = first.map { value in value.enumerated().map { index, byte in byte &+ salt | 1 &+ UInt8(truncatingIfNeeded: index) } }
        .enumerated().map { index, value in value == first[index] ? value.map { $0 ^ 0x80 } : value }
    let stepCount = Int(take(1).first ?? 0) % 12
    let kinds = take(stepCount)
    let traffic = input.rest()
    let scanners = [SecretScanner(secrets: first), SecretScanner(secrets: second)]
    for scanner in scanners where !scanner.matches(in: traffic).isEmpty { return }

    let holdBack = first.map { 8 * $0.count + 8 }.max()! - 1
    func run(_ scanner: SecretScanner) -> [[Int]] {
        var scrubber = SecretScrubber(scanner: scanner, holdBack: holdBack)
        var egress = EgressGuard(scanner: scanner, holdBack: holdBack)
        var seen: [[Int]] = []
        var offset = 0
        var scrubbed: [UInt8] = []
        for kind in kinds + [0xFF] {
            if kind & 1 == 0, kind != 0xFF {
                scrubber.release(into: &scrubbed)
                seen.append([scrubbed.count, egress.release()])
            } else {
                let length = kind == 0xFF ? traffic.count - offset : min(Int(kind >> 1), traffic.count - offset)
                let piece = Array(traffic[offset..<(offset + length)])
                offset += length
                scrubber.scrub(piece, into: &scrubbed)
                let verdict = egress.inspect(piece)
                fuzzCheck(verdict.leak == nil, "a value was found in traffic checked to carry none")
                seen.append([scrubbed.count, verdict.forwardable])
            }
        }
        scrubber.finish(into: &scrubbed)
        seen.append([scrubbed.count, egress.finish()])
        fuzzCheck(scrubbed == traffic, "the scrub changed traffic that carries no value")
        return seen
    }
    let seenFirst = run(scanners[0]), seenSecond = run(scanners[1])
    fuzzCheck(seenFirst == seenSecond, "what left differs between two sets of equal lengths: \(seenFirst) vs \(seenSecond)")
}
