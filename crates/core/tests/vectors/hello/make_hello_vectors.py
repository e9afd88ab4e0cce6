#!/usr/bin/env python3
"""Builds the hello golden vectors in this directory, field by field, from the
layout in docs/wire-format.md ("Hello"). It shares no code with the Rust crate:
SipHash-2-4 is implemented here again (checked against the SipHash paper's
appendix A value before use), so crates/core/tests/hello_golden.rs compares
two implementations.

Run: python3 crates/core/tests/vectors/hello/make_hello_vectors.py   (rewrites *.hex)
"""
import ipaddress
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
M = (1 << 64) - 1


def rotl(x, b):
    return ((x << b) | (x >> (64 - b))) & M


def siphash24(key: bytes, msg: bytes) -> bytes:
    k0, k1 = struct.unpack("<QQ", key)
    v0, v1 = k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D
    v2, v3 = k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573

    def rnd():
        nonlocal v0, v1, v2, v3
        v0 = (v0 + v1) & M; v1 = rotl(v1, 13) ^ v0; v0 = rotl(v0, 32)
        v2 = (v2 + v3) & M; v3 = rotl(v3, 16) ^ v2
        v0 = (v0 + v3) & M; v3 = rotl(v3, 21) ^ v0
        v2 = (v2 + v1) & M; v1 = rotl(v1, 17) ^ v2; v2 = rotl(v2, 32)

    full = len(msg) - len(msg) % 8
    blocks = [struct.unpack("<Q", msg[i:i + 8])[0] for i in range(0, full, 8)]
    last = (len(msg) & 0xFF) << 56
    for i, b in enumerate(msg[full:]):
        last |= b << (8 * i)
    for m in blocks + [last]:
        v3 ^= m; rnd(); rnd(); v0 ^= m
    v2 ^= 0xFF
    for _ in range(4):
        rnd()
    return struct.pack("<Q", v0 ^ v1 ^ v2 ^ v3)


assert siphash24(bytes(range(16)), bytes(range(15))) == struct.pack("<Q", 0xA129CA6149BE45E5)

DOMAIN = b"airpack hello v1"


def header(sender, seq, interval_ms, encodings, count, auth, flags_extra=0):
    flags = (0x01 if auth else 0) | flags_extra
    return struct.pack("!BBHQQBB", 1, flags, interval_ms, sender, seq, encodings, count)


def entry(nid, addr, rx, maxb, radio=None):
    a = ipaddress.ip_address(addr)
    kind = (4 if a.version == 4 else 6) | (0x80 if radio else 0)
    b = struct.pack("!QBBH", nid, kind, rx, maxb) + a.packed
    if radio:
        b += struct.pack("!bb", *radio)
    return b


def hexlines(b, indent=""):
    return "\n".join(indent + " ".join("%02x" % x for x in b[i:i + 16]) for i in range(0, len(b), 16))


