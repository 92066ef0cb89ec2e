import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

/// What `RequestAdmission.admit` decided, reduced to what a row states.
enum Admitted: Equatable, Sendable, CustomStringConvertible {
    case reject(ProxyError)
    case tunnel(Origin)
    case intercept(Origin)
    case forward(Origin, String)

    init(_ admission: Admission) {
        switch admission {
        case .reject(let error): self = .reject(error)
        case .tunnel(let origin, _, _): self = .tunnel(origin)
        case .intercept(let origin, _, _): self = .intercept(origin)
        case .forward(let request): self = .forward(request.origin, request.pathAndQuery)
        }
    }

    var description: String {
        switch self {
        case .reject(let error): "reject(\(error.code): \(error.message))"
        case .tunnel(let origin): "tunnel(\(origin))"
        case .intercept(let origin): "intercept(\(origin))"
        case .forward(let origin, let path): "forward(\(origin)\(path))"
        }
    }
}

let route = ConnectionMode.route(upstream: a, publicOrigin: origin("http://127.0.0.1:8081"))
let insideA = ConnectionMode.intercepted(a, client: .unnamed)

struct AdmissionRow: Sendable, CustomTestStringConvertible {
    let name: String
    var fixture: Fixture = Configs.pass
    var tunnel: TunnelPolicy = .deny
    let head: [String]
    let expected: Admitted
    var testDescription: String { name }
}

@Suite("Admission: RequestAdmission.admit, by connection mode")
struct AdmissionTests {
    static func admit(_ row: AdmissionRow, mode: ConnectionMode) -> Admitted {
        Admitted(
            RequestAdmission.admit(
                requestHead(row.head), mode: mode, scope: row.fixture.scope,
                policy: .init(tunnel: row.tunnel, canIntercept: !row.fixture.scope.interceptHosts.isEmpty)))
    }

