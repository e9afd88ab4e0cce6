//! IPv4 and IPv6 header views: just what the bundle parsers and the
//! classifier need, checked strictly against the bytes present.
//!
//! Owned by the wire layer. No policy here.

use super::DecodeError;
use core::net::IpAddr;

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

/// Reads and validates one IP packet occupying exactly `packet`.
///
/// IPv4: version, IHL >= 5, total length == `packet.len()`, header checksum.
/// IPv6: payload length + 40 == `packet.len()`; extension headers are walked
/// (bounded) to find the upper-layer protocol and a fragment header.
pub fn inspect(packet: &[u8]) -> Result<PacketInfo, DecodeError> {
    let _ = packet;
    todo!("wire::ip::inspect")
}

/// The Internet checksum (RFC 1071) of `data`, as stored in a header.
pub fn checksum(data: &[u8]) -> u16 {
    let _ = data;
    todo!("wire::ip::checksum")
}

/// Writes a 20-byte IPv4 header (no options, DF clear, checksum filled) for a
/// packet carrying `payload_len` bytes of `protocol`.
pub fn emit_ipv4_header(
    out: &mut [u8; 20],
    src: core::net::Ipv4Addr,
    dst: core::net::Ipv4Addr,
    protocol: u8,
    dscp: u8,
    ttl: u8,
    ident: u16,
    payload_len: usize,
) {
    let _ = (out, src, dst, protocol, dscp, ttl, ident, payload_len);
    todo!("wire::ip::emit_ipv4_header")
}
