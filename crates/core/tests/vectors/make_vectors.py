#!/usr/bin/env python3
"""Builds the golden vectors in this directory, field by field, from the
layouts in seed 001 (IPv4 meta header + inner IPv4 packets back to back),
draft-saldana-tsvwg-simplemux-12 section 3 (normal flavour separators) and
docs/wire-format.md (native). It shares no code with the Rust crate: the
checksums, separators and prefixes are computed here independently, so the
Rust tests (crates/core/tests/wire_golden.rs) compare two implementations.

Run: python3 crates/core/tests/vectors/make_vectors.py   (rewrites *.hex)
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def csum(data: bytes) -> int:
    """RFC 1071 Internet checksum."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ipv4(src, dst, proto, payload, dscp=46, ttl=64, ident=0):
    """20-byte IPv4 header (DF clear, no options) + payload; returns fields for comments."""
    total = 20 + len(payload)
    h = struct.pack("!BBHHHBBH4s4s", 0x45, dscp << 2, total, ident, 0, ttl, proto, 0,
                    bytes(src), bytes(dst))
    c = csum(h)
    h = h[:10] + struct.pack("!H", c) + h[12:]
    return h + payload, c


def udp4(src, dst, sport, dport, data):
    length = 8 + len(data)
    pseudo = bytes(src) + bytes(dst) + struct.pack("!BBH", 0, 17, length)
    u = struct.pack("!HHHH", sport, dport, length, 0) + data
    c = csum(pseudo + u) or 0xFFFF
    return u[:6] + struct.pack("!H", c) + u[8:]


def udp6(src, dst, sport, dport, data):
    length = 8 + len(data)
    pseudo = bytes(src) + bytes(dst) + struct.pack("!I3xB", length, 17)
    u = struct.pack("!HHHH", sport, dport, length, 0) + data
    c = csum(pseudo + u) or 0xFFFF
    return u[:6] + struct.pack("!H", c) + u[8:]


def rtp(pt, seq, ts, ssrc, payload):
    return struct.pack("!BBHII", 0x80, pt, seq, ts, ssrc) + payload


def ipv6(src, dst, nh, payload, dscp=46, hlim=64):
    tc = dscp << 2
    first = (6 << 28) | (tc << 20)
    return struct.pack("!IHBB16s16s", first, len(payload), nh, hlim, bytes(src), bytes(dst)) + payload


A = lambda *o: bytes(o)
V6 = lambda last: bytes([0xFD] + [0] * 14 + [last])

# The inner packets: voice calls, as a VoIP phone sends them.
# P1: G.729, 20 ms (20 bytes of voice): 20 IPv4 + 8 UDP + 12 RTP + 20 = 60 bytes.
P1_SRC, P1_DST = A(10, 0, 0, 1), A(10, 0, 0, 2)
P1, P1_CK = ipv4(P1_SRC, P1_DST, 17,
                 udp4(P1_SRC, P1_DST, 5004, 5006,
                      rtp(18, 1, 160, 0xDEADBEEF, bytes([0x11] * 20))), ident=0x1234)
# P2: a second G.729 call, 10.0.0.3 -> 10.0.0.4, 60 bytes.
P2_SRC, P2_DST = A(10, 0, 0, 3), A(10, 0, 0, 4)
P2, P2_CK = ipv4(P2_SRC, P2_DST, 17,
                 udp4(P2_SRC, P2_DST, 6000, 6002,
                      rtp(18, 7, 1120, 0x0BADCAFE, bytes([0x22] * 20))), ident=0x1235)
# P3: G.711, 20 ms (160 bytes of voice): 20 + 8 + 12 + 160 = 200 bytes.
P3, P3_CK = ipv4(P1_SRC, P2_DST, 17,
                 udp4(P1_SRC, P2_DST, 7000, 7002,
                      rtp(0, 100, 16000, 0x01020304, bytes([0x33] * 160))), ident=0x1236)
# P6: G.729 over IPv6, fd00::1 -> fd00::2: 40 + 8 + 12 + 20 = 80 bytes.
P6 = ipv6(V6(1), V6(2), 17,
          udp6(V6(1), V6(2), 5004, 5006, rtp(18, 1, 160, 0xFEEDF00D, bytes([0x66] * 20))))

