/// `scopeproxy --version`. Kept by hand: SwiftPM has no build step that could stamp it from git.
public enum Version {
    public static let current = "0.1.0"
}
