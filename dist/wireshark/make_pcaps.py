#!/usr/bin/env python3
"""Writes the golden pcaps of the Wireshark dissector (dist/wireshark/pcaps/)
from the golden vectors of the wire formats (crates/core/tests/vectors/*.hex),
so the dissector is checked on the exact bytes the Rust decoders are.

Each vector NAME.hex becomes pcaps/NAME.pcap (link type raw IP, 101) with two
frames carrying its payload:
  1. raw transport: IPv4 protocol 253, 10.0.0.1 -> 10.0.0.9 (for a vector
     with an `outer:` section, that header exactly: kau's meta header);
  2. UDP transport: IPv4/UDP 10.0.0.1:4150 -> 10.0.0.9:4150 (daemon.udp_port).

Hellos (vectors/hello/*.hex, section `hello:`) become pcaps/hello/NAME.pcap: the
hello as UDP 4151 to 224.0.0.151 (from 10.0.0.1) and to ff02::151 (from fe80::1).
Downlink vectors (vectors/downlink/*.hex) become pcaps/downlink/NAME.pcap: a
`frame:` as UDP 10.0.0.1:8888 -> 225.0.0.10:8888, a registration `message:` as
UDP 10.0.0.9:8889 -> 10.0.0.1:8889 (the dissector's default registration port).

Run: python3 dist/wireshark/make_pcaps.py [OUTDIR]   (default OUTDIR: pcaps/ here;
deterministic, so the test regenerates them into a temporary OUTDIR and compares)
Checked by: cargo test -p airpack --test wireshark_dissector
"""
import glob
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS = os.path.join(HERE, "..", "..", "crates", "core", "tests", "vectors")
UDP_PORT = 4150


def csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ipv4_header(proto: int, payload_len: int, ident: int, src=(10, 0, 0, 1),
                dst=(10, 0, 0, 9)) -> bytes:
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 46 << 2, 20 + payload_len, ident, 0, 64, proto, 0,
                    bytes(src), bytes(dst))
    return h[:10] + struct.pack("!H", csum(h)) + h[12:]


def sections(path):
    """The hex bytes of each `key:` section of a vector file."""
    out, key = {}, None
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.endswith(":") and " " not in line:
            key = line[:-1]
            out.setdefault(key, []).append(b"")
            continue
        if ":" in line:
            continue  # encoding: / error: / refused: / decode-only:
        out[key][-1] += bytes.fromhex(line)
    return out


def pcap(frames):
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101)
    for i, f in enumerate(frames):
        out += struct.pack("<IIII", 1_700_000_000 + i, 0, len(f), len(f)) + f
    return out


def udp4(src, dst, sport, dport, payload: bytes) -> bytes:
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    return ipv4_header(17, len(udp), 3, src, dst) + udp


def udp6(src: bytes, dst: bytes, sport, dport, payload: bytes) -> bytes:
    n = 8 + len(payload)
    udp = struct.pack("!HHHH", sport, dport, n, 0) + payload
    c = csum(src + dst + struct.pack("!IxxxB", n, 17) + udp) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", c) + udp[8:]
    return struct.pack("!IHBB", 0x60000000, n, 17, 1) + src + dst + udp


def write(outdir, sub, path, frames):
    os.makedirs(os.path.join(outdir, sub), exist_ok=True)
    name = os.path.join(sub, os.path.basename(path)[:-4] + ".pcap")
    with open(os.path.join(outdir, name), "wb") as f:
        f.write(pcap(frames))
    print("%s: %d frames" % (name, len(frames)))


def hellos_and_downlink(outdir):
    ll1 = bytes.fromhex("fe800000000000000000000000000001")
    grp6 = bytes.fromhex("ff020000000000000000000000000151")
    for path in sorted(glob.glob(os.path.join(VECTORS, "hello", "*.hex"))):
        h = sections(path)["hello"][0]
        write(outdir, "hello", path, [udp4((10, 0, 0, 1), (224, 0, 0, 151), 4151, 4151, h),
                                      udp6(ll1, grp6, 4151, 4151, h)])
    for path in sorted(glob.glob(os.path.join(VECTORS, "downlink", "*.hex"))):
        s = sections(path)
        if "frame" in s:
            f = udp4((10, 0, 0, 1), (225, 0, 0, 10), 8888, 8888, s["frame"][0])
        else:
            f = udp4((10, 0, 0, 9), (10, 0, 0, 1), 8889, 8889, s["message"][0])
        write(outdir, "downlink", path, [f])


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "pcaps")
    os.makedirs(outdir, exist_ok=True)
    for path in sorted(glob.glob(os.path.join(VECTORS, "*.hex"))):
        s = sections(path)
        payload = s["payload"][0]
        if "outer" in s:
            raw = s["outer"][0] + payload
        else:
            raw = ipv4_header(253, len(payload), 1) + payload
        udp = struct.pack("!HHHH", UDP_PORT, UDP_PORT, 8 + len(payload), 0) + payload
        udp = ipv4_header(17, len(udp), 2) + udp
        name = os.path.basename(path)[:-4] + ".pcap"
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(pcap([raw, udp]))
        print("%s: %d payload bytes" % (name, len(payload)))
    hellos_and_downlink(outdir)


if __name__ == "__main__":
    main()
