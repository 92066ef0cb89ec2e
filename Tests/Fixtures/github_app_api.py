#!/usr/bin/env python3
"""A loopback stand-in for GitHub's REST API as a GitHub App meets it: the installation token
endpoint, and a scoped API that says whether the last token it issued came. Plain http on 127.0.0.1,
port 0.

    github_app_api.py --public-key PEM --app-id ID --log PATH [--prefix /api/v3]
                      [--installation ID] [--canary PREFIX] [--lifetime SECONDS] [--control PATH]

Prints its port as the first line on stdout, then serves until its stdin closes (or it is killed).

POST {prefix}/app/installations/{id}/access_tokens: the `Authorization: Bearer JWT` is verified with
pyjwt, RS256 only, against the app's public key (GitHub's rules, docs.github.com "Generating a JSON
Web Token (JWT) for a GitHub App"): `iss` equals --app-id (a number or a string, compared as text),
`iat` is not in the future (GitHub: "a time in the past"; same machine, so no leeway), `exp` is in the
future, and `exp - iat` is at most 660 s (GitHub's 10 minutes, plus a minute of drift). When --installation is given, another
installation ID is 404. A verified call is answered 201 {"token": "PREFIX-N", "expires_at": RFC 3339
now + lifetime, "permissions": ..., "repository_selection": ...}; a refused one 401 {"message":
"A JSON web token could not be decoded"} (GitHub's words). The body's permissions and repositories are
recorded.

--control PATH (optional): a JSON file read on every token request; {"status": N} answers N with a
GitHub-like error body, {"malformed": true} answers 201 with a body that is not a token response,
{"lifetime": N} overrides --lifetime.

GET /repos/... (any path under /repos/): the scoped API. Answers 200 {"authorized": bool, "scheme":
"Bearer"|"token"|null, "token_number": N|null}: authorized when `Authorization: Bearer T` or `token T`
carries the token issued last (token_number: which one it was, when it is any token issued). A value
it did not issue is never echoed.

Every request appends one JSON line to --log:
  {"kind": "access_tokens", "path", "installation", "verified", "why", "alg", "claims": {iss, iat,
   exp}, "permissions", "repositories", "body_valid", "accept", "api_version", "user_agent",
   "content_type", "issued": N|null, "time"}
  {"kind": "api", "method", "path", "authorized", "scheme", "token_number", "authorization_count"}
  {"kind": "other", "method", "path"}
"""

import argparse
import datetime
import http.server
import json
import os
import re
import sys
import threading
import time

import jwt
from cryptography.hazmat.primitives import serialization

parser = argparse.ArgumentParser()
parser.add_argument("--public-key", required=True)
parser.add_argument("--app-id", required=True)
parser.add_argument("--log", required=True)
parser.add_argument("--prefix", default="")
parser.add_argument("--installation")
parser.add_argument("--canary", default="CANARY-ghs")
parser.add_argument("--lifetime", type=int, default=3600)
parser.add_argument("--control")
args = parser.parse_args()

with open(args.public_key, "rb") as f:
    PUBLIC_KEY = serialization.load_pem_public_key(f.read())
PREFIX = args.prefix.rstrip("/")
TOKEN_PATH = re.compile("^" + re.escape(PREFIX) + r"/app/installations/([^/?]+)/access_tokens$")
MAX_LIFETIME = 660

lock = threading.Lock()
state = {"issued": []}


def log(entry):
    entry["time"] = time.time()
    with lock:
        with open(args.log, "a") as f:
            f.write(json.dumps(entry) + "\n")


def control():
    if not args.control or not os.path.exists(args.control):
        return {}
    with open(args.control) as f:
        return json.load(f)


