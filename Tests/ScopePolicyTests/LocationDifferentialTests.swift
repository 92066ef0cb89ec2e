import Foundation
import HTTP1Codec
import Testing

@testable import ScopePolicy

/// The request URLs the Locations answer: an https API (Locations with `http:` change scheme) and
/// an http loopback origin with a port (`http:` Locations are then same-scheme, hence relative).
enum LocationBase: String, CaseIterable, Sendable {
    case api = "https://api.library.example/v1/books/list?x=1"
    case local = "http://127.0.0.1:8765/a/b?x=1"

    var origin: Origin {
        switch self {
        case .api: try! Origin.parse("https://api.library.example")
        case .local: try! Origin.parse("http://127.0.0.1:8765")
        }
    }

    var pathAndQuery: String {
        switch self {
        case .api: "/v1/books/list?x=1"
        case .local: "/a/b?x=1"
        }
    }
}

/// What the proxy must make of a Location.
enum LocationExpectation: Sendable, CustomStringConvertible {
    /// Resolves, and to exactly what Node's WHATWG parser resolves it to.
    case same
    /// `.unparseable` on purpose: stricter than WHATWG (it decodes, or reads a number as IPv4).
    case refused
    /// `.otherScheme`.
    case otherScheme
    /// Resolves, while Node refuses it: a recorded disagreement, with its reason.
    case nodeRefuses(String)

    var description: String {
        switch self {
        case .same: "same"
        case .refused: "refused"
        case .otherScheme: "otherScheme"
        case .nodeRefuses: "nodeRefuses"
        }
    }
}

struct LocationCase: Sendable, CustomTestStringConvertible {
    let base: LocationBase
    let location: String
    let expected: LocationExpectation

    init(_ base: LocationBase, _ location: String, _ expected: LocationExpectation) {
        self.base = base
        self.location = location
        self.expected = expected
    }

    var testDescription: String { "\(location.debugDescription) against \(base)" }
}

