import HTTP1Codec

public enum RedirectMode: String, Sendable, CaseIterable {
    case pass
    case follow
    case block
}

public struct RedirectPolicy: Sendable, Equatable {
    public var mode: RedirectMode
    /// In block mode: cross-origin targets that may still be followed by the client.
    public var allow: Set<Origin>
    public var maxHops: Int

    public init(mode: RedirectMode = .pass, allow: Set<Origin> = [], maxHops: Int = 5) {
        self.mode = mode
        self.allow = allow
        self.maxHops = maxHops
    }
}

/// Where a Location points, resolved against the request it answers (RFC 3986 §5.2, fragment dropped).
public struct RedirectTarget: Sendable, Equatable {
    public let origin: Origin
    public let pathAndQuery: String
}

public enum RedirectVerdict: Sendable, Equatable {
    /// Not a redirect the policy acts on: return the response as it is.
    case notRedirect
    /// Return the 3xx to the client; its follow-up is scoped on its own origin.
    case pass(RedirectTarget)
    /// The proxy follows: `method` and whether the request body is replayed.
    case follow(RedirectTarget, method: String, replayBody: Bool)
    /// A cross-origin redirect the policy refuses: 502 naming only the target origin.
    case block(Origin)
    /// Followed too many times.
    case tooManyHops
}

extension RedirectPolicy {
    public static let redirectStatuses: Set<Int> = [301, 302, 303, 307, 308]

    /// `hops` counts the redirects already followed on this chain.
    public func decide(
        status: Int, location: String?, requestMethod: String, from origin: Origin, pathAndQuery: String, hops: Int
    ) -> RedirectVerdict {
        guard Self.redirectStatuses.contains(status), let location,
              let target = Self.resolve(location, origin: origin, pathAndQuery: pathAndQuery)
        else { return .notRedirect }
        switch mode {
        case .pass:
            return .pass(target)
        case .block:
            if target.origin != origin, !allow.contains(target.origin) { return .block(target.origin) }
            return .pass(target)
        case .follow:
            guard hops < maxHops else { return .tooManyHops }
            switch status {
            case 303:
                return .follow(target, method: requestMethod == "HEAD" ? "HEAD" : "GET", replayBody: false)
            case 301, 302:
                // RFC 9110 §15.4.2-3: only POST may historically turn into GET; every other method
                // is repeated as sent, body included (as 307/308).
                if requestMethod == "POST" { return .follow(target, method: "GET", replayBody: false) }
                return .follow(target, method: requestMethod, replayBody: true)
            default:  // 307, 308
                return .follow(target, method: requestMethod, replayBody: true)
            }
        }
    }

    /// Resolves a Location (absolute, scheme-relative, absolute-path or relative) against the
    /// request URL. Returns nil for anything that is not http(s) or does not parse strictly.
    public static func resolve(_ location: String, origin: Origin, pathAndQuery: String) -> RedirectTarget? {
        var reference = location
        if let hash = reference.firstIndex(of: "#") { reference = String(reference[..<hash]) }
        let absolute: String
        if reference.hasPrefix("//") {
            absolute = origin.scheme.rawValue + ":" + reference
        } else if reference.lowercased().hasPrefix("http://") || reference.lowercased().hasPrefix("https://") {
            absolute = reference
        } else if reference.contains(":") && !reference.hasPrefix("/") && !reference.hasPrefix("?")
                    && reference.split(separator: "/").first?.contains(":") == true {
            return nil  // another scheme (mailto:, javascript:, ...)
        } else {
            let basePath = ScopePolicy.path(of: pathAndQuery)
            var merged: String
            if reference.isEmpty {
                merged = pathAndQuery
            } else if reference.hasPrefix("/") {
                merged = reference
            } else if reference.hasPrefix("?") {
                merged = basePath + reference
            } else {
                let directory = basePath.lastIndex(of: "/").map { String(basePath[...$0]) } ?? "/"
                merged = directory + reference
            }
            merged = removeDotSegments(merged)
            absolute = "\(origin.scheme.rawValue)://\(origin.authority)\(merged)"
        }
        guard case .absolute(let targetOrigin, let path, _) = try? RequestTarget.parse(absolute, method: "GET") else {
            return nil
        }
        return RedirectTarget(origin: targetOrigin, pathAndQuery: path)
    }

    /// RFC 3986 §5.2.4, on the path part only.
    static func removeDotSegments(_ pathAndQuery: String) -> String {
        var path = pathAndQuery
        var query = ""
        if let question = pathAndQuery.firstIndex(of: "?") {
            path = String(pathAndQuery[..<question])
            query = String(pathAndQuery[question...])
        }
        var output: [Substring] = []
        let segments = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        for (index, segment) in segments.enumerated() {
            let isLast = index == segments.count - 1
            switch segment {
            case ".":
                if isLast { output.append("") }
            case "..":
                if !output.isEmpty { output.removeLast() }
                if isLast { output.append("") }
            default:
                output.append(segment)
            }
        }
        return "/" + output.joined(separator: "/") + query
    }
}
