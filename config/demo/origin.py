#!/usr/bin/env python3
"""Demo origin: answers with the headers it received, so you can see what scopeproxy let through (and
prints them on stderr too: what the origin really got, before scopeproxy's response scrub).
`/download` redirects to REDIRECT_TO (another origin) when given; with CERT and KEY it serves HTTPS.
Args: NAME PORT [REDIRECT_TO|-] [CERT KEY]"""
import http.server, json, ssl, sys

name, port = sys.argv[1], int(sys.argv[2])
redirect_to = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] != "-" else None
certificate = sys.argv[4:6] if len(sys.argv) > 5 else None

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if redirect_to and self.path.startswith("/download"):
            self.send_response(302); self.send_header("Location", redirect_to); self.send_header("Content-Length", "0"); self.end_headers()
            return
        seen = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "x-api-key", "x-cdn-token", "cookie")}
        print(json.dumps({"origin": name, "path": self.path, "received": seen}), file=sys.stderr, flush=True)
        body = (json.dumps({"origin": name, "path": self.path, "credentials_received": seen}) + "\n").encode()
        self.send_response(200); self.send_header("Content-Type", "application/json"); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args): pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
if certificate:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
