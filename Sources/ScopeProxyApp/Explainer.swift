import PosixSupport
import ProxyCore
import RecordRendering
import Redaction
import ScopeConfig

/// `scopeproxy explain` for the live view (docs/view.md): built once per configuration (at start
/// and at each reload) with explain's preview scope context, and answering the view's queries from
/// a small cache, so an exchange pays for an explanation only the first time one like it is seen.
/// It reads no secret (a running proxy has loaded its own): the lines about secrets `run` could not
/// load are the command line's alone.
public final class Explainer: Sendable {
    private let config: ProxyConfiguration
    private let scope: ScopeContext
    private let cache = Locked(ExplainCache())

    public init(_ config: ProxyConfiguration) {
        self.config = config
        scope = Explanation.previewScope(config)
    }

    /// explain's text for the query (its request line shows the redacted URL; each header the
    /// client sent is named, its value `<redacted>`); nil when explain would refuse the request
    /// itself (a client the configuration no longer names).
    public func explain(_ query: ExplainQuery) -> String? {
        if let cached = cache.withLock({ $0.lookup(query) }) { return cached }
        let request = Explanation.Request(
            method: query.method, headers: query.headerNames.map { ($0, Redactor.redacted) }, url: query.url, client: query.client)
        // Rendered outside the lock: two workers may both render a new query once.
        let (text, status) = Explanation.render(config, request, scope: scope, checksSecrets: false)
        let answer = status == 0 ? text : nil
        cache.withLock { $0.insert(query, answer) }
        return answer
    }

    /// How many answers are cached (tests).
    var cachedCount: Int { cache.withLock { $0.count } }
}

/// The most recently used answers, at most `capacity` (the least recently used goes first).
struct ExplainCache {
    static let capacity = 256
    private var entries: [ExplainQuery: (answer: String?, used: UInt64)] = [:]
    private var clock: UInt64 = 0

    var count: Int { entries.count }

    /// The cached answer (`.some(nil)`: explain refused it), or nil when not cached.
    mutating func lookup(_ query: ExplainQuery) -> String?? {
        guard let entry = entries[query] else { return nil }
        clock &+= 1
        entries[query] = (entry.answer, clock)
        return .some(entry.answer)
    }

    mutating func insert(_ query: ExplainQuery, _ answer: String?) {
        clock &+= 1
        if entries[query] == nil, entries.count >= Self.capacity,
            let oldest = entries.min(by: { $0.value.used < $1.value.used })?.key
        {
            entries[oldest] = nil
        }
        entries[query] = (answer, clock)
    }
}
