import HTTP1Codec
import ProxyCore
import Redaction
import ScopePolicy

/// The way into the proxy a reproduced request takes (the engine's listeners) and the config file
/// `scopeproxy ca` reads, for the live view's "Copy as curl".
public struct CurlEntrance: Sendable, Equatable {
    /// The forward proxy listener (`listen`).
    public var listen: ListenAddress
    /// The config file the proxy runs with; nil for the embedded default.
    public var configPath: String?

    public init(listen: ListenAddress, configPath: String? = nil) {
        self.listen = listen
        self.configPath = configPath
    }

    /// `http://HOST:PORT` of the listener, a wildcard address replaced by loopback (what a client on
    /// this machine connects to).
    var proxyURL: String {
        var address = listen
        if address.host == "0.0.0.0" { address.host = "127.0.0.1" }
        if address.host == "::" { address.host = "::1" }
        return "http://" + address.description
    }
}

/// "Copy as curl" (docs/view.md): a command that sends the request through the proxy the way it
/// came, with every client header the log shows by value, and comments for what it cannot carry:
/// what the proxy injects (by secret name), headers the log hides, a placeholder the client sent,
/// the body (never kept). Never a value: a header is written only as `SecretNaming` shows it.
public enum CurlText {
    /// nil for a line that names no request (an unreadable head, no origin).
    public static func render(_ record: ExchangeRecord, rules: [ViewRule], naming: SecretNaming, entrance: CurlEntrance) -> String? {
        guard let method = record.method, let origin = record.origin else { return nil }
        var comments: [String] = []
        var command = ["curl"]
        let isConnect = record.tunnel != nil || method == "CONNECT"
        let redactedPath = isConnect ? "/" : naming.redactor.pathAndQuery(record.pathAndQuery ?? "/")
        var url = origin.description + redactedPath
        if record.hop > 1 {
            comments.append("# hop \(record.hop) of a redirect the proxy followed: it made this request itself (the client's is hop 1)")
        }
        switch record.mode {
        case .route(_, let publicOrigin):
            url = publicOrigin.description + redactedPath
        case .transparent:
            comments.append("# transparent capture: run it where this origin's traffic is redirected to the proxy")
        case .forwardProxy, .intercepted, nil:
            command += ["--proxy", entrance.proxyURL]
            if origin.scheme == .https && record.tunnel != .tunnel && record.tunnel != .deny {
                let config = entrance.configPath.map { " --config " + quoted($0) } ?? ""
                comments.append("# scopeproxy ca\(config) > scopeproxy-ca.pem")
                command += ["--cacert", "scopeproxy-ca.pem"]
            }
        }
        if isConnect {
            comments.append("# a CONNECT to \(origin.hostAndPort): any https request through the proxy opens one")
            command.append(quoted(url))
            return (comments + [command.joined(separator: " ")]).joined(separator: "\n")
        }
        if redactedPath != (record.pathAndQuery ?? "/") {
            comments.append("# the URL is as the log shows it: the parts it hides (:redacted, :token, ...) are not the client's")
        }
        for rule in rules {
            switch rule {
            case .inject(let header, let scope, let secrets):
                let from = secrets.isEmpty ? "a value of the proxy's" : secrets.map { "${\($0)}" }.joined(separator: " ")
                comments.append("# injected: \(header) <- \(from)" + (scope.map { " (scope \($0))" } ?? ""))
            case .sign(let kind, let scope):
                comments.append("# signed: \(kind)" + (scope.map { " (scope \($0))" } ?? ""))
            case .substitute(let secret):
                comments.append("# substituted: the placeholder of ${\(secret)} is replaced by its value")
            default:
                break
            }
        }
        switch method {
        case "GET": break
        case "HEAD": command.append("--head")
        default: command += ["-X", quoted(method)]
        }
        var leftOut: [String] = []
        var placeholders: [String] = []
        var budget = ViewRecord.maxShownHeadBytes
        var leftOutForSize = 0
        for field in record.requestFields ?? HTTPFields() {
            let name = field.lowercasedName
            guard !Self.framing.contains(name) else { continue }
            let (shown, named) = naming.shownAndNamed(name, field.value)
            if let value = named.first(where: { !$0.isPlaceholder }) {
                let why = "# left out: \(field.name) (it carries the value of secret \(value.name))"
                if !leftOut.contains(why) { leftOut.append(why) }
                continue
            }
            if Redactor.hidesSomething(shown) {
                let why = "# left out: \(field.name) (its value is not shown)"
                if !leftOut.contains(why) { leftOut.append(why) }
                continue
            }
            // Bounded like the heads in `detail`: a client cannot make the record too big to show.
            let header = quoted(field.name + ": " + shown)
            guard shown.utf8.count <= ViewRecord.maxShownValueBytes, header.utf8.count <= budget else {
                leftOutForSize += 1
                continue
            }
            budget -= header.utf8.count
            for secret in named where !placeholders.contains(secret.name) { placeholders.append(secret.name) }
            command += ["-H", header]
        }
        if leftOutForSize > 0 { leftOut.append("# left out: \(leftOutForSize) header(s) too long to show here") }
        comments += leftOut
        for secret in placeholders {
            comments.append("# ${\(secret)}: the client's placeholder for secret \(secret) (`scopeproxy env` prints it); put it in its place")
        }
        if let body = bodyNote(record.requestFields) { comments.append(body) }
        command.append(quoted(url))
        return (comments + [command.joined(separator: " ")]).joined(separator: "\n")
    }

    /// Fields curl makes itself (from the URL, and for a body it does not send),
    /// and hop-by-hop fields it manages for the connection to the proxy (RFC 9110 §7.6.1).
    static let framing: Set<String> = ["host", "content-length", "transfer-encoding", "connection", "proxy-connection", "keep-alive", "te"]

    /// What the request's body was, by its framing (the bytes are never kept).
    static func bodyNote(_ fields: HTTPFields?) -> String? {
        guard let fields else { return nil }
        if fields.contains("transfer-encoding") { return "# the request had a chunked body, not kept" }
        // At most 19 digits: within UInt64 (a length the head parser accepted, shown, never computed with).
        guard let text = fields.singleValue(of: "content-length").only, text.utf8.count <= 19, let length = UInt64(text), length > 0 else {
            return nil
        }
        return "# the request had a body of \(length) bytes, not kept"
    }

    /// `text` as one shell word: in single quotes (`'` as `'\''`), or, when it holds a control
    /// character, in bash's `$'...'` with each escaped, so that the command stays on one line.
    public static func quoted(_ text: String) -> String {
        // Most words need nothing but the quotes (a control character or DEL is one byte in UTF-8,
        // and no byte of a longer character is below 0x80).
        if !text.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F || $0 == UInt8(ascii: "'") }) { return "'" + text + "'" }
        let scalars = text.unicodeScalars
        guard scalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
            var quoted = "'"
            for character in scalars {
                if character == "'" { quoted += "'\\''" } else { quoted.unicodeScalars.append(character) }
            }
            return quoted + "'"
        }
        var quoted = "$'"
        for scalar in scalars {
            switch scalar {
            case "\\": quoted += "\\\\"
            case "'": quoted += "\\'"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F:
                let hex = String(scalar.value, radix: 16)
                quoted += "\\x" + (hex.count < 2 ? "0" + hex : hex)
            default: quoted.unicodeScalars.append(scalar)
            }
        }
        return quoted + "'"
    }
}
