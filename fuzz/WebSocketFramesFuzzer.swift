// Fuzz target (fuzz/FuzzMain.swift dispatches): the WebSocket frame decoder and the frame filter.
// The first byte picks the sender and a split point; the rest is the frame stream. Checked: no
// trap; the decoder finds the same events split as whole (payloads joined); the filter writes only
// RFC 6455 frames of the right masking, never a watched value towards the origin, and stars
// instead of one towards the client.

private let watchedValue = Array("FUZZ-SECRET-7f3a".utf8)
private let fuzzPlaceholder = Array("scopeproxy-ph-fz01".utf8)

private let fuzzPlan: WebSocketFramePlan = {
    let egress = SecretWatch(
        scanner: SecretScanner(secrets: [watchedValue, fuzzPlaceholder]), secrets: ["value", "ph"], placeholders: [false, true],
        holdBack: 24)
    let scrub = SecretWatch(scanner: SecretScanner(secrets: [watchedValue]), secrets: ["value"], placeholders: [false], holdBack: 24)
    return WebSocketFramePlan(
        egress: egress, substitutions: ["ph": .init(placeholder: fuzzPlaceholder, value: Array("SUB".utf8))], scrub: scrub,
        origin: try! Origin.parse("http://fuzz.example"))
}()

/// Events with consecutive payload pieces joined: the same for any split of the input.
private func normalizedEvents(_ pieces: [[UInt8]], sender: WebSocketSender) -> [WebSocketFrameEvent] {
    var decoder = WebSocketFrameDecoder(sender: sender)
    var result: [WebSocketFrameEvent] = []
    for piece in pieces {
        for event in decoder.feed(piece) {
            if case .payload(let more) = event, case .payload(let earlier) = result.last {
                result[result.count - 1] = .payload(earlier + more)
            } else if case .payload(let bytes) = event, bytes.isEmpty {
                continue
            } else {
                result.append(event)
            }
        }
    }
    return result
}

private func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
    guard haystack.count >= needle.count else { return false }
    return (0...(haystack.count - needle.count)).contains { haystack[$0..<($0 + needle.count)].elementsEqual(needle) }
}

func fuzzWebSocketFrames(_ data: UnsafePointer<UInt8>, _ size: Int) {
    guard size > 0 else { return }
    let control = data[0]
    let bytes = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    let sender: WebSocketSender = control & 1 == 0 ? .client : .server
    let cut = bytes.isEmpty ? 0 : Int(control >> 1) % (bytes.count + 1)
    let pieces = [Array(bytes[..<cut]), Array(bytes[cut...])]

    fuzzCheck(
        normalizedEvents([bytes], sender: sender) == normalizedEvents(pieces, sender: sender),
        "the decoder's events depend on where the input was split")

    var key: UInt32 = 0x9E37_79B9
    var filter = WebSocketFrameFilter(sender: sender, plan: fuzzPlan) {
        key = key &* 1_664_525 &+ 1_013_904_223
        return key
    }
    var output: [UInt8] = []
    for piece in pieces { filter.feed(piece, into: &output) }
    filter.releaseHeld(into: &output)

    // What the filter wrote is RFC 6455 as the receiving side reads it: masked towards the origin.
    // Towards the origin a watched value never goes (a substitution cannot make one); towards the
    // client it is stars. Each message's payload is checked joined (a value split across its
    // fragments is still caught here), each control frame's alone.
    var reader = WebSocketFrameDecoder(sender: sender)
    var message: [UInt8] = []
    var frame: WebSocketFrameHeader?
    var controlPayload: [UInt8] = []
    for event in reader.feed(output) {
        switch event {
        case .protocolError(let error):
            fuzzCheck(false, "the filter wrote a frame that is not RFC 6455: \(error)")
        case .header(let header):
            frame = header
            if header.opcode.isControl { controlPayload = [] } else if header.opcode != .continuation { message = [] }
        case .payload(let piece):
            if frame?.opcode.isControl == true { controlPayload += piece } else { message += piece }
        case .frameEnd:
            if frame?.opcode.isControl == true {
                fuzzCheck(!contains(controlPayload, watchedValue), "a watched value left the filter in a control frame")
            } else if frame?.fin == true {
                fuzzCheck(!contains(message, watchedValue), "a watched value left the filter in a message")
                message = []
            }
        }
    }
    fuzzCheck(!contains(message, watchedValue), "a watched value left the filter in an unfinished message")
}
