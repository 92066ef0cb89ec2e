#!/usr/bin/env python3
"""WebSocket over HTTP/2 (RFC 8441) through the proxy under test: a python `websockets` origin and an
extended-CONNECT client built on `h2` (masked frames in DATA, RFC 8441 §5 / RFC 6455 §5).

Prints the origin's port on its first line, then reads "PROXY_PORT CA_FILE|-" from stdin. The client
speaks h2c with prior knowledge to the proxy's plain port (or, with "tunnel", CONNECTs localhost:PORT
and speaks h2 over TLS inside it, trusting CA_FILE), waits for the proxy's SETTINGS to carry
SETTINGS_ENABLE_CONNECT_PROTOCOL, sends the extended CONNECT, then the scenario's messages as masked
frames, then a close frame (1000), and prints one JSON line. Message texts are reported as SHA-256
digests plus booleans (`contains`) and star counts, so a failing test prints no value.

Scenario fields:
  client_sends:   list of str (text messages) or {"binary_size": n} (random bytes, sent as the
                  stream's flow-control window allows); the client waits for each echo before the next
  contains:       list of str whose presence in either side's messages is reported
  origin_echoes_header: a request header the origin sends back as its first message
  origin_echoes_fragments: the origin sends back each fragment as it arrives, as a message of its own
  client_fragment: str sent as a first fragment (FIN clear); the client waits until every byte of it
                  came back (the origin echoes fragments) before it ends the message
  protocol:       the :protocol sent (default "websocket")
  authority:      the :authority sent (default 127.0.0.1:ORIGIN_PORT, or localhost:ORIGIN_PORT in a tunnel)
  sibling_after_first: a plain GET on the same connection after the first echo; the client waits
                  for its END_STREAM before it sends the next message
  tunnel:         true: intercepted TLS (wss origin with "origin_tls": {"cert", "key"})
  early_fin:      str sent as one frame with END_STREAM right after the CONNECT, before its 200 came
                  (the client's FIN); the client then waits for the stream to end
  reset_first:    open this many WebSockets first, each reset (RST_STREAM CANCEL) once its 200 came
                  ("reset_statuses" counts their statuses; "goaway" says whether the proxy ended the connection)
"""

import asyncio
import hashlib
import json
import os
import socket
import ssl
import struct
import sys
import threading

import h2.config
import h2.connection
import h2.events
import h2.settings
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

scenario = json.loads(sys.argv[1])
contains = scenario.get("contains", [])
origin_messages = []
origin_requests = []
origin_done = threading.Event()


def describe(data, kind="text"):
    return {
        "kind": kind,
        "length": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "contains": [needle.encode() in data for needle in contains],
        "stars": data.count(b"*"),
    }


async def origin_handler(ws):
    headers = ws.request.headers
    origin_requests.append({
        "has_key": "Sec-WebSocket-Key" in headers,
        "extensions": headers.get("Sec-WebSocket-Extensions"),
        "contains": [needle in str(headers) for needle in contains],
    })
    echoed = scenario.get("origin_echoes_header")
    if echoed:
        await ws.send("header=" + (headers.get(echoed) or "-"))
    try:
        while scenario.get("origin_echoes_fragments"):
            async for fragment in ws.recv_streaming():
                data = fragment.encode() if isinstance(fragment, str) else fragment
                origin_messages.append(data)
                if data:
                    await ws.send(data.decode())
        async for message in ws:
            origin_messages.append(message.encode() if isinstance(message, str) else message)
            await ws.send(message)
    except ConnectionClosed:
        pass
    finally:
        origin_done.set()


def client_frame(opcode, payload, fin=True):
    """A masked frame (RFC 6455 §5.2: every client frame is masked)."""
    key = os.urandom(4)
    length = len(payload)
    if length < 126:
        head = bytes([(0x80 if fin else 0) | opcode, 0x80 | length])
    elif length < 65536:
        head = bytes([(0x80 if fin else 0) | opcode, 0x80 | 126]) + struct.pack("!H", length)
    else:
        head = bytes([(0x80 if fin else 0) | opcode, 0x80 | 127]) + struct.pack("!Q", length)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


