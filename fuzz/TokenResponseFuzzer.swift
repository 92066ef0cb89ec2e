// TokenResponse: a token endpoint's answer is untrusted input (docs/security-model.md, "Credentials
// the proxy computes"). The reader's verdict must not depend on how the bytes arrive, it must stay
// within its bound, and nothing the endpoint said may reach a failure's text (the 502 and the log):
// a canary planted anywhere in the response never shows in the description of what went wrong, and
// a granted access token is a header-safe value.

private let canary = Array("CANARYzq7".utf8)

func fuzzTokenResponse(_ data: UnsafePointer<UInt8>, _ size: Int) {
    guard size >= 2 else { return }
    let cut = Int(data[0])
    var input = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    // Half of the inputs carry the canary inside whatever the fuzzer built (body, head, anywhere).
    if cut & 1 == 1 { input.insert(contentsOf: canary, at: min(input.count, cut % (input.count + 1))) }

    var whole = OAuth2TokenResponseReader(limit: 4096)
    var wholeOutcome = whole.receive(input)
    if case .needMore = wholeOutcome { wholeOutcome = whole.endOfInput() }

    var pieces = OAuth2TokenResponseReader(limit: 4096)
    var piecesOutcome = OAuth2TokenResponseReader.Outcome.needMore
    var offset = 0
    let step = max(1, cut % 17)
    while offset < input.count {
        piecesOutcome = pieces.receive(input[offset..<min(input.count, offset + step)])
        offset += step
        if case .needMore = piecesOutcome { continue }
        break
    }
    if case .needMore = piecesOutcome { piecesOutcome = pieces.endOfInput() }
    // A reader that has decided stops being fed, so a complete answer may be seen earlier in pieces;
    // what it decided must still be the same.
    fuzzCheck(
        describe(wholeOutcome) == describe(piecesOutcome) || input.count > 4096,
        "whole: \(describe(wholeOutcome)), in pieces of \(step): \(describe(piecesOutcome))")

    let endpoint = try! Origin.parse("https://auth.example")
    switch wholeOutcome {
    case .needMore: break
    case .failed(let reason):
        let text = TokenFailure(secret: "t", endpoint: endpoint, reason: reason).description
        fuzzCheck(!text.utf8.contains(subsequence: canary), "a reader failure repeats the response: \(text)")
    case .complete(let status, let body):
        switch OAuth2TokenResponse.parse(status: status, body: body) {
        case .failure(let reason):
            let text = TokenFailure(secret: "t", endpoint: endpoint, reason: reason).description
            fuzzCheck(!text.utf8.contains(subsequence: canary), "a parse failure repeats the response: \(text)")
        case .success(let grant):
            fuzzCheck(
                !grant.value.exposedBytes.contains { $0 < 0x20 || $0 == 0x7F },
                "a granted access token holds a control byte")
        }
    }
}

private func describe(_ outcome: OAuth2TokenResponseReader.Outcome) -> String {
    switch outcome {
    case .needMore: "needMore"
    case .complete(let status, let body): "complete \(status) \(body.count) bytes \(body.hashValue)"
    case .failed(let reason): "failed \(reason)"
    }
}

extension Collection where Element == UInt8 {
    fileprivate func contains(subsequence needle: [UInt8]) -> Bool {
        let bytes = Array(self)
        guard bytes.count >= needle.count else { return false }
        return (0...(bytes.count - needle.count)).contains { bytes[$0..<($0 + needle.count)].elementsEqual(needle) }
    }
}
