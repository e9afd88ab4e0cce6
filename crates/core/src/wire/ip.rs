//! IPv4 and IPv6 header views: just what the bundle parsers and the
//! classifier need, checked strictly against the bytes present.
//!
//! Owns: [`inspect`] (validate one whole IP packet and summarise it),
//! the Internet [`checksum`], and [`emit_ipv4_header`] (the outer header for
//! raw-IP transports, golden vectors and the `kau` layout).
//!
//! Must not touch: policy (what a class is: [`crate::engine::classify`]),
//! bundle layouts (the sibling format modules), I/O. Everything here is a pure
//! function over a slice; loops are bounded by the slice length or by
//! [`MAX_IPV6_EXT_HEADERS`]; nothing allocates.

use super::DecodeError;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Length of an IPv4 header without options.
pub const IPV4_HEADER_LEN: usize = 20;
/// Length of the fixed IPv6 header.
pub const IPV6_HEADER_LEN: usize = 40;
/// Largest IPv4 total length / IPv6 packet (without jumbograms) [`inspect`] accepts.
pub const MAX_PACKET: usize = 65_535;
/// Most IPv6 extension headers [`inspect`] walks before giving up with
/// [`DecodeError::BadInnerHeader`].
pub const MAX_IPV6_EXT_HEADERS: usize = 8;

/// IP protocol numbers used here.
pub mod proto {
    /// IPv6 hop-by-hop options.
    pub const HOPOPT: u8 = 0;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 routing header.
    pub const ROUTING: u8 = 43;
    /// IPv6 fragment header.
    pub const FRAGMENT: u8 = 44;
    /// Encapsulating security payload (opaque: the walk stops here).
    pub const ESP: u8 = 50;
    /// Authentication header.
    pub const AH: u8 = 51;
    /// IPv6 "no next header".
    pub const NONE: u8 = 59;
    /// IPv6 destination options.
    pub const DSTOPTS: u8 = 60;
    /// SCTP.
    pub const SCTP: u8 = 132;
    /// UDP-Lite.
    pub const UDPLITE: u8 = 136;
    /// RFC 3692 experimental; airpack's default bundle protocol (seed 001).
    pub const EXPERIMENT1: u8 = 253;
    /// RFC 3692 experimental; the bundle protocol of the published seed code.
    pub const EXPERIMENT2: u8 = 254;
}

/// True for the protocol numbers a bundle may travel under (253, 254).
/// An inner packet with such a protocol would be a bundle inside a bundle,
/// which every decoder rejects as [`DecodeError::Nested`].
#[inline]
pub fn is_bundle_protocol(protocol: u8) -> bool {
    protocol == proto::EXPERIMENT1 || protocol == proto::EXPERIMENT2
}

/// ECN codepoints (RFC 3168): the two low bits of the IPv4 TOS byte / the
/// IPv6 traffic class.
pub mod ecn {
    /// Not ECN-capable transport.
    pub const NOT_ECT: u8 = 0;
    /// ECN-capable transport, codepoint 1 (L4S, RFC 9331).
    pub const ECT1: u8 = 1;
    /// ECN-capable transport, codepoint 0 (classic ECN).
    pub const ECT0: u8 = 2;
    /// Congestion experienced.
    pub const CE: u8 = 3;
}

/// The ECN field of an IPv4 or IPv6 packet (Not-ECT when the bytes hold no
/// such header's first two bytes).
#[inline]
pub fn ecn_of(packet: &[u8]) -> u8 {
    match packet {
        [b0, b1, ..] if b0 >> 4 == 4 => b1 & 3,
        [b0, b1, ..] if b0 >> 4 == 6 => (b1 >> 4) & 3,
        _ => ecn::NOT_ECT,
    }
}

/// Sets the ECN field of an IPv4 or IPv6 packet to `value` (0..=3); an IPv4
/// header checksum is updated incrementally (RFC 1624, equation 3), so a
/// valid header stays valid. Anything else is left alone.
pub fn set_ecn(packet: &mut [u8], value: u8) {
    let value = value & 3;
    match packet.first().map(|b| b >> 4) {
        Some(4) if packet.len() >= IPV4_HEADER_LEN => {
            let old = be16(packet, 0);
            packet[1] = (packet[1] & !3) | value;
            let new = be16(packet, 0);
            let hc = be16(packet, 10);
            // HC' = ~(~HC + ~m + m')
            let sum = u64::from(!hc) + u64::from(!old) + u64::from(new);
            packet[10..12].copy_from_slice(&(!fold(sum)).to_be_bytes());
        }
        Some(6) if packet.len() >= 2 => packet[1] = (packet[1] & !0x30) | (value << 4),
        _ => {}
    }
}

/// RFC 6040 section 4.2: the inner packet's ECN field after decapsulation
/// from an outer header with ECN `outer`, given its own `inner`; `None` means
/// drop (outer CE over a Not-ECT packet: the congestion mark cannot be
/// passed on).
///
/// | inner \ outer | Not-ECT | ECT(0) | ECT(1) | CE |
/// | --- | --- | --- | --- | --- |
/// | Not-ECT | Not-ECT | Not-ECT | Not-ECT | drop |
/// | ECT(0) | ECT(0) | ECT(0) | ECT(1) | CE |
/// | ECT(1) | ECT(1) | ECT(1) | ECT(1) | CE |
/// | CE | CE | CE | CE | CE |
#[inline]
pub fn ecn_decapsulate(outer: u8, inner: u8) -> Option<u8> {
    match (outer & 3, inner & 3) {
        (ecn::CE, ecn::NOT_ECT) => None,
        (ecn::CE, _) => Some(ecn::CE),
        (ecn::ECT1, ecn::ECT0) => Some(ecn::ECT1),
        (_, i) => Some(i),
    }
}

