#!/usr/bin/env python3
"""Sends N keep-alive GETs for /1k through a forward proxy on one connection, one at a time, and
checks each answer is a 200 (used by bench/cost.sh, where the proxy runs under valgrind)."""
import socket, sys

proxy_port, origin_port, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = socket.create_connection(("127.0.0.1", proxy_port))
request = (f"GET http://127.0.0.1:{origin_port}/1k HTTP/1.1\r\nHost: 127.0.0.1:{origin_port}\r\n"
           f"User-Agent: cost\r\nAccept: */*\r\n\r\n").encode()
buffered = b""
for _ in range(n):
    s.sendall(request)
    while True:
        end = buffered.find(b"\r\n\r\n")
        if end >= 0:
            head = buffered[:end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            if len(buffered) >= end + 4 + length:
                if not head.startswith("HTTP/1.1 200"):
                    sys.exit("unexpected response: " + head.split("\r\n")[0])
                buffered = buffered[end + 4 + length:]
                break
        chunk = s.recv(65536)
        if not chunk:
            sys.exit("the proxy closed the connection")
        buffered += chunk
