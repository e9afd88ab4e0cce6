//! The `native` encoding: airpack's own versioned bundle format.
//!
//! Owns the byte layout of a native bundle payload (what follows the outer
//! IP/UDP header) and nothing else. Must not touch: the outer header and its
//! DSCP (the transport writes those; the engine says which DSCP), queues, I/O.
//! Full description with diagrams: `docs/wire-format.md`.
//!
//! ```text
//!  0                   1
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5
//! +-------+-------+-------+-------+
//! |version| mode  | crit  | info  |   2-byte header
//! +-------+-------+-------+-------+
//! | length prefix (1, 2 or 3 B) | inner IPv4/IPv6 packet ... | (repeated)
//! ```
//!
//! * `version` = 1 (other values: [`DecodeError::BadVersion`]).
//! * `mode` = 0: whole packets. Other modes (e.g. a future header-compression
//!   mode) are [`DecodeError::Unsupported`] until implemented; no new protocol
//!   number is needed for them.
//! * `crit`: 4 must-understand flag bits; any set bit is
//!   [`DecodeError::Unsupported`]. `info`: 4 may-ignore flag bits; a receiver
//!   ignores them, this writer sends 0.
//! * Length prefix, big-endian, shortest form only (a longer form than needed
//!   is [`DecodeError::Overlong`]):
//!   `0lllllll` = 1..=127; `10llllll llllllll` = 128..=16383;
//!   `11000000 llllllll llllllll` = 16384..=65535. First bytes `0xC1..=0xFF`
//!   are reserved ([`DecodeError::Unsupported`]); length 0 is
//!   [`DecodeError::ZeroLength`].
//!
//! Per-packet overhead is 1 byte up to 127 bytes (G.729/Opus voice) and 2
//! bytes up to 16383 bytes. The DSCP of the inner packets travels in the outer
//! header, so the payload carries none.

use super::{ip, Bundle, DecodeError, Encoding, MAX_BUNDLE, MAX_PACKETS_PER_BUNDLE};

/// Bytes of format header before the first packet.
pub const HEADER_LEN: usize = 2;
/// The only version this implementation speaks.
pub const VERSION: u8 = 1;
/// Mode 0: whole inner packets, each behind a length prefix.
pub const MODE_PLAIN: u8 = 0;
/// Mask of the must-understand flag bits in header byte 1.
pub const FLAGS_CRITICAL: u8 = 0xf0;
/// Mask of the may-ignore flag bits in header byte 1.
pub const FLAGS_INFO: u8 = 0x0f;

/// Largest packet a native length prefix can describe.
pub const MAX_PACKET: usize = 65_535;

/// Length of the prefix for a packet of `len` bytes.
#[inline]
pub fn prefix_len(len: usize) -> usize {
    if len < 0x80 {
        1
    } else if len < 0x4000 {
        2
    } else {
        3
    }
}

/// Whether a `native` bundle can carry `packet`: a whole, valid IPv4 or IPv6
/// packet (exactly what [`decode`] accepts: [`ip::inspect_inner`]), so a
/// bundle this writer builds always decodes.
pub fn can_carry(packet: &[u8]) -> bool {
    packet.len() <= MAX_PACKET && ip::validate_inner(packet).is_ok()
}

/// Bytes that appending a packet of `packet_len` adds (separator + packet).
#[inline]
pub fn cost(packet_len: usize, _first: bool) -> usize {
    prefix_len(packet_len) + packet_len
}

/// Writes the separator and the packet; `out.len() == cost(packet.len(), first)`.
#[inline]
pub fn write_packet(out: &mut [u8], packet: &[u8], _first: bool) {
    let len = packet.len();
    let (prefix, body) = out.split_at_mut(prefix_len(len));
    write_separator(prefix, len);
    body.copy_from_slice(packet);
}

