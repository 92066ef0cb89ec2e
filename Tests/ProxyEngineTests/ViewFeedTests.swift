import HTTP1Codec
import PosixSupport
import ScopePolicy
import Testing

@testable import ProxyEngine

private func entry(_ json: String, client: String? = nil, address: String = "127.0.0.1:5000", origin: String? = "api.example:443")
    -> ViewEntry
{
    ViewEntry(json: Array(json.utf8), clientID: client, clientAddress: address, origin: origin)
}

private func text(_ events: [ViewEvent]) -> [String] { events.map { String(decoding: $0.frame.bytes, as: UTF8.self) } }

/// Counts the feed's wake-ups (the admin loop's `event_active` in the engine).
private final class WakeCounter: Sendable {
    let count = Locked(0)
    func wake() { count.withLock { $0 += 1 } }
}

@Suite("Live view feed: seq, ring, replay, pending batches")
struct ViewFeedTests {
    @Test("the feed prepends seq to the record and frames it as one SSE event (id = seq, one data line)")
    func framing() {
        let feed = ViewFeed()
        feed.publish(entry(#"{"id":"r1","status":200}"#))
        feed.publish(entry("{}"))
        feed.publish(entry("{\n\"a\":\r\n1}"))
        feed.publish(entry("[1,2]"))  // not an object: not published
        feed.publish(entry(""))
        let replay = feed.join(after: nil).replay
        #expect(
            text(replay) == [
                "id: 1\ndata: {\"seq\":1,\"id\":\"r1\",\"status\":200}\n\n", "id: 2\ndata: {\"seq\":2}\n\n",
                "id: 3\ndata: {\"seq\":3, \"a\":  1}\n\n",
            ])
        #expect(feed.newestSeq == 3)
    }

    @Test("the ring keeps the newest 500 records and at most 512 KiB; a record over 256 KiB is replaced by a short notice")
    func ringBounds() {
        let feed = ViewFeed()
        for index in 1...600 { feed.publish(entry("{\"n\":\(index)}")) }
        var replay = feed.join(after: nil).replay
        #expect(replay.count == ViewRing.maxRecords)
        #expect(replay.first?.seq == 101 && replay.last?.seq == 600)

        let big = ViewFeed()
        let filler = String(repeating: "x", count: 4000)
        for _ in 1...300 { big.publish(entry("{\"f\":\"\(filler)\"}")) }
        replay = big.join(after: nil).replay
        let bytes = replay.reduce(0) { $0 + $1.frame.count }
        #expect(bytes <= ViewRing.maxBytes && bytes > ViewRing.maxBytes - 4100, "\(bytes) bytes in \(replay.count) records")
        #expect(replay.last?.seq == 300)

        let huge = ViewFeed()
        huge.publish(entry("{\"f\":\"\(String(repeating: "y", count: 300 * 1024))\"}"))
        let only = text(huge.join(after: nil).replay)
        #expect(only.count == 1 && only[0].hasPrefix("id: 1\ndata: {\"seq\":1,\"omitted\":") && only[0].utf8.count < 200)
    }

    @Test("Last-Event-ID replays only the records after it; an id past the newest (a previous run's) replays the whole ring")
    func lastEventID() {
        let feed = ViewFeed()
        for index in 1...20 { feed.publish(entry("{\"n\":\(index)}")) }
        #expect(feed.join(after: 17).replay.map(\.seq) == [18, 19, 20])
        #expect(feed.join(after: 20).replay.isEmpty)
        #expect(feed.join(after: 9_999).replay.count == 20)
        #expect(feed.join(after: 0).replay.count == 20)
    }

    @Test("records queue for the admin thread only while it has viewers; it is woken once per batch, not per record")
    func pendingAndWakes() {
        let feed = ViewFeed()
        let wakes = WakeCounter()
        feed.attach { wakes.wake() }
        feed.publish(entry("{\"n\":1}"))
        #expect(wakes.count.withLock { $0 } == 0, "no viewer: nothing to wake for")
        _ = feed.join(after: nil)
        for index in 2...4 { feed.publish(entry("{\"n\":\(index)}")) }
        #expect(wakes.count.withLock { $0 } == 1)
        let batch = feed.takePending()
        #expect(batch.events.map(\.seq) == [2, 3, 4] && !batch.lost)
        feed.publish(entry("{\"n\":5}"))
        #expect(wakes.count.withLock { $0 } == 2)
        // A viewer joining takes what was pending (for the others) and a replay including it.
        let joined = feed.join(after: 3)
        #expect(joined.pending.map(\.seq) == [5] && joined.replay.map(\.seq) == [4, 5])
        feed.viewersGone()
        feed.publish(entry("{\"n\":6}"))
        #expect(feed.takePending().events.isEmpty)
        feed.detach()
        _ = feed.join(after: nil)
        feed.publish(entry("{\"n\":7}"))
        #expect(wakes.count.withLock { $0 } == 2, "detached: never woken again")
    }

    @Test("an admin thread more than 1 MiB behind loses the batch, and says so (its viewers are then dropped)")
    func pendingBound() {
        let feed = ViewFeed()
        _ = feed.join(after: nil)
        let filler = String(repeating: "z", count: 10_000)
        for _ in 0..<120 { feed.publish(entry("{\"f\":\"\(filler)\"}")) }
        let batch = feed.takePending()
        #expect(batch.lost && batch.events.isEmpty)
        feed.publish(entry("{}"))
        let next = feed.takePending()
        #expect(!next.lost && next.events.count == 1)
    }

    @Test("publishing counts scopeproxy_view_records_published_total")
    func publishedCounter() {
        let metrics = Metrics()
        let feed = ViewFeed(metrics: metrics)
        for _ in 0..<3 { feed.publish(entry("{}")) }
        #expect(metrics.value(.viewRecordsPublished) == 3)
        #expect(metrics.render().contains("scopeproxy_view_records_published_total 3\n"))
        #expect(metrics.render().contains("scopeproxy_view_viewers 0\n"))
    }
}

@Suite("Live view filters and query")
struct ViewFilterTests {
    private func event(client: String?, address: String, origin: String?) -> ViewEvent {
        ViewEvent(seq: 1, frame: SharedBytes(joining: []), clientID: client, clientAddress: address, origin: origin)
    }

