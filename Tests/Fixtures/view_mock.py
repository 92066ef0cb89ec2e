"""A stand-in for the admin listener's live view (docs/view.md), for working on the page without
the proxy: serves /view, /view/view.css and /view/view.js (the bytes of ViewPage.swift, read from
the source) with the real headers, and /view/events as Server-Sent Events with spec-shaped records,
hostile strings included. Also the browser suite's `--mock` mode and the docs screenshot's source.

    python3 Tests/Fixtures/view_mock.py [--port 0] [--token TOKEN] [--every SECONDS]

Prints `listening PORT` once it accepts. POST /mock/emit with a JSON record publishes it (the
feed adds `seq`). Loopback only; stops on SIGTERM or stdin EOF (when --stdin-eof is given).
"""

import argparse
import json
import os
import re
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

HERE = os.path.dirname(os.path.abspath(__file__))
VIEW_PAGE = os.path.join(HERE, "..", "..", "Sources", "ProxyEngine", "ViewPage.swift")

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def page_assets():
    """The three literals of ViewPage.swift, as the binary serves them."""
    with open(VIEW_PAGE, encoding="utf-8") as source:
        text = source.read()
    found = {}
    for name, body in re.findall(r'private static let (\w+)Text = #"""\n(.*?)\n *"""#', text, re.S):
        # The literal's indentation (that of its closing delimiter, 8 spaces) is not part of it.
        found[name] = "\n".join(line[8:] if line.startswith("        ") else line for line in body.split("\n"))
    return {
        "/view": ("text/html; charset=utf-8", found["html"].encode()),
        "/view/view.css": ("text/css; charset=utf-8", found["css"].encode()),
        "/view/view.js": ("text/javascript; charset=utf-8", found["javascript"].encode()),
    }


def head(line, headers):
    return {"line": line, "headers": [[name, value] for name, value in headers]}


