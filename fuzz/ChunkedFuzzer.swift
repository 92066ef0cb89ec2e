// libFuzzer target: the chunked decoder driven like the engine's BodyPump, whole and split.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let whole = decodeChunked([bytes])
    if size > 1 {
        let cut = Int(bytes[size - 1]) % size
        precondition(decodeChunked([Array(bytes[..<cut]), Array(bytes[cut...])]) == whole, "split-point verdicts differ")
    }
    return 0
}
