import Foundation
import TestSupport

/// A loopback OAuth2 token endpoint over TLS (a certificate from the test CA) that counts what it
/// got. Its behaviour is switched between requests (`mode`): grant tokens, answer slowly, close
/// without answering (down), refuse with a §5.2 error whose description holds a canary, or rotate
/// refresh tokens (accepting only the newest). Tokens it grants are `CANARY-at-N`.
struct FixtureFailed: Error {}

final class TokenEndpointFixture: @unchecked Sendable {
    enum Mode: String {
        case grant, down, reject, rotate
    }

    let port: UInt16
    private let directory: ScratchDirectory
    private let process: Process
    private var controlPath: String { directory.path + "/control.json" }
    private var logPath: String { directory.path + "/requests.log" }

    private static let script = #"""
        import http.server, json, ssl, sys, time, threading
        cert, key, control_path, log_path = sys.argv[1:5]
        lock = threading.Lock()
        state = {"issued": 0, "refresh": None}

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length).decode()
                with open(control_path) as f:
                    control = json.load(f)
                with lock:
                    with open(log_path, "a") as log:
                        log.write(json.dumps({"path": self.path, "headers": dict(self.headers.items()), "body": body}) + "\n")
                time.sleep(control.get("delay", 0))
                mode = control["mode"]
                if mode == "down":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if mode == "reject":
                    return self.answer(400, {"error": "invalid_client", "error_description": "bad secret " + control.get("canary", "")})
                form = dict(p.split("=", 1) for p in body.split("&"))
                with lock:
                    state["issued"] += 1
                    n = state["issued"]
                    answer = {"access_token": "CANARY-at-%d" % n, "token_type": "bearer"}
                    if control.get("expires_in") is not None:
                        answer["expires_in"] = control["expires_in"]
                    if mode == "rotate":
                        expected = state["refresh"] or control["initial_refresh"]
                        if form.get("refresh_token") != expected:
                            return self.answer(400, {"error": "invalid_grant"})
                        state["refresh"] = "CANARY-rt-%d" % n
                        answer["refresh_token"] = state["refresh"]
                self.answer(200, answer)

            def answer(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        print(server.server_address[1], flush=True)
        server.serve_forever()
        """#

    init(pki: TestPKI) throws {
        directory = ScratchDirectory()
        let scriptPath = directory.write("token_endpoint.py", Self.script)
        _ = FileManager.default.createFile(atPath: directory.path + "/requests.log", contents: Data())
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        let certificate = pki.certificate("valid")
        process.arguments = [
            "python3", scriptPath, certificate.cert, certificate.key, directory.path + "/control.json", directory.path + "/requests.log",
        ]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        Self.writeControl(directory, .grant, delay: 0, expiresIn: 3600, canary: "", initialRefresh: "")
        try process.run()
        guard let port = readPortLine(output) else {
            process.terminate()
            throw FixtureFailed()
        }
        self.port = port
    }

    deinit { stop() }

    var url: String { "https://127.0.0.1:\(port)/oauth/token" }

    /// Switches the behaviour for the requests that follow.
    func set(_ mode: Mode, delay: Double = 0, expiresIn: Int? = 3600, canary: String = "", initialRefresh: String = "") {
        Self.writeControl(directory, mode, delay: delay, expiresIn: expiresIn, canary: canary, initialRefresh: initialRefresh)
    }

    private static func writeControl(
        _ directory: ScratchDirectory, _ mode: Mode, delay: Double, expiresIn: Int?, canary: String, initialRefresh: String
    ) {
        var control: [String: Any] = ["mode": mode.rawValue, "delay": delay, "canary": canary, "initial_refresh": initialRefresh]
        if let expiresIn { control["expires_in"] = expiresIn }
        let data = try! JSONSerialization.data(withJSONObject: control)
        directory.write("control.json", String(decoding: data, as: UTF8.self))
    }

    /// Every request it received: path, headers, form body.
    var requests: [(path: String, headers: [String: String], body: String)] {
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
            return (object["path"] as? String ?? "", object["headers"] as? [String: String] ?? [:], object["body"] as? String ?? "")
        }
    }

    func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}
