// Fuzz target (fuzz/FuzzMain.swift dispatches): the secret scanner against the naive reference
// (Tests/SecretScanTests/NaiveSecretScan.swift). The input is read as
//   secretCount, then per secret a length and its bytes; cutCount, then that many cut bytes; the
//   rest is the body.
// Secrets are bytes the fuzzer chooses, so it plants them (and their encodings, learned from
// comparisons) in the body itself. Matches, the scrubbed body, the guard's leak and what it
// forwarded must agree with the reference for that cut into pieces.
func fuzzSecretScan(_ data: UnsafePointer<UInt8>, _ size: Int) {
    var input = FuzzInput(bytes: UnsafeBufferPointer(start: data, count: size))
    func take(_ count: Int) -> [UInt8] { input.take(count) }
    let secretCount = Int(take(1).first ?? 0) % 9
    let secrets = (0..<secretCount).map { _ in take(Int(take(1).first ?? 0) % 24) }
    let cutBytes = take(Int(take(1).first ?? 0) % 9)
    let body = input.rest()
    let cuts = cutBytes.map { Int($0) * (body.count + 1) / 256 }
    // Also with every piece that can hold the laned pass's four warm-ups taken as a large one (by
    // default only pieces of 1 KiB and more, which few inputs here reach), each way.
    for (lanedFrom, path, pairSkip) in NaiveSecretScan.scanWays {
        let scanner = SecretScanner(secrets: secrets, lanedFrom: lanedFrom, largePieces: path, pairSkip: pairSkip)
        let problems = NaiveSecretScan.disagreements(scanner, body, cuts: cuts)
        fuzzCheck(problems.isEmpty, "laned from \(lanedFrom ?? -1) \(path) \(pairSkip): secrets \(secrets) body \(body) cuts \(cuts): \(problems)")
    }
}
