import HTTP1Codec

public enum RedirectMode: String, Sendable, CaseIterable {
    case pass
    case follow
    case block
}

public struct RedirectPolicy: Sendable, Equatable {
    public var mode: RedirectMode
    /// In block mode: cross-origin targets that may still be followed by the client.
    public var allow: Set<Origin>
    public var maxHops: Int

    public init(mode: RedirectMode = .pass, allow: Set<Origin> = [], maxHops: Int = 5) {
        self.mode = mode
        self.allow = allow
        self.maxHops = maxHops
    }
}

/// Where a Location points, resolved against the request it answers as a WHATWG URL parser
/// resolves it (fragment dropped, userinfo dropped).
public struct RedirectTarget: Sendable, Equatable {
    public let origin: Origin
    /// Starts with "/"; percent-encoded as WHATWG serializes it, so visible ASCII only.
    public let pathAndQuery: String

    public init(origin: Origin, pathAndQuery: String) {
        self.origin = origin
        self.pathAndQuery = pathAndQuery
    }
}

/// What a Location means to the proxy.
public enum LocationResolution: Sendable, Equatable {
    /// An http(s) URL, read exactly as a browser reads it.
    case target(RedirectTarget)
    /// A URL of another scheme (`mailto:`, `javascript:`, `ftp:`, `file:`): nothing the proxy scopes.
    case otherScheme
    /// Not a URL to a WHATWG parser, or one whose host or port the proxy's strict rules refuse
    /// (percent-encoded or non-ASCII host, host ending in a number, port 0).
    case unparseable
}

public enum RedirectVerdict: Sendable, Equatable {
    /// Not a redirect the policy acts on: return the response as it is.
    case notRedirect
    /// Return the 3xx to the client; its follow-up is scoped on its own origin. nil: the Location
    /// names no http(s) URL the proxy can read (unparseable, or another scheme); in pass and follow
    /// mode it goes back to the client as it is, since whatever the client makes of it comes back
    /// through the proxy and is scoped then (and a non-http(s) URL never does).
    case pass(RedirectTarget?)
    /// The proxy follows: `method` and whether the request body is replayed.
    case follow(RedirectTarget, method: String, replayBody: Bool)
    /// A redirect the block policy refuses: 502 naming only the target origin. nil: the Location
    /// names no http(s) origin the proxy can read, so it cannot be shown to be allowed.
    case block(Origin?)
    /// Followed too many times.
    case tooManyHops
}

extension RedirectPolicy {
    /// The statuses fetch follows (WHATWG Fetch "redirect status"), and the proxy in follow mode.
    public static let redirectStatuses: Set<Int> = [301, 302, 303, 307, 308]

    /// `hops` counts the redirects already followed on this chain.
    public func decide(
        status: Int, location: String?, requestMethod: String, from origin: Origin, pathAndQuery: String, hops: Int
    ) -> RedirectVerdict {
        guard (300...399).contains(status), let location else { return .notRedirect }
        let resolution = Self.resolve(location, origin: origin, pathAndQuery: pathAndQuery)
        if mode == .block {
            // Every 3xx with a Location is judged, not only the five fetch follows: curl -L follows
            // the first Location of any 3xx (lib/http.c: `httpcode >= 300 && httpcode < 400`).
            // Fail closed: a Location the proxy cannot read cannot be shown to stay in bounds,
            // and a client with a laxer parser would still follow it.
            guard case .target(let target) = resolution else { return .block(nil) }
            // WHATWG reads a same-scheme `http:/h/x` as relative to the base; curl, which parses a
            // Location with a scheme as a URL of its own, reads host `h`. Both readings must stay
            // in bounds, or the redirect is blocked.
            var readings = [target.origin]
            if case .url(let absolute) = WebURL.parse(location, base: nil) {
                readings.append(Origin(scheme: absolute.scheme, host: absolute.host, port: absolute.port))
            }
            // RFC 3986 ends an authority only at `/`, `?` or `#`; WHATWG also at `\`. So
            // `http://api\@evil/` is host `api` to a browser and host `evil` (after userinfo
            // `api\`) to curl. That reading counts too, and one that cannot be read at all blocks.
            let rfc3986 = Self.rfc3986Origin(location, base: origin)
            if case .some(.some(let reading)) = rfc3986 { readings.append(reading) }
            for reading in readings where reading != origin && !allow.contains(reading) { return .block(reading) }
            if case .some(.none) = rfc3986 { return .block(nil) }
            return .pass(target)
        }
        guard case .target(let target) = resolution else { return .pass(nil) }
        guard mode == .follow, Self.redirectStatuses.contains(status) else { return .pass(target) }
        guard hops < maxHops else { return .tooManyHops }
        switch status {
        case 303:
            return .follow(target, method: requestMethod == "HEAD" ? "HEAD" : "GET", replayBody: false)
        case 301, 302:
            // RFC 9110 §15.4.2-3: only POST may historically turn into GET; every other method
            // is repeated as sent, body included (as 307/308).
            if requestMethod == "POST" { return .follow(target, method: "GET", replayBody: false) }
            return .follow(target, method: requestMethod, replayBody: true)
        default:  // 307, 308
            return .follow(target, method: requestMethod, replayBody: true)
        }
    }

