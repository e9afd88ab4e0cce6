#!/usr/bin/env python3
"""Builds the downlink golden vectors in this directory, field by field, from
the layouts in docs/wire-format.md ("Downlink multiplexing": seed custom
header, compact frame v1, registration messages) and seed 002's figure 2. It
shares no code with the crate: checksums, entries, compression decisions and
SipHash-2-4 tags are computed here independently, so
crates/core/tests/downlink_golden.rs compares two implementations.

Run: python3 crates/core/tests/vectors/downlink/make_downlink_vectors.py   (rewrites *.hex)
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def rtp(pt, seq, ts, ssrc, payload, marker=0):
    return struct.pack("!BBHII", 0x80, (marker << 7) | pt, seq, ts, ssrc) + payload


def udp(src, dst, sport, dport, data, v6=False, zero=False):
    length = 8 + len(data)
    if v6:
        pseudo = src + dst + struct.pack("!I3xB", length, 17)
    else:
        pseudo = src + dst + struct.pack("!BBH", 0, 17, length)
    u = struct.pack("!HHHH", sport, dport, length, 0) + data
    if zero:
        return u
    c = csum(pseudo + u) or 0xFFFF
    return u[:6] + struct.pack("!H", c) + u[8:]


def ipv4(src, dst, payload, tos=0xB8, ttl=64, ident=0, df=True):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, tos, 20 + len(payload), ident,
                    0x4000 if df else 0, ttl, 17, 0, src, dst)
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return h + payload


def ipv6(src, dst, payload, tclass=0xB8, hlim=64, flow=0):
    first = (6 << 28) | (tclass << 20) | flow
    return struct.pack("!IHBB16s16s", first, len(payload), 17, hlim, src, dst) + payload


# --- SipHash-2-4 (Aumasson & Bernstein), 64-bit output -----------------------
M64 = (1 << 64) - 1


def rotl(x, b):
    return ((x << b) | (x >> (64 - b))) & M64


def siphash24(key: bytes, msg: bytes) -> bytes:
    k0, k1 = struct.unpack("<QQ", key)
    v0, v1, v2, v3 = k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D, k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573

    def rnd():
        nonlocal v0, v1, v2, v3
        v0 = (v0 + v1) & M64; v1 = rotl(v1, 13); v1 ^= v0; v0 = rotl(v0, 32)
        v2 = (v2 + v3) & M64; v3 = rotl(v3, 16); v3 ^= v2
        v0 = (v0 + v3) & M64; v3 = rotl(v3, 21); v3 ^= v0
        v2 = (v2 + v1) & M64; v1 = rotl(v1, 17); v1 ^= v2; v2 = rotl(v2, 32)

    b = len(msg) << 56
    tail = len(msg) - len(msg) % 8
    for i in range(0, tail, 8):
        m = struct.unpack("<Q", msg[i:i + 8])[0]
        v3 ^= m; rnd(); rnd(); v0 ^= m
    last = msg[tail:] + b"\0" * (8 - len(msg) % 8)
    m = b | struct.unpack("<Q", last)[0]
    v3 ^= m; rnd(); rnd(); v0 ^= m
    v2 ^= 0xFF
    for _ in range(4):
        rnd()
    return struct.pack("<Q", v0 ^ v1 ^ v2 ^ v3)


def hexlines(b: bytes) -> str:
    return "\n".join(" ".join("%02x" % x for x in b[i:i + 16]) for i in range(0, len(b), 16))


def write(name, header, sections):
    with open(os.path.join(HERE, name), "w") as f:
        f.write(header.strip() + "\n")
        for comment, key, data in sections:
            f.write("\n")
            for line in comment.strip().splitlines():
                f.write("# " + line + "\n")
            f.write(key + ":\n")
            if data:
                f.write(hexlines(data) + "\n")


OUTER = bytes([198, 51, 100, 1])
STA = bytes([192, 168, 1, 5])
V6_OUTER = bytes([0x20, 0x01, 0x0D, 0xB8] + [0] * 11 + [1])
V6_STA = bytes([0xFD, 0] + [0] * 13 + [5])

# ---------------------------------------------------------------- seed layout
def seed_vector():
    # Two calls as in the seed's tests: 192.168.0.x:6666 -> 192.168.1.x:6666
    # (here 198.51.100.1:5004 -> 192.168.1.5:6600 and :6602). The seed's
    # station rebuilds TOS 0, ID 0, DF, TTL 64: originals with exactly those
    # values come back byte-identical (they arrive with TTL 65).
    a_rtp = rtp(18, 1, 160, 0xDEADBEEF, bytes([0x11] * 20))
    b_rtp = rtp(0, 7, 1120, 0x0BADCAFE, bytes([0x22] * 160))
    a = lambda ttl: ipv4(OUTER, STA, udp(OUTER, STA, 5004, 6600, a_rtp), tos=0, ttl=ttl)
    b = lambda ttl: ipv4(OUTER, STA, udp(OUTER, STA, 5006, 6602, b_rtp), tos=0, ttl=ttl)
    frame = struct.pack("!H", 2)
    for src_port, dport, r in ((5004, 6600, a_rtp), (5006, 6602, b_rtp)):
        frame += OUTER + STA + struct.pack("!HHH", len(r), src_port, dport) + r
    write("seed_two_calls.hex",
          "# Seed-002 layout: a frame of a G.729 and a G.711 packet (docs/wire-format.md, \"seed\").\n"
          "format: seed\nstreams: 192.168.1.5:6600=0 192.168.1.5:6602=1",
          [("P1 as the AP intercepts it: IPv4 198.51.100.1:5004 -> 192.168.1.5:6600, TOS 0, ID 0,\n"
            "DF, TTL 65; RTP PT 18 seq 1 ts 160 SSRC deadbeef, 20 voice bytes. 60 bytes.", "packet", a(65)),
           ("P2: G.711 to port 6602 from port 5006, RTP PT 0 seq 7, 160 voice bytes. 200 bytes.", "packet", b(65)),
           ("count 0002; P1: src c6 33 64 01, dst c0 a8 01 05, RTP length 0020 (32), sport 138c,\n"
            "dport 19c8, 32 RTP bytes; P2: same addresses, length 00ac (172), 138e, 19ca, 172 bytes.", "frame", frame),
           ("P1 rebuilt by the station (TTL 64 = seed_ttl).", "delivered", a(64)),
           ("P2 rebuilt.", "delivered", b(64))])


# -------------------------------------------------------------- compact layout
def entry(sid, ctl, payload, static=b"", ident=b"", seq_lsb=b""):
    s = bytes([sid]) if sid < 128 else struct.pack("!H", 0x8000 | sid)
    n = len(payload)
    ln = bytes([n]) if n < 128 else struct.pack("!H", 0x8000 | n)
    return s + bytes([ctl]) + ln + static + ident + seq_lsb + payload


def ctl(full, gen, r, m, ii):
    return (full << 7) | (gen << 4) | (r << 3) | (m << 2) | ii


def compact_vector():
    # Stream 1: G.729 from 198.51.100.1:5004 to 192.168.1.5:6600, IPv4 ID
    # 0x1234 + k (a sender that counts), six packets 20 ms apart, all in one
    # frame. Stream 200: IPv6 2001:db8::1:5004 -> fd00::5:7000, flow label
    # 0x12345, not RTP (first byte 0x00), UDP payload 24 bytes.
    sections = []
    frame = bytes([0x10, 0x07]) + struct.pack("!H", 0x0100)
    notes = []
    ssrc, stride = 0xDEADBEEF, 160
    ref = None
    for k in range(6):
        seq, ts, ident = 1 + k, 160 * (1 + k), 0x1234 + k
        voice = bytes([0x30 + k] * 20)
        body = rtp(18, seq, ts, ssrc, voice)
        pkt = lambda ttl: ipv4(OUTER, STA, udp(OUTER, STA, 5004, 6600, body), ttl=ttl, ident=ident)
        sections.append(("stream 1 packet %d: seq %d ts %d ID %#06x, TTL 64" % (k + 1, seq, ts, ident), "packet", pkt(64)))
        notes.append(pkt(63))
        # Compressor (docs/wire-format.md): k=0 new context (gen 1, stride
        # unknown = 0); k=1 stride learned (160): a static change, gen 2;
        # k=2, k=3 redundant fulls; k=4, k=5 compressed.
        gen = 1 if k == 0 else 2
        st_stride = 0 if k == 0 else stride
        if k < 4:
            static = bytes([0x40, 0xB8, 63]) + OUTER + struct.pack("!H", 5004)
            static += bytes([18]) + struct.pack("!IHHI", ssrc, st_stride, seq, ts)
            e = entry(1, ctl(1, gen, 1, 0, 2), voice, static, struct.pack("!H", ident))
        else:
            e = entry(1, ctl(0, gen, 1, 0, 1), voice, b"", bytes([ident & 0xFF]), bytes([seq & 0xFF]))
        frame += e
    data6 = bytes([0x00] + [0x66] * 23)
    p6 = lambda h: ipv6(V6_OUTER, V6_STA, udp(V6_OUTER, V6_STA, 5004, 7000, data6, v6=True), flow=0x12345, hlim=h)
    sections.append(("stream 200: IPv6, traffic class b8, flow label 12345, hop limit 64, not RTP", "packet", p6(64)))
    static6 = bytes([0x80, 0xB8, 63]) + bytes([0x01, 0x23, 0x45]) + V6_OUTER + struct.pack("!H", 5004)
    frame += entry(200, ctl(1, 1, 0, 0, 0), data6, static6)
    sections.append(("header 10 07 0100 (version 1, epoch 7, frame 256); entries 1-4 full (sid 01, ctl\n"
                     "92/a2: F, gen 1/2, R, ID 2 bytes; len 14; static: sflags 40 = DF, tos b8, ttl 3f,\n"
                     "src, sport, PT 12, SSRC, stride 0000/00a0, seq, ts; ID); entries 5-6 compressed\n"
                     "(ctl 29: gen 2, R, ID LSB; len 14; ID LSB; seq LSB); IPv6 entry: sid 80 c8, ctl 90,\n"
                     "len 18, static 80 b8 3f 012345 src 138c, ID none, 24 payload bytes", "frame", frame))
    for p in notes:
        sections.append(("stream 1 rebuilt: TTL 63 (the AP's forwarding decrement), checksum with it", "delivered", p))
    sections.append(("stream 200 rebuilt: hop limit 63", "delivered", p6(63)))
    write("compact_voice.hex",
          "# Compact frame v1: six G.729 packets of one stream (full, then compressed) and one IPv6 packet.\n"
          "format: compact\nepoch: 7\nfirst-seq: 256\nstreams: 192.168.1.5:6600=1 [fd00::5]:7000=200",
          sections)


def negative_vectors():
    write("compact_reserved_ctl.hex",
          "# Compact frame whose only entry has ii = 11 (reserved).\nformat: compact\nerror: reserved",
          [("header, then sid 01, ctl 03, len 00", "frame", bytes([0x10, 0, 0, 0, 1, 3, 0]))])
    write("compact_truncated.hex",
          "# Compact entry whose length points past the end.\nformat: compact\nerror: truncated",
          [("header, sid 01, ctl 00, len 05, 4 bytes", "frame", bytes([0x10, 0, 0, 0, 1, 0, 5, 1, 2, 3, 4]))])
    write("compact_bad_version.hex",
          "# Version 2 in the high nibble.\nformat: compact\nerror: bad_version",
          [("header 20 00 0000 and an entry", "frame", bytes([0x20, 0, 0, 0, 1, 0, 1, 0xAA]))])
    write("seed_trailing.hex",
          "# Seed frame with a count of 1 and a second packet's bytes after it.\nformat: seed\nerror: trailing_bytes",
          [("count 0001, one packet of 1 RTP byte, then 3 stray bytes", "frame",
            struct.pack("!H", 1) + OUTER + STA + struct.pack("!HHH", 1, 5004, 6600) + b"\x80" + b"\x01\x02\x03")])
    write("seed_zero_length.hex",
          "# Seed packet with RTP length 0.\nformat: seed\nerror: zero_length",
          [("count 0001, header with length 0000", "frame",
            struct.pack("!H", 1) + OUTER + STA + struct.pack("!HHH", 0, 5004, 6600))])


def register_vectors():
    key = bytes(range(16))
    dom = b"airpack dlreg v1"
    # register 192.168.1.5, ports 6600..6700 (the seed's example), 60 s, key id 3, seq 1e15
    body = bytes([1, 1]) + struct.pack("!HQ", 3, 10**15) + bytes([4]) + STA + bytes([2]) + struct.pack("!HHH", 6600, 6700, 60)
    msg = body + siphash24(key, dom + body)
    write("register_range.hex",
          "# Registration: register 192.168.1.5 ports 6600..6700 for 60 s (the seed's example),\n"
          "# key 000102..0f, key id 3, seq 10^15.\nformat: register\nkey: 000102030405060708090a0b0c0d0e0f",
          [("01 version, 01 register, 0003 key id, 00038d7ea4c68000 seq, 04 c0a80105 addr,\n"
            "02 range, 19c8 1a2c ports, 003c lease, then SipHash-2-4 tag (8 bytes)", "message", msg)])
    ans = bytes([1, 0x81]) + struct.pack("!HQ", 3, 42) + struct.pack("!QBHB", 10**15, 7, 60, 1) + struct.pack("!HHH", 6600, 101, 0)
    msg = ans + siphash24(key, dom + ans)
    write("register_ok.hex",
          "# Answer: register ok, reply to 10^15, epoch 7, lease 60 s, one run: ports 6600.. (101) = ids 0..\n"
          "format: register\nkey: 000102030405060708090a0b0c0d0e0f",
          [("01 81, key id 0003, seq 2a, reply-to, epoch 07, lease 003c, 1 run: 19c8 0065 0000, tag", "message", msg)])
    rep = bytes([1, 4]) + struct.pack("!HQ", 3, 10**15 + 1) + bytes([4]) + STA + struct.pack("!III", 48, 2, 1)
    rmsg = rep + siphash24(key, dom + rep)
    write("register_report.hex",
          "# Loss report: 192.168.1.5 received 48 frames, missed 2, 1 of them not recovered; key id 3, seq 10^15+1.\n"
          "format: register\nkey: 000102030405060708090a0b0c0d0e0f",
          [("01 version, 04 report, 0003 key id, 00038d7ea4c68001 seq, 04 c0a80105 addr,\n"
            "00000030 received, 00000002 missed, 00000001 unrecovered, then the tag", "message", rmsg)])
    bad = bytearray(msg)
    bad[-1] ^= 1
    write("register_bad_tag.hex",
          "# The same answer with the tag's last bit flipped.\nformat: register\n"
          "key: 000102030405060708090a0b0c0d0e0f\nerror: bad_tag",
          [("register_ok.hex with the last byte ^ 01", "message", bytes(bad))])


# SipHash self-check against the reference implementation's first vectors
# (key 00..0f, messages 00, 00 01, ...: vectors.h of the SipHash repository).
assert siphash24(bytes(range(16)), b"").hex() == "310e0edd47db6f72"
assert siphash24(bytes(range(16)), bytes(range(15))).hex() == "e545be4961ca29a1"

seed_vector()
compact_vector()
negative_vectors()
register_vectors()
print("wrote", sorted(f for f in os.listdir(HERE) if f.endswith(".hex")))
