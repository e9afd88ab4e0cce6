//! TCP over IPv4 and IPv6 as the gateway's TCP Improvement Module reads it:
//! a strict parse of the IP and TCP headers and of the TCP options (MSS,
//! window scale, SACK-permitted, SACK blocks, timestamps; unknown options
//! skipped by their length), and the rewrite of the advertised window with
//! an incremental checksum update (RFC 1624, eqn. 3).
//!
//! Owns: the byte layout of TCP headers and options. Must not touch: flow
//! state ([`super::tcp_flow`]), clocks, sockets. Never panics on any input,
//! never allocates; whatever it does not understand (fragments, IPv6
//! extension headers other than hop-by-hop / routing / destination options,
//! a data offset past the packet) is an error, and the caller forwards the
//! packet untouched.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;
/// Flag bits of the 16-bit offset/flags word (low 9 bits).
pub mod flags {
    /// FIN.
    pub const FIN: u16 = 0x001;
    /// SYN.
    pub const SYN: u16 = 0x002;
    /// RST.
    pub const RST: u16 = 0x004;
    /// PSH.
    pub const PSH: u16 = 0x008;
    /// ACK.
    pub const ACK: u16 = 0x010;
    /// URG.
    pub const URG: u16 = 0x020;
    /// ECE (RFC 3168).
    pub const ECE: u16 = 0x040;
    /// CWR (RFC 3168).
    pub const CWR: u16 = 0x080;
    /// AE / NS (RFC 3540, historic; AccECN).
    pub const AE: u16 = 0x100;
}

/// Largest window scale shift honoured (RFC 7323 section 2.3: larger values are used as 14).
pub const MAX_WSCALE: u8 = 14;
/// IPv6 extension headers walked at most.
const MAX_EXT: usize = 8;

/// Why a packet is not a TCP segment the gateway will touch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpError {
    /// Shorter than the IP header, or the IP length fields disagree with the slice.
    BadIp,
    /// IPv4 header checksum wrong.
    BadIpChecksum,
    /// Not TCP (after walking IPv6 extension headers).
    NotTcp,
    /// A fragment (IPv4 MF/offset, IPv6 fragment header).
    Fragment,
    /// An IPv6 extension header the parser does not walk, or too many.
    UnsupportedExtension,
    /// Fewer than 20 bytes of TCP header.
    Truncated,
    /// Data offset below 5 or past the end of the segment.
    BadDataOffset,
    /// A known option with a wrong length, or an option running past the header.
    BadOption(u8),
}

/// Options of one segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpOptions {
    /// Maximum segment size (kind 2).
    pub mss: Option<u16>,
    /// Window scale shift (kind 3), clamped to 14.
    pub wscale: Option<u8>,
    /// SACK permitted (kind 4).
    pub sack_permitted: bool,
    /// SACK blocks (kind 5): left and right edges; `sack_len` of them valid.
    pub sack: [(u32, u32); 4],
    /// Number of SACK blocks.
    pub sack_len: u8,
    /// Timestamps (kind 8): TSval, TSecr.
    pub timestamps: Option<(u32, u32)>,
    /// Unknown options skipped.
    pub unknown: u8,
    /// A TCP-MD5 (kind 19, RFC 2385) or TCP-AO (kind 29, RFC 5925) option:
    /// the segment is signed over its header, window included, so it must
    /// not be rewritten.
    pub signed: bool,
}

/// A parsed TCP segment (header fields; offsets into the packet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpSegment {
    /// 4 or 6.
    pub ip_version: u8,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// ECN field of the IP header.
    pub ecn: u8,
    /// Offset of the TCP header in the packet.
    pub tcp_offset: usize,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number.
    pub ack: u32,
    /// TCP header length (bytes).
    pub header_len: usize,
    /// Flags (9 bits, see [`flags`]).
    pub flags: u16,
    /// Advertised window (unscaled, as on the wire).
    pub window: u16,
    /// Checksum as on the wire.
    pub checksum: u16,
    /// Options.
    pub options: TcpOptions,
    /// Payload bytes.
    pub payload_len: usize,
}

