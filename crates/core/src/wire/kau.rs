//! The `kau` encoding: the meta-packet layout of seeds 001 and 000.
//!
//! Owns the layout of a kau bundle payload. Must not touch: the 20-byte outer
//! IPv4 "meta header" (the transport writes it with [`super::ip::emit_ipv4_header`],
//! protocol 253 by default or 254 as in the published code; that choice is
//! configuration, not this module's), queues, I/O.
//! Full description with diagrams: `docs/wire-format.md`.
//!
//! Seed 001 (section 3.3.1, figure 8): "a new IP header is created and added
//! to the new packet are the ipv4 headers and payloads from the two packets";
//! there is no separator, each inner packet is delimited by its own IPv4
//! Total Length:
//!
//! ```text
//! +----------------------+------------------+------------------+---
//! | outer IPv4 (20 B,    | inner IPv4 #1    | inner IPv4 #2    |
//! | proto 253, transport)| (Total Length L1)| (Total Length L2)| ...
//! +----------------------+------------------+------------------+---
//!                        ^ payload starts here (HEADER_LEN = 0)
//! ```
//!
//! IPv4 only: an inner IPv6 packet is [`DecodeError::Unsupported`]. After at
//! least one packet, 1..=19 leftover bytes (too few for any IPv4 header) are
//! [`DecodeError::TrailingGarbage`]; 20 or more are parsed as a packet.

use super::{ip, Bundle, DecodeError, Encoding, MAX_BUNDLE, MAX_PACKETS_PER_BUNDLE};

/// Bytes of format header before the first packet.
pub const HEADER_LEN: usize = 0;

/// Whether a `kau` bundle can carry `packet`: a whole, valid IPv4 packet
/// that is not itself a bundle (exactly what [`decode`] accepts).
pub fn can_carry(packet: &[u8]) -> bool {
    ip::validate_inner(packet) == Ok(4)
}

/// Bytes that appending a packet of `packet_len` adds (separator + packet).
#[inline]
pub fn cost(packet_len: usize, _first: bool) -> usize {
    packet_len
}

/// Writes the separator and the packet; `out.len() == cost(packet.len(), first)`.
#[inline]
pub fn write_packet(out: &mut [u8], packet: &[u8], _first: bool) {
    out.copy_from_slice(packet);
}

/// Completes the format header in `buf[..HEADER_LEN]` once `count` packets are written.
pub fn write_header(_buf: &mut [u8], _count: usize) {}

/// The length of the inner packet starting at `rest`, from its Total Length.
#[inline]
fn next_len(rest: &[u8]) -> Result<usize, DecodeError> {
    let b0 = *rest.first().ok_or(DecodeError::Empty)?;
    match b0 >> 4 {
        4 => {}
        6 => return Err(DecodeError::Unsupported),
        _ => return Err(DecodeError::BadVersion),
    }
    if rest.len() < ip::IPV4_HEADER_LEN {
        return Err(DecodeError::Truncated);
    }
    let total = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
    if total < ip::IPV4_HEADER_LEN {
        return Err(DecodeError::ZeroLength);
    }
    if total > rest.len() {
        return Err(DecodeError::Truncated);
    }
    Ok(total)
}

/// Parses a bundle payload: the framing must hold (else the error below),
/// and an inner packet that fails its own checks (the [`ip::inspect_inner`]
/// reasons) is refused alone (see [`super::Bundle::refused`]).
///
/// Errors: [`DecodeError::Overlong`] (payload over [`MAX_BUNDLE`]),
/// [`DecodeError::Empty`], [`DecodeError::BadVersion`] (inner version not 4
/// or 6), [`DecodeError::Unsupported`] (inner IPv6), [`DecodeError::Truncated`]
/// (fewer than 20 bytes for the first header, or a Total Length past the end),
/// [`DecodeError::ZeroLength`] (Total Length 0 or shorter than the header),
/// [`DecodeError::TrailingGarbage`], [`DecodeError::TooManyPackets`], and the
/// inner-packet errors of [`ip::inspect_inner`] (bad checksum, bad IHL,
/// [`DecodeError::Nested`]).
pub fn decode(payload: &[u8]) -> Result<Bundle<'_>, DecodeError> {
    if payload.len() > MAX_BUNDLE {
        return Err(DecodeError::Overlong);
    }
    if payload.is_empty() {
        return Err(DecodeError::Empty);
    }
    let mut rest = payload;
    let mut count = 0usize;
    let mut refused = 0usize;
    while !rest.is_empty() {
        if count > 0 && rest.len() < ip::IPV4_HEADER_LEN {
            return Err(DecodeError::TrailingGarbage);
        }
        if count == MAX_PACKETS_PER_BUNDLE {
            return Err(DecodeError::TooManyPackets);
        }
        let len = next_len(rest)?;
        let (pkt, tail) = rest.split_at(len);
        // The framing holds (the Total Lengths add up): a packet that fails
        // its own checks (checksum, IHL, nesting) is refused alone.
        refused += usize::from(ip::validate_inner(pkt).is_err());
        rest = tail;
        count += 1;
    }
    Ok(Bundle::new(Encoding::Kau, payload, count, refused))
}