/// A summary of one inner packet, read from its headers without copying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketInfo {
    /// 4 or 6.
    pub version: u8,
    /// IPv4 protocol / IPv6 upper-layer next header (after skipping extension headers).
    pub protocol: u8,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// DiffServ code point (upper 6 bits of TOS / traffic class).
    pub dscp: u8,
    /// Total length of the packet in bytes (== the slice length when valid).
    pub len: usize,
    /// True for any IPv4 fragment (MF set or offset != 0) or IPv6 packet with a fragment header.
    pub fragment: bool,
    /// UDP/TCP/SCTP/UDP-Lite source port, when present in a first (or only) fragment.
    pub src_port: Option<u16>,
    /// UDP/TCP/SCTP/UDP-Lite destination port, when present.
    pub dst_port: Option<u16>,
    /// TCP flags byte, for TCP packets with a complete fixed header.
    pub tcp_flags: Option<u8>,
}

/// TCP flag bits in [`PacketInfo::tcp_flags`].
pub mod tcp_flags {
    /// FIN
    pub const FIN: u8 = 0x01;
    /// SYN
    pub const SYN: u8 = 0x02;
    /// RST
    pub const RST: u8 = 0x04;
}

#[inline]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Reads and validates one IP packet occupying exactly `packet`.
///
/// IPv4: version, IHL >= 5, total length == `packet.len()`, header checksum.
/// IPv6: payload length + 40 == `packet.len()`; extension headers are walked
/// (bounded) to find the upper-layer protocol and a fragment header.
///
/// Errors: [`DecodeError::Empty`] (no bytes), [`DecodeError::BadVersion`]
/// (version nibble not 4 or 6), [`DecodeError::Truncated`] (fewer bytes than
/// the fixed header, the IHL or an extension header needs),
/// [`DecodeError::ZeroLength`] (IPv4 total length 0, e.g. a GSO super-packet;
/// IPv6 payload length 0 with more bytes present, i.e. a jumbogram),
/// [`DecodeError::BadInnerHeader`] (IHL < 5, total length != slice length or
/// shorter than the header, too many / misplaced IPv6 extension headers),
/// [`DecodeError::BadIpv4Checksum`].
#[inline]
pub fn inspect(packet: &[u8]) -> Result<PacketInfo, DecodeError> {
    match packet.first() {
        None => Err(DecodeError::Empty),
        Some(b) => match b >> 4 {
            4 => inspect_v4(packet),
            6 => inspect_v6(packet),
            _ => Err(DecodeError::BadVersion),
        },
    }
}

/// Validates one packet found inside a bundle, the way every decoder does.
///
/// Like [`inspect`], but a packet shorter than its own headers is
/// [`DecodeError::ZeroLength`] (inside a bundle, [`DecodeError::Truncated`]
/// means a *separator* points past the end of the input), and a packet whose
/// (upper-layer) protocol is a bundle protocol is [`DecodeError::Nested`].
pub fn inspect_inner(packet: &[u8]) -> Result<PacketInfo, DecodeError> {
    match inspect(packet) {
        Ok(i) if is_bundle_protocol(i.protocol) => Err(DecodeError::Nested),
        Ok(i) => Ok(i),
        Err(DecodeError::Truncated) | Err(DecodeError::Empty) => Err(DecodeError::ZeroLength),
        Err(e) => Err(e),
    }
}

/// The checks of [`inspect_inner`] without building a [`PacketInfo`]: what
/// the bundle decoders run on every inner packet. Returns the IP version.
/// Same result as `inspect_inner(packet).map(|i| i.version)`, error for error.
#[inline(always)]
pub fn validate_inner(packet: &[u8]) -> Result<u8, DecodeError> {
    if valid_inner_ipv4_20(packet) {
        return Ok(4);
    }
    validate_inner_full(packet)
}

/// [`validate_inner`]'s fast path, in line: a valid IPv4 packet with a
/// 20-byte header (the voice case). Version 4 + IHL 5 in the first byte,
/// total length equal to the slice (so >= 20 and non-zero), a correct
/// checksum and a protocol that is not a bundle protocol pass every check of
/// the full path. `false` for anything else (valid or not), which the full
/// path then checks and names the error of.
#[inline(always)]
pub(crate) fn valid_inner_ipv4_20(packet: &[u8]) -> bool {
    match packet.first_chunk::<IPV4_HEADER_LEN>() {
        Some(h) => {
            h[0] == 0x45
                && usize::from(u16::from_be_bytes([h[2], h[3]])) == packet.len()
                && ipv4_checksum_ok_20(h)
                && !is_bundle_protocol(h[9])
        }
        None => false,
    }
}

/// All of [`validate_inner`]'s checks, for any packet.
#[inline(never)]
fn validate_inner_full(packet: &[u8]) -> Result<u8, DecodeError> {
    let r = match packet.first() {
        None => Err(DecodeError::Empty),
        Some(b) => match b >> 4 {
            4 => check_v4(packet).map(|_| (4, packet[9])),
            6 => walk_v6(packet).map(|w| (6, w.next)),
            _ => Err(DecodeError::BadVersion),
        },
    };
    match r {
        Ok((_, protocol)) if is_bundle_protocol(protocol) => Err(DecodeError::Nested),
        Ok((version, _)) => Ok(version),
        Err(DecodeError::Truncated) | Err(DecodeError::Empty) => Err(DecodeError::ZeroLength),
        Err(e) => Err(e),
    }
}

