//! The `simplemux` encoding: the "normal" flavour of Simplemux
//! (draft-saldana-tsvwg-simplemux-12, section 3; the published C code,
//! github.com/Simplemux/simplemux), so airpack can talk to a Simplemux peer.
//!
//! Owns the layout of a Simplemux bundle payload (what follows the outer IPv4
//! header, protocol 253, or the UDP header). Must not touch: the outer
//! header, queues, I/O. Full description, and the ambiguities of the draft we
//! resolved: `docs/wire-format.md`.
//!
//! ```text
//! first separator:      |SPB|LXT| LEN (6 bits) |  {|LXT| LEN (7 bits)|}*  | Protocol (8) |
//! non-first separator:  |LXT| LEN (7 bits) |       {|LXT| LEN (7 bits)|}*  [| Protocol (8) |]
//!                                                 (Protocol only when SPB of the first was 0)
//! ```
//!
//! * Length groups are big-endian: the first byte holds the most significant
//!   bits, each following byte 7 less significant bits (as the published
//!   decoder computes `first * 128 + second`).
//! * At most 3 length bytes (20 or 21 bits) and a value of at most 65535 are
//!   accepted; more is [`DecodeError::Overlong`], as is a non-shortest
//!   encoding (an extension byte that was not needed). Length 0 is
//!   [`DecodeError::ZeroLength`].
//! * Protocol 4 (IPv4) and 41 (IPv6) are carried; a packet labelled anything
//!   else (ROHC 142, Ethernet 143, ...) is refused alone as
//!   [`DecodeError::Unsupported`]. Between 4 and 41 the inner packet's version
//!   nibble decides (the published Simplemux labels IPv6 packets 4).
//! * The writer always sends SPB = 0 and a Protocol byte in every separator,
//!   so IPv4 and IPv6 can share a bundle and [`cost`] never depends on the
//!   packets that follow. The decoder accepts SPB = 1 as well.

use super::{ip, Bundle, DecodeError, Encoding, MAX_BUNDLE, MAX_PACKETS_PER_BUNDLE};

/// Bytes of format header before the first packet (Simplemux has none).
pub const HEADER_LEN: usize = 0;
/// Protocol field value for an inner IPv4 packet ("IP in IP").
pub const PROTO_IPV4: u8 = 4;
/// Protocol field value for an inner IPv6 packet.
pub const PROTO_IPV6: u8 = 41;
/// Single-protocol bit, first separator only.
pub const SPB: u8 = 0x80;
/// Most length bytes in one separator (6 + 7 + 7 = 20 bits >= 16).
pub const MAX_LENGTH_BYTES: usize = 3;
/// Largest inner packet.
pub const MAX_PACKET: usize = 65_535;

/// Number of length bytes for a packet of `len` bytes.
#[inline]
pub fn length_bytes(len: usize, first: bool) -> usize {
    let one = if first { 1 << 6 } else { 1 << 7 };
    if len < one {
        1
    } else if len < one << 7 {
        2
    } else {
        3
    }
}

/// Whether a `simplemux` bundle can carry `packet`: a whole, valid IPv4 or
/// IPv6 packet that is not itself a bundle (exactly what [`decode`] accepts).
pub fn can_carry(packet: &[u8]) -> bool {
    packet.len() <= MAX_PACKET && ip::validate_inner(packet).is_ok()
}

/// Bytes that appending a packet of `packet_len` adds (separator + packet):
/// the length bytes, one Protocol byte (this writer always sends SPB = 0),
/// and the packet.
#[inline]
pub fn cost(packet_len: usize, first: bool) -> usize {
    length_bytes(packet_len, first) + 1 + packet_len
}

/// Writes the separator and the packet; `out.len() == cost(packet.len(), first)`.
pub fn write_packet(out: &mut [u8], packet: &[u8], first: bool) {
    let len = packet.len();
    let (sep, body) = out.split_at_mut(length_bytes(len, first) + 1);
    write_separator(sep, packet, first);
    body.copy_from_slice(packet);
}

