import HTTP1Codec
import JSONText
import ScopePolicy

/// One response the admin listener writes whole (everything but the event stream).
struct AdminResponse: Sendable {
    var status: Int
    var headers: [(String, String)] = []
    var body: [UInt8] = []
    /// The connection ends after it (a refused body, a malformed head).
    var close = false

    static func text(_ status: Int, _ body: String, contentType: String = "text/plain") -> AdminResponse {
        AdminResponse(status: status, headers: [("Content-Type", contentType)], body: Array(body.utf8))
    }

    /// `{"error":CODE,"hint":HINT}`: codes and hints are the proxy's fixed words, never request data.
    static func json(_ status: Int, error code: String, hint: String) -> AdminResponse {
        var line = JSONLine()
        line.string("error", code)
        line.string("hint", hint)
        return AdminResponse(status: status, headers: [("Content-Type", "application/json")], body: line.finish() + [0x0A])
    }

    static func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 413: "Content Too Large"
        case 503: "Service Unavailable"
        default: "Error"
        }
    }

    /// The head and (unless the request was HEAD) the body.
    func serialized(includeBody: Bool, keepAlive: Bool) -> [UInt8] {
        var text = "HTTP/1.1 \(status) \(Self.reason(status))\r\n"
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        text += "Content-Length: \(body.count)\r\n"
        text += keepAlive && !close ? "\r\n" : "Connection: close\r\n\r\n"
        return Array(text.utf8) + (includeBody ? body : [])
    }
}

/// What the admin listener does with a request head.
enum AdminAnswer {
    case response(AdminResponse)
    /// `/view/events`, allowed: a viewer with its filter and `Last-Event-ID`.
    case events(ViewFilter, lastEventID: UInt64?)
}

/// The admin listener's routes (docs/logging.md "Metrics", docs/view.md): decisions only, no
/// sockets. `/healthz` and `/metrics` answer anyone who reaches the address; `/view*` checks the
/// Host (DNS rebinding), the Origin and `admin_token`.
struct AdminRoutes: Sendable {
    let metrics: Metrics
    let access: ViewAccess
    /// The configured admin host (an IP literal or `localhost`).
    let adminHost: String
    let adminIsLoopback: Bool
    /// A feed to stream: without one `/view*` does not exist.
    let viewEnabled: Bool

