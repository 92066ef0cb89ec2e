// Fuzz target (fuzz/FuzzMain.swift dispatches): the whole pure path of an exchange from bytes, as
// the engine runs it: request head text -> HeadScanner/HeadParser -> the machine's admission
// (target, Host, client) -> hop planning -> the response head text of each hop -> HeadParser ->
// response direction (relay, follow, block; the Location resolved under three readings). Where the
// ExchangeMachine target picks targets and Locations from fixed menus, here they are built from
// pieces the input chooses (long digit runs, the edges of Int64 and UInt64, IPv4 in every form,
// IPv6, percent escapes, userinfo, backslashes) or from raw input bytes, so every number parser on
// the path is reached with numbers from outside. Fixtures: the ExchangeMachine target's six scope
// configurations (pass, follow, block, routes, interception, proxy authentication, OAuth2).
//
// Properties, after each event: nothing traps (the first one); at most one final response per
// request head; every origin the machine connects to re-parses to itself from its own text (a
// normalized host is a fixed point, so the scope compared is the origin reached); a hop is
// connected once and released once, and none is left live after the connection closes.
//
// Input: byte 0 picks the configuration (bits 0-2) and the route's listener (bit 3); then up to
// three requests, each: a method byte, a target (a form byte, then pieces), a Host (a form byte,
// then pieces), a Proxy-Authorization byte; and for each hop the machine connects, a response: a
// status byte, a Location (a form byte, then pieces), a Content-Length (pieces). A piece is a
// byte: < 224 one of `numberPieces`/`textPieces`, else the next byte itself.

#if canImport(Glibc)
    import Glibc
#endif

/// Numbers as they come from outside: long runs, the integer edges, leading zeros, signs,
/// exponents, radix prefixes, and ordinary ones so valid hosts and ports are built too.
private let numberPieces = [
    "7777777777777777777777777", "99999999999999999999999999999999999999999", "9223372036854775807", "9223372036854775808",
    "18446744073709551615", "18446744073709551616", "4294967295", "4294967296", "65535", "65536", "0000000000000000000001",
    "00000000000000000000000000000000256", "-1", "+1", "1e999", "1E400", "0x7f", "0xffffffffffffffffffff", "0", "1", "127",
    "255", "256", "443", "8765", "010",
]
/// The rest of a URL: separators, IPv6 pieces, escapes, the fixtures' names.
private let textPieces = [
    ".", ".", ".", ":", ":", "::", "[", "]", "ffff", "::ffff:", "fe80", "%", "%25", "%31", "%2e", "%00", "@", "\\", "/", "?",
    "#", " ", "\t", "api.scoped.test", "cdn.scoped.test", "127.0.0.1", "other.test", "localhost", "a", "-", "_", "u:p@",
    "http://", "https://", "//", "HTTP://", "http:", "http:\\\\", "xn--", "ü",
]

