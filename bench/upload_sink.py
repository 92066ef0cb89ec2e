#!/usr/bin/env python3
"""Loopback HTTP upload sink for the benchmark: reads a Content-Length or chunked body as fast as
the socket allows (recv_into, no parsing of the data) and answers 200 with the byte count.
Chunked bodies in the benchmark are all zero bytes, so the terminator `0\r\n\r\n` can only be the
last chunk; the sink only checks the tail."""
import socket, sys, threading

def serve(conn):
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    with conn:
        head = b""
        while b"\r\n\r\n" not in head:
            data = conn.recv(65536)
            if not data:
                return
            head += data
        head, rest = head.split(b"\r\n\r\n", 1)
        lower = head.lower()
        total = len(rest)
        if b"transfer-encoding: chunked" in lower:
            tail = bytes(rest[-5:])
            while not tail.endswith(b"0\r\n\r\n"):
                n = conn.recv_into(view)
                if n == 0:
                    return
                total += n
                tail = (tail + bytes(view[max(0, n - 5):n]))[-5:]
        else:
            length = int([l.split(b":")[1] for l in lower.split(b"\r\n") if l.startswith(b"content-length:")][0])
            while total < length:
                n = conn.recv_into(view)
                if n == 0:
                    return
                total += n
        body = str(total).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))

listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", int(sys.argv[1])))
listener.listen(64)
while True:
    connection, _ = listener.accept()
    threading.Thread(target=serve, args=(connection,), daemon=True).start()
