import ProxyCore
import Testing

/// The flood guard: each known HTTP/2 flood ends its connection with its own code; ordinary
/// traffic, however long, never does; no input makes its counters trap.
@Suite("HTTP/2: the flood guard")
struct H2FloodGuardTests {
    static let endStream: UInt8 = 0x1
    static let ack: UInt8 = 0x1
    static let endHeaders: UInt8 = 0x4

    /// A stream as a client opens it (HEADERS with END_HEADERS), answered by the proxy.
    static func request(_ guarding: inout H2FloodGuard, stream: Int32, body: Bool = false) -> H2FloodGuard.Verdict {
        var verdicts = [
            guarding.frameStarted(.headers, flags: endHeaders | (body ? 0 : endStream), stream: stream, length: 30),
            guarding.streamOpened(),
        ]
        if body { verdicts.append(guarding.frameStarted(.data, flags: endStream, stream: stream, length: 100)) }
        return verdicts.first { $0 != .proceed } ?? .proceed
    }

    struct Flood: CustomTestStringConvertible, Sendable {
        let violation: H2Violation
        /// Sends one more frame of the flood; returns the verdict.
        let step: @Sendable (inout H2FloodGuard, Int32) -> H2FloodGuard.Verdict

        var testDescription: String { violation.code }
    }

    static let floods: [Flood] = [
        Flood(violation: .rapidReset) { guarding, index in
            let stream = 1 + 2 * index
            let opened = request(&guarding, stream: stream)
            guard opened == .proceed else { return opened }
            _ = guarding.frameStarted(.rstStream, flags: 0, stream: stream, length: 4)
            return guarding.streamResetByClient(responseEnded: false)
        },
        Flood(violation: .continuationFlood) { guarding, index in
            if index == 0 { return guarding.frameStarted(.headers, flags: 0, stream: 1, length: 10) }
            return guarding.frameStarted(.continuation, flags: 0, stream: 1, length: 10)
        },
        Flood(violation: .headerListTooLarge) { guarding, index in
            if index == 0 { return guarding.frameStarted(.headers, flags: 0, stream: 1, length: 16_384) }
            return guarding.frameStarted(.continuation, flags: 0, stream: 1, length: 16_384)
        },
        Flood(violation: .settingsFlood) { guarding, _ in guarding.frameStarted(.settings, flags: 0, stream: 0, length: 6) },
        Flood(violation: .pingFlood) { guarding, _ in guarding.frameStarted(.ping, flags: 0, stream: 0, length: 8) },
        Flood(violation: .emptyFrameFlood) { guarding, _ in guarding.frameStarted(.data, flags: 0, stream: 1, length: 0) },
        Flood(violation: .emptyFrameFlood) { guarding, index in
            guarding.frameStarted(.headers, flags: endHeaders, stream: 1 + 2 * index, length: 0)
        },
        Flood(violation: .windowUpdateFlood) { guarding, _ in guarding.frameStarted(.windowUpdate, flags: 0, stream: 0, length: 4) },
        Flood(violation: .priorityFlood) { guarding, index in guarding.frameStarted(.priority, flags: 0, stream: 1 + 2 * index, length: 5) },
        Flood(violation: .unknownFrameFlood) { guarding, _ in guarding.frameStarted(H2FrameKind(type: 0xF0), flags: 0, stream: 0, length: 3) },
    ]

    @Test("each flood ends the connection with its own code (ENHANCE_YOUR_CALM), and says so again for every later frame", arguments: floods)
    func floodTrips(_ flood: Flood) {
        var guarding = H2FloodGuard()
        var tripped: H2Violation?
        for index in 0..<100_000 {
            if case .goAway(let violation) = flood.step(&guarding, Int32(index)) {
                tripped = violation
                break
            }
        }
        #expect(tripped == flood.violation)
        #expect(flood.violation.errorCode == .enhanceYourCalm)
        #expect(guarding.frameStarted(.data, flags: 0, stream: 1, length: 100) == .goAway(flood.violation))
        #expect(guarding.streamOpened() == .goAway(flood.violation))
    }

