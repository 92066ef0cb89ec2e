// libFuzzer target: the request-head scanner and parser, fed whole and split at a fuzzer-chosen point.
// The property: no crash, no hang, and the same verdict however the bytes arrive.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let whole = FuzzSupport.feedRequestHead([bytes])
    if size > 1 {
        let cut = Int(bytes[0]) % size
        let split = FuzzSupport.feedRequestHead([Array(bytes[..<cut]), Array(bytes[cut...])])
        precondition(split == whole, "split-point verdicts differ")
    }
    if case .parsed(let head) = whole {
        _ = try? RequestTarget.parse(head.target, method: head.method)
        _ = try? BodyFraming.forRequest(head)
        _ = head.serialized()
        if let origin = try? Origin.parse("http://a.example") {
            _ = Forwarding.upstreamRequest(from: head, origin: origin, pathAndQuery: "/", framing: .none)
        }
    }
    return 0
}