def verify_jwt(authorization):
    """Returns (alg, claims) or raises ValueError(why)."""
    if not authorization or not authorization.startswith("Bearer "):
        raise ValueError("no Authorization: Bearer")
    token = authorization[len("Bearer "):]
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(
            token,
            PUBLIC_KEY,
            algorithms=["RS256"],
            options={"require": ["iat", "exp", "iss"], "verify_exp": True, "verify_iat": True},
        )
    except jwt.PyJWTError as error:
        raise ValueError(f"{type(error).__name__}: {error}")
    now = time.time()
    if str(claims["iss"]) != args.app_id:
        raise ValueError("iss is not the app id")
    if not isinstance(claims["iat"], int) or not isinstance(claims["exp"], int):
        raise ValueError("iat and exp must be integers")
    if claims["iat"] > now:
        raise ValueError("iat is in the future")
    if claims["exp"] <= now:
        raise ValueError("exp has passed")
    if claims["exp"] - claims["iat"] > MAX_LIFETIME:
        raise ValueError("exp - iat is more than 10 minutes")
    return header.get("alg"), {k: claims[k] for k in ("iss", "iat", "exp")}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def read_body(self):
        length = int(self.headers.get("Content-Length", "0") or "0")
        return self.rfile.read(length) if length > 0 else b""

    def answer(self, status, payload):
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        body = self.read_body()
        match = TOKEN_PATH.match(self.path)
        if not match:
            log({"kind": "other", "method": "POST", "path": self.path})
            return self.answer(404, {"message": "Not Found"})
        installation = match.group(1)
        entry = {
            "kind": "access_tokens", "path": self.path, "installation": installation, "verified": False, "why": None,
            "alg": None, "claims": None, "permissions": None, "repositories": None, "body_valid": True,
            "accept": self.headers.get("Accept"), "api_version": self.headers.get("X-GitHub-Api-Version"),
            "user_agent": self.headers.get("User-Agent"), "content_type": self.headers.get("Content-Type"), "issued": None,
        }
        try:
            document = json.loads(body) if body else {}
            if not isinstance(document, dict):
                raise ValueError
            entry["permissions"] = document.get("permissions")
            entry["repositories"] = document.get("repositories")
        except ValueError:
            entry["body_valid"] = False
        authorizations = self.headers.get_all("Authorization") or []
        try:
            if len(authorizations) != 1:
                raise ValueError(f"{len(authorizations)} Authorization fields")
            entry["alg"], entry["claims"] = verify_jwt(authorizations[0])
            entry["verified"] = True
        except ValueError as error:
            entry["why"] = str(error)
        if not entry["verified"]:
            log(entry)
            return self.answer(401, {"message": "A JSON web token could not be decoded"})
        if args.installation is not None and installation != args.installation:
            entry["why"] = "no such installation"
            log(entry)
            return self.answer(404, {"message": "Not Found"})
        if not entry["body_valid"]:
            entry["why"] = "body is not a JSON object"
            log(entry)
            return self.answer(400, {"message": "Problems parsing JSON"})
        settings = control()
        if "status" in settings:
            entry["why"] = "control: status"
            log(entry)
            return self.answer(int(settings["status"]), {"message": "controlled failure"})
        if settings.get("malformed"):
            entry["why"] = "control: malformed"
            log(entry)
            return self.answer(201, b'{"token": 42}')
        lifetime = int(settings.get("lifetime", args.lifetime))
        with lock:
            n = len(state["issued"]) + 1
            token = f"{args.canary}-{n}"
            state["issued"].append(token)
        entry["issued"] = n
        log(entry)
        expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=lifetime)
        self.answer(201, {
            "token": token,
            "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "permissions": entry["permissions"] or {"contents": "read", "metadata": "read"},
            "repository_selection": "selected" if entry["repositories"] else "all",
        })

    def do_GET(self):
        if not self.path.startswith("/repos/"):
            log({"kind": "other", "method": "GET", "path": self.path})
            return self.answer(404, {"message": "Not Found"})
        authorizations = self.headers.get_all("Authorization") or []
        scheme, number, authorized = None, None, False
        if len(authorizations) == 1:
            value = authorizations[0]
            for candidate in ("Bearer ", "token "):
                if value.startswith(candidate):
                    with lock:
                        issued = list(state["issued"])
                    presented = value[len(candidate):]
                    if presented in issued:
                        scheme = candidate.strip()
                        number = issued.index(presented) + 1
                        authorized = number == len(issued)
        log({
            "kind": "api", "method": "GET", "path": self.path, "authorized": authorized, "scheme": scheme,
            "token_number": number, "authorization_count": len(authorizations),
        })
        self.answer(200, {"authorized": authorized, "scheme": scheme, "token_number": number})

    def log_message(self, *_):
        pass


def exit_when_stdin_closes():
    sys.stdin.buffer.read()
    os._exit(0)


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
threading.Thread(target=exit_when_stdin_closes, daemon=True).start()
print(server.server_address[1], flush=True)
server.serve_forever()
