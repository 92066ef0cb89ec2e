#!/usr/bin/env python3
"""Checks sigv4_origin.py on its own, with no proxy: requests signed by botocore itself (the
current time, as an SDK signs) must verify, and every tampered variant must be refused, so a
proxy test that passes against the fixture means the signature was checked. Run with a python3
that imports botocore: `python3 Tests/Fixtures/sigv4_origin_check.py`; exits 0 when all hold,
and prints one line per case. ProxyEngineTests/SigV4EngineTests runs it too."""

import datetime
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import types

import botocore
import botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import sigv4_origin  # noqa: E402 (its clock freezing, for a stale signature)
PLAIN = ("AKIDPLAINEXAMPLE", "plainSecretKeyEXAMPLE/K7MDENG+bPxRfiCY")
TOKENED = ("AKIDTOKENEXAMPLE", "tokenSecretKeyEXAMPLE/K7MDENG+bPxRfiCY", "IQoJb3JpZ2luX2VjEXAMPLE//////////wEa+token/with=padding==")


def sign(port, credential, service, method, target, headers=(), body=b"", unsigned=False, region="eu-west-1", params=None,
         at=None):
    """botocore signs the request as it will go on the wire (now, or `at`); returns (target, [(name, value)], body)."""
    if at is not None:
        saved = botocore.auth.datetime, getattr(botocore.auth, "get_current_datetime", None)
        sigv4_origin.freeze_clock(at)
        try:
            return sign(port, credential, service, method, target, headers, body, unsigned, region, params)
        finally:
            botocore.auth.datetime = saved[0]
            if saved[1] is not None:
                botocore.auth.get_current_datetime = saved[1]
    request = AWSRequest(method=method, url=f"http://127.0.0.1:{port}{target}", data=body, params=params or {})
    for name, value in headers:
        request.headers[name] = value
    if service == "s3":
        request.context["client_config"] = types.SimpleNamespace(s3={"payload_signing_enabled": not unsigned})
    signer_class = botocore.auth.S3SigV4Auth if service == "s3" else botocore.auth.SigV4Auth
    signer_class(Credentials(*credential), service, region).add_auth(request)
    if params:
        target = request.prepare().url.split(f":{port}", 1)[1]
    fields = [("Host", f"127.0.0.1:{port}")] + [(n, v) for n, v in request.headers.items()]
    if body:
        fields.append(("Content-Length", str(len(body))))
    return target, fields, body


def send(port, method, target, fields, body=b""):
    head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{n}: {v}\r\n" for n, v in fields) + "Connection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(head.encode("utf-8") + body)
        data = b""
        while chunk := connection.recv(65536):
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(payload)


def replace(fields, name, value):
    return [(n, value if n.lower() == name.lower() else v) for n, v in fields]