/// Locations where URL parsers have disagreed, or where a naive resolver reads another host than a
/// browser does. Each row: the base it is judged against, the Location, what the proxy must do.
let locationCorpus: [LocationCase] = [
    // Ordinary references (RFC 3986 §5.4 and WHATWG agree).
    .init(.api, "https://CDN.library.example/a?token=t#frag", .same),
    .init(.api, "//cdn.example/b", .same),
    .init(.api, "//h", .same),
    .init(.api, "/c", .same),
    .init(.api, "d", .same),
    .init(.api, "../e", .same),
    .init(.api, "?page=2", .same),
    .init(.api, "?q", .same),
    .init(.api, "?", .same),
    .init(.api, "#f", .same),
    .init(.api, "", .same),
    .init(.api, "http://h?x", .same),
    .init(.api, "http://h#x", .same),
    // Dot segments, encoded ones included.
    .init(.api, ".", .same),
    .init(.api, "..", .same),
    .init(.api, "/a/./b/../c", .same),
    .init(.api, "%2e%2e", .same),
    .init(.api, "/a/%2e%2E/b", .same),
    .init(.api, "/a/.%2e/b", .same),
    .init(.api, "/a/%2E./b", .same),
    .init(.api, "/a/..%2f", .same),
    .init(.api, "../../../../x", .same),
    .init(.api, "/a/b/../../../c", .same),
    // Special schemes: any number of `/` or `\` before the authority, even none.
    .init(.api, "http:/h/x", .same),
    .init(.api, "http:\\h", .same),
    .init(.api, "http:\\\\h\\x", .same),
    .init(.api, "http:h/x", .same),
    .init(.api, "http:foo", .same),
    .init(.api, "http:////h/x", .same),
    .init(.api, "///h/x", .same),
    .init(.api, "/\\h/x", .same),
    .init(.api, "\\\\h/x", .same),
    .init(.api, "\\/h/x", .same),
    // Same scheme as the base without `//`: relative (WHATWG "special relative or authority").
    .init(.api, "https:h", .same),
    .init(.api, "https:/h", .same),
    .init(.api, "https:foo", .same),
    .init(.api, "https:", .same),
    .init(.api, "https:?x", .same),
    .init(.api, "https:#x", .same),
    .init(.api, "http:", .refused),
    .init(.local, "http:/h/x", .same),
    .init(.local, "http:\\h", .same),
    .init(.local, "http:\\\\h", .same),
    .init(.local, "http:foo", .same),
    .init(.local, "http:?y", .same),
    .init(.local, "https:h", .same),
    .init(.local, "/\\h/x", .same),
    .init(.local, "http://localhost:8765/x", .same),
    .init(.local, "http://127.0.0.1:8765/x", .same),
    // Ports.
    .init(.api, "http://h:/x", .same),
    .init(.api, "http://h:0080/", .same),
    .init(.api, "https://h:443/x", .same),
    .init(.api, "http://h:65535/", .same),
    .init(.api, "http://h:65536/", .refused),
    .init(.api, "//h:99999/", .refused),
    .init(.api, "http://h:0/", .refused),
    .init(.api, "http://h:80:90/", .refused),
    .init(.api, "http://h:8a/", .refused),
    // Userinfo runs to the last `@` of the authority; `\` ends the authority.
    .init(.api, "http://u:p@h/", .same),
    .init(.api, "http://u@v@h/", .same),
    .init(.api, "http://u@/x", .refused),
    .init(.api, "http://h\\@evil/", .same),
    .init(.api, "http://evil\\@h/", .same),
    .init(.api, "http://h\\\\@evil/", .same),
    // IP literals: only forms every parser reads alike.
    .init(.api, "http://[::1]/", .same),
    .init(.api, "http://[0:0::1]:8080/x", .same),
    .init(.api, "http://[::ffff:1.2.3.4]/", .same),
    .init(.api, "http://[fe80::1%25eth0]/", .refused),
    .init(.api, "http://[::1/", .refused),
    .init(.api, "http://127.0.0.1./", .same),
    .init(.api, "http://0x7f.1/", .refused),
    .init(.api, "http://127.1/", .refused),
    .init(.api, "http://2130706433/", .refused),
    .init(.api, "http://1.2.3.0x4/", .refused),
    .init(.api, "http://0x7f.0.0.1/", .refused),
    .init(.api, "http://127.000.0.1/", .refused),
    .init(.api, "http://a.0x/", .refused),
    // Names: no decoding, no IDNA mapping.
    .init(.api, "http://h./", .same),
    .init(.api, "HTTP://H_1.Example/", .same),
    .init(.api, "http://-a.example/", .same),
    .init(.api, "http://xn--bcher-kva.example/", .same),
    .init(
        .api, "http://xn--a.example/",
        .nodeRefuses(
            "UTS #46 validity of an xn-- label is not checked: the proxy reads the literal ASCII name, the one DNS resolves")),
    .init(.api, "http://a..b/", .refused),
    .init(.api, "http://a%41.example/", .refused),
    .init(.api, "http://ex%61mple.com/", .refused),
    .init(.api, "http://bücher.example/", .refused),
    .init(.api, "http://ＥＸＡＭＰＬＥ.com/", .refused),
    .init(.api, "http://a.example\u{0}/", .refused),
    .init(.api, "http://a b/", .refused),
    // Tabs and newlines anywhere vanish; C0 controls and spaces at the ends are trimmed.
    .init(.api, "ht\ttp://evil.example/", .same),
    .init(.api, "http://ev\nil.example/", .same),
    .init(.api, "http\r\n://evil.example/", .same),
    .init(.api, "htt\tps://evil.example/", .same),
    .init(.api, "/\t/evil.example/x", .same),
    .init(.api, "  http://h/ ", .same),
    .init(.api, "\u{1}http://h/\u{1f}", .same),
    // Paths and queries are percent-encoded as WHATWG serializes them.
    .init(.api, "http://h/a b\"<>`{}|", .same),
    .init(.api, "http://h/é?é", .same),
    .init(.api, "http://h/?q=<'> \"", .same),
    .init(.api, "http://h/a\\b?c\\d", .same),
    .init(.api, "http://h/%zz", .same),
    .init(.api, "http://h/\u{7f}", .same),
    // Not a scheme after all: relative references.
    .init(.api, "a b:c", .same),
    .init(.api, "1http://h/", .same),
    // Other schemes.
    .init(.api, "javascript:alert(1)", .otherScheme),
    .init(.api, "j\tavascript:alert(1)", .otherScheme),
    .init(.api, "mailto:a@b", .otherScheme),
    .init(.api, "ftp://h/", .otherScheme),
    .init(.api, "file:///etc/passwd", .otherScheme),
    .init(.api, "data:text/html,x", .otherScheme),
    .init(.api, "ws://h/", .otherScheme),
]

/// How a WHATWG parser read a Location: its scheme, host, port ("" for the default) and what an
/// origin-form request line would carry, or nil when it threw.
struct WHATWGReading: Decodable {
    let protocolName: String
    let hostname: String
    let port: String
    let pathAndQuery: String

    enum CodingKeys: String, CodingKey {
        case protocolName = "protocol"
        case hostname, port, pathAndQuery
    }
}