assert len(P1) == 60 and len(P2) == 60 and len(P3) == 200 and len(P6) == 80


def hexlines(b: bytes, indent=""):
    return "\n".join(indent + " ".join("%02x" % x for x in b[i:i + 16]) for i in range(0, len(b), 16))


def packet_block(name, p, note):
    return "%s\npacket:\n%s\n" % ("\n".join("# " + l for l in note), hexlines(p))


PACKET_NOTES = {
    "P1": ["P1: IPv4 10.0.0.1 -> 10.0.0.2, TOS 0xb8 (DSCP 46 EF), ident 0x1234, TTL 64, UDP,",
           "    header checksum 0x%04x; UDP 5004 -> 5006; RTP v2 PT 18 (G.729) seq 1 ts 160" % P1_CK,
           "    SSRC 0xdeadbeef; 20 voice bytes 0x11. 60 bytes."],
    "P2": ["P2: IPv4 10.0.0.3 -> 10.0.0.4, EF, ident 0x1235, checksum 0x%04x; UDP 6000 -> 6002;" % P2_CK,
           "    RTP PT 18 seq 7 ts 1120 SSRC 0x0badcafe; 20 voice bytes 0x22. 60 bytes."],
    "P3": ["P3: IPv4 10.0.0.1 -> 10.0.0.4, EF, ident 0x1236, checksum 0x%04x; UDP 7000 -> 7002;" % P3_CK,
           "    RTP PT 0 (G.711) seq 100 ts 16000; 160 voice bytes 0x33. 200 bytes."],
    "P6": ["P6: IPv6 fd00::1 -> fd00::2, traffic class 0xb8 (EF), next header 17, hop limit 64;",
           "    UDP 5004 -> 5006; RTP PT 18 seq 1 ts 160 SSRC 0xfeedf00d; 20 bytes 0x66. 80 bytes."],
}
PKTS = {"P1": P1, "P2": P2, "P3": P3, "P6": P6}


def section(comment_lines, b):
    return "\n".join("# " + c for c in comment_lines) + "\n" + hexlines(b) + "\n"


def write(name, header, encoding, packets, parts, outer=None, decode_only=False, error=None,
          refused=None):
    """parts: list of (comment lines, bytes) making up the payload, in order.
    refused: reasons of the inner packets refused on their own, in order
    (the framing holds; `packets` are the ones delivered)."""
    payload = b"".join(p for _, p in parts)
    out = ["# " + l for l in header]
    out.append("encoding: %s" % encoding)
    if decode_only:
        out.append("decode-only: yes")
    if error:
        out.append("error: %s" % error)
    if refused:
        out.append("refused: %s" % ", ".join(refused))
    out.append("")
    for k in packets:
        out.append(packet_block(k, PKTS[k], PACKET_NOTES[k]))
    if outer is not None:
        out.append("outer:")
        out.append(outer[1])
        out.append(hexlines(outer[0]))
        out.append("")
    out.append("payload:")
    for comment, b in parts:
        out.append(section(comment, b))
    with open(os.path.join(HERE, name), "w") as f:
        f.write("\n".join(out))
    return payload


# ---- native ---------------------------------------------------------------
def native_prefix(n):
    if n < 0x80:
        return bytes([n])
    if n < 0x4000:
        return bytes([0x80 | (n >> 8), n & 0xFF])
    return bytes([0xC0, n >> 8, n & 0xFF])


write("native_voice.hex",
      ["native bundle of three IPv4 calls and one IPv6 call (docs/wire-format.md, native v1).",
       "Header: version 1 in the high nibble, mode 0 (whole packets) -> 0x10; flags 0x00.",
       "Then per packet a length prefix: 0lllllll for 1..127, 10llllll llllllll for 128..16383."],
      "native", ["P1", "P2", "P3", "P6"],
      [(["header: 0x10 = version 1 | mode 0, 0x00 = no flags"], b"\x10\x00"),
       (["P1 prefix: 60 < 128 -> one byte 0x3c"], native_prefix(60)),
       (["P1 (60 bytes)"], P1),
       (["P2 prefix: 0x3c"], native_prefix(60)),
       (["P2 (60 bytes)"], P2),
       (["P3 prefix: 200 >= 128 -> 0x80 | (200 >> 8) = 0x80, 200 & 0xff = 0xc8"], native_prefix(200)),
       (["P3 (200 bytes)"], P3),
       (["P6 prefix: 80 -> 0x50"], native_prefix(80)),
       (["P6 (80 bytes, IPv6)"], P6)])