    static let forwardRows: [AdmissionRow] = [
        AdmissionRow(
            name: "absolute-form is forwarded to its origin",
            head: ["GET http://plain.example/x?y=1 HTTP/1.1", "Host: plain.example"], expected: .forward(plain, "/x?y=1")),
        AdmissionRow(
            name: "absolute-form: a Host naming the proxy itself is ignored",
            head: ["GET http://plain.example/ HTTP/1.1", "Host: 127.0.0.1:8080"], expected: .forward(plain, "/")),
        AdmissionRow(
            name: "absolute-form: a Host naming another origin is ignored, the target decides",
            head: ["GET https://a.example/ HTTP/1.1", "Host: b.example"], expected: .forward(a, "/")),
        AdmissionRow(
            name: "absolute-form with an empty path is /",
            head: ["GET http://plain.example HTTP/1.1", "Host: plain.example"], expected: .forward(plain, "/")),
        AdmissionRow(
            name: "two Host fields: 400",
            head: ["GET http://plain.example/ HTTP/1.1", "Host: plain.example", "Host: other.example"],
            expected: .reject(.malformedRequest("more than one Host header"))),
        AdmissionRow(
            name: "no Host on HTTP/1.1: 400",
            head: ["GET http://plain.example/ HTTP/1.1"], expected: .reject(.malformedRequest("missing Host header"))),
        AdmissionRow(
            name: "no Host on HTTP/1.0 is fine",
            head: ["GET http://plain.example/ HTTP/1.0"], expected: .forward(plain, "/")),
        AdmissionRow(
            name: "a Host that is no authority: 400",
            head: ["GET http://plain.example/ HTTP/1.1", "Host: bad host"], expected: .reject(.malformedRequest("invalid Host header"))),
        AdmissionRow(
            name: "a Host with userinfo: 400",
            head: ["GET http://plain.example/ HTTP/1.1", "Host: user@plain.example"], expected: .reject(.malformedRequest("invalid Host header"))),
        AdmissionRow(
            name: "a Host with port 0: 400",
            head: ["GET http://plain.example/ HTTP/1.1", "Host: plain.example:0"], expected: .reject(.malformedRequest("invalid Host header"))),
        AdmissionRow(
            name: "an empty Host: 400",
            head: ["GET http://plain.example/ HTTP/1.1", "Host: "], expected: .reject(.malformedRequest("invalid Host header"))),
        AdmissionRow(
            name: "origin-form on the forward proxy: not a proxy request",
            head: ["GET /x HTTP/1.1", "Host: plain.example"], expected: .reject(.notProxyRequest)),
        AdmissionRow(
            name: "asterisk-form on the forward proxy: not a proxy request",
            head: ["OPTIONS * HTTP/1.1", "Host: plain.example"], expected: .reject(.notProxyRequest)),
        AdmissionRow(
            name: "authority-form outside CONNECT: 400",
            head: ["GET plain.example:80 HTTP/1.1", "Host: plain.example"], expected: .reject(.unsupportedTarget("unsupported request target"))),
        AdmissionRow(
            name: "Content-Length with Transfer-Encoding: 400",
            head: ["POST http://plain.example/ HTTP/1.1", "Host: plain.example", "Content-Length: 3", "Transfer-Encoding: chunked"],
            expected: .reject(.malformedRequest("both Content-Length and Transfer-Encoding"))),
        AdmissionRow(
            name: "CONNECT where tunnels are allowed: a tunnel",
            tunnel: .allow, head: ["CONNECT unscoped.example:443 HTTP/1.1", "Host: unscoped.example:443"], expected: .tunnel(unscoped)),
        AdmissionRow(
            name: "CONNECT: no Host is fine (the target names the tunnel)",
            tunnel: .allow, head: ["CONNECT unscoped.example:443 HTTP/1.1"], expected: .tunnel(unscoped)),
        AdmissionRow(
            name: "CONNECT: two Hosts play no part",
            tunnel: .allow, head: ["CONNECT unscoped.example:443 HTTP/1.1", "Host: x.example", "Host: y.example"], expected: .tunnel(unscoped)),
        AdmissionRow(
            name: "CONNECT: an invalid Host plays no part",
            tunnel: .allow, head: ["CONNECT unscoped.example:443 HTTP/1.1", "Host: bad host"], expected: .tunnel(unscoped)),
        AdmissionRow(
            name: "CONNECT with Content-Length: 0 is bodiless",
            tunnel: .allow, head: ["CONNECT unscoped.example:443 HTTP/1.1", "Content-Length: 0"], expected: .tunnel(unscoped)),
        AdmissionRow(
            name: "CONNECT with a body: 400",
            tunnel: .allow, head: ["CONNECT unscoped.example:443 HTTP/1.1", "Content-Length: 5"],
            expected: .reject(.malformedRequest("CONNECT with a body"))),
        AdmissionRow(
            name: "CONNECT with a chunked body: 400",
            tunnel: .allow, head: ["CONNECT unscoped.example:443 HTTP/1.1", "Transfer-Encoding: chunked"],
            expected: .reject(.malformedRequest("CONNECT with a body"))),
        AdmissionRow(
            name: "CONNECT without a port: 400",
            tunnel: .allow, head: ["CONNECT unscoped.example HTTP/1.1"], expected: .reject(.unsupportedTarget("CONNECT target needs a port"))),
        AdmissionRow(
            name: "CONNECT where tunnels are denied: 403",
            head: ["CONNECT unscoped.example:443 HTTP/1.1"], expected: .reject(.tunnelDenied(unscoped))),
        AdmissionRow(
            name: "CONNECT to an intercepted host: intercepted, even where tunnels are denied",
            fixture: Configs.intercept, head: ["CONNECT a.example:443 HTTP/1.1"], expected: .intercept(a)),
        AdmissionRow(
            name: "CONNECT to a host not intercepted, where tunnels are denied: 403",
            fixture: Configs.intercept, head: ["CONNECT b.example:443 HTTP/1.1"], expected: .reject(.tunnelDenied(b))),
        AdmissionRow(
            name: "proxy auth: none sent: 407",
            fixture: Configs.proxyAuth, head: ["GET http://plain.example/ HTTP/1.1", "Host: plain.example"],
            expected: .reject(.proxyAuthenticationRequired(.init(reason: .clientNotRecognised, schemes: [.basic, .bearer])))),
        AdmissionRow(
            name: "proxy auth: a wrong password: 407",
            fixture: Configs.proxyAuth,
            head: ["GET http://plain.example/ HTTP/1.1", "Host: plain.example", "Proxy-Authorization: Bearer let-me-out"],
            expected: .reject(.proxyAuthenticationRequired(.init(reason: .proxyAuthorizationNotRecognised, schemes: [.basic, .bearer])))),
        AdmissionRow(
            name: "proxy auth: Bearer with the password",
            fixture: Configs.proxyAuth, head: ["GET http://plain.example/ HTTP/1.1", "Host: plain.example", "Proxy-Authorization: Bearer let-me-in"],
            expected: .forward(plain, "/")),
        AdmissionRow(
            name: "proxy auth: Basic any-user:password",
            fixture: Configs.proxyAuth,
            head: [
                "GET http://plain.example/ HTTP/1.1", "Host: plain.example",
                "Proxy-Authorization: Basic \(Base64.encode(Array("me:let-me-in".utf8)))",
            ],
            expected: .forward(plain, "/")),
        AdmissionRow(
            name: "proxy auth: checked before anything else (even a bad target)",
            fixture: Configs.proxyAuth, head: ["GET /x HTTP/1.1", "Host: plain.example"],
            expected: .reject(.proxyAuthenticationRequired(.init(reason: .clientNotRecognised, schemes: [.basic, .bearer])))),
        AdmissionRow(
            name: "proxy auth: a CONNECT without it: 407",
            fixture: Configs.proxyAuth, head: ["CONNECT a.example:443 HTTP/1.1"],
            expected: .reject(.proxyAuthenticationRequired(.init(reason: .clientNotRecognised, schemes: [.basic, .bearer])))),
    ]

