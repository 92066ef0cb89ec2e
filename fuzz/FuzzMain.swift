// One libFuzzer binary, sixteen targets: SCOPEPROXY_FUZZ_TARGET picks which entry point the fuzzer
// drives (fuzz/run.sh sets it). One binary means one sanitized build of every module instead of six.
#if canImport(Glibc)
    import Glibc
#endif

private let targets: [String: (UnsafePointer<UInt8>, Int) -> Void] = [
    "RequestHead": fuzzRequestHead, "Chunked": fuzzChunked, "ResponseHead": fuzzResponseHead,
    "Config": fuzzConfig, "Redactor": fuzzRedactor, "ExchangeMachine": fuzzExchangeMachine,
    "ClientCredentials": fuzzClientCredentials, "SecretScan": fuzzSecretScan, "TokenResponse": fuzzTokenResponse,
    "Noninterference": fuzzNoninterference,
    "WholePath": fuzzWholePath, "H2Request": fuzzH2Request, "WebSocketFrames": fuzzWebSocketFrames,
    "H2Connection": fuzzH2Connection, "ClientHello": fuzzClientHello, "CredentialAnswers": fuzzCredentialAnswers,
]

private let selected: (UnsafePointer<UInt8>, Int) -> Void = {
    let name = getenv("SCOPEPROXY_FUZZ_TARGET").map { String(cString: $0) } ?? ""
    guard let target = targets[name] else {
        fatalError("set SCOPEPROXY_FUZZ_TARGET to one of \(targets.keys.sorted().joined(separator: ", "))")
    }
    return target
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var empty: UInt8 = 0
    withUnsafePointer(to: &empty) { fallback in selected(data ?? fallback, size) }
    return 0
}

/// precondition() drops its message in -O builds; a finding must say what broke.
func fuzzCheck(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError(message()) }
}

/// A fuzz input read a byte at a time (the machine targets build their events from it).
struct FuzzInput {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0

    var isEmpty: Bool { index >= bytes.count }

    /// The next byte; 0 once the input is used up.
    mutating func byte() -> UInt8 {
        guard index < bytes.count else { return 0 }
        defer { index += 1 }
        return bytes[index]
    }

    mutating func pick(_ count: Int) -> Int { Int(byte()) % count }
    mutating func bool() -> Bool { byte() & 1 == 1 }

    /// The next `count` bytes (fewer at the end).
    mutating func take(_ count: Int) -> [UInt8] {
        let end = min(bytes.count, index + max(0, count))
        defer { index = end }
        return Array(bytes[min(index, end)..<end])
    }

    /// Everything not read yet.
    mutating func rest() -> [UInt8] { take(bytes.count) }
}
