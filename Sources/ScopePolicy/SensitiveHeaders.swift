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
}
