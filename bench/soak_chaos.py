#!/usr/bin/env python3
"""Hostile clients for the soak (bench/soak.sh): for --seconds, four threads pick at random among
malformed and ambiguous heads, numbers too long to hold, requests to the proxy's own ports through
itself, an origin answering two different Locations, refused upstreams, clients vanishing
mid-head/mid-body/mid-response, slow heads, slowly streamed bodies, pipelined bursts and idle
connections left open. Each action checks the one answer it must get; every unexpected answer is
printed (`unexpected: ACTION: got ..., expected ...`, the first few of each action), the last line is
the summary (actions done, unexpected answers), and the exit status is 1 when any answer was
unexpected: a soak whose answers are wrong does not pass."""
import argparse
import hashlib
import random
import socket
import struct
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("--proxy", required=True)
parser.add_argument("--origin", required=True)
parser.add_argument("--admin", help="the proxy's admin address (one of its own ports, for the loop checks)")
parser.add_argument("--seconds", type=float, default=60)
args = parser.parse_args()
proxy_host, proxy_port = args.proxy.rsplit(":", 1)
ORIGIN = f"http://{args.origin}"
OWN_PORTS = [int(proxy_port)] + ([int(args.admin.rsplit(":", 1)[1])] if args.admin else [])

counts, unexpected, examples = {}, {}, {}
lock = threading.Lock()
EXAMPLES_PER_ACTION = 3


def connect(timeout=10):
    return socket.create_connection((proxy_host, int(proxy_port)), timeout=timeout)


def reset(sock):
    # RST instead of FIN: the harshest way for a client to vanish
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class Answer:
    """One response as read from the proxy: status, head text and (Content-Length) body."""

    def __init__(self, status, head, body):
        self.status, self.head, self.body = status, head, body

    def error(self):
        """The JSON `error` code of a refusal, or None."""
        marker = b'"error":"'
        start = self.body.find(marker)
        if start < 0:
            return None
        start += len(marker)
        return self.body[start:self.body.find(b'"', start)].decode("ascii", "replace")

    def header_lines(self, name):
        prefix = name.lower() + ":"
        return [line for line in self.head.split("\r\n")[1:] if line.lower().startswith(prefix)]

    def __str__(self):
        error = self.error()
        return f"{self.status}" + (f" {error}" if error else "")


def read_answer(sock, limit=1 << 20):
    """Reads one response (None at EOF or on a reset before its head ended)."""
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
    except OSError:
        return None
    head, body = data.split(b"\r\n\r\n", 1)
    text = head.decode("latin-1")
    try:
        status = int(text.split(" ", 2)[1])
    except (IndexError, ValueError):
        return Answer(None, text, b"")
    length = 0
    for line in text.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length" and value.strip().isdigit():
            length = min(int(value), limit)
    try:
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
    except OSError:
        pass
    return Answer(status, text, body[:length])


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


def exchange(request):
    """Sends `request` on a new connection; the answer (None if the proxy closed without one)."""
    sock = connect()
    try:
        sock.sendall(request)
        return read_answer(sock)
    finally:
        sock.close()


# --- Each check returns None when the answer is the expected one, else what went wrong. ---

def expect(answer, status, error=None):
    if answer is None:
        return f"got no answer, expected {status}" + (f" {error}" if error else "")
    if answer.status != status or (error is not None and answer.error() != error):
        return f"got {answer}, expected {status}" + (f" {error}" if error else "")
    return None


HOST = args.origin.encode()
TARGET = ORIGIN.encode()
LONG_DIGITS = "7" * 40
# Heads two parsers could read differently, or numbers no parser can hold: 400, nothing forwarded.
MALFORMED = {
    "cl_and_te": b"POST " + TARGET + b"/upload HTTP/1.1\r\nHost: " + HOST + b"\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
    "obs_fold": b"GET " + TARGET + b"/ HTTP/1.1\r\nHost: " + HOST + b"\r\nX: a\r\n folded\r\n\r\n",
    "control_in_target": b"GET " + TARGET + b"/\x01 HTTP/1.1\r\nHost: " + HOST + b"\r\n\r\n",
    "bare_lf": b"GET " + TARGET + b"/ HTTP/1.1\nHost: " + HOST + b"\n\n",
    "garbage": b"\xff\xfe\x00garbage\r\n\r\n",
    # Long numbers (docs/security-model.md, "Strict parsing"): a dotted host whose part overflows any
    # integer, a Content-Length and a chunk size of 30 digits. The proxy answers 400 and stays up.
    "long_dotted_host": f"GET http://128.0.{LONG_DIGITS}.1/ HTTP/1.1\r\nHost: 128.0.{LONG_DIGITS}.1\r\n\r\n".encode(),
    "long_content_length": b"POST " + TARGET + b"/upload HTTP/1.1\r\nHost: " + HOST + b"\r\nContent-Length: " + b"9" * 30 + b"\r\n\r\n",
    "long_chunk_size": b"POST " + TARGET + b"/upload HTTP/1.1\r\nHost: " + HOST + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
                       + b"f" * 30 + b"\r\n" + b"x" * 16 + b"\r\n0\r\n\r\n",
    # One value or refuse: a deciding field twice.
    "two_content_lengths": b"POST " + TARGET + b"/upload HTTP/1.1\r\nHost: " + HOST + b"\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    "two_hosts": b"GET " + TARGET + b"/1k HTTP/1.1\r\nHost: " + HOST + b"\r\nHost: " + HOST + b"\r\n\r\n",
}


