#!/usr/bin/env python3
"""An HTTP/2 origin serving bulk bodies, for the memory tests (the `h2` library: an independent implementation).

    h2_bulk_origin.py [CERT KEY]

With CERT and KEY it speaks TLS with ALPN h2 only; without, h2c with prior knowledge. It prints its
port on the first line, then serves every connection on a thread of its own: a GET of /bytes/N is
answered 200 with N bytes, byte i being i % 251 (a prime: a reordered, lost or repeated frame of
any power-of-two size changes the hash), sent as fast as the proxy's flow-control windows allow.
"""
import select
import socket
import ssl
import sys
import threading

import h2.config
import h2.connection
import h2.events
import h2.exceptions

PATTERN = bytes(i % 251 for i in range(251 * 1024))


def body_slice(offset, count):
    """Bytes offset..<offset+count of the pattern."""
    start = offset % 251
    out = bytearray()
    while len(out) < count:
        take = min(count - len(out), len(PATTERN) - start)
        out += PATTERN[start:start + take]
        start = 0
    return bytes(out)


def serve(sock):
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
    conn.initiate_connection()
    sending = {}  # stream id -> [offset, total]
    try:
        sock.sendall(conn.data_to_send())
        while True:
            # Send what the windows allow, then wait for the peer.
            for stream_id in list(sending):
                offset, total = sending[stream_id]
                while offset < total:
                    window = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
                    if window <= 0:
                        break
                    count = min(window, total - offset)
                    conn.send_data(stream_id, body_slice(offset, count), end_stream=offset + count == total)
                    offset += count
                    outgoing = conn.data_to_send()
                    if outgoing:
                        sock.sendall(outgoing)
                if offset >= total:
                    del sending[stream_id]
                else:
                    sending[stream_id] = [offset, total]
            select.select([sock], [], [], 1.0)
            try:
                data = sock.recv(65536)
            except (ssl.SSLWantReadError, BlockingIOError):
                continue
            if not data:
                return
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    path = dict(event.headers).get(":path", "/")
                    size = int(path.rsplit("/", 1)[-1]) if path.startswith("/bytes/") else 0
                    conn.send_headers(event.stream_id, [(":status", "200"), ("content-length", str(size))], end_stream=size == 0)
                    if size:
                        sending[event.stream_id] = [0, size]
                elif isinstance(event, h2.events.StreamReset):
                    sending.pop(event.stream_id, None)
            outgoing = conn.data_to_send()
            if outgoing:
                sock.sendall(outgoing)
    except (OSError, h2.exceptions.ProtocolError, ssl.SSLError):
        return
    finally:
        sock.close()


def main():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    context = None
    if len(sys.argv) >= 3:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(sys.argv[1], sys.argv[2])
        context.set_alpn_protocols(["h2"])
    print(listener.getsockname()[1], flush=True)
    while True:
        sock, _ = listener.accept()
        if context is not None:
            try:
                sock = context.wrap_socket(sock, server_side=True)
            except (OSError, ssl.SSLError):
                sock.close()
                continue
        threading.Thread(target=serve, args=(sock,), daemon=True).start()


if __name__ == "__main__":
    main()
