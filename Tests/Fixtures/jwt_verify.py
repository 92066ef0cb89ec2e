#!/usr/bin/env python3
"""Verifies JWTs the proxy signed with an independent implementation (pyjwt over cryptography), for
Tests/CredentialSigningTests.

    jwt_verify.py < requests.jsonl > verdicts.jsonl

Each input line is {"jwt": "...", "public_key": "PATH (PEM)", "alg": "RS256"|"ES256"}; each output
line is {"ok": true, "header": {...}, "claims": {...}, "signature_length": N} or {"ok": false,
"why": "..."}. The signature is checked with the public key and exactly the expected algorithm
(pyjwt refuses any other, and "none"); claims are decoded but their meaning is the test's to judge
(exp and iat are not checked against this machine's clock: tests pass fixed times).
"""

import base64
import json
import sys

import jwt
from cryptography.hazmat.primitives import serialization


def b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def verify(request):
    with open(request["public_key"], "rb") as f:
        public_key = serialization.load_pem_public_key(f.read())
    token = request["jwt"]
    parts = token.split(".")
    if len(parts) != 3:
        return {"ok": False, "why": f"{len(parts)} parts"}
    if any("=" in p or "+" in p or "/" in p for p in parts):
        return {"ok": False, "why": "not unpadded base64url"}
    try:
        claims = jwt.decode(
            token,
            public_key,
            algorithms=[request["alg"]],
            options={"verify_exp": False, "verify_iat": False, "verify_nbf": False, "verify_aud": False},
        )
    except jwt.PyJWTError as error:
        return {"ok": False, "why": f"{type(error).__name__}: {error}"}
    header = json.loads(b64url_decode(parts[0]))
    return {"ok": True, "header": header, "claims": claims, "signature_length": len(b64url_decode(parts[2]))}


def main():
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(verify(json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
