#!/usr/bin/env python3
"""An HTTP/2 client that asks for large bodies, grants huge windows, then stops reading its socket
until told to go on: the memory tests' slow reader (the `h2` library).

    h2_paused_reader.py PLAN.json

PLAN: {"proxy_port": N, "tunnel": null | (as h2_client.py), "scheme": "http", "authority": "127.0.0.1:N",
       "paths": ["/bytes/8388608", ...], "resume_file": "/path", "timeout": 120}

It sends its SETTINGS (stream window 2^31-1), a connection WINDOW_UPDATE to 2^31-1 and every
request, then prints "paused" and reads nothing until `resume_file` exists. Then it reads every
response to its end and prints one JSON object: {"streams": [{"status", "bytes", "sha256"}]} in the
order of `paths`.
"""
import hashlib
import json
import os
import socket
import ssl
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.settings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h2_client import open_connection  # noqa: E402

HUGE = 2**31 - 1


def main():
    plan = json.load(open(sys.argv[1]))
    sock, alpn = open_connection(plan)
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.local_settings = h2.settings.Settings(client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: HUGE})
    conn.initiate_connection()
    conn.increment_flow_control_window(HUGE - 65535)
    order = []
    results = {}
    for path in plan["paths"]:
        stream_id = conn.get_next_available_stream_id()
        conn.send_headers(stream_id, [(":method", "GET"), (":scheme", plan.get("scheme", "http")),
                                      (":authority", plan["authority"]), (":path", path)], end_stream=True)
        order.append(stream_id)
        results[stream_id] = {"status": None, "bytes": 0, "digest": hashlib.sha256()}
    sock.sendall(conn.data_to_send())
    print("paused", flush=True)

    deadline = time.time() + plan.get("timeout", 120)
    while not os.path.exists(plan["resume_file"]) and time.time() < deadline:
        time.sleep(0.05)

    pending = set(order)
    sock.settimeout(max(1, deadline - time.time()))
    while pending and time.time() < deadline:
        try:
            data = sock.recv(1 << 20)
        except (socket.timeout, OSError, ssl.SSLError):
            break
        if not data:
            break
        for event in conn.receive_data(data):
            entry = results.get(getattr(event, "stream_id", None))
            if isinstance(event, h2.events.ResponseReceived) and entry is not None:
                entry["status"] = int(dict(event.headers).get(":status", "0"))
            elif isinstance(event, h2.events.DataReceived) and entry is not None:
                entry["bytes"] += len(event.data)
                entry["digest"].update(event.data)
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                pending.discard(event.stream_id)
        outgoing = conn.data_to_send()
        if outgoing:
            sock.sendall(outgoing)
    print(json.dumps({"alpn": alpn, "streams": [
        {"status": results[i]["status"], "bytes": results[i]["bytes"], "sha256": results[i]["digest"].hexdigest()} for i in order]}))


if __name__ == "__main__":
    main()
