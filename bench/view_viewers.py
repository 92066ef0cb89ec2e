#!/usr/bin/env python3
"""Many viewers of the live view's event stream in one process (bench/view.sh).

Opens COUNT connections to GET /view/events on the admin address, the first STALLED of them never
read (a small receive buffer, so the proxy sees them fall behind soon), and reads all the others
with selectors, counting the records each receives (`data:` lines) and noting which connections the
server closed. Prints `ready` once every stream answered 200, then runs until its standard input
closes (or SIGTERM), and prints one JSON object with the counts.

  view_viewers.py --port 9090 --count 100 --stalled 10 [--token TOKEN]
"""
import argparse
import json
import re
import selectors
import signal
import socket
import sys


class Viewer:
    def __init__(self, index, stalled):
        self.index = index
        self.stalled = stalled
        self.sock = None
        self.head = b""
        self.status = None
        self.records = 0
        self.bytes = 0
        self.closed_by_server = False
        self.tail = b""  # the end of the last chunk: a `\ndata:` split across reads is still counted
        self.first_id = None
        self.last_id = None


ID_LINE = re.compile(rb"\nid: ?([0-9]{1,19})\n")


def count_records(viewer, chunk):
    data = viewer.tail + chunk
    viewer.records += data.count(b"\ndata:") - viewer.tail.count(b"\ndata:")
    if viewer.first_id is None:
        first = ID_LINE.search(data)
        if first:
            viewer.first_id = int(first.group(1))
    # The last id line in this chunk (looked for from the end: chunks are up to 1 MiB).
    start = data.rfind(b"\nid:")
    while start >= 0:
        match = ID_LINE.match(data, start)
        if match:
            viewer.last_id = int(match.group(1))
            break
        start = data.rfind(b"\nid:", 0, start)
    viewer.tail = data[-32:]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--stalled", type=int, default=0)
    parser.add_argument("--token")
    parser.add_argument("--path", default="/view/events")
    args = parser.parse_args()

    request = f"GET {args.path} HTTP/1.1\r\nHost: {args.host}:{args.port}\r\nAccept: text/event-stream\r\n"
    if args.token:
        request += f"Authorization: Bearer {args.token}\r\n"
    request = (request + "\r\n").encode()

    viewers = [Viewer(i, i < args.stalled) for i in range(args.count)]
    selector = selectors.DefaultSelector()
    for viewer in viewers:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if viewer.stalled:
            # A small window: what the proxy cannot write stays in its own queue, which it bounds.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((args.host, args.port))
        sock.sendall(request)
        viewer.sock = sock
        # Every viewer reads its response head; a stalled one reads nothing after it.
        while b"\r\n\r\n" not in viewer.head:
            chunk = sock.recv(4096)
            if not chunk:
                print(json.dumps({"error": f"viewer {viewer.index}: closed before a head"}), flush=True)
                return 1
            viewer.head += chunk
        head, _, rest = viewer.head.partition(b"\r\n\r\n")
        viewer.status = int(head.split(b" ", 2)[1])
        if viewer.status != 200:
            print(json.dumps({"error": f"viewer {viewer.index}: status {viewer.status}: {rest[:200]!r}"}), flush=True)
            return 1
        viewer.bytes += len(rest)
        count_records(viewer, b"\n" + rest)
        if not viewer.stalled:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ, viewer)
    print("ready", flush=True)

    stopping = [False]
    signal.signal(signal.SIGTERM, lambda *_: stopping.__setitem__(0, True))
    selector.register(sys.stdin, selectors.EVENT_READ, None)
    open_readers = sum(1 for v in viewers if not v.stalled)
    while not stopping[0]:
        for key, _ in selector.select(timeout=0.5):
            viewer = key.data
            if viewer is None:
                if not sys.stdin.buffer.read1(4096):
                    stopping[0] = True
                continue
            try:
                chunk = viewer.sock.recv(1 << 20)
            except (BlockingIOError, InterruptedError):
                continue
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                viewer.closed_by_server = True
                selector.unregister(viewer.sock)
                open_readers -= 1
                continue
            viewer.bytes += len(chunk)
            count_records(viewer, chunk)

    # The stalled ones: what is buffered for them, and whether the server closed them (EOF or a
    # reset after it).
    for viewer in viewers:
        if not viewer.stalled:
            continue
        viewer.sock.setblocking(False)
        while True:
            try:
                chunk = viewer.sock.recv(1 << 20)
            except BlockingIOError:
                break
            except ConnectionResetError:
                viewer.closed_by_server = True
                break
            if not chunk:
                viewer.closed_by_server = True
                break
            viewer.bytes += len(chunk)
            count_records(viewer, chunk)

    def summary(group):
        records = [v.records for v in group]
        # Records a viewer missed between the first and the last it saw (ids are the feed's sequence).
        gaps = [(v.last_id - v.first_id + 1) - v.records for v in group if v.first_id is not None and v.last_id is not None]
        return {
            "first_id_min": min((v.first_id for v in group if v.first_id is not None), default=None),
            "last_id_max": max((v.last_id for v in group if v.last_id is not None), default=None),
            "last_id_min": min((v.last_id for v in group if v.last_id is not None), default=None),
            "missed_max": max(gaps, default=None),
            "viewers": len(group),
            "closed_by_server": sum(1 for v in group if v.closed_by_server),
            "records_min": min(records) if records else 0,
            "records_max": max(records) if records else 0,
            "bytes_total": sum(v.bytes for v in group),
        }

    print(json.dumps({
        "reading": summary([v for v in viewers if not v.stalled]),
        "stalled": summary([v for v in viewers if v.stalled]),
    }), flush=True)
    for viewer in viewers:
        viewer.sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
