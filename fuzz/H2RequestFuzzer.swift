// Fuzz target (fuzz/FuzzMain.swift dispatches): HTTP/2 request header blocks through
// `H2RequestMapping` and admission, and frame sequences through `H2FloodGuard`. The properties:
//  1. no input traps (lengths, numbers and names from the input are bounded before arithmetic);
//  2. a mapped head is what every rule expects: version HTTP/2, names in lower case and valid,
//     values the HTTP/1 parser would accept, at most one host, no connection-specific field but
//     the proxy's own `transfer-encoding: chunked` (exactly when the body is re-framed), a
//     framing `BodyFraming.forRequest` reads, and inside a tunnel a Host naming the tunnel's origin;
//  3. a refusal never repeats a value the block carried (a canary in every value);
//  4. the flood guard, once it said goAway, says the same for every later input.
//
// Input bytes: the first picks the connection (cleartext, intercepted) and END_STREAM; then each
// field is a name byte (< 40: from the menu below, else that many raw bytes follow) and a value
// (a menu byte, or a length and raw bytes, with the canary appended). The rest drives the guard:
// each 4 bytes are a frame type, flags, and a length (two bytes, scaled up to past 64 KiB).

private let names = [
    ":method", ":scheme", ":path", ":authority", ":protocol", ":status", ":x", "host", "cookie", "te",
    "content-length", "transfer-encoding", "connection", "upgrade", "keep-alive", "proxy-connection",
    "content-type", "proxy-authorization", "x-request-id", "Accept", "accept", "expect", "",
]
private let values = [
    "GET", "POST", "CONNECT", "OPTIONS", "http", "https", "/", "*", "/a?b", "a.example", "a.example:443",
    "b.example", "u@a.example", "trailers", "gzip", "0", "5", "99999999999999999999", "chunked", "100-continue",
    "websocket", "a=1", " x", "x\r\ny",
]
private let canary = "FUZZCANARY"
private let tunnel = try! Origin.parse("https://a.example")

func fuzzH2Request(_ data: UnsafePointer<UInt8>, _ size: Int) {
    var input = FuzzInput(bytes: UnsafeBufferPointer(start: data, count: size))
    let first = input.byte()
    let connection: H2Connection = first & 1 == 0 ? .cleartext : .intercepted(tunnel)
    let endStream = first & 2 != 0
    var fields: [H2HeaderField] = []
    let count = input.pick(40)
    for _ in 0..<count where !input.isEmpty {
        let nameByte = Int(input.byte())
        let name = nameByte < 40 ? names[nameByte % names.count] : HTTPField.value(wireBytes: input.take(nameByte % 12))
        let valueByte = Int(input.byte())
        let value =
            valueByte < 128 ? values[valueByte % values.count] : HTTPField.value(wireBytes: input.take(valueByte % 24)) + canary
        fields.append(H2HeaderField(name: name, value: value))
    }
    switch H2RequestMapping.requestHead(fields, endStream: endStream, on: connection) {
    case .failure(let error):
        fuzzCheck(!error.message.contains(canary), "a refusal repeats a value the client sent: \(error.message)")
    case .success(let mapped):
        let head = mapped.head
        fuzzCheck(head.version == .http2, "a mapped head that is not HTTP/2")
        fuzzCheck(head.fields.count("host") <= 1, "two Host fields in a mapped head")
        for field in head.fields {
            fuzzCheck(HTTPField.isValidLowercaseName(field.name), "a mapped name not in lower case: \(field.name)")
            fuzzCheck(HTTPField.isValidValue(field.value), "a mapped value the HTTP/1 parser would refuse")
            fuzzCheck(
                !["connection", "upgrade", "keep-alive", "proxy-connection"].contains(field.name),
                "a connection-specific field passed: \(field.name)")
        }
        fuzzCheck(
            head.fields.values("transfer-encoding") == (mapped.reframedAsChunked ? ["chunked"] : []),
            "transfer-encoding that is not the proxy's own")
        fuzzCheck((try? BodyFraming.forRequest(head)) != nil, "a mapped head whose framing cannot be read")
        if case .intercepted(let origin) = connection, let host = head.fields.values("host").first,
            let (parsed, port) = try? RequestTarget.parseAuthority(Substring(host))
        {
            fuzzCheck(
                Origin(scheme: origin.scheme, host: parsed, port: port ?? origin.scheme.defaultPort) == origin,
                "a stream inside the tunnel names another origin")
        }
        let mode: ConnectionMode =
            if case .intercepted(let origin) = connection { .intercepted(origin, client: .unnamed) } else { .forwardProxy }
        _ = RequestAdmission.admit(head, mode: mode, scope: fuzzH2Scope, policy: .init(tunnel: .deny, canIntercept: false))
    }

    var guarding = H2FloodGuard()
    var tripped: H2FloodGuard.Verdict?
    while !input.isEmpty {
        let kind = H2FrameKind(type: input.byte() % 12)
        let flags = input.byte()
        let length = (Int(input.byte()) << 8 | Int(input.byte())) * (flags & 0x80 != 0 ? 4 : 1)
        var verdict = guarding.frameStarted(kind, flags: flags, stream: 1, length: length)
        if kind == .headers, verdict == .proceed { verdict = guarding.streamOpened() }
        if kind == .rstStream, verdict == .proceed { verdict = guarding.streamResetByClient(responseEnded: flags & 0x40 != 0) }
        if flags & 0x20 != 0 { guarding.streamAnswered() }
        if flags & 0x10 != 0 { guarding.responseDataSent() }
        if let tripped { fuzzCheck(verdict == tripped, "the guard changed its verdict after goAway") }
        if verdict != .proceed { tripped = verdict }
    }
}

/// A scope context with no scopes and no clients: admission runs its Host, target and framing rules.
private let fuzzH2Scope: ScopeContext = {
    guard let configuration = try? ConfigLoader.parse("", file: "fuzz.yaml", home: "/nonexistent") else {
        fatalError("the empty config does not load")
    }
    return ScopeContext(
        policy: configuration.policy, redirects: configuration.redirects, secrets: StaticSecrets([:]),
        proxyAuthSecret: nil, clients: configuration.clients, interceptHosts: [], protection: configuration.protection,
        values: SecretValueIndex(placeholders: PlaceholderTable(configuration.placeholders, key: [UInt8](repeating: 1, count: 32)), values: [:]),
        tokens: nil)
}()
