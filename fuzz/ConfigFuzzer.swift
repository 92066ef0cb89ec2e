// Fuzz target (fuzz/FuzzMain.swift dispatches): the config loader (libyaml events -> node tree -> validated configuration).
// The properties: no crash, no hang, and every refusal points inside the text it refers to
// (FILE:LINE:COLUMN is the user's only way to find the mistake).
func fuzzConfig(_ data: UnsafePointer<UInt8>, _ size: Int) {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    do {
        let config = try ConfigLoader.parse(text, file: "fuzz.yaml", home: "/home/fuzz")
        _ = config.summary
    } catch {
        let lines = yamlLineCount(text)
        fuzzCheck(error.mark.line >= 1 && error.mark.line <= lines + 1, "error line \(error.mark.line) outside 1...\(lines + 1)")
        fuzzCheck(error.mark.column >= 1, "error column \(error.mark.column)")
        fuzzCheck(error.description.hasPrefix("fuzz.yaml:\(error.mark.line):\(error.mark.column): "), "error format")
    }
}

/// Lines as YAML counts them: CRLF, a lone CR, LF, NEL, LS and PS each end a line.
func yamlLineCount(_ text: String) -> Int {
    var lines = 1
    var previousWasCR = false
    for scalar in text.unicodeScalars {
        switch scalar {
        case "\r": lines += 1
        case "\n": if !previousWasCR { lines += 1 }
        case "\u{85}", "\u{2028}", "\u{2029}": lines += 1
        default: break
        }
        previousWasCR = scalar == "\r"
    }
    return lines
}