# ---- kau (seed 001 meta packet) -------------------------------------------
kau_payload = P1 + P2 + P3
META_SRC, META_DST = A(10, 0, 0, 1), A(10, 0, 0, 9)
meta, meta_ck = ipv4(META_SRC, META_DST, 253, kau_payload, dscp=46, ttl=64, ident=1)
meta_hdr = meta[:20]
write("kau_meta_packet.hex",
      ["kau: a whole seed-001 meta packet. Seed 001, 3.3.1: \"The IP meta header is an IP",
       "version 4 header. The header length is always 20 bytes since no options are allowed",
       "and the protocol field is set to ... 253\"; figure 8: the inner IPv4 headers and",
       "payloads follow back to back, each delimited by its own Total Length.",
       "The outer header is what ip::emit_ipv4_header writes: 10.0.0.1 -> next hop 10.0.0.9,",
       "DSCP 46 (the DSCP of the packets inside), ident 1, TTL 64, DF clear, protocol 253."],
      "kau", ["P1", "P2", "P3"],
      [(["P1: Total Length 0x003c = 60 delimits it"], P1),
       (["P2: Total Length 60"], P2),
       (["P3: Total Length 0x00c8 = 200"], P3)],
      outer=(meta_hdr, "# 45 (v4, IHL 5) b8 (DSCP 46 << 2) %04x (total %d = 20 + %d) 0001 (ident) 0000 (DF clear)\n"
             "# 40 (TTL 64) fd (protocol 253) %04x (checksum) 0a000001 0a000009"
             % (20 + len(kau_payload), 20 + len(kau_payload), len(kau_payload), meta_ck)))


# ---- simplemux (normal flavour) --------------------------------------------
def smx_len(n, first):
    """Length bytes, most significant group first; first separator has 6 bits in byte 0."""
    one = 64 if first else 128
    k = 1 if n < one else 2 if n < one << 7 else 3
    groups = [(n >> (7 * (k - 1 - i))) & 0x7F for i in range(k)]
    out = []
    for i, g in enumerate(groups):
        lxt = i + 1 < k
        if i == 0 and first:
            out.append((0x40 if lxt else 0) | (g & 0x3F))  # SPB (0x80) left 0 here
        else:
            out.append((0x80 if lxt else 0) | g)
    return bytes(out)


write("simplemux_voice.hex",
      ["simplemux (normal flavour), as airpack writes it: SPB = 0, so every separator carries",
       "a Protocol byte (4 = IPv4, 41 = IPv6). draft-saldana-tsvwg-simplemux-12 section 3.",
       "First separator: SPB(1) LXT(1) LEN(6) [LXT(1) LEN(7)]* Protocol(8).",
       "Non-first: LXT(1) LEN(7) [LXT(1) LEN(7)]* Protocol(8). Length bits most significant first."],
      "simplemux", ["P1", "P2", "P3", "P6"],
      [(["first separator, P1: 60 < 64 -> SPB 0 LXT 0 LEN 60 = 0x3c; Protocol 0x04"], smx_len(60, True) + b"\x04"),
       (["P1"], P1),
       (["non-first, P2: 60 < 128 -> LXT 0 LEN 60 = 0x3c; Protocol 0x04"], smx_len(60, False) + b"\x04"),
       (["P2"], P2),
       (["non-first, P3: 200 = 1*128 + 72 -> 0x81 (LXT 1, 1), 0x48 (LXT 0, 72); Protocol 0x04"],
        smx_len(200, False) + b"\x04"),
       (["P3"], P3),
       (["non-first, P6: 80 -> 0x50; Protocol 0x29 (41, IPv6)"], smx_len(80, False) + b"\x29"),
       (["P6"], P6)])

