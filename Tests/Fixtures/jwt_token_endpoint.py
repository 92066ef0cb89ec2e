#!/usr/bin/env python3
"""A loopback OAuth 2.0 token endpoint that verifies JWTs as an authorization server does (RFC 7523),
with pyjwt as the independent verifier. Plain http on 127.0.0.1, port 0.

    jwt_token_endpoint.py --public-key PEM --log PATH [--issuer ISS] [--subject SUB]
                          [--client-id ID] [--audience AUD] [--kid KID] [--canary PREFIX]
                          [--expires-in N] [--max-lifetime S]

Prints its port as the first line on stdout, then serves until its stdin closes (or it is killed).

POST (any path) with an application/x-www-form-urlencoded body:
- grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer (RFC 7523 §2.1): `assertion` must verify
  (below) with iss = --issuer and sub = --subject (default: the issuer); a `scope` form parameter is
  recorded, as is a `scope` claim.
- grant_type=client_credentials (RFC 6749 §4.4): the client must authenticate with a client assertion.
- Either grant: when client_assertion_type=urn:ietf:params:oauth:client-assertion-type:jwt-bearer and
  client_assertion are present (RFC 7523 §2.2), the assertion must verify with iss = sub = --client-id,
  and a client_id form parameter, when present, must be --client-id too (RFC 7521 §4.2).

A JWT verifies when: its signature checks with the public key, and its alg is the key's (RS256 for
RSA, ES256 for EC; pyjwt refuses any other, "none" included); a --kid, when given, is its header's
`kid`; iss, sub, aud, iat, exp and jti are all present; aud is --audience (default: the URL the
request was sent to, http://127.0.0.1:PORT/PATH, as RFC 7523 §3 and OIDC §9 want for a token
endpoint), a string or an array holding it; iat is not in the future (30 s leeway), exp is in the
future, exp - iat is at most --max-lifetime (default 3600: Google's cap); jti was never seen before
(in either role).

Answers 200 {"access_token": "PREFIX-N", "token_type": "Bearer", "expires_in": N} or, when anything
fails, 400 {"error": "invalid_grant"} (invalid_client when only the client assertion failed, 400
unsupported_grant_type for another grant). Every request appends one JSON line to --log:
  {"path", "grant_type", "verified", "why", "assertion": {"alg", "kid", "claims"} | null,
   "client_assertion": {...} | null, "client_id": form value | null, "scope": form value | null,
   "issued": N | null}
Claims are logged (they are test values); the JWTs themselves and issued tokens are not.
"""

import argparse
import http.server
import json
import os
import sys
import threading
import time
from urllib.parse import parse_qsl

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
LEEWAY = 30

parser = argparse.ArgumentParser()
parser.add_argument("--public-key", required=True)
parser.add_argument("--log", required=True)
parser.add_argument("--issuer")
parser.add_argument("--subject")
parser.add_argument("--client-id")
parser.add_argument("--audience")
parser.add_argument("--kid")
parser.add_argument("--canary", default="CANARY-jwt-at")
parser.add_argument("--expires-in", type=int, default=3600)
parser.add_argument("--max-lifetime", type=int, default=3600)
args = parser.parse_args()

with open(args.public_key, "rb") as f:
    PUBLIC_KEY = serialization.load_pem_public_key(f.read())
if isinstance(PUBLIC_KEY, rsa.RSAPublicKey):
    ALGORITHMS = ["RS256"]
elif isinstance(PUBLIC_KEY, ec.EllipticCurvePublicKey):
    ALGORITHMS = ["ES256"]
else:
    sys.exit("the public key is neither RSA nor EC")

lock = threading.Lock()
state = {"issued": 0, "jtis": set()}


class Refused(Exception):
    def __init__(self, why, error="invalid_grant"):
        super().__init__(why)
        self.error = error