impl TcpSegment {
    /// Whether a flag is set.
    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
    /// Sequence space the segment occupies (payload + SYN + FIN).
    pub fn seq_len(&self) -> u32 {
        self.payload_len as u32 + u32::from(self.has(flags::SYN)) + u32::from(self.has(flags::FIN))
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Parse TCP options strictly.
pub fn parse_options(mut o: &[u8]) -> Result<TcpOptions, TcpError> {
    let mut out = TcpOptions::default();
    while let Some((&kind, rest)) = o.split_first() {
        match kind {
            0 => break,
            1 => {
                o = rest;
                continue;
            }
            _ => {}
        }
        let len = usize::from(*rest.first().ok_or(TcpError::BadOption(kind))?);
        if len < 2 || len > o.len() {
            return Err(TcpError::BadOption(kind));
        }
        let body = &o[2..len];
        let bad = || TcpError::BadOption(kind);
        match kind {
            2 if len == 4 => out.mss = Some(be16(body, 0)),
            3 if len == 3 => out.wscale = Some(body[0].min(MAX_WSCALE)),
            4 if len == 2 => out.sack_permitted = true,
            5 if (10..=34).contains(&len) && (len - 2) % 8 == 0 => {
                for (i, b) in body.chunks_exact(8).enumerate() {
                    out.sack[i] = (be32(b, 0), be32(b, 4));
                }
                out.sack_len = ((len - 2) / 8) as u8;
            }
            8 if len == 10 => out.timestamps = Some((be32(body, 0), be32(body, 4))),
            2..=5 | 8 => return Err(bad()),
            19 | 29 => {
                out.signed = true;
                out.unknown = out.unknown.saturating_add(1);
            }
            _ => out.unknown = out.unknown.saturating_add(1),
        }
        o = &o[len..];
    }
    Ok(out)
}

/// Find the TCP header: returns (version, src, dst, ecn, tcp offset).
fn ip_layer(p: &[u8]) -> Result<(u8, IpAddr, IpAddr, u8, usize), TcpError> {
    match p.first().map(|b| b >> 4) {
        Some(4) => {
            if p.len() < 20 {
                return Err(TcpError::BadIp);
            }
            let ihl = usize::from(p[0] & 0x0f) * 4;
            if ihl < 20 || p.len() < ihl || usize::from(be16(p, 2)) != p.len() {
                return Err(TcpError::BadIp);
            }
            if crate::wire::ip::checksum(&p[..ihl]) != 0 {
                return Err(TcpError::BadIpChecksum);
            }
            if be16(p, 6) & 0x3fff != 0 {
                return Err(TcpError::Fragment);
            }
            if p[9] != PROTO_TCP {
                return Err(TcpError::NotTcp);
            }
            let a = |at: usize| IpAddr::V4(Ipv4Addr::new(p[at], p[at + 1], p[at + 2], p[at + 3]));
            Ok((4, a(12), a(16), p[1] & 3, ihl))
        }
        Some(6) => {
            if p.len() < 40 || usize::from(be16(p, 4)) + 40 != p.len() {
                return Err(TcpError::BadIp);
            }
            let a = |at: usize| {
                let mut x = [0u8; 16];
                x.copy_from_slice(&p[at..at + 16]);
                IpAddr::V6(Ipv6Addr::from(x))
            };
            let ecn = ((be16(p, 0) >> 4) & 3) as u8;
            let (mut next, mut off) = (p[6], 40usize);
            for _ in 0..=MAX_EXT {
                match next {
                    PROTO_TCP => return Ok((6, a(8), a(24), ecn, off)),
                    0 | 43 | 60 => {
                        let h = p.get(off..off + 2).ok_or(TcpError::BadIp)?;
                        next = h[0];
                        off += (usize::from(h[1]) + 1) * 8;
                        if off > p.len() {
                            return Err(TcpError::BadIp);
                        }
                    }
                    44 => return Err(TcpError::Fragment),
                    // No next header, ESP, AH, mobility, HIP, shim6, ...: not walked.
                    59 | 50 | 51 | 135 | 139 | 140 | 253 | 254 => {
                        return Err(TcpError::UnsupportedExtension)
                    }
                    _ => return Err(TcpError::NotTcp),
                }
            }
            Err(TcpError::UnsupportedExtension)
        }
        _ => Err(TcpError::BadIp),
    }
}

/// Parse one IPv4/IPv6 packet carrying a TCP segment (the whole slice is the packet).
pub fn parse(p: &[u8]) -> Result<TcpSegment, TcpError> {
    let (ip_version, src, dst, ecn, off) = ip_layer(p)?;
    let t = p.get(off..).ok_or(TcpError::Truncated)?;
    if t.len() < 20 {
        return Err(TcpError::Truncated);
    }
    let header_len = usize::from(t[12] >> 4) * 4;
    if header_len < 20 || header_len > t.len() {
        return Err(TcpError::BadDataOffset);
    }
    let options = parse_options(&t[20..header_len])?;
    Ok(TcpSegment {
        ip_version,
        src,
        dst,
        ecn,
        tcp_offset: off,
        src_port: be16(t, 0),
        dst_port: be16(t, 2),
        seq: be32(t, 4),
        ack: be32(t, 8),
        header_len,
        flags: be16(t, 12) & 0x01ff,
        window: be16(t, 14),
        checksum: be16(t, 16),
        options,
        payload_len: t.len() - header_len,
    })
}

/// RFC 1624 eqn. 3: the checksum after one 16-bit word of the covered data
/// changes from `old` to `new`: `HC' = ~(~HC + ~m + m')` in one's complement.
pub fn checksum_adjust(hc: u16, old: u16, new: u16) -> u16 {
    let mut sum = u32::from(!hc) + u32::from(!old) + u32::from(new);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}

/// The TCP checksum of `p` computed from scratch (pseudo header + segment),
/// with the checksum field counted as 0; `None` if `p` is not a segment
/// [`parse`] accepts.
pub fn full_checksum(p: &[u8]) -> Option<u16> {
    let s = parse(p).ok()?;
    let seg = &p[s.tcp_offset..];
    let mut sum: u64 = 0;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            sum += u64::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
    };
    match (s.src, s.dst) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            add(&a.octets());
            add(&b.octets());
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            add(&a.octets());
            add(&b.octets());
        }
        _ => return None,
    }
    add(&(seg.len() as u32).to_be_bytes());
    add(&[0, PROTO_TCP]);
    add(&seg[..16]);
    add(&seg[18..]);
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    Some(!(sum as u16))
}