/// Writes the separator for `packet` (length bytes, then the protocol byte);
/// `out.len() == cost(packet.len(), first) - packet.len()`.
pub(crate) fn write_separator(out: &mut [u8], packet: &[u8], first: bool) {
    let len = packet.len();
    let n = length_bytes(len, first);
    // Groups of 7 bits, most significant first; the first byte of a first
    // separator has room for 6 bits only (SPB takes the top bit, left 0).
    for (i, byte) in out[..n].iter_mut().enumerate() {
        let shift = 7 * (n - 1 - i);
        let group = ((len >> shift) & 0x7f) as u8;
        let lxt = if i + 1 < n { 0x80 } else { 0 };
        *byte = if i == 0 && first {
            (lxt >> 1) | (group & 0x3f)
        } else {
            lxt | group
        };
    }
    out[n] = if packet.first().map(|b| b >> 4) == Some(6) {
        PROTO_IPV6
    } else {
        PROTO_IPV4
    };
}

/// Completes the format header in `buf[..HEADER_LEN]` once `count` packets are written.
pub fn write_header(_buf: &mut [u8], _count: usize) {}

/// One parsed separator.
struct Separator {
    len: usize,
    /// Protocol byte, if this separator carries one.
    protocol: Option<u8>,
    /// Bytes the separator took.
    size: usize,
    /// SPB, meaningful for a first separator only.
    spb: bool,
}

#[inline]
fn read_separator(b: &[u8], first: bool, spb: bool) -> Result<Separator, DecodeError> {
    let b0 = *b.first().ok_or(DecodeError::Truncated)?;
    let (mut len, mut lxt, spb_bit) = if first {
        (usize::from(b0 & 0x3f), b0 & 0x40 != 0, b0 & SPB != 0)
    } else {
        (usize::from(b0 & 0x7f), b0 & 0x80 != 0, spb)
    };
    let mut n = 1;
    while lxt {
        if n == MAX_LENGTH_BYTES {
            return Err(DecodeError::Overlong);
        }
        let byte = *b.get(n).ok_or(DecodeError::Truncated)?;
        len = (len << 7) | usize::from(byte & 0x7f);
        lxt = byte & 0x80 != 0;
        n += 1;
    }
    if len > MAX_PACKET || length_bytes(len, first) != n {
        return Err(DecodeError::Overlong);
    }
    if len == 0 {
        return Err(DecodeError::ZeroLength);
    }
    let has_protocol = first || !spb_bit;
    let protocol = if has_protocol {
        Some(*b.get(n).ok_or(DecodeError::Truncated)?)
    } else {
        None
    };
    Ok(Separator {
        len,
        protocol,
        size: n + usize::from(has_protocol),
        spb: spb_bit,
    })
}

/// Parses a bundle payload: the framing must hold (else the error), each
/// inner packet is checked on its own and refused alone if it fails (see
/// [`super::Bundle::refused`]).
///
/// Framing errors: [`DecodeError::Overlong`] (payload over [`MAX_BUNDLE`], more than 3
/// length bytes, a length over 65535 or not in its shortest form),
/// [`DecodeError::Empty`], [`DecodeError::Truncated`] (a separator or a
/// length past the end), [`DecodeError::ZeroLength`],
/// [`DecodeError::TrailingGarbage`] (after a packet, fewer bytes than the
/// smallest separator plus a 20-byte IPv4 header), [`DecodeError::TooManyPackets`].
/// Per packet: [`DecodeError::Unsupported`] (protocol other than 4 or 41) and
/// the errors of [`ip::inspect_inner`].
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
    let mut spb = false;
    let mut protocol = 0u8;
    while !rest.is_empty() {
        let first = count == 0;
        if !first {
            let min_separator = if spb { 1 } else { 2 };
            if rest.len() < min_separator + ip::IPV4_HEADER_LEN {
                return Err(DecodeError::TrailingGarbage);
            }
        }
        if count == MAX_PACKETS_PER_BUNDLE {
            return Err(DecodeError::TooManyPackets);
        }
        let sep = read_separator(rest, first, spb)?;
        if first {
            spb = sep.spb;
        }
        if let Some(p) = sep.protocol {
            protocol = p;
        }
        let after = &rest[sep.size..];
        if sep.len > after.len() {
            return Err(DecodeError::Truncated);
        }
        let (pkt, tail) = after.split_at(sep.len);
        // The framing holds: a packet that fails its own checks (a label
        // other than 4/41, its IP header) is refused alone.
        refused += usize::from(
            super::check_inner(Encoding::Simplemux, protocol, pkt, &Default::default()).is_err(),
        );
        rest = tail;
        count += 1;
    }
    Ok(Bundle::new_simplemux(payload, count, refused, spb))
}