def sample_records(canary_name="github_token", hostile_sample=True):
    """Realistic records: an injected GitHub request, a stripped cookie, a refused egress, a followed
    redirect (two hops), and a hostile path and user-agent."""
    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    hostile = "<img src=x onerror=alert(1)>"
    return [
        {
            "ts": ts + ".101Z", "id": "4f1c2a9e7b3d5a60", "client": "127.0.0.1:50412", "client_id": "agent",
            "method": "GET", "proto": "http/1.1", "url": "https://api.github.com:443/repos/acme/app/pulls?page=2",
            "status": 200, "duration_ms": 182.406, "scope": "github", "injected": ["Authorization"],
            "stripped": [], "upstream": "140.82.121.6:443",
            "view": {"decision": "injected", "origin": "api.github.com:443", "path": "/repos/acme/app/pulls?page=2", "hop": 1},
            "detail": {
                "request": {
                    "client": head("GET https://api.github.com/repos/acme/app/pulls?page=2 HTTP/1.1",
                                   [("host", "api.github.com"), ("user-agent", "gh/2.62.0"), ("accept", "application/vnd.github+json")]),
                    "origin": head("GET /repos/acme/app/pulls?page=2 HTTP/1.1",
                                   [("host", "api.github.com"), ("user-agent", "gh/2.62.0"), ("accept", "application/vnd.github+json"),
                                    ("authorization", "Bearer ${%s}" % canary_name), ("x-request-id", "4f1c2a9e7b3d5a60")]),
                },
                "response": {
                    "origin": {"status": 200, "headers": [["content-type", "application/json; charset=utf-8"], ["x-ratelimit-remaining", "<redacted>"]]},
                    "client": {"status": 200, "headers": [["content-type", "application/json; charset=utf-8"], ["x-request-id", "4f1c2a9e7b3d5a60"]]},
                },
                "rules": [{"rule": "inject", "header": "Authorization", "scope": "github", "secrets": [canary_name]}],
                "curl": "# injected: Authorization <- ${%s} (scope github)\n# scopeproxy ca --config scopeproxy.yaml > scopeproxy-ca.pem\n"
                        "curl --proxy http://127.0.0.1:8080 --cacert scopeproxy-ca.pem -H 'User-Agent: gh/2.62.0' "
                        "-H 'Accept: application/vnd.github+json' 'https://api.github.com/repos/acme/app/pulls?page=2'" % canary_name,
            },
            "explain": "request       GET https://api.github.com/repos/acme/app/pulls?page=2\norigin        https://api.github.com\n"
                       "scope         github\ninject        Authorization: Bearer ${%s}\n" % canary_name,
        },
        {
            "ts": ts + ".245Z", "id": "a07d3e11c9b24f88", "client": "127.0.0.1:50418", "client_id": "agent",
            "method": "POST", "proto": "http/1.1", "url": "https://api.library.example:443/v1/loans",
            "status": 201, "duration_ms": 41.92, "scope": "library", "injected": [], "stripped": ["Cookie"],
            "view": {"decision": "stripped", "origin": "api.library.example:443", "path": "/v1/loans", "hop": 1},
            "detail": {
                "request": {
                    "client": head("POST https://api.library.example/v1/loans HTTP/1.1",
                                   [("host", "api.library.example"), ("cookie", "<redacted>"), ("content-type", "application/json"), ("content-length", "48")]),
                    "origin": head("POST /v1/loans HTTP/1.1",
                                   [("host", "api.library.example"), ("content-type", "application/json"), ("content-length", "48")]),
                },
                "response": {"origin": {"status": 201, "headers": [["content-type", "application/json"]]},
                             "client": {"status": 201, "headers": [["content-type", "application/json"]]}},
                "rules": [{"rule": "strip", "header": "Cookie", "why": "sensitive header, not in the scope's pass list"}],
                "curl": "# left out: Cookie (its value is not shown)\n# the request had a body of 48 bytes, not kept\n"
                        "curl --proxy http://127.0.0.1:8080 --cacert scopeproxy-ca.pem -X POST -H 'Content-Type: application/json' "
                        "'https://api.library.example/v1/loans'",
            },
            "explain": "request       POST https://api.library.example/v1/loans\nscope         library\nstrip         Cookie\n",
        },
        {
            "ts": ts + ".390Z", "id": "e5b0c4d2f1a39e07", "client": "10.0.3.7:41022", "client_id": "ci",
            "method": "GET", "proto": "http/1.1", "url": "https://pastebin.example:443/api/raw",
            "status": 403, "duration_ms": 0.412, "scope": None, "error": "egress_denied",
            "egress": {"decision": "deny", "rule": "default deny", "destination": "pastebin.example:443"},
            "view": {"decision": "refused", "origin": "pastebin.example:443", "path": "/api/raw", "hop": 1},
            "detail": {
                "request": {"client": head("GET https://pastebin.example/api/raw HTTP/1.1", [("host", "pastebin.example"), ("user-agent", "python-requests/2.31")]),
                            "origin": None},
                "response": {"origin": None, "client": {"status": 403, "headers": [["content-type", "application/json"]]}},
                "rules": [{"decision": "deny", "rule": "default deny", "destination": "pastebin.example:443"}],  # as parsed: the rule key comes twice
                "curl": "curl --proxy http://127.0.0.1:8080 --cacert scopeproxy-ca.pem -H 'User-Agent: python-requests/2.31' 'https://pastebin.example/api/raw'",
            },
            "explain": "request       GET https://pastebin.example/api/raw\negress        deny (default deny)\n",
        },
        {
            "ts": ts + ".512Z", "id": "trace-9c2e", "client": "127.0.0.1:50430", "client_id": "agent",
            "method": "GET", "proto": "http/1.1", "url": "https://api.library.example:443/v1/covers/42",
            "status": 302, "duration_ms": 12.1, "scope": "library", "injected": ["Authorization"],
            "redirect": {"location": "https://cdn.library.example/covers/42.jpg", "origin": "cdn.library.example:443", "decision": "follow"},
            "view": {"decision": "followed", "origin": "api.library.example:443", "path": "/v1/covers/42", "hop": 1},
            "detail": {"request": {}, "response": {}, "rules": [
                {"rule": "inject", "header": "Authorization", "scope": "library", "secrets": ["library_token"]},
                {"rule": "redirect", "decision": "follow", "location": "https://cdn.library.example/covers/42.jpg", "origin": "cdn.library.example:443"}],
                "curl": "# injected: Authorization <- ${library_token} (scope library)\ncurl --proxy http://127.0.0.1:8080 'https://api.library.example/v1/covers/42'"},
            "explain": None,
        },
        {
            "ts": ts + ".530Z", "id": "trace-9c2e", "client": "127.0.0.1:50430", "client_id": "agent",
            "method": "GET", "proto": "http/1.1", "url": "https://cdn.library.example:443/covers/42.jpg",
            "status": 200, "duration_ms": 30.6, "scope": "cdn", "injected": ["X-CDN-Token"],
            "view": {"decision": "injected", "origin": "cdn.library.example:443", "path": "/covers/42.jpg", "hop": 2},
            "detail": {"request": {}, "response": {}, "rules": [
                {"rule": "inject", "header": "X-CDN-Token", "scope": "cdn", "secrets": ["cdn_token"]}], "curl": ""},
            "explain": None,
        },
        {
            "ts": ts + ".602Z", "id": "c31f9a0e66b2d4a1", "client": "127.0.0.1:50452", "client_id": "agent",
            "method": "CONNECT", "url": "https://api.github.com:443", "status": 200, "duration_ms": 3.2,
            "decision": "intercept",
            "view": {"decision": "intercept", "origin": "api.github.com:443", "path": None, "hop": 1},
            "detail": {"request": {}, "response": {}, "rules": [], "curl": ""}, "explain": None,
        },
        {
            "ts": ts + ".655Z", "id": "5d7e2b90a4c1f386", "client": "10.0.3.7:41060", "client_id": "ci",
            "method": "PUT", "proto": "http/1.1", "url": "https://acme-artifacts.s3.eu-west-1.amazonaws.com:443/builds/:uuid.tar.gz",
            "status": 200, "duration_ms": 731.5, "scope": "artifacts", "injected": ["Authorization"], "signed": "aws_sigv4",
            "view": {"decision": "signed", "origin": "acme-artifacts.s3.eu-west-1.amazonaws.com:443", "path": "/builds/:uuid.tar.gz", "hop": 1},
            "detail": {"request": {}, "response": {}, "rules": [
                {"rule": "sign", "kind": "aws_sigv4", "scope": "artifacts"}], "curl": ""}, "explain": None,
        },
        {
            "ts": ts + ".701Z", "id": "9a4b1c7d2e3f5061", "client": "127.0.0.1:50460", "client_id": "agent",
            "method": "GET", "proto": "h2", "url": "https://api.library.example:443/v1/me",
            "status": 200, "duration_ms": 55.0, "scope": "library", "injected": ["Authorization"], "scrubbed": ["library_token"],
            "view": {"decision": "scrubbed", "origin": "api.library.example:443", "path": "/v1/me", "hop": 1},
            "detail": {"request": {}, "response": {}, "rules": [
                {"rule": "inject", "header": "Authorization", "scope": "library", "secrets": ["library_token"]},
                {"rule": "scrub", "secret": "library_token", "encoding": "raw"}], "curl": ""}, "explain": None,
        },
    ] + ([] if not hostile_sample else [
        {
            "ts": ts + ".777Z", "id": "0b9e6a5f3c2d1e4f", "client": "127.0.0.1:50444",
            "method": "GET", "proto": "http/1.1", "url": "http://127.0.0.1:8765/" + hostile,
            "status": 404, "duration_ms": 1.03, "scope": None, "injected": [],
            "req_headers": {"user-agent": hostile},
            "view": {"decision": "passed", "origin": "127.0.0.1:8765", "path": "/" + hostile, "hop": 1},
            "detail": {
                "request": {"client": head("GET http://127.0.0.1:8765/" + hostile + " HTTP/1.1", [("user-agent", hostile), ("x-evil", "</pre><script>alert(2)</script>")]),
                            "origin": head("GET /" + hostile + " HTTP/1.1", [("user-agent", hostile)])},
                "response": {"origin": {"status": 404, "headers": [["server", hostile]]}, "client": {"status": 404, "headers": []}},
                "rules": [{"rule": "skip", "scope": hostile, "why": hostile}],
                "curl": "curl --proxy http://127.0.0.1:8080 -H 'User-Agent: " + hostile + "' 'http://127.0.0.1:8765/" + hostile + "'",
            },
            "explain": hostile,
        },
    ])