    @Test(
        "client= matches the client's name, its address or the address's host; origin= matches host:port, host, or scheme://host[:port]",
        arguments: [
            ("client", "ci", true), ("client", "127.0.0.1:5000", true), ("client", "127.0.0.1", true), ("client", "cj", false),
            ("client", "127.0.0.1:5001", false), ("origin", "api.example:443", true), ("origin", "API.example", true),
            ("origin", "api.example:80", false), ("origin", "https://api.example", true), ("origin", "http://api.example", false),
            ("origin", "https://api.example:443/", true), ("origin", "example", false), ("origin", "other.example", false),
        ])
    func matching(key: String, value: String, expected: Bool) throws {
        var filter = ViewFilter()
        if key == "client" {
            filter.client = value
        } else {
            let (host, port) = try #require(ViewFilter.origin(value))
            filter.originHost = host
            filter.originPort = port
        }
        #expect(filter.matches(event(client: "ci", address: "127.0.0.1:5000", origin: "api.example:443")) == expected)
    }

    @Test("an origin filter never matches a record without an origin; IPv6 addresses and origins compare in brackets")
    func edges() throws {
        var filter = ViewFilter()
        let (host, port) = try #require(ViewFilter.origin("[::1]:8443"))
        filter.originHost = host
        filter.originPort = port
        #expect(filter.matches(event(client: nil, address: "[::1]:5000", origin: "[::1]:8443")))
        #expect(!filter.matches(event(client: nil, address: "[::1]:5000", origin: nil)))
        #expect(ViewFilter(client: "[::1]").matches(event(client: nil, address: "[::1]:5000", origin: nil)))
        #expect(ViewFilter.origin("not a host") == nil && ViewFilter.origin("ftp://x") == nil)
    }

    @Test("the query: known keys once each, percent-decoded ('+' kept); anything else is a problem with a hint")
    func query() throws {
        #expect(try ViewQuery.parse("/view/events", allowed: ["client"]).get().isEmpty)
        #expect(try ViewQuery.parse("/view/events?client=a%3Ab+c", allowed: ["client"]).get() == ["client": Array("a:b+c".utf8)])
        #expect(try ViewQuery.parse("/view?token=", allowed: ["token"]).get() == ["token": []])
        for bad in ["/view/events?cilent=x", "/view/events?client=a&client=b", "/view/events?client=%zz", "/view/events?client=%4"] {
            guard case .failure(let problem) = ViewQuery.parse(bad, allowed: ["client", "origin"]) else {
                Issue.record("\(bad) was accepted")
                continue
            }
            #expect(!problem.hint.isEmpty)
        }
    }
}