def main():
    log = tempfile.NamedTemporaryFile(prefix="sigv4-origin-check-", suffix=".jsonl", delete=False).name
    fixture = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "sigv4_origin.py"), "--log", log,
         "--credential", *PLAIN, "--credential", *TOKENED, "--ports", "2"],
        stdout=subprocess.PIPE, text=True)
    failures = 0
    try:
        port, second_port = (int(p) for p in fixture.stdout.readline().split())
        json_type = [("Content-Type", "application/json")]
        body = b'{"name":"caf\xc3\xa9","n":42}'
        path = "/a%20b/%C3%BC/~x%2By%3Dz"  # "/a b/ü/~x+y=z" as an SDK serializes it
        good = {
            "GET execute-api, query": sign(port, PLAIN, "execute-api", "GET", "/prod/items?b=2&a=1&c=x%20y"),
            "GET execute-api, query from params (+ for a space)": sign(
                port, PLAIN, "execute-api", "GET", "/prod/items", params=[("b", "2"), ("a", "1"), ("c", "x y")]),
            "PUT execute-api, body, session token": sign(port, TOKENED, "execute-api", "PUT", "/prod/items/1", json_type, body),
            "POST execute-api, path needing encoding, x-amz-meta": sign(
                port, PLAIN, "execute-api", "POST", path, json_type + [("X-Amz-Meta-Foo", "bar  baz")], body),
            "PUT s3, unsigned payload, session token, path needing encoding": sign(
                port, TOKENED, "s3", "PUT", "/bucket" + path, [("Content-Type", "text/plain"), ("x-amz-meta-foo", "bar")],
                b"hello\n", unsigned=True),
            "GET s3, query, no token": sign(port, PLAIN, "s3", "GET", "/bucket?list-type=2&prefix=a%2Fb", unsigned=True),
            "PUT s3, signed payload": sign(port, PLAIN, "s3", "PUT", "/bucket/key", [("Content-Type", "text/plain")], b"hi"),
            "GET on the second port": sign(second_port, PLAIN, "execute-api", "GET", "/x"),
        }
        for name, (target, fields, sent) in good.items():
            method = name.split(" ")[0]
            the_port = second_port if "second port" in name else port
            status, document = send(the_port, method, target, fields, sent)
            ok = status == 200 and document["verified"] and not document["saw_client_authorization"]
            failures += not ok
            print(("ok  " if ok else "FAIL") + f" verifies: {name}" + ("" if ok else f": {status} {document}"))

        target, fields, sent = good["PUT execute-api, body, session token"]
        s3_target, s3_fields, s3_sent = good["PUT s3, unsigned payload, session token, path needing encoding"]
        get_target, get_fields, _ = good["GET execute-api, query"]
        stale = sign(port, PLAIN, "execute-api", "GET", "/x", at=datetime.datetime(2020, 1, 1, 0, 0, 0))
        fresh = sign(port, PLAIN, "execute-api", "GET", "/x")
        wrong_secret = sign(port, (PLAIN[0], "not-the-secret"), "execute-api", "GET", "/x")
        unknown_key = sign(port, ("AKIDUNKNOWN", PLAIN[1]), "execute-api", "GET", "/x")
        bad = {
            "the body changed": ("PUT", target, fields, sent.replace(b"42", b"43")),
            "a signed field changed": ("PUT", target, replace(fields, "Content-Type", "text/plain"), sent),
            "the session token is missing": ("PUT", target, [f for f in fields if f[0].lower() != "x-amz-security-token"], sent),
            "the session token is another": ("PUT", target, replace(fields, "X-Amz-Security-Token", "other"), sent),
            "the path changed": ("PUT", target + "2", fields, sent),
            "the query changed": ("GET", get_target.replace("a=1", "a=2"), get_fields, b""),
            "the query gained a pair": ("GET", get_target + "&d=4", get_fields, b""),
            "the method changed": ("POST", target, fields, sent),
            "the Host changed": ("PUT", target, replace(fields, "Host", f"localhost:{port}"), sent),
            "an x-amz-* field arrived unsigned": ("PUT", target, fields + [("X-Amz-Meta-Extra", "1")], sent),
            "a second Authorization arrived": ("PUT", target, fields + [("Authorization", "AWS4-HMAC-SHA256 CANARY")], sent),
            "no Authorization": ("PUT", target, [f for f in fields if f[0].lower() != "authorization"], sent),
            "X-Amz-Date is stale (a replayed signature)": ("GET", stale[0], stale[1], b""),
            "X-Amz-Date is not the signed one": ("GET", fresh[0], replace(fresh[1], "X-Amz-Date", "20200101T000000Z"), b""),
            "the secret key is wrong": ("GET", wrong_secret[0], wrong_secret[1], b""),
            "the access key id is unknown": ("GET", unknown_key[0], unknown_key[1], b""),
            "s3 path changed": ("PUT", s3_target.replace("%20", "+"), s3_fields, s3_sent),
            "s3 X-Amz-Content-Sha256 is not the body's hash": (
                "PUT", s3_target, replace(s3_fields, "X-Amz-Content-SHA256", hashlib.sha256(b"x").hexdigest()), s3_sent),
        }
        for name, (method, the_target, the_fields, the_body) in bad.items():
            status, document = send(port, method, the_target, the_fields, the_body)
            ok = status == 403 and document["verified"] is False and document["why"]
            failures += not ok
            why = document.get("why", "").split("\n")[0]
            print(("ok  " if ok else "FAIL") + f" refuses: {name}" + (f" ({why})" if ok else f": {status} {document}"))

        with open(log) as lines:
            records = [json.loads(line) for line in lines]
        ok = len(records) == len(good) + len(bad) and {r["port"] for r in records} == {port, second_port}
        failures += not ok
        print(("ok  " if ok else "FAIL") + f" logged {len(records)} requests of {len(good) + len(bad)}")
        print(f"botocore {botocore.__version__} ({sys.executable}): {failures} failure(s)")
    finally:
        fixture.kill()
        fixture.wait()
        os.unlink(log)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