    /// The origin an RFC 3986 parser (curl's) reads from a Location's authority, if it has one:
    /// nil when the Location has no authority (a path or query), `.some(nil)` when it has one that
    /// does not parse as `host[:port]` after the last `@`.
    static func rfc3986Origin(_ location: String, base: Origin) -> Origin?? {
        var text = Substring(location.trimmingCharacters(asciiControlOrSpace: true))
        var scheme = base.scheme
        if let colon = text.firstIndex(of: ":"),
            text[..<colon].allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "+.-".contains($0)) }),
            text[text.index(after: colon)...].hasPrefix("//")
        {
            switch text[..<colon].lowercased() {
            case "http": scheme = .http
            case "https": scheme = .https
            default: return .some(nil)
            }
            text = text[text.index(after: colon)...]
        }
        guard text.hasPrefix("//") else { return nil }
        let authority = text.dropFirst(2).prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        let hostAndPort = authority.lastIndex(of: "@").map { authority[authority.index(after: $0)...] } ?? authority
        guard let (host, port) = try? RequestTarget.parseAuthority(Substring(hostAndPort)) else { return .some(nil) }
        return .some(Origin(scheme: scheme, host: host, port: port))
    }

    /// Resolves a Location against the request URL the way the WHATWG URL Standard's basic URL
    /// parser does (browsers, Node, Deno): the proxy must never read a Location as naming a
    /// different host than the client that follows it. Where the standard decodes
    /// (percent-encoded hosts, IDNA) the proxy refuses instead (`.unparseable`).
    public static func resolve(_ location: String, origin: Origin, pathAndQuery: String) -> LocationResolution {
        guard case .url(let base) = WebURL.parse("\(origin.scheme.rawValue)://\(origin.authority)\(pathAndQuery)", base: nil) else {
            return .unparseable
        }
        switch WebURL.parse(location, base: base) {
        case .url(let url):
            return .target(RedirectTarget(origin: Origin(scheme: url.scheme, host: url.host, port: url.port), pathAndQuery: url.pathAndQuery))
        case .otherScheme:
            return .otherScheme
        case .failure:
            return .unparseable
        }
    }
}

/// An http(s) URL as the WHATWG URL Standard (https://url.spec.whatwg.org/#concept-basic-url-parser)
/// parses it, reduced to what a redirect decision needs: no userinfo, no fragment, no other scheme.
/// The state machine below follows the standard's states and pointer moves one for one, so each
/// step can be checked against the text; the differential test checks it against Node.
struct WebURL {
    var scheme: Scheme
    var host: Host
    /// nil: the scheme's default (an explicit default port is dropped, as the standard does).
    var port: UInt16?
    /// Segments, already percent-encoded.
    var path: [String]
    var query: String?

    var pathAndQuery: String { "/" + path.joined(separator: "/") + (query.map { "?" + $0 } ?? "") }

    enum Outcome {
        case url(WebURL)
        case otherScheme
        case failure
    }

    private enum State {
        case schemeStart, scheme, noScheme, specialRelativeOrAuthority, specialAuthoritySlashes
        case specialAuthorityIgnoreSlashes, relative, relativeSlash, authority, host, port, pathStart, path, query
    }

