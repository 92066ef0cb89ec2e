#!/usr/bin/env python3
"""A loopback HTTPS origin for the TLS tests: answers every request with JSON naming the path and
the headers it received, and appends each request line to a log file, so a test can prove an origin
received nothing. Prints its port on stdout once listening. Args: CERT KEY LOGFILE [REDIRECT_TO]"""
import http.server, json, ssl, sys

cert, key, log_path = sys.argv[1], sys.argv[2], sys.argv[3]
redirect_to = sys.argv[4] if len(sys.argv) > 4 else None

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        with open(log_path, "a") as log:
            log.write(json.dumps({"path": self.path, "headers": dict(self.headers.items())}) + "\n")
        if redirect_to and self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", redirect_to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = json.dumps({"path": self.path, "headers": dict(self.headers.items())}).encode()
        if self.path.startswith("/big"):
            body = b"x" * (4 * 1024 * 1024)  # large enough to still be queued when a close is decided
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
