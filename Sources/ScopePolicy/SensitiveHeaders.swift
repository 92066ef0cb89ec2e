/// Headers that carry credentials. A request's sensitive headers reach an origin only where a scope
/// covering that origin passes them (or injects them itself).
public enum SensitiveHeaders {
    /// Built in; `sensitive_headers` in the config adds to it, never removes.
    public static let builtIn: Set<String> = [
        "authorization", "proxy-authorization", "cookie", "x-api-key", "api-key", "apikey",
        "x-auth-token", "x-access-token", "x-refresh-token", "x-id-token", "x-session-token", "x-session-id",
        "x-csrf-token", "x-xsrf-token", "x-amz-security-token", "x-goog-api-key", "x-vault-token",
        "private-token", "x-auth", "x-client-secret", "x-functions-key", "ocp-apim-subscription-key",
    ]

    /// Headers that make a framework run another method than the request line's (Rails/Rack,
    /// Express method-override, Symfony, Laravel, ASP.NET, Google APIs). Where a scope limits
    /// `methods:`, `POST` + `X-HTTP-Method-Override: DELETE` would carry a POST-only credential
    /// into a DELETE; they are removed there.
    public static let methodOverride: Set<String> = ["x-http-method-override", "x-method-override", "x-http-method"]

    /// The name as the rules compare it: ASCII-lowercased (RFC 9110 §5.1: names are
    /// case-insensitive) with `_` read as `-`. CGI and WSGI servers (and nginx/Apache in front of
    /// them) turn both `X-Api-Key` and `X_Api_Key` into `HTTP_X_API_KEY`, so an underscore
    /// spelling is the same header to the application.
    public static func canonicalName(_ name: String) -> String {
        // Called for every field of every request: no intermediate array, and no new string at all
        // when the name is already canonical.
        guard name.utf8.contains(where: { ($0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z")) || $0 == UInt8(ascii: "_") }) else {
            return name
        }
        return String(unsafeUninitializedCapacity: name.utf8.count) { buffer in
            var index = 0
            for byte in name.utf8 {
                switch byte {
                case UInt8(ascii: "A")...UInt8(ascii: "Z"): buffer[index] = byte | 0x20
                case UInt8(ascii: "_"): buffer[index] = UInt8(ascii: "-")
                default: buffer[index] = byte
                }
                index += 1
            }
            return index
        }
    }
}
