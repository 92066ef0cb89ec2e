// Fuzz target (fuzz/FuzzMain.swift dispatches): the chunked decoder driven like the engine's BodyPump, whole and split.
func fuzzChunked(_ data: UnsafePointer<UInt8>, _ size: Int) {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let whole = decodeChunked([bytes])
    if size > 1 {
        let cut = Int(bytes[size - 1]) % size
        fuzzCheck(decodeChunked([Array(bytes[..<cut]), Array(bytes[cut...])]) == whole, "split-point verdicts differ")
    }
}