/// Writes the length prefix of a packet of `len` bytes; `out.len() == prefix_len(len)`.
#[inline]
pub(crate) fn write_separator(out: &mut [u8], len: usize) {
    match out {
        [a] => *a = len as u8,
        [a, b] => {
            *a = 0x80 | (len >> 8) as u8;
            *b = len as u8;
        }
        [a, b, c] => {
            *a = 0xc0;
            *b = (len >> 8) as u8;
            *c = len as u8;
        }
        _ => unreachable!("prefix_len is 1, 2 or 3"),
    }
}

/// Completes the format header in `buf[..HEADER_LEN]` once `count` packets are written.
pub fn write_header(buf: &mut [u8], _count: usize) {
    buf[0] = (VERSION << 4) | MODE_PLAIN;
    buf[1] = 0;
}

/// Reads one length prefix: `(length, prefix bytes)`.
#[inline]
fn read_prefix(b: &[u8]) -> Result<(usize, usize), DecodeError> {
    let b0 = *b.first().ok_or(DecodeError::Truncated)?;
    if b0 & 0x80 == 0 {
        return Ok((usize::from(b0), 1));
    }
    if b0 & 0xc0 == 0x80 {
        let b1 = *b.get(1).ok_or(DecodeError::Truncated)?;
        let len = usize::from(b0 & 0x3f) << 8 | usize::from(b1);
        if len < 0x80 {
            return Err(DecodeError::Overlong);
        }
        return Ok((len, 2));
    }
    if b0 != 0xc0 {
        return Err(DecodeError::Unsupported);
    }
    if b.len() < 3 {
        return Err(DecodeError::Truncated);
    }
    let len = usize::from(b[1]) << 8 | usize::from(b[2]);
    if len < 0x4000 {
        return Err(DecodeError::Overlong);
    }
    Ok((len, 3))
}

/// Checks the 2-byte header; returns the body after it.
fn check_header(payload: &[u8]) -> Result<&[u8], DecodeError> {
    if payload.len() > MAX_BUNDLE {
        return Err(DecodeError::Overlong);
    }
    let (&b0, rest) = payload.split_first().ok_or(DecodeError::Empty)?;
    if b0 >> 4 != VERSION {
        return Err(DecodeError::BadVersion);
    }
    if b0 & 0x0f != MODE_PLAIN {
        return Err(DecodeError::Unsupported);
    }
    let (&flags, body) = rest.split_first().ok_or(DecodeError::Truncated)?;
    if flags & FLAGS_CRITICAL != 0 {
        return Err(DecodeError::Unsupported);
    }
    Ok(body)
}

/// Parses a bundle payload: the framing must hold (else the error below),
/// and an inner packet that fails its own checks (the [`ip::inspect_inner`]
/// reasons) is refused alone (see [`super::Bundle::refused`]).
///
/// Errors, in the order checked: [`DecodeError::Overlong`] (payload larger
/// than [`MAX_BUNDLE`]), [`DecodeError::Empty`] (no bytes, or a header with
/// no packet), [`DecodeError::BadVersion`], [`DecodeError::Unsupported`]
/// (non-zero mode, a critical flag, a reserved prefix), [`DecodeError::Truncated`]
/// (header or prefix cut short, or a length past the end),
/// [`DecodeError::Overlong`] (non-shortest prefix), [`DecodeError::ZeroLength`],
/// [`DecodeError::TooManyPackets`], and any inner-packet error of
/// [`ip::inspect_inner`] (including [`DecodeError::Nested`]).
/// After at least one packet, fewer than 21 remaining bytes (too few for the
/// smallest prefix + a 20-byte IPv4 header) are [`DecodeError::TrailingGarbage`].
pub fn decode(payload: &[u8]) -> Result<Bundle<'_>, DecodeError> {
    decode_impl::<true>(payload)
}