    static let pageHeaders: [(String, String)] = [
        (
            "Content-Security-Policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
                + "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        ),
        ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer"), ("Cache-Control", "no-store"),
    ]
    static let streamHeaders: [(String, String)] = [
        ("Content-Type", "text/event-stream"), ("Cache-Control", "no-store"), ("X-Accel-Buffering", "no"),
        ("X-Content-Type-Options", "nosniff"),
    ]

    func answer(_ head: RequestHead, draining: Bool) -> AdminAnswer {
        // Health checks and scrapers never send a body: a declared one is refused before a byte of
        // it is read, and the connection ends (its bytes would otherwise be read as a next request).
        let framing: BodyFraming
        do {
            framing = try BodyFraming.forRequest(head)
        } catch {
            return .response(AdminResponse(status: 400, body: Array("bad request\n".utf8), close: true))
        }
        guard framing == .none else {
            var refused = AdminResponse.text(413, "the admin endpoint takes no request body\n")
            refused.close = true
            return .response(refused)
        }
        guard head.method == "GET" || head.method == "HEAD" else {
            var refused = AdminResponse.text(405, "GET or HEAD only\n")
            refused.headers.append(("Allow", "GET, HEAD"))
            return .response(refused)
        }
        let path = head.target.prefix { $0 != "?" }
        if viewEnabled, path == "/view" || path.hasPrefix("/view/") {
            return view(head, path: String(path))
        }
        switch head.target {
        case "/healthz": return .response(draining ? .text(503, "draining\n") : .text(200, "ok\n"))
        case "/metrics": return .response(.text(200, metrics.render(), contentType: "text/plain; version=0.0.4"))
        default: return .response(.text(404, "not found\n"))
        }
    }

    // MARK: The live view

    private func view(_ head: RequestHead, path: String) -> AdminAnswer {
        if let refusal = hostRefusal(head.fields) { return .response(secured(refusal)) }
        let allowed: [String]
        switch path {
        case "/view": allowed = ["token"]
        case "/view/events": allowed = ["client", "origin"]
        case "/view/view.css", "/view/view.js": allowed = []
        default: return .response(secured(.json(404, error: "not_found", hint: "the view is at /view")))
        }
        let query: [String: [UInt8]]
        switch ViewQuery.parse(head.target, allowed: allowed) {
        case .failure(let problem): return .response(secured(.json(400, error: "view_bad_query", hint: problem.hint)))
        case .success(let parsed): query = parsed
        }
        var setCookie: String?
        switch authorize(head.fields, queryToken: path == "/view" ? query["token"] : nil) {
        case .refused(let hint):
            var refused = AdminResponse.json(401, error: "view_unauthorized", hint: hint)
            refused.headers.append(("WWW-Authenticate", "Bearer"))
            return .response(secured(refused))
        case .allowed(let cookie): setCookie = cookie
        }
        switch path {
        case "/view/events":
            var filter = ViewFilter()
            if let client = query["client"] {
                guard let text = String(validating: client, as: UTF8.self), !text.isEmpty else {
                    return .response(secured(.json(400, error: "view_bad_query", hint: "client= names a client or an address")))
                }
                filter.client = text
            }
            if let origin = query["origin"] {
                guard let text = String(validating: origin, as: UTF8.self), let (host, port) = ViewFilter.origin(text) else {
                    return .response(
                        secured(.json(400, error: "view_bad_query", hint: "origin= is host:port, host or scheme://host[:port]")))
                }
                filter.originHost = host
                filter.originPort = port
            }
            var lastEventID: UInt64?
            switch head.fields.singleValue(of: "last-event-id") {
            case .absent: break
            case .one(let value):
                guard value.utf8.count <= 19, let seq = BoundedDecimal.parse(value.utf8, maximum: Int.max) else {
                    return .response(
                        secured(.json(400, error: "view_bad_last_event_id", hint: "Last-Event-ID is the id of an event this stream sent")))
                }
                lastEventID = UInt64(seq)
            case .repeated, .conflicting:
                return .response(secured(.json(400, error: "view_bad_last_event_id", hint: "send one Last-Event-ID")))
            }
            return .events(filter, lastEventID: lastEventID)
        case "/view/view.css": return .response(asset(ViewPage.css, "text/css; charset=utf-8", setCookie))
        case "/view/view.js": return .response(asset(ViewPage.javascript, "text/javascript; charset=utf-8", setCookie))
        default: return .response(asset(ViewPage.html, "text/html; charset=utf-8", setCookie))
        }
    }

    private func asset(_ bytes: [UInt8], _ contentType: String, _ setCookie: String?) -> AdminResponse {
        var response = AdminResponse(status: 200, headers: [("Content-Type", contentType)], body: bytes)
        if let setCookie { response.headers.append(("Set-Cookie", setCookie)) }
        return secured(response)
    }

    private func secured(_ response: AdminResponse) -> AdminResponse {
        var response = response
        response.headers += Self.pageHeaders
        return response
    }

    /// Against DNS rebinding (a page of another site whose name now resolves to 127.0.0.1): the
    /// browser then sends that name as Host, so only an IP literal, `localhost` or the admin's own
    /// host is taken; and a request a page of another origin made carries its Origin.
    func hostRefusal(_ fields: HTTPFields) -> AdminResponse? {
        let refused = AdminResponse.json(
            403, error: "view_host_refused",
            hint: "open the view by the admin address itself (http://127.0.0.1:PORT/view or http://localhost:PORT/view): "
                + "a request naming another host may come from a DNS-rebinding page")
        guard let host = fields.singleValue(of: "host").only, let (parsed, _) = try? RequestTarget.parseAuthority(Substring(host))
        else { return refused }
        let configured = adminHost.contains(":") ? "[\(adminHost.lowercased())]" : adminHost.lowercased()
        guard parsed.kind != .name || parsed.normalized == "localhost" || parsed.normalized == configured else { return refused }
        switch fields.singleValue(of: "origin") {
        case .absent: return nil
        case .one(let origin) where asciiEqualsIgnoringCase(origin, lowercase: "http://" + host.lowercased()): return nil
        default:
            return .json(
                403, error: "view_origin_refused", hint: "the view answers only its own pages: a page of another origin asked for it")
        }
    }

    enum Authorization: Equatable {
        /// `setCookie`: the `Set-Cookie` value when the token came in the query.
        case allowed(setCookie: String?)
        case refused(hint: String)
    }

    /// `admin_token`: a Bearer token, the cookie `?token=` set, or `?token=` itself (on `/view`).
    func authorize(_ fields: HTTPFields, queryToken: [UInt8]?) -> Authorization {
        switch access.requirement {
        case .none:
            return adminIsLoopback
                ? .allowed(setCookie: nil)
                : .refused(hint: "the admin address is not loopback and no admin_token is configured: set admin_token in the config")
        case .unavailable:
            return .refused(hint: "admin_token's secret has no value now (see the proxy's secret diagnostics)")
        case .token(let token):
            if let presented = ViewAccess.bearer(fields), ViewAccess.matches(presented, token) { return .allowed(setCookie: nil) }
            let now = ViewAccess.wallClockSeconds()
            for presented in ViewAccess.cookies(fields) where ViewAccess.cookieIsValid(presented, for: token, now: now) {
                return .allowed(setCookie: nil)
            }
            if let queryToken, ViewAccess.matches(queryToken, token) {
                let cookie = ViewAccess.cookieValue(for: token, expires: now + ViewAccess.cookieLifetimeSeconds)
                return .allowed(
                    setCookie: "\(ViewAccess.cookieName)=\(String(decoding: cookie, as: UTF8.self)); Path=/view; "
                        + "Max-Age=\(ViewAccess.cookieLifetimeSeconds); HttpOnly; SameSite=Strict")
            }
            return .refused(
                hint: "the view needs admin_token: send Authorization: Bearer TOKEN, or open /view?token=TOKEN once (it sets a cookie)")
        }
    }
}

/// The query of a `/view*` request: known keys only, each at most once, percent-decoded (RFC 3986
/// §2.1; `+` is kept as is: a pasted token may contain one).
enum ViewQuery {
    struct Problem: Error, Equatable {
        let hint: String
    }

