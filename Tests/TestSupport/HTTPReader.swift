import Foundation

/// A deliberately small HTTP/1.1 reader for tests, written apart from the proxy's codec so the
/// tests do not grade the codec with itself. It trusts its input (test fixtures and the proxy).
public final class HTTPReader: @unchecked Sendable {
    public let socket: TestSocket
    private var buffer: [UInt8] = []

    public init(_ socket: TestSocket) { self.socket = socket }

    private func fill() throws -> Bool {
        let chunk = try socket.receive()
        if chunk.isEmpty { return false }
        buffer += chunk
        return true
    }

    /// The raw head through its blank line, or nil at a clean EOF before any byte.
    public func readHeadBytes() throws -> [UInt8]? {
        while true {
            if let end = Self.find([13, 10, 13, 10], in: buffer) {
                let head = Array(buffer[..<(end + 4)])
                buffer.removeFirst(end + 4)
                return head
            }
            if try !fill() {
                if buffer.isEmpty { return nil }
                throw TestSocketError("EOF inside a head")
            }
        }
    }

    /// Bytes read past the last head or body, handed over so a test can stream the rest itself.
    public func takeBuffered() -> [UInt8] {
        defer { buffer.removeAll() }
        return buffer
    }

    public func readExactly(_ count: Int) throws -> [UInt8] {
        while buffer.count < count {
            if try !fill() { throw TestSocketError("EOF after \(buffer.count) of \(count) body bytes") }
        }
        let result = Array(buffer[..<count])
        buffer.removeFirst(count)
        return result
    }

    public func readLine() throws -> String {
        while true {
            if let end = Self.find([13, 10], in: buffer) {
                let line = String(decoding: buffer[..<end], as: UTF8.self)
                buffer.removeFirst(end + 2)
                return line
            }
            if try !fill() { throw TestSocketError("EOF inside a line") }
        }
    }

    public func readUntilClose() -> [UInt8] {
        var all = buffer
        buffer.removeAll()
        all += socket.receiveUntilClose()
        return all
    }

    public func readChunked() throws -> [UInt8] {
        var body: [UInt8] = []
        while true {
            let sizeLine = try readLine()
            let size = Int(sizeLine.split(separator: ";")[0].trimmingCharacters(in: .whitespaces), radix: 16) ?? -1
            if size < 0 { throw TestSocketError("bad chunk size line \(sizeLine)") }
            if size == 0 {
                while try !readLine().isEmpty {}
                return body
            }
            body += try readExactly(size)
            _ = try readLine()
        }
    }

    public func readResponse(requestMethod: String = "GET") throws -> TestResponse? {
        guard let raw = try readHeadBytes() else { return nil }
        let (startLine, headers) = Self.parseHead(raw)
        let parts = startLine.split(separator: " ", maxSplits: 2)
        let status = Int(parts[1]) ?? 0
        var response = TestResponse(status: status, headers: headers, body: [], rawHead: raw, complete: true)
        if requestMethod == "HEAD" || status < 200 || status == 204 || status == 304 { return response }
        do {
            if response.header("transfer-encoding")?.lowercased() == "chunked" {
                response.body = try readChunked()
            } else if let length = response.header("content-length").flatMap({ Int($0) }) {
                response.body = try readExactly(length)
            } else {
                response.body = readUntilClose()
            }
        } catch {
            response.body = buffer
            response.complete = false
        }
        return response
    }

    public func readRequest() throws -> TestRequest? {
        guard let raw = try readHeadBytes() else { return nil }
        let (startLine, headers) = Self.parseHead(raw)
        let parts = startLine.split(separator: " ")
        // An HTTP/2 preface (h2c with prior knowledge) or any line that is not a request: an
        // HTTP/1.1 server answers nothing it can use and the connection ends, as a real one's would.
        guard parts.count >= 3, !(parts[0] == "PRI" && parts[1] == "*") else { return nil }
        var request = TestRequest(method: String(parts[0]), target: String(parts[1]), headers: headers, body: [], rawHead: raw)
        if request.header("transfer-encoding")?.lowercased() == "chunked" {
            request.body = try readChunked()
        } else if let length = request.header("content-length").flatMap({ Int($0) }) {
            request.body = try readExactly(length)
        }
        return request
    }

    static func parseHead(_ raw: [UInt8]) -> (String, [(String, String)]) {
        let text = String(decoding: raw, as: UTF8.self)
        var lines = text.components(separatedBy: "\r\n").filter { !$0.isEmpty }
        let startLine = lines.removeFirst()
        let headers = lines.map { line -> (String, String) in
            let colon = line.firstIndex(of: ":")!
            return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        return (startLine, headers)
    }

    static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
        guard haystack.count >= needle.count else { return nil }
        for index in 0...(haystack.count - needle.count) where haystack[index] == needle[0] {
            if Array(haystack[index..<(index + needle.count)]) == needle { return index }
        }
        return nil
    }
}

public struct TestResponse: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: [UInt8]
    public var rawHead: [UInt8]
    /// False when the connection ended before the body its framing announced.
    public var complete: Bool

    public func header(_ name: String) -> String? {
        headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }

    public var bodyText: String { String(decoding: body, as: UTF8.self) }
}

public struct TestRequest: Sendable {
    public var method: String
    public var target: String
    public var headers: [(String, String)]
    public var body: [UInt8]
    public var rawHead: [UInt8]

    public func header(_ name: String) -> String? {
        headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }

    public func headers(_ name: String) -> [String] {
        headers.filter { $0.0.lowercased() == name.lowercased() }.map(\.1)
    }

    public var rawHeadText: String { String(decoding: rawHead, as: UTF8.self) }
}
