// Fuzz target (fuzz/FuzzMain.swift dispatches): what a client controls in `clients:` recognition:
// the Proxy-Authorization value, the peer address text a source CIDR is matched against, and a
// /proc/net/tcp line (the kernel's, but parsed by us). The first byte picks the surface.
// Properties: no crash, no hang; a parsed Basic credential re-encoded parses back to itself; a
// parsed CIDR contains its own network and re-parses from its text to itself.
func fuzzClientCredentials(_ data: UnsafePointer<UInt8>, _ size: Int) {
    guard size > 0 else { return }
    let bytes = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    let text = String(decoding: bytes, as: UTF8.self)
    switch data[0] % 3 {
    case 0:
        let value = HTTPField.value(wireBytes: bytes)
        let parsed = ProxyAuthorization.parse(value)
        if case .basic(let user, let password) = parsed {
            let again = ProxyAuthorization.parse("Basic " + Base64.encode(user + [UInt8(ascii: ":")] + password))
            fuzzCheck(again == parsed, "Basic credentials do not survive re-encoding")
            fuzzCheck(!user.contains(UInt8(ascii: ":")), "a Basic user name holds a colon")
        }
        if case .bearer(let token) = parsed { fuzzCheck(!token.isEmpty, "an empty Bearer token parsed") }
        _ = ProxyAuthorization.constantTimeEqual(Array(value.utf8), bytes)
    case 1:
        if case .success(let cidr) = CIDR.parse(text) {
            fuzzCheck(cidr.contains(cidr.network), "a network does not contain its own address")
            fuzzCheck((try? CIDR.parse(cidr.text).get()) == cidr, "a CIDR does not re-parse from its text")
        }
        if let address = IPAddress.parse(text) {
            fuzzCheck(IPAddress.parse(address.description) == address, "an address does not re-parse from its description")
            _ = address.isLoopback
        }
    default:
        let endpoint = SocketOwnerTable.Endpoint(address: .ipv4(127, 0, 0, 1), port: 8080)
        _ = SocketOwnerTable.owner(client: endpoint, server: endpoint, tables: [text], littleEndian: true)
        _ = SocketOwnerTable.owner(client: endpoint, server: endpoint, tables: ["h\n" + text], littleEndian: false)
    }
}
