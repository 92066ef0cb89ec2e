"""Signs requests with botocore's own signer: the reference of AWSSigV4Tests/BotocoreTests.

Reads {"cases": [...]} as JSON on stdin, writes {"botocore": VERSION, "python": PATH,
"results": [...]} on stdout. Each case is a request as it goes on the wire (path and query as
sent, headers, body as hex) plus credentials, region, service and a fixed time. The signer is
botocore.auth.S3SigV4Auth for service "s3", else SigV4Auth, driven through add_auth() (the path
botocore itself takes) with the clock frozen at the case's time.

"mode" says which headers botocore is given: "all" gives it every header (botocore signs all but
its SIGNED_HEADERS_BLACKLIST); "aws_required" gives it only the ones scopeproxy's default signs
(x-amz-*, content-type, content-md5: the rule is restated here, not imported from the Swift side).
"""

import datetime
import json
import os
import sys
import types
from urllib.parse import parse_qsl

import botocore
import botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Fixtures"))
from botocore_clock import freeze_clock  # noqa: E402 (Tests/Fixtures/botocore_clock.py)


def signed_by_default(name):
    lower = name.lower()
    return lower.startswith("x-amz-") or lower in ("content-type", "content-md5")


def sign(case):
    moment = datetime.datetime.strptime(case["time"], "%Y%m%dT%H%M%SZ")
    freeze_clock(moment)
    headers = [(n, v) for n, v in case["headers"] if case["mode"] == "all" or signed_by_default(n)]
    request = AWSRequest(
        method=case["method"],
        url="https://" + case["authority"] + case["path"],
        data=bytes.fromhex(case["body_hex"]),
        # The wire query decoded as a form ("+" is a space); botocore re-encodes the pairs.
        params=parse_qsl(case["query"], keep_blank_values=True),
    )
    for name, value in headers:
        request.headers[name] = value
    if case["unsigned_payload"]:
        request.context["client_config"] = types.SimpleNamespace(s3={"payload_signing_enabled": False})
    credentials = Credentials(case["access_key"], case["secret_key"], case.get("token"))
    signer_class = botocore.auth.S3SigV4Auth if case["service"] == "s3" else botocore.auth.SigV4Auth
    signer = signer_class(credentials, case["service"], case["region"])
    signer.add_auth(request)
    wanted = ("Authorization", "X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-SHA256")
    return {"name": case["name"], "mode": case["mode"], "headers": {n.lower(): request.headers[n] for n in wanted if n in request.headers}}


def main():
    cases = json.load(sys.stdin)["cases"]
    results = [sign(case) for case in cases]
    json.dump({"botocore": botocore.__version__, "python": sys.executable, "results": results}, sys.stdout)


if __name__ == "__main__":
    main()
