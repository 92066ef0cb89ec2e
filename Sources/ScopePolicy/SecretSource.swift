/// Where a secret's value comes from (`secrets:` in the config). The config loader builds these;
/// the secret store reads them.
public enum SecretSource: Sendable, Equatable {
    case env(String)
    /// Absolute path (relative paths were resolved against the config file's directory).
    case file(path: String, allowGroupRead: Bool)
    case store(String)

    /// A name in the local store is a file name there: letters, digits, `_`, `.`, `-`, not
    /// starting with a dot (no hidden files, no `..`). The config and `scopeproxy secret` agree.
    public static func isValidStoreName(_ name: String) -> Bool {
        !name.isEmpty && !name.hasPrefix(".") && name.utf8.allSatisfy(HeaderTemplate.isNameByte)
    }
}