extension FuzzInput {
    /// A few pieces: menu pieces mostly (numbers twice as likely), raw bytes sometimes.
    mutating func text(maxPieces: Int) -> String {
        var bytes: [UInt8] = []
        for _ in 0..<(Int(byte()) % (maxPieces + 1)) {
            let choice = Int(byte())
            if choice >= 224 {
                bytes.append(byte())
            } else if choice % 3 == 0 {
                bytes += textPieces[choice / 3 % textPieces.count].utf8
            } else {
                bytes += numberPieces[choice % numberPieces.count].utf8
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// A host: dotted pieces most of the time (so the dotted-quad and number readings are reached).
    mutating func host() -> String {
        switch byte() % 4 {
        case 0: return text(maxPieces: 9)
        case 1: return (0..<4).map { _ in text(maxPieces: 2) }.joined(separator: ".")
        case 2: return "[" + text(maxPieces: 6) + "]"
        default: return ["api.scoped.test", "cdn.scoped.test", "127.0.0.1", "other.test"][Int(byte()) % 4]
        }
    }

    /// `host[:port]`.
    mutating func authority() -> String {
        let host = host()
        return byte() & 1 == 0 ? host : host + ":" + text(maxPieces: 3)
    }
}

private struct WholePath {
    var machine: ConnectionMachine
    var finals = 0
    var connected: [UInt32: Origin] = [:]
    var released: Set<UInt32> = []
    var closed = false
    /// The hops connected by the last event, in order.
    var newHops: [HopID] = []
    var lastActions: [ConnectionAction] = []

    mutating func deliver(_ event: ConnectionEvent) {
        let actions = machine.handle(event)
        if wholePathTracing {
            let said = actions.map { action in
                switch action {
                case .writeToClient(let bytes): "write \(String(decoding: bytes.prefix(while: { $0 != 13 }), as: UTF8.self))"
                case .connect(let hop, let origin, _, _, _): "connect \(hop) \(origin)"
                default: "\(action)".prefix(60).description
                }
            }
            print("  -> \(said)")
        }
        lastActions = actions
        newHops = []
        for action in actions {
            switch action {
            case .writeToClient(let bytes):
                // A status line: a final response (2xx-5xx, or 101) counts once per request.
                if bytes.starts(with: Array("HTTP/1.".utf8)), bytes.count >= 12 {
                    let first = bytes[9]
                    if first != UInt8(ascii: "1") || bytes[9..<12].elementsEqual("101".utf8) {
                        finals += 1
                        fuzzCheck(finals <= 1, "second final response to one request")
                    }
                }
            case .connect(let hop, let origin, _, _, _):
                fuzzCheck(connected[hop.value] == nil, "\(hop) connected twice")
                connected[hop.value] = origin
                newHops.append(hop)
                // The origin compared with the scopes is the origin reached: its text reads back as itself.
                let reread = try? Origin.parse(origin.description)
                fuzzCheck(reread == origin, "origin \(origin) does not re-parse to itself")
            case .releaseUpstream(let hop, _):
                fuzzCheck(connected[hop.value] != nil, "\(hop) released but never connected")
                fuzzCheck(released.insert(hop.value).inserted, "\(hop) released twice")
            case .closeClient:
                closed = true
            default:
                break
            }
        }
    }

    var live: [HopID] { connected.keys.filter { !released.contains($0) }.sorted().map { HopID($0) } }
}

private func parsedHead<T>(_ text: String, limits: HeadLimits, _ parse: (UnsafeRawBufferPointer) throws(HTTPParseError) -> T) -> T? {
    let bytes = Array(text.utf8)
    return bytes.withUnsafeBytes { buffer -> T? in
        var scanner = HeadScanner(limits: limits)
        guard let boundary = try? scanner.scan(buffer) else { return nil }
        return try? parse(UnsafeRawBufferPointer(rebasing: buffer[boundary.start..<boundary.end]))
    }
}

/// SCOPEPROXY_FUZZ_TRACE=1: print each head as built and what the machine answered.
private let wholePathTracing = getenv("SCOPEPROXY_FUZZ_TRACE") != nil

private let wholePathProxyAuthorization = "Proxy-Authorization: Basic " + Base64.encode(Array("any:SECRETPROXY5q1z".utf8)) + "\r\n"

func fuzzWholePath(_ data: UnsafePointer<UInt8>, _ size: Int) {
    var input = FuzzInput(bytes: UnsafeBufferPointer(start: data, count: size))
    let setup = input.byte()
    let fixture = machineFixtures[Int(setup & 7) % machineFixtures.count]
    let mode = setup & 8 != 0 ? fixture.route ?? .forwardProxy : .forwardProxy
    var path = WholePath(
        machine: ConnectionMachine(
            settings: fixture.settings, mode: mode, peer: "127.0.0.1:5000",
            ids: RequestIDGenerator(seed: 11)))
    path.machine.toleratesImpossibleEvents = true  // counted, not asserted: see ExchangeMachineFuzzer
    _ = path.machine.start()
    var requests = 0
    while requests < 3, !input.isEmpty, !path.closed {
        requests += 1
        path.finals = 0
        // The request head, as text the codec parses.
        let methodByte = input.byte()
        let method = ["GET", "POST", "HEAD", "CONNECT", "OPTIONS", "PUT"][Int(methodByte) % 6]
        let target: String
        switch input.byte() % 5 {
        case 0, 1: target = ["http://", "https://", "HTTP://"][Int(input.byte()) % 3] + input.authority() + "/" + input.text(maxPieces: 3)
        case 2: target = input.authority()
        case 3: target = "/" + input.text(maxPieces: 3)
        default: target = input.text(maxPieces: 12)
        }
        var head = "\(method) \(target) HTTP/1.1\r\n"
        switch input.byte() % 4 {
        case 0: head += "Host: \(input.authority())\r\n"
        case 1: break
        default:
            // The Host a client usually sends: the target's authority.
            let authority = target.split(separator: "/", omittingEmptySubsequences: false).dropFirst(2).first.map(String.init) ?? target
            head += "Host: \(authority)\r\n"
        }
        if input.byte() & 1 == 1 { head += wholePathProxyAuthorization }
        if method == "POST" || method == "PUT" { head += "Content-Length: \(input.text(maxPieces: 2))\r\n" }
        head += "\r\n"
        if wholePathTracing { print("request: \(head.debugDescription)") }
        let arrival = Arrival(now: UInt64(requests), scope: fixture.scope)
        if let parsed = parsedHead(head, limits: .request, { buffer throws(HTTPParseError) in try HeadParser.parseRequest(buffer) }) {
            path.deliver(.requestHead(parsed, headBytes: head.utf8.count, arrival))
        } else {
            path.deliver(.requestHeadInvalid(.malformed("fuzz"), arrival))
        }
        // The engine's part, for as many hops as the machine opens: connect, bodies, a response head.
        var hops = 0
        var steps = 0
        while steps < 24, !path.closed {
            steps += 1
            let actions = path.lastActions
            if let acquire = actions.lazy.compactMap({ if case .acquireToken(let secret, _) = $0 { secret } else { nil } }).first {
                path.deliver(.tokenFailed(secret: acquire, provider: nil, reason: .refused))
            } else if actions.contains(where: { if case .collectRequestBody = $0 { true } else { false } }) {
                path.deliver(.collectedBody(.complete(Array("_method=DELETE&a=1".utf8))))
            } else if actions.contains(where: { if case .startClientTLS = $0 { true } else { false } }) {
                path.deliver(.clientTLSEstablished)
                break  // the next request is the tunnel's first
            } else if let hop = path.newHops.first {
                hops += 1
                path.deliver(.upstreamConnected(hop, reused: false))
            } else if let hop = actions.lazy.compactMap({ if case .pumpRequestBody(let hop, _, _, _, _) = $0 { hop } else { nil } }).first {
                path.deliver(.requestBody(hop, .complete(payload: 0, consumed: 0, captured: nil, observed: nil)))
            } else if let hop = path.machine.currentHop, path.machine.expectsResponseHead(from: hop), hops <= 6 {
                // The response head, as text: a status, a Location, a Content-Length.
                let status = [301, 302, 303, 307, 308, 300, 200, 100, 101, 204, 304, 502][Int(input.byte()) % 12]
                var response = "HTTP/1.1 \(status) X\r\n"
                switch input.byte() % 4 {
                case 0: break
                case 1: response += "Location: \(input.text(maxPieces: 14))\r\n"
                default:
                    let scheme = ["http://", "https://", "//", "", "/", "http:", "http:\\\\", "HTTPS://", " http://"][Int(input.byte()) % 9]
                    response += "Location: \(scheme)\(input.authority())/\(input.text(maxPieces: 2))\r\n"
                }
                response += "Content-Length: \(input.byte() & 1 == 0 ? "0" : input.text(maxPieces: 2))\r\n\r\n"
                if wholePathTracing { print("response: \(response.debugDescription)") }
                if let parsed = parsedHead(response, limits: .response, { buffer throws(HTTPParseError) in try HeadParser.parseResponse(buffer) }) {
                    path.deliver(.responseHead(hop, parsed))
                } else {
                    path.deliver(.responseHeadInvalid(hop, reason: "fuzz"))
                }
            } else if let hop = actions.lazy.compactMap({ if case .relayResponseBody(let hop, _, _, _, _) = $0 { hop } else { nil } }).first {
                path.deliver(.responseBody(hop, .complete(payload: 0, consumed: 0, captured: nil, observed: nil)))
            } else if let hop = actions.lazy.compactMap({
                switch $0 {
                case .splice(let hop), .relayWebSocket(let hop, _): hop
                default: nil
                }
            }).first {
                path.deliver(.upstreamClosed(hop, sawResponseBytes: true))
            } else {
                break
            }
        }
    }
    path.deliver(.connectionClosed)
    fuzzCheck(path.live.isEmpty, "hops left live after the close: \(path.live)")
}