def malformed():
    name = random.choice(sorted(MALFORMED))
    return name, expect(exchange(MALFORMED[name]), 400)


def absolute_target_other_host():
    # RFC 9112 §3.2.2: with an absolute-form target the proxy replaces Host with the target's
    # authority, so a Host naming another origin plays no part: the origin answers.
    return None, expect(exchange(f"GET {ORIGIN}/1k HTTP/1.1\r\nHost: 127.0.0.9:1\r\n\r\n".encode()), 200)


def refused():
    return None, expect(exchange(b"GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n"), 502)


def own_port():
    # The proxy is never its own client: a request or a CONNECT to one of its own listening ports,
    # by any local name, is 403 loop_refused (and nothing else).
    port = random.choice(OWN_PORTS)
    host = random.choice(["127.0.0.1", "localhost", "127.0.0.2", "[::1]"])
    if random.random() < 0.5:
        request = f"GET http://{host}:{port}/metrics HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n"
        which = "own_port_get"
    else:
        request = f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n"
        which = "own_port_connect"
    return which, expect(exchange(request.encode()), 403, "loop_refused")


# An origin of this script's own, outside the soak's scope (so the egress guard watches what is sent
# to it for the injected token, and holds back the tail of each body): /sink reads a body whole and
# says how much arrived and its SHA-256; anything else is answered with two different Locations.
chaos_origin = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
chaos_origin.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
chaos_origin.bind(("127.0.0.1", 0))
chaos_origin.listen(128)
CHAOS_ORIGIN = f"127.0.0.1:{chaos_origin.getsockname()[1]}"


class Stream:
    def __init__(self, conn):
        self.conn, self.buffer = conn, b""

    def until(self, marker):
        while marker not in self.buffer:
            chunk = self.conn.recv(65536)
            if not chunk:
                raise EOFError
            self.buffer += chunk
        line, self.buffer = self.buffer.split(marker, 1)
        return line

    def exactly(self, count):
        while len(self.buffer) < count:
            chunk = self.conn.recv(65536)
            if not chunk:
                raise EOFError
            self.buffer += chunk
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data


def serve_chaos_origin(conn):
    with conn:
        conn.settimeout(10)
        stream = Stream(conn)
        try:
            while True:
                head = stream.until(b"\r\n\r\n").decode("latin-1").split("\r\n")
                path = head[0].split(" ")[1]
                fields = {}
                for line in head[1:]:
                    name, _, value = line.partition(":")
                    fields[name.strip().lower()] = value.strip()
                body = b""
                if fields.get("transfer-encoding", "").lower() == "chunked":
                    while True:
                        size = int(stream.until(b"\r\n").split(b";")[0], 16)
                        if size == 0:
                            while stream.until(b"\r\n"):  # trailer lines, up to the empty one
                                pass
                            break
                        body += stream.exactly(size)
                        stream.exactly(2)
                elif "content-length" in fields:
                    body = stream.exactly(int(fields["content-length"]))
                if path.startswith("/sink"):
                    text = f"received {len(body)} {hashlib.sha256(body).hexdigest()}".encode()
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(text) + text)
                else:
                    conn.sendall(f"HTTP/1.1 302 Found\r\nLocation: {ORIGIN}/1k\r\nLocation: {ORIGIN}/64k\r\n"
                                 "Content-Length: 0\r\n\r\n".encode())
        except (OSError, EOFError, ValueError, IndexError):
            return


def accept_chaos_origin():
    while True:
        try:
            conn, _ = chaos_origin.accept()
        except OSError:
            return
        threading.Thread(target=serve_chaos_origin, args=(conn,), daemon=True).start()


threading.Thread(target=accept_chaos_origin, daemon=True).start()


