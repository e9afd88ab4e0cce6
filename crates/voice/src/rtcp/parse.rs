//! Strict parser of compound RTCP packets: validate everything first, then
//! hand out borrowed views that cannot fail.
//!
//! Owns: reading bytes. Must not touch: writing ([`super::write`]), state.

use super::{
    ReportBlock, RtcpError, SenderInfo, MAX_COUNT, PT_APP, PT_BYE, PT_RR, PT_SDES, PT_SR,
    REPORT_BLOCK_LEN, SDES_CNAME,
};

/// A validated compound packet (borrowed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compound<'a> {
    buf: &'a [u8],
    packets: usize,
}

/// One packet of a compound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packet<'a> {
    /// SR: the sender's SSRC, its sender info, report blocks.
    SenderReport {
        /// Sender's SSRC.
        ssrc: u32,
        /// NTP/RTP timestamps and counts.
        info: SenderInfo,
        /// Reception report blocks.
        blocks: ReportBlocks<'a>,
    },
    /// RR: the reporter's SSRC and report blocks.
    ReceiverReport {
        /// Reporter's SSRC.
        ssrc: u32,
        /// Reception report blocks.
        blocks: ReportBlocks<'a>,
    },
    /// SDES chunks.
    Sdes(SdesChunks<'a>),
    /// BYE: the sources leaving, and the reason if any.
    Bye {
        /// SSRC/CSRCs leaving.
        sources: Sources<'a>,
        /// Reason for leaving (UTF-8 by the RFC, not checked).
        reason: Option<&'a [u8]>,
    },
    /// APP: subtype, SSRC, 4-character name, data.
    App {
        /// Subtype (the 5-bit count field).
        subtype: u8,
        /// SSRC/CSRC.
        ssrc: u32,
        /// Name (ASCII by the RFC, not checked).
        name: [u8; 4],
        /// Application data.
        data: &'a [u8],
    },
    /// Any other packet type, skipped by its length (body after the header).
    Other {
        /// Packet type.
        packet_type: u8,
        /// The 5-bit count field.
        count: u8,
        /// Body (padding removed).
        body: &'a [u8],
    },
}

/// Report blocks of a SR/RR (validated: whole 24-byte blocks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportBlocks<'a>(&'a [u8]);

impl<'a> ReportBlocks<'a> {
    /// Number of blocks.
    pub fn len(&self) -> usize {
        self.0.len() / REPORT_BLOCK_LEN
    }
    /// No blocks.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'a> Iterator for ReportBlocks<'a> {
    type Item = ReportBlock;
    fn next(&mut self) -> Option<ReportBlock> {
        let (head, rest) = self.0.split_first_chunk::<REPORT_BLOCK_LEN>()?;
        self.0 = rest;
        Some(ReportBlock::from_bytes(head))
    }
}

/// SSRCs listed in a BYE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sources<'a>(&'a [u8]);

impl<'a> Iterator for Sources<'a> {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        let (head, rest) = self.0.split_first_chunk::<4>()?;
        self.0 = rest;
        Some(u32::from_be_bytes(*head))
    }
}

/// Chunks of a SDES packet (validated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SdesChunks<'a> {
    rest: &'a [u8],
    left: usize,
}

/// One SDES chunk: a source and its items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SdesChunk<'a> {
    /// SSRC/CSRC described.
    pub ssrc: u32,
    /// Its items.
    pub items: SdesItems<'a>,
}

/// Items of one chunk: (type, text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SdesItems<'a>(&'a [u8]);

impl<'a> Iterator for SdesItems<'a> {
    type Item = (u8, &'a [u8]);
    fn next(&mut self) -> Option<(u8, &'a [u8])> {
        let (&ty, rest) = self.0.split_first()?;
        if ty == 0 {
            return None;
        }
        let (&len, rest) = rest.split_first()?;
        let text = rest.get(..usize::from(len))?;
        self.0 = &rest[usize::from(len)..];
        Some((ty, text))
    }
}

impl<'a> SdesItems<'a> {
    /// The CNAME item, if any.
    pub fn cname(self) -> Option<&'a [u8]> {
        self.into_iter()
            .find(|(t, _)| *t == SDES_CNAME)
            .map(|(_, v)| v)
    }
}

