#!/usr/bin/env python3
"""An HTTP/2 client for the engine tests, built on the `h2` library (an independent implementation).

    h2_client.py PLAN.json

PLAN: {"proxy_port": N,
       "tunnel": null | {"host": "localhost", "port": N, "ca": "/path/ca.pem", "connect_headers": {...}},
       "streams": [{"method": "GET", "scheme": "http", "authority": "127.0.0.1:N", "path": "/x",
                    "headers": [["name", "value"]], "body": "text" | null, "body_bytes": N (a body of N bytes, byte i = i % 251),
                    "reset_after_headers": false,
                    "reset_after_all_heads": false (reset once every stream's HEADERS is queued, same write)}],
       "flood": null | {"kind": "rapid_reset" | "continuation" | "ping" | "settings" | "empty_data", "count": N},
       "timeout": 10}

Without "tunnel" the connection is h2c with prior knowledge to the proxy's plain port; with it, the
script sends CONNECT host:port, then TLS with ALPN h2 (verifying the proxy's CA). It prints one JSON
object: {"alpn": ..., "streams": [{"id", "status", "headers", "body", "reset", "trailers"}],
"goaway": {"code": N, "last_stream": N} | null, "closed": bool, "ended": [stream ids in the order they ended]}.
"""
import json
import socket
import ssl
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings


