// Fuzz target (fuzz/FuzzMain.swift dispatches): the log redactor and the tripwire. The input is split into a URL part and a
// body part; a canary is planted where the rules say it must never show, and must not show:
// - as the value of a query parameter that is not allowlisted, after whatever path/query precedes it,
//   behind `&` or `;` (a `;` lands in a query pair, a path parameter or the dropped fragment), and
//   as URL userinfo;
// - as a JSON string under a key that is not allowlisted, whatever JSON follows it;
// - base64-encoded inside arbitrary surrounding bytes, for the tripwire.
private let canary = "CANARYq7Zx2Lw9Tk4P"
private let redactor = Redactor()
private let tripwire = Tripwire(secrets: [Array(canary.utf8)])

func fuzzRedactor(_ data: UnsafePointer<UInt8>, _ size: Int) {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    // Path segments are shown unless they look like data; an input that already holds the canary
    // in a path (the fuzzer learns it from comparisons) would "leak" by design, so it is skipped.
    guard !String(decoding: bytes, as: UTF8.self).contains("CANARY") else { return }
    let cut = size > 0 ? Int(bytes[0]) % (size + 1) : 0
    let urlPart = String(decoding: bytes[..<cut], as: UTF8.self)
    let bodyPart = Array(bytes[cut...])

    let target = urlPart + "?&session=" + canary
    let path = redactor.pathAndQuery(target)
    fuzzCheck(!path.contains(canary), "query value leaked: \(path)")
    let semicolon = redactor.pathAndQuery(urlPart + ";session=" + canary)
    fuzzCheck(!semicolon.contains(canary), "value behind ';' leaked: \(semicolon)")
    let absolute = redactor.url("https://user:" + canary + "@api.example" + (urlPart.hasPrefix("/") ? urlPart : "/" + urlPart))
    fuzzCheck(!absolute.contains(canary), "userinfo leaked: \(absolute)")

    var body = Array("{\"password\":\"\(canary)\",\"x\":".utf8) + bodyPart
    body.append(UInt8(ascii: "}"))
    let summary = redactor.bodySummary(body, totalBytes: UInt64(body.count), contentType: "application/json", truncated: false)
    fuzzCheck(!summary.contains(canary), "JSON value leaked: \(summary)")
    fuzzCheck(summary.utf8.count <= Redactor.summaryCap + 64, "summary over its cap")
    // Any Content-Type a peer sends (an empty one once crashed the summary).
    _ = redactor.bodySummary(bodyPart, totalBytes: UInt64(bodyPart.count), contentType: String(urlPart.prefix(40)), truncated: false)
    _ = redactor.bodySummary(bodyPart, totalBytes: UInt64(bodyPart.count), contentType: "application/problem+json", truncated: false)

    // The tripwire finds the canary base64-encoded at any alignment inside other bytes.
    let encoded = Base64.encode(Array(bytes[..<cut]) + Array(canary.utf8) + bodyPart.prefix(64))
    let scrubbed = tripwire.scrub("line " + encoded)
    fuzzCheck(scrubbed.hits >= 1, "tripwire missed a base64-embedded canary")
    fuzzCheck(tripwire.scrub(scrubbed.line).hits == 0, "scrub left a hit")
}