    @Test("forward proxy", arguments: forwardRows)
    func forwardProxy(_ row: AdmissionRow) {
        let admitted = Self.admit(row, mode: .forwardProxy)
        #expect(admitted == row.expected)
    }

    static let routeRows: [AdmissionRow] = [
        AdmissionRow(
            name: "origin-form with Host on the listener's port, by any name",
            head: ["GET /v1/x HTTP/1.1", "Host: localhost:8081"], expected: .forward(a, "/v1/x")),
        AdmissionRow(
            name: "origin-form with Host an address on the listener's port",
            head: ["GET / HTTP/1.1", "Host: 10.1.2.3:8081"], expected: .forward(a, "/")),
        AdmissionRow(
            name: "origin-form with Host naming the upstream",
            head: ["GET / HTTP/1.1", "Host: a.example"], expected: .forward(a, "/")),
        AdmissionRow(
            name: "origin-form with Host naming the upstream with its port",
            head: ["GET / HTTP/1.1", "Host: a.example:443"], expected: .forward(a, "/")),
        AdmissionRow(
            name: "Host on another port: host_mismatch",
            head: ["GET / HTTP/1.1", "Host: localhost:9999"], expected: .reject(.hostMismatch)),
        AdmissionRow(
            name: "Host without a port (80, not the listener's): host_mismatch",
            head: ["GET / HTTP/1.1", "Host: localhost"], expected: .reject(.hostMismatch)),
        AdmissionRow(
            name: "Host naming another origin: host_mismatch",
            head: ["GET / HTTP/1.1", "Host: b.example"], expected: .reject(.hostMismatch)),
        AdmissionRow(
            name: "no Host on HTTP/1.1: 400",
            head: ["GET / HTTP/1.1"], expected: .reject(.malformedRequest("missing Host header"))),
        AdmissionRow(
            name: "two Hosts: 400",
            head: ["GET / HTTP/1.1", "Host: localhost:8081", "Host: localhost:8081"],
            expected: .reject(.malformedRequest("more than one Host header"))),
        AdmissionRow(
            name: "absolute-form for the upstream is forwarded, its Host ignored",
            head: ["GET https://a.example/z HTTP/1.1", "Host: anything.example:1"], expected: .forward(a, "/z")),
        AdmissionRow(
            name: "absolute-form for another origin is refused",
            head: ["GET https://b.example/ HTTP/1.1", "Host: b.example"], expected: .reject(.tunnelOriginMismatch)),
        AdmissionRow(
            name: "asterisk-form: refused",
            head: ["OPTIONS * HTTP/1.1", "Host: localhost:8081"], expected: .reject(.notProxyRequest)),
        AdmissionRow(
            name: "CONNECT on a route: 400",
            tunnel: .allow, head: ["CONNECT b.example:443 HTTP/1.1"],
            expected: .reject(.malformedRequest("CONNECT is for the forward proxy, not inside a tunnel, on a route or on the transparent listener"))),
    ]

