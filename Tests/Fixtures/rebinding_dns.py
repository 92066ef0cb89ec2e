#!/usr/bin/env python3
"""A tiny DNS server for the DNS-rebinding tests (EgressDNSTests): UDP on loopback, TTL 0.

    rebinding_dns.py PLAN.json

PLAN: {"listen": "127.0.0.153", "names": {"rebind.test": ["127.0.0.2", "127.0.0.3"], ...}}

Each A query for a listed name is answered with the next address of its list, cycling (so a name
answers 127.0.0.2, then 127.0.0.3, then 127.0.0.2...). AAAA and other types for a listed name get
an empty NOERROR answer, unlisted names NXDOMAIN. The server binds port 0 and prints
`port N` on stdout once it is ready, then `A NAME ADDRESS` for every A answer it gives (flushed),
so a test can see which address each lookup got. It runs until killed.
"""
import json
import socket
import struct
import sys

from dns_wire import read_question, reply


def answer(packet, names, turns):
    question = read_question(packet)
    if question is None:
        return None
    ident, flags, name, qtype, raw = question
    addresses = names.get(name)
    if addresses is None or qtype != 1:
        return reply(ident, flags, raw, qtype, None if addresses is None else []), None
    turn = turns.get(name, 0)
    turns[name] = turn + 1
    address = addresses[turn % len(addresses)]
    return reply(ident, flags, raw, qtype, [address]), f"A {name} {address}"


def main():
    with open(sys.argv[1]) as handle:
        plan = json.load(handle)
    names = {name.lower(): list(addresses) for name, addresses in plan["names"].items()}
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind((plan.get("listen", "127.0.0.153"), 0))
    print(f"port {server.getsockname()[1]}", flush=True)
    turns = {}
    while True:
        packet, peer = server.recvfrom(4096)
        try:
            reply = answer(packet, names, turns)
        except (IndexError, struct.error):
            continue
        if reply is None:
            continue
        data, line = reply
        server.sendto(data, peer)
        if line:
            print(line, flush=True)


if __name__ == "__main__":
    main()
