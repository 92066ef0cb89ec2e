import Foundation
import HTTP1Codec
import PosixSupport
import ProxyCore
import ProxyEngine
import Redaction
import ScopeConfig
import ScopePolicy
import TestSupport
import Testing

/// A token source of no OAuth2 kind: it hands out the tokens and failures it is given, the first
/// through the asking worker's mailbox (as a source that fetches would), and records what it was
/// asked. The engine must drive it through `AccessTokenSource` alone.
private final class ScriptedTokens: AccessTokenSource, @unchecked Sendable {
    enum Answer {
        case later(Result<AccessToken, TokenFailure>)
        case now(Result<AccessToken, TokenFailure>)
    }

    let secretNames: Set<String> = ["partner_token"]
    let origin: Origin
    private let state = Locked<(answers: [Answer], acquired: Int, stale: [AccessToken])>(([], 0, []))

    init(origin: Origin) { self.origin = origin }

    func script(_ answers: [Answer]) { state.withLock { $0.answers = answers } }
    var acquired: Int { state.withLock { $0.acquired } }
    var markedStale: [AccessToken] { state.withLock { $0.stale } }

    func provider(of secret: String) -> TokenProvider? { secretNames.contains(secret) ? .endpoint(origin) : nil }

    func acquire(
        secret: String, mailbox: any TokenMailbox,
        onReady: @escaping (Result<AccessToken, TokenFailure>) -> Void
    ) -> TokenRequest? {
        guard secretNames.contains(secret) else { return nil }
        let answer = state.withLock { state -> Answer? in
            state.acquired += 1
            return state.answers.isEmpty ? nil : state.answers.removeFirst()
        }
        switch answer {
        case .now(let result)?:
            onReady(result)
            return .answered
        case .later(let result)?:
            let callback = UncheckedBox(onReady)
            mailbox.post { callback.value(result) }
            return .waiting(waiterID: 1)
        case nil:
            onReady(.failure(TokenFailure(secret: secret, endpoint: origin, reason: .refused)))
            return .answered
        }
    }

    func withdraw(secret: String, waiterID: UInt64) {}

    func markStale(secret: String, token: AccessToken) -> Bool {
        state.withLock { $0.stale.append(token) }
        return true
    }
}

/// The callback belongs to the worker's thread; the mailbox runs it there.
private final class UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

@Suite("A token source through the protocol alone: acquired, marked stale, its typed failure in the log", .serialized)
struct TokenSourceProtocolTests {
    static let token = AccessToken(value: SecretValue("SCRIPTED-TOKEN-CANARY"), generation: 1, validUntil: .max)
    /// What a token endpoint might have said: never in a 502 or a log line.
    static let endpointWords = "ENDPOINT-SAID-CANARY"

    @Test("a scripted source: its token injected, a 401 marks that token stale, and its failure reaches the 502 and the log's reason as a code")
    func scriptedSource() throws {
        let origin = try FixtureOrigin { connection in
            while let request = connection.readRequest() {
                connection.respond(status: request.target.hasPrefix("/refuse") ? 401 : 200, body: "ok")
            }
        }
        defer { origin.stop() }
        let yaml = """
            secrets:
              partner_token: { env: UNUSED }
            scopes:
              - { name: partner, origins: ["\(origin.url)"], inject: { Authorization: "Bearer ${partner_token}" } }
            """
        let config = try ConfigLoader.parse(yaml, file: "tokens.yaml", home: "/nonexistent")
        let tokens = ScriptedTokens(origin: try Origin.parse("https://tokens.example"))
        let context = ScopeContext(policy: config.policy, secrets: StaticSecrets([:]), tokens: tokens)
        let lines = Locked<[String]>([])
        let log = try AccessLog(
            format: .json, output: .discard, rules: RedactionRules(), logBodies: false, secretValues: [],
            metrics: Metrics(), observer: { line in lines.withLock { $0.append(line) } })
        let proxy = try ProxyHarness { engine in
            engine.scope = ScopeContextHolder(context)
            engine.accessLog = log
        }
        defer { proxy.stop() }
        func get(_ path: String) throws -> TestResponse? {
            try proxy.exchange("GET \(origin.url)\(path) HTTP/1.1\r\nHost: \(origin.authority)\r\n\r\n")
        }

        tokens.script([
            .later(.success(Self.token)),
            .now(
                .failure(
                    TokenFailure(
                        secret: "partner_token", endpoint: tokens.origin,
                        reason: .malformedResponse(Self.endpointWords)))),
        ])
        #expect(try get("/refuse")?.status == 401)
        #expect(origin.requests.first?.header("authorization") == "Bearer SCRIPTED-TOKEN-CANARY")
        #expect(tokens.markedStale == [Self.token], "the 401 marked the token it answered")

        let refused = try #require(try get("/v1"))
        #expect(refused.status == 502)
        #expect(refused.bodyText.contains("credential_unavailable") && refused.bodyText.contains("(malformed_response)"))
        #expect(refused.bodyText.contains("https://tokens.example"))
        #expect(tokens.acquired == 2)
        #expect(origin.requests.count == 1, "nothing sent without a token")

        // The log writer is a thread of its own: wait (bounded) for the second line.
        for _ in 0..<200 where lines.withLock({ $0.count }) < 2 { usleep(10_000) }
        let failed = try #require(lines.withLock { $0 }.first { $0.contains(#""status":502"#) })
        #expect(failed.contains(#""error":"credential_unavailable""#))
        #expect(failed.contains(#""reason":"malformed_response""#))
        for text in [failed, refused.bodyText] {
            #expect(!text.contains(Self.endpointWords) && !text.contains("SCRIPTED-TOKEN-CANARY"))
        }
    }
}
