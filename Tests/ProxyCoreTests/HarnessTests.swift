import HTTP1Codec
import ProxyCore
import Testing

/// The playbook must notice every kind of mismatch, or the tables could pass vacuously. Each test
/// feeds real events and a wrong expectation, and checks that a mismatch is found.
@Suite("Playbook: the harness notices mismatches")
struct HarnessTests {
    @Test("an action the test did not expect")
    func extraAction() {
        var p = Playbook()
        #expect(p.mismatches(nil, []) == ["1 actions, expected 0"])
    }

    @Test("an expected action that did not come")
    func missingAction() {
        var p = Playbook()
        #expect(p.mismatches(nil, [.arm(.clientHead), .cancelTimer]) == ["1 actions, expected 2"])
    }

    @Test("the same actions in another order")
    func order() {
        var p = Playbook()
        p.start([.arm(.clientHead)])
        let problems = p.mismatches(p.head(get[0], get[1]), [.arm(.connect), .cancelTimer, .connect(hop(1), plain, .plain, reusePooled: true)])
        #expect(problems.count == 2)
    }

    @Test("a timer with the wrong purpose")
    func timerPurpose() {
        var p = Playbook()
        #expect(p.mismatches(nil, [.arm(.idle)]).count == 1)
    }

    @Test(
        "a write with the wrong start, lacking a string, or holding a forbidden one",
        arguments: [
            Expect.write(startingWith: "HTTP/1.1 200"),
            Expect.write(startingWith: "HTTP/1.1 502", containing: ["Connection: close"]),
            Expect.write(startingWith: "HTTP/1.1 502", excluding: ["connect_timeout"]),
            Expect.writeExactly("HTTP/1.1 502 Bad Gateway\r\n"),
        ])
    func writeShape(_ expectation: Expect) {
        var p = Playbook()
        p.requested()
        let problems = p.mismatches(.timerFired(.connect), [.release(hop(1), reuse: false), expectation, .emit(), .arm(.idle), .readNextRequest])
        #expect(problems.count == 1 && problems[0].hasPrefix("action 1:"), "\(problems)")
    }

    @Test(
        "a record field with another value",
        arguments: [
            RecordField.status(504), .failure(.proxy(.responseTimeout(plain))), .scopes(["a"]), .redirect(.follow), .id("other"),
        ])
    func recordField(_ field: RecordField) {
        var p = Playbook()
        p.requested()
        let problems = p.mismatches(
            .timerFired(.connect),
            [.release(hop(1), reuse: false), .write(startingWith: "HTTP/1.1 502"), .emit(field), .arm(.idle), .readNextRequest])
        #expect(problems.count == 1 && problems[0].hasPrefix("action 2: record:"), "\(problems)")
    }

    @Test("any field of the access log's table with another value (so a field added to the table is checkable)", arguments: LogField.ordered)
    func logField(_ field: LogField) {
        var p = Playbook()
        p.requested()
        let problems = p.mismatches(
            .timerFired(.connect),
            [
                .release(hop(1), reuse: false), .write(startingWith: "HTTP/1.1 502"),
                .emit(.field(field, .text("no record has this"))), .arm(.idle), .readNextRequest,
            ])
        #expect(problems.count == 1 && problems[0].hasPrefix("action 2: record: \(field.name) is "), "\(problems)")
    }

    @Test("bytes sent to another hop, or holding a canary")
    func sendShape() {
        var p = Playbook()
        p.requested()
        #expect(p.mismatches(.upstreamConnected(hop(1), reused: true), [.send(hop(2), startingWith: "GET "), .arm(.responseHead)]).count == 1)
        var q = Playbook(Configs.pass)
        q.requested(["GET https://a.example/ HTTP/1.1", "Host: a.example", clientAuthorization], to: a)
        #expect(
            q.mismatches(
                .upstreamConnected(hop(1), reused: true),
                [.send(hop(1), startingWith: "GET ", excluding: ["CLIENT-AUTH-CANARY"]), .arm(.responseHead)]
            ).count == 1)
    }

    @Test("control: the right expectations for the same events match")
    func control() {
        var p = Playbook()
        #expect(p.mismatches(nil, [.arm(.clientHead)]).isEmpty)
        #expect(p.mismatches(p.head(get[0], get[1]), [.cancelTimer, .arm(.connect), .connect(hop(1), plain, .plain, reusePooled: true)]).isEmpty)
        #expect(
            p.mismatches(
                .timerFired(.connect),
                [
                    .release(hop(1), reuse: false),
                    .write(startingWith: "HTTP/1.1 502", containing: ["connect_timeout"], excluding: ["Connection: close"]),
                    .emit(.status(502), .failure(.proxy(.connectTimeout(plain)))), .arm(.idle), .readNextRequest,
                ]
            ).isEmpty)
    }
}
