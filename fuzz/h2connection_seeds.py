#!/usr/bin/env python3
# Generates the seeds of fuzz/corpus/h2connection: real client sessions (python3-h2) in the
# H2Connection target's format (fuzz/H2ConnectionFuzzer.swift): a configuration byte (bit 7: the
# wire carries its own preface), the control part's length (2 bytes, big-endian), the control part,
# then the wire. Run from the repository root: python3 fuzz/h2connection_seeds.py
import h2.connection, h2.config, hpack, struct, os
from hyperframe.frame import HeadersFrame, ContinuationFrame
out = "fuzz/corpus/h2connection"
def client():
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    c.initiate_connection()
    return c
def hdrs(method, url_scheme, authority, path, extra=()):
    return [(":method", method), (":scheme", url_scheme), (":authority", authority), (":path", path)] + list(extra)
def save(name, wire, config=0, control=b""):
    data = bytes([0x80 | config]) + struct.pack(">H", len(control)) + control + wire
    open(os.path.join(out, name), "wb").write(data)
# control steps: 0-2 feed (next byte: size), 3 add only, 4-5 upstream event (stream pick, then operands), 6 client reads, 7 stale
split = bytes([0, 20, 1, 5, 2, 200, 4, 0, 0, 4, 0, 0, 6, 4, 0, 1, 4, 0, 0, 0, 255, 4, 0, 0, 7, 0, 0, 6])
c = client(); c.send_headers(1, hdrs("GET", "http", "other.test", "/"), end_stream=True)
wire = c.data_to_send()
save("get", wire)
save("get-split", wire, 0, split)
c = client(); c.send_headers(1, hdrs("GET", "https", "api.scoped.test", "/v1/x", [("authorization", "Bearer CLIENTCRED1")]), end_stream=True)
c.send_headers(3, hdrs("GET", "https", "cdn.scoped.test", "/y", [("authorization", "Bearer CLIENTCRED3")]), end_stream=True)
wire = c.data_to_send()
save("two-streams-credentials", wire, 0, bytes([0, 255, 4, 0, 0, 4, 1, 0, 4, 0, 0, 0, 255, 4, 1, 0, 4, 0, 96, 4, 1, 96]))
# The same in follow mode (configuration 1): a redirect to another origin must not carry them.
save("two-streams-credentials-follow", wire, 1)
c = client(); c.send_headers(1, hdrs("POST", "https", "api.scoped.test", "/v1/form", [("content-type", "application/x-www-form-urlencoded"), ("content-length", "9")]))
c.send_data(1, b"name=x&a=", end_stream=True)
save("post-data", c.data_to_send(), 0, bytes([0, 40, 0, 200, 4, 0, 0, 4, 0, 10, 4, 0, 3]))
c = client(); c.send_headers(1, hdrs("PUT", "http", "other.test", "/f")); c.send_data(1, b"x" * 3000); c.send_data(1, b"y" * 100, end_stream=True)
save("put-chunked", c.data_to_send())
c = client(); c.send_headers(1, hdrs("GET", "http", "other.test", "/slow")); c.reset_stream(1)
c.send_headers(3, hdrs("GET", "http", "other.test", "/"), end_stream=True); c.ping(b"12345678")
save("rst-ping", c.data_to_send())
c = client(); c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 100, h2.settings.SettingCodes.MAX_FRAME_SIZE: 16384})
c.send_headers(1, hdrs("GET", "http", "other.test", "/big"), end_stream=True); c.increment_flow_control_window(1000)
save("settings-window", c.data_to_send(), 0, bytes([0, 255, 4, 0, 0, 4, 0, 0, 4, 0, 0, 4, 0, 0, 255, 4, 0, 0, 255]))
# CONTINUATION: one header block in a HEADERS and two CONTINUATIONs.
c = client(); pre = c.data_to_send()
block = hpack.Encoder().encode(hdrs("GET", "http", "other.test", "/c", [("x-a", "1" * 40), ("authorization", "Bearer CLIENTCRED5")]))
third = len(block) // 3
f1 = HeadersFrame(1, data=block[:third], flags=["END_STREAM"]); f2 = ContinuationFrame(1, data=block[third:2*third]); f3 = ContinuationFrame(1, data=block[2*third:], flags=["END_HEADERS"])
save("continuation", pre + f1.serialize() + f2.serialize() + f3.serialize())
# Many streams opened and reset: the rapid-reset guard.
c = client()
for i in range(1, 400, 2):
    c.send_headers(i, hdrs("GET", "http", "other.test", "/"))
    c.reset_stream(i)
save("rapid-reset", c.data_to_send()[:4000])
# RFC 8441: an extended CONNECT for a WebSocket with a client credential, then a masked frame in DATA;
# the control part connects, answers with the 101 that completes the fixed key's handshake (index
# 12), then moves, scrubs and stops frames. Encoded by hand: h2 sends :protocol only to a server
# that announced SETTINGS_ENABLE_CONNECT_PROTOCOL.
from hyperframe.frame import DataFrame
c = client(); pre = c.data_to_send()
block = hpack.Encoder().encode([(":method", "CONNECT"), (":protocol", "websocket"), (":scheme", "https"), (":authority", "api.scoped.test"),
                                (":path", "/v1/ws"), ("sec-websocket-version", "13"), ("authorization", "Bearer CLIENTCRED7")])
key = [1, 2, 3, 4]
frame = bytes([0x81, 0x85] + key) + bytes(b ^ key[i % 4] for i, b in enumerate(b"hello"))
# nghttp2 takes :protocol once its SETTINGS (with ENABLE_CONNECT_PROTOCOL) are acknowledged: the ACK first.
settings_ack = bytes([0, 0, 0, 0x4, 0x1, 0, 0, 0, 0])
save("extended-connect", pre + settings_ack + HeadersFrame(1, data=block, flags=["END_HEADERS"]).serialize() + DataFrame(1, data=frame).serialize(), 0,
     bytes([0, 255, 4, 0, 0, 4, 0, 0, 12, 4, 0, 0, 7, 9, 4, 0, 3, 4, 0, 1, 2, 3, 4, 0, 4]))
