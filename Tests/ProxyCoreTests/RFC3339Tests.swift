import ProxyCore
import Testing

/// Expiries as credential sources state them (RFC 3339 §5.6); references from Python's
/// `datetime.fromisoformat(...).timestamp()`.
@Suite struct RFC3339Tests {
    @Test(arguments: [
        ("2026-12-02T10:22:26Z", 1_796_206_946 as Int64),
        ("2026-12-02T10:22:26.123456Z", 1_796_206_946),
        ("2000-02-29T23:59:59+01:30", 951_863_399),
        ("1970-01-01T00:00:00Z", 0),
        ("9999-12-31T23:59:59Z", 253_402_300_799),
        ("2026-12-02t10:22:26z", 1_796_206_946),
    ])
    func readsTimestamps(text: String, expected: Int64) {
        #expect(RFC3339.secondsSinceEpoch(text) == expected)
    }

    /// Out-of-range fields, missing zones, trailing bytes and huge years are nil, never a trap.
    @Test(arguments: [
        "", "2026-12-02", "2026-12-02T10:22:26", "2026-13-02T10:22:26Z", "2026-02-30T10:22:26Z", "2025-02-29T00:00:00Z",
        "2026-12-02T24:00:00Z", "2026-12-02T10:60:00Z", "1969-12-31T23:59:59Z", "99999-12-31T23:59:59Z",
        "2026-12-02T10:22:26Zx", "2026-12-02T10:22:26+1:00", "2026-12-02T10:22:26.Z", "+026-12-02T10:22:26Z",
        "2026-12-02T10:22:26" + String(repeating: "9", count: 30) + "Z",
    ])
    func refusesMalformed(text: String) {
        #expect(RFC3339.secondsSinceEpoch(text) == nil)
    }
}
