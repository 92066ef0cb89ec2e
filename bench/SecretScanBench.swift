// Micro benchmark of the secret scanner (bench/secretscan.sh builds and runs it; not a test):
// MB/s scanning, scrubbing and guarding 256 MiB in 64 KiB pieces of text, random bytes and zeros
// with 1, 2, 3, 10 and 300 secrets.
#if canImport(Glibc)
import Glibc
#endif

@main
enum SecretScanBench {
    static func seconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }

    static func main() {
        let mebibytes = Int(CommandLine.arguments.dropFirst().first ?? "") ?? 256
        var random = SystemRandomNumberGenerator()
        // Text like an API body: letters, digits and JSON punctuation (no secret in it).
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/=\"{}:, ".utf8)
        let text = (0..<(1 << 20)).map { _ in alphabet.randomElement(using: &random)! }
        // And bytes like an image or an archive: every value equally likely.
        let binary = (0..<(1 << 20)).map { _ in UInt8.random(in: 0...255, using: &random) }
        let pieceSize = 64 * 1024
        // And zeros, like a sparse file or a disk image: where skipping the start state pays most.
        let zeros = [UInt8](repeating: 0, count: 1 << 20)
        for (kind, block) in [("random JSON-ish text", text), ("random bytes", binary), ("zeros", zeros)] {
        print("secretscan bench: \(mebibytes) MiB in \(pieceSize / 1024) KiB pieces, \(kind)")
        for secretCount in [1, 2, 3, 10, 300] {
            let tokenAlphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-".utf8)
            let secrets = (0..<secretCount).map { _ in (0..<40).map { _ in tokenAlphabet.randomElement(using: &random)! } }
            let buildStart = seconds()
            let scanner = SecretScanner(secrets: secrets)
            let buildTime = seconds() - buildStart
            print("\(secretCount) secrets of 40 bytes: \(scanner.patterns.count) patterns, table \(scanner.tableBytes / 1024) KiB, built in \(Int(buildTime * 1000)) ms")

            func measure(_ label: String, _ body: (UnsafeBufferPointer<UInt8>) -> Void) {
                let start = seconds()
                block.withUnsafeBufferPointer { whole in
                    for _ in 0..<mebibytes {
                        var offset = 0
                        while offset < whole.count {
                            body(UnsafeBufferPointer(rebasing: whole[offset..<min(offset + pieceSize, whole.count)]))
                            offset += pieceSize
                        }
                    }
                }
                let elapsed = seconds() - start
                let rate = Double(mebibytes) * 1_048_576 / elapsed / 1e6
                print("  \(label): \(Int(rate)) MB/s (\(String(Int(elapsed * 100)).leftPadded) cs)")
            }
            var stream = scanner.makeStream()
            var matches = 0
            measure("scan ") { piece in stream.scan(piece) { _ in matches += 1 } }
            var scrubber = SecretScrubber(scanner: scanner, holdBack: scanner.longestPattern)
            var output: [UInt8] = []
            output.reserveCapacity(pieceSize + scanner.longestPattern)
            measure("scrub") { piece in
                output.removeAll(keepingCapacity: true)
                scrubber.scrub(piece, into: &output)
            }
            var egress = EgressGuard(scanner: scanner, holdBack: scanner.longestPattern)
            var forwarded = 0
            measure("guard") { piece in forwarded += egress.inspect(piece).forwardable }
            if matches != 0 || forwarded == 0 { print("  (unexpected: \(matches) matches, \(forwarded) forwarded)") }
        }
        }
    }
}

private extension String {
    var leftPadded: String { String(repeating: " ", count: max(0, 5 - count)) + self }
}