/// Walk one chunk: returns (items, chunk length including the null
/// terminator and padding to 32 bits), or `BadSdes`.
fn sdes_chunk(buf: &[u8]) -> Result<(u32, SdesItems<'_>, usize, bool), RtcpError> {
    let ssrc = buf
        .first_chunk::<4>()
        .map(|b| u32::from_be_bytes(*b))
        .ok_or(RtcpError::BadSdes)?;
    let mut off = 4;
    let mut cname = false;
    loop {
        let ty = *buf.get(off).ok_or(RtcpError::BadSdes)?;
        if ty == 0 {
            // Terminator, then nulls up to the next 32-bit boundary.
            let end = (off + 1).next_multiple_of(4);
            let pad = buf.get(off + 1..end).ok_or(RtcpError::BadSdes)?;
            if pad.iter().any(|&b| b != 0) {
                return Err(RtcpError::BadSdes);
            }
            return Ok((ssrc, SdesItems(&buf[4..off + 1]), end, cname));
        }
        let len = usize::from(*buf.get(off + 1).ok_or(RtcpError::BadSdes)?);
        if buf.len() < off + 2 + len {
            return Err(RtcpError::BadSdes);
        }
        cname |= ty == SDES_CNAME;
        off += 2 + len;
    }
}

impl<'a> Iterator for SdesChunks<'a> {
    type Item = SdesChunk<'a>;
    fn next(&mut self) -> Option<SdesChunk<'a>> {
        if self.left == 0 {
            return None;
        }
        let (ssrc, items, len, _) = sdes_chunk(self.rest).ok()?;
        self.rest = self.rest.get(len..)?;
        self.left -= 1;
        Some(SdesChunk { ssrc, items })
    }
}

/// One packet's header fields and body (padding removed), and where the
/// next packet starts.
struct Raw<'a> {
    count: u8,
    packet_type: u8,
    body: &'a [u8],
    next: usize,
}

fn split(buf: &[u8], off: usize) -> Result<Raw<'_>, RtcpError> {
    let h = buf.get(off..off + 4).ok_or(RtcpError::Truncated)?;
    if h[0] >> 6 != 2 {
        return Err(RtcpError::BadVersion);
    }
    let padding = h[0] & 0x20 != 0;
    let count = h[0] & 0x1f;
    let packet_type = h[1];
    let len = (usize::from(u16::from_be_bytes([h[2], h[3]])) + 1) * 4;
    let whole = buf.get(off..off + len).ok_or(RtcpError::LengthPastEnd)?;
    let next = off + len;
    let mut body = &whole[4..];
    if padding {
        if next != buf.len() {
            return Err(RtcpError::PaddingNotLast);
        }
        let pad = usize::from(*body.last().ok_or(RtcpError::BadPadding)?);
        if pad == 0 || pad > body.len() {
            return Err(RtcpError::BadPadding);
        }
        body = &body[..body.len() - pad];
    }
    Ok(Raw {
        count,
        packet_type,
        body,
        next,
    })
}

fn be32(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(x) => u32::from_be_bytes([x[0], x[1], x[2], x[3]]),
        None => 0,
    }
}

/// Check one packet's body against its type; true if it carries a CNAME.
fn validate(raw: &Raw<'_>) -> Result<bool, RtcpError> {
    let n = usize::from(raw.count);
    let b = raw.body;
    match raw.packet_type {
        // SSRC + 20 bytes sender info + blocks (+ profile extension).
        PT_SR if b.len() < 24 + n * REPORT_BLOCK_LEN => Err(RtcpError::BadReportCount),
        PT_RR if b.len() < 4 + n * REPORT_BLOCK_LEN => Err(RtcpError::BadReportCount),
        PT_SDES => {
            let mut off = 0;
            let mut cname = false;
            for _ in 0..n {
                let (_, _, len, c) = sdes_chunk(b.get(off..).ok_or(RtcpError::BadSdes)?)?;
                cname |= c;
                off += len;
            }
            if off != b.len() {
                return Err(RtcpError::BadSdes);
            }
            Ok(cname)
        }
        PT_BYE => {
            let end = n * 4;
            match b.get(end) {
                _ if b.len() < end => Err(RtcpError::BadBye),
                Some(&len) if b.len() < end + 1 + usize::from(len) => Err(RtcpError::BadBye),
                _ => Ok(false),
            }
        }
        PT_APP if b.len() < 8 => Err(RtcpError::BadApp),
        _ => Ok(false),
    }
}