class Feed:
    def __init__(self):
        self.records = []
        self.condition = threading.Condition()

    def publish(self, record):
        with self.condition:
            record = dict(record)
            record = {"seq": len(self.records) + 1, **{k: v for k, v in record.items() if k != "seq"}}
            self.records.append(record)
            self.condition.notify_all()


def make_handler(feed, assets, token, stopping):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def authorized(self, query):
            if token is None:
                return True
            if self.headers.get("Authorization") == "Bearer " + token:
                return True
            if "scopeproxy_view=" + token in (self.headers.get("Cookie") or ""):
                return True
            return query.get("token") == [token] and urlsplit(self.path).path == "/view"

        def send_plain(self, status, body, extra=()):
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in extra:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            if self.path != "/mock/emit":
                return self.send_plain(404, b'{"error":"not_found"}')
            length = int(self.headers.get("Content-Length") or 0)
            feed.publish(json.loads(self.rfile.read(min(length, 1 << 20))))
            self.send_plain(204, b"")

        def do_GET(self):
            parts = urlsplit(self.path)
            query = parse_qs(parts.query)
            if parts.path not in assets and parts.path != "/view/events":
                return self.send_plain(404, b'{"error":"not_found"}')
            if not self.authorized(query):
                return self.send_plain(401, b'{"error":"unauthorized","hint":"open /view?token=TOKEN"}',
                                       [("WWW-Authenticate", "Bearer")])
            if parts.path in assets:
                kind, body = assets[parts.path]
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Security-Policy", CSP)
                self.send_header("X-Content-Type-Options", "nosniff")
                self.send_header("Referrer-Policy", "no-referrer")
                self.send_header("Cache-Control", "no-store")
                if token is not None and query.get("token") == [token]:
                    self.send_header("Set-Cookie", "scopeproxy_view=%s; Path=/view; HttpOnly; SameSite=Strict" % token)
                self.end_headers()
                self.wfile.write(body)
                return
            after = int(self.headers.get("Last-Event-ID") or 0)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Accel-Buffering", "no")
            self.send_header("Connection", "close")
            self.end_headers()
            sent = after
            try:
                while not stopping.is_set():
                    with feed.condition:
                        if len(feed.records) <= sent:
                            feed.condition.wait(15)
                        pending = feed.records[sent:]
                    if not pending:
                        self.wfile.write(b": keep-alive\n\n")
                    for record in pending:
                        data = json.dumps(record, separators=(",", ":"))
                        self.wfile.write(("id: %d\ndata: %s\n\n" % (record["seq"], data)).encode())
                        sent = record["seq"]
                    self.wfile.flush()
            except OSError:
                pass
            self.close_connection = True

    return Handler


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token")
    parser.add_argument("--every", type=float, default=0, help="publish a sample record every N seconds")
    parser.add_argument("--no-samples", action="store_true")
    parser.add_argument("--no-hostile", action="store_true", help="leave out the hostile sample (the docs screenshot)")
    options = parser.parse_args()
    feed = Feed()
    if not options.no_samples:
        for record in sample_records(hostile_sample=not options.no_hostile):
            feed.publish(record)
    stopping = threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", options.port), make_handler(feed, page_assets(), options.token, stopping))
    server.daemon_threads = True

    def stop(*_):
        stopping.set()
        with feed.condition:
            feed.condition.notify_all()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if options.every > 0:
        def pump():
            samples = sample_records()
            index = 0
            while not stopping.wait(options.every):
                record = dict(samples[index % len(samples)])
                record["id"] = "%016x" % (int(time.time() * 1000) + index)
                feed.publish(record)
                index += 1
        threading.Thread(target=pump, daemon=True).start()
    print("listening %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
