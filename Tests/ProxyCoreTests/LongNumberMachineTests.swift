import HTTP1Codec
import ProxyCore
import ScopePolicy
import Testing

/// The whole pure path with long numbers where a request or a response puts them: the machine
/// answers (400, a relayed or blocked redirect) and goes on; nothing overflows (docs/security-model.md,
/// "Strict parsing"). One input per argument: a trap would crash the test process.
@Suite("Machine: long numbers in targets, Host and Location")
struct LongNumberMachineTests {
    static let forms = [
        String(repeating: "7", count: 25), "9223372036854775808", "18446744073709551616", "0000000000000000000000001", "-1", "+1", "1e999",
    ]

    static func writes(_ actions: [ConnectionAction]) -> String {
        actions.map { if case .writeToClient(let bytes) = $0 { text(bytes) } else { "" } }.joined()
    }

    @Test(
        "a long number in the target's host or port, or in Host, is a 400 and nothing goes upstream",
        arguments: forms.flatMap { n in
            [
                ["GET http://128.0.\(n).1/ HTTP/1.1", "Host: 128.0.\(n).1"], ["GET http://\(n).0.0.1/ HTTP/1.1", "Host: a.example"],
                ["GET http://a.example:\(n)/ HTTP/1.1", "Host: a.example"], ["GET http://a.example/ HTTP/1.1", "Host: 128.0.\(n).1"],
                ["GET http://a.example/ HTTP/1.1", "Host: a.example:\(n)"], ["CONNECT 128.0.\(n).1:443 HTTP/1.1", "Host: 128.0.\(n).1:443"],
                ["GET http://[::ffff:1.2.3.\(n)]/ HTTP/1.1", "Host: [::ffff:1.2.3.\(n)]"],
            ]
        })
    func request(_ lines: [String]) {
        var p = Playbook(Configs.follow)
        p.start([.arm(.clientHead)])
        let actions = p.feed(p.head(lines))
        #expect(Self.writes(actions).hasPrefix("HTTP/1.1 400 "), "\(lines)")
        #expect(!actions.contains { if case .connect = $0 { true } else { false } }, "\(lines)")
    }

    enum Mode: String, CaseIterable { case pass, follow, block }

    @Test(
        "a Location with a long number is answered in every redirect mode, never followed to a long host", arguments: Mode.allCases,
        forms.flatMap { n in
            ["http://128.0.\(n).1/", "https://1.2.3.\(n)/x", "//a.example:\(n)/", "https://[::ffff:1.2.3.\(n)]/", "http://a.example\\@128.0.\(n).1/"]
        })
    func location(_ mode: Mode, _ location: String) {
        let fixture =
            switch mode {
            case .pass: Configs.pass;
            case .follow: Configs.follow;
            case .block: Configs.block
            }
        var p = Playbook(fixture)
        p.sent(["GET https://a.example/start HTTP/1.1", "Host: a.example"], to: a)
        let actions = p.feed(.responseHead(hop(1), response("HTTP/1.1 302 Found", "Location: \(location)", "Content-Length: 0")))
        // Some of these are real origins, followed in follow mode: `:0000000000000000000000001` is
        // port 1, `1.2.3.1e999` a DNS name, `a.example\@…` host a.example to WHATWG.
        let followed = actions.compactMap { if case .connect(_, let origin, _, _, _) = $0 { origin } else { nil } }
        #expect(followed.allSatisfy { $0.host.utf8.count <= 20 && mode == .follow }, "\(mode) \(location) -> \(followed)")
        if followed.isEmpty {
            #expect(Self.writes(actions).hasPrefix(mode == .block ? "HTTP/1.1 502 " : "HTTP/1.1 302 "), "\(mode) \(location)")
        }
    }
}