    static func parse(_ target: String, allowed: [String]) -> Result<[String: [UInt8]], Problem> {
        guard let mark = target.firstIndex(of: "?") else { return .success([:]) }
        var result: [String: [UInt8]] = [:]
        for pair in target[target.index(after: mark)...].split(separator: "&", omittingEmptySubsequences: true) {
            let key = String(pair.prefix { $0 != "=" })
            guard allowed.contains(key) else {
                let known = allowed.isEmpty ? "it takes none" : "known: " + allowed.joined(separator: ", ")
                return .failure(Problem(hint: "unknown query parameter (\(known))"))
            }
            guard result[key] == nil else { return .failure(Problem(hint: "\(key) is given twice")) }
            guard let value = percentDecoded(pair.dropFirst(key.utf8.count + 1).utf8) else {
                return .failure(Problem(hint: "\(key)'s value has a broken %-escape"))
            }
            result[key] = value
        }
        return .success(result)
    }

    static func percentDecoded<Bytes: Collection>(_ bytes: Bytes) -> [UInt8]? where Bytes.Element == UInt8 {
        var output: [UInt8] = []
        var iterator = bytes.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                output.append(byte)
                continue
            }
            guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else { return nil }
            output.append(high << 4 | low)
        }
        return output
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: byte - 0x30
        case 0x41...0x46: byte - 0x37
        case 0x61...0x66: byte - 0x57
        default: nil
        }
    }
}
