// Fuzz target (fuzz/FuzzMain.swift dispatches): the request-head scanner and parser, fed whole and split at a fuzzer-chosen point
// (drivers from Tests/HTTP1CodecTests/SplitPointVerifier.swift, compiled in by fuzz/build.sh).
// The property: no crash, no hang, and the same verdict however the bytes arrive.
func fuzzRequestHead(_ data: UnsafePointer<UInt8>, _ size: Int) {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let whole = feedHead([bytes], kind: .request)
    if size > 1 {
        let cut = Int(bytes[0]) % size
        let split = feedHead([Array(bytes[..<cut]), Array(bytes[cut...])], kind: .request)
        fuzzCheck(split == whole, "split-point verdicts differ")
    }
    if case .request(let head, _) = whole {
        _ = try? RequestTarget.parse(head.target, method: head.method)
        _ = try? BodyFraming.forRequest(head)
        _ = head.serialized()
        if let origin = try? Origin.parse("http://a.example") {
            _ = Forwarding.upstreamRequest(from: head, origin: origin, pathAndQuery: "/", framing: .none)
        }
    }
}