/// Rewrite the advertised window of the segment `s` (parsed from `p`) to
/// `window`, adjusting the checksum incrementally. Returns the old window.
/// `p` must be the packet `s` came from.
pub fn set_window(p: &mut [u8], s: &TcpSegment, window: u16) -> Option<u16> {
    let t = p.get_mut(s.tcp_offset..s.tcp_offset + 20)?;
    let old = be16(t, 14);
    let hc = be16(t, 16);
    t[14..16].copy_from_slice(&window.to_be_bytes());
    t[16..18].copy_from_slice(&checksum_adjust(hc, old, window).to_be_bytes());
    Some(old)
}

/// Raise the IPv4 TTL or the IPv6 hop limit by one (not past 255),
/// adjusting the IPv4 header checksum incrementally. The daemon writes the
/// packets it took from a forwarded path back into a TUN, where the kernel
/// forwards them a second time: this undoes the second decrement. Returns
/// whether the packet changed (`false` for anything but IPv4/IPv6 with a
/// whole header, or a limit already at 255).
pub fn bump_hop_limit(p: &mut [u8]) -> bool {
    match p.first().map(|b| b >> 4) {
        Some(4) if p.len() >= 20 && p[8] < 255 => {
            // TTL shares its 16-bit word with the protocol byte.
            let old = be16(p, 8);
            p[8] += 1;
            let new = be16(p, 8);
            let hc = checksum_adjust(be16(p, 10), old, new);
            p[10..12].copy_from_slice(&hc.to_be_bytes());
            true
        }
        Some(6) if p.len() >= 40 && p[7] < 255 => {
            p[7] += 1;
            true
        }
        _ => false,
    }
}

#[cfg(test)]
#[path = "tcp_tests.rs"]
pub(crate) mod tests;
