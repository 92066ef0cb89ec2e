/// The terminal access log's colours (SGR codes), shared by the log itself (`AccessLog`) and by
/// `scopeproxy tail`, which writes the same lines from the live view's records.
public enum LogColour {
    public static let green = "32", cyan = "36", yellow = "33", red = "31", magenta = "35", dim = "2"

    /// 2xx green, 3xx cyan, 4xx yellow, 5xx red, anything else (1xx, none) magenta.
    public static func status(_ status: Int?) -> String {
        switch status ?? 0 {
        case 200..<300: green
        case 300..<400: cyan
        case 400..<500: yellow
        case 500..<600: red
        default: magenta
        }
    }
}