/// What the engine's fast path reads from an unfragmented UDP/IPv4 packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Udp4 {
    /// The TOS byte: DiffServ code point << 2 | ECN.
    pub tos: u8,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
}

/// The voice case of [`inspect`], in line: a valid IPv4 packet with a 20-byte
/// header (version 4 + IHL 5, total length equal to the slice, correct
/// checksum), not a fragment (MF clear, offset 0), carrying UDP with at least
/// the two ports present. `None` for anything else, valid or not (the caller
/// then takes the general path through [`inspect`]).
///
/// When this returns `Some(u)`, `inspect(packet)` returns `Ok(info)` with
/// `version == 4`, `protocol == 17`, `!fragment`, `len == packet.len()`,
/// `dscp == u.tos >> 2`, `src_port == Some(u.src_port)`,
/// `dst_port == Some(u.dst_port)` and `tcp_flags == None` (tested below).
#[inline(always)]
pub(crate) fn udp4(packet: &[u8]) -> Option<Udp4> {
    let p = packet.first_chunk::<{ IPV4_HEADER_LEN + 4 }>()?;
    let h = p.first_chunk::<IPV4_HEADER_LEN>()?;
    if h[0] == 0x45
        && h[9] == proto::UDP
        && usize::from(be16(h, 2)) == packet.len()
        && be16(h, 6) & 0x3fff == 0
        && ipv4_checksum_ok_20(h)
    {
        Some(Udp4 {
            tos: h[1],
            src_port: be16(p, 20),
            dst_port: be16(p, 22),
        })
    } else {
        None
    }
}

/// Ports (and TCP flags) of an upper-layer header starting at `l4`, if present.
#[inline]
fn ports(protocol: u8, l4: &[u8]) -> (Option<u16>, Option<u16>, Option<u8>) {
    match protocol {
        proto::TCP | proto::UDP | proto::SCTP | proto::UDPLITE if l4.len() >= 4 => {
            let flags = if protocol == proto::TCP && l4.len() >= 20 {
                Some(l4[13])
            } else {
                None
            };
            (Some(be16(l4, 0)), Some(be16(l4, 2)), flags)
        }
        _ => (None, None, None),
    }
}

/// All IPv4 validity checks; returns the header length.
#[inline]
fn check_v4(p: &[u8]) -> Result<usize, DecodeError> {
    if p.len() < IPV4_HEADER_LEN {
        return Err(DecodeError::Truncated);
    }
    let ihl = usize::from(p[0] & 0x0f) * 4;
    if ihl < IPV4_HEADER_LEN {
        return Err(DecodeError::BadInnerHeader);
    }
    if ihl > p.len() {
        return Err(DecodeError::Truncated);
    }
    let total = usize::from(be16(p, 2));
    if total == 0 {
        return Err(DecodeError::ZeroLength);
    }
    if total < ihl || total != p.len() {
        return Err(DecodeError::BadInnerHeader);
    }
    if !ipv4_checksum_ok(&p[..ihl]) {
        return Err(DecodeError::BadIpv4Checksum);
    }
    Ok(ihl)
}

#[inline]
fn inspect_v4(p: &[u8]) -> Result<PacketInfo, DecodeError> {
    let ihl = check_v4(p)?;
    let total = p.len();
    let frag = be16(p, 6);
    let offset = frag & 0x1fff;
    let more = frag & 0x2000 != 0;
    let protocol = p[9];
    let (src_port, dst_port, tcp_flags) = if offset == 0 {
        ports(protocol, &p[ihl..])
    } else {
        (None, None, None)
    };
    Ok(PacketInfo {
        version: 4,
        protocol,
        src: IpAddr::V4(Ipv4Addr::new(p[12], p[13], p[14], p[15])),
        dst: IpAddr::V4(Ipv4Addr::new(p[16], p[17], p[18], p[19])),
        dscp: p[1] >> 2,
        len: total,
        fragment: more || offset != 0,
        src_port,
        dst_port,
        tcp_flags,
    })
}

/// Where an IPv6 packet's extension-header walk ended.
struct V6Walk {
    /// Upper-layer protocol (or ESP / no-next-header / the header after a non-first fragment).
    next: u8,
    /// Offset of the upper-layer header.
    off: usize,
    fragment: bool,
    first_fragment: bool,
}

