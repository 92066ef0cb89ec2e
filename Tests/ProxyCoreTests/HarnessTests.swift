import HTTP1Codec
import ProxyCore
import Testing

/// The playbook must report every kind of mismatch, or the tables above could pass vacuously.
@Suite("Playbook: the harness reports mismatches")
struct HarnessTests {
    @Test("an action the test did not expect is reported")
    func extraAction() {
        withKnownIssue {
            var p = Playbook()
            p.start([])
        }
    }

    @Test("an expected action that did not come is reported")
    func missingAction() {
        withKnownIssue {
            var p = Playbook()
            p.start([.arm(.clientHead), .cancelTimer])
        }
    }

    @Test("the same actions in another order are reported")
    func order() {
        withKnownIssue {
            var p = Playbook()
            p.start([.arm(.clientHead)])
            p.on(p.head(get[0], get[1]), [.arm(.connect), .cancelTimer, .connect(hop(1), plain, .plain, reusePooled: true)])
        }
    }

    @Test("a timer with the wrong purpose is reported")
    func timerPurpose() {
        withKnownIssue {
            var p = Playbook()
            p.start([.arm(.idle)])
        }
    }

    @Test("a write whose bytes have the wrong start, lack a string or hold a forbidden one is reported", arguments: [
        Expect.write(startingWith: "HTTP/1.1 200"),
        Expect.write(startingWith: "HTTP/1.1 502", containing: ["Connection: close"]),
        Expect.write(startingWith: "HTTP/1.1 502", excluding: ["connect_timeout"]),
    ])
    func writeShape(_ expectation: Expect) {
        withKnownIssue {
            var p = Playbook()
            p.requested()
            p.on(.timerFired(.connect), [.release(hop(1), reuse: false), expectation, .emit(), .arm(.idle), .readNextRequest])
        }
    }

    @Test("a record field with another value is reported")
    func recordField() {
        withKnownIssue {
            var p = Playbook()
            p.requested()
            p.on(.timerFired(.connect), [.release(hop(1), reuse: false), .write(startingWith: "HTTP/1.1 502"), .emit(.status(504)), .arm(.idle), .readNextRequest])
        }
    }

    @Test("bytes sent to another hop, or holding a canary, are reported")
    func sendShape() {
        withKnownIssue {
            var p = Playbook()
            p.requested()
            p.on(.upstreamConnected(hop(1), reused: true), [.send(hop(2), startingWith: "GET "), .arm(.responseHead)])
        }
        withKnownIssue {
            var p = Playbook(Configs.pass)
            p.requested(["GET https://a.example/ HTTP/1.1", "Host: a.example", clientAuthorization], to: a)
            p.on(.upstreamConnected(hop(1), reused: true), [.send(hop(1), startingWith: "GET ", excluding: ["CLIENT-AUTH-CANARY"]), .arm(.responseHead)])
        }
    }

    @Test("the playbook matches the good expectation for the same events (the known issues above are the harness's doing)")
    func control() {
        var p = Playbook()
        p.requested()
        p.on(.timerFired(.connect), [
            .release(hop(1), reuse: false),
            .write(startingWith: "HTTP/1.1 502", excluding: ["Connection: close"]),
            .emit(.status(502)), .arm(.idle), .readNextRequest,
        ])
    }
}