def verify(token, audience, issuer, subject, role):
    """Returns {"alg", "kid", "claims"} or raises Refused."""
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(
            token,
            PUBLIC_KEY,
            algorithms=ALGORITHMS,
            audience=audience,
            options={"require": ["iss", "sub", "aud", "iat", "exp", "jti"]},
            leeway=LEEWAY,
        )
    except jwt.PyJWTError as error:
        raise Refused(f"{role}: {type(error).__name__}: {error}")
    now = time.time()
    if args.kid is not None and header.get("kid") != args.kid:
        raise Refused(f"{role}: kid is not {args.kid}")
    if issuer is not None and claims["iss"] != issuer:
        raise Refused(f"{role}: iss is not {issuer}")
    if subject is not None and claims["sub"] != subject:
        raise Refused(f"{role}: sub is not {subject}")
    if not isinstance(claims["iat"], int) or not isinstance(claims["exp"], int):
        raise Refused(f"{role}: iat and exp must be integers")
    if claims["iat"] > now + LEEWAY:
        raise Refused(f"{role}: iat is in the future")
    if claims["exp"] - claims["iat"] > args.max_lifetime:
        raise Refused(f"{role}: exp - iat is more than {args.max_lifetime} s")
    if not isinstance(claims["jti"], str) or not claims["jti"]:
        raise Refused(f"{role}: jti is not a non-empty string")
    with lock:
        if claims["jti"] in state["jtis"]:
            raise Refused(f"{role}: jti reused")
        state["jtis"].add(claims["jti"])
    return {"alg": header.get("alg"), "kid": header.get("kid"), "claims": claims}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0") or "0")
        body = self.rfile.read(length).decode("utf-8", "replace") if length > 0 else ""
        pairs = parse_qsl(body, keep_blank_values=True)
        form = {}
        duplicated = set()
        for name, value in pairs:
            if name in form:
                duplicated.add(name)
            form[name] = value
        audience = args.audience or f"http://127.0.0.1:{self.server.server_address[1]}{self.path}"
        entry = {
            "path": self.path, "grant_type": form.get("grant_type"), "verified": False, "why": None, "assertion": None,
            "client_assertion": None, "client_id": form.get("client_id"), "scope": form.get("scope"), "issued": None,
            "content_type": self.headers.get("Content-Type"),
        }
        try:
            if duplicated:
                # RFC 6749 §3.2: "Request and response parameters MUST NOT be included more than once."
                raise Refused("repeated parameters: " + ",".join(sorted(duplicated)), "invalid_request")
            grant = form.get("grant_type")
            if grant not in (JWT_BEARER, "client_credentials"):
                raise Refused("unsupported grant_type", "unsupported_grant_type")
            has_client_assertion = "client_assertion" in form or "client_assertion_type" in form
            if has_client_assertion:
                if form.get("client_assertion_type") != CLIENT_ASSERTION_TYPE:
                    raise Refused("client_assertion_type is not jwt-bearer", "invalid_client")
                if form.get("client_id") is not None and form["client_id"] != args.client_id:
                    raise Refused("client_id is not the assertion's client", "invalid_client")
                try:
                    entry["client_assertion"] = verify(
                        form.get("client_assertion", ""), audience, args.client_id, args.client_id, "client_assertion")
                except Refused as refused:
                    raise Refused(str(refused), "invalid_client")
            elif grant == "client_credentials":
                raise Refused("client_credentials without a client assertion", "invalid_client")
            if grant == JWT_BEARER:
                if "assertion" not in form:
                    raise Refused("no assertion", "invalid_request")
                entry["assertion"] = verify(
                    form["assertion"], audience, args.issuer, args.subject or args.issuer, "assertion")
            entry["verified"] = True
        except Refused as refused:
            entry["why"] = str(refused)
            self.log_entry(entry)
            return self.answer(400, {"error": refused.error})
        with lock:
            state["issued"] += 1
            n = state["issued"]
        entry["issued"] = n
        self.log_entry(entry)
        self.answer(200, {"access_token": f"{args.canary}-{n}", "token_type": "Bearer", "expires_in": args.expires_in})

    def log_entry(self, entry):
        with lock:
            with open(args.log, "a") as f:
                f.write(json.dumps(entry) + "\n")

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
