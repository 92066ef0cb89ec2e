import ProxyEngine
import ScopeConfig
import ScopePolicy
import SecretStore

#if canImport(Glibc)
    import Glibc
#endif

// `scopeproxy tail` (docs/view.md, "In the terminal"): the live view's event stream printed as the
// access log's text lines. Blocking sockets on the main thread: a CLI with one connection needs no
// event loop; every wait has a bound (connect 2 s, the head 5 s, the stream 45 s without even a
// keep-alive comment, which the proxy sends every 15 s).

extension Commands {
    static func tail(_ invocation: Invocation) -> Int32 {
        guard let config = loadConfig(invocation.configPath), let admin = adminAddress(of: config, for: "tail", invocation) else {
            return 2
        }
        let described = invocation.configPath?.described ?? "the embedded default"
        var token: SecretValue?
        if let name = TailAccess.adminTokenName(config) {
            switch TailAccess.token(named: name, config) {
            case .success(let value): token = value
            case .failure(let failure):
                fail(failure.description)
                return 1
            }
        }
        let colour = LogPresentation.choose(
            format: .text, formatIsExplicit: true, outputIsTerminal: isatty(1) == 1,
            noColor: getenv("NO_COLOR").map { $0.pointee != 0 } ?? false
        ).colour
        let settings = TailClient.Settings(
            admin: admin, client: invocation.value("client"), origin: invocation.value("origin"), token: token,
            tokenName: TailAccess.adminTokenName(config), configDescribed: described, colour: colour)
        TailClient.stopOnSignals()
        return TailClient(settings: settings).run()
    }
}

/// Where the view's token comes from: the config's top-level `admin_token: NAME`, a secret name.
enum TailAccess {
    /// The secret `admin_token` names, or nil when the config names none.
    static func adminTokenName(_ config: ProxyConfiguration) -> String? {
        config.adminToken
    }

    /// The token's value, read alone (another secret that cannot be read is not tail's concern).
    /// A message names the secret and the key, never a value.
    static func token(named name: String, _ config: ProxyConfiguration) -> Result<SecretValue, TailFailure> {
        guard let source = config.secrets[name] else {
            return .failure(TailFailure("admin_token names secret '\(name)', which the config does not declare under secrets:"))
        }
        let store = SecretStore(
            sources: [name: source], storeDirectory: config.storeDirectory, configPath: config.sourcePath,
            privateKeys: config.privateKeySecrets)
        do { try store.load() } catch {
            return .failure(TailFailure("admin_token's secret '\(name)' cannot be read: \(error.description)"))
        }
        guard let value = store.value(of: name) else {
            return .failure(TailFailure("admin_token's secret '\(name)' has no value here"))
        }
        // It goes into a header line: only the characters of a Bearer token (RFC 6750 §2.1).
        guard !value.exposedBytes.isEmpty, value.exposedBytes.allSatisfy({ (0x21...0x7E).contains($0) }) else {
            return .failure(TailFailure("admin_token's secret '\(name)' holds characters a Bearer token cannot carry (RFC 6750 §2.1)"))
        }
        return .success(value)
    }
}

struct TailFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// One viewer of the stream: connects, prints, reconnects after a drop with the last id it saw.
final class TailClient {
    struct Settings {
        let admin: HostPort
        let client: String?
        let origin: String?
        let token: SecretValue?
        let tokenName: String?
        let configDescribed: String
        let colour: Bool
    }

    /// How one connection ended.
    enum SessionEnd: Equatable {
        /// Nothing accepted the connection (the proxy is not running, or restarting).
        case unreachable(String)
        /// The stream was open and ended: reconnect.
        case dropped(String)
        /// Exit 1 with this message: retrying would only get the same answer.
        case fatal(String)
        /// Standard output is gone (`tail | head`): exit 0.
        case outputClosed
    }

    static let connectSeconds = 2, headSeconds = 5, streamSeconds = 45
    static let firstBackoffMilliseconds = 250, maxBackoffMilliseconds = 5_000

    let settings: Settings
    /// The stream being read; a new one per connection (a line cut by a drop is not continued).
    private var parser = SSEParser()
    private var streamedOnce = false
    /// The last event id printed: a reconnect resumes after it.
    private var lastEventID: String?
    /// Nothing listened on the admin address since the stream dropped: the proxy restarted, and a
    /// new proxy numbers its records from 1 again, so resuming after an old id would skip new ones.
    private var proxyRestarted = false

