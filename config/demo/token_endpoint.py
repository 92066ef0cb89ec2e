#!/usr/bin/env python3
"""Demo OAuth2 token endpoint (RFC 6749 §4.4 client credentials): checks the client's Basic
credentials, answers a fresh access token valid for an hour, and logs each token request on stderr
(what the proxy asked for, never the client secret). The client secret comes from the environment
variable DEMO_PARTNER_CLIENT_SECRET (never the command line, which every local user can read).
--port 0 picks a free port; the port is written to --ready-file once it listens (demo_server.py)."""
import argparse, base64, json, os, threading
from demo_server import Handler, log_line, serve

arguments = argparse.ArgumentParser(description="scopeproxy demo OAuth2 token endpoint")
arguments.add_argument("--port", type=int, required=True)
arguments.add_argument("--ready-file", required=True)
arguments.add_argument("--client-id", required=True)
options = arguments.parse_args()
client_secret = os.environ["DEMO_PARTNER_CLIENT_SECRET"]
issued = {"count": 0}
lock = threading.Lock()


class TokenEndpoint(Handler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        expected = "Basic " + base64.b64encode(f"{options.client_id}:{client_secret}".encode()).decode()
        if self.headers.get("Authorization") != expected:
            answer, status = {"error": "invalid_client"}, 401
        else:
            with lock:
                issued["count"] += 1
                number = issued["count"]
            answer, status = {"access_token": f"demo-access-token-{number}", "token_type": "Bearer", "expires_in": 3600}, 200
        log_line({"token_request": body, "client_authenticated": status == 200, "tokens_issued": issued["count"]})
        self.answer(status, json.dumps(answer).encode())


serve("token endpoint", TokenEndpoint, options.port, options.ready_file)
