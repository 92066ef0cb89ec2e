#!/usr/bin/env python3
"""Demo origin: answers with the credentials it received, so you can see what scopeproxy let through
(and prints them on stderr too: what the origin really got, before scopeproxy's response scrub).
Header names are written in lowercase (field names are case-insensitive, RFC 9110 §5.1), so run.sh
can check a line as text. `/download` redirects to --redirect-to (another origin) when given; with
--cert and --key it serves HTTPS. --port 0 picks a free port; the port is written to --ready-file
once the origin listens (demo_server.py)."""
import argparse, json
from demo_server import Handler, log_line, serve

arguments = argparse.ArgumentParser(description="scopeproxy demo origin")
arguments.add_argument("name")
arguments.add_argument("--port", type=int, required=True)
arguments.add_argument("--ready-file", required=True)
arguments.add_argument("--redirect-to")
arguments.add_argument("--cert")
arguments.add_argument("--key")
options = arguments.parse_args()
CREDENTIALS = ("authorization", "x-api-key", "x-cdn-token", "x-token", "cookie")


class Origin(Handler):
    def handle_get(self):
        if options.redirect_to and self.path.startswith("/download"):
            self.send_response(302); self.send_header("Location", options.redirect_to)
            self.send_header("Content-Length", "0"); self.end_headers()
            return
        seen = {k.lower(): v for k, v in self.headers.items() if k.lower() in CREDENTIALS}
        log_line({"origin": options.name, "path": self.path, "received": seen})
        self.answer(200, (json.dumps({"origin": options.name, "path": self.path, "credentials_received": seen}) + "\n").encode())


serve(f"origin {options.name}", Origin, options.port, options.ready_file,
      (options.cert, options.key) if options.cert else None)
