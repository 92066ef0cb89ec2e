// Fuzz target (fuzz/FuzzMain.swift dispatches): the ClientHello reader transparent capture peeks with
// (Sources/HTTP1Codec/ClientHello.swift), and the first-bytes decision built on it
// (Sources/ProxyCore/TransparentCapture.swift). The properties: no trap, no read past the bound; a
// verdict on a prefix is `incomplete` or the same as on the whole (more bytes never change a
// decision already made); a name found is a valid DNS name, never an address literal.
func fuzzClientHello(_ data: UnsafePointer<UInt8>, _ size: Int) {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let whole = ClientHello.read(bytes)
    if case .hello(let name?) = whole {
        fuzzCheck(name.kind == .name, "an address literal taken as a server name")
        fuzzCheck((try? Host.parse(Substring(name.normalized))) == name, "a server name that does not re-parse to itself")
    }
    if size > 1 {
        let cut = Int(bytes[0]) % size
        let prefix = ClientHello.read(bytes[..<cut])
        fuzzCheck(prefix == .incomplete || prefix == whole, "a prefix decided otherwise than the whole: \(prefix) vs \(whole)")
    }
    switch CapturedFirstBytes.classify(bytes) {
    case .tls(let name): fuzzCheck(whole == .hello(serverName: name), "first-bytes and ClientHello verdicts differ")
    case .unreadableTLS: fuzzCheck(bytes.first == 0x16, "unreadable TLS from bytes that do not start a record")
    case .incomplete, .http: break
    }
}