class FrameReader:
    """Unmasked server frames from the stream's DATA, reassembled across DATA frames and fragments."""

    def __init__(self):
        self.buffer = b""
        self.partial = b""
        self.messages = []
        self.close_code = None

    def feed(self, data):
        self.buffer += data
        while len(self.buffer) >= 2:
            first, second = self.buffer[0], self.buffer[1]
            length, offset = second & 0x7F, 2
            if length == 126:
                if len(self.buffer) < 4:
                    return
                length, offset = struct.unpack("!H", self.buffer[2:4])[0], 4
            elif length == 127:
                if len(self.buffer) < 10:
                    return
                length, offset = struct.unpack("!Q", self.buffer[2:10])[0], 10
            if second & 0x80:
                raise ValueError("a masked frame from the server")
            if len(self.buffer) < offset + length:
                return
            payload = self.buffer[offset:offset + length]
            self.buffer = self.buffer[offset + length:]
            opcode = first & 0x0F
            if opcode == 0x8:
                self.close_code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
            elif opcode in (0x0, 0x1, 0x2):
                self.partial += payload
                if first & 0x80:
                    self.messages.append(self.partial)
                    self.partial = b""


def open_socket(proxy_port, ca_file, origin_port):
    sock = socket.create_connection(("127.0.0.1", proxy_port), timeout=20)
    if not scenario.get("tunnel"):
        return sock
    target = "localhost:%d" % origin_port
    sock.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(4096)
        if not chunk:
            raise RuntimeError("CONNECT refused")
        answer += chunk
    context = ssl.create_default_context(cafile=ca_file)
    context.set_alpn_protocols(["h2"])
    return context.wrap_socket(sock, server_hostname="localhost")


