//! RTCP (RFC 3550 section 6): sender and receiver reports, SDES CNAME, BYE,
//! APP, strict parsing of compound packets and writing into a caller's
//! buffer; round-trip time from LSR/DLSR; the receiver-side statistics that
//! fill a report block (appendix A.1, A.3) and the report interval (A.7).
//!
//! Owns: the RTCP byte layout and the arithmetic RFC 3550 attaches to it.
//! Must not touch: sockets, clocks, randomness (times in µs and the random
//! draw of the interval come from the caller), other statistics.
//!
//! Parsing ([`parse_compound`]) never panics, never allocates, checks every
//! length, and validates a whole compound packet before handing out anything
//! (appendix A.2 plus what section 6.1 requires): version 2 in every packet,
//! the first packet a SR or RR, padding only in the last packet, packet
//! lengths that add up exactly to the datagram, report blocks, SDES chunks
//! and items, BYE sources and reason inside their packet, and an SDES CNAME
//! present ("each compound RTCP packet MUST include an SDES CNAME").
//! Unknown packet types (e.g. RTPFB 205, XR 207) are skipped by their length.
//! Layout of each packet: `docs/wire-format.md`, section "RTCP".

mod parse;
mod reception;
mod write;

pub use parse::{
    parse_compound, Compound, Packet, ReportBlocks, SdesChunk, SdesChunks, SdesItems, Sources,
};
pub use reception::{ReceptionStats, SenderReportSeen};
pub use write::{WriteError, Writer};

/// Packet type of a sender report.
pub const PT_SR: u8 = 200;
/// Packet type of a receiver report.
pub const PT_RR: u8 = 201;
/// Packet type of source description.
pub const PT_SDES: u8 = 202;
/// Packet type of goodbye.
pub const PT_BYE: u8 = 203;
/// Packet type of application-defined.
pub const PT_APP: u8 = 204;
/// SDES item type CNAME.
pub const SDES_CNAME: u8 = 1;
/// Length of one report block.
pub const REPORT_BLOCK_LEN: usize = 24;
/// Most report blocks (or sources, or chunks) one packet can announce (5 bits).
pub const MAX_COUNT: usize = 31;

/// Why a datagram is not a valid compound RTCP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RtcpError {
    /// Empty datagram, or fewer than 4 bytes left for a packet header.
    Truncated,
    /// A packet's version field is not 2.
    BadVersion,
    /// The first packet is not a SR or RR.
    FirstNotReport,
    /// A packet's length field runs past the end of the datagram.
    LengthPastEnd,
    /// Padding bit set on a packet that is not the last.
    PaddingNotLast,
    /// Padding count 0, or larger than the packet's body.
    BadPadding,
    /// SR/RR: the report count does not match the packet length.
    BadReportCount,
    /// SDES: a chunk or item runs past its packet, or the chunk count is wrong.
    BadSdes,
    /// BYE: sources or reason run past the packet.
    BadBye,
    /// APP: shorter than SSRC and name.
    BadApp,
    /// No SDES CNAME item in the compound packet.
    NoCname,
}

impl RtcpError {
    /// Stable snake_case name, for counters.
    pub fn name(self) -> &'static str {
        match self {
            RtcpError::Truncated => "truncated",
            RtcpError::BadVersion => "bad_version",
            RtcpError::FirstNotReport => "first_not_report",
            RtcpError::LengthPastEnd => "length_past_end",
            RtcpError::PaddingNotLast => "padding_not_last",
            RtcpError::BadPadding => "bad_padding",
            RtcpError::BadReportCount => "bad_report_count",
            RtcpError::BadSdes => "bad_sdes",
            RtcpError::BadBye => "bad_bye",
            RtcpError::BadApp => "bad_app",
            RtcpError::NoCname => "no_cname",
        }
    }
}

impl std::fmt::Display for RtcpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for RtcpError {}

/// Sender information of a SR (section 6.4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SenderInfo {
    /// NTP timestamp (64-bit fixed point, seconds since 1900).
    pub ntp: u64,
    /// RTP timestamp corresponding to the same instant.
    pub rtp_ts: u32,
    /// Packets sent since the start.
    pub packets: u32,
    /// Payload octets sent since the start.
    pub octets: u32,
}

/// One reception report block (section 6.4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ReportBlock {
    /// The source this block reports on.
    pub ssrc: u32,
    /// Fraction lost since the previous report, in 1/256.
    pub fraction_lost: u8,
    /// Cumulative packets lost (24-bit signed: duplicates can make it negative).
    pub cumulative_lost: i32,
    /// Extended highest sequence number received (cycles << 16 | highest).
    pub ext_highest_seq: u32,
    /// Interarrival jitter in RTP timestamp units.
    pub jitter: u32,
    /// Middle 32 bits of the NTP timestamp of the last SR from the source (0: none).
    pub lsr: u32,
    /// Delay since that SR, in 1/65536 s.
    pub dlsr: u32,
}

/// Largest and smallest values of the 24-bit signed cumulative-lost field.
pub const CUMULATIVE_LOST_MAX: i32 = 0x7f_ffff;
/// See [`CUMULATIVE_LOST_MAX`].
pub const CUMULATIVE_LOST_MIN: i32 = -0x80_0000;

impl ReportBlock {
    /// Decode 24 bytes (the caller checked the length).
    fn from_bytes(b: &[u8; REPORT_BLOCK_LEN]) -> Self {
        let be = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        // Sign-extend the 24-bit cumulative count.
        let cum = (i32::from_be_bytes([b[5], b[6], b[7], 0])) >> 8;
        ReportBlock {
            ssrc: be(0),
            fraction_lost: b[4],
            cumulative_lost: cum,
            ext_highest_seq: be(8),
            jitter: be(12),
            lsr: be(16),
            dlsr: be(20),
        }
    }

