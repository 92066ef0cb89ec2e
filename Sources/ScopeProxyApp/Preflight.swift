import ProxyEngine
import ScopeConfig
import SecretStore

#if canImport(Glibc)
    import Glibc
#endif

/// What `check` finds beyond the config's structure: every secret and file `run` would refuse,
/// each with its reason, found the way `run` loads them (without creating or changing anything).
enum Preflight {
    static func problems(_ config: ProxyConfiguration) -> [String] {
        var found: [String] = []
        let refuses = "; run would refuse to start"
        for error in Runtime.secretStore(config).problems() {
            found.append(error.description + refuses)
        }
        if let bundle = config.tls.upstreamCA, let problem = upstreamCAProblem(bundle) {
            found.append("tls.upstream_ca: \(problem)\(refuses)")
        }
        if !Runtime.interceptHosts(config).isEmpty, let problem = authorityProblem(config.tls.caDirectory) {
            found.append("tls.ca_dir: \(problem)\(refuses)")
        }
        // A tls_client CA the listener cannot load verifies nobody: that client is never recognised
        // by certificate (whether run refuses it is the TLS client listener's call).
        for rule in config.clients {
            guard let ca = rule.tlsClient?.caFile, let problem = upstreamCAProblem(ca) else { continue }
            found.append("client '\(rule.name)' tls_client.ca: \(problem); no certificate can be verified by it")
        }
        if config.clientListen != nil, Runtime.interceptHosts(config).isEmpty {
            found.append(
                "tls.client_listen: its certificate comes from the local CA, used only when something is intercepted, "
                    + "and tls.intercept: scoped covers no https origin\(refuses)")
        }
        if case .file(let path) = config.log.output, let problem = logFileProblem(path) {
            found.append("log.output: \(problem)\(refuses)")
        }
        return found
    }

    /// The extra CA bundle: exists, is a file, and OpenSSL loads certificates from it.
    static func upstreamCAProblem(_ path: String) -> String? {
        if let problem = Commands.configFileProblem(path) {
            return "\(path) \(problem == "is a directory, not a config file" ? "is a directory" : problem)"
        }
        do {
            _ = try TLSContexts(authority: nil, upstreamCA: path)
        } catch {
            return "\(path) holds no PEM certificate OpenSSL can load"
        }
        return nil
    }

    /// Interception needs the local CA: an existing one must load; a missing one must be creatable.
    static func authorityProblem(_ directory: String) -> String? {
        let certificate = directory + "/" + CertificateAuthority.certificateFile
        let key = directory + "/" + CertificateAuthority.keyFile
        let haveCertificate = access(certificate, F_OK) == 0, haveKey = access(key, F_OK) == 0
        if haveCertificate && haveKey {
            guard access(certificate, R_OK) == 0, access(key, R_OK) == 0 else { return "cannot read the CA files in \(directory)" }
            // Both exist and are readable: loadOrCreate only loads (it creates nothing here).
            do { _ = try CertificateAuthority.loadOrCreate(directory: directory) } catch { return error.description }
            return nil
        }
        // run will create the CA: the directory, or its nearest existing parent, must be writable.
        let existing = nearestExistingAncestor(directory)
        if access(existing, W_OK | X_OK) != 0 {
            let reason = String(cString: strerror(errno))
            let named = existing == "." ? "the current directory (\(currentDirectory()))" : existing
            return "the CA would be created in \(directory), but \(named) is not writable (\(reason))"
        }
        return nil
    }

    /// The path itself if it exists, else its nearest existing parent. A relative path (the
    /// loader leaves it relative when the config file was named without a directory) resolves
    /// against the current directory, as `run`'s mkdir does, so its last parent is `.`.
    static func nearestExistingAncestor(_ path: String) -> String {
        var existing = path
        while access(existing, F_OK) != 0 {
            guard let slash = existing.lastIndex(of: "/") else { return "." }
            existing = slash == existing.startIndex ? "/" : String(existing[..<slash])
        }
        return existing
    }