/// Splits the next packet off a body whose framing was checked; `None` only
/// if invalid. `spb` is the single-protocol bit of the bundle's first
/// separator. Also returns the separator's Protocol byte, if it has one.
#[allow(clippy::type_complexity)]
pub(crate) fn split_next(
    rest: &[u8],
    first: bool,
    spb: bool,
) -> Option<(Option<u8>, &[u8], &[u8])> {
    let sep = read_separator(rest, first, spb).ok()?;
    let after = rest.get(sep.size..)?;
    if sep.len > after.len() {
        return None;
    }
    let (pkt, rest) = after.split_at(sep.len);
    Some((sep.protocol, pkt, rest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{BundleWriter, Encoding};
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
        p.resize(len, 0x3c);
        p
    }

    fn v6(len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
        p[6] = 59;
        p[7] = 64;
        p
    }

    fn bundle(pkts: &[Vec<u8>]) -> Vec<u8> {
        let mut buf = vec![0u8; MAX_BUNDLE];
        let mut w = BundleWriter::new(Encoding::Simplemux, &mut buf).unwrap();
        for p in pkts {
            w.push(p).unwrap();
        }
        let n = w.finish();
        buf.truncate(n);
        buf
    }

    #[test]
    fn separator_bytes() {
        // First, 60 bytes: SPB 0, LXT 0, LEN 60 = 0x3c; protocol 4.
        let b = bundle(&[v4(60, 17)]);
        assert_eq!(b[..2], [0x3c, 0x04]);
        assert_eq!(b.len(), 62);
        // First, 100 bytes (>= 64): 0x40 | (100 >> 7) = 0x40, then 100 & 0x7f = 0x64.
        let b = bundle(&[v4(100, 17)]);
        assert_eq!(b[..3], [0x40, 0x64, 0x04]);
        // First, 1500 bytes: 1500 = 11 * 128 + 92 -> 0x4b, 0x5c.
        let b = bundle(&[v4(1500, 17)]);
        assert_eq!(b[..3], [0x4b, 0x5c, 0x04]);
        // Non-first, 100 bytes: fits 7 bits -> 0x64; 200 -> 0x81 0x48.
        let b = bundle(&[v4(60, 17), v4(100, 17), v4(200, 17)]);
        assert_eq!(b[62..64], [0x64, 0x04]);
        assert_eq!(b[62 + 102..62 + 102 + 3], [0x81, 0x48, 0x04]);
        // Three length bytes, first: 9000 = 0b10_0011001_0101000 -> 0x40|0, 0x80|0x46, 0x28.
        let b = bundle(&[v4(9000, 17)]);
        assert_eq!(b[..4], [0x40, 0xc6, 0x28, 0x04]);
        // IPv6: protocol 41.
        let b = bundle(&[v6(48)]);
        assert_eq!(b[..2], [48, 41]);
    }

    #[test]
    fn length_forms_round_trip() {
        for len in [20usize, 63, 64, 127, 128, 8191, 8192, 16383, 16384, 65_000] {
            for lead in [false, true] {
                let mut pkts = Vec::new();
                if lead {
                    pkts.push(v4(20, 17));
                }
                pkts.push(v4(len, 17));
                let b = bundle(&pkts);
                let d = decode(&b).unwrap_or_else(|e| panic!("len {len} lead {lead}: {e}"));
                assert!(d.iter().eq(pkts.iter().map(|p| &p[..])), "len {len}");
            }
        }
    }

    #[test]
    fn mixed_v4_v6_in_order() {
        let pkts = vec![v4(60, 17), v6(48), v4(200, 6), v6(1280)];
        let b = bundle(&pkts);
        let d = decode(&b).unwrap();
        assert_eq!(d.len(), 4);
        assert!(d.iter().eq(pkts.iter().map(|p| &p[..])));
    }

    #[test]
    fn accepts_single_protocol_bit() {
        // Hand-built as a Simplemux peer with SPB = 1 sends it: protocol only once.
        let p1 = v4(60, 17);
        let p2 = v4(100, 17);
        let mut b = vec![SPB | 60, PROTO_IPV4];
        b.extend_from_slice(&p1);
        b.push(100);
        b.extend_from_slice(&p2);
        let d = decode(&b).unwrap();
        assert_eq!(d.len(), 2);
        let v: Vec<&[u8]> = d.iter().collect();
        assert_eq!(v, vec![&p1[..], &p2[..]]);
    }

    #[test]
    fn err_empty() {
        assert_eq!(decode(&[]).unwrap_err(), DecodeError::Empty);
    }

    #[test]
    fn err_truncated() {
        let b = bundle(&[v4(60, 17), v4(200, 17)]);
        assert_eq!(decode(&b[..1]).unwrap_err(), DecodeError::Truncated);
        assert_eq!(decode(&b[..30]).unwrap_err(), DecodeError::Truncated);
        assert_eq!(
            decode(&b[..b.len() - 1]).unwrap_err(),
            DecodeError::Truncated
        );
        // LXT set but no second length byte.
        assert_eq!(decode(&[0x41]).unwrap_err(), DecodeError::Truncated);
    }

    #[test]
    fn err_trailing_garbage() {
        let mut b = bundle(&[v4(60, 17)]);
        b.extend_from_slice(&[0; 21]);
        assert_eq!(decode(&b).unwrap_err(), DecodeError::TrailingGarbage);
        let mut b = bundle(&[v4(60, 17)]);
        b.push(0x14);
        assert_eq!(decode(&b).unwrap_err(), DecodeError::TrailingGarbage);
    }

    #[test]
    fn err_overlong() {
        let p = v4(60, 17);
        // 60 in two bytes (first separator): 0x40 0x3c.
        let mut b = vec![0x40, 0x3c, 4];
        b.extend_from_slice(&p);
        assert_eq!(decode(&b).unwrap_err(), DecodeError::Overlong);
        // Four length bytes.
        let mut b = vec![0x41, 0x80, 0x80, 0x00, 4];
        b.extend_from_slice(&p);
        assert_eq!(decode(&b).unwrap_err(), DecodeError::Overlong);
        // Three bytes worth 2^16: 0x44 0x80 0x00 = 4 << 14 = 65536.
        let mut b = vec![0x44, 0x80, 0x00, 4];
        b.extend_from_slice(&p);
        assert_eq!(decode(&b).unwrap_err(), DecodeError::Overlong);
        // Payload over MAX_BUNDLE.
        assert_eq!(
            decode(&vec![0; MAX_BUNDLE + 1]).unwrap_err(),
            DecodeError::Overlong
        );
    }

    #[test]
    fn err_zero_length() {
        let mut b = vec![0x00, 4];
        b.extend_from_slice(&v4(60, 17));
        assert_eq!(decode(&b).unwrap_err(), DecodeError::ZeroLength);
        // A 10-byte "IPv4 packet" (framed correctly: refused alone).
        let mut b = vec![10, 4];
        b.extend_from_slice(&v4(60, 17)[..10]);
        assert_eq!(
            crate::wire::refused(Encoding::Simplemux, &b),
            [DecodeError::ZeroLength]
        );
    }

    #[test]
    fn err_unsupported_protocol() {
        let mut b = bundle(&[v4(60, 17)]);
        b[1] = 142; // ROHC
        assert_eq!(
            crate::wire::refused(Encoding::Simplemux, &b),
            [DecodeError::Unsupported]
        );
        // With SPB = 1 the first label applies to every packet.
        let (p1, p2) = (v4(60, 17), v4(100, 17));
        let mut b = vec![SPB | 60, 143];
        b.extend_from_slice(&p1);
        b.push(100);
        b.extend_from_slice(&p2);
        assert_eq!(
            crate::wire::refused(Encoding::Simplemux, &b),
            [DecodeError::Unsupported, DecodeError::Unsupported]
        );
    }

    #[test]
    fn protocol_label_contradicting_the_version_nibble() {
        // The nibble decides: Simplemux labels IPv6 packets 4 (and an IPv4
        // packet labelled 41 is an IPv4 packet just the same).
        let (p4, p6) = (v4(60, 17), v6(48));
        let mut b = bundle(std::slice::from_ref(&p4));
        b[1] = PROTO_IPV6;
        let d = decode(&b).unwrap();
        assert_eq!(d.iter().collect::<Vec<_>>(), [&p4[..]]);
        let mut b = bundle(std::slice::from_ref(&p6));
        b[1] = PROTO_IPV4;
        let d = decode(&b).unwrap();
        assert_eq!(d.iter().collect::<Vec<_>>(), [&p6[..]]);
        // 20 IPv4 packets and one IPv6 packet, all labelled 4 (what the
        // published Simplemux sends): all 21 delivered.
        let mut pkts: Vec<Vec<u8>> = (0..20).map(|i| v4(40 + i, 17)).collect();
        pkts.insert(9, v6(80));
        let mut b = bundle(&pkts);
        let mut at = 0;
        for (i, p) in pkts.iter().enumerate() {
            let n = length_bytes(p.len(), i == 0);
            b[at + n] = PROTO_IPV4;
            at += n + 1 + p.len();
        }
        assert_eq!(at, b.len());
        let d = decode(&b).unwrap();
        assert_eq!((d.len(), d.framed()), (21, 21));
        assert!(d.iter().eq(pkts.iter().map(|p| &p[..])));
    }

    #[test]
    fn err_inner() {
        let mut b = bundle(&[v4(60, 17)]);
        b[2 + 8] ^= 1;
        assert_eq!(
            crate::wire::refused(Encoding::Simplemux, &b),
            [DecodeError::BadIpv4Checksum]
        );
        let mut b = bundle(&[v4(60, 17)]);
        b[2] = 0x55;
        assert_eq!(
            crate::wire::refused(Encoding::Simplemux, &b),
            [DecodeError::BadVersion]
        );
        // Separator says 60, the inner Total Length says 61.
        let mut p = v4(61, 17);
        p.pop();
        let mut b = vec![60, 4];
        b.extend_from_slice(&p);
        assert_eq!(
            crate::wire::refused(Encoding::Simplemux, &b),
            [DecodeError::BadInnerHeader]
        );
    }

    #[test]
    fn err_nested() {
        let mut b = vec![60, 4];
        b.extend_from_slice(&v4(60, 253));
        assert_eq!(
            crate::wire::refused(Encoding::Simplemux, &b),
            [DecodeError::Nested]
        );
        let mut p = v6(48);
        p[6] = 254;
        assert!(!can_carry(&p));
        let mut b = vec![48, 41];
        b.extend_from_slice(&p);
        assert_eq!(
            crate::wire::refused(Encoding::Simplemux, &b),
            [DecodeError::Nested]
        );
    }

    #[test]
    fn err_too_many() {
        let p = v4(20, 17);
        let pkts = vec![p; MAX_PACKETS_PER_BUNDLE];
        let mut b = bundle(&pkts);
        assert_eq!(decode(&b).unwrap().len(), MAX_PACKETS_PER_BUNDLE);
        b.extend_from_slice(&[20, 4]);
        b.extend_from_slice(&v4(20, 17));
        assert_eq!(decode(&b).unwrap_err(), DecodeError::TooManyPackets);
    }
}
