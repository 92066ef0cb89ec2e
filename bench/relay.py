#!/usr/bin/env python3
"""A minimal relay for one Content-Length upload at a time, to measure what a proxy could reach:
it forwards the request head, then moves the body either with recv_into/sendall through a 256 KiB
buffer ("copy") or with splice(2) through a pipe, never entering user space ("splice"). Used by
bench/splice_experiment.sh; not a proxy (no parsing beyond Content-Length, loopback only).

    bench/relay.py copy|splice LISTEN_PORT TARGET_PORT
"""
import fcntl, os, socket, sys

F_SETPIPE_SZ = 1031
mode, listen_port, target_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", listen_port))
listener.listen(8)
while True:
    client, _ = listener.accept()
    head = b""
    while b"\r\n\r\n" not in head:
        data = client.recv(65536)
        if not data:
            break
        head += data
    if b"\r\n\r\n" not in head:  # a port probe (wait_port), or a client that gave up
        client.close()
        continue
    upstream = socket.create_connection(("127.0.0.1", target_port))
    head, rest = head.split(b"\r\n\r\n", 1)
    length = int([line.split(b":")[1] for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")][0])
    upstream.sendall(head + b"\r\n\r\n" + rest)
    left = length - len(rest)
    if mode == "copy":
        buffer = memoryview(bytearray(256 * 1024))
        while left > 0:
            count = client.recv_into(buffer, min(len(buffer), left))
            if count == 0:
                break
            upstream.sendall(buffer[:count])
            left -= count
    else:
        pipe_read, pipe_write = os.pipe()
        fcntl.fcntl(pipe_write, F_SETPIPE_SZ, 1 << 20)
        while left > 0:
            count = os.splice(client.fileno(), pipe_write, min(left, 1 << 20))
            if count == 0:
                break
            left -= count
            moved = 0
            while moved < count:
                moved += os.splice(pipe_read, upstream.fileno(), count - moved)
        os.close(pipe_read)
        os.close(pipe_write)
    client.sendall(upstream.recv(65536))
    client.close()
    upstream.close()