/// [`decode`], with (`FAST`) or without its fast path (tests compare the two).
#[inline(always)]
fn decode_impl<const FAST: bool>(payload: &[u8]) -> Result<Bundle<'_>, DecodeError> {
    let body = check_header(payload)?;
    if body.is_empty() {
        return Err(DecodeError::Empty);
    }
    let mut rest = body;
    let mut count = 0usize;
    let mut refused = 0usize;
    loop {
        // Fast path: a one-byte prefix (at least 20) followed by that many
        // bytes that are a valid 20-byte-header IPv4 packet. Such a packet
        // passes every check of the general step below (the rest holds more
        // than 21 bytes), so it is only skipped here; anything else, every
        // error included, takes the general step. The packet count bound is
        // checked once afterwards: the loop is bounded by the bytes (each
        // packet takes at least 21), and a bundle that goes past the bound
        // here fails as it would in the general step.
        while let Some((&b0, tail)) = rest.split_first().filter(|_| FAST) {
            let l = usize::from(b0);
            if !(ip::IPV4_HEADER_LEN..0x80).contains(&l) || l > tail.len() {
                break;
            }
            let (pkt, next) = tail.split_at(l);
            if !ip::valid_inner_ipv4_20(pkt) {
                break;
            }
            rest = next;
            count += 1;
        }
        if count > MAX_PACKETS_PER_BUNDLE {
            return Err(DecodeError::TooManyPackets);
        }
        if rest.is_empty() {
            break;
        }
        if count > 0 && rest.len() < 1 + ip::IPV4_HEADER_LEN {
            // Too few bytes for even the smallest separator + packet.
            return Err(DecodeError::TrailingGarbage);
        }
        if count == MAX_PACKETS_PER_BUNDLE {
            return Err(DecodeError::TooManyPackets);
        }
        let (len, p) = read_prefix(rest)?;
        if len == 0 {
            return Err(DecodeError::ZeroLength);
        }
        let after = &rest[p..];
        if len > after.len() {
            return Err(DecodeError::Truncated);
        }
        let (pkt, tail) = after.split_at(len);
        // The framing holds: a packet that fails its own checks is refused alone.
        refused += usize::from(ip::validate_inner(pkt).is_err());
        rest = tail;
        count += 1;
    }
    Ok(Bundle::new(Encoding::Native, body, count, refused))
}

