#!/usr/bin/env python3
"""Hostile clients for the soak (bench/soak.sh): for --seconds, four threads pick at random among
malformed heads, refused upstreams, clients vanishing mid-head/mid-body/mid-response, slow heads,
pipelined bursts and idle connections left open. Each action checks the answer it must get; the
last line printed is the summary (actions done, unexpected answers)."""
import argparse
import random
import socket
import struct
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("--proxy", required=True)
parser.add_argument("--origin", required=True)
parser.add_argument("--seconds", type=float, default=60)
args = parser.parse_args()
proxy_host, proxy_port = args.proxy.rsplit(":", 1)
ORIGIN = f"http://{args.origin}"

counts, unexpected = {}, {}
lock = threading.Lock()


def connect(timeout=10):
    sock = socket.create_connection((proxy_host, int(proxy_port)), timeout=timeout)
    return sock


def reset(sock):
    # RST instead of FIN: the harshest way for a client to vanish
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def read_status(sock):
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            return None
        data += chunk
    return int(data.split(b" ", 2)[1])


def read_responses(sock, count):
    """Reads `count` Content-Length responses; returns how many arrived whole."""
    buffer, done = b"", 0
    while done < count:
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(65536)
            if not chunk:
                return done
            buffer += chunk
        head, buffer = buffer.split(b"\r\n\r\n", 1)
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(buffer) < length:
            chunk = sock.recv(65536)
            if not chunk:
                return done
            buffer += chunk
        buffer = buffer[length:]
        done += 1
    return done


def get(path, extra=""):
    return f"GET {ORIGIN}{path} HTTP/1.1\r\nHost: {args.origin}\r\n{extra}\r\n".encode()


MALFORMED = [
    b"GET " + ORIGIN.encode() + b"/ HTTP/1.1\r\nHost: " + args.origin.encode() + b"\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"GET " + ORIGIN.encode() + b"/ HTTP/1.1\r\nHost: " + args.origin.encode() + b"\r\nX: a\r\n folded\r\n\r\n",
    b"GET " + ORIGIN.encode() + b"/\x01 HTTP/1.1\r\nHost: " + args.origin.encode() + b"\r\n\r\n",
    b"GET " + ORIGIN.encode() + b"/ HTTP/1.1\nHost: " + args.origin.encode() + b"\n\n",
    b"GET " + ORIGIN.encode() + b"/ HTTP/1.1\r\nHost: 127.0.0.9:1\r\n\r\n",
    b"\xff\xfe\x00garbage\r\n\r\n",
]


def malformed():
    sock = connect()
    sock.sendall(random.choice(MALFORMED))
    status = read_status(sock)
    sock.close()
    return status == 400


def refused():
    sock = connect()
    sock.sendall(b"GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n")
    status = read_status(sock)
    sock.close()
    return status == 502


def vanish_mid_head():
    sock = connect()
    sock.sendall(get("/1k")[:20])
    reset(sock)
    return True


def vanish_mid_body():
    sock = connect()
    sock.sendall(f"POST {ORIGIN}/upload HTTP/1.1\r\nHost: {args.origin}\r\nContent-Length: 100000\r\n\r\n".encode() + b"x" * 5000)
    reset(sock)
    return True


def vanish_mid_response():
    sock = connect()
    sock.sendall(get("/64k"))
    sock.recv(1024)
    reset(sock)
    return True


def slow_head():
    sock = connect()
    for byte in get("/1k")[:12]:
        sock.sendall(bytes([byte]))
        time.sleep(0.25)  # 3 s in all: past client_header (2 s), so the proxy answers 408 or closes
    try:
        status = read_status(sock)
    except OSError:
        status = None
    sock.close()
    return status in (408, None)


def pipelined_burst():
    sock = connect()
    sock.sendall(b"".join(get("/1k") for _ in range(20)))
    arrived = read_responses(sock, 20)
    sock.close()
    return arrived == 20


idle_pool = []


def idle_connection():
    sock = connect()
    with lock:
        idle_pool.append(sock)
        while len(idle_pool) > 200:
            idle_pool.pop(0).close()
    return True


ACTIONS = [malformed, refused, vanish_mid_head, vanish_mid_body, vanish_mid_response, slow_head, pipelined_burst, idle_connection]


def worker(deadline):
    while time.monotonic() < deadline:
        action = random.choice(ACTIONS)
        try:
            ok = action()
        except OSError:
            ok = action in (vanish_mid_head, vanish_mid_body, vanish_mid_response)
        with lock:
            counts[action.__name__] = counts.get(action.__name__, 0) + 1
            if not ok:
                unexpected[action.__name__] = unexpected.get(action.__name__, 0) + 1
        time.sleep(0.01)


deadline = time.monotonic() + args.seconds
threads = [threading.Thread(target=worker, args=(deadline,)) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
for sock in idle_pool:
    sock.close()
total = sum(counts.values())
print(", ".join(f"{name} {count}" for name, count in sorted(counts.items())))
print(f"{total} hostile actions, {sum(unexpected.values())} unexpected answers {unexpected or ''}")