    @Test("route listener (upstream https://a.example, listening on 127.0.0.1:8081)", arguments: routeRows)
    func routeListener(_ row: AdmissionRow) {
        #expect(Self.admit(row, mode: route) == row.expected)
    }

    static let interceptedRows: [AdmissionRow] = [
        AdmissionRow(
            name: "origin-form with the tunnel's Host",
            head: ["GET /v1 HTTP/1.1", "Host: a.example"], expected: .forward(a, "/v1")),
        AdmissionRow(
            name: "Host with another port: host_mismatch",
            head: ["GET / HTTP/1.1", "Host: a.example:444"], expected: .reject(.hostMismatch)),
        AdmissionRow(
            name: "Host naming another host: host_mismatch",
            head: ["GET / HTTP/1.1", "Host: b.example"], expected: .reject(.hostMismatch)),
        AdmissionRow(
            name: "absolute-form for the tunnel's origin",
            head: ["GET https://a.example/q HTTP/1.1", "Host: a.example"], expected: .forward(a, "/q")),
        AdmissionRow(
            name: "absolute-form for the tunnel's host over http: tunnel_origin_mismatch",
            head: ["GET http://a.example/ HTTP/1.1", "Host: a.example"], expected: .reject(.tunnelOriginMismatch)),
        AdmissionRow(
            name: "asterisk-form: refused",
            head: ["OPTIONS * HTTP/1.1", "Host: a.example"], expected: .reject(.notProxyRequest)),
        AdmissionRow(
            name: "CONNECT inside: 400",
            tunnel: .allow, head: ["CONNECT b.example:443 HTTP/1.1"],
            expected: .reject(.malformedRequest("CONNECT is for the forward proxy, not inside a tunnel, on a route or on the transparent listener"))),
        AdmissionRow(
            name: "proxy auth is inherited from the CONNECT: none needed inside",
            fixture: Configs.proxyAuth, head: ["GET / HTTP/1.1", "Host: a.example"], expected: .forward(a, "/")),
        AdmissionRow(
            name: "proxy auth inherited: a wrong Proxy-Authorization inside does not matter",
            fixture: Configs.proxyAuth, head: ["GET / HTTP/1.1", "Host: a.example", "Proxy-Authorization: Bearer nope"], expected: .forward(a, "/")),
    ]

    @Test("inside an intercepted tunnel to https://a.example", arguments: interceptedRows)
    func intercepted(_ row: AdmissionRow) {
        #expect(Self.admit(row, mode: insideA) == row.expected)
    }

    @Test("a forwarded request keeps the client identity, the body framing and the userinfo as sent")
    func forwardedRequest() throws {
        let head = requestHead(["POST http://user:pa%20ss@plain.example/p HTTP/1.1", "Host: plain.example", "Content-Length: 7"])
        let admission = RequestAdmission.admit(
            head, mode: .forwardProxy, scope: Configs.pass.scope, policy: .init(tunnel: .deny, canIntercept: false))
        guard case .forward(let request) = admission else {
            Issue.record("not forwarded: \(admission)")
            return
        }
        #expect(request.origin == plain)
        #expect(request.pathAndQuery == "/p")
        #expect(request.userinfo == "user:pa%20ss")
        #expect(request.framing == .contentLength(7))
        #expect(request.client == .unnamed)
        #expect(!request.isUpgrade)
    }

    @Test("the machine answers a refused admission and closes (the body, if any, was not read)")
    func machineRefuses() {
        var p = Playbook()
        p.start([.arm(.clientHead)])
        p.on(
            p.head("POST /x HTTP/1.1", "Host: plain.example", "Content-Length: 5"),
            [
                .cancelTimer,
                .write(startingWith: "HTTP/1.1 400 Bad Request\r\n", containing: ["not_a_proxy_request", "Connection: close"]),
                .emit(.status(400), .method("POST"), .failure(.proxy(.notProxyRequest))),
                .close(.afterFlush),
            ])
        #expect(p.connected.isEmpty)
    }
}