/// Splits the next packet off an already validated body; `None` only if invalid.
#[inline]
pub(crate) fn split_next(rest: &[u8], _first: bool) -> Option<(&[u8], &[u8])> {
    let (len, p) = read_prefix(rest).ok()?;
    let after = rest.get(p..)?;
    if len > after.len() {
        return None;
    }
    Some(after.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::BundleWriter;
    use core::net::Ipv4Addr;

    fn v4(len: usize, protocol: u8) -> Vec<u8> {
        let mut h = [0u8; 20];
        ip::emit_ipv4_header(
            &mut h,
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            protocol,
            46,
            64,
            len as u16,
            len - 20,
        );
        let mut p = h.to_vec();
        p.resize(len, 0xab);
        p
    }

    fn bundle(pkts: &[Vec<u8>]) -> Vec<u8> {
        let mut buf = vec![0u8; MAX_BUNDLE];
        let mut w = BundleWriter::new(Encoding::Native, &mut buf).unwrap();
        for p in pkts {
            w.push(p).unwrap();
        }
        let n = w.finish();
        buf.truncate(n);
        buf
    }

    #[test]
    fn prefix_forms_round_trip() {
        for len in [20usize, 127, 128, 1500, 16383, 16384, 65_000] {
            let p = v4(len, 17);
            let b = bundle(std::slice::from_ref(&p));
            assert_eq!(b.len(), HEADER_LEN + prefix_len(len) + len, "len {len}");
            assert_eq!(b[..2], [0x10, 0x00]);
            let d = decode(&b).unwrap();
            assert_eq!(d.len(), 1);
            assert_eq!(d.iter().next().unwrap(), &p[..]);
        }
        assert_eq!(prefix_len(127), 1);
        assert_eq!(prefix_len(128), 2);
        assert_eq!(prefix_len(16383), 2);
        assert_eq!(prefix_len(16384), 3);
    }

    #[test]
    fn fast_path_decodes_like_the_general_steps() {
        // Valid bundles of 20..=140-byte packets (IPv4 with and without
        // options, IPv6, bundle protocols), then mutated: one byte changed,
        // cut short, extended; the same result (count, or error) either way.
        let mut x: u32 = 0x0dec_0de5;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as usize
        };
        for round in 0..20_000 {
            let n = 1 + rnd() % 30;
            let mut b = vec![0x10, 0];
            for _ in 0..n {
                let len = 20 + rnd() % 121;
                let mut p = v4(len, [17, 6, 253][rnd() % 3]);
                match rnd() % 8 {
                    0 => p[0] = 0x46,
                    1 => p[0] = 0x60,
                    2 => p[10] ^= 1,
                    _ => {}
                }
                let (sep, k) = Encoding::Native.later_separator(&p);
                b.extend_from_slice(&sep[..k]);
                b.extend_from_slice(&p);
            }
            match rnd() % 4 {
                0 => {
                    let i = rnd() % b.len();
                    b[i] = rnd() as u8;
                }
                1 => b.truncate(rnd() % (b.len() + 1)),
                2 => b.extend((0..rnd() % 30).map(|_| rnd() as u8)),
                _ => {}
            }
            let fast = decode_impl::<true>(&b).map(|d| d.len());
            let general = decode_impl::<false>(&b).map(|d| d.len());
            assert_eq!(fast, general, "round {round}: {b:02x?}");
        }
        // The packet-count bound, below, at and past it, followed by nothing,
        // by a packet the general step reads (two-byte prefix), or by garbage.
        let p = v4(20, 17);
        let mut long = vec![0x80, 200];
        long.extend_from_slice(&v4(200, 17));
        for extra in [-1i32, 0, 1, 2, 40] {
            for tail in [&[][..], &long[..], &[1, 2, 3][..]] {
                let mut b = vec![0x10, 0];
                for _ in 0..(MAX_PACKETS_PER_BUNDLE as i32 + extra) {
                    b.push(20);
                    b.extend_from_slice(&p);
                }
                b.extend_from_slice(tail);
                let fast = decode_impl::<true>(&b).map(|d| d.len());
                assert_eq!(fast, decode_impl::<false>(&b).map(|d| d.len()));
                if extra > 0 || (extra == 0 && tail == &long[..]) {
                    assert_eq!(fast, Err(DecodeError::TooManyPackets), "{extra}");
                }
            }
        }
    }

    #[test]
    fn prefix_bytes() {
        let mut out = [0u8; 3 + 16384];
        let p = v4(60, 17);
        write_packet(&mut out[..61], &p, true);
        assert_eq!(out[0], 60);
        let p = v4(200, 17);
        write_packet(&mut out[..202], &p, false);
        assert_eq!(out[..2], [0x80, 200]);
        let p = v4(16384, 17);
        write_packet(&mut out[..16387], &p, false);
        assert_eq!(out[..3], [0xc0, 0x40, 0x00]);
    }

    #[test]
    fn several_in_order() {
        let pkts = vec![v4(60, 17), v4(200, 17), v4(20, 6), v4(1500, 17)];
        let b = bundle(&pkts);
        let d = decode(&b).unwrap();
        assert_eq!(d.len(), 4);
        assert_eq!(d.encoding(), Encoding::Native);
        assert!(d.iter().eq(pkts.iter().map(|p| &p[..])));
    }

    #[test]
    fn info_flags_ignored() {
        let mut b = bundle(&[v4(60, 17)]);
        b[1] = FLAGS_INFO;
        assert_eq!(decode(&b).unwrap().len(), 1);
    }

    #[test]
    fn err_empty() {
        assert_eq!(decode(&[]).unwrap_err(), DecodeError::Empty);
        assert_eq!(decode(&[0x10, 0x00]).unwrap_err(), DecodeError::Empty);
    }

    #[test]
    fn err_bad_version() {
        let mut b = bundle(&[v4(60, 17)]);
        for v in [0u8, 2, 4, 6, 15] {
            b[0] = v << 4;
            assert_eq!(decode(&b).unwrap_err(), DecodeError::BadVersion);
        }
    }

    #[test]
    fn err_unsupported() {
        let good = bundle(&[v4(60, 17)]);
        let mut b = good.clone();
        b[0] = 0x11; // mode 1
        assert_eq!(decode(&b).unwrap_err(), DecodeError::Unsupported);
        for bit in 4..8 {
            let mut b = good.clone();
            b[1] = 1 << bit;
            assert_eq!(decode(&b).unwrap_err(), DecodeError::Unsupported);
        }
        let mut b = good.clone();
        b[2] = 0xc1; // reserved prefix
        assert_eq!(decode(&b).unwrap_err(), DecodeError::Unsupported);
    }

    #[test]
    fn err_truncated() {
        let b = bundle(&[v4(60, 17), v4(200, 17)]);
        assert_eq!(decode(&b[..1]).unwrap_err(), DecodeError::Truncated);
        // Cut inside the second packet.
        assert_eq!(
            decode(&b[..b.len() - 1]).unwrap_err(),
            DecodeError::Truncated
        );
        assert_eq!(
            decode(&b[..2 + 61 + 30]).unwrap_err(),
            DecodeError::Truncated
        );
        // A 3-byte prefix cut short.
        assert_eq!(
            decode(&[0x10, 0, 0xc0, 0x40]).unwrap_err(),
            DecodeError::Truncated
        );
    }

    #[test]
    fn err_overlong() {
        let p = v4(60, 17);
        // 60 in the 2-byte form.
        let mut b = vec![0x10, 0, 0x80, 60];
        b.extend_from_slice(&p);
        assert_eq!(decode(&b).unwrap_err(), DecodeError::Overlong);
        // 60 in the 3-byte form.
        let mut b = vec![0x10, 0, 0xc0, 0, 60];
        b.extend_from_slice(&p);
        assert_eq!(decode(&b).unwrap_err(), DecodeError::Overlong);
        // Payload over MAX_BUNDLE.
        let mut b = vec![0u8; MAX_BUNDLE + 1];
        b[0] = 0x10;
        assert_eq!(decode(&b).unwrap_err(), DecodeError::Overlong);
    }

    #[test]
    fn err_trailing_garbage() {
        let good = bundle(&[v4(60, 17)]);
        let mut b = good.clone();
        b.push(0);
        assert_eq!(decode(&b).unwrap_err(), DecodeError::TrailingGarbage);
        let mut b = good.clone();
        b.extend_from_slice(&[0x80, 0xc8]);
        assert_eq!(decode(&b).unwrap_err(), DecodeError::TrailingGarbage);
        // 21 bytes: parsed as a separator + packet (here: truncated).
        let mut b = good.clone();
        b.extend_from_slice(&[60; 21]);
        assert_eq!(decode(&b).unwrap_err(), DecodeError::Truncated);
    }

    #[test]
    fn err_zero_length() {
        let mut b = bundle(&[v4(60, 17)]);
        b.push(0);
        b.extend_from_slice(&v4(60, 17));
        assert_eq!(decode(&b).unwrap_err(), DecodeError::ZeroLength);
        assert_eq!(decode(&[0x10, 0, 0]).unwrap_err(), DecodeError::ZeroLength);
        // An inner "packet" of 10 bytes: shorter than its own IPv4 header
        // (framed correctly: refused alone).
        let mut b = vec![0x10, 0, 10];
        b.extend_from_slice(&v4(60, 17)[..10]);
        assert_eq!(
            crate::wire::refused(Encoding::Native, &b),
            [DecodeError::ZeroLength]
        );
    }

    #[test]
    fn err_inner() {
        let mut b = bundle(&[v4(60, 17)]);
        b[2 + 1 + 8] ^= 0xff; // TTL: checksum breaks
        assert_eq!(
            crate::wire::refused(Encoding::Native, &b),
            [DecodeError::BadIpv4Checksum]
        );
        let mut b = bundle(&[v4(60, 17)]);
        b[3] = 0x75; // inner version 7
        assert_eq!(
            crate::wire::refused(Encoding::Native, &b),
            [DecodeError::BadVersion]
        );
        // Separator says 60, inner total length says 61 (checksum fixed).
        let mut p = v4(61, 17);
        p.pop();
        let mut b = vec![0x10, 0, 60];
        b.extend_from_slice(&p);
        assert_eq!(
            crate::wire::refused(Encoding::Native, &b),
            [DecodeError::BadInnerHeader]
        );
    }

    #[test]
    fn damaged_inner_packets_cost_only_themselves() {
        // 20 good packets around 4 damaged ones (checksum, version, nested,
        // total length): the 20 are delivered, in order, and each damaged
        // one is refused under its own reason.
        let good: Vec<Vec<u8>> = (0..20).map(|i| v4(40 + i, 17)).collect();
        let mut bad_sum = v4(60, 17);
        bad_sum[8] ^= 1;
        let mut bad_ver = v4(60, 17);
        bad_ver[0] = 0x75;
        let nested = v4(60, 253);
        let mut bad_len = v4(61, 17);
        bad_len.pop();
        let mut b = vec![0x10, 0];
        let mut push = |p: &[u8]| {
            let (sep, k) = Encoding::Native.later_separator(p);
            b.extend_from_slice(&sep[..k]);
            b.extend_from_slice(p);
        };
        for (i, p) in good.iter().enumerate() {
            push(p);
            match i {
                3 => push(&bad_sum),
                7 => push(&bad_ver),
                11 => push(&nested),
                19 => push(&bad_len),
                _ => {}
            }
        }
        let d = decode(&b).unwrap();
        assert_eq!((d.len(), d.framed()), (20, 24));
        assert!(d.iter().eq(good.iter().map(|p| &p[..])));
        assert_eq!(
            crate::wire::refused(Encoding::Native, &b),
            [
                DecodeError::BadIpv4Checksum,
                DecodeError::BadVersion,
                DecodeError::Nested,
                DecodeError::BadInnerHeader
            ]
        );
        // A framing error anywhere still refuses the whole bundle.
        let mut cut = b.clone();
        cut.pop();
        assert_eq!(decode(&cut).unwrap_err(), DecodeError::Truncated);
    }

    #[test]
    fn err_nested() {
        for proto in [253u8, 254] {
            let p = v4(60, proto);
            assert!(!can_carry(&p));
            let mut b = vec![0x10, 0, 60];
            b.extend_from_slice(&p);
            assert_eq!(
                crate::wire::refused(Encoding::Native, &b),
                [DecodeError::Nested]
            );
        }
    }

    #[test]
    fn err_too_many() {
        let p = v4(20, 17);
        let mut b = vec![0x10, 0];
        for _ in 0..MAX_PACKETS_PER_BUNDLE {
            b.push(20);
            b.extend_from_slice(&p);
        }
        assert_eq!(decode(&b).unwrap().len(), MAX_PACKETS_PER_BUNDLE);
        b.push(20);
        b.extend_from_slice(&p);
        assert_eq!(decode(&b).unwrap_err(), DecodeError::TooManyPackets);
    }

    #[test]
    fn writer_refuses_what_decoder_would() {
        assert!(can_carry(&v4(60, 17)));
        let mut bad = v4(60, 17);
        bad[8] ^= 1;
        assert!(!can_carry(&bad));
        assert!(!can_carry(&[]));
        let mut buf = [0u8; 64];
        let mut w = BundleWriter::new(Encoding::Native, &mut buf).unwrap();
        assert_eq!(w.push(&v4(62, 17)), Err(crate::wire::EncodeError::NoRoom));
        assert_eq!(w.push(&v4(61, 17)), Ok(()));
        assert_eq!(w.finish(), 64);
    }
}