    static func parse(_ text: String, base: WebURL?) -> Outcome {
        // "Remove any leading and trailing C0 control or space", then "remove all ASCII tab or
        // newline": `ht\ttp://evil/` is `http://evil/` to a browser, so it must be to us.
        let scalars = Array(text.unicodeScalars)
        let start = scalars.firstIndex { $0.value > 0x20 } ?? scalars.endIndex
        let end = scalars.lastIndex { $0.value > 0x20 }.map { $0 + 1 } ?? start
        let input = scalars[start..<max(start, end)].filter { $0 != "\t" && $0 != "\n" && $0 != "\r" }

        var state = State.schemeStart
        var buffer: [Unicode.Scalar] = []
        var pathBuffer = "", queryBuffer = ""
        var scheme = Scheme.http
        var host: Host?
        var port: UInt16?
        var path: [String] = []
        var query: String?
        func finish() -> Outcome {
            guard let host else { return .failure }
            if state == .query { query = queryBuffer }
            return .url(WebURL(scheme: scheme, host: host, port: port, path: path, query: query))
        }
        var atSignSeen = false, insideBrackets = false
        var pointer = 0

        func remaining(startsWith scalar: Unicode.Scalar) -> Bool { pointer + 1 < input.count && input[pointer + 1] == scalar }

        while true {
            let c: Unicode.Scalar? = pointer < input.count ? input[pointer] : nil
            // In http(s) URLs `\` is `/` everywhere but the query and fragment (the standard's
            // "url is special and c is U+005C"): `http:\\evil\x` names host `evil`.
            let isSlash = c == "/" || c == "\\"
            let endsAuthority = c == nil || isSlash || c == "?" || c == "#"
            switch state {
            case .schemeStart:
                if let c, isASCIIAlpha(c) {
                    buffer.append(lowercased(c))
                    state = .scheme
                } else {
                    state = .noScheme
                    pointer -= 1
                }
            case .scheme:
                if let c, isASCIIAlpha(c) || ("0"..."9").contains(c) || c == "+" || c == "-" || c == "." {
                    buffer.append(lowercased(c))
                } else if c == ":" {
                    switch String(String.UnicodeScalarView(buffer)) {
                    case "http": scheme = .http
                    case "https": scheme = .https
                    default: return .otherScheme
                    }
                    buffer = []
                    // Same scheme as the base: `http:foo` is relative, `http://h` is not.
                    state = base?.scheme == scheme ? .specialRelativeOrAuthority : .specialAuthoritySlashes
                } else {
                    // Not a scheme after all (`a b:c`, `1http:`): start over as a relative reference.
                    buffer = []
                    state = .noScheme
                    pointer = -1
                }
            case .noScheme:
                guard base != nil else { return .failure }
                state = .relative
                pointer -= 1
            case .specialRelativeOrAuthority:
                if c == "/", remaining(startsWith: "/") {
                    state = .specialAuthorityIgnoreSlashes
                    pointer += 1
                } else {
                    state = .relative
                    pointer -= 1
                }
            case .specialAuthoritySlashes:
                // Any number of slashes, even none: `https:h` and `https:/h` name host `h`.
                state = .specialAuthorityIgnoreSlashes
                if c == "/", remaining(startsWith: "/") { pointer += 1 } else { pointer -= 1 }
            case .specialAuthorityIgnoreSlashes:
                if !isSlash {
                    state = .authority
                    pointer -= 1
                }
            case .relative:
                guard let base else { return .failure }
                scheme = base.scheme
                if isSlash {
                    state = .relativeSlash
                } else {
                    host = base.host
                    port = base.port
                    path = base.path
                    query = base.query
                    if c == "?" {
                        query = ""
                        state = .query
                    } else if c == "#" {
                        return finish()
                    } else if c != nil {
                        query = nil
                        if !path.isEmpty { path.removeLast() }
                        state = .path
                        pointer -= 1
                    }
                }
            case .relativeSlash:
                guard let base else { return .failure }
                if isSlash {
                    // `//h`, `/\h`, `\\h`: an authority follows.
                    state = .specialAuthorityIgnoreSlashes
                } else {
                    host = base.host
                    port = base.port
                    state = .path
                    pointer -= 1
                }
            case .authority:
                if c == "@" {
                    // Userinfo runs to the last `@` before the authority ends; it is not kept.
                    atSignSeen = true
                    buffer = []
                } else if endsAuthority {
                    if atSignSeen && buffer.isEmpty { return .failure }
                    pointer -= buffer.count + 1
                    buffer = []
                    state = .host
                } else if let c {
                    buffer.append(c)
                }
            case .host:
                if c == ":" && !insideBrackets {
                    guard !buffer.isEmpty, let parsed = parseHost(buffer) else { return .failure }
                    host = parsed
                    buffer = []
                    state = .port
                } else if endsAuthority {
                    pointer -= 1
                    guard !buffer.isEmpty, let parsed = parseHost(buffer) else { return .failure }
                    host = parsed
                    buffer = []
                    state = .pathStart
                } else if let c {
                    if c == "[" { insideBrackets = true }
                    if c == "]" { insideBrackets = false }
                    buffer.append(c)
                }
            case .port:
                if let c, ("0"..."9").contains(c) {
                    buffer.append(c)
                } else if endsAuthority {
                    if !buffer.isEmpty {
                        // Leading zeros are allowed (`:0080` is 80); an empty port is the default.
                        // Read against 65535 before any arithmetic: a long run of digits fails.
                        guard let value = BoundedDecimal.parse(buffer.lazy.map { UInt8(truncatingIfNeeded: $0.value) }, maximum: 65535)
                        else { return .failure }
                        // Port 0 is valid to the standard but reaches nothing: refused, as in
                        // request targets.
                        if value == 0 { return .failure }
                        port = value == Int(scheme.defaultPort) ? nil : UInt16(value)
                        buffer = []
                    }
                    state = .pathStart
                    pointer -= 1
                } else {
                    return .failure
                }
            case .pathStart:
                state = .path
                if !isSlash { pointer -= 1 }
            case .path:
                if endsAuthority {
                    // Dot segments, percent-encoded ones included (`%2e%2E`), are removed here,
                    // before anything is sent: the origin never sees a `..` the proxy did not.
                    if isDoubleDotSegment(pathBuffer) {
                        if !path.isEmpty { path.removeLast() }
                        if !isSlash { path.append("") }
                    } else if isSingleDotSegment(pathBuffer) {
                        if !isSlash { path.append("") }
                    } else {
                        path.append(pathBuffer)
                    }
                    pathBuffer = ""
                    if c == "?" {
                        query = ""
                        state = .query
                    } else if c == "#" {
                        return finish()
                    }
                } else if let c {
                    percentEncode(c, into: &pathBuffer, isEncoded: inPathSet)
                }
            case .query:
                // `\` stays itself here: the query is not a path.
                if c == "#" { return finish() }
                if let c { percentEncode(c, into: &queryBuffer, isEncoded: inSpecialQuerySet) }
            }
            if pointer >= input.count { break }
            pointer += 1
        }
        return finish()
    }