    init(settings: Settings) {
        self.settings = settings
    }

    /// Ctrl-C and SIGTERM end the command with status 0 (stopping is what they are for); a
    /// closed pipe is seen as a failed write, not a signal.
    static func stopOnSignals() {
        var unblock = sigset_t()
        sigemptyset(&unblock)
        for number in [SIGINT, SIGTERM] {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { _ in _exit(0) }
            sigaction(number, &action, nil)
            sigaddset(&unblock, number)
        }
        // A parent may hand them down blocked (Foundation's Process does): then they would stay
        // pending and Ctrl-C would do nothing.
        pthread_sigmask(SIG_UNBLOCK, &unblock, nil)
        signal(SIGPIPE, SIG_IGN)
    }

    func run() -> Int32 {
        var backoff = Self.firstBackoffMilliseconds
        while true {
            let end = session()
            switch end {
            case .fatal(let message):
                Commands.fail(message)
                return 1
            case .outputClosed:
                return 0
            case .unreachable(let reason):
                proxyRestarted = true
                guard streamedOnce else {
                    Commands.fail(
                        "nothing answers on admin address \(settings.admin) (\(reason)); is the proxy running with this config "
                            + "(\(settings.configDescribed))?")
                    return 1
                }
                writeStandardError("scopeproxy: admin \(settings.admin) unreachable (\(reason)); retrying in \(seconds(backoff))\n")
            case .dropped(let reason):
                // It streamed: the waits start again from the shortest.
                backoff = Self.firstBackoffMilliseconds
                let from = lastEventID.map { " after event \($0)" } ?? ""
                writeStandardError(
                    "scopeproxy: the stream from admin \(settings.admin) ended (\(reason)); reconnecting\(from) in \(seconds(backoff))\n")
            }
            usleep(useconds_t(backoff) * 1000)
            backoff = min(backoff * 2, Self.maxBackoffMilliseconds)
        }
    }

    private func seconds(_ milliseconds: Int) -> String {
        milliseconds % 1000 == 0 ? "\(milliseconds / 1000) s" : "\(milliseconds) ms"
    }