/// All IPv6 validity checks and the bounded extension-header walk (out of
/// line, so the IPv4 checks inline into their callers without it).
#[inline(never)]
fn walk_v6(p: &[u8]) -> Result<V6Walk, DecodeError> {
    if p.len() < IPV6_HEADER_LEN {
        return Err(DecodeError::Truncated);
    }
    let payload = usize::from(be16(p, 4));
    if payload == 0 && p.len() > IPV6_HEADER_LEN {
        // A jumbogram (RFC 2675) or a GSO super-packet: not a single packet we carry.
        return Err(DecodeError::ZeroLength);
    }
    if payload + IPV6_HEADER_LEN != p.len() {
        return Err(DecodeError::BadInnerHeader);
    }
    let mut next = p[6];
    let mut off = IPV6_HEADER_LEN;
    let mut fragment = false;
    // Ports are only meaningful when the upper-layer header is in this packet.
    let mut first_fragment = true;
    let mut walked = 0;
    loop {
        let hlen = match next {
            proto::HOPOPT | proto::ROUTING | proto::DSTOPTS => {
                if next == proto::HOPOPT && walked != 0 {
                    // RFC 8200 4.1: hop-by-hop options only directly after the IPv6 header.
                    return Err(DecodeError::BadInnerHeader);
                }
                if off + 2 > p.len() {
                    return Err(DecodeError::Truncated);
                }
                (usize::from(p[off + 1]) + 1) * 8
            }
            proto::FRAGMENT => {
                if off + 8 > p.len() {
                    return Err(DecodeError::Truncated);
                }
                fragment = true;
                let fo = be16(p, off + 2);
                if fo & 0xfff8 != 0 {
                    first_fragment = false;
                }
                8
            }
            proto::AH => {
                if off + 2 > p.len() {
                    return Err(DecodeError::Truncated);
                }
                (usize::from(p[off + 1]) + 2) * 4
            }
            // ESP (opaque), no-next-header, or an upper layer: stop.
            _ => break,
        };
        if off + hlen > p.len() {
            return Err(DecodeError::Truncated);
        }
        walked += 1;
        if walked > MAX_IPV6_EXT_HEADERS {
            return Err(DecodeError::BadInnerHeader);
        }
        next = p[off];
        off += hlen;
        if !first_fragment {
            // A non-first fragment: what follows is the middle of the payload.
            break;
        }
    }
    Ok(V6Walk {
        next,
        off,
        fragment,
        first_fragment,
    })
}

#[inline(never)]
fn inspect_v6(p: &[u8]) -> Result<PacketInfo, DecodeError> {
    let V6Walk {
        next,
        off,
        fragment,
        first_fragment,
    } = walk_v6(p)?;
    let (src_port, dst_port, tcp_flags) = if first_fragment {
        ports(next, &p[off..])
    } else {
        (None, None, None)
    };
    let mut s = [0u8; 16];
    let mut d = [0u8; 16];
    s.copy_from_slice(&p[8..24]);
    d.copy_from_slice(&p[24..40]);
    let tclass = ((p[0] & 0x0f) << 4) | (p[1] >> 4);
    Ok(PacketInfo {
        version: 6,
        protocol: next,
        src: IpAddr::V6(Ipv6Addr::from(s)),
        dst: IpAddr::V6(Ipv6Addr::from(d)),
        dscp: tclass >> 2,
        len: p.len(),
        fragment,
        src_port,
        dst_port,
        tcp_flags,
    })
}

/// The Internet checksum (RFC 1071) of `data`, as stored in a header.
///
/// Store it big-endian (`checksum(..).to_be_bytes()`). Over a header that
/// already holds a correct checksum the result is 0. An odd trailing byte is
/// padded with a zero byte, as RFC 1071 says.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    // Sum 32-bit big-endian words into a 64-bit accumulator and fold at the
    // end (RFC 1071 2(A)/(B): the one's-complement sum is independent of word
    // size and byte order up to the final fold). No overflow below 2^32 words.
    let mut sum: u64 = 0;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        sum += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    match *words.remainder() {
        [a] => sum += u64::from(a) << 8,
        [a, b] => sum += u64::from(u16::from_be_bytes([a, b])),
        [a, b, c] => sum += u64::from(u16::from_be_bytes([a, b])) + (u64::from(c) << 8),
        _ => {}
    }
    !fold(sum)
}

/// Folds a 64-bit one's-complement sum to 16 bits, in a fixed number of
/// steps (no data-dependent loop).
#[inline]
fn fold(sum: u64) -> u16 {
    // 64 -> 33 -> 32 bits, then 32 -> 17 -> 16 bits; each step adds the
    // carries back in (end-around carry), and the bounds shown make a third
    // step unnecessary.
    let s = (sum & 0xffff_ffff) + (sum >> 32); // < 2^33
    let s = (s & 0xffff_ffff) + (s >> 32); // < 2^32
    let s = (s & 0xffff) + (s >> 16); // < 2^17
    let s = (s & 0xffff) + (s >> 16); // <= 0xffff
    s as u16
}

/// True when an IPv4 header (`hdr.len()` = the IHL in bytes) holds a correct
/// checksum, i.e. [`checksum`] over it is 0. The common 20-byte header gets
/// [`ipv4_checksum_ok_20`].
#[inline]
fn ipv4_checksum_ok(hdr: &[u8]) -> bool {
    match <&[u8; IPV4_HEADER_LEN]>::try_from(hdr) {
        Ok(h) => ipv4_checksum_ok_20(h),
        Err(_) => checksum(hdr) == 0,
    }
}

