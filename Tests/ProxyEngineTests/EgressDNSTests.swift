import Foundation
import TestSupport
import Testing

// DNS rebinding against deny_ips (docs/egress.md): the proxy runs in a mount namespace of its own
// (`unshare -m`) whose /etc/resolv.conf names Tests/Fixtures/rebinding_dns.py, which answers a
// name with 127.0.0.2 (allowed), then 127.0.0.3 (denied by `deny_ips: [127.0.0.3/32]`), TTL 0.
// Both canaries listen on the same port, so only the resolved address decides where a request goes.

@Suite("Egress and DNS: the address checked is the address connected to", .serialized)
struct EgressDNSTests {
    @Test(
        "a name that resolves to an allowed address, then to a denied one: the second lookup's request is 403, and the denied listener sees nothing")
    func rebindingToDeniedAddress() throws {
        if let reason = Egress.namespaceUnavailable {
            print("skipped: \(reason)")
            return
        }
        let scratch = ScratchDirectory()
        // One request per upstream connection: every request resolves the name again.
        let canaries = try Egress.canaries(["127.0.0.2", "127.0.0.3"], closing: true)
        let (allowed, denied) = (canaries[0], canaries[1])
        defer { canaries.forEach { $0.stop() } }
        let dns = try RebindingDNS(["rebind.test": ["127.0.0.2", "127.0.0.3"]], scratch: scratch)
        defer { dns.stop() }
        let proxy = try Egress.proxy(launcher: Egress.launcher(scratch, hosts: [], resolvConf: dns.resolvConf)) { _ in
            "egress: { deny_ips: [127.0.0.3/32] }"
        }
        defer { proxy.process.terminate() }
        let url = "http://rebind.test:\(allowed.port)"

        let first = try Egress.get(proxy.port, url + "/first")
        #expect(first?.status == 200 && first?.bodyText == "reached 127.0.0.2 /first")
        let second = try Egress.get(proxy.port, url + "/second")
        #expect(second?.status == 403)
        #expect(Egress.json(second)["rule"] as? String == "deny_ips: 127.0.0.3/32")
        let third = try Egress.get(proxy.port, url + "/third")
        #expect(third?.bodyText == "reached 127.0.0.2 /third", "the name answers 127.0.0.2 again: reached")

        #expect(denied.acceptedConnections == 0, "the denied address never saw a connection")
        #expect(allowed.requests.map(\.target) == ["/first", "/third"])
        // One lookup per connect: a second lookup between the check and the connect would have
        // taken the other answer and sent /first to 127.0.0.3.
        #expect(dns.answers == ["A rebind.test 127.0.0.2", "A rebind.test 127.0.0.3", "A rebind.test 127.0.0.2"], "\(dns.answers)")
        let lines = Egress.lines(proxy, 3)
        try #require(lines.count == 3)
        #expect(lines[0]["upstream"] as? String == "127.0.0.2:\(allowed.port)")
        let note = try #require(lines[1]["egress"] as? [String: Any])
        #expect(note["destination"] as? String == "rebind.test:\(allowed.port)")
        #expect((note["address"] as? String)?.hasPrefix("127.0.0.3") == true, "the log names the address refused: \(note)")
    }

    @Test("a pooled connection to a name's allowed address is not reused after a reload denies that address")
    func pooledConnectionNotReusedAfterReloadDeniesIt() throws {
        if let reason = Egress.namespaceUnavailable {
            print("skipped: \(reason)")
            return
        }
        let scratch = ScratchDirectory()
        let origin = try Egress.canary("127.0.0.2")
        defer { origin.stop() }
        let dns = try RebindingDNS(["pooled.test": ["127.0.0.2"]], scratch: scratch)
        defer { dns.stop() }
        // One thread: the second request is served by the worker whose pool holds the connection.
        let proxy = try Egress.proxy(launcher: Egress.launcher(scratch, hosts: [], resolvConf: dns.resolvConf), threads: 1) { _ in
            "egress: { deny_ips: [127.0.0.3/32] }"
        }
        defer { proxy.process.terminate() }
        let url = "http://pooled.test:\(origin.port)"
        #expect(try Egress.get(proxy.port, url + "/one")?.status == 200)
        #expect(try Egress.get(proxy.port, url + "/two")?.status == 200)
        #expect(origin.acceptedConnections == 1, "control: the second request rode the pooled connection")

        #expect(Egress.reload(proxy, "egress: { deny_ips: [127.0.0.2/32] }\n", reloads: 1))
        let refused = try Egress.get(proxy.port, url + "/three")
        #expect(refused?.status == 403)
        #expect(Egress.json(refused)["rule"] as? String == "deny_ips: 127.0.0.2/32")
        #expect(origin.requests.map(\.target) == ["/one", "/two"], "nothing rode the pooled connection after the reload")
        #expect(origin.acceptedConnections == 1)
    }

    @Test("a name with a denied and an allowed address: the denied one is skipped, the allowed one reached, in either order")
    func deniedAddressSkippedAllowedReached() throws {
        if let reason = Egress.namespaceUnavailable {
            print("skipped: \(reason)")
            return
        }
        let scratch = ScratchDirectory()
        let canaries = try Egress.canaries(["127.0.0.2", "127.0.0.3"])
        let (allowed, denied) = (canaries[0], canaries[1])
        defer { canaries.forEach { $0.stop() } }
        // The names come from /etc/hosts; the resolver is the fixture so that no query leaves the machine.
        let dns = try RebindingDNS([:], scratch: scratch)
        defer { dns.stop() }
        // /etc/hosts lists both addresses for each name, the denied one first for one of them.
        let hosts = [
            ("denied-first.test", "127.0.0.3"), ("denied-first.test", "127.0.0.2"), ("allowed-first.test", "127.0.0.2"),
            ("allowed-first.test", "127.0.0.3"),
        ]
        let proxy = try Egress.proxy(launcher: Egress.launcher(scratch, hosts: hosts, resolvConf: dns.resolvConf)) { _ in
            "egress: { deny_ips: [127.0.0.3/32] }"
        }
        defer { proxy.process.terminate() }
        for name in ["denied-first.test", "allowed-first.test"] {
            let response = try Egress.get(proxy.port, "http://\(name):\(allowed.port)/\(name)")
            #expect(response?.bodyText == "reached 127.0.0.2 /\(name)", "\(name): \(response?.text ?? "no answer")")
        }
        #expect(denied.acceptedConnections == 0)
    }
}