def vector(name, comment, fields, parts, trailer=None, extra_lines=()):
    out = ["# " + line for line in comment.strip().splitlines()]
    out.append("")
    for k, v in fields:
        out.append("%s: %s" % (k, v))
    out.extend(extra_lines)
    out.append("")
    out.append("hello:")
    for c, b in parts:
        out.append("# " + c)
        out.append(hexlines(b))
    if trailer:
        c, b = trailer
        out.append("# " + c)
        out.append(hexlines(b))
    with open(os.path.join(HERE, name), "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    # 1. Two IPv4 neighbours, one with radio figures; no key.
    e1 = entry(0x1111111111111111, "10.0.0.2", 255, 1500)
    e2 = entry(0x2222222222222222, "10.0.0.3", 204, 440, radio=(-71, -95))
    h = header(0x0102030405060708, 42, 1000, 0x05, 2, False)
    vector("hello_ipv4.hex",
           "Hello from node 0102030405060708, seq 42, interval 1000 ms, accepts native +\n"
           "simplemux (0x05), hearing two IPv4 neighbours: 10.0.0.2 (all hellos received,\n"
           "wants bundles up to 1500 bytes) and 10.0.0.3 (204/255 = 80 % received, 440 bytes,\n"
           "signal -71 dBm, noise -95 dBm). No key.",
           [("sender", "0102030405060708"), ("seq", "42"), ("interval_ms", "1000"), ("encodings", "05"),
            ("entry", "1111111111111111 10.0.0.2 255 1500 -"),
            ("entry", "2222222222222222 10.0.0.3 204 440 -71/-95")],
           [("header: version 1, flags 0, interval 0x03e8, sender, seq 0x2a, encodings 0x05, count 2", h),
            ("entry 1: id, kind 0x04 (IPv4), rx 0xff, max 0x05dc, 10.0.0.2", e1),
            ("entry 2: id, kind 0x84 (IPv4 + radio), rx 0xcc, max 0x01b8, 10.0.0.3, -71 (0xb9), -95 (0xa1)", e2)])

    # 2. IPv6 + IPv4 neighbour, authenticated with key 00..0f, key id 1.
    key = bytes(range(16))
    e1 = entry(0xAAAAAAAAAAAAAAAA, "fe80::2", 230, 1400, radio=(-60, -92))
    e2 = entry(0xBBBBBBBBBBBBBBBB, "192.168.1.7", 128, 0)
    h = header(0xFEEDFACECAFEBEEF, 1732406400000000, 1000, 0x07, 2, True)
    signed = h + e1 + e2 + bytes([1])
    t = siphash24(key, DOMAIN + signed)
    vector("hello_auth.hex",
           "Authenticated hello (key 000102..0f, key id 1): node feedfacecafebeef, seq\n"
           "1732406400000000 (microseconds since the epoch at start-up), accepts native, kau\n"
           "and simplemux; hears fe80::2 (230/255, 1400 bytes, -60/-92 dBm) and 192.168.1.7\n"
           "(128/255, max 0 = send me no bundles). Tag = SipHash-2-4(key, \"airpack hello v1\" ||\n"
           "every byte before the tag, key id included), written little-endian.",
           [("sender", "feedfacecafebeef"), ("seq", "1732406400000000"), ("interval_ms", "1000"),
            ("encodings", "07"),
            ("entry", "aaaaaaaaaaaaaaaa fe80::2 230 1400 -60/-92"),
            ("entry", "bbbbbbbbbbbbbbbb 192.168.1.7 128 0 -"),
            ("key", key.hex()), ("key_id", "1"), ("verify", "yes")],
           [("header: flags 0x01 (auth trailer)", h),
            ("entry 1: kind 0x86 (IPv6 + radio)", e1),
            ("entry 2: kind 0x04", e2)],
           trailer=("trailer: key id 1, tag", bytes([1]) + t))

    # 3. First hello of a node that hears nobody.
    h = header(0x0000000000000001, 0, 500, 0x01, 0, False)
    vector("hello_empty.hex",
           "First hello of node 1: seq 0, interval 500 ms, native only, no neighbours.",
           [("sender", "0000000000000001"), ("seq", "0"), ("interval_ms", "500"), ("encodings", "01")],
           [("header only", h)])

    # 4. The authenticated hello with one tag byte changed: parses, fails verification.
    bad = bytearray(bytes([1]) + t)
    bad[-1] ^= 0x01
    vector("hello_bad_tag.hex",
           "hello_auth.hex with the last tag byte flipped: parses, must fail verification.",
           [("sender", "feedfacecafebeef"), ("seq", "1732406400000000"), ("interval_ms", "1000"),
            ("encodings", "07"),
            ("entry", "aaaaaaaaaaaaaaaa fe80::2 230 1400 -60/-92"),
            ("entry", "bbbbbbbbbbbbbbbb 192.168.1.7 128 0 -"),
            ("key", key.hex()), ("key_id", "1"), ("verify", "no"), ("decode-only", "yes")],
           [("header", header(0xFEEDFACECAFEBEEF, 1732406400000000, 1000, 0x07, 2, True)),
            ("entry 1", e1), ("entry 2", e2)],
           trailer=("trailer with a damaged tag", bytes(bad)))

    # 5-7. Negative vectors.
    h = header(0x0102030405060708, 1, 1000, 0x01, 0, False, flags_extra=0x04)
    vector("hello_reserved_flag.hex", "A must-understand flag bit (0x04) this version does not know.",
           [("error", "unsupported")], [("header, flags 0x04", h)])
    h = header(0x0102030405060708, 1, 1000, 0x01, 1, False)
    vector("hello_trailing.hex", "One IPv4 entry and one byte after it.",
           [("error", "trailing_garbage")],
           [("header, count 1", h), ("entry", entry(5, "10.0.0.9", 255, 1500)), ("extra byte", b"\x00")])
    h = header(0x0102030405060708, 1, 1000, 0x01, 2, False)
    vector("hello_count_short.hex", "The count says 2 entries; one is there.",
           [("error", "truncated")],
           [("header, count 2", h), ("entry", entry(5, "10.0.0.9", 255, 1500))])
    h = header(0x0102030405060708, 1, 0, 0x01, 0, False)
    vector("hello_zero_interval.hex", "Interval 0 ms.", [("error", "bad_field")], [("header", h)])


if __name__ == "__main__":
    main()