/// [`ipv4_checksum_ok`] for a 20-byte header, without a fold.
///
/// The one's-complement sum of the header's 16-bit words is `0xffff` (the
/// checksum verifies) exactly when the plain integer sum `T` of those words is
/// a non-zero multiple of 65535: end-around-carry addition computes `T` modulo
/// 65535, except that it represents a non-zero multiple as `0xffff` and only
/// an all-zero header sums to 0. Two facts make the words cheap to read:
/// a 32-bit word `hi * 2^16 + lo` is `hi + lo` modulo 65535 (as `2^16 ≡ 1`), so
/// five 32-bit words may be summed instead of ten 16-bit ones; and reading the
/// bytes little-endian swaps the two bytes of every 16-bit word, which
/// multiplies its value by 256 modulo 65535 (`256 * (256a + b) ≡ 256b + a`),
/// and 256 is invertible modulo 65535, so the little-endian sum is a multiple
/// of 65535 exactly when the big-endian one is (and zero exactly when it is).
///
/// "A non-zero multiple of 65535" is one multiply and one compare: 65535 is
/// odd, so multiplying by its inverse modulo 2^64 maps the multiples
/// `65535 * k` (`k <= u64::MAX / 65535`) to `k` and every other value above
/// `u64::MAX / 65535`; subtracting 1 moves `k = 0` (the all-zero header) to
/// the top as well.
#[inline(always)]
fn ipv4_checksum_ok_20(h: &[u8; IPV4_HEADER_LEN]) -> bool {
    /// The inverse of 65535 modulo 2^64.
    const INV: u64 = 0xfffe_fffe_fffe_ffff;
    const _: () = assert!(INV.wrapping_mul(0xffff) == 1);
    let w = |i: usize| u64::from(u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]));
    // Five words below 2^32 each: no overflow.
    let t = w(0) + w(4) + w(8) + w(12) + w(16);
    // t != 0 && t % 0xffff == 0
    t.wrapping_mul(INV).wrapping_sub(1) < u64::MAX / 0xffff
}

/// Writes a 20-byte IPv4 header (no options, DF clear, checksum filled) for a
/// packet carrying `payload_len` bytes of `protocol`.
///
/// `dscp` is the 6-bit code point (masked to 6 bits; ECN is written as 0).
///
/// # Panics
/// If `payload_len > 65_515` (the packet would not fit IPv4's 16-bit total
/// length). That is a caller bug: a bundle is never larger than its peer's
/// maximum; [`try_emit_ipv4_header`] returns `false` instead.
#[allow(clippy::too_many_arguments)]
pub fn emit_ipv4_header(
    out: &mut [u8; 20],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    protocol: u8,
    dscp: u8,
    ttl: u8,
    ident: u16,
    payload_len: usize,
) {
    assert!(
        try_emit_ipv4_header(out, src, dst, protocol, dscp, ttl, ident, payload_len),
        "IPv4 payload of {payload_len} bytes exceeds 65515"
    );
}