/// Parse and validate a compound RTCP packet (see the module docs for the
/// rules). Nothing is returned unless the whole datagram is valid.
pub fn parse_compound(buf: &[u8]) -> Result<Compound<'_>, RtcpError> {
    if buf.is_empty() {
        return Err(RtcpError::Truncated);
    }
    let mut off = 0;
    let mut packets = 0;
    let mut cname = false;
    while off < buf.len() {
        let raw = split(buf, off)?;
        if packets == 0 && raw.packet_type != PT_SR && raw.packet_type != PT_RR {
            return Err(RtcpError::FirstNotReport);
        }
        cname |= validate(&raw)?;
        packets += 1;
        off = raw.next;
    }
    if !cname {
        return Err(RtcpError::NoCname);
    }
    Ok(Compound { buf, packets })
}

impl<'a> Compound<'a> {
    /// Number of packets.
    pub fn len(&self) -> usize {
        self.packets
    }

    /// Never empty once parsed (at least a report and a SDES).
    pub fn is_empty(&self) -> bool {
        self.packets == 0
    }

    /// The packets in order.
    pub fn packets(&self) -> impl Iterator<Item = Packet<'a>> + 'a {
        let buf = self.buf;
        let mut off = 0;
        std::iter::from_fn(move || {
            let raw = split(buf, off).ok()?;
            off = raw.next;
            Some(view(&raw))
        })
    }

    /// The CNAME of `ssrc`, if a SDES chunk gives one.
    pub fn cname_of(&self, ssrc: u32) -> Option<&'a [u8]> {
        self.packets().find_map(|p| match p {
            Packet::Sdes(chunks) => chunks
                .into_iter()
                .find(|c| c.ssrc == ssrc)
                .and_then(|c| c.items.cname()),
            _ => None,
        })
    }
}

/// View of a validated packet.
fn view<'a>(raw: &Raw<'a>) -> Packet<'a> {
    let b = raw.body;
    let n = usize::from(raw.count).min(MAX_COUNT);
    let blocks =
        |from: usize| ReportBlocks(b.get(from..from + n * REPORT_BLOCK_LEN).unwrap_or(&[]));
    match raw.packet_type {
        PT_SR => Packet::SenderReport {
            ssrc: be32(b, 0),
            info: SenderInfo {
                ntp: (u64::from(be32(b, 4)) << 32) | u64::from(be32(b, 8)),
                rtp_ts: be32(b, 12),
                packets: be32(b, 16),
                octets: be32(b, 20),
            },
            blocks: blocks(24),
        },
        PT_RR => Packet::ReceiverReport {
            ssrc: be32(b, 0),
            blocks: blocks(4),
        },
        PT_SDES => Packet::Sdes(SdesChunks { rest: b, left: n }),
        PT_BYE => {
            let end = (n * 4).min(b.len());
            let reason = b
                .get(end)
                .and_then(|&len| b.get(end + 1..end + 1 + usize::from(len)));
            Packet::Bye {
                sources: Sources(&b[..end]),
                reason,
            }
        }
        PT_APP => Packet::App {
            subtype: raw.count,
            ssrc: be32(b, 0),
            name: be32(b, 4).to_be_bytes(),
            data: b.get(8..).unwrap_or(&[]),
        },
        t => Packet::Other {
            packet_type: t,
            count: raw.count,
            body: b,
        },
    }
}
