#!/usr/bin/env python3
"""The second parser of the differential check: Python's h11 (server side) reads each request of a
corpus and prints its verdict as one JSON object per line. Input: JSON lines {"name", "bytes": base64}
on stdin. Output: {"name", "verdict": accept|reject|incomplete, "method", "target", "version",
"headers": [[name, value], ...], "body": base64, "error"}. Test harness only; never shipped."""
import base64
import json
import sys

import h11


def verdict(raw: bytes) -> dict:
    connection = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
    connection.receive_data(raw)  # no end of input: a message cut short is "incomplete", as for the codec
    result = {"verdict": "incomplete"}
    body = b""
    try:
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA or isinstance(event, h11.ConnectionClosed):
                return result
            if isinstance(event, h11.Request):
                result.update(
                    method=event.method.decode("latin-1"),
                    target=event.target.decode("latin-1"),
                    version=event.http_version.decode("latin-1"),
                    headers=[[n.decode("latin-1"), v.decode("latin-1")] for n, v in event.headers.raw_items()],
                )
            elif isinstance(event, h11.Data):
                body += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                result["verdict"] = "accept"
                result["body"] = base64.b64encode(body).decode()
                return result
    except h11.RemoteProtocolError as error:
        return {"verdict": "reject", "error": str(error)}


for line in sys.stdin:
    item = json.loads(line)
    answer = verdict(base64.b64decode(item["bytes"]))
    answer["name"] = item["name"]
    print(json.dumps(answer), flush=True)