/// Like [`emit_ipv4_header`], but returns `false` (and leaves `out` untouched)
/// when `payload_len` does not fit.
#[allow(clippy::too_many_arguments)]
pub fn try_emit_ipv4_header(
    out: &mut [u8; 20],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    protocol: u8,
    dscp: u8,
    ttl: u8,
    ident: u16,
    payload_len: usize,
) -> bool {
    let Some(total) = payload_len
        .checked_add(IPV4_HEADER_LEN)
        .filter(|t| *t <= MAX_PACKET)
    else {
        return false;
    };
    let total = total as u16;
    out[0] = 0x45;
    out[1] = (dscp & 0x3f) << 2;
    out[2..4].copy_from_slice(&total.to_be_bytes());
    out[4..6].copy_from_slice(&ident.to_be_bytes());
    out[6] = 0; // flags: DF clear, MF clear
    out[7] = 0; // fragment offset 0
    out[8] = ttl;
    out[9] = protocol;
    out[10] = 0;
    out[11] = 0;
    out[12..16].copy_from_slice(&src.octets());
    out[16..20].copy_from_slice(&dst.octets());
    let c = checksum(&out[..]);
    out[10..12].copy_from_slice(&c.to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 1071 / well-known example header (Wikipedia "IPv4 header checksum").
    const EXAMPLE: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    fn v4(protocol: u8, payload: &[u8]) -> Vec<u8> {
        let mut h = [0u8; 20];
        emit_ipv4_header(
            &mut h,
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            protocol,
            46,
            64,
            7,
            payload.len(),
        );
        let mut p = h.to_vec();
        p.extend_from_slice(payload);
        p
    }

    fn v6(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x60 | (46 >> 2); // tclass = 46 << 2 = 0xb8 -> high nibble 0xb
        p[1] = ((46u8 << 2) & 0x0f) << 4;
        p[4..6].copy_from_slice(&(payload.len() as u16).to_be_bytes());
        p[6] = next;
        p[7] = 64;
        p[8] = 0xfd;
        p[23] = 1;
        p[24] = 0xfd;
        p[39] = 2;
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn checksum_known_header() {
        let mut h = EXAMPLE;
        assert_eq!(checksum(&h), 0);
        h[10] = 0;
        h[11] = 0;
        assert_eq!(checksum(&h), 0xb861);
    }

    #[test]
    fn checksum_matches_naive_16_bit_sum() {
        fn naive(d: &[u8]) -> u16 {
            let mut s: u32 = 0;
            for c in d.chunks(2) {
                s += u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0));
                s = (s & 0xffff) + (s >> 16);
            }
            !(s as u16)
        }
        let mut x: u32 = 0x1234_5678;
        let mut data = Vec::new();
        for len in 0..300 {
            assert_eq!(checksum(&data), naive(&data), "len {len}");
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            data.push(x as u8);
        }
        assert_eq!(checksum(&[0xff; 64]), naive(&[0xff; 64]));
        assert_eq!(checksum(&[0u8; 7]), 0xffff);
    }

    #[test]
    fn ipv4_checksum_ok_agrees_with_checksum() {
        // The 20-byte straight-line path and the general path both say
        // "valid" exactly when `checksum` is 0: random headers, the same
        // headers with their checksum fixed, and one bit flipped after that.
        let mut x: u32 = 0x9e37_79b9;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        for round in 0..2_000 {
            let len = [20, 24, 40, 60][round % 4];
            let mut h: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
            if round % 7 == 0 {
                h.iter_mut().for_each(|b| *b = 0xff);
            }
            assert_eq!(ipv4_checksum_ok(&h), checksum(&h) == 0, "{h:02x?}");
            h[10] = 0;
            h[11] = 0;
            let c = checksum(&h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            assert!(ipv4_checksum_ok(&h), "fixed checksum accepted: {h:02x?}");
            let bit = rnd() as usize % (len * 8);
            h[bit / 8] ^= 1 << (bit % 8);
            assert!(!ipv4_checksum_ok(&h), "one flipped bit rejected: {h:02x?}");
            assert_eq!(checksum(&h) == 0, ipv4_checksum_ok(&h));
        }
        assert!(
            !ipv4_checksum_ok(&[0u8; 20]),
            "all-zero header sums to 0, not 0xffff"
        );
        // Sums at and around the multiples of 65535 (and of 2^16, where a
        // fold carries): two or three non-zero 16-bit words anywhere.
        for round in 0..20_000u32 {
            let mut h = [0u8; 20];
            let a = rnd() as u16;
            let target =
                [0xffffu32, 0x1_fffe, 0x2_fffd, 0x1_0000, 0xfffe, 0x1_ffff][round as usize % 6];
            let b = target.wrapping_sub(u32::from(a)) as u16;
            let (i, j) = (rnd() as usize % 10, rnd() as usize % 10);
            h[2 * i..2 * i + 2].copy_from_slice(&a.to_be_bytes());
            let old = u16::from_be_bytes([h[2 * j], h[2 * j + 1]]);
            h[2 * j..2 * j + 2].copy_from_slice(&old.wrapping_add(b).to_be_bytes());
            if round % 3 == 0 {
                let k = rnd() as usize % 10;
                h[2 * k] ^= 0xff;
            }
            assert_eq!(ipv4_checksum_ok(&h), checksum(&h) == 0, "{h:02x?}");
        }
    }

    /// The header CI's fuzzer found (ip_inspect, 2026-11-24): its other words
    /// sum to 0xffff, so both ones'-complement zeros are valid checksums.
    /// `inspect` accepts either; `emit_ipv4_header` writes 0x0000.
    #[test]
    fn both_checksum_zeros_accepted_emit_writes_0000() {
        let mut p = vec![
            0x45, 0x40, 0x00, 0x18, 0x0c, 0x00, 0x00, 0x00, 0x00, 0xd0, 0xff, 0xff, 0x01, 0xbf,
            0xff, 0xff, 0x46, 0x19, 0x65, 0xff, 0xf8, 0xfa, 0xff, 0x65,
        ];
        assert!(inspect(&p).is_ok());
        let mut h = [0u8; 20];
        emit_ipv4_header(
            &mut h,
            Ipv4Addr::new(1, 191, 255, 255),
            Ipv4Addr::new(70, 25, 101, 255),
            0xd0,
            16,
            0,
            0x0c00,
            4,
        );
        assert_eq!(h[10..12], [0, 0]);
        assert_eq!(h[..10], p[..10]);
        assert_eq!(h[12..], p[12..20]);
        p[10..12].copy_from_slice(&[0, 0]);
        assert!(inspect(&p).is_ok());
        p[10..12].copy_from_slice(&[0, 1]);
        assert!(inspect(&p).is_err());
    }

    #[test]
    fn checksum_odd_length_pads() {
        assert_eq!(checksum(&[0x01]), !0x0100);
        assert_eq!(checksum(&[0x01, 0x00]), checksum(&[0x01]));
    }

    #[test]
    fn emit_matches_known_header() {
        let mut h = [0u8; 20];
        emit_ipv4_header(
            &mut h,
            Ipv4Addr::new(192, 168, 0, 1),
            Ipv4Addr::new(192, 168, 0, 199),
            17,
            0,
            64,
            0,
            0x73 - 20,
        );
        // Same as EXAMPLE except DF (we leave DF clear): flags byte 0 and checksum adjusted.
        assert_eq!(h[..6], EXAMPLE[..6]);
        assert_eq!(h[6], 0);
        assert_eq!(h[8..10], EXAMPLE[8..10]);
        assert_eq!(u16::from_be_bytes([h[10], h[11]]), 0xb861 + 0x4000);
        assert_eq!(checksum(&h), 0);
    }

    #[test]
    fn emit_rejects_oversize() {
        let mut h = [0u8; 20];
        let a = Ipv4Addr::LOCALHOST;
        assert!(try_emit_ipv4_header(&mut h, a, a, 253, 0, 1, 0, 65_515));
        assert!(!try_emit_ipv4_header(&mut h, a, a, 253, 0, 1, 0, 65_516));
        assert!(!try_emit_ipv4_header(
            &mut h,
            a,
            a,
            253,
            0,
            1,
            0,
            usize::MAX
        ));
    }

    #[test]
    fn inspect_udp_v4() {
        let p = v4(17, &[0x13, 0x88, 0x13, 0x89, 0, 12, 0, 0, 1, 2, 3, 4]);
        let i = inspect(&p).unwrap();
        assert_eq!(i.version, 4);
        assert_eq!(i.protocol, 17);
        assert_eq!(i.dscp, 46);
        assert_eq!(i.len, 32);
        assert_eq!(i.src_port, Some(5000));
        assert_eq!(i.dst_port, Some(5001));
        assert_eq!(i.tcp_flags, None);
        assert!(!i.fragment);
        assert_eq!(i.src, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(i.dst, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
    }

    #[test]
    fn inspect_tcp_flags_v4() {
        let mut tcp = [0u8; 20];
        tcp[0..2].copy_from_slice(&80u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&443u16.to_be_bytes());
        tcp[12] = 0x50;
        tcp[13] = tcp_flags::SYN;
        let i = inspect(&v4(6, &tcp)).unwrap();
        assert_eq!(i.tcp_flags, Some(tcp_flags::SYN));
        assert_eq!((i.src_port, i.dst_port), (Some(80), Some(443)));
        // Only 19 bytes of TCP header: ports yes, flags no.
        let i = inspect(&v4(6, &tcp[..19])).unwrap();
        assert_eq!(i.tcp_flags, None);
        assert_eq!(i.src_port, Some(80));
        // 3 bytes: no ports.
        let i = inspect(&v4(17, &tcp[..3])).unwrap();
        assert_eq!(i.src_port, None);
    }

    #[test]
    fn inspect_v4_fragments() {
        let mut p = v4(17, &[0, 1, 0, 2, 0, 8, 0, 0]);
        // MF set, offset 0: a first fragment, ports still read.
        p[6] = 0x20;
        p[10] = 0;
        p[11] = 0;
        let c = checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        let i = inspect(&p).unwrap();
        assert!(i.fragment);
        assert_eq!(i.src_port, Some(1));
        // Offset 1 (8 bytes): no ports.
        p[6] = 0x00;
        p[7] = 0x01;
        p[10] = 0;
        p[11] = 0;
        let c = checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        let i = inspect(&p).unwrap();
        assert!(i.fragment);
        assert_eq!(i.src_port, None);
    }

    #[test]
    fn inspect_v4_errors() {
        assert_eq!(inspect(&[]), Err(DecodeError::Empty));
        assert_eq!(inspect(&[0x55; 20]), Err(DecodeError::BadVersion));
        let p = v4(17, &[0; 8]);
        assert_eq!(inspect(&p[..19]), Err(DecodeError::Truncated));
        // Total length says 28, slice is 27 / 29.
        assert_eq!(inspect(&p[..27]), Err(DecodeError::BadInnerHeader));
        let mut longer = p.clone();
        longer.push(0);
        assert_eq!(inspect(&longer), Err(DecodeError::BadInnerHeader));
        // Checksum.
        let mut bad = p.clone();
        bad[8] ^= 1;
        assert_eq!(inspect(&bad), Err(DecodeError::BadIpv4Checksum));
        // IHL 4.
        let mut bad = p.clone();
        bad[0] = 0x44;
        assert_eq!(inspect(&bad), Err(DecodeError::BadInnerHeader));
        // IHL 15 (60 bytes) > 28 bytes present.
        let mut bad = p.clone();
        bad[0] = 0x4f;
        assert_eq!(inspect(&bad), Err(DecodeError::Truncated));
        // Total length 0.
        let mut bad = p.clone();
        bad[2] = 0;
        bad[3] = 0;
        assert_eq!(inspect(&bad), Err(DecodeError::ZeroLength));
    }

    #[test]
    fn inspect_v4_options() {
        // IHL 6 with a 4-byte NOP option, checksum over all 24 bytes.
        let mut p = vec![
            0x46, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 1, 1, 1, 1,
        ];
        p.extend_from_slice(&[0, 7, 0, 9]);
        let c = checksum(&p[..24]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        let i = inspect(&p).unwrap();
        assert_eq!((i.src_port, i.dst_port), (Some(7), Some(9)));
    }

    #[test]
    fn inspect_udp_v6() {
        let p = v6(17, &[0x13, 0x88, 0x13, 0x89, 0, 8, 0, 0]);
        let i = inspect(&p).unwrap();
        assert_eq!(i.version, 6);
        assert_eq!(i.protocol, 17);
        assert_eq!(i.dscp, 46);
        assert_eq!(i.len, 48);
        assert_eq!((i.src_port, i.dst_port), (Some(5000), Some(5001)));
        assert!(!i.fragment);
    }

    #[test]
    fn inspect_v6_ext_headers() {
        // hop-by-hop (8) -> dest opts (16) -> fragment (offset 0) -> UDP
        let mut pl = vec![60, 0, 1, 4, 0, 0, 0, 0];
        pl.extend_from_slice(&[44, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        pl.extend_from_slice(&[17, 0, 0, 1, 0, 0, 0, 42]);
        pl.extend_from_slice(&[0, 53, 0, 54, 0, 8, 0, 0]);
        let p = v6(0, &pl);
        let i = inspect(&p).unwrap();
        assert_eq!(i.protocol, 17);
        assert!(i.fragment);
        assert_eq!((i.src_port, i.dst_port), (Some(53), Some(54)));
        // Non-first fragment: no ports.
        let mut q = p.clone();
        q[40 + 24 + 2] = 0x00;
        q[40 + 24 + 3] = 0x08; // offset 1
        let i = inspect(&q).unwrap();
        assert!(i.fragment);
        assert_eq!(i.protocol, 17);
        assert_eq!(i.src_port, None);
        // AH (len field 1 -> (1+2)*4 = 12 bytes) then TCP SYN.
        let mut pl = vec![6, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut tcp = [0u8; 20];
        tcp[13] = tcp_flags::RST;
        pl.extend_from_slice(&tcp);
        let i = inspect(&v6(51, &pl)).unwrap();
        assert_eq!(i.protocol, 6);
        assert_eq!(i.tcp_flags, Some(tcp_flags::RST));
        // ESP stops the walk.
        let i = inspect(&v6(50, &[0; 16])).unwrap();
        assert_eq!(i.protocol, 50);
        assert_eq!(i.src_port, None);
    }

    #[test]
    fn inspect_v6_errors() {
        let p = v6(17, &[0; 8]);
        assert_eq!(inspect(&p[..39]), Err(DecodeError::Truncated));
        assert_eq!(inspect(&p[..47]), Err(DecodeError::BadInnerHeader));
        let mut jumbo = p.clone();
        jumbo[4] = 0;
        jumbo[5] = 0;
        assert_eq!(inspect(&jumbo), Err(DecodeError::ZeroLength));
        // A bare 40-byte header with payload length 0 is fine.
        assert!(inspect(&v6(59, &[])).is_ok());
        // Extension header running past the end.
        assert_eq!(
            inspect(&v6(60, &[17, 1, 0, 0, 0, 0, 0, 0])),
            Err(DecodeError::Truncated)
        );
        assert_eq!(inspect(&v6(60, &[17])), Err(DecodeError::Truncated));
        assert_eq!(inspect(&v6(44, &[17, 0, 0])), Err(DecodeError::Truncated));
        // Nine destination-option headers: over the bound.
        let mut pl = Vec::new();
        for i in 0..9 {
            pl.extend_from_slice(&[if i == 8 { 59 } else { 60 }, 0, 0, 0, 0, 0, 0, 0]);
        }
        assert_eq!(inspect(&v6(60, &pl)), Err(DecodeError::BadInnerHeader));
        // Eight are fine.
        assert_eq!(inspect(&v6(60, &pl[8..])).unwrap().protocol, 59);
        // Hop-by-hop not first.
        let pl = [0, 0, 0, 0, 0, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(inspect(&v6(60, &pl)), Err(DecodeError::BadInnerHeader));
    }

    /// `udp4` says `Some` only for packets `inspect` accepts as unfragmented
    /// UDP/IPv4 with both ports, with the same fields, and says `Some` for
    /// every such packet with a 20-byte header.
    fn check_udp4(p: &[u8]) {
        let fast = udp4(p);
        let full = inspect(p);
        match (fast, &full) {
            (Some(u), Ok(i)) => {
                assert_eq!(
                    (i.version, i.protocol, i.fragment, i.len, i.tcp_flags),
                    (4, proto::UDP, false, p.len(), None),
                    "{p:02x?}"
                );
                assert_eq!(i.dscp, u.tos >> 2);
                assert_eq!(i.src_port, Some(u.src_port));
                assert_eq!(i.dst_port, Some(u.dst_port));
            }
            (Some(_), Err(e)) => panic!("udp4 accepts what inspect rejects ({e:?}): {p:02x?}"),
            (None, Ok(i)) => assert!(
                p[0] != 0x45 || i.protocol != proto::UDP || i.fragment || i.src_port.is_none(),
                "udp4 refuses a plain UDP/IPv4 packet: {p:02x?}"
            ),
            (None, Err(_)) => {}
        }
    }

    #[test]
    fn udp4_agrees_with_inspect() {
        let mut x: u32 = 0x2468_ace1;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        for round in 0..50_000u32 {
            let len = 20 + rnd() as usize % 60;
            let protocol = [17, 17, 17, 6, 253, 1][round as usize % 6];
            let mut p = v4(protocol, &vec![0x5a; len - 20]);
            p[1] = (rnd() as u8) & 0xfc;
            p[20..].iter_mut().for_each(|b| *b = rnd() as u8);
            match rnd() % 8 {
                // Header fields that matter: flags/offset, version/IHL, length.
                0 => p[6] = rnd() as u8,
                1 => p[7] = rnd() as u8,
                2 => p[0] = rnd() as u8,
                3 => p[2..4].copy_from_slice(&(rnd() as u16 % 100).to_be_bytes()),
                _ => {}
            }
            if rnd() % 4 != 0 {
                // Keep the checksum valid (else udp4 and inspect both refuse).
                p[10] = 0;
                p[11] = 0;
                let ihl = (usize::from(p[0] & 0x0f) * 4).clamp(20, p.len());
                let c = checksum(&p[..ihl]);
                p[10..12].copy_from_slice(&c.to_be_bytes());
            }
            if rnd() % 16 == 0 {
                let cut = rnd() as usize % (p.len() + 1);
                p.truncate(cut);
            }
            check_udp4(&p);
        }
        // A plain voice packet, a fragment, a 24-byte UDP packet with no payload room for more than the ports.
        let p = v4(17, &[0x40, 0, 0x40, 2, 0, 8, 0, 0]);
        assert_eq!(
            udp4(&p),
            Some(Udp4 {
                tos: 46 << 2,
                src_port: 0x4000,
                dst_port: 0x4002
            })
        );
        check_udp4(&p);
        check_udp4(&v4(17, &[0, 1, 0, 2]));
        assert!(udp4(&v4(17, &[0, 1, 0])).is_none());
        check_udp4(&v4(17, &[0, 1, 0]));
    }

    #[test]
    fn bundle_protocols() {
        assert!(is_bundle_protocol(253));
        assert!(is_bundle_protocol(254));
        assert!(!is_bundle_protocol(17));
    }
}
