import Foundation
import HTTP1Codec
import Testing

@testable import ScopePolicy

// Differential: the `source` CIDR and address parser against Python's `ipaddress` (strict
// networks), and the Proxy-Authorization Basic decoder against `base64.b64decode(validate=True)`.
// Every disagreement is listed with the reason it is deliberate; any other one fails.

private let networks = [
    "10.0.0.0/8", "10.0.0.0/33", "10.0.0.1/8", "010.0.0.0/8", "10.0.0.01/32", "0.0.0.0/0", "192.168.1.7", "256.1.1.1/32",
    "10.0.0.0/08", "10.0.0.0/", "/8", "", " 10.0.0.0/8", "10.0.0.0/8 ", "10.0.0/24", "1.2.3.4.5/32", "0x0a.0.0.0/8",
    "fd00::/8", "fd00::1/8", "::/0", "::1/128", "::1", "::/129", "fe80::1%eth0/64", "[::1]/128", "1::2::3/64",
    "::ffff:10.0.0.0/104", "::ffff:10.0.0.0/8", "2001:db8::/32", "2001:DB8::/32", "2001:db8:0:0:0:0:0:0/32",
    "1.2.3.4/32", "1.2.3.4/-1", "1.2.3.4/+8", "1.2.3.4/ 8", "١.2.3.4/32",
]

private let addresses = [
    "127.0.0.1", "::1", "::ffff:127.0.0.1", "127.1", "127.000.0.1", "1.2.3", "1.2.3.4 ", "fe80::1%lo", "[::1]", "::",
    "0.0.0.0", "255.255.255.255", "255.255.255.256", "::ffff:1.2.3.4.5", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8:9",
]

private let base64Inputs = [
    "bWU6cHc=", "bWU6cHc", "bWU6cHd=", "bWU===", "bW=6cHc=", "", "====", "bWU6\ncHc=", "bWU6 cHc=", "YQ==", "YR==", "YWI=", "YWJ=",
    "-_-_", "+/+/", "bWU6cHc=\u{0}",
]

/// Deliberate disagreements: input -> why scopeproxy reads it differently from Python.
private let deliberate: [String: String] = [
    "::ffff:10.0.0.0/104":
        "an IPv4-mapped address is IPv4 here (so 10.0.0.0/8 matches a client a dual-stack listener sees as ::ffff:10.x): write 10.0.0.0/8",
    "::ffff:10.0.0.0/8": "Python: an IPv6 network with host bits set; here the mapped address is IPv4, whose /8 this is",
    "fe80::1%lo": "zone ids are refused: a source network names addresses, not interfaces",
    "10.0.0.0/08": "a prefix length with a leading zero is refused, like an IPv4 part with one: one spelling per network",
    "bWU6cHd=": "non-canonical trailing bits: Python ignores them, here a credential must have one spelling",
    "YR==": "non-canonical trailing bits (as above)",
    "YWJ=": "non-canonical trailing bits (as above)",
    "": "Python decodes the empty string to nothing; here empty credentials are not a credential",
    "::ffff:127.0.0.1": "mapped addresses print as IPv4 here",
]

private let script = #"""
    import sys, json, ipaddress, base64, binascii
    out = []
    for item in json.load(sys.stdin):
        kind, text = item
        try:
            if kind == "network":
                net = ipaddress.ip_network(text, strict=True)
                out.append("accept " + str(net.network_address) + "/" + str(net.prefixlen))
            elif kind == "address":
                out.append("accept " + str(ipaddress.ip_address(text)))
            else:
                out.append("accept " + base64.b64decode(text, validate=True).hex())
        except (ValueError, binascii.Error):
            out.append("reject")
    print(json.dumps(out))
    """#

private func pythonVerdicts(_ items: [[String]]) throws -> [String]? {
    guard FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") else { return nil }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
    process.arguments = ["-c", script]
    let input = Pipe(), output = Pipe()
    process.standardInput = input
    process.standardOutput = output
    try process.run()
    input.fileHandleForWriting.write(try JSONSerialization.data(withJSONObject: items))
    try input.fileHandleForWriting.close()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return try JSONSerialization.jsonObject(with: data) as? [String]
}

private func ourVerdict(_ kind: String, _ text: String) -> String {
    switch kind {
    case "network":
        guard case .success(let cidr) = CIDR.parse(text) else { return "reject" }
        return "accept \(cidr.network)/\(cidr.network.isIPv4 ? cidr.prefixLength - 96 : cidr.prefixLength)"
    case "address":
        return IPAddress.parse(text).map { "accept \($0)" } ?? "reject"
    default:
        return ProxyAuthorization.strictBase64(Array(text.utf8)[...]).map { "accept " + $0.map { String(format: "%02x", $0) }.joined() } ?? "reject"
    }
}

@Suite("Clients: differential against Python's ipaddress and base64")
struct ClientDifferentialTests {
    @Test("every disagreement is a listed, deliberate one")
    func differential() throws {
        let items = networks.map { ["network", $0] } + addresses.map { ["address", $0] } + base64Inputs.map { ["base64", $0] }
        guard let theirs = try pythonVerdicts(items) else {
            print("skipped: python3 is not installed, the reference for this differential test")
            return
        }
        #expect(theirs.count == items.count)
        var disagreements: [String] = []
        for (item, reference) in zip(items, theirs) {
            let ours = ourVerdict(item[0], item[1])
            if ours.lowercased() == reference.lowercased() { continue }
            if deliberate[item[1]] == nil { Issue.record("\(item[0]) \(item[1].debugDescription): scopeproxy \(ours), Python \(reference)") }
            disagreements.append(item[1])
        }
        // A listed disagreement that no longer happens is stale: the list must stay true.
        for listed in deliberate.keys { #expect(disagreements.contains(listed), "\(listed.debugDescription) no longer disagrees") }
    }
}