def run_client(proxy_port, ca_file, origin_port):
    result = {"sent_sha256": None, "settings_enable_connect_protocol": None, "status": None, "headers": {}, "client_received": [],
              "close_code": None, "ended": None, "sibling_status": None, "sibling_ended_before_next": None}
    sock = open_socket(proxy_port, ca_file, origin_port)
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    reader = FrameReader()
    state = {"stream": None, "sibling": None, "sibling_done": False, "ws_ended": False}

    def pump():
        data = sock.recv(65536)
        if not data:
            raise EOFError("the proxy closed the connection")
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.RemoteSettingsChanged):
                changed = event.changed_settings.get(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL)
                if changed is not None:
                    result["settings_enable_connect_protocol"] = changed.new_value
            elif isinstance(event, h2.events.ConnectionTerminated):
                result["goaway"] = int(event.error_code)
            elif isinstance(event, h2.events.ResponseReceived):
                headers = dict(event.headers)
                if event.stream_id == state["stream"]:
                    result["status"] = int(headers.pop(":status"))
                    result["headers"] = headers
                elif event.stream_id == state["sibling"]:
                    result["sibling_status"] = int(headers[":status"])
            elif isinstance(event, h2.events.DataReceived):
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                if event.stream_id == state["stream"]:
                    reader.feed(event.data)
            elif isinstance(event, h2.events.StreamEnded):
                if event.stream_id == state["stream"]:
                    result["ended"] = "end_stream"
                    state["ws_ended"] = True
                elif event.stream_id == state["sibling"]:
                    state["sibling_done"] = True
            elif isinstance(event, h2.events.StreamReset):
                if event.stream_id == state["stream"]:
                    result["ended"] = "reset %d" % int(event.error_code)
                    state["ws_ended"] = True
                elif event.stream_id == state["sibling"]:
                    state["sibling_done"] = True
        outgoing = conn.data_to_send()
        if outgoing:
            sock.sendall(outgoing)

    def wait_for(condition):
        while not condition():
            pump()

    def send_windowed(data):
        # The proxy credits the stream's window only as it forwards to the origin: a client that
        # sends more than the window waits for its WINDOW_UPDATEs (RFC 9113 §5.2).
        while data:
            window = min(conn.local_flow_control_window(state["stream"]), conn.max_outbound_frame_size)
            if window <= 0:
                pump()
                continue
            conn.send_data(state["stream"], data[:window])
            data = data[window:]
            sock.sendall(conn.data_to_send())

    # RFC 8441 §3: extended CONNECT only once the server said it understands it.
    wait_for(lambda: result["settings_enable_connect_protocol"] is not None)
    authority = scenario.get("authority") or ("%s:%d" % ("localhost" if scenario.get("tunnel") else "127.0.0.1", origin_port))
    scheme = "https" if scenario.get("tunnel") else "http"
    result["reset_statuses"] = {}
    for _ in range(scenario.get("reset_first", 0)):
        state["stream"] = conn.get_next_available_stream_id()
        result["status"] = None
        conn.send_headers(state["stream"], [(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", scheme),
                                            (":authority", authority), (":path", "/chat"), ("sec-websocket-version", "13")])
        sock.sendall(conn.data_to_send())
        wait_for(lambda: result["status"] is not None or state["ws_ended"] or "goaway" in result)
        if "goaway" in result:
            return result
        key = str(result["status"])
        result["reset_statuses"][key] = result["reset_statuses"].get(key, 0) + 1
        if not state["ws_ended"]:
            conn.reset_stream(state["stream"], error_code=8)  # CANCEL: how a client aborts a WebSocket (RFC 8441 §5)
            sock.sendall(conn.data_to_send())
        state["ws_ended"] = False
        result["status"] = None
    state["stream"] = conn.get_next_available_stream_id()
    conn.send_headers(state["stream"], [
        (":method", "CONNECT"), (":protocol", scenario.get("protocol", "websocket")), (":scheme", scheme),
        (":authority", authority), (":path", "/chat"), ("sec-websocket-version", "13"),
        ("sec-websocket-extensions", "permessage-deflate; client_max_window_bits"),
    ] + [tuple(pair) for pair in scenario.get("headers", [])])
    if scenario.get("early_fin"):
        conn.send_data(state["stream"], client_frame(0x1, scenario["early_fin"].encode()), end_stream=True)
    sock.sendall(conn.data_to_send())
    wait_for(lambda: result["status"] is not None or state["ws_ended"])
    if scenario.get("early_fin"):
        wait_for(lambda: state["ws_ended"])
        return result
    if result["status"] != 200:
        return result
    if scenario.get("origin_echoes_header"):
        wait_for(lambda: reader.messages or reader.close_code is not None or state["ws_ended"])
    for index, text in enumerate(scenario.get("client_sends", [])):
        if reader.close_code is not None or state["ws_ended"]:
            break
        seen = len(reader.messages)
        if isinstance(text, dict):
            payload = os.urandom(text["binary_size"])
            result["sent_sha256"] = hashlib.sha256(payload).hexdigest()
            send_windowed(client_frame(0x2, payload))
        else:
            conn.send_data(state["stream"], client_frame(0x1, text.encode()))
            sock.sendall(conn.data_to_send())
        wait_for(lambda: len(reader.messages) > seen or reader.close_code is not None or state["ws_ended"])
        if index == 0 and scenario.get("sibling_after_first") and reader.close_code is None:
            state["sibling"] = conn.get_next_available_stream_id()
            conn.send_headers(state["sibling"], [(":method", "GET"), (":scheme", scheme), (":authority", authority),
                                                 (":path", "/plain")], end_stream=True)
            sock.sendall(conn.data_to_send())
            wait_for(lambda: state["sibling_done"] or state["ws_ended"])
            result["sibling_ended_before_next"] = state["sibling_done"] and not state["ws_ended"]
    fragment = scenario.get("client_fragment")
    if fragment and reader.close_code is None:
        conn.send_data(state["stream"], client_frame(0x1, fragment.encode(), fin=False))
        sock.sendall(conn.data_to_send())
        wait_for(lambda: sum(map(len, reader.messages)) >= len(fragment) or reader.close_code is not None or state["ws_ended"])
        conn.send_data(state["stream"], client_frame(0x0, b"", fin=True))
        sock.sendall(conn.data_to_send())
    if reader.close_code is None and not state["ws_ended"]:
        conn.send_data(state["stream"], client_frame(0x8, struct.pack("!H", 1000)))
        sock.sendall(conn.data_to_send())
        wait_for(lambda: reader.close_code is not None or state["ws_ended"])
    if not state["ws_ended"]:
        conn.end_stream(state["stream"])
        sock.sendall(conn.data_to_send())
        wait_for(lambda: state["ws_ended"])
    result["client_received"] = [describe(message) for message in reader.messages]
    result["close_code"] = reader.close_code
    sock.close()
    return result


async def main():
    tls = scenario.get("origin_tls")
    server_ssl = None
    if tls:
        server_ssl = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ssl.load_cert_chain(tls["cert"], tls["key"])
    async with serve(origin_handler, "127.0.0.1", 0, max_size=None, compression="deflate", ssl=server_ssl) as server:
        port = server.sockets[0].getsockname()[1]
        print(port, flush=True)
        answer = (await asyncio.to_thread(sys.stdin.readline)).split()
        try:
            result = await asyncio.to_thread(run_client, int(answer[0]), answer[1], port)
        except Exception as error:  # reported, not a crash the test cannot parse
            result = {"error": type(error).__name__}
        if origin_requests:  # the origin's side has ended: everything it received is counted
            await asyncio.to_thread(origin_done.wait, 30)
        result["origin_received"] = [describe(message) for message in origin_messages]
        result["origin_requests"] = origin_requests
        print(json.dumps(result), flush=True)


asyncio.run(main())