    /// The standard's host parser, minus what it decodes: a percent-encoded or non-ASCII host is
    /// refused rather than decoded and IDNA-mapped (a second decoder is a second reading). The
    /// rest is `Host.parse`, which is stricter than the standard everywhere it differs (it
    /// refuses hosts ending in a number unless canonical IPv4, empty labels, other sub-delims).
    private static func parseHost(_ buffer: [Unicode.Scalar]) -> Host? {
        guard buffer.allSatisfy({ $0.isASCII && $0 != "%" }) else { return nil }
        return try? Host.parse(Substring(String(String.UnicodeScalarView(buffer))))
    }

    private static func isASCIIAlpha(_ c: Unicode.Scalar) -> Bool { ("a"..."z").contains(c) || ("A"..."Z").contains(c) }

    private static func lowercased(_ c: Unicode.Scalar) -> Unicode.Scalar {
        ("A"..."Z").contains(c) ? Unicode.Scalar(c.value | 0x20)! : c
    }

    private static func isSingleDotSegment(_ segment: String) -> Bool {
        segment == "." || segment.lowercased() == "%2e"
    }

    private static func isDoubleDotSegment(_ segment: String) -> Bool {
        ["..", ".%2e", "%2e.", "%2e%2e"].contains(segment.lowercased())
    }

    /// C0 control percent-encode set: C0 controls and everything above `~` (DEL, non-ASCII).
    private static func inC0ControlSet(_ byte: UInt8) -> Bool { byte < 0x20 || byte > 0x7E }

    /// Query set: C0 controls, space, `"`, `#`, `<`, `>`; the special-query set adds `'`.
    private static func inSpecialQuerySet(_ byte: UInt8) -> Bool {
        inC0ControlSet(byte) || [0x20, 0x22, 0x23, 0x3C, 0x3E, 0x27].contains(byte)
    }

    /// Path set: the query set plus `?`, backtick, `{`, `}`. (A later edition of the standard
    /// adds `^`; Node 20 does not encode it, and `^` is visible ASCII either way.)
    private static func inPathSet(_ byte: UInt8) -> Bool {
        inC0ControlSet(byte) || [0x20, 0x22, 0x23, 0x3C, 0x3E, 0x3F, 0x60, 0x7B, 0x7D].contains(byte)
    }

    /// UTF-8 percent-encodes one code point: what leaves the proxy is visible ASCII only.
    private static func percentEncode(_ c: Unicode.Scalar, into output: inout String, isEncoded: (UInt8) -> Bool) {
        let hex = Array("0123456789ABCDEF".utf8)
        for byte in String(c).utf8 {
            if isEncoded(byte) {
                output.unicodeScalars.append("%")
                output.unicodeScalars.append(Unicode.Scalar(hex[Int(byte >> 4)]))
                output.unicodeScalars.append(Unicode.Scalar(hex[Int(byte & 0x0F)]))
            } else {
                output.unicodeScalars.append(Unicode.Scalar(byte))
            }
        }
    }
}

extension String {
    /// Leading and trailing C0 controls and spaces removed (what every URL parser drops first).
    func trimmingCharacters(asciiControlOrSpace: Bool) -> String {
        let scalars = Array(unicodeScalars)
        guard let start = scalars.firstIndex(where: { $0.value > 0x20 }),
            let end = scalars.lastIndex(where: { $0.value > 0x20 })
        else { return "" }
        var result = String.UnicodeScalarView()
        result.append(contentsOf: scalars[start...end])
        return String(result)
    }
}