enum NodeURL {
    /// `new URL(location, base)` for each pair; the path and query as href has them (an empty
    /// query keeps its `?`), the fragment dropped.
    static let script = """
        const pairs = JSON.parse(require('fs').readFileSync(0, 'utf8'));
        const out = pairs.map(([location, base]) => {
          let url;
          try { url = new URL(location, base); } catch { return null; }
          const href = url.href.split('#')[0];
          const query = url.search || (href.endsWith('?') ? '?' : '');
          return { protocol: url.protocol, hostname: url.hostname, port: url.port, pathAndQuery: url.pathname + query };
        });
        process.stdout.write(JSON.stringify(out));
        """

    static func locate() -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = "\(directory)/node"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    static func read(_ pairs: [(location: String, base: String)], node: String) throws -> [WHATWGReading?] {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: node)
        process.arguments = ["-e", script]
        let input = Pipe(), output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        input.fileHandleForWriting.write(try JSONSerialization.data(withJSONObject: pairs.map { [$0.location, $0.base] }))
        try input.fileHandleForWriting.close()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw NodeError(description: "node exited with \(process.terminationStatus)") }
        return try JSONDecoder().decode([WHATWGReading?].self, from: data)
    }

    struct NodeError: Error, CustomStringConvertible { let description: String }
}

@Suite("Redirect Locations read as a WHATWG URL parser reads them")
struct LocationDifferentialTests {
    static func ours(_ location: String, _ base: LocationBase) -> LocationResolution {
        RedirectPolicy.resolve(location, origin: base.origin, pathAndQuery: base.pathAndQuery)
    }

    @Test("the corpus is large enough to mean something")
    func corpusSize() {
        #expect(locationCorpus.count >= 60)
    }

    @Test("each Location resolves, is refused, or is another scheme, as its row says", arguments: locationCorpus)
    func expectation(_ row: LocationCase) {
        let resolution = Self.ours(row.location, row.base)
        switch (row.expected, resolution) {
        case (.same, .target), (.nodeRefuses, .target), (.refused, .unparseable), (.otherScheme, .otherScheme): break
        default: Issue.record("\(row.testDescription): expected \(row.expected), got \(resolution)")
        }
    }

    /// Every Location of the corpus against both bases: where the proxy resolves a Location,
    /// Node must resolve it to the same origin and path; where the proxy sees another scheme,
    /// Node must not see http(s). Hosts are compared after the proxy's own normalization
    /// (trailing dot, canonical IPv6 text), which request targets and the config share.
    @Test("the proxy never reads a Location as naming another origin or path than Node's WHATWG URL parser")
    func agreeWithNode() throws {
        guard let node = NodeURL.locate() else {
            Issue.record("node is not on PATH: this test compares Locations with Node's WHATWG URL parser (`make test` installs nodejs)")
            return
        }
        let rows = locationCorpus.map { ($0.location, $0.base) } + locationCorpus.map { ($0.location, $0.base == .api ? LocationBase.local : .api) }
        let readings = try NodeURL.read(rows.map { (location: $0.0, base: $0.1.rawValue) }, node: node)
        try #require(readings.count == rows.count)
        let recorded = Dictionary(
            locationCorpus.compactMap { row -> (String, String)? in
                if case .nodeRefuses(let why) = row.expected { return (row.location, why) }
                return nil
            }, uniquingKeysWith: { first, _ in first })

        for ((location, base), reading) in zip(rows, readings) {
            let label = "\(location.debugDescription) against \(base.rawValue)"
            switch Self.ours(location, base) {
            case .target(let target):
                guard let reading else {
                    if recorded[location] == nil { Issue.record("\(label): we read \(target.origin)\(target.pathAndQuery), Node refuses it") }
                    continue
                }
                guard let scheme = Scheme(rawValue: String(reading.protocolName.dropLast())) else {
                    Issue.record("\(label): we read \(target.origin), Node reads scheme \(reading.protocolName)")
                    continue
                }
                let theirHost = try? Host.parse(Substring(reading.hostname))
                let theirPort = reading.port.isEmpty ? scheme.defaultPort : UInt16(reading.port)
                let theirs = theirHost.map { Origin(scheme: scheme, host: $0, port: theirPort) }
                #expect(
                    theirs == target.origin,
                    "\(label): origin: ours \(target.origin), Node's \(reading.protocolName)//\(reading.hostname):\(reading.port)")
                #expect(reading.pathAndQuery == target.pathAndQuery, "\(label): path: ours \(target.pathAndQuery), Node's \(reading.pathAndQuery)")
                if recorded[location] != nil, base == locationCorpus.first(where: { $0.location == location })?.base {
                    Issue.record("\(label): recorded as refused by Node, but Node now reads it: remove the record")
                }
            case .otherScheme:
                if let reading, reading.protocolName == "http:" || reading.protocolName == "https:" {
                    Issue.record("\(label): we read another scheme, Node reads \(reading.protocolName)//\(reading.hostname)")
                }
            case .unparseable:
                break  // failing closed is always allowed
            }
        }
    }
}
