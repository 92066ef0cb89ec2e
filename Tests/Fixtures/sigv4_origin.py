#!/usr/bin/env python3
"""A loopback HTTP origin that checks AWS SigV4 signatures with botocore's own signer, for the
proxy's signing tests (ProxyEngineTests/SigV4EngineTests). Plain http on 127.0.0.1, port 0.

    sigv4_origin.py --log PATH --credential AKID SECRET [TOKEN] [--credential ...] [--ports N]

Prints the ports it listens on (N of them, default 1) on one line on stdout, space-separated, then
serves until killed. Every request, signed or not, is appended to the log file as one JSON object
per line ({"port", "method", "target", "headers": [[name, value], ...], "body_length",
"body_sha256", "verified", "why"}) once its head and body are read, so a test can prove what did
and did not arrive (a client's own Authorization, a canary), and that an origin received nothing.

Verification, as an AWS service does it, with botocore as the reference:
- the Authorization must be one `AWS4-HMAC-SHA256 Credential=AKID/DATE/REGION/SERVICE/aws4_request,
  SignedHeaders=..., Signature=...` whose AKID is one given with --credential (its secret, and its
  session token when one was given, are what botocore signs with); region and service are taken
  from the credential scope, the time from X-Amz-Date (botocore's clock is frozen at it, as in
  AWSSigV4Tests/botocore_sign.py), which must be within 15 minutes of this machine's clock;
- botocore rebuilds the request from what arrived: the method, the raw path as received (botocore
  normalizes and encodes it itself: twice for most services, as sent for s3), the query decoded
  into its pairs as a service reads it (`+` is a space; botocore re-encodes and sorts them), the
  received fields named in SignedHeaders (values in wire order, UTF-8 as on the wire), and the
  body. The signer is S3SigV4Auth for service s3 (the payload is UNSIGNED-PAYLOAD when
  X-Amz-Content-Sha256 says so, else the body's SHA-256), SigV4Auth otherwise (the body's SHA-256:
  botocore always hashes the body, as a service that is not s3 does);
- the Authorization botocore computes must equal the received one byte for byte (so SignedHeaders
  must be exactly the received list, and the signature must match); X-Amz-Security-Token must be the
  token given for that AKID (and absent when none was), every received x-amz-* field must be signed
  (AWS requires it), and a received X-Amz-Content-Sha256 other than UNSIGNED-PAYLOAD must be the
  body's hash; a service other than s3 must not send UNSIGNED-PAYLOAD.

A verified request to /redirect/PORT/REST is answered 302 with Location http://127.0.0.1:PORT/REST.

Answers 200 {"verified": true, "signed_headers": [...], "saw_client_authorization": bool, ...} or
403 {"verified": false, "why": "...", ...}; both name the botocore version. saw_client_authorization
is true when more than one Authorization field arrived (a client's next to the proxy's).
"""

import argparse
import datetime
import hashlib
import http.server
import json
import re
import sys
import threading
import types
from urllib.parse import parse_qsl

import botocore
import botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from botocore_clock import freeze_clock  # beside this file

AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=([A-Za-z0-9_]+)/(\d{8})/([a-z0-9-]+)/([a-z0-9-]+)/aws4_request, "
    r"SignedHeaders=([a-z0-9!#$%&'*+.^_`|~;-]+), Signature=([0-9a-f]{64})$"
)
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
MAX_SKEW = datetime.timedelta(minutes=15)

# botocore's clock is module state: one signature at a time.
signing_lock = threading.Lock()
log_lock = threading.Lock()


