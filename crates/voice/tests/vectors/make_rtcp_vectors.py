#!/usr/bin/env python3
"""Builds the RTCP golden vectors from RFC 3550 section 6.4 / 6.5 / 6.6 layouts
with struct.pack only (no code shared with airpack-voice). Run from this
directory: python3 make_rtcp_vectors.py; then check them with tshark:
  for f in rtcp_*.hex; do ...  (see crates/voice/tests/rtcp_golden.rs)"""
import struct

def hdr(p, count, pt, body_len):
    assert body_len % 4 == 0
    return struct.pack("!BBH", 0x80 | (0x20 if p else 0) | count, pt, (4 + body_len) // 4 - 1)

def block(ssrc, frac, cum, ext, jit, lsr, dlsr):
    return struct.pack("!IB", ssrc, frac) + (cum & 0xffffff).to_bytes(3, "big") + struct.pack("!IIII", ext, jit, lsr, dlsr)

def sdes(ssrc, cname):
    chunk = struct.pack("!I", ssrc) + bytes([1, len(cname)]) + cname + b"\0"
    chunk += b"\0" * (-len(chunk) % 4)
    return hdr(False, 1, 202, len(chunk)) + chunk

def hexdump(b):
    return "\n".join(" ".join("%02x" % x for x in b[i:i + 16]) for i in range(0, len(b), 16))

def write(name, comment, expects, data):
    with open(name, "w") as f:
        f.write(comment.strip() + "\n")
        for e in expects:
            f.write("expect: %s\n" % e)
        f.write("\npacket:\n" + hexdump(data) + "\n")

# 1. A phone's SR with one report block and its CNAME.
sr_body = struct.pack("!IIIIII", 0x5a3c9e01, 0xe8c1d2a3, 0x40000000, 0x0001f400, 250, 5000)
sr_body += block(0x0b1c2d3e, 10, 12, 0x00012345, 37, 0xd2a33000, 0x00008000)
sr = hdr(False, 1, 200, len(sr_body)) + sr_body
write("rtcp_sr_sdes.hex", """
# SR (PT 200, RC 1) from SSRC 0x5a3c9e01: NTP 0xe8c1d2a3.40000000, RTP ts 128000,
# 250 packets, 5000 octets; block about SSRC 0x0b1c2d3e: fraction 10/256,
# cumulative 12, ext. highest seq 0x00012345, jitter 37, LSR 0xd2a33000, DLSR 0x8000 (0.5 s).
# Then SDES (PT 202, SC 1): CNAME "airpack@10.9.0.1" (16 bytes, 2 nulls of padding).
""", ["sr ssrc=0x5a3c9e01 ntp=0xe8c1d2a340000000 rtp_ts=128000 packets=250 octets=5000",
      "block ssrc=0x0b1c2d3e fraction=10 cumulative=12 ext_seq=0x00012345 jitter=37 lsr=0xd2a33000 dlsr=0x00008000",
      "cname ssrc=0x5a3c9e01 value=airpack@10.9.0.1"], sr + sdes(0x5a3c9e01, b"airpack@10.9.0.1"))

# 2. A receiver-only party leaving: RR with a negative cumulative count, SDES, BYE with reason.
rr_body = struct.pack("!I", 0x00c0ffee) + block(0x5a3c9e01, 0, -1, 0x0000ffff, 0, 0, 0)
rr = hdr(False, 1, 201, len(rr_body)) + rr_body
reason = b"bye"
bye_body = struct.pack("!I", 0x00c0ffee) + bytes([len(reason)]) + reason
bye = hdr(False, 1, 203, len(bye_body)) + bye_body
write("rtcp_rr_sdes_bye.hex", """
# RR (PT 201, RC 1) from SSRC 0x00c0ffee about 0x5a3c9e01: fraction 0, cumulative -1
# (a duplicate), ext. highest seq 65535, no SR seen (LSR 0, DLSR 0).
# SDES CNAME "x"; BYE (PT 203, SC 1) for 0x00c0ffee with reason "bye".
""", ["rr ssrc=0x00c0ffee",
      "block ssrc=0x5a3c9e01 fraction=0 cumulative=-1 ext_seq=0x0000ffff jitter=0 lsr=0x00000000 dlsr=0x00000000",
      "cname ssrc=0x00c0ffee value=x",
      "bye ssrc=0x00c0ffee reason=bye"], rr + sdes(0x00c0ffee, b"x") + bye)

# 3. Negative: the SR of vector 1 alone (no CNAME).
write("rtcp_no_cname.hex", "# The SR of rtcp_sr_sdes.hex without its SDES: RFC 3550 6.1 requires a CNAME.",
      ["error=no_cname"], sr)

# 4. Negative: vector 1 with the SDES length one word too long.
bad = bytearray(sr + sdes(0x5a3c9e01, b"airpack@10.9.0.1"))
bad[len(sr) + 3] += 1
write("rtcp_length_past_end.hex", "# rtcp_sr_sdes.hex with the SDES length field one word too long.",
      ["error=length_past_end"], bytes(bad))
