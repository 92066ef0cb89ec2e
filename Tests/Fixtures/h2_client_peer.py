"""An HTTP/2 client built on python-h2 (a second implementation beside nghttp2), for
H2SessionTests: h2c with prior knowledge to 127.0.0.1:PORT, three streams one after the other,
then a summary as one JSON line on stdout.

1. GET /hello (END_STREAM on HEADERS).
2. POST /upload: 300 000 bytes in padded DATA frames, sent only as the window allows, then
   request trailers (x-checksum) with END_STREAM.
3. GET /upper with an uppercase field name (python-h2's own checks turned off): the server must
   reset it.
"""

import json
import socket
import sys

import h2.config
import h2.connection
import h2.events

PAD = 100
port = int(sys.argv[1])
sock = socket.create_connection(("127.0.0.1", port), timeout=15)
config = h2.config.H2Configuration(
    client_side=True, header_encoding="utf-8", validate_outbound_headers=False, normalize_outbound_headers=False
)
conn = h2.connection.H2Connection(config)
conn.initiate_connection()
sock.sendall(conn.data_to_send())
streams = {}


def flush():
    out = conn.data_to_send()
    if out:
        sock.sendall(out)


def request(path, method="GET", extra=(), end=True):
    sid = conn.get_next_available_stream_id()
    fields = [(":method", method), (":scheme", "http"), (":authority", "origin.test"), (":path", path)]
    conn.send_headers(sid, fields + list(extra), end_stream=end)
    flush()
    streams[sid] = {"status": None, "body": b"", "trailers": {}, "reset": None, "ended": False}
    return sid


def pump():
    data = sock.recv(65536)
    if not data:
        raise EOFError("server closed")
    for event in conn.receive_data(data):
        stream = streams.get(getattr(event, "stream_id", None))
        if isinstance(event, h2.events.ResponseReceived):
            stream["status"] = dict(event.headers)[":status"]
        elif isinstance(event, h2.events.DataReceived):
            stream["body"] += event.data
            conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.TrailersReceived):
            stream["trailers"] = dict(event.headers)
        elif isinstance(event, h2.events.StreamEnded):
            stream["ended"] = True
        elif isinstance(event, h2.events.StreamReset):
            stream["reset"] = int(event.error_code)
    flush()


def finish(sid):
    while not (streams[sid]["ended"] or streams[sid]["reset"] is not None):
        pump()
    return streams[sid]


get = finish(request("/hello"))

post = request("/upload", "POST", [("content-type", "application/octet-stream")], end=False)
body = bytes(i % 251 for i in range(300_000))
sent = 0
while sent < len(body):
    room = min(conn.local_flow_control_window(post), conn.max_outbound_frame_size) - PAD - 1
    if room <= 0:
        pump()
        continue
    chunk = body[sent : sent + room]
    conn.send_data(post, chunk, pad_length=PAD)
    flush()
    sent += len(chunk)
conn.send_headers(post, [("x-checksum", str(sum(body)))], end_stream=True)
flush()
upload = finish(post)

upper = finish(request("/upper", extra=[("X-Upper", "1")]))

conn.close_connection()
flush()
sock.close()


def summary(stream):
    return {
        "status": stream["status"],
        "body": stream["body"].decode("latin-1"),
        "trailers": stream["trailers"],
        "reset": stream["reset"],
    }


print(json.dumps({"get": summary(get), "upload": summary(upload), "upper": summary(upper)}))