def wire_text(value):
    """http.server decodes fields as ISO-8859-1; botocore hashes str as UTF-8. Give botocore the
    characters whose UTF-8 is the bytes that arrived (as they were signed)."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value


class Rejected(Exception):
    pass


def verify(method, target, fields, body, credentials):
    """Returns the 200 document or raises Rejected(why). `fields` is [(name, value)] as received."""
    def all_of(name):
        return [v for n, v in fields if n.lower() == name]

    authorizations = all_of("authorization")
    if not authorizations:
        raise Rejected("no Authorization")
    if len(authorizations) > 1:
        raise Rejected(f"{len(authorizations)} Authorization fields")
    authorization = authorizations[0]
    match = AUTHORIZATION.match(authorization)
    if not match:
        raise Rejected("Authorization is not AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...")
    key_id, date, region, service, signed_list, _ = match.groups()
    if key_id not in credentials:
        raise Rejected(f"unknown access key id {key_id}")
    secret, token = credentials[key_id]
    signed = signed_list.split(";")
    if signed != sorted(set(signed)):
        raise Rejected("SignedHeaders is not sorted and unique")
    for required in ("host", "x-amz-date"):
        if required not in signed:
            raise Rejected(f"{required} is not signed")
    received_names = {n.lower() for n, _ in fields}
    for name in sorted(received_names):
        if name.startswith("x-amz-") and name not in signed:
            raise Rejected(f"{name} was sent but not signed")
    for name in signed:
        if name not in received_names:
            raise Rejected(f"signed header {name} did not arrive")

    dates = all_of("x-amz-date")
    if len(dates) != 1:
        raise Rejected(f"{len(dates)} X-Amz-Date fields")
    try:
        moment = datetime.datetime.strptime(dates[0], "%Y%m%dT%H%M%SZ")
    except ValueError:
        raise Rejected(f"X-Amz-Date {dates[0]!r} is not YYYYMMDDTHHMMSSZ")
    if moment.strftime("%Y%m%d") != date:
        raise Rejected("the credential scope's date is not X-Amz-Date's")
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    if abs(now - moment) > MAX_SKEW:
        raise Rejected(f"X-Amz-Date {dates[0]} is more than 15 minutes from this origin's clock")

    tokens = all_of("x-amz-security-token")
    if token is None and tokens:
        raise Rejected("X-Amz-Security-Token arrived for credentials without a session token")
    if token is not None and tokens != [token]:
        raise Rejected("X-Amz-Security-Token is not the session token" if tokens else "no X-Amz-Security-Token")

    body_sha256 = hashlib.sha256(body).hexdigest()
    content_hashes = all_of("x-amz-content-sha256")
    if len(content_hashes) > 1:
        raise Rejected(f"{len(content_hashes)} X-Amz-Content-Sha256 fields")
    content_hash = content_hashes[0] if content_hashes else None
    if content_hash is not None and content_hash != UNSIGNED_PAYLOAD and content_hash != body_sha256:
        raise Rejected("X-Amz-Content-Sha256 is not the body's SHA-256")
    if service == "s3" and content_hash is None:
        raise Rejected("s3 needs X-Amz-Content-Sha256")

    hosts = all_of("host")
    if len(hosts) != 1:
        raise Rejected(f"{len(hosts)} Host fields")
    path, _, query = wire_text(target).partition("?")
    if not path.startswith("/"):
        raise Rejected(f"target {target!r} is not origin-form")
    # The URL's scheme takes no part in the canonical request (the Host field is signed as sent);
    # https keeps botocore from deciding payload signing by scheme (it always hashes over http).
    request = AWSRequest(
        method=method,
        url="https://" + hosts[0] + path,
        data=body,
        params=parse_qsl(query, keep_blank_values=True),
    )
    for name, value in fields:
        if name.lower() in signed:
            request.headers[name] = wire_text(value)
    unsigned = content_hash == UNSIGNED_PAYLOAD
    if service == "s3":
        request.context["client_config"] = types.SimpleNamespace(s3={"payload_signing_enabled": not unsigned})
    elif unsigned:
        raise Rejected(f"{service} is not s3: its payload must be hashed, not UNSIGNED-PAYLOAD")
    signer_class = botocore.auth.S3SigV4Auth if service == "s3" else botocore.auth.SigV4Auth
    signer = signer_class(Credentials(key_id, secret, token), service, region)
    captured = {}
    canonical_request = signer.canonical_request

    def capture(req):
        captured["canonical_request"] = canonical_request(req)
        return captured["canonical_request"]

    signer.canonical_request = capture
    with signing_lock:
        freeze_clock(moment)
        signer.add_auth(request)
    expected = request.headers["Authorization"]
    if expected != authorization:
        raise Rejected("signature mismatch: botocore computed " + expected
                       + "\ncanonical request:\n" + captured.get("canonical_request", "?"))
    return {
        "verified": True,
        "access_key_id": key_id,
        "region": region,
        "service": service,
        "signed_headers": signed,
        "payload": UNSIGNED_PAYLOAD if unsigned else body_sha256,
        "session_token": token is not None,
    }


def make_handler(credentials, log_path):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def handle_one_request(self):
            # Every method, one code path (BaseHTTPRequestHandler dispatches on do_METHOD).
            try:
                self.raw_requestline = self.rfile.readline(65537)
                if not self.raw_requestline:
                    self.close_connection = True
                    return
                if not self.parse_request():
                    return
                self.answer()
                self.wfile.flush()
            except (ConnectionError, TimeoutError):
                self.close_connection = True

        def read_body(self):
            if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                body = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return body
                    body += self.rfile.read(size)
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def answer(self):
            fields = [(name, value) for name, value in self.headers.items()]
            record = {"port": self.server.server_address[1], "method": self.command, "target": self.path,
                      "headers": [[n, wire_text(v)] for n, v in fields]}
            try:
                body = self.read_body()
            except (ValueError, ConnectionError, TimeoutError) as error:
                record["body_error"] = str(error)
                self.append(record)
                self.close_connection = True
                return
            record["body_length"] = len(body)
            record["body_sha256"] = hashlib.sha256(body).hexdigest()
            try:
                document = verify(self.command, self.path, fields, body, credentials)
                status = 200
            except Rejected as rejected:
                document = {"verified": False, "why": str(rejected)}
                status = 403
            document["saw_client_authorization"] = len([n for n, _ in fields if n.lower() == "authorization"]) > 1
            document["botocore"] = botocore.__version__
            record["verified"] = document["verified"]
            record["why"] = document.get("why")
            self.append(record)
            payload = json.dumps(document).encode()
            # A verified request whose path is /redirect/PORT/REST is sent on to 127.0.0.1:PORT/REST
            # (302), for the tests of signing per hop.
            redirect = re.match(r"^/redirect/(\d+)(/.*)$", self.path)
            if redirect and document["verified"]:
                status = 302
            self.send_response(status)
            if status == 302:
                self.send_header("Location", f"http://127.0.0.1:{redirect.group(1)}{redirect.group(2)}")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)

        def append(self, record):
            with log_lock, open(log_path, "a") as log:
                log.write(json.dumps(record) + "\n")

        def log_message(self, *args):
            pass

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--log", required=True, help="JSON-lines file: every request received")
    parser.add_argument("--credential", nargs="+", action="append", required=True, metavar="AKID SECRET [TOKEN]")
    parser.add_argument("--ports", type=int, default=1, help="how many listening ports (same credentials)")
    arguments = parser.parse_args()
    credentials = {}
    for credential in arguments.credential:
        if len(credential) not in (2, 3):
            parser.error("--credential takes AKID SECRET [TOKEN]")
        credentials[credential[0]] = (credential[1], credential[2] if len(credential) == 3 else None)
    open(arguments.log, "a").close()
    handler = make_handler(credentials, arguments.log)
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) for _ in range(arguments.ports)]
    for server in servers:
        server.daemon_threads = True
    print(" ".join(str(server.server_address[1]) for server in servers), flush=True)
    for server in servers[1:]:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    servers[0].serve_forever()


if __name__ == "__main__":
    main()