write("simplemux_first_long.hex",
      ["simplemux: a first packet of 200 bytes needs two length bytes in the first separator",
       "(6 bits hold 0..63): 200 = 1*128 + 72 -> 0x41 (SPB 0, LXT 1, LEN 000001), 0x48."],
      "simplemux", ["P3", "P1"],
      [(["first separator, P3: 0x41 0x48; Protocol 0x04"], smx_len(200, True) + b"\x04"),
       (["P3"], P3),
       (["non-first, P1: 0x3c; Protocol 0x04"], smx_len(60, False) + b"\x04"),
       (["P1"], P1)])

write("simplemux_spb1.hex",
      ["simplemux as a peer with the single-protocol bit set sends it (airpack's writer",
       "always uses SPB = 0, so this vector is decode-only): Protocol only in the first",
       "separator; the non-first separator is the length alone."],
      "simplemux", ["P1", "P3"],
      [(["first separator: SPB 1, LXT 0, LEN 60 -> 0x80 | 0x3c = 0xbc; Protocol 0x04"],
        bytes([0x80 | smx_len(60, True)[0]]) + b"\x04"),
       (["P1"], P1),
       (["non-first, P3: 0x81 0x48, no Protocol byte"], smx_len(200, False)),
       (["P3"], P3)],
      decode_only=True)

# ---- negative vectors: decode must fail with the named reason ----------------
write("native_bad_version.hex",
      ["native with version 2 in the header: must be refused as bad_version."],
      "native", [],
      [(["header 0x20 0x00: version 2"], b"\x20\x00"), (["prefix 60"], b"\x3c"), (["P1"], P1)],
      error="bad_version")
write("kau_trailing_garbage.hex",
      ["kau payload with 4 bytes after the last packet (too few for any IPv4 header)."],
      "kau", [],
      [(["P1"], P1), (["garbage"], b"\xde\xad\xbe\xef")],
      error="trailing_garbage")
write("simplemux_overlong.hex",
      ["simplemux first separator with length 60 spelled in two bytes (0x40 0x3c):",
       "not the shortest form, refused as overlong."],
      "simplemux", [],
      [(["0x40 0x3c, Protocol 4"], b"\x40\x3c\x04"), (["P1"], P1)],
      error="overlong")
write("kau_nested.hex",
      ["kau payload whose first inner packet is itself a meta packet (protocol 253): that",
       "packet is refused as nested, the framing holds, P1 after it is delivered."],
      "kau", ["P1"],
      [(["the seed-001 meta packet from kau_meta_packet.hex, as an inner packet"], meta),
       (["P1"], P1)],
      decode_only=True, refused=["nested"])

# ---- partial damage: the framing holds, one inner packet fails its own checks --
P2_BAD = bytearray(P2)
P2_BAD[8] = 0x3f  # TTL 64 -> 63 without fixing the checksum
write("native_partial.hex",
      ["native bundle whose second packet has a wrong IPv4 header checksum (TTL changed",
       "without updating it): only that packet is refused (bad_ipv4_checksum); P1 and P3",
       "are delivered."],
      "native", ["P1", "P3"],
      [(["header: version 1, mode 0; flags 0"], b"\x10\x00"),
       (["prefix 60"], native_prefix(60)), (["P1"], P1),
       (["prefix 60"], native_prefix(60)), (["P2 with TTL 63 and its TTL-64 checksum"], bytes(P2_BAD)),
       (["prefix 200: 0x80 0xc8"], native_prefix(200)), (["P3"], P3)],
      decode_only=True, refused=["bad_ipv4_checksum"])
write("simplemux_mislabelled.hex",
      ["simplemux bundle as the published Simplemux code sends it: the IPv6 packet P6 is",
       "labelled Protocol 4, not 41. The version nibble decides (6): all three packets are",
       "delivered."],
      "simplemux", ["P1", "P6", "P2"],
      [(["first separator, P1: 0x3c; Protocol 0x04"], smx_len(60, True) + b"\x04"),
       (["P1"], P1),
       (["non-first, P6: 80 -> 0x50; Protocol 0x04 (sic: IPv6 labelled as IPv4)"],
        smx_len(80, False) + b"\x04"),
       (["P6"], P6),
       (["non-first, P2: 0x3c; Protocol 0x04"], smx_len(60, False) + b"\x04"),
       (["P2"], P2)],
      decode_only=True)
print("vectors written to", HERE)
