#!/usr/bin/env python3
"""TCP golden vectors for the gateway's TCP Improvement Module
(crates/core/src/gateway/tcp.rs), built with struct and a local RFC 1071
checksum only (no code shared with the crate). Run from this directory.
Each checksum was confirmed by tshark (-o tcp.check_checksum:TRUE)."""
import struct

def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return (~s) & 0xffff

def tcp(sport, dport, seq, ack, flags, win, opts, payload):
    opts += b"\0" * (-len(opts) % 4)
    off = (20 + len(opts)) // 4
    return struct.pack("!HHIIHHHH", sport, dport, seq, ack, (off << 12) | flags, win, 0, 0) + opts + payload

def v4(src, dst, seg, ecn=0, frag=0x4000):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, (46 << 2 if False else 0) | ecn, 20 + len(seg), 0x1c46, frag, 64, 6, 0, bytes(src), bytes(dst))
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    ph = bytes(src) + bytes(dst) + struct.pack("!BBH", 0, 6, len(seg))
    c = csum(ph + seg)
    return h + seg[:16] + struct.pack("!H", c) + seg[18:]

def v6(src, dst, seg, nh=6, ext=b""):
    h = struct.pack("!IHBB16s16s", 0x60000000, len(ext) + len(seg), nh, 64, bytes(src), bytes(dst))
    ph = bytes(src) + bytes(dst) + struct.pack("!IxxxB", len(seg), 6)
    c = csum(ph + seg)
    return h + ext + seg[:16] + struct.pack("!H", c) + seg[18:]

def hexdump(b):
    return "\n".join(" ".join("%02x" % x for x in b[i:i + 16]) for i in range(0, len(b), 16))

def write(name, comment, expects, data, rewritten=None):
    with open(name, "w") as f:
        f.write(comment.strip() + "\n")
        for e in expects:
            f.write("expect: %s\n" % e)
        f.write("\npacket:\n" + hexdump(data) + "\n")
        if rewritten is not None:
            f.write("\nrewritten:\n" + hexdump(rewritten) + "\n")

A4, B4 = [198, 51, 100, 7], [10, 9, 0, 2]
A6 = [0x20, 0x01, 0x0d, 0xb8] + [0] * 11 + [7]
B6 = [0xfd, 0x00] + [0] * 13 + [2]

# 1. A Linux client SYN (ECN setup: ECE|CWR), IPv4.
linux = bytes([2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0x00, 0x0f, 0x42, 0x40, 0, 0, 0, 0, 1, 3, 3, 7])
syn = v4(B4, A4, tcp(50000, 443, 0xfffffff0, 0, 0x0c2, 64240, linux, b""))
write("tcp_v4_syn.hex", """
# IPv4 10.9.0.2 -> 198.51.100.7, TCP 50000 -> 443, SYN|ECE|CWR, seq 0xfffffff0 (wraps soon),
# window 64240, options: MSS 1460, SACK-permitted, timestamps TSval 1000000 TSecr 0, NOP, WS 7.
""", ["ip=4 sport=50000 dport=443 seq=4294967280 ack=0 flags=0x0c2 window=64240 header_len=40 payload=0",
      "options mss=1460 wscale=7 sack_permitted=true sack=[] ts=1000000,0 unknown=0"], syn)

# 2. IPv6 ACK from the client with two SACK blocks and an unknown option; rewritten to window 46.
opts = bytes([1, 1, 5, 18]) + struct.pack("!IIII", 1000, 2400, 4000, 5400) + bytes([30, 4, 0xab, 0xcd])
seg = tcp(50000, 443, 101, 1000, 0x010, 501, opts, b"")
ack = v6(B6, A6, seg)
seg2 = seg[:14] + struct.pack("!H", 46) + seg[16:]
write("tcp_v6_ack_sack.hex", """
# IPv6 fd00::2 -> 2001:db8::7, TCP 50000 -> 443, ACK 1000, window 501 (scaled by the
# client's shift), options NOP NOP SACK [1000,2400) [4000,5400), unknown kind 30 length 4.
# `rewritten`: the same packet with the window set to 46 and the checksum recomputed.
""", ["ip=6 sport=50000 dport=443 seq=101 ack=1000 flags=0x010 window=501 header_len=44 payload=0",
      "options mss=- wscale=- sack_permitted=false sack=[(1000, 2400), (4000, 5400)] ts=- unknown=1"],
      ack, v6(B6, A6, seg2))

# 3. IPv6 with a hop-by-hop header (PadN) before TCP, data, rewritten to window 0.
seg = tcp(443, 50000, 7, 9, 0x018, 65535, b"", b"hello")
hbh = bytes([6, 0, 1, 4, 0, 0, 0, 0])
pkt = v6(A6, B6, seg, nh=0, ext=hbh)
write("tcp_v6_hbh_data.hex", """
# IPv6 2001:db8::7 -> fd00::2 with a hop-by-hop options header (PadN 4), TCP 443 -> 50000,
# PSH|ACK, 5 bytes "hello"; `rewritten`: window 0.
""", ["ip=6 sport=443 dport=50000 seq=7 ack=9 flags=0x018 window=65535 header_len=20 payload=5",
      "options mss=- wscale=- sack_permitted=false sack=[] ts=- unknown=0"],
      pkt, v6(A6, B6, seg[:14] + struct.pack("!H", 0) + seg[16:], nh=0, ext=hbh))

# 4. Negative: MSS option of length 3.
write("tcp_bad_mss.hex", "# IPv4 SYN whose MSS option says length 3.", ["error=BadOption(2)"],
      v4(B4, A4, tcp(50000, 443, 1, 0, 0x002, 1000, bytes([2, 3, 5, 1]), b"")))

# 5. Negative: an IPv4 fragment (MF set).
write("tcp_v4_fragment.hex", "# IPv4 first fragment (MF) of a TCP segment: never touched.", ["error=Fragment"],
      v4(B4, A4, tcp(50000, 443, 1, 1, 0x010, 1000, b"", b"xxxxxxxx"), frag=0x2000))