def open_connection(plan):
    sock = socket.create_connection(("127.0.0.1", plan["proxy_port"]), timeout=plan.get("timeout", 10))
    tunnel = plan.get("tunnel")
    if not tunnel:
        return sock, None
    target = f'{tunnel["host"]}:{tunnel["port"]}'
    head = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
    for name, value in tunnel.get("connect_headers", {}).items():
        head += f"{name}: {value}\r\n"
    sock.sendall((head + "\r\n").encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(4096)
        if not chunk:
            raise SystemExit(json.dumps({"connect": "closed", "answer": answer.decode("latin-1")}))
        answer += chunk
    status_line = answer.split(b"\r\n", 1)[0].decode("latin-1")
    if " 200 " not in status_line + " ":
        print(json.dumps({"connect": status_line}))
        sys.exit(0)
    context = ssl.create_default_context(cafile=tunnel["ca"])
    context.set_alpn_protocols(tunnel.get("alpn", ["h2", "http/1.1"]))
    wrapped = context.wrap_socket(sock, server_hostname=tunnel["host"])
    return wrapped, wrapped.selected_alpn_protocol()


def raw_frame(kind, flags, stream, payload):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def main():
    plan = json.load(open(sys.argv[1]))
    sock, alpn = open_connection(plan)
    if plan.get("tunnel") and alpn != "h2":
        print(json.dumps({"alpn": alpn, "streams": [], "goaway": None, "closed": False}))
        return
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())

    results = {}
    order = []
    uploads = {}  # stream id -> bytes still to send, as flow control allows

    def send_uploads():
        for stream_id in list(uploads):
            data = uploads[stream_id]
            while data:
                window = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
                if window <= 0:
                    break
                conn.send_data(stream_id, data[:window])
                data = data[window:]
            uploads[stream_id] = data
            if not data:
                conn.end_stream(stream_id)
                del uploads[stream_id]
    for spec in plan.get("streams", []):
        stream_id = conn.get_next_available_stream_id()
        headers = [(":method", spec.get("method", "GET")), (":scheme", spec.get("scheme", "https")),
                   (":authority", spec["authority"]), (":path", spec.get("path", "/"))]
        headers += [tuple(pair) for pair in spec.get("headers", [])]
        body = spec.get("body")
        if spec.get("body_bytes") is not None:
            # A large body made here rather than carried in the plan: byte i is i % 251.
            count = spec["body_bytes"]
            body = (bytes(range(251)) * (count // 251 + 1))[:count].decode("latin-1")
        conn.send_headers(stream_id, headers, end_stream=body is None)
        if spec.get("reset_after_headers"):
            conn.reset_stream(stream_id)  # its body, if any, is never sent
        elif body is not None:
            uploads[stream_id] = body.encode("latin-1") if spec.get("body_bytes") is not None else body.encode()
        results[stream_id] = {"id": stream_id, "status": None, "headers": {}, "body": "", "reset": None, "trailers": {}}
        order.append(stream_id)
    for stream_id, spec in zip(order, plan.get("streams", [])):
        if spec.get("reset_after_all_heads"):
            conn.reset_stream(stream_id)
            uploads.pop(stream_id, None)
    send_uploads()
    sock.sendall(conn.data_to_send())

    flood = plan.get("flood")
    if flood:
        kind, count = flood["kind"], flood["count"]
        try:
            if kind == "rapid_reset":
                for _ in range(count):
                    stream_id = conn.get_next_available_stream_id()
                    conn.send_headers(stream_id, [(":method", "GET"), (":scheme", flood.get("scheme", "https")),
                                                  (":authority", flood["authority"]), (":path", "/flood")])
                    conn.reset_stream(stream_id)
                    sock.sendall(conn.data_to_send())
            elif kind == "ping":
                for i in range(count):
                    sock.sendall(raw_frame(0x6, 0, 0, i.to_bytes(8, "big")))
            elif kind == "settings":
                for _ in range(count):
                    sock.sendall(raw_frame(0x4, 0, 0, b""))
            elif kind == "empty_data":
                stream_id = conn.get_next_available_stream_id()
                conn.send_headers(stream_id, [(":method", "POST"), (":scheme", flood.get("scheme", "https")),
                                              (":authority", flood["authority"]), (":path", "/flood")])
                sock.sendall(conn.data_to_send())
                for _ in range(count):
                    sock.sendall(raw_frame(0x0, 0, stream_id, b""))
            elif kind == "continuation":
                # A HEADERS frame without END_HEADERS, then CONTINUATION frames that never end the block.
                stream_id = conn.get_next_available_stream_id()
                block = conn.encoder.encode([(":method", "GET"), (":scheme", flood.get("scheme", "https")),
                                             (":authority", flood["authority"]), (":path", "/flood")])
                sock.sendall(raw_frame(0x1, 0x1, stream_id, block))
                filler = conn.encoder.encode([("x-filler", "a" * 100)])
                for _ in range(count):
                    sock.sendall(raw_frame(0x9, 0x0, stream_id, filler))
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            pass

    goaway = None
    closed = False
    ended = []
    deadline = time.time() + plan.get("timeout", 10)
    # A stream the client reset itself gets no answer to wait for.
    pending = set(i for i, spec in zip(order, plan.get("streams", []))
                  if not spec.get("reset_after_headers") and not spec.get("reset_after_all_heads"))
    while time.time() < deadline and (pending or (flood and goaway is None and not closed)):
        try:
            data = sock.recv(65536)
        except socket.timeout:
            break
        except (ConnectionResetError, ssl.SSLError, OSError):
            closed = True
            break
        if not data:
            closed = True
            break
        try:
            events = conn.receive_data(data)
        except h2.exceptions.ProtocolError as error:
            results.setdefault("protocol_error", str(error))
            break
        for event in events:
            if isinstance(event, h2.events.ResponseReceived):
                entry = results.get(event.stream_id)
                if entry is not None:
                    for name, value in event.headers:
                        if name == ":status":
                            entry["status"] = int(value)
                        else:
                            entry["headers"][name] = value
            elif isinstance(event, h2.events.TrailersReceived):
                entry = results.get(event.stream_id)
                if entry is not None:
                    entry["trailers"] = dict(event.headers)
            elif isinstance(event, h2.events.DataReceived):
                entry = results.get(event.stream_id)
                if entry is not None:
                    entry["body"] += event.data.decode("latin-1")
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                pending.discard(event.stream_id)
                ended.append(event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                entry = results.get(event.stream_id)
                if entry is not None:
                    entry["reset"] = int(event.error_code)
                pending.discard(event.stream_id)
                ended.append(event.stream_id)
            elif isinstance(event, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
                send_uploads()
            elif isinstance(event, h2.events.ConnectionTerminated):
                goaway = {"code": int(event.error_code), "last_stream": event.last_stream_id}
        try:
            outgoing = conn.data_to_send()
            if outgoing:
                sock.sendall(outgoing)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            closed = True
            break
    print(json.dumps({"alpn": alpn, "streams": [results[i] for i in order], "goaway": goaway, "closed": closed, "ended": ended,
                      "protocol_error": results.get("protocol_error")}))


if __name__ == "__main__":
    main()
