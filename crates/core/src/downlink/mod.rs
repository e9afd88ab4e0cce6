//! Downlink multiplexing at an access point (seed 002, issue 14): the AP
//! collects the small UDP/RTP packets bound for registered stations into one
//! multicast frame per interval; each station keeps its own packets and
//! rebuilds them as the original IP/UDP packets.
//!
//! Owns: the two frame layouts ([`seed`]: the seed's 14-byte custom header;
//! [`compact`]: airpack's own, with stream ids and RTP header compression),
//! the AP-side state machine ([`mux`]), the station side ([`demux`]) and the
//! registration messages ([`register`]), the AP's lease table ([`lease`])
//! and the loss-aware rule that serves lossy stations by unicast ([`loss`]).
//!
//! Must not touch: sockets, clocks, multicast group membership, the kernel's
//! forwarding (the daemon decides what is intercepted and where frames go),
//! or the hop-by-hop bundle formats of [`crate::wire`].
//! Byte layouts: `docs/wire-format.md`, section "Downlink multiplexing".

pub mod airtime;
pub mod compact;
mod compressor;
pub mod demux;
pub mod lease;
pub mod loss;
pub mod mux;
pub mod register;
pub mod seed;

/// A stream's identifier inside a compact frame, assigned at registration
/// (0 ..= [`MAX_STREAM_ID`]).
pub type StreamId = u16;

/// Largest stream id the compact format can carry (15 bits).
pub const MAX_STREAM_ID: StreamId = 0x7fff;

/// Most packets either frame format carries (a sanity bound for parsers:
/// a 1440-byte frame holds at most ~300 compact entries).
pub const MAX_PACKETS_PER_FRAME: usize = 1024;

/// Largest frame either parser accepts (a UDP payload).
pub const MAX_FRAME: usize = 65_507;

/// Why a downlink frame was refused. Every variant names one reason and is
/// a statistics counter in the demultiplexer's statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameError {
    /// No bytes at all, or a frame header without any packet where one is required.
    Empty,
    /// A header or length field points past the end of the frame.
    Truncated,
    /// Bytes left after the last packet, or a packet count that does not match the body.
    TrailingBytes,
    /// The frame is larger than [`MAX_FRAME`], or a length uses a longer
    /// encoding than needed.
    Overlong,
    /// A packet of length zero.
    ZeroLength,
    /// Unknown format version.
    BadVersion,
    /// A reserved bit or code is set.
    Reserved,
    /// More than [`MAX_PACKETS_PER_FRAME`] packets.
    TooManyPackets,
}

impl FrameError {
    /// Number of variants.
    pub const COUNT: usize = 8;
    /// All variants, in [`FrameError::index`] order.
    pub const ALL: [FrameError; FrameError::COUNT] = [
        FrameError::Empty,
        FrameError::Truncated,
        FrameError::TrailingBytes,
        FrameError::Overlong,
        FrameError::ZeroLength,
        FrameError::BadVersion,
        FrameError::Reserved,
        FrameError::TooManyPackets,
    ];
    /// Position in [`FrameError::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
    /// Short snake-case name (statistics, vectors).
    pub fn reason(self) -> &'static str {
        match self {
            FrameError::Empty => "empty",
            FrameError::Truncated => "truncated",
            FrameError::TrailingBytes => "trailing_bytes",
            FrameError::Overlong => "overlong",
            FrameError::ZeroLength => "zero_length",
            FrameError::BadVersion => "bad_version",
            FrameError::Reserved => "reserved",
            FrameError::TooManyPackets => "too_many_packets",
        }
    }
}

impl core::fmt::Display for FrameError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.reason())
    }
}

/// Why a writer refused a packet (the frame is left as it was).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteError {
    /// The caller's buffer (or the frame limit) has no room for it.
    NoRoom,
    /// A field does not fit the format (length, stream id, port count, ...).
    OutOfRange,
    /// The frame already holds [`MAX_PACKETS_PER_FRAME`] packets.
    TooManyPackets,
}

/// Reads a big-endian u16 at `at` (caller checked the length).
#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Reads a big-endian u32 at `at` (caller checked the length).
#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Adds `data` to a one's-complement sum (RFC 1071) in 16-bit big-endian
/// words; an odd trailing byte is padded with zero, so only the last piece
/// of a checksummed area may have an odd length.
#[inline]
pub(crate) fn csum_add(mut acc: u64, data: &[u8]) -> u64 {
    let mut words = data.chunks_exact(2);
    for w in &mut words {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [b] = words.remainder() {
        acc += u64::from(*b) << 8;
    }
    acc
}

/// Folds a sum from [`csum_add`] to the 16-bit one's-complement sum.
#[inline]
pub(crate) fn csum_fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The UDP checksum of a datagram `udp` (header with the checksum field as
/// given, and payload) between `src` and `dst`: the value to store when the
/// field was zero, and 0 when a stored checksum verifies. Not mapped to
/// 0xFFFF (callers do that, RFC 768).
pub(crate) fn udp_checksum(src: &core::net::IpAddr, dst: &core::net::IpAddr, udp: &[u8]) -> u16 {
    use core::net::IpAddr;
    let len = udp.len() as u64;
    let mut acc = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            csum_add(csum_add(0, &s.octets()), &d.octets()) + 17 + len
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            csum_add(csum_add(0, &s.octets()), &d.octets()) + 17 + (len >> 16) + (len & 0xffff)
        }
        // Mixed families never occur (callers build both from one packet).
        _ => 0,
    };
    acc = csum_add(acc, udp);
    !csum_fold(acc)
}
