import Foundation
import HTTP1Codec
import RecordRendering
import ScopeConfig
import Testing

@testable import ScopeProxyApp

private let yaml = """
    secrets: { library_token: { env: EXPLAIN_LIBRARY_TOKEN_UNSET } }
    scopes:
      - name: library
        origins: ["https://api.library.example"]
        inject: { Authorization: "Bearer ${library_token}" }
        paths: ["/v1"]
    tls: { intercept: ["api.library.example"] }
    """

private func query(_ path: String, client: String? = nil) throws -> ExplainQuery {
    ExplainQuery(
        method: "GET", origin: try Origin.parse("https://api.library.example"), pathAndQuery: path, client: client,
        headerNames: ["accept", "cookie"])
}

@Suite("explain for the live view: built once per configuration, answers cached")
struct ExplainerTests {
    @Test("the view's text is explain's for the redacted URL and the header names, without the lines about loading secrets")
    func sameWords() throws {
        let config = try ConfigLoader.parse(yaml, file: "explain.yaml", home: "/home/tester")
        let explainer = Explainer(config)
        let text = try #require(explainer.explain(try query("/v1/books?page=2&token=:redacted"))?.text)
        let (cli, status) = Explanation.render(
            config,
            .init(
                method: "GET", headers: [("accept", "<redacted>"), ("cookie", "<redacted>")],
                url: "https://api.library.example/v1/books?page=2&token=:redacted"))
        #expect(status == 0)
        #expect(text.contains("request       GET https://api.library.example/v1/books?page=2&token=:redacted\n"))
        #expect(text.contains("injected      Authorization: Bearer ${library_token}   (scope library)"))
        #expect(text.contains("header        cookie: stripped"))
        #expect(cli.contains("EXPLAIN_LIBRARY_TOKEN_UNSET is not set"), "the command line says what run could not load")
        #expect(!text.contains("EXPLAIN_LIBRARY_TOKEN_UNSET"), "a running proxy has its secrets: the view reads none")
        let withoutSecretLines = cli.split(separator: "\n").filter { !$0.contains("EXPLAIN_LIBRARY_TOKEN_UNSET") }
        #expect(text.split(separator: "\n") == withoutSecretLines, "otherwise the same words")
        #expect(explainer.explain(try query("/v1/books", client: "nobody")) == nil, "a client the configuration does not name")
    }

    @Test("the cache keeps at most 256 answers, the least recently used leaving first")
    func cacheBound() throws {
        let config = try ConfigLoader.parse(yaml, file: "explain.yaml", home: "/home/tester")
        let explainer = Explainer(config)
        let first = try query("/v1/0")
        let answer = explainer.explain(first)?.text
        for index in 1..<300 {
            _ = explainer.explain(try query("/v1/\(index)"))
            if index % 50 == 0 { #expect(explainer.explain(first)?.text == answer, "kept while used") }
        }
        #expect(explainer.cachedCount == ExplainCache.capacity)
        var cache = ExplainCache()
        for index in 0..<ExplainCache.capacity { cache.insert(try query("/\(index)"), ExplainAnswer("\(index)")) }
        _ = cache.lookup(try query("/0"))
        cache.insert(try query("/new"), ExplainAnswer("new"))
        #expect(cache.count == ExplainCache.capacity)
        #expect(cache.lookup(try query("/0"))??.text == "0", "recently used: kept")
        #expect(cache.lookup(try query("/1")) == nil, "least recently used: gone")
    }
}
