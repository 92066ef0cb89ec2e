"""A WebSocket origin and client (python `websockets`) on either side of the proxy under test.

Prints the origin's port on its first line, then reads the proxy's port from stdin, connects a
client through the proxy (absolute-form upgrade, as an HTTP_PROXY client sends it; or, with
`origin_tls`, `wss://localhost` through a CONNECT tunnel the proxy intercepts, trusting the CA file
given after the port on stdin), runs the
scenario given as JSON on argv[1] and prints one JSON line: what the origin received, what the
client received, how the WebSocket closed. Message texts are reported as SHA-256 digests plus a few
booleans the test asks for (`contains`), so a failing test prints no value.

Scenario fields:
  client_sends: list of {"text": str} | {"fragments": [str, ...]} | {"binary_size": n}
  origin_sends: list of str (text messages the origin sends once the client connected)
  contains:     list of str whose presence in either side's messages is reported
  expect_replies: how many messages the client waits for (the origin echoes each it gets)
  lockstep:     the client waits for each echo before it sends the next message
  origin_tls:   {"cert": PATH, "key": PATH}: the origin speaks TLS (wss)
"""

import asyncio
import hashlib
import json
import os
import socket
import ssl
import sys

from websockets.asyncio.client import connect
from websockets.asyncio.server import serve
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed

scenario = json.loads(sys.argv[1])
contains = scenario.get("contains", [])
origin_messages = []
origin_extensions = []
origin_port_holder = {}
origin_done = asyncio.Event()


def describe(message):
    data = message.encode() if isinstance(message, str) else message
    return {
        "kind": "text" if isinstance(message, str) else "binary",
        "length": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "contains": [needle.encode() in data for needle in contains],
        "stars": data.count(b"*"),
    }


async def origin_handler(ws):
    origin_extensions.append(ws.request.headers.get("Sec-WebSocket-Extensions"))
    for text in scenario.get("origin_sends", []):
        await ws.send(text)
    try:
        async for message in ws:
            origin_messages.append(message)
            await ws.send(message)
    except ConnectionClosed:
        pass
    finally:
        origin_done.set()


def absolute_form(original):
    # An HTTP_PROXY client names the origin in the request line (RFC 9112 §3.2.2).
    def patched(self):
        request = original(self)
        request.path = "http://127.0.0.1:%d%s" % (origin_port_holder["port"], request.path)
        return request

    return patched


async def main():
    tls = scenario.get("origin_tls")
    server_ssl = None
    if tls:
        server_ssl = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ssl.load_cert_chain(tls["cert"], tls["key"])
    async with serve(origin_handler, "127.0.0.1", 0, max_size=None, compression="deflate", ssl=server_ssl) as server:
        port = server.sockets[0].getsockname()[1]
        origin_port_holder["port"] = port
        print(port, flush=True)
        answer = sys.stdin.readline().split()
        proxy_port = int(answer[0])
        if tls:
            client_ssl = ssl.create_default_context(cafile=answer[1])
            target = dict(
                uri="wss://localhost:%d/chat" % port, proxy="http://127.0.0.1:%d" % proxy_port, ssl=client_ssl)
        else:
            ClientProtocol.connect = absolute_form(ClientProtocol.connect)
            sock = socket.create_connection(("127.0.0.1", proxy_port))
            target = dict(uri="ws://127.0.0.1:%d/chat" % port, sock=sock, proxy=None)
        result = {"client_received": [], "close_code": None, "handshake": "ok"}
        try:
            async with connect(
                **target, max_size=None, compression="deflate", open_timeout=20, close_timeout=5,
            ) as ws:
                result["client_extensions"] = ws.response.headers.get("Sec-WebSocket-Extensions")
                replies = scenario.get("expect_replies", 0)
                for item in scenario.get("client_sends", []):
                    if "text" in item:
                        await ws.send(item["text"])
                    elif "fragments" in item:
                        await ws.send(iter(item["fragments"]))
                    else:
                        payload = os.urandom(item["binary_size"])
                        result["sent_sha256"] = hashlib.sha256(payload).hexdigest()
                        await ws.send(payload)
                    if scenario.get("lockstep") and replies > 0:  # the echo first, then the next message
                        try:
                            message = await asyncio.wait_for(ws.recv(), 60)
                        except ConnectionClosed:
                            break
                        result["client_received"].append(describe(message))
                        replies -= 1
                try:
                    for _ in range(replies):
                        message = await asyncio.wait_for(ws.recv(), 60)
                        result["client_received"].append(describe(message))
                    await ws.close()
                except ConnectionClosed:
                    pass
                result["close_code"] = ws.close_code
        except Exception as error:  # a refused handshake: report it, do not crash the test's parse
            result["handshake"] = type(error).__name__
        if origin_extensions:  # the origin's side has ended: everything it received is counted
            await asyncio.wait_for(origin_done.wait(), 30)
        result["origin_received"] = [describe(message) for message in origin_messages]
        result["origin_extensions"] = origin_extensions
        print(json.dumps(result), flush=True)


asyncio.run(main())
