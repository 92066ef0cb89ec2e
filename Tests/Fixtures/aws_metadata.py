#!/usr/bin/env python3
"""A loopback EC2 instance metadata service (IMDSv2 only) and container credentials endpoint, for
the credential chain's tests (ProxyEngineTests/AWSCredentialChainFixtureTests). Plain http on
127.0.0.1, port 0.

    aws_metadata.py --log PATH --role NAME --credentials AKID SECRET TOKEN
                    [--container-path PATH] [--container-token TOKEN] [--expires-in SECONDS]

Prints its port on the first line of stdout, then serves until stdin closes.

IMDSv2, as EC2 documents it:
- PUT /latest/api/token needs X-aws-ec2-metadata-token-ttl-seconds (1 to 21600) and answers a
  fresh session token; a PUT without it is 400.
- every GET needs X-aws-ec2-metadata-token equal to a token this service issued, else 401 (so
  an IMDSv1 client gets nothing);
- GET /latest/meta-data/iam/security-credentials/ answers NAME; .../NAME answers {"Code":
  "Success", "LastUpdated", "Type": "AWS-HMAC", "AccessKeyId", "SecretAccessKey", "Token",
  "Expiration"} (--expires-in seconds from now, default an hour); another name is 404.
Container: GET --container-path (default /v2/credentials/x) must carry Authorization equal to
--container-token when one is given (else 401), and answers {"RoleArn", "AccessKeyId",
"SecretAccessKey", "Token", "Expiration"}.

Every request appends one JSON line to --log: {"kind": "imds-token" | "imds-role" |
"imds-credentials" | "container" | "other", "method", "path", "ok", "why"}.
"""

import argparse
import datetime
import http.server
import json
import os
import secrets
import sys
import threading

log_lock = threading.Lock()
CREDENTIALS_PATH = "/latest/meta-data/iam/security-credentials/"


def make_handler(options, issued):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def log(self, kind, ok, why=None):
            with log_lock:
                with open(options.log, "a") as log:
                    log.write(json.dumps({"kind": kind, "method": self.command, "path": self.path, "ok": ok, "why": why}) + "\n")

        def answer(self, status, body, content_type="text/plain"):
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = True

        def credentials(self, extra):
            key_id, secret, token = options.credentials
            expiration = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=options.expires_in)).strftime("%Y-%m-%dT%H:%M:%SZ")
            document = dict(extra)
            document.update({"AccessKeyId": key_id, "SecretAccessKey": secret, "Token": token, "Expiration": expiration})
            return json.dumps(document)

        def do_PUT(self):
            length = int(self.headers.get("Content-Length", "0"))
            self.rfile.read(length)
            if self.path != "/latest/api/token":
                self.log("other", False, "PUT to another path")
                return self.answer(404, "not found")
            ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
            if ttl is None or not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                self.log("imds-token", False, "no valid X-aws-ec2-metadata-token-ttl-seconds")
                return self.answer(400, "missing or invalid ttl")
            token = "imds-" + secrets.token_hex(16)
            with log_lock:
                issued.add(token)
            self.log("imds-token", True)
            self.answer(200, token)

        def do_GET(self):
            if self.path == options.container_path:
                if options.container_token is not None and self.headers.get("Authorization") != options.container_token:
                    self.log("container", False, "Authorization is not the container token")
                    return self.answer(401, "unauthorized")
                self.log("container", True)
                return self.answer(200, self.credentials({"RoleArn": "arn:aws:iam::123456789012:role/container"}), "application/json")
            if not self.path.startswith(CREDENTIALS_PATH):
                self.log("other", False, "unknown path")
                return self.answer(404, "not found")
            kind = "imds-role" if self.path == CREDENTIALS_PATH else "imds-credentials"
            with log_lock:
                valid = self.headers.get("X-aws-ec2-metadata-token") in issued
            if not valid:
                self.log(kind, False, "no session token from PUT /latest/api/token")
                return self.answer(401, "unauthorized")
            if kind == "imds-role":
                self.log(kind, True)
                return self.answer(200, options.role)
            if self.path[len(CREDENTIALS_PATH):] != options.role:
                self.log(kind, False, "another role name")
                return self.answer(404, "not found")
            self.log(kind, True)
            now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            self.answer(200, self.credentials({"Code": "Success", "LastUpdated": now, "Type": "AWS-HMAC"}), "application/json")

    return Handler


def exit_on_stdin_close():
    sys.stdin.read()
    os._exit(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    parser.add_argument("--role", required=True)
    parser.add_argument("--credentials", nargs=3, required=True)
    parser.add_argument("--container-path", default="/v2/credentials/x")
    parser.add_argument("--container-token")
    parser.add_argument("--expires-in", type=int, default=3600)
    options = parser.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(options, set()))
    print(server.server_address[1], flush=True)
    threading.Thread(target=exit_on_stdin_close, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
