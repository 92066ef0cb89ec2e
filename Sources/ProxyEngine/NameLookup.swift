import CLibevent

#if canImport(Glibc)
    import Glibc
#endif

/// One lookup of a name's addresses (A and AAAA) with the worker's evdns resolver, never blocking
/// the loop: the connector's (where to connect) and the transparent acceptor's (whether a client's
/// name is its original destination) alike.
///
/// The answer comes once, through `answered`: the addresses in the resolver's order, or nil when
/// the name did not resolve. `localhost` and /etc/hosts names are answered inside `start`, before
/// it returns. After `cancel` nothing more is said.
final class NameLookup {
    private var request: OpaquePointer?
    private var inFlight = false
    private var answered: (([sockaddr_storage]?) -> Void)?

    /// Starts the lookup. The lookup keeps itself (and `answered`) alive until evdns calls back,
    /// which it always does, also after a cancel.
    @discardableResult
    static func start(_ name: String, dns: OpaquePointer, answered: @escaping ([sockaddr_storage]?) -> Void) -> NameLookup {
        let lookup = NameLookup()
        lookup.answered = answered
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_protocol = Int32(IPPROTO_TCP)
        lookup.inFlight = true
        let context = Unmanaged.passRetained(lookup).toOpaque()
        let request = evdns_getaddrinfo(
            dns, name, nil, &hints,
            { result, addresses, context in
                let lookup = Unmanaged<NameLookup>.fromOpaque(context!).takeRetainedValue()
                lookup.finished(result: result, addresses: addresses)
            }, context)
        if lookup.inFlight { lookup.request = request }
        return lookup
    }

    /// Not answered yet (false when the answer came inside `start`).
    var isInFlight: Bool { inFlight }

    /// Stops a lookup in flight: `answered` is not called.
    func cancel() {
        answered = nil
        if let request, inFlight {
            self.request = nil
            evdns_getaddrinfo_cancel(request)
        }
    }

    private func finished(result: Int32, addresses list: UnsafeMutablePointer<addrinfo>?) {
        inFlight = false
        request = nil
        defer { if let list { evutil_freeaddrinfo(list) } }
        guard let answered else { return }
        self.answered = nil
        guard result == 0 else { return answered(nil) }
        var addresses: [sockaddr_storage] = []
        var entry = list
        while let current = entry {
            if let address = current.pointee.ai_addr {
                var storage = sockaddr_storage()
                withUnsafeMutableBytes(of: &storage) { raw in
                    raw.copyMemory(from: UnsafeRawBufferPointer(start: address, count: min(Int(current.pointee.ai_addrlen), raw.count)))
                }
                addresses.append(storage)
            }
            entry = current.pointee.ai_next
        }
        answered(addresses)
    }
}
