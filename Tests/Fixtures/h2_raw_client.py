#!/usr/bin/env python3
"""A hostile HTTP/2 client for the engine tests: raw frames (hpack + hyperframe), no validation, so
it can send what a well-behaved library refuses to.

    h2_raw_client.py PLAN.json

PLAN: {"proxy_port": N, "timeout": 10, "wait_for_close": false,
       "actions": [{"headers": [["name", "value"], ...], "stream": 1, "end_stream": true},
                   {"data": "text", "stream": 1, "end_stream": false},
                   {"rst": 1, "code": 8},
                   {"raw": "hex bytes"}]}

It sends the preface and an empty SETTINGS, then the actions in order, then reads until every
stream it opened ended (or, with "wait_for_close", until the proxy closes the connection), or the
timeout. It prints one JSON object: {"streams": {"1": {"status": N, "body": "...", "reset": code}},
"goaway": {"code": N, "debug": "..."} | null, "closed": bool}.
"""
import json
import select
import socket
import sys
import time

from hpack import Decoder, Encoder
from hyperframe.frame import DataFrame, Frame, GoAwayFrame, HeadersFrame, RstStreamFrame, SettingsFrame

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def main():
    plan = json.load(open(sys.argv[1]))
    sock = socket.create_connection(("127.0.0.1", plan["proxy_port"]), timeout=plan.get("timeout", 10))
    encoder, decoder = Encoder(), Decoder()
    sock.sendall(PREFACE + SettingsFrame(0).serialize())
    streams, opened = {}, set()
    for action in plan.get("actions", []):
        if "headers" in action:
            frame = HeadersFrame(action["stream"])
            frame.data = encoder.encode([(n.encode("latin-1"), v.encode("latin-1")) for n, v in action["headers"]])
            frame.flags.add("END_HEADERS")
            if action.get("end_stream", True):
                frame.flags.add("END_STREAM")
            opened.add(action["stream"])
            sock.sendall(frame.serialize())
        elif "data" in action:
            frame = DataFrame(action["stream"], data=action["data"].encode("latin-1"))
            if action.get("end_stream"):
                frame.flags.add("END_STREAM")
            sock.sendall(frame.serialize())
        elif "rst" in action:
            sock.sendall(RstStreamFrame(action["rst"], error_code=action.get("code", 8)).serialize())
        elif "raw" in action:
            sock.sendall(bytes.fromhex(action["raw"]))

    goaway, closed, buffer = None, False, b""
    deadline = time.time() + plan.get("timeout", 10)
    ended = set()
    while time.time() < deadline and (plan.get("wait_for_close") or not opened <= ended):
        ready, _, _ = select.select([sock], [], [], max(0.0, deadline - time.time()))
        if not ready:
            break
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            closed = True
            break
        buffer += data
        while len(buffer) >= 9:
            frame, length = Frame.parse_frame_header(memoryview(buffer[:9]))
            if len(buffer) < 9 + length:
                break
            frame.parse_body(memoryview(buffer[9:9 + length]))
            buffer = buffer[9 + length:]
            entry = streams.setdefault(str(frame.stream_id), {"status": None, "body": "", "reset": None})
            if isinstance(frame, HeadersFrame):
                for name, value in decoder.decode(frame.data, raw=True):
                    if name == b":status":
                        entry["status"] = int(value)
            elif isinstance(frame, DataFrame):
                entry["body"] += bytes(frame.data).decode("latin-1")
            elif isinstance(frame, RstStreamFrame):
                entry["reset"] = frame.error_code
                ended.add(frame.stream_id)
            elif isinstance(frame, GoAwayFrame):
                goaway = {"code": frame.error_code, "debug": bytes(frame.additional_data).decode("latin-1")}
            elif isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
                sock.sendall(SettingsFrame(0, flags=["ACK"]).serialize())
            if isinstance(frame, (HeadersFrame, DataFrame)) and "END_STREAM" in frame.flags:
                ended.add(frame.stream_id)
            if frame.stream_id == 0:
                streams.pop("0", None)
    print(json.dumps({"streams": streams, "goaway": goaway, "closed": closed}))


if __name__ == "__main__":
    main()