/// Splits the next packet off an already validated body; `None` only if invalid.
#[inline]
pub(crate) fn split_next(rest: &[u8], _first: bool) -> Option<(&[u8], &[u8])> {
    let len = next_len(rest).ok()?;
    Some(rest.split_at(len))
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
        p.resize(len, 0x5a);
        p
    }

    fn v6(len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
        p[6] = 59;
        p
    }

    fn bundle(pkts: &[Vec<u8>]) -> Vec<u8> {
        let mut buf = vec![0u8; 4096];
        let mut w = BundleWriter::new(Encoding::Kau, &mut buf).unwrap();
        for p in pkts {
            w.push(p).unwrap();
        }
        let n = w.finish();
        buf.truncate(n);
        buf
    }

    #[test]
    fn back_to_back() {
        let pkts = vec![v4(60, 17), v4(20, 6), v4(200, 17)];
        let b = bundle(&pkts);
        assert_eq!(b, pkts.concat());
        let d = decode(&b).unwrap();
        assert_eq!(d.len(), 3);
        assert!(d.iter().eq(pkts.iter().map(|p| &p[..])));
    }

    #[test]
    fn ipv4_only() {
        assert!(can_carry(&v4(60, 17)));
        assert!(!can_carry(&v6(60)));
        assert!(!can_carry(&v4(60, 253)));
        let mut buf = [0u8; 100];
        let mut w = BundleWriter::new(Encoding::Kau, &mut buf).unwrap();
        assert_eq!(w.push(&v6(60)), Err(crate::wire::EncodeError::Unsupported));
    }

    #[test]
    fn err_empty() {
        assert_eq!(decode(&[]).unwrap_err(), DecodeError::Empty);
    }

    #[test]
    fn err_unsupported_ipv6() {
        assert_eq!(decode(&v6(60)).unwrap_err(), DecodeError::Unsupported);
    }

    #[test]
    fn err_bad_version() {
        let mut b = bundle(&[v4(60, 17), v4(60, 17)]);
        b[60] = 0x55;
        assert_eq!(decode(&b).unwrap_err(), DecodeError::BadVersion);
    }

    #[test]
    fn err_truncated() {
        let b = bundle(&[v4(60, 17), v4(60, 17)]);
        assert_eq!(decode(&b[..19]).unwrap_err(), DecodeError::Truncated);
        assert_eq!(decode(&b[..59]).unwrap_err(), DecodeError::Truncated);
        assert_eq!(decode(&b[..119]).unwrap_err(), DecodeError::Truncated);
    }

    #[test]
    fn err_trailing_garbage() {
        let mut b = bundle(&[v4(60, 17)]);
        b.extend_from_slice(&[0; 19]);
        assert_eq!(decode(&b).unwrap_err(), DecodeError::TrailingGarbage);
        let mut b = bundle(&[v4(60, 17)]);
        b.push(0x45);
        assert_eq!(decode(&b).unwrap_err(), DecodeError::TrailingGarbage);
    }

    #[test]
    fn err_zero_length() {
        let mut b = bundle(&[v4(60, 17)]);
        b[2] = 0;
        b[3] = 0;
        assert_eq!(decode(&b).unwrap_err(), DecodeError::ZeroLength);
        // Total Length 10: shorter than the header.
        let mut b = bundle(&[v4(60, 17)]);
        b[3] = 10;
        assert_eq!(decode(&b).unwrap_err(), DecodeError::ZeroLength);
        // Total Length 61 of 60 bytes present is truncated, not zero.
        let mut b = bundle(&[v4(60, 17)]);
        b[3] = 61;
        assert_eq!(decode(&b).unwrap_err(), DecodeError::Truncated);
    }

    #[test]
    fn err_checksum_and_header() {
        let mut b = bundle(&[v4(60, 17)]);
        b[8] = 1;
        assert_eq!(
            crate::wire::refused(Encoding::Kau, &b),
            [DecodeError::BadIpv4Checksum]
        );
        let mut b = bundle(&[v4(60, 17)]);
        b[0] = 0x44;
        assert_eq!(
            crate::wire::refused(Encoding::Kau, &b),
            [DecodeError::BadInnerHeader]
        );
    }

    #[test]
    fn err_nested() {
        let b = v4(60, 254);
        assert_eq!(
            crate::wire::refused(Encoding::Kau, &b),
            [DecodeError::Nested]
        );
    }

    #[test]
    fn err_overlong() {
        let b = vec![0x45; MAX_BUNDLE + 1];
        assert_eq!(decode(&b).unwrap_err(), DecodeError::Overlong);
    }

    #[test]
    fn err_too_many() {
        let p = v4(20, 17);
        let mut b = Vec::new();
        for _ in 0..MAX_PACKETS_PER_BUNDLE {
            b.extend_from_slice(&p);
        }
        assert_eq!(decode(&b).unwrap().len(), MAX_PACKETS_PER_BUNDLE);
        b.extend_from_slice(&p);
        assert_eq!(decode(&b).unwrap_err(), DecodeError::TooManyPackets);
    }
}