    @Test("ordinary traffic never trips: 10 000 streams with bodies, one in ten reset early, pings, window updates and a few SETTINGS")
    func ordinaryTraffic() {
        var guarding = H2FloodGuard()
        #expect(guarding.frameStarted(.settings, flags: 0, stream: 0, length: 18) == .proceed)
        #expect(guarding.frameStarted(.windowUpdate, flags: 0, stream: 0, length: 4) == .proceed)
        #expect(guarding.frameStarted(.settings, flags: Self.ack, stream: 0, length: 0) == .proceed)
        for index in 0..<10_000 {
            let stream = Int32(1 + 2 * index)
            #expect(Self.request(&guarding, stream: stream, body: index % 3 == 0) == .proceed)
            // A few PRIORITY frames, as some browsers send them.
            if index % 7 == 0 { #expect(guarding.frameStarted(.priority, flags: 0, stream: stream, length: 5) == .proceed) }
            if index % 10 == 0 {
                #expect(guarding.frameStarted(.rstStream, flags: 0, stream: stream, length: 4) == .proceed)
                #expect(guarding.streamResetByClient(responseEnded: false) == .proceed)
                continue
            }
            // The response: several DATA frames, the client's WINDOW_UPDATEs for them.
            for _ in 0..<4 {
                guarding.responseDataSent()
                #expect(guarding.frameStarted(.windowUpdate, flags: 0, stream: stream, length: 4) == .proceed)
            }
            guarding.streamAnswered()
            // A reset after the response ended costs nothing.
            if index % 10 == 5 { #expect(guarding.streamResetByClient(responseEnded: true) == .proceed) }
            if index % 50 == 0 {
                #expect(guarding.frameStarted(.ping, flags: 0, stream: 0, length: 8) == .proceed)
                #expect(guarding.frameStarted(.ping, flags: Self.ack, stream: 0, length: 8) == .proceed)
            }
        }
        // A large header block in a few CONTINUATIONs is fine.
        #expect(guarding.frameStarted(.headers, flags: 0, stream: 30_001, length: 16_000) == .proceed)
        for _ in 0..<2 { #expect(guarding.frameStarted(.continuation, flags: 0, stream: 30_001, length: 16_000) == .proceed) }
        #expect(guarding.frameStarted(.continuation, flags: Self.endHeaders, stream: 30_001, length: 100) == .proceed)
        #expect(guarding.violation == nil)
    }

    @Test("a budget refills with useful work: PINGs between requests never trip, however many")
    func refilled() {
        var guarding = H2FloodGuard()
        for index in 0..<50_000 {
            // A burst of 50 first, then one PING per request (keepalives beside the traffic).
            let pings = index == 0 ? 50 : 1
            for _ in 0..<pings where guarding.frameStarted(.ping, flags: 0, stream: 0, length: 8) != .proceed {
                Issue.record("tripped at request \(index)")
                return
            }
            #expect(Self.request(&guarding, stream: Int32(1 + 2 * index)) == .proceed)
        }
        #expect(guarding.violation == nil)
    }

    @Test("huge inputs never trap: lengths past any frame size, negative ones, millions of events of every kind")
    func noTrap() {
        var guarding = H2FloodGuard()
        for length in [Int.max, Int.min, -1, 1 << 40] {
            var fresh = H2FloodGuard()
            _ = fresh.frameStarted(.headers, flags: 0, stream: 1, length: length)
            _ = fresh.frameStarted(.continuation, flags: 0, stream: 1, length: length)
            _ = fresh.frameStarted(.data, flags: 0, stream: 1, length: length)
        }
        #expect(H2FloodGuard().settingsUsable)
        for index in 0..<2_000_000 {
            _ = guarding.streamOpened()
            guarding.streamAnswered()
            guarding.responseDataSent()
            _ = guarding.frameStarted(.data, flags: 0, stream: Int32.max, length: Int.max)
            if index % 4 == 0 { _ = guarding.streamResetByClient(responseEnded: true) }
        }
        #expect(guarding.violation == nil)
    }

    @Test("frame types are read as RFC 9113 §6 numbers them")
    func frameTypes() {
        let kinds: [H2FrameKind] = (0...9).map { H2FrameKind(type: UInt8($0)) }
        #expect(kinds == [.data, .headers, .priority, .rstStream, .settings, .pushPromise, .ping, .goAway, .windowUpdate, .continuation])
        #expect(H2FrameKind(type: 0xA) == .unknown(0xA))
        #expect(
            H2ErrorCode.enhanceYourCalm.rawValue == 0xB && H2ErrorCode.refusedStream.rawValue == 0x7 && H2ErrorCode.http11Required.rawValue == 0xD)
        #expect(Set(H2Violation.allCases.map(\.code)).count == H2Violation.allCases.count)
    }
}

extension H2FloodGuard {
    /// A fresh guard lets a connection start (a client's SETTINGS).
    fileprivate var settingsUsable: Bool {
        var copy = self
        return copy.frameStarted(.settings, flags: 0, stream: 0, length: 0) == .proceed
    }
}
