import HTTP1Codec

/// Where a misplaced key belongs, and what a mistyped value should have been: the fix said with the
/// problem (docs/configuration.md). Each rule here is one class of mistake, not one instance.
extension Decoder {
    /// The keys of each top-level section that is a mapping. A key that only one section has
    /// points there when it is written at the top level (`intercept: scoped` is `tls.intercept`).
    static let sectionKeys: [(section: String, keys: [String])] = [
        ("tls", ["intercept", "tunnel", "ca_dir", "upstream_ca", "client_listen"]),
        ("log", ["format", "output", "bodies", "safe_headers", "safe_query", "safe_json_keys"]),
        ("timeouts", ["connect", "upstream", "idle", "client_header"]),
        ("limits", ["max_connections", "h2_max_concurrent_streams"]),
        ("redirects", ["cross_origin", "allow", "max_hops"]),
    ]

    /// The section a top-level key belongs to, when exactly one section has it.
    static func section(owning key: String) -> String? {
        let owners = sectionKeys.filter { $0.keys.contains(key) }.map(\.section)
        return owners.count == 1 ? owners[0] : nil
    }

    /// Header names a scope is likely to be given directly (lowercased); others are recognised by
    /// their shape (a '-' or an uppercase letter, which no config key has).
    static let commonHeaderNames: Set<String> = [
        "authorization", "cookie", "accept", "host", "origin", "referer", "user-agent", "x-api-key", "private-token",
    ]

    /// What to say after "unknown key 'KEY' in CONTEXT", or "" for an ordinary misspelling.
    func placementHint(_ key: String, context: String) -> String {
        if context == "the config" {
            if let section = Self.section(owning: key) {
                return ": '\(key)' belongs under '\(section):', did you mean \(section): { \(key): ... }?"
            }
            if Self.scopeKeys.contains(key) {
                return ": '\(key)' is a scope key: indent it into a scope under 'scopes:'"
            }
            return ""
        }
        if Self.topLevelKeys.contains(key) {
            return ": '\(key)' is a top-level key: unindent it to the start of the line"
        }
        // `Paths:` is a scope key with a capital, not a header: its suggestion says so.
        if context == "a scope", !Self.scopeKeys.contains(key.lowercased()) {
            let looksLikeHeader = key.contains("-") || key.contains(where: \.isUppercase) || Self.commonHeaderNames.contains(key.lowercased())
            if looksLikeHeader, HTTPField.isValidName(key) {
                return ": '\(key)' looks like a header; headers go under inject: (indent it under 'inject:')"
            }
        }
        if context.hasPrefix("secret '"), let section = Self.section(owning: key) {
            return ": '\(key)' belongs under '\(section):'"
        }
        return ""
    }

    /// Why `text` is not an environment variable name, with the fix, or nil when it is one
    /// (`[A-Za-z_][A-Za-z0-9_]*`). `$NAME` and `${NAME}` are the shell's way to read a variable,
    /// not its name: the config would look up a variable nobody can set.
    static func environmentNameProblem(_ text: String, key: String) -> String? {
        guard !isShellVariableName(text) else { return nil }
        var bare = Substring(text)
        if bare.hasPrefix("$") {
            bare = bare.dropFirst()
            if bare.hasPrefix("{"), bare.hasSuffix("}") { bare = bare.dropFirst().dropLast() }
            if isShellVariableName(String(bare)) {
                return "\(key) '\(text)' is not a variable name: write \(key): \(bare), the variable's name without '$'"
            }
        }
        // env_var is a variable the shell exports; env one the proxy reads from its environment.
        let noun = key == "env_var" ? "a shell variable name" : "an environment variable name"
        return "\(key) '\(text)' is not \(noun): use letters, digits and '_', not starting with a digit"
    }

    /// The port of `scheme://host:port...` when it is digits outside 1-65535, else nil.
    static func outOfRangePort(_ text: String) -> Substring? {
        guard let colon = text.firstIndex(of: ":"), text[colon...].hasPrefix("://") else { return nil }
        let authority = text[text.index(colon, offsetBy: 3)...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        let hostEnd = authority.lastIndex(of: "]") ?? authority.startIndex
        guard let portColon = authority[hostEnd...].lastIndex(of: ":") else { return nil }
        let digits = authority[authority.index(after: portColon)...]
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        if digits.count > 5 || BoundedDecimal.parse(digits.utf8, maximum: 65535).map({ $0 == 0 }) ?? true { return digits }
        return nil
    }

    /// `[A-Za-z_][A-Za-z0-9_]*`: what `export NAME=...` accepts in every POSIX shell.
    static func isShellVariableName(_ text: String) -> Bool {
        guard let first = text.utf8.first, !(first >= 0x30 && first <= 0x39) else { return false }
        return text.utf8.allSatisfy { byte in
            (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x30 && byte <= 0x39) || byte == UInt8(ascii: "_")
        }
    }

    /// Why `text` is not an origin. A URL with a path is the usual mistake: the path belongs in
    /// the scope's `paths` (a prefix; "/v1" becomes "/v1/" so that "/v10" is not under it).
    static func originProblem(_ text: String) -> String {
        if let port = outOfRangePort(text) {
            return "invalid origin '\(text)': port \(port) is out of range: use 1-65535 (expected scheme://host[:port])"
        }
        // A query or fragment is never part of an origin, and no scope key takes one.
        let beforeQuery = text.prefix { $0 != "?" && $0 != "#" }
        let bare = String(beforeQuery.hasSuffix("/") ? beforeQuery.dropLast() : beforeQuery)
        if beforeQuery.count < text.count, (try? Origin.parse(bare)) != nil {
            let part = text.dropFirst(beforeQuery.count).hasPrefix("?") ? "query" : "fragment"
            return "invalid origin '\(text)': an origin has no \(part); write '\(bare)'"
        }
        guard case .absolute(let origin, let pathAndQuery, nil)? = try? RequestTarget.parse(text, method: "GET"), pathAndQuery != "/" else {
            return "invalid origin '\(text)': expected scheme://host[:port]"
        }
        var path = String(pathAndQuery.prefix { $0 != "?" && $0 != "#" })
        if !path.hasSuffix("/") { path += "/" }
        return "invalid origin '\(text)': an origin has no path; write '\(origin.scheme.rawValue)://\(origin.authority)' in origins "
            + "and add paths: [\"\(path)\"] to the scope"
    }
}