def two_locations():
    # Clients disagree on which of two Locations they follow: 502 ambiguous_location, neither
    # relayed (and, in the soak's follow mode, neither followed).
    answer = exchange(f"GET http://{CHAOS_ORIGIN}/go HTTP/1.1\r\nHost: {CHAOS_ORIGIN}\r\n\r\n".encode())
    problem = expect(answer, 502, "ambiguous_location")
    if problem is None and answer.header_lines("location"):
        problem = "a Location reached the client"
    return None, problem


def hold_back_probe():
    # A body streamed slowly to an origin outside the token's scope: the egress guard holds back the
    # tail of what arrived and must release it as the body goes on and when it ends. The body must
    # arrive whole (the sink says how much, and its hash) and be answered.
    chunked = random.random() < 0.5
    pieces = [bytes([0x61 + i]) * 64 for i in range(16)]
    body = b"".join(pieces)
    sock = connect()
    try:
        framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(body)}"
        sock.sendall(f"POST http://{CHAOS_ORIGIN}/sink HTTP/1.1\r\nHost: {CHAOS_ORIGIN}\r\n{framing}\r\n\r\n".encode())
        for piece in pieces:
            sock.sendall(b"40\r\n" + piece + b"\r\n" if chunked else piece)
            time.sleep(0.05)
        if chunked:
            sock.sendall(b"0\r\n\r\n")
        answer = read_answer(sock)
    finally:
        sock.close()
    problem = expect(answer, 200)
    expected = f"received {len(body)} {hashlib.sha256(body).hexdigest()}".encode()
    if problem is None and answer.body != expected:
        problem = f"the origin got {answer.body[:80]!r}, expected {expected!r}"
    return ("hold_back_chunked" if chunked else "hold_back_content_length"), problem


def vanish_mid_head():
    sock = connect()
    sock.sendall(get("/1k")[:20])
    reset(sock)
    return None, None


def vanish_mid_body():
    sock = connect()
    sock.sendall(f"POST {ORIGIN}/upload HTTP/1.1\r\nHost: {args.origin}\r\nContent-Length: 100000\r\n\r\n".encode() + b"x" * 5000)
    reset(sock)
    return None, None


def vanish_mid_response():
    sock = connect()
    sock.sendall(get("/64k"))
    sock.recv(1024)
    reset(sock)
    return None, None


def slow_head():
    sock = connect()
    for byte in get("/1k")[:12]:
        sock.sendall(bytes([byte]))
        time.sleep(0.25)  # 3 s in all: past client_header (2 s), so the proxy answers 408 or closes
    answer = read_answer(sock)
    sock.close()
    return None, None if answer is None or answer.status == 408 else f"got {answer}, expected 408 or a close"


def pipelined_burst():
    sock = connect()
    sock.sendall(b"".join(get("/1k") for _ in range(20)))
    arrived = read_responses(sock, 20)
    sock.close()
    return None, None if arrived == 20 else f"{arrived} of 20 pipelined responses arrived"


idle_pool = []


def idle_connection():
    sock = connect()
    with lock:
        idle_pool.append(sock)
        while len(idle_pool) > 200:
            idle_pool.pop(0).close()
    return None, None


ACTIONS = [malformed, absolute_target_other_host, refused, own_port, two_locations, hold_back_probe,
           vanish_mid_head, vanish_mid_body, vanish_mid_response, slow_head, pipelined_burst, idle_connection]
VANISHING = (vanish_mid_head, vanish_mid_body, vanish_mid_response)


def worker(deadline):
    while time.monotonic() < deadline:
        action = random.choice(ACTIONS)
        try:
            which, problem = action()
        except OSError as error:
            which, problem = None, None if action in VANISHING else f"{type(error).__name__}: {error}"
        name = action.__name__ + (f"/{which}" if which else "")
        with lock:
            counts[name] = counts.get(name, 0) + 1
            if problem is not None:
                unexpected[name] = unexpected.get(name, 0) + 1
                if unexpected[name] <= EXAMPLES_PER_ACTION:
                    print(f"unexpected: {name}: {problem}", flush=True)
        time.sleep(0.01)


deadline = time.monotonic() + args.seconds
threads = [threading.Thread(target=worker, args=(deadline,)) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
for sock in idle_pool:
    sock.close()
chaos_origin.close()
total = sum(counts.values())
print(", ".join(f"{name} {count}" for name, count in sorted(counts.items())))
print(f"{total} hostile actions, {sum(unexpected.values())} unexpected answers {unexpected or ''}")
raise SystemExit(1 if unexpected else 0)
