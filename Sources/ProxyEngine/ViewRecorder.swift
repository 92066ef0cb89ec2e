import HTTP1Codec
import PosixSupport
import ProxyCore
import RecordRendering

/// What the engine writes the live view's records with besides the feed (docs/view.md): `explain`
/// for the configuration in force (the composition root replaces it on reload), the config file
/// curl's CA comment names, and the forward listener's bound address (a configured port 0 is known
/// only once bound). Shared by every copy of the engine's configuration.
public final class ViewRecorder: Sendable {
    /// Boxed: a closure kept bare in a `Locked` came back through a reabstraction thunk at each
    /// read (`withLock { $0 }` writes the inout back), a chain that grew by one per record until a
    /// record cost milliseconds; a class reference is read as it is.
    private let explainer: Locked<ExplainBox?>
    private let listening = Locked<ListenAddress?>(nil)
    /// The config file the proxy runs with; nil for the embedded default.
    public let configPath: String?
    /// Sees every entry as it goes to the feed (tests).
    let observer: (@Sendable (ViewEntry) -> Void)?

    public init(
        configPath: String?, explain: (@Sendable (ExplainQuery) -> ExplainAnswer?)? = nil, observer: (@Sendable (ViewEntry) -> Void)? = nil
    ) {
        self.configPath = configPath
        self.observer = observer
        explainer = Locked(explain.map(ExplainBox.init))
    }

    /// After a reload: explain with the new configuration.
    public func replaceExplainer(_ explain: (@Sendable (ExplainQuery) -> ExplainAnswer?)?) {
        explainer.withLock { $0 = explain.map(ExplainBox.init) }
    }

    /// `scopeproxy explain`'s text for the query, or nil.
    public func explain(_ query: ExplainQuery) -> ExplainAnswer? {
        explainer.withLock { $0 }?.explain(query)
    }

    /// The forward listener as bound (`ProxyServer.start`).
    public func noteListening(_ address: ListenAddress) {
        listening.withLock { $0 = address }
    }

    var listeningAddress: ListenAddress? { listening.withLock { $0 } }
}

extension ExchangeLine {
    /// The live view's record of `record`, rendered on this worker and handed to the feed: redacted
    /// by the access log's rules and passed through its tripwire (without an access log there is
    /// nothing to redact it by, and no record is made).
    /// `logLine`: the access log's JSON line of this record (`AccessLog.record`), if one was made.
    static func publishView(_ record: ExchangeRecord, to feed: ViewFeed, _ configuration: EngineConfiguration, logLine: [UInt8]? = nil) {
        guard let log = configuration.accessLog else { return }
        let scope = configuration.scope.context
        let recorder = configuration.viewRecorder
        let naming = SecretNaming(redactor: log.formatter.redactor, watch: scope.values.everything)
        let entrance = CurlEntrance(listen: recorder?.listeningAddress ?? configuration.listen, configPath: recorder?.configPath)
        var explain: (@Sendable (ExplainQuery) -> ExplainAnswer?)?
        if let recorder { explain = { query in recorder.explain(query) } }
        let context = ViewRecordContext(
            formatter: log.formatter, naming: naming, policy: scope.policy, entrance: entrance, explain: explain)
        let json = log.scrubbed(ViewRecord.render(record, context, now: monotonicMicroseconds(), logLine: logLine))
        let entry = ViewEntry(json: json, clientID: record.clientID, clientAddress: record.client, origin: record.origin?.hostAndPort)
        recorder?.observer?(entry)
        feed.publish(entry)
    }
}

/// One explain function, held by reference (see `ViewRecorder.explainer`).
final class ExplainBox: Sendable {
    let explain: @Sendable (ExplainQuery) -> ExplainAnswer?
    init(_ explain: @escaping @Sendable (ExplainQuery) -> ExplainAnswer?) { self.explain = explain }
}