    private static func currentDirectory() -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buffer, buffer.count) != nil else { return "." }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The log file: appendable if it exists, creatable in its directory if not.
    static func logFileProblem(_ path: String) -> String? {
        var info = stat()
        if stat(path, &info) == 0 {
            if info.st_mode & S_IFMT == S_IFDIR { return "\(path) is a directory" }
            return access(path, W_OK) == 0 ? nil : "\(path) is not writable (\(String(cString: strerror(errno))))"
        }
        let directory = path.lastIndex(of: "/").map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        if access(directory, W_OK | X_OK) != 0 {
            return "\(path) cannot be created in \(directory) (\(String(cString: strerror(errno))))"
        }
        return nil
    }
}

/// `scopeproxy health`: GET /healthz on the admin address, with a 2 s bound on every step.
enum HealthProbe {
    enum Verdict: Equatable {
        case healthy
        case unhealthy(String)
    }

    static func ask(_ admin: HostPort) -> Verdict {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(admin.host, String(admin.port), &hints, &list)
        guard status == 0, let first = list else {
            return .unhealthy("cannot resolve admin address \(admin): \(String(cString: gai_strerror(status)))")
        }
        defer { freeaddrinfo(list) }
        let fd = socket(first.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return .unhealthy("cannot create a socket: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        // With SO_SNDTIMEO set, a blocking connect gives up after the same 2 s (EINPROGRESS).
        if connect(fd, first.pointee.ai_addr, first.pointee.ai_addrlen) != 0 {
            let reason = errno == EINPROGRESS || errno == EAGAIN ? "no answer within 2 s" : String(cString: strerror(errno))
            return .unhealthy("nothing answers on admin address \(admin) (\(reason)); is the proxy running with this config?")
        }
        writeAll(fd, "GET /healthz HTTP/1.0\r\nHost: \(admin)\r\n\r\n")
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1024)
        while response.count < 4096 {
            let count = read(fd, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            if count < 0 && response.isEmpty { return .unhealthy("admin address \(admin) accepted the connection but sent nothing within 2 s") }
            if count <= 0 { break }
            response += buffer[..<count]
            if isComplete(response) { break }  // a peer that keeps the connection open is not waited for
        }
        return verdict(response, admin: admin)
    }

    /// The head and as much body as Content-Length says (or the head alone without one) arrived.
    static func isComplete(_ response: [UInt8]) -> Bool {
        let separator: [UInt8] = [13, 10, 13, 10]
        guard let end = response.indices.dropLast(3).first(where: { Array(response[$0..<$0 + 4]) == separator }) else { return false }
        let head = String(decoding: response[..<end], as: UTF8.self).lowercased()
        guard let line = head.split(separator: "\r\n").first(where: { $0.hasPrefix("content-length:") }),
            let length = Int(line.dropFirst("content-length:".count).drop { $0 == " " || $0 == "\t" })
        else { return true }
        return response.count - (end + 4) >= length
    }

    /// 200 is healthy; anything else names the status and the body's first words (printable
    /// ASCII only: whatever listens there is not necessarily ours).
    static func verdict(_ response: [UInt8], admin: HostPort) -> Verdict {
        let text = String(decoding: response.map { (0x20...0x7E).contains($0) || $0 == 0x0A || $0 == 0x0D ? $0 : UInt8(ascii: "?") }, as: UTF8.self)
        let statusLine = text.split(separator: "\r\n", maxSplits: 1).first.map(String.init) ?? ""
        let parts = statusLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let code = Int(parts[1]) else {
            return .unhealthy("admin address \(admin) did not answer with HTTP")
        }
        if code == 200 { return .healthy }
        let body = text.split(separator: "\r\n\r\n", maxSplits: 1).dropFirst().first.map { String($0.prefix(80)) } ?? ""
        let said = body.split(whereSeparator: \.isNewline).joined(separator: " ")
        return .unhealthy("admin \(admin) answered \(code)\(said.isEmpty ? "" : " (\(said))")")
    }
}
