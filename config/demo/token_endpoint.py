#!/usr/bin/env python3
"""Demo OAuth2 token endpoint (RFC 6749 §4.4 client credentials): checks the client's Basic
credentials, answers a fresh access token valid for an hour, and logs each token request on stderr
(what the proxy asked for, never the client secret). Args: PORT CLIENT_ID CLIENT_SECRET"""
import base64, http.server, json, sys, threading

port, client_id, client_secret = int(sys.argv[1]), sys.argv[2], sys.argv[3]
issued = {"count": 0}
lock = threading.Lock()

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        expected = "Basic " + base64.b64encode(f"{client_id}:{client_secret}".encode()).decode()
        if self.headers.get("Authorization") != expected:
            answer, status = {"error": "invalid_client"}, 401
        else:
            with lock:
                issued["count"] += 1
                number = issued["count"]
            answer, status = {"access_token": f"demo-access-token-{number}", "token_type": "Bearer", "expires_in": 3600}, 200
        print(json.dumps({"token_request": body, "client_authenticated": status == 200, "tokens_issued": issued["count"]}),
              file=sys.stderr, flush=True)
        out = json.dumps(answer).encode()
        self.send_response(status); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out))); self.end_headers(); self.wfile.write(out)
    def log_message(self, *args): pass

http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