    /// Encode into 24 bytes; the cumulative count is clamped to 24 bits
    /// (RFC 3550: "clamped" on overflow).
    fn to_bytes(self) -> [u8; REPORT_BLOCK_LEN] {
        let mut b = [0u8; REPORT_BLOCK_LEN];
        b[0..4].copy_from_slice(&self.ssrc.to_be_bytes());
        b[4] = self.fraction_lost;
        let cum = self
            .cumulative_lost
            .clamp(CUMULATIVE_LOST_MIN, CUMULATIVE_LOST_MAX);
        b[5..8].copy_from_slice(&cum.to_be_bytes()[1..4]);
        b[8..12].copy_from_slice(&self.ext_highest_seq.to_be_bytes());
        b[12..16].copy_from_slice(&self.jitter.to_be_bytes());
        b[16..20].copy_from_slice(&self.lsr.to_be_bytes());
        b[20..24].copy_from_slice(&self.dlsr.to_be_bytes());
        b
    }

    /// Fraction lost as a percentage (0..=99.6).
    pub fn fraction_lost_pct(&self) -> f64 {
        f64::from(self.fraction_lost) * 100.0 / 256.0
    }

    /// Round-trip time (µs) seen by the source this block reports on, when
    /// the block arrives at `arrival_ntp` (the source's own NTP clock): see
    /// [`rtt_us`].
    pub fn rtt_us(&self, arrival_ntp: u64) -> Option<u64> {
        rtt_us(ntp_mid32(arrival_ntp), self.lsr, self.dlsr)
    }
}

/// Seconds from the NTP epoch (1900) to the Unix epoch (1970).
pub const NTP_UNIX_OFFSET_S: u64 = 2_208_988_800;

/// 64-bit NTP timestamp for a Unix time in µs.
pub fn ntp_from_unix_us(unix_us: u64) -> u64 {
    let secs = unix_us / 1_000_000 + NTP_UNIX_OFFSET_S;
    let frac = ((unix_us % 1_000_000) << 32) / 1_000_000;
    (secs << 32) | frac
}

/// Middle 32 bits of an NTP timestamp (the "compact" form LSR carries).
pub fn ntp_mid32(ntp: u64) -> u32 {
    (ntp >> 16) as u32
}

/// A duration in µs as 1/65536 s units (DLSR), saturating.
pub fn us_to_compact(us: u64) -> u32 {
    u32::try_from((u128::from(us) << 16) / 1_000_000).unwrap_or(u32::MAX)
}

/// 1/65536 s units to µs.
pub fn compact_to_us(units: u32) -> u64 {
    ((u128::from(units) * 1_000_000) >> 16) as u64
}

/// Round-trip time (µs) from a report block (section 6.4.1): `A - LSR -
/// DLSR`, all in 1/65536 s, where A is the middle 32 bits of the NTP time the
/// report arrived at the SR's sender. `None` when no SR was seen (LSR 0) or
/// when the result would be negative (clock mismatch, forged or stale block).
/// Modulo 2^32 (wraps every 18.2 h of the compact clock).
pub fn rtt_us(arrival_mid32: u32, lsr: u32, dlsr: u32) -> Option<u64> {
    if lsr == 0 {
        return None;
    }
    let rtt = arrival_mid32.wrapping_sub(lsr).wrapping_sub(dlsr);
    // More than half the compact clock means A < LSR + DLSR.
    if rtt > u32::MAX / 2 {
        return None;
    }
    Some(compact_to_us(rtt))
}

/// Deterministic RTCP transmission interval (appendix A.7) in seconds,
/// before randomisation: `members` and `senders` in the session, the RTCP
/// bandwidth (octets/s; RFC 3550: 5 % of the session bandwidth), whether we
/// sent data since the last report, the average compound size (octets,
/// including UDP/IP headers), whether no report was sent yet, and the
/// minimum interval (5 s in RFC 3550; halved for the first report).
pub fn deterministic_interval(
    members: u32,
    senders: u32,
    rtcp_bw: f64,
    we_sent: bool,
    avg_rtcp_size: f64,
    initial: bool,
    tmin_s: f64,
) -> f64 {
    const SENDER_FRACTION: f64 = 0.25;
    const RECEIVER_FRACTION: f64 = 1.0 - SENDER_FRACTION;
    let tmin = if initial { tmin_s / 2.0 } else { tmin_s };
    let mut n = f64::from(members.max(1));
    let mut bw = if rtcp_bw.is_finite() && rtcp_bw > 0.0 {
        rtcp_bw
    } else {
        1.0
    };
    if senders > 0 && f64::from(senders) <= f64::from(members) * SENDER_FRACTION {
        if we_sent {
            bw *= SENDER_FRACTION;
            n = f64::from(senders);
        } else {
            bw *= RECEIVER_FRACTION;
            n -= f64::from(senders);
        }
    }
    let size = if avg_rtcp_size.is_finite() {
        avg_rtcp_size.max(0.0)
    } else {
        0.0
    };
    (size * n / bw).max(tmin)
}

/// Randomise a deterministic interval (appendix A.7): uniformly in
/// [0.5, 1.5] times it (`u` in [0, 1) from the caller's generator), divided by
/// e - 3/2 to compensate for timer reconsideration.
pub fn randomized_interval(deterministic_s: f64, u: f64) -> f64 {
    const COMPENSATION: f64 = std::f64::consts::E - 1.5;
    let u = if u.is_finite() {
        u.clamp(0.0, 1.0)
    } else {
        0.5
    };
    deterministic_s * (u + 0.5) / COMPENSATION
}

#[cfg(test)]
mod tests;
