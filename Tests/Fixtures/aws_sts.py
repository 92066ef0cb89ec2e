#!/usr/bin/env python3
"""A loopback AWS STS (query API over plain http on 127.0.0.1, port 0) for the credential chain's
tests (ProxyEngineTests/AWSCredentialChainFixtureTests). An independent reference: AssumeRole
signatures are recomputed with botocore's own SigV4 signer (sigv4_origin.verify, beside this file).

    aws_sts.py --log PATH [--source AKID SECRET TOKEN|-]... [--role ARN AKID SECRET TOKEN]...
               [--web-identity-token TOKEN] [--region REGION]

Prints its port on the first line of stdout, then serves until stdin closes (the test's end).

- POST / with `Action=AssumeRole`: the request must be SigV4-signed (service sts, the credential
  scope's region must be --region when given) by a --source credential or by credentials this STS
  answered earlier (a role chain); RoleArn must be a --role; RoleSessionName is required;
  Version must be 2011-06-15.
- POST / with `Action=AssumeRoleWithWebIdentity`: must carry no Authorization; WebIdentityToken
  must be --web-identity-token exactly; RoleArn a --role; RoleSessionName required.
- Either answers 200 with the role's credentials (AssumeRoleResponse / ...WithWebIdentityResponse,
  Expiration an hour from now), or 403 ErrorResponse (Code AccessDenied or InvalidIdentityToken,
  and a Message holding the canary CANARY-STS-MESSAGE, which must never reach the proxy's words).

Every request appends one JSON line to --log: {"action", "role_arn", "role_session_name",
"external_id", "duration_seconds", "signed_by", "region", "verified", "why"}.
"""

import argparse
import datetime
import http.server
import json
import os
import sys
import threading
from urllib.parse import parse_qs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sigv4_origin  # noqa: E402  (beside this file: botocore's verification)

log_lock = threading.Lock()


def make_handler(options, known):
    roles = {role[0]: tuple(role[1:]) for role in options.role}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def answer(self, status, body):
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/xml")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = True

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            fields = list(self.headers.items())
            params = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}
            verdict = {
                "action": params.get("Action"),
                "role_arn": params.get("RoleArn"),
                "role_session_name": params.get("RoleSessionName"),
                "external_id": params.get("ExternalId"),
                "duration_seconds": params.get("DurationSeconds"),
                "signed_by": None,
                "region": None,
                "verified": False,
                "why": None,
            }
            try:
                if params.get("Version") != "2011-06-15":
                    raise sigv4_origin.Rejected("Version is not 2011-06-15")
                if not self.headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded"):
                    raise sigv4_origin.Rejected("Content-Type is not a form")
                if not params.get("RoleSessionName"):
                    raise sigv4_origin.Rejected("no RoleSessionName")
                action = params.get("Action")
                if action == "AssumeRole":
                    with log_lock:
                        accepted = dict(known)
                    result = sigv4_origin.verify("POST", self.path, fields, body, accepted)
                    if result["service"] != "sts":
                        raise sigv4_origin.Rejected("signed for service " + result["service"])
                    if options.region and result["region"] != options.region:
                        raise sigv4_origin.Rejected("signed for region " + result["region"])
                    verdict["signed_by"] = result["access_key_id"]
                    verdict["region"] = result["region"]
                elif action == "AssumeRoleWithWebIdentity":
                    if self.headers.get("Authorization") is not None:
                        raise sigv4_origin.Rejected("AssumeRoleWithWebIdentity arrived signed")
                    if options.web_identity_token is None or params.get("WebIdentityToken") != options.web_identity_token:
                        raise sigv4_origin.Rejected("WebIdentityToken is not the token")
                else:
                    raise sigv4_origin.Rejected("unknown Action")
                if params.get("RoleArn") not in roles:
                    raise sigv4_origin.Rejected("unknown RoleArn")
            except sigv4_origin.Rejected as rejected:
                verdict["why"] = str(rejected)
                self.log(verdict)
                code = "InvalidIdentityToken" if params.get("Action") == "AssumeRoleWithWebIdentity" else "AccessDenied"
                self.answer(
                    403,
                    "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><Error><Type>Sender</Type>"
                    f"<Code>{code}</Code><Message>CANARY-STS-MESSAGE</Message></Error>"
                    "<RequestId>00000000-0000-0000-0000-000000000000</RequestId></ErrorResponse>",
                )
                return
            verdict["verified"] = True
            self.log(verdict)
            key_id, secret, token = roles[params["RoleArn"]]
            with log_lock:
                known[key_id] = (secret, token)
            expiration = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
            action = params["Action"]
            self.answer(
                200,
                f"<{action}Response xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\n"
                f"  <{action}Result>\n"
                "    <Credentials>\n"
                f"      <AccessKeyId>{key_id}</AccessKeyId>\n"
                f"      <SecretAccessKey>{secret}</SecretAccessKey>\n"
                f"      <SessionToken>{token}</SessionToken>\n"
                f"      <Expiration>{expiration}</Expiration>\n"
                "    </Credentials>\n"
                f"    <AssumedRoleUser><Arn>{params['RoleArn']}/s</Arn><AssumedRoleId>AROA:s</AssumedRoleId></AssumedRoleUser>\n"
                f"  </{action}Result>\n"
                "  <ResponseMetadata><RequestId>00000000-0000-0000-0000-000000000001</RequestId></ResponseMetadata>\n"
                f"</{action}Response>\n",
            )

        def log(self, verdict):
            with log_lock:
                with open(options.log, "a") as log:
                    log.write(json.dumps(verdict) + "\n")

    return Handler


def exit_on_stdin_close():
    sys.stdin.read()
    os._exit(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    parser.add_argument("--source", nargs=3, action="append", default=[])
    parser.add_argument("--role", nargs=4, action="append", default=[])
    parser.add_argument("--web-identity-token")
    parser.add_argument("--region")
    options = parser.parse_args()
    known = {key_id: (secret, None if token == "-" else token) for key_id, secret, token in options.source}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(options, known))
    print(server.server_address[1], flush=True)
    threading.Thread(target=exit_on_stdin_close, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
