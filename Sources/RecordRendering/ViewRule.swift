import HTTP1Codec
import ProxyCore
import Redaction
import ScopePolicy

/// What one rule did to an exchange, for the live view's `detail.rules` (docs/view.md): read from
/// the record, with the scope and secrets behind an injection looked up in the policy. Names only.
public enum ViewRule: Sendable, Equatable {
    /// `scope` and `secrets` nil/empty when the policy no longer has the injection (a reload).
    case inject(header: String, scope: String?, secrets: [String])
    case strip(header: String, why: String)
    case skip(scope: String, why: String)
    case substitute(secret: String)
    case sign(kind: String, scope: String?)
    case scrub(secret: String, encoding: String)
    case guardStop(secret: String, placeholder: Bool, where: String?)
    /// `location` as the log redacts it; `origin` host:port.
    case redirect(decision: RedirectDecision, location: String?, origin: String?)
    case egress(EgressNote)

    /// The rules of `record`, in the order they act: scope rules on the request (skip, strip,
    /// substitute, inject, sign), then the guard and the egress policy, then the response (redirect,
    /// scrub). `policy`: the configuration in force, for which scope injected what.
    public static func rules(of record: ExchangeRecord, policy: ScopePolicy?, redactor: Redactor) -> [ViewRule] {
        guard record.tunnel == nil else { return record.egressNote.map { [.egress($0)] } ?? [] }
        var rules: [ViewRule] = []
        let covering = record.origin.flatMap { origin in policy?.covering(origin, client: record.clientID) } ?? []
        for skipped in record.skipped { rules.append(.skip(scope: skipped.scope, why: skipped.why.explanation)) }
        for header in record.stripped { rules.append(.strip(header: header, why: stripReason(header, record: record))) }
        for secret in record.substituted { rules.append(.substitute(secret: secret)) }
        let signer = record.signed == nil ? nil : covering.first { $0.signing != nil }
        for header in record.injected {
            let lowercase = header.lowercased()
            let injection = covering.lazy.compactMap { scope in
                scope.inject.first { $0.header.lowercased() == lowercase }.map { (scope.name, $0.template.secretNames) }
            }.first
            // A signature's Authorization is the signature's, not an injection.
            if injection == nil, record.signed != nil, lowercase == "authorization" { continue }
            rules.append(.inject(header: header, scope: injection?.0, secrets: injection?.1 ?? []))
        }
        if let kind = record.signed { rules.append(.sign(kind: kind, scope: signer?.name)) }
        if let finding = record.guardFinding {
            rules.append(.guardStop(secret: finding.secret, placeholder: finding.isPlaceholder, where: guardSite(record.failure)))
        }
        if let note = record.egressNote { rules.append(.egress(note)) }
        if let redirect = record.redirect {
            rules.append(
                .redirect(decision: redirect.decision, location: redirect.location.map(redactor.url), origin: redirect.origin?.hostAndPort))
        }
        for finding in record.scrubbed { rules.append(.scrub(secret: finding.secret, encoding: finding.encoding.description)) }
        return rules
    }

    /// Why a client's header was stripped, in `scopeproxy explain`'s words where the record tells.
    static func stripReason(_ header: String, record: ExchangeRecord) -> String {
        let name = header.lowercased()
        if name.contains("_") { return "an underscore spelling of a sensitive name (CGI/WSGI read _ as -), never forwarded" }
        if SensitiveHeaders.methodOverride.contains(name) { return "a method override, where a scope limits methods" }
        if record.method == "TRACE" { return "TRACE never carries credentials" }
        if record.hop > 1 { return "a client's own credentials go only to the origin it addressed, and this hop followed a redirect" }
        if record.scopes.isEmpty { return "sensitive, and no scope covers this origin" }
        return "sensitive, and no covering scope lists it in pass"
    }

    /// Where the guard found what it stopped (`header x-api-key`, `target`, `body`).
    static func guardSite(_ failure: ExchangeFailure?) -> String? {
        switch failure {
        case .proxy(.secretEgressBlocked(_, let site, _)): site
        case .proxy(.placeholderOutOfScope(_, let site, _, _)): site
        default: nil
        }
    }
}
