"""DNS on the wire for the test fixtures' small servers (RFC 1035 §4): one question read, one
answer written. rebinding_dns.py and netns_run.py answer from their own tables with it."""
import socket
import struct


def read_question(packet):
    """(ident, flags, name, qtype, question bytes) of a one-question query, or None."""
    if len(packet) < 12:
        return None
    ident, flags, qdcount = struct.unpack("!HHH", packet[:6])
    if qdcount != 1:
        return None
    labels, offset = [], 12
    while offset < len(packet) and packet[offset] != 0:
        length = packet[offset]
        labels.append(packet[offset + 1:offset + 1 + length].decode("ascii", "replace"))
        offset += 1 + length
    end = offset + 5
    if end > len(packet):
        return None
    qtype = struct.unpack("!H", packet[offset + 1:offset + 3])[0]
    return ident, flags, ".".join(labels).lower().rstrip("."), qtype, packet[12:end]


def reply(ident, flags, question, qtype, addresses):
    """The answer to `question`: NXDOMAIN when `addresses` is None, else each address of the
    question's family (A: IPv4, AAAA: IPv6) as a record with TTL 0."""
    recursion_desired = flags & 0x0100
    if addresses is None:
        return struct.pack("!HHHHHH", ident, 0x8183 | recursion_desired, 1, 0, 0, 0) + question
    family = {1: socket.AF_INET, 28: socket.AF_INET6}.get(qtype)
    records = [a for a in addresses if family and (":" in a) == (family == socket.AF_INET6)]
    body = question
    for address in records:
        raw = socket.inet_pton(family, address)
        body += struct.pack("!HHHIH", 0xC00C, qtype, 1, 0, len(raw)) + raw
    return struct.pack("!HHHHHH", ident, 0x8180 | recursion_desired, 1, len(records), 0, 0) + body
