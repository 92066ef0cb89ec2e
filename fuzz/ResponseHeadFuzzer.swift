// Fuzz target (fuzz/FuzzMain.swift dispatches): the response-head parser and response framing.
func fuzzResponseHead(_ data: UnsafePointer<UInt8>, _ size: Int) {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    var scanner = HeadScanner(limits: .response)
    bytes.withUnsafeBytes { buffer in
        guard let boundary = try? scanner.scan(buffer),
            let head = try? HeadParser.parseResponse(UnsafeRawBufferPointer(rebasing: buffer[boundary.start..<boundary.end]))
        else { return }
        _ = try? BodyFraming.forResponse(head, requestMethod: "GET")
        _ = Forwarding.clientResponse(from: head, framing: .chunked, clientVersion: .http1_0, keepAlive: false)
        _ = head.serialized()
    }
}
