/// The distance every did-you-mean uses (config keys and names, commands and options, `--client`):
/// optimal string alignment, Damerau-Levenshtein without editing one substring twice. Insertions,
/// deletions, substitutions and transpositions of two adjacent characters each cost 1, so the
/// usual typo, two letters swapped, is as close as one letter wrong (`pahts` is 1 from `paths`,
/// 2 from `pass`).
public enum EditDistance {
    public static func between(_ a: String, _ b: String) -> Int {
        let a = Array(a.utf8), b = Array(b.utf8)
        guard !a.isEmpty, !b.isEmpty else { return max(a.count, b.count) }
        var beforePrevious = [Int](repeating: 0, count: b.count + 1)
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [i] + [Int](repeating: 0, count: b.count)
            for j in 1...b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    current[j] = min(current[j], beforePrevious[j - 2] + 1)
                }
            }
            beforePrevious = previous
            previous = current
        }
        return previous[b.count]
    }
}