    /// One connection: request, head, then events until it ends.
    private func session() -> SessionEnd {
        let fd: Int32
        switch connect() {
        case .success(let socket): fd = socket
        case .failure(let reason): return .unreachable(reason.description)
        }
        defer { close(fd) }
        let token = settings.token.map { String(decoding: $0.exposedBytes, as: UTF8.self) }
        let request = TailRequest.text(
            admin: settings.admin.description, client: settings.client, origin: settings.origin, token: token,
            lastEventID: proxyRestarted ? nil : lastEventID)
        guard writeReportingError(fd, request) == nil else { return .dropped("the request could not be sent") }
        setTimeout(fd, seconds: Self.headSeconds)
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        let head: TailResponseHead
        while true {
            let count = read(fd, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 {
                if received.isEmpty {
                    let reason = count < 0 ? "no answer within \(Self.headSeconds) s" : "it closed the connection without answering"
                    return streamedOnce ? .dropped(reason) : .fatal("admin \(settings.admin) did not answer: \(reason)")
                }
                return .fatal("admin \(settings.admin) did not answer with HTTP")
            }
            received += buffer[..<count]
            switch TailResponseHead.parse(received) {
            case .success(let parsed): head = parsed
            case .failure(.incomplete): continue
            case .failure(.tooLarge): return .fatal("admin \(settings.admin) answered with a head larger than 16 KiB")
            case .failure(.notHTTP): return .fatal("admin \(settings.admin) did not answer with HTTP; is it a scopeproxy admin address?")
            }
            break
        }
        if let refusal = refusal(head, fd: fd) { return .fatal(refusal) }
        if !streamedOnce {
            let filters = [settings.client.map { "client=\($0)" }, settings.origin.map { "origin=\($0)" }].compactMap { $0 }
            writeStandardError(
                "scopeproxy: streaming the view of admin \(settings.admin)"
                    + (filters.isEmpty ? "" : " (\(filters.joined(separator: ", ")))") + "; Ctrl-C stops\n")
        } else {
            writeStandardError(
                "scopeproxy: reconnected to admin \(settings.admin)"
                    + (proxyRestarted ? " (it restarted: its recent records follow, some perhaps shown before)" : "") + "\n")
        }
        streamedOnce = true
        proxyRestarted = false
        parser = SSEParser()
        setTimeout(fd, seconds: Self.streamSeconds)
        if let end = consume(head.rest) { return end }
        while true {
            let count = read(fd, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            if count < 0 { return .dropped(errno == EAGAIN ? "nothing for \(Self.streamSeconds) s" : String(cString: strerror(errno))) }
            if count == 0 { return .dropped("the proxy closed it") }
            if let end = consume(buffer[..<count]) { return end }
        }
    }

    /// Why a head that is not a 200 event stream ends the command (nil: it is one).
    private func refusal(_ head: TailResponseHead, fd: Int32) -> String? {
        if head.status == 200 && head.isEventStream { return nil }
        if head.status == 200 {
            return "admin \(settings.admin) answered 200 but not with an event stream (Content-Type: \(head.contentType ?? "none")); "
                + "is this proxy's version one with the view?"
        }
        let said = TailResponseHead.said(head.rest + readMore(fd))
        if head.status == 401 {
            let hint =
                settings.tokenName.map {
                    "the token of secret '\($0)' (admin_token) was refused: is the proxy running with this config (\(settings.configDescribed))?"
                } ?? "the view needs a token: set top-level admin_token: NAME in \(settings.configDescribed) to the secret the proxy uses"
            return "admin \(settings.admin) answered 401: \(hint)"
        }
        if head.status == 404 { return "admin \(settings.admin) has no /view/events (404): is this proxy's version one with the view?" }
        return "admin \(settings.admin) answered \(head.status)\(said.isEmpty ? "" : " (\(said))")"
    }

    /// A little of an error's body (bounded in size and time): for its message only.
    private func readMore(_ fd: Int32) -> [UInt8] {
        setTimeout(fd, seconds: 1)
        var buffer = [UInt8](repeating: 0, count: 1024)
        let count = read(fd, &buffer, buffer.count)
        return count > 0 ? Array(buffer[..<count]) : []
    }

    /// Prints the events in `bytes`; a reason to end the session, or nil to read on.
    private func consume(_ bytes: some Sequence<UInt8>) -> SessionEnd? {
        switch parser.feed(bytes) {
        case .failure(.lineTooLong):
            return .fatal("admin \(settings.admin) sent an event line longer than 1 MiB; the stream is not the proxy's")
        case .success(let events):
            for event in events {
                if let id = event.id { lastEventID = id }
                switch TailText.render(event.data, colour: settings.colour) {
                case .success(let rendered):
                    var text = rendered.line + "\n"
                    if let decision = TailText.decisionLine(rendered, colour: settings.colour) { text += decision + "\n" }
                    if writeReportingError(1, Array(text.utf8)) != nil { return .outputClosed }
                case .failure(let unreadable):
                    // A record this version cannot read is said and skipped; the stream goes on.
                    writeStandardError("scopeproxy: record \(event.id ?? "?") skipped: \(unreadable.reason)\n")
                }
            }
            return nil
        }
    }

    private func setTimeout(_ fd: Int32, seconds: Int) {
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    /// A connected socket to the admin address (2 s to connect), or why not.
    private func connect() -> Result<Int32, TailFailure> {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let admin = settings.admin
        let status = getaddrinfo(admin.host, String(admin.port), &hints, &list)
        guard status == 0, let first = list else {
            return .failure(TailFailure("cannot resolve \(admin.host): \(String(cString: gai_strerror(status)))"))
        }
        defer { freeaddrinfo(list) }
        let fd = socket(first.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return .failure(TailFailure("cannot create a socket: \(String(cString: strerror(errno)))")) }
        setTimeout(fd, seconds: Self.connectSeconds)
        // With SO_SNDTIMEO set, a blocking connect gives up after the same bound (EINPROGRESS).
        if Glibc.connect(fd, first.pointee.ai_addr, first.pointee.ai_addrlen) != 0 {
            let reason = errno == EINPROGRESS || errno == EAGAIN ? "no answer within \(Self.connectSeconds) s" : String(cString: strerror(errno))
            close(fd)
            return .failure(TailFailure(reason))
        }
        return .success(fd)
    }
}
